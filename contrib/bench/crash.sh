#!/bin/sh
# SPDX-License-Identifier: MIT
# Crash test: coffer bench -v writes to encrypted datasets while cofferd is
# SIGKILLed at random moments, CYCLES times, while a second client creates,
# overwrites and destroys a dataset over and over and, every fifth cycle,
# adds a LUN. After each restart and load-key, coffer bench -vr JOURNAL
# reads back every record the journal knows: a flushed write that is
# missing (stale generation), a torn record (bad checksum), another
# record's data or a read error fails the run; so does a pool that does not
# import or whose offline check (coffer pool check) finds an extent owned
# twice, space miscounted or a nonce used twice. Before every LOSS-th
# restart the whole state directory is deleted, and the pool is imported
# from its LUNs alone (pool import -d): the same checks hold.
#
# Usage: crash.sh [CYCLES]   (default 50)
# Environment: COFFERD, COFFER (binaries; default: the build tree's),
#   SYNC (the datasets' sync property; default always, so every write the
#   bench saw acknowledged is also flushed and the journal claims only
#   durable generations), DATASETS (default 2), SEED (for the kill times),
#   LOSS (delete the state directory before every LOSS-th restart;
#   default 2, 0 never).
set -eu
cycles=${1:-50}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
SYNC=${SYNC:-always}
DATASETS=${DATASETS:-2}
SEED=${SEED:-$$}
LOSS=${LOSS:-2}
. "$here/daemon.sh"
daemon_init crash
chmod 755 "$dir"
J=$dir/journal
daemon_conf "txg_timeout = 1"
printf 'crash test passphrase\n' >"$dir/pass"

cof() { "$COFFER" -S "$sock" "$@"; }

# leaks are not this test's business; a crash of cofferd is
start() { daemon_start detect_leaks=0; }

# a pseudo-random number in [0, $1) from SEED and the cycle
rnd() { awk -v s="$SEED" -v c="$2" -v m="$1" 'BEGIN { srand(s * 7919 + c); print int(rand() * m) }'; }

start
cof pool create -s 128M crash "$dir/l0" "$dir/l1" >/dev/null
for d in $(seq 1 "$DATASETS"); do
	cof create -V 8M -o encryption=aes-256-ccm -o keyformat=passphrase \
		-o keylocation="file://$dir/pass" -o pbkdf2iters=100000 -o sync="$SYNC" \
		"crash/v$d" >/dev/null
done
# fill every record once, so that zeros are never a valid answer later: an
# in-flight write the crash cut short leaves the journal at "unknown", and
# the verifier takes zeros for a lost write (it keeps no older generation)
cat >"$dir/fill.vdb" <<P
sd=sd1,dataset=crash/*,threads=4
wd=fill,sd=sd1,rdpct=0,seekpct=eof,xfersize=1m
rd=fill,wd=fill,iorate=max,elapsed=100h,interval=10
P
cof bench -q -v --journal "$J" "$dir/fill.vdb" >"$dir/bench.0" 2>&1 ||
	{ failed=1; cat "$dir/bench.0" >&2; exit 1; }

# destroy/create churn beside the bench, with uncommitted overwrites at each
# destroy; it ends when a call fails (the daemon was killed)
head -c 262144 /dev/urandom >"$dir/churn.data"
churn() {
	while :; do
		cof destroy crash/churn >/dev/null 2>&1 || true
		cof create -V 256K crash/churn >/dev/null 2>&1 || break
		cof write crash/churn <"$dir/churn.data" >/dev/null 2>&1 || break
		cof write crash/churn <"$dir/churn.data" >/dev/null 2>&1 || break
	done
}

survived=0 verified=0 errors=0 killed_mid=0 records=0 checked=0 luns=2 rebuilt=0
for c in $(seq 1 "$cycles"); do
	# writes and reads at queue depth 16 from the journal's generations on
	cof bench -q -vr "$J" --datasets 'crash/v*' --rw randrw --rdpct 30 --bs 8k --qd 16 \
		--time 4 >"$dir/bench.run" 2>&1 &
	bp=$!
	churn &
	cp=$!
	if [ $((c % 5)) = 0 ] && [ $luns -lt 8 ]; then
		# a new path each time: a kill between label and commit leaves it labelled
		cof pool add -s 32M crash "$dir/l$c" >/dev/null 2>&1 &
		luns=$((luns + 1))
	fi
	ms=$(rnd 2500 "$c")
	sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", 0.2 + m / 1000 }')"
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	if wait "$bp"; then :; else killed_mid=$((killed_mid + 1)); fi
	wait "$cp" 2>/dev/null || true
	wait 2>/dev/null || true
	lost=0
	if [ "$LOSS" -gt 0 ] && [ $((c % LOSS)) = 0 ]; then
		# the state directory is gone: the LUNs alone hold the pool
		rm -rf "$dir/state"
		rebuilt=$((rebuilt + 1))
		lost=1
	fi
	start
	if [ $lost = 1 ] && ! cof pool import -d "$dir" crash >"$dir/import.$c" 2>&1; then
		failed=1
		echo "crash: cycle $c: import from the LUNs failed" >&2
		cat "$dir/import.$c" >&2
		break
	fi
	for d in $(seq 1 "$DATASETS"); do
		cof load-key "crash/v$d" >/dev/null 2>&1 || true
	done
	if cof bench -q -vr "$J" >"$dir/verify.$c" 2>&1; then
		survived=$((survived + 1))
	else
		failed=1
	fi
	if cof pool check crash >"$dir/check.$c" 2>&1; then
		checked=$((checked + 1))
	else
		failed=1
		echo "crash: cycle $c: pool check failed" >&2
		cat "$dir/check.$c" >&2
	fi
	n=$(sed -n 's/^validation: \([0-9]*\) errors.*/\1/p' "$dir/verify.$c" | tail -n 1)
	# the read-back's I/O count: records checked this cycle
	r=$(sed -n 's/.*(\([0-9]*\) I\/Os).*/\1/p' "$dir/verify.$c" | tail -n 1)
	records=$((records + ${r:-0}))
	errors=$((errors + ${n:-1}))
	verified=$((verified + 1))
	if [ "${failed:-0}" = 1 ]; then
		echo "crash: cycle $c: verification failed" >&2
		tail -n 30 "$dir/verify.$c" >&2
		break
	fi
	[ $((c % 10)) = 0 ] && echo "crash: $c cycles, $survived verified clean"
done
echo "crash: cycles=$cycles survived=$survived killed_mid_run=$killed_mid verify_runs=$verified records_checked=$records validation_errors=$errors pool_checks_clean=$checked state_dir_lost=$rebuilt sync=$SYNC"
[ "${failed:-0}" = 0 ] && [ "$survived" = "$cycles" ] && [ "$checked" = "$cycles" ]
