#!/bin/sh
# SPDX-License-Identifier: MIT
# Many datasets and snapshots in one pool (the Scale figures):
# - N sparse volumes created by scale_admin over one connection: the
#   daemon's latency per create (median, 99th percentile, the mean of the
#   first and of the last 1000), with no process start in it, and its CPU
#   per create (summed over its threads, from schedstat); then 200 more by
#   `coffer create`, their mean wall time and client CPU, a process start
#   each (3-4 ms on a small VM);
# - with SNAPS=D,PER: D volumes more, each given PER snapshots with an
#   8 KiB write before each (scale_admin snapshots): the latency per
#   snapshot the same way;
# - `coffer list` of all, `list -t snapshot`, `get all` of one, and
#   `list -o name,volsize -s volsize`, each the median of ROUNDS runs in
#   ms, with the CPU per list of the daemon and of coffer;
# - a restart (SIGTERM, start, until it answers: the import of them all),
#   the median of ROUNDS, and the daemon's RssAnon after the last (MiB).
# One CSV line:
# n,create_median_ms,create_p99_ms,create_first_ms,create_last_ms,
# create_cpu_ms,create_proc_ms,create_client_cpu_ms,snapshots,
# snap_median_ms,snap_p99_ms,snap_first_ms,snap_last_ms,list_ms,
# list_cpu_ms,list_client_cpu_ms,list_snap_ms,get_ms,list_sorted_ms,
# restart_ms,rss_anon_mib.
#
# Usage: [SNAPS=D,PER] [POOL_SIZE=4G] scale.sh [N] [ROUNDS]   (default 10000, 5)
#        (the snapshots keep D x PER records of 8 KiB: SNAPS=1000,1000
#        needs POOL_SIZE=12G, or the pool fills halfway)
#        scale.sh records N...   pools of N records: scale_records.sh
# Environment: COFFERD, COFFER, SCALE_ADMIN (beside them in a build tree;
# a plain build measures the code, not ASan), TMPDIR (the LUN file)
set -eu
if [ "${1:-}" = records ]; then
	shift
	exec "$(dirname "$0")/scale_records.sh" "$@"
fi
n=${1:-10000}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
SCALE_ADMIN=${SCALE_ADMIN:-$(dirname "$COFFERD")/../contrib/bench/scale_admin}
. "$here/daemon.sh"
START_WAIT=${START_WAIT:-300} # the restarts are what is measured
daemon_init scale
daemon_conf "txg_timeout = 5"
daemon_start detect_leaks=0
"$COFFER" pool create -s "${POOL_SIZE:-4G}" sc "$dir/l0" >/dev/null

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
# the daemon's latency per create, over one connection: no process start in it
c0=$(cpu_ns)
"$SCALE_ADMIN" datasets sc "$n" >"$dir/create.txt"
c1=$(cpu_ns)
create_cpu=$(per_ms "$c0" "$c1" "$n")
# create N median_ms M p99_ms P first1000_ms F last1000_ms L
read -r _ _ _ create_median _ create_p99 _ first _ last <"$dir/create.txt"
snaps=0 snap_median=- snap_p99=- snap_first=- snap_last=-
if [ -n "${SNAPS:-}" ]; then
	d=${SNAPS%,*} per=${SNAPS#*,}
	snaps=$((d * per))
	"$SCALE_ADMIN" snapshots sc "$d" "$per" >"$dir/snap.txt"
	read -r _ _ _ snap_median _ snap_p99 _ snap_first _ snap_last <"$dir/snap.txt"
fi

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
want=$((n + 1 + ${d:-0}))
[ "$rows" -eq "$want" ] || { echo "scale: list has $rows rows, not $want" >&2; exit 1; }
list_snap=$(timed "$COFFER" list -t snapshot)
c0=$(cpu_ns)
list=$(timed "$COFFER" list)
c1=$(cpu_ns)
list_cpu=$(per_ms "$c0" "$c1" "$rounds")
list_client=$(sh -c 'i=0; while [ $i -lt "$1" ]; do "$2" list >/dev/null; i=$((i + 1)); done
	times' sh "$rounds" "$COFFER" | times_ms "$rounds")
get=$(timed "$COFFER" get all "sc/v$n")
# a coffer without list -s (an older build measured for comparison) prints "-"
sorted=$(timed "$COFFER" list -o name,volsize -s volsize 2>/dev/null) || sorted=-
t0=$(now_ns)
create_client=$(sh -c 'i=0; while [ $i -lt 200 ]; do "$1" create -s -V 1M "sc/c$i" >/dev/null
	i=$((i + 1)); done; times' sh "$COFFER" | times_ms 200)
create_proc=$(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN { printf "%.3f", (b - a) / 1e6 / 200 }')

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
echo "n,create_median_ms,create_p99_ms,create_first_ms,create_last_ms,create_cpu_ms,create_proc_ms,create_client_cpu_ms,snapshots,snap_median_ms,snap_p99_ms,snap_first_ms,snap_last_ms,list_ms,list_cpu_ms,list_client_cpu_ms,list_snap_ms,get_ms,list_sorted_ms,restart_ms,rss_anon_mib"
echo "$n,$create_median,$create_p99,$first,$last,$create_cpu,$create_proc,$create_client,$snaps,$snap_median,$snap_p99,$snap_first,$snap_last,$list,$list_cpu,$list_client,$list_snap,$get,$sorted,$restart,$rss"
