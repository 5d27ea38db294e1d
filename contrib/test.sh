#!/bin/sh
# SPDX-License-Identifier: MIT
# The README's test command: install what is missing (the build and the test
# packages), build with ASan and UBSan, run every test; then a plain build
# passes make distcheck.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh contrib/deps.sh --test
./autogen.sh >/dev/null 2>&1 || ./autogen.sh
jobs=$(nproc 2>/dev/null || echo 2)

# The logs of the tests that failed under $1: their failed assertions, then their ends.
failed_logs() {
	for f in $(find "$1" -name '*.log' ! -name config.log ! -name test-suite.log); do
		grep -q -E '^:test-result: (FAIL|ERROR)' "${f%.log}.trs" 2>/dev/null || continue
		echo "==== $f: the failed assertions, then the log's end"
		grep -E -A4 'Assertion Failed|\[FAIL\]|CRASH|ERROR: AddressSanitizer|runtime error' "$f" | head -n 80
		tail -n 60 "$f"
	done
}

rm -rf build-test && mkdir build-test && cd build-test
../configure --enable-asan --enable-ubsan --enable-werror >configure.out || { cat configure.out; exit 1; }
make -j"$jobs"
if ! make -j"$jobs" check; then
	failed_logs .
	exit 1
fi
cat tests/unit/*.log tests/e2e/*.log 2>/dev/null | grep -E '^\[====\] Synthesis' || true
cd "$top"

# a short libFuzzer run of every harness, where clang can build them
if command -v clang >/dev/null 2>&1; then
	sh tests/fuzz/run.sh "${COFFER_FUZZ_SECONDS:-20}"
fi

if [ "${COFFER_SKIP_DISTCHECK:-0}" != 1 ]; then
	rm -rf build-dist && mkdir build-dist && cd build-dist
	../configure >/dev/null
	if ! make -j"$jobs" distcheck >distcheck.out 2>&1; then
		tail -n 80 distcheck.out
		failed_logs .
		exit 1
	fi
	grep -E 'archives ready|\.tar\.gz' distcheck.out | head -n 3
fi
echo "test.sh: all tests passed"
