#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The share of cofferd's CPU that the block pointer MACs take (bpmac.c),
# under 8 KiB random reads and writes of encrypted datasets.
#
# Comparing IOPS with and without a few percent of work is hopeless on a
# shared VM (two builds of the same data path differ by 10% between
# slices), so this counts where the daemon's cycles go instead: perf with
# DWARF call graphs, the inclusive share of the MAC entry points of the
# data path: bpmac_check_group (a read's first look at its group),
# bpmac_leaf_xor (each write's old and new leaf) and bpmac_apply (the
# commit's group and root updates). Pool of two LUN files on tmpfs,
# io_inline, cache off, 8 datasets x 32 MiB filled first, queue depth 2 per
# dataset, --rounds rounds of --secs seconds sampled per op; medians.
#
# usage: macshare.sh --build DIR [--suites LIST] [--rounds N] [--secs S]
# DIR is a build tree holding daemon/cofferd and client/coffer (build it
# without sanitizers); perf must be installed (linux-perf).
set -eu

build= suites="aes-256-ccm aes-256-gcm" rounds=3 secs=4
die() { echo "macshare.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift ;;
	--suites) suites=$(echo "$2" | tr ',' ' '); shift ;;
	--rounds) rounds=$2; shift ;;
	--secs) secs=$2; shift ;;
	-h|--help) sed -n '/^# usage/,/^# without/p' "$0" | sed 's/^# //'; exit 0 ;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
	shift
done
[ -n "$build" ] || die "--build is required (see --help)"
[ -x "$build/daemon/cofferd" ] && [ -x "$build/client/coffer" ] || die "$build: no daemon/cofferd or client/coffer"
command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf)"

work=$(mktemp -d /dev/shm/coffer-macshare.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
c() { "$build/client/coffer" -S "$work/sock" "$@"; }

(umask 077 && head -c 32 /dev/urandom >"$work/key")
cat > "$work/cofferd.conf" <<CONF
[cofferd]
socket = $work/sock
state_dir = $work/state
cache_size = 0
io_inline = yes
log_level = warning
log_target = $work/cofferd.log
CONF
"$build/daemon/cofferd" -f -c "$work/cofferd.conf" &
pid=$!
i=0
until c ping >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -gt 300 ] && die "cofferd did not start; see $work/cofferd.log"
	sleep 0.1
done
c pool create -s 1200M p "$work/l0" "$work/l1" >/dev/null

# the inclusive share (percent) of the MAC entry points in perf data file $1
share() {
	perf report -i "$1" --children --sort symbol --stdio 2>/dev/null |
		awk '$4 ~ /^(bpmac_check_group|bpmac_leaf_xor|bpmac_apply)$/ { sub("%", "", $1); s += $1 }
		     END { printf "%.2f\n", s }'
}
med() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-12s %-6s %10s %s\n' suite op "MAC %" "rounds"
for s in $suites; do
	c create -o encryption="$s" -o keyformat=raw -o keylocation="file://$work/key" \
		-o primarycache=metadata "p/$s" >/dev/null
	for d in 0 1 2 3 4 5 6 7; do
		c create -V 32M -b 8k "p/$s/d$d" >/dev/null
	done
	printf 'sd=sd1,dataset=p/%s/d*,threads=2\nwd=f,sd=sd1,rdpct=0,seekpct=eof,xfersize=1m\nrd=f,wd=f,iorate=max,elapsed=10h,interval=5\n' \
		"$s" > "$work/fill.parm"
	c bench -q "$work/fill.parm" >/dev/null
	for op in read write; do
		rd=100
		[ "$op" = write ] && rd=0
		printf 'sd=sd1,dataset=p/%s/d*,threads=2\nwd=w,sd=sd1,rdpct=%s,seekpct=random,xfersize=8k\nrd=r,wd=w,iorate=max,elapsed=%s,warmup=1,interval=1\n' \
			"$s" "$rd" $((secs + 4)) > "$work/run.parm"
		: > "$work/shares"
		k=1
		while [ $k -le "$rounds" ]; do
			c bench -q "$work/run.parm" >/dev/null &
			bp=$!
			sleep 2
			perf record -q -F 1000 --call-graph dwarf,16384 -p "$pid" -o "$work/perf.data" \
				-- sleep "$secs" >/dev/null 2>&1
			wait $bp
			share "$work/perf.data" >> "$work/shares"
			k=$((k + 1))
		done
		printf '%-12s %-6s %10s %s\n' "$s" "$op" "$(med < "$work/shares")" "$(tr '\n' ' ' < "$work/shares")"
	done
done
