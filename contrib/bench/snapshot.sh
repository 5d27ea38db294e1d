#!/bin/sh
# SPDX-License-Identifier: MIT
# Snapshot creation time against dataset size: a snapshot copies no block
# pointer (libstore/ds/snapshot.c), so making one of a full 1 GiB volume must
# take what making one of a full 16 MiB volume takes. Fills one volume of
# each size (8 KiB records), then times ROUNDS `coffer snapshot` calls on
# each, alternating, each after an overwrite of a few records so that
# every snapshot has something to keep; prints the median and the slowest
# in milliseconds, one CSV line per size, then destroys them all, timed.
#
# Usage: snapshot.sh [ROUNDS]   (default 21)
# Environment: COFFERD, COFFER, BIG (1G), SMALL (16M), TMPDIR (LUN files)
set -eu
rounds=${1:-21}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
BIG=${BIG:-1G}
SMALL=${SMALL:-16M}
. "$here/daemon.sh"
daemon_init snapshot
daemon_conf "txg_timeout = 5"
daemon_start detect_leaks=0
"$COFFER" pool create -s 2G snap "$dir/l0" "$dir/l1" >/dev/null
"$COFFER" create -s -V "$BIG" snap/big >/dev/null
"$COFFER" create -s -V "$SMALL" snap/small >/dev/null
for ds in big small; do
	size=$("$COFFER" get -H -p volsize "snap/$ds" | cut -f3)
	head -c "$size" /dev/urandom | "$COFFER" write "snap/$ds"
done

now_ns() { date +%s%N; }
# the median and the largest of the numbers on stdin
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f,%.3f", v[int((NR + 1) / 2)], v[NR] }'; }

: >"$dir/big.ms"
: >"$dir/small.ms"
for i in $(seq 1 "$rounds"); do
	for ds in big small; do
		head -c 65536 /dev/urandom | "$COFFER" write "snap/$ds" -o $((i * 65536)) >/dev/null
		t0=$(now_ns)
		"$COFFER" snapshot "snap/$ds@s$i"
		t1=$(now_ns)
		awk -v ns=$((t1 - t0)) 'BEGIN { print ns / 1e6 }' >>"$dir/$ds.ms"
	done
done
echo "dataset,size,snapshots,median_ms,max_ms"
echo "snap/big,$BIG,$rounds,$(stats <"$dir/big.ms")"
echo "snap/small,$SMALL,$rounds,$(stats <"$dir/small.ms")"
t0=$(now_ns)
"$COFFER" destroy "snap/big@%"
"$COFFER" destroy "snap/small@%"
t1=$(now_ns)
echo "destroy of all $((2 * rounds)) snapshots: $(((t1 - t0) / 1000000)) ms"
"$COFFER" pool check snap >/dev/null
