#!/bin/sh
# SPDX-License-Identifier: MIT
# Many datasets: creates N sparse volumes in one pool, timing each
# `coffer create` (the median and the mean of all, the mean of the first and
# of the last 1000),
# then times `coffer list` of all of them, `coffer get all` of one,
# `coffer list -o name,volsize -s volsize`, and a restart of the daemon
# (SIGTERM, start, until it answers), each the median of ROUNDS runs, in
# milliseconds, and the daemon's RssAnon after the last restart (MiB: all
# of them imported). On a shared machine wall times follow its load, so the
# CPU time (user + system) per create and per list is printed too: the
# daemon's (summed over its threads, in nanoseconds from schedstat) and
# coffer's (from times, over 200 more creates and over ROUNDS lists, apart
# from the timed runs). One CSV line:
# n,create_ms,create_first_ms,create_last_ms,create_cpu_ms,list_ms,
# list_cpu_ms,get_ms,list_sorted_ms,restart_ms,create_client_cpu_ms,
# list_client_cpu_ms,create_median_ms,rss_anon_mib.
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

# the daemon's CPU time so far in ns, summed over its threads
cpu_ns() { cat /proc/"$pid"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }
# per_ms NS0 NS1 COUNT: the ms per one of COUNT between two cpu_ns
per_ms() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.3f", (b - a) / 1e6 / n }'; }
# times_ms K: from the two lines of a shell's `times`, its children's user
# + system time in ms per each of the K runs it made
times_ms() {
	awk -v k="$1" 'NR == 2 { split($1, u, "m"); split($2, s, "m")
		printf "%.3f", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1000 / k }'
}
: >"$dir/create.ms"
c0=$(cpu_ns)
i=1
while [ "$i" -le "$n" ]; do
	t0=$(now_ns)
	"$COFFER" create -s -V 1M "sc/v$i" >/dev/null
	t1=$(now_ns)
	ms "$t0" "$t1" >>"$dir/create.ms"
	echo >>"$dir/create.ms"
	i=$((i + 1))
done
c1=$(cpu_ns)
create_cpu=$(per_ms "$c0" "$c1" "$n")
create=$(awk '{ s += $1 } END { printf "%.3f", s / NR }' "$dir/create.ms")
create_median=$(grep . "$dir/create.ms" | median)
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
c0=$(cpu_ns)
list=$(timed "$COFFER" list)
c1=$(cpu_ns)
list_cpu=$(per_ms "$c0" "$c1" "$rounds")
list_client=$(sh -c 'i=0; while [ $i -lt "$1" ]; do "$2" list >/dev/null; i=$((i + 1)); done
	times' sh "$rounds" "$COFFER" | times_ms "$rounds")
get=$(timed "$COFFER" get all "sc/v$n")
# a coffer without list -s (an older build measured for comparison) prints "-"
sorted=$(timed "$COFFER" list -o name,volsize -s volsize 2>/dev/null) || sorted=-
create_client=$(sh -c 'i=0; while [ $i -lt 200 ]; do "$1" create -s -V 1M "sc/c$i" >/dev/null
	i=$((i + 1)); done; times' sh "$COFFER" | times_ms 200)

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
rss=$(awk '/^RssAnon:/ { printf "%.1f", $2 / 1024 }' /proc/"$pid"/status)
echo "n,create_ms,create_first_ms,create_last_ms,create_cpu_ms,list_ms,list_cpu_ms,get_ms,list_sorted_ms,restart_ms,create_client_cpu_ms,list_client_cpu_ms,create_median_ms,rss_anon_mib"
echo "$n,$create,$first,$last,$create_cpu,$list,$list_cpu,$get,$sorted,$restart,$create_client,$list_client,$create_median,$rss"
