#!/bin/sh
# SPDX-License-Identifier: MIT
# Build the libFuzzer harnesses of tests/fuzz with clang (ASan + UBSan) in a
# temp dir, outside automake, and run each for SECONDS (default 60) on a
# copy of its committed seed corpus. Fails on any crash, leak or sanitizer
# report; prints executions per harness. Usage: run.sh [SECONDS] [HARNESS...]
set -eu
secs=${1:-60}
[ $# -gt 0 ] && shift
top=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CLANG:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
	echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev)" >&2
	exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/coffer-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# the sources include <config.h> for _GNU_SOURCE and the package version:
# a stand-in for autoconf's, found through -I$work (no folder of the tree
# has a config.h of its own)
cat >"$work/config.h" <<'H'
#define _GNU_SOURCE 1
#define PACKAGE "coffer"
#define PACKAGE_VERSION "fuzz"
#define PACKAGE_STRING "coffer fuzz"
#define VERSION "fuzz"
H
CFLAGS="-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
	-include $work/config.h -I$work -I$top/common -I$top/libstore -I$top/daemon -I$top/client
	$(pkg-config --cflags jansson libuv 2>/dev/null) -pthread"
# the shared rules (sizes, names, error texts, typos, hex), which proto.c, conf.c
# and bench_parse.c call
RULES="$top/common/size.c $top/common/name.c $top/common/errors.c $top/common/typo.c $top/common/hex.c"
STORE="$(ls "$top"/libstore/*/*.c | grep -v crypt_ipsecmb) $top/common/lun_path.c $top/common/prop_names.c $top/common/resume_token.c $top/common/heap.c $RULES"

build() {
	name=$1
	shift
	# shellcheck disable=SC2086
	$CC $CFLAGS -o "$work/$name" "$top/tests/fuzz/$name.c" "$@" 2>"$work/$name.build" ||
		{ cat "$work/$name.build" >&2; echo "fuzz: build of $name failed" >&2; exit 1; }
}

harnesses=${*:-"fuzz_proto fuzz_config fuzz_bench_parse fuzz_handlers fuzz_nbd fuzz_stream"}
for h in $harnesses; do
	case $h in
	# shellcheck disable=SC2086
	fuzz_proto) build "$h" "$top/common/proto.c" $RULES -ljansson ;;
	# shellcheck disable=SC2086
	fuzz_nbd) build "$h" "$top/daemon/nbd_proto.c" "$top/common/proto.c" "$top/daemon/tls.c" \
		$RULES -lssl -lcrypto ;;
	# shellcheck disable=SC2086
	fuzz_config) build "$h" "$top/daemon/conf.c" "$top/common/sockpath.c" "$top/daemon/log.c" \
		$RULES -linih ;;
	# shellcheck disable=SC2086
	fuzz_bench_parse) build "$h" "$top/client/bench_parse.c" $RULES -lm ;;
	fuzz_handlers)
		# shellcheck disable=SC2086
		build "$h" "$top/daemon/dispatch.c" "$top/daemon/handlers.c" "$top/daemon/sendrecv.c" \
			"$top/daemon/registry.c" "$top/daemon/loops.c" "$top/daemon/plainbuf.c" "$top/daemon/roots.c" "$top/daemon/events.c" "$top/daemon/metrics.c" \
			"$top/daemon/work.c" "$top/daemon/conf.c" "$top/common/sockpath.c" "$top/daemon/log.c" \
			"$top/common/proto.c" $STORE $(pkg-config --libs libuv 2>/dev/null || echo -luv) \
			-ljansson -linih -lcrypto -llmdb -lzstd -lxxhash -luring ;;
	fuzz_stream)
		# shellcheck disable=SC2086
		build "$h" $STORE -lcrypto -llmdb -lzstd -lxxhash -luring ;;
	*) echo "fuzz: unknown harness $h" >&2; exit 2 ;;
	esac
done

fail=0
for h in $harnesses; do
	corpus="$work/$h.corpus"
	# under CI a fixed seed: a finding must be reproducible to gate a merge;
	# by hand (FUZZ_SEED unset, CI unset) libFuzzer picks one per run
	seed=
	if [ -n "${FUZZ_SEED:-}" ]; then
		seed=-seed=$FUZZ_SEED
	elif [ "${CI:-}" = true ]; then
		seed=-seed=1
	fi
	mkdir -p "$corpus"
	cp "$top/tests/fuzz/corpus/$h"/* "$corpus"/ 2>/dev/null || true
	dict=
	[ -f "$top/tests/fuzz/$h.dict" ] && dict="-dict=$top/tests/fuzz/$h.dict"
	# shellcheck disable=SC2086
	# TMPDIR: the temp files and pools of the harnesses go with $work; timeout:
	# libFuzzer's own -timeout does not cover a hang in LLVMFuzzerInitialize
	if (cd "$work" && TMPDIR=$work ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		timeout -k 10 $((secs * 2 + 120)) ./"$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 $seed \
		-print_final_stats=1 $dict "$corpus" >"$work/$h.log" 2>&1); then
		execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$h.log")
		echo "fuzz: $h: ${execs:-?} executions in ${secs}s, no crash"
	else
		fail=1
		echo "fuzz: $h: FAILED" >&2
		grep -E -A30 'ERROR|runtime error|deadly signal' "$work/$h.log" | head -60 >&2
		for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
			[ -f "$a" ] || continue
			keep="${TMPDIR:-/tmp}/$h-$(basename "$a")"
			cp "$a" "$keep"
			echo "fuzz: reproducer kept in $keep" >&2
		done
	fi
done
exit $fail
