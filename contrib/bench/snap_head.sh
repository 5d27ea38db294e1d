#!/bin/sh
# SPDX-License-Identifier: MIT
# scale.sh's snapshot pass: the head beside many snapshots, and what a
# snapshot's destroy costs.
# - Pools pa and pb, each on a LUN of its own in TMPDIR (/dev/shm: the
#   reads are CPU-bound there), each with D volumes h1..hD of MIB MiB,
#   every record written, then PER rounds of an 8 KiB overwrite at random
#   of each volume (scale_admin heads, the same writes in both); in pa a
#   snapshot of each volume after each round (D x PER snapshots), in pb
#   none.
# - 8 KiB random reads of the heads of a pool, queue depth 2 each (coffer
#   bench), SECS seconds; ROUNDS pairs alternated pa, pb then pb, pa. IOPS
#   medians, and the median of the pairs' ratios pa / pb (the target: at
#   least 0.97).
# - Destroy of a snapshot that holds K records: a volume of 10,000 records
#   written, snapshot @a, K records overwritten, snapshot @b, `coffer
#   destroy vol@a` timed (the command, a process start in it); K = 1 and
#   K = 10,000 alternated ROUNDS times, medians in ms.
# One CSV line:
# snapshots,head_iops_snap,head_iops_none,ratio,destroy_1_ms,destroy_10000_ms
#
# Usage: [SECS=10] snap_head.sh [D] [PER] [MIB] [ROUNDS]   (default 100 1000 8 5)
# Environment: COFFERD, COFFER, SCALE_ADMIN (a plain build), TMPDIR.
set -eu
d=${1:-100}
per=${2:-1000}
mib=${3:-8}
rounds=${4:-5}
secs=${SECS:-10}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
SCALE_ADMIN=${SCALE_ADMIN:-$(dirname "$COFFERD")/../contrib/bench/scale_admin}
TMPDIR=${TMPDIR:-/dev/shm}
export TMPDIR
. "$here/daemon.sh"
START_WAIT=${START_WAIT:-300}
daemon_init snap_head
daemon_conf "txg_timeout = 5"
daemon_start detect_leaks=0
lun_size=$((d * mib * 2 + 1024))M
"$COFFER" pool create -s "$lun_size" pa "$dir/la" >/dev/null
"$COFFER" pool create -s "$lun_size" pb "$dir/lb" >/dev/null
"$SCALE_ADMIN" heads pa "$d" "$per" "$mib" 1 >"$dir/snap.txt"
"$SCALE_ADMIN" heads pb "$d" "$per" "$mib" 0 >/dev/null
snaps=$("$COFFER" list -H -t snapshot -o name | wc -l)

median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }
# read POOL: its heads' 8 KiB random read IOPS over SECS seconds
read_iops() {
	"$COFFER" bench -q --csv "$dir/$1.csv" --datasets "$1/h*" --rw randread --bs 8k --qd 2 \
		--time "$secs" --warmup 2 >/dev/null
	awk -F, '$4 ~ /^avg/ { print $6; exit }' "$dir/$1.csv"
}
: >"$dir/pairs.txt"
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then
		a=$(read_iops pa)
		b=$(read_iops pb)
	else
		b=$(read_iops pb)
		a=$(read_iops pa)
	fi
	echo "$a $b" >>"$dir/pairs.txt"
done
iops_a=$(awk '{ print $1 }' "$dir/pairs.txt" | median)
iops_b=$(awk '{ print $2 }' "$dir/pairs.txt" | median)
ratio=$(awk '$2 > 0 { print $1 / $2 }' "$dir/pairs.txt" | median)

now_ns() { date +%s%N; }
# destroy_ms K: the ms of destroying a snapshot that alone holds K records
destroy_ms() {
	"$COFFER" create -V 80M pa/dx >/dev/null
	head -c $((10000 * 8192)) /dev/urandom | "$COFFER" write pa/dx >/dev/null
	"$COFFER" snapshot pa/dx@a >/dev/null
	head -c $(($1 * 8192)) /dev/urandom | "$COFFER" write pa/dx >/dev/null
	"$COFFER" snapshot pa/dx@b >/dev/null
	"$COFFER" flush pa/dx >/dev/null
	t0=$(now_ns)
	"$COFFER" destroy pa/dx@a >/dev/null
	t1=$(now_ns)
	"$COFFER" destroy -r pa/dx >/dev/null
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e6 }'
}
: >"$dir/d1.ms"
: >"$dir/d10000.ms"
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then
		destroy_ms 1 >>"$dir/d1.ms"
		destroy_ms 10000 >>"$dir/d10000.ms"
	else
		destroy_ms 10000 >>"$dir/d10000.ms"
		destroy_ms 1 >>"$dir/d1.ms"
	fi
done
echo "snapshots,head_iops_snap,head_iops_none,ratio,destroy_1_ms,destroy_10000_ms"
echo "$snaps,$iops_a,$iops_b,$ratio,$(median <"$dir/d1.ms"),$(median <"$dir/d10000.ms")"
