#!/bin/sh
# SPDX-License-Identifier: MIT
# scale.sh's RADOS pass, on the single-node cluster of the tests
# (tests/e2e/ceph_cluster.sh: one memstore OSD):
# - the Ceph pool is given OBJECTS unrelated objects (rados bench, 16 bytes
#   each), then a coffer pool on two RADOS LUNs is made, written and
#   exported;
# - `coffer pool import -d rados:coffer` (the scan) is timed ROUNDS times
#   with the index object coffer.luns and ROUNDS times without it (the
#   scan of every object that a Ceph pool with no index still gets, and
#   that every scan was before the index), alternated, medians in ms;
# - `pool destroy` of the pool, its LUNs of LUN_SIZE each holding WRITE
#   MiB, in ms, and the objects left of its LUNs after it (0).
# One CSV line:
# objects,scan_index_ms,scan_objects_ms,destroy_ms,lun_objects_left
#
# Usage: [LUN_SIZE=1G] [WRITE=64] scale_rados.sh [OBJECTS] [ROUNDS]   (default 100000, 5)
# Environment: COFFERD, COFFER (a plain build), CEPH_CLUSTER (the script
# that starts the cluster: tests/e2e/ceph_cluster.sh beside this tree).
set -eu
objects=${1:-100000}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
CEPH_CLUSTER=${CEPH_CLUSTER:-$here/../../tests/e2e/ceph_cluster.sh}
. "$here/daemon.sh"
daemon_init scale_rados

conf=$(sh "$CEPH_CLUSTER" start coffer | tail -n 1)
stop_cluster() { sh "$CEPH_CLUSTER" stop "$conf" >/dev/null 2>&1 || true; }
trap 'rc=$?; stop_cluster; (exit $rc); daemon_cleanup' EXIT
rados_() { rados -c "$conf" -p coffer "$@"; }

# unrelated objects first, as a Ceph pool shared with RBD or RGW holds
rados_ bench 3600 write -b 16 -O 16 -t 64 --max-objects "$objects" --no-cleanup \
	--run-name unrelated >"$dir/fill.txt" 2>&1
have=$(rados_ ls | wc -l)
[ "$have" -ge "$objects" ] || { echo "scale_rados: $have objects, not $objects" >&2; exit 1; }

daemon_conf "ceph_conf = $conf" "txg_timeout = 5"
daemon_start detect_leaks=0
size=${LUN_SIZE:-1G}
"$COFFER" pool create -s "$size" sr rados:coffer/sr0 rados:coffer/sr1 >/dev/null
"$COFFER" create -V "${WRITE:-64}M" sr/v >/dev/null
head -c "$((${WRITE:-64} * 1048576))" /dev/urandom | "$COFFER" write sr/v >/dev/null
"$COFFER" flush sr/v >/dev/null
"$COFFER" pool export sr >/dev/null

now_ns() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e6 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }
scan() {
	t0=$(now_ns)
	"$COFFER" pool import -d rados:coffer >"$dir/scan.txt"
	t1=$(now_ns)
	grep -q "pool: sr" "$dir/scan.txt" || { failed=1; echo "scale_rados: sr not found" >&2; exit 1; }
	ms "$t0" "$t1"
	echo
}
: >"$dir/index.ms"
: >"$dir/objects.ms"
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then
		scan >>"$dir/index.ms"
		rados_ rm coffer.luns
		scan >>"$dir/objects.ms"
		rados_ setomapval coffer.luns sr0 ''
		rados_ setomapval coffer.luns sr1 ''
	else
		rados_ rm coffer.luns
		scan >>"$dir/objects.ms"
		rados_ setomapval coffer.luns sr0 ''
		rados_ setomapval coffer.luns sr1 ''
		scan >>"$dir/index.ms"
	fi
done

"$COFFER" pool import -d rados:coffer sr >/dev/null
t0=$(now_ns)
"$COFFER" pool destroy sr >/dev/null
destroy=$(ms "$t0" "$(now_ns)")
left=$(rados_ ls | grep -c '^sr[01]\.' || true)
echo "objects,scan_index_ms,scan_objects_ms,destroy_ms,lun_objects_left"
echo "$have,$(median <"$dir/index.ms"),$(median <"$dir/objects.ms"),$destroy,$left"
