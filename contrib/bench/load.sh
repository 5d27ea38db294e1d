#!/bin/sh
# SPDX-License-Identifier: MIT
# Load test: CLIENTS connections (one dataset each) at queue depth QD of
# 8 KiB random reads and writes for SECONDS against one cofferd (the ASan
# build when run from an --enable-asan tree), with data validation on.
# Passes when the run has no I/O or validation error, a second bench that
# would take the daemon past max_connections is refused cleanly while the
# first runs on, and cofferd stops cleanly. Prints the daemon's peak RSS
# (VmHWM) and the connections it refused.
#
# Usage: load.sh [SECONDS]   (default 60)
# Environment: COFFERD, COFFER, CLIENTS (64), QD (32), MAXCONN (100)
set -eu
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
COFFERD=${COFFERD:-$here/../../daemon/cofferd}
COFFER=${COFFER:-$here/../../client/coffer}
CLIENTS=${CLIENTS:-64}
QD=${QD:-32}
MAXCONN=${MAXCONN:-100}
. "$here/daemon.sh"
daemon_init load
daemon_conf "max_connections = $MAXCONN"
daemon_start detect_leaks=1:exitcode=23
"$COFFER" pool create -s 512M load "$dir/l0" "$dir/l1" >/dev/null
for d in $(seq 1 "$CLIENTS"); do
	"$COFFER" create -V 4M "load/c$d" >/dev/null
done

"$COFFER" bench -q -v --journal "$dir/journal" --datasets 'load/*' --rw randrw --rdpct 50 \
	--bs 8k --qd "$QD" --threads "$CLIENTS" --time "$secs" >"$dir/bench.out" 2>&1 &
bp=$!
# past the limit once the first bench holds its CLIENTS connections (and its
# admin one): the stats call sees them open
conns_open() {
	n=$("$COFFER" --json-int stats 2>/dev/null | tr -d ' \n' |
		sed -n 's/.*"connections_open":\([0-9]*\).*/\1/p')
	[ "${n:-0}" -gt "$CLIENTS" ]
}
daemon_until 120 conns_open || { echo "load: the first bench never connected" >&2; exit 1; }
over=0
if "$COFFER" bench -q --datasets 'load/*' --rw randread --bs 8k --qd 1 --threads "$CLIENTS" \
	--time 1 >"$dir/over.out" 2>&1; then
	over=1
fi
bench_rc=0
wait "$bp" || bench_rc=$?
hwm=$(sed -n 's/^VmHWM:[[:space:]]*//p' "/proc/$pid/status" | tr -d ' ')
stats=$("$COFFER" --json-int stats 2>/dev/null | tr -d ' \n' || true)
kill -TERM "$pid"
drc=0
wait "$pid" || drc=$?
pid=
grep -E 'avg_|errors|validation' "$dir/bench.out" | tail -n 3
refused=$(grep -c -i -E 'refused|too many|limit|reset' "$dir/over.out" || true)
echo "load: clients=$CLIENTS qd=$QD seconds=$secs bench_exit=$bench_rc cofferd_exit=$drc" \
	"peak_rss=$hwm over_limit_bench_refused=$([ $over = 0 ] && echo yes || echo no)"
echo "load: stats ${stats#\{}" | cut -c1-400
fail=0
[ "$bench_rc" = 0 ] || { echo "load: the bench had errors" >&2; tail -n 20 "$dir/bench.out" >&2; fail=1; }
[ "$over" = 0 ] || { echo "load: connections past max_connections were accepted" >&2; fail=1; }
[ "$refused" -gt 0 ] || { echo "load: the refused bench did not say why:" >&2; cat "$dir/over.out" >&2; fail=1; }
[ "$drc" = 0 ] || { echo "load: cofferd exit $drc" >&2; tail -n 40 "$dir/cofferd.log" >&2; fail=1; }
exit $fail
