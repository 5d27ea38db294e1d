#!/bin/sh
# SPDX-License-Identifier: MIT
# The import of pools of many records (the Scale figures for 10^6..10^8):
# for each N, scale_records builds a pool of N records of 8 KiB (LUNS
# sparse LUN files, default 4; pointers staged through the txg, no record
# written), then
# imports it ROUNDS times with LMDB's rows of the free map and ROUNDS
# times walking every pointer instead (the rows dropped first), the two
# alternated, and runs pool check once (the rows against a walk; it reads
# every record, so by default only up to 2^21 of them, CHECK=1 always). The
# pool is removed before the next N: its metadata takes about 0.6 KiB a
# record of disk at 10^7 records on 4 LUNs (LMDB, and the log's three
# copies on the LUNs), more at 10^8 (scale_records.c says why); LUNS=1
# keeps one copy of the log.
# One CSV line per N:
# records,build_s,import_s,import_read_mib,walk_s,rss_anon_mib,
# rss_anon_untrimmed_mib,space_errors,disk_mib
# (medians; RssAnon after the import, after malloc_trim as the daemon
# does, and before it).
#
# Usage: [ROUNDS=3] [LUNS=4] scale_records.sh N...  (default 1048576 10485760)
# Environment: SCALE_RECORDS (the program, beside this script in a build
# tree), DIR (default /var/tmp/coffer-records: a disk, not tmpfs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SCALE_RECORDS=${SCALE_RECORDS:-$here/scale_records}
rounds=${ROUNDS:-3}
base=${DIR:-/var/tmp/coffer-records}
[ $# -gt 0 ] || set -- 1048576 10485760
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

echo "records,build_s,import_s,import_read_mib,walk_s,rss_anon_mib,rss_anon_untrimmed_mib,space_errors,disk_mib"
for n in "$@"; do
	dir=$base/$n
	rm -rf "$dir"
	mkdir -p "$dir"
	build=$("$SCALE_RECORDS" build "$dir" "$n" "${LUNS:-4}" 2>"$dir/build.log" | field secs)
	: >"$dir/import.txt"
	: >"$dir/walk.txt"
	i=0
	while [ $i -lt "$rounds" ]; do
		"$SCALE_RECORDS" import "$dir" >>"$dir/import.txt"
		"$SCALE_RECORDS" walk "$dir" >>"$dir/walk.txt"
		i=$((i + 1))
	done
	# the import after a walk: rows written anew by the walk, read back
	"$SCALE_RECORDS" import "$dir" >>"$dir/import.txt"
	imp=$(field secs <"$dir/import.txt" | median)
	readm=$(field read_mib <"$dir/import.txt" | median)
	walk=$(field secs <"$dir/walk.txt" | median)
	rss=$(field trimmed <"$dir/import.txt" | median)
	rss0=$(field rss_anon_kib <"$dir/import.txt" | median)
	# pool check reads every record: by default only up to 2^21 of them
	errs=-
	if [ "${CHECK:-auto}" = 1 ] || { [ "${CHECK:-auto}" = auto ] && [ "$n" -le 2097152 ]; }; then
		errs=$("$SCALE_RECORDS" check "$dir" | field space_errors)
	fi
	disk=$(du -sm "$dir" | cut -f1)
	awk -v n="$n" -v b="$build" -v i="$imp" -v m="$readm" -v w="$walk" -v r="$rss" \
		-v r0="$rss0" -v e="$errs" -v d="$disk" \
		'BEGIN { printf "%s,%s,%s,%s,%s,%.1f,%.1f,%s,%s\n", n, b, i, m, w, r / 1024, r0 / 1024, e, d }'
	rm -rf "$dir"
done
