#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A single-node Ceph cluster for the RADOS tests, from Debian's packages
# (ceph-mon, ceph-mgr, ceph-osd, ceph-common): one mon, one mgr and one OSD
# on memstore, every pool of size 1, no authentication, all of it in one
# temporary directory with its own ceph.conf (nothing in /etc/ceph is read
# or written). The shape is Ceph's own vstart.sh cut down to what a test
# needs: monmaptool + ceph-mon --mkfs, "osd new" + ceph-osd --mkfs.
#
#   ceph_cluster.sh start [POOL]   bring it up, wait until POOL (default
#                                  "coffer") takes a write, print the path of
#                                  its ceph.conf on the last line of stdout
#   ceph_cluster.sh stop CONF      stop the daemons of that cluster and remove
#                                  its directory
#   ceph_cluster.sh stop-osd CONF  stop the OSD only (the tests' dead cluster)
#
# start exits non-zero, saying why on stderr, when Ceph cannot run here (not
# installed, not root, a daemon that will not start): the tests then skip.
# Waiting is event-driven: each step polls for its condition under a
# generous deadline ($CEPH_CLUSTER_TIMEOUT seconds, 180 by default).
set -eu

timeout=${CEPH_CLUSTER_TIMEOUT:-180}

die() {
	echo "ceph_cluster: $*" >&2
	exit 1
}

# Poll "$@" until it succeeds or the deadline passes.
wait_for() {
	what=$1
	shift
	end=$(($(date +%s) + timeout))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.5
	done
}

# A TCP port nothing listens on, for the mon.
port_free() {
	! ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

# Below the ephemeral range (32768 and up by default), where the clients of
# other tests would take a port between the check and the mon's bind.
pick_port() {
	p=$((10000 + ($$ * 7 + $(date +%s%N) / 1000) % 22000))
	while ! port_free "$p"; do
		p=$((p + 1))
	done
	echo "$p"
}

stop_cluster() {
	conf=$1
	dir=$(dirname "$conf")
	[ -f "$dir/.coffer-ceph" ] || die "$dir is not a cluster of this script"
	for pidf in "$dir"/run/*.pid; do
		[ -f "$pidf" ] || continue
		pid=$(cat "$pidf")
		kill "$pid" 2>/dev/null || true
	done
	for pidf in "$dir"/run/*.pid; do
		[ -f "$pidf" ] || continue
		pid=$(cat "$pidf")
		end=$(($(date +%s) + 30))
		while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
			sleep 0.2
		done
		kill -9 "$pid" 2>/dev/null || true
	done
}

stop_osd() {
	dir=$(dirname "$1")
	[ -f "$dir/run/osd.0.pid" ] || die "no OSD pid file in $dir/run"
	pid=$(cat "$dir/run/osd.0.pid")
	kill -9 "$pid" 2>/dev/null || true
	end=$(($(date +%s) + 30))
	while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
		sleep 0.2
	done
	rm -f "$dir/run/osd.0.pid"
}

# The mon of $conf on $port: its map, its store, the daemon.
start_mon() {
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" \
		>/dev/null || die "monmaptool failed"
	ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mkfs.mon.log" 2>&1 ||
		die "ceph-mon --mkfs failed: $(tail -3 "$dir/log/mkfs.mon.log")"
	ceph-mon -c "$conf" -i a >"$dir/log/start.mon.log" 2>&1
}

start_cluster() {
	pool=${1:-coffer}
	for b in ceph-mon ceph-mgr ceph-osd ceph monmaptool uuidgen; do
		command -v "$b" >/dev/null 2>&1 || die "$b not installed (sh contrib/deps.sh --test)"
	done
	# the OSD wants to set its own limits and open raw sockets as it likes
	[ "$(id -u)" = 0 ] || die "not root: a Ceph OSD will not start as user $(id -un) here"
	dir=$(mktemp -d "${TMPDIR:-/tmp}/coffer-ceph.XXXXXX")
	touch "$dir/.coffer-ceph"
	mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/osd.0" "$dir/mgr.x"
	port=$(pick_port)
	fsid=$(uuidgen)
	conf=$dir/ceph.conf
	cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
ms bind ipv6 = false
ms bind msgr1 = false
public addr = 127.0.0.1
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
crash dir = $dir/crash
keyring = /dev/null
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon warn on insecure global id reclaim = false
mon data avail warn = 1
mon data avail crit = 0
mon cluster log file = $dir/log/cluster.log
[mon]
mon data = $dir/mon.\$id
[mgr]
mgr data = $dir/mgr.\$id
mgr initial modules =
[osd]
osd data = $dir/osd.\$id
osd objectstore = memstore
memstore device bytes = 2147483648
osd max object size = 134217728
osd op num shards = 1
osd op num threads per shard = 2
[client]
rados osd op timeout = 10
rados mon op timeout = 30
log file = $dir/log/client.\$pid.log
admin socket =
EOF
	# on a failure from here the directory goes with what started
	trap 'stop_cluster "$conf" 2>/dev/null; rm -rf "$dir"' EXIT
	# a port taken between the check and the bind: another one, five times
	tries=0
	until start_mon; do
		tries=$((tries + 1))
		grep -q "unable to bind" "$dir/log/start.mon.log" && [ $tries -lt 5 ] ||
			die "ceph-mon did not start: $(tail -3 "$dir/log/start.mon.log")"
		old=$port
		port=$(pick_port)
		sed -i "s/127.0.0.1:$old\$/127.0.0.1:$port/" "$conf"
		rm -rf "$dir/mon.a" "$dir/monmap"
		mkdir -p "$dir/mon.a"
	done
	wait_for mon ceph -c "$conf" --connect-timeout 5 mon stat ||
		die "the mon did not answer in ${timeout}s (see $dir/log)"
	ceph-mgr -c "$conf" -i x >"$dir/log/start.mgr.log" 2>&1 ||
		die "ceph-mgr did not start: $(tail -3 "$dir/log/start.mgr.log")"
	uuid=$(uuidgen)
	id=$(ceph -c "$conf" osd new "$uuid") || die "ceph osd new failed"
	[ "$id" = 0 ] || die "ceph osd new gave id $id, not 0"
	ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" >"$dir/log/mkfs.osd.log" 2>&1 ||
		die "ceph-osd --mkfs failed: $(tail -3 "$dir/log/mkfs.osd.log")"
	ceph-osd -c "$conf" -i 0 >"$dir/log/start.osd.log" 2>&1 ||
		die "ceph-osd did not start: $(tail -3 "$dir/log/start.osd.log")"
	wait_for osd sh -c "ceph -c '$conf' osd stat | grep -q '1 up'" ||
		die "the OSD did not come up in ${timeout}s (see $dir/log)"
	ceph -c "$conf" osd pool create "$pool" 8 8 >/dev/null 2>&1 || die "pool create failed"
	ceph -c "$conf" osd pool application enable "$pool" coffer >/dev/null 2>&1 || true
	echo probe >"$dir/probe"
	wait_for pool rados -c "$conf" -p "$pool" put coffer-probe "$dir/probe" ||
		die "pool $pool took no write in ${timeout}s (see $dir/log)"
	rados -c "$conf" -p "$pool" rm coffer-probe >/dev/null 2>&1 || true
	wait_for health sh -c "ceph -c '$conf' health | grep -q HEALTH_OK" ||
		echo "ceph_cluster: not HEALTH_OK yet, but the pool takes writes: $(ceph -c "$conf" health)" >&2
	trap - EXIT
	echo "$conf"
}

case ${1:-} in
start) start_cluster "${2:-}" ;;
stop)
	[ $# -ge 2 ] || die "usage: $0 stop CONF"
	stop_cluster "$2"
	rm -rf "$(dirname "$2")"
	;;
stop-osd)
	[ $# -ge 2 ] || die "usage: $0 stop-osd CONF"
	stop_osd "$2"
	;;
*) die "usage: $0 start [POOL] | stop CONF | stop-osd CONF" ;;
esac
