#!/bin/sh
# SPDX-License-Identifier: MIT
# Many datasets: creates N sparse volumes in one pool, timing each
# `coffer create` (the mean of all, of the first and of the last 1000),
# then times `coffer list` of all of them, `coffer get all` of one,
# `coffer list -o name,volsize -s volsize`, and a restart of the daemon
# (SIGTERM, start, until it answers), each the median of ROUNDS runs, in
# milliseconds. On a shared machine wall times follow its load, so the
# daemon's CPU time per create and per list is printed too. One CSV line:
# n,create_ms,create_first_ms,create_last_ms,create_cpu_ms,list_ms,
# list_cpu_ms,get_ms,list_sorted_ms,restart_ms.
#
# Usage: scale.sh [N] [ROUNDS]   (default 10000, 5)
# Environment: COFFERD, COFFER (a plain build measures the code, not ASan)
set -eu
n=${1:-10000}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
. "$here/daemon.sh"
daemon_init scale
daemon_conf "txg_timeout = 5"
daemon_start detect_leaks=0
"$COFFER" pool create -s 256M sc "$dir/l0" >/dev/null

now_ns() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e6 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }

# the daemon's user + system time in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
: >"$dir/create.ms"
c0=$(cpu_ticks)
i=1
while [ "$i" -le "$n" ]; do
	t0=$(now_ns)
	"$COFFER" create -s -V 1M "sc/v$i" >/dev/null
	t1=$(now_ns)
	ms "$t0" "$t1" >>"$dir/create.ms"
	echo >>"$dir/create.ms"
	i=$((i + 1))
done
c1=$(cpu_ticks)
create_cpu=$(awk -v t=$((c1 - c0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.3f", t * 1000 / hz / n }')
create=$(awk '{ s += $1 } END { printf "%.3f", s / NR }' "$dir/create.ms")
first=$(head -n 1000 "$dir/create.ms" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
last=$(tail -n 1000 "$dir/create.ms" | awk '{ s += $1 } END { printf "%.3f", s / NR }')

# timed ROUNDS times: the median in ms
timed() {
	: >"$dir/t.ms"
	for r in $(seq 1 "$rounds"); do
		t0=$(now_ns)
		"$@" >/dev/null
		t1=$(now_ns)
		ms "$t0" "$t1" >>"$dir/t.ms"
		echo >>"$dir/t.ms"
	done
	median <"$dir/t.ms"
}
rows=$("$COFFER" list -H -o name | wc -l)
[ "$rows" -eq $((n + 1)) ] || { echo "scale: list has $rows rows, not $((n + 1))" >&2; exit 1; }
c0=$(cpu_ticks)
list=$(timed "$COFFER" list)
c1=$(cpu_ticks)
list_cpu=$(awk -v t=$((c1 - c0)) -v hz="$hz" -v r="$rounds" 'BEGIN { printf "%.1f", t * 1000 / hz / r }')
get=$(timed "$COFFER" get all "sc/v$n")
# a coffer without list -s (an older build measured for comparison) prints "-"
sorted=$(timed "$COFFER" list -o name,volsize -s volsize 2>/dev/null) || sorted=-

# not in a subshell: the daemon is this shell's child
: >"$dir/restart.ms"
for r in $(seq 1 "$rounds"); do
	t0=$(now_ns)
	kill -TERM "$pid"
	wait "$pid" || { failed=1; echo "scale: cofferd did not stop cleanly" >&2; exit 1; }
	pid=
	daemon_start detect_leaks=0
	t1=$(now_ns)
	ms "$t0" "$t1" >>"$dir/restart.ms"
	echo >>"$dir/restart.ms"
done
restart=$(median <"$dir/restart.ms")
echo "n,create_ms,create_first_ms,create_last_ms,create_cpu_ms,list_ms,list_cpu_ms,get_ms,list_sorted_ms,restart_ms"
echo "$n,$create,$first,$last,$create_cpu,$list,$list_cpu,$get,$sorted,$restart"
