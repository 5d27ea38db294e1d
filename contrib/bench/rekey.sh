#!/bin/sh
# SPDX-License-Identifier: MIT
#
# coffer rekey's targets, measured on this machine:
# - speed: a dataset of --big MiB (default 1024) on tmpfs LUNs rekeyed at
#   full rate (--rate 0), --rounds times (each rekey after the first replaces
#   the key the one before made); MB/s from the command to rekeystatus
#   "done", the median and min-max;
# - impact: --datasets datasets (default 16) of 8 KiB random reads, then
#   writes, queue depth 2 each, in slices of --slice seconds: one with no
#   rekey, one while another dataset of --big MiB is rekeyed at the default
#   rate (16M; a new one once one is done), alternating, --slices pairs;
#   on tmpfs and on O_DIRECT LUNs in --dir (--rate: another rate than the
#   default). The median of each pair's ratio
#   (with rekey / without) and its min-max; the target is >= 0.95;
# - kill -9: --kills times a daemon killed at a random point of a rekey of
#   a 256 MiB dataset with two snapshots and a clone of one (32M/s),
#   restarted, its key loaded, until the rekey of both is done; then every
#   acknowledged write reads back (bench -vr of the journal), the snapshots
#   and the clone read as before, and pool check is clean.
# - a change of suite, kill -9 (resuite-kills): the same, with set
#   encryption=aes-128-gcm in place of the rekey, the first kill while
#   that command runs (it may land between the key file's save and the
#   switch, which a load-key then makes); then both are of the new suite.
# - encryption in place, kill -9: the same kills in the encryption in place
#   (set encryption=) of a clear 256 MiB dataset with two snapshots and a
#   clone of one (encrypted with it); then every pointer is encrypted,
#   every write reads back, the snapshots and the clone as before, pool
#   check clean.
#
# usage: rekey.sh [--big MiB] [--rounds N] [--datasets D] [--slice SEC]
#        [--slices N] [--kills N] [--rate SIZE] [--dir DIR] [--out DIR]
#        [--passes speed,impact,kills,resuite-kills,encrypt-kills]
#        (impact-tmpfs, impact-direct: one of the two)
# env:   COFFERD, COFFER (binaries; default: from the build tree, else PATH)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
big=1024 rounds=3 datasets=16 slice=4 slices=5 kills=20 passes="speed impact kills" rate=
dir=${TMPDIR:-/var/tmp} out=
die() { echo "rekey.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--big) big=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--datasets) datasets=$2; shift ;;
	--slice) slice=$2; shift ;;
	--slices) slices=$2; shift ;;
	--kills) kills=$2; shift ;;
	--rate) rate=$2; shift ;;
	--passes) passes=$(echo "$2" | tr ',' ' '); shift ;;
	--dir) dir=$2; shift ;;
	--out) out=$2; shift ;;
	-h|--help) sed -n '/^# usage/,/^# env/p' "$0" | sed 's/^# //'; exit 0 ;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
	shift
done
find_bin() { # name, build-tree path
	for b in "$top/build/$2" "$(command -v "$1" 2>/dev/null || true)"; do
		[ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return; }
	done
}
COFFERD=${COFFERD:-$(find_bin cofferd daemon/cofferd)}
COFFER=${COFFER:-$(find_bin coffer client/coffer)}
[ -x "${COFFERD:-}" ] || die "no cofferd: set COFFERD=/path/to/cofferd"
[ -x "${COFFER:-}" ] || die "no coffer: set COFFER=/path/to/coffer"
out=${out:-$PWD/rekey-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
work=$(mktemp -d /dev/shm/coffer-rekey.XXXXXX)
daemon_pid=
cleanup() {
	[ -z "$daemon_pid" ] || { kill -KILL "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; }
	rm -rf "$work" "$dir"/coffer-rekey-luns.* /dev/shm/coffer-rekey-luns.*
}
trap cleanup EXIT
(umask 077 && head -c 32 /dev/urandom > "$work/key")
c() { "$COFFER" -S "$work/sock" "$@"; }
now() { date +%s.%N; }

# A daemon on a fresh state dir, LUNs in $1, with O_DIRECT when $2 = yes.
start_daemon() { # lundir direct
	[ -z "$daemon_pid" ] || { kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; }
	rm -rf "$work/state"
	printf '[cofferd]\nsocket = %s\nstate_dir = %s\ncache_size = 0\ndirect_io = %s\nlog_level = warning\nlog_target = %s\n' \
		"$work/sock" "$work/state" "$2" "$out/cofferd.log" > "$work/cofferd.conf"
	"$COFFERD" -f -c "$work/cofferd.conf" > /dev/null 2>&1 &
	daemon_pid=$!
	until c ping > /dev/null 2>&1; do sleep 0.1; done
}
restart_daemon() { # after a kill: the same state
	"$COFFERD" -f -c "$work/cofferd.conf" > /dev/null 2>&1 &
	daemon_pid=$!
	until c ping > /dev/null 2>&1; do sleep 0.1; done
}

# Pool p on LUNs in $1, room for $2 MiB of records.
make_pool() { # lundir mib
	l=$(mktemp -d "$1/coffer-rekey-luns.XXXXXX")
	c pool create -s "$(( $2 / 2 + 64 ))M" p "$l/l0" "$l/l1" > /dev/null
}
make_ds() { # name MiB [encrypted]
	if [ "${3:-1}" = 1 ]; then
		c create -V "$2M" -b 8k -o encryption=aes-256-ccm -o keyformat=raw \
			-o keylocation="file://$work/key" -o primarycache=metadata "$1" > /dev/null
	else
		c create -V "$2M" -b 8k -o primarycache=metadata "$1" > /dev/null
	fi
}
fill() { # dataset glob [journal]
	printf 'sd=sd1,dataset=%s,threads=2\nwd=f,sd=sd1,rdpct=0,seekpct=eof,xfersize=1m\nrd=f,wd=f,iorate=max,elapsed=10h,interval=5\n' \
		"$1" > "$work/fill.parm"
	if [ -n "${2:-}" ]; then c bench -q -v --journal "$2" "$work/fill.parm" > /dev/null
	else c bench -q "$work/fill.parm" > /dev/null; fi
}
status() { c get -H -o value rekeystatus "$1"; }
wait_done() { # dataset
	until status "$1" | grep -q '^done'; do
		status "$1" | grep -q '^failed' && die "$1: $(status "$1")"
		sleep 0.1
	done
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }

speed() {
	echo "== speed: a ${big} MiB dataset on tmpfs, rekey --rate 0, $rounds round(s)" >&2
	start_daemon /dev/shm no
	make_pool /dev/shm $(( big * 3 / 2 )) # the metadata log of a fast fill takes room too
	make_ds p/big "$big"
	fill p/big
	: > "$out/speed.txt"
	r=1
	while [ $r -le "$rounds" ]; do
		t0=$(now)
		c rekey --rate 0 p/big
		wait_done p/big
		t1=$(now)
		echo "$big $t0 $t1" | awk '{ printf "%.1f\n", $1 * 1.048576 / ($3 - $2) }' >> "$out/speed.txt"
		r=$((r + 1))
	done
	printf 'speed: %s MB/s median of %s (%s), target >= 200\n' "$(median < "$out/speed.txt")" \
		"$rounds" "$(spread < "$out/speed.txt")" | tee -a "$out/summary.txt"
}

# A rekey of p/big going through a slice: resumed where the last one was
# paused, or a new one once one is done (a slice is far shorter than a
# rekey at the default rate). Nothing else runs meanwhile: a poller would
# cost the clients CPU of its own.
rekey_on() {
	c rekey ${rate:+--rate "$rate"} p/big
}
rekey_off() {
	c rekey -p p/big 2>/dev/null || true
}

one_slice() { # op -> IOPS
	rd=100
	[ "$1" = write ] && rd=0
	printf 'sd=sd1,dataset=p/d*,threads=2\nwd=w,sd=sd1,rdpct=%s,seekpct=random,xfersize=8k\nrd=r,wd=w,iorate=max,elapsed=%s,warmup=1,interval=1\n' \
		"$rd" "$slice" > "$work/slice.parm"
	c bench -q "$work/slice.parm" | awk '/avg_/ { print $3 }'
}

impact() { # pass lundir direct
	echo "== impact on $1: $datasets datasets of reads and writes beside a rekey at the default rate" >&2
	start_daemon "$2" "$3"
	make_pool "$2" $(( big + datasets * 64 ))
	make_ds p/big "$big"
	fill p/big
	k=0
	while [ $k -lt "$datasets" ]; do make_ds "p/d$k" 32; k=$((k + 1)); done
	fill 'p/d*'
	for op in read write; do
		: > "$work/ratios"
		k=1
		while [ $k -le "$slices" ]; do
			# the order flips every pair: neither side always follows the other
			if [ $((k % 2)) = 1 ]; then
				idle=$(one_slice $op); rekey_on; busy=$(one_slice $op); rekey_off
			else
				rekey_on; busy=$(one_slice $op); rekey_off; idle=$(one_slice $op)
			fi
			echo "$1 $op $k $idle $busy" >> "$out/impact.csv"
			echo "$busy $idle" | awk '{ printf "%.3f\n", $1 / $2 }' >> "$work/ratios"
			k=$((k + 1))
		done
		printf 'impact: %s %s: %s of the IOPS without a rekey, median of %s pairs (%s), target >= 0.95\n' \
			"$1" $op "$(median < "$work/ratios")" "$slices" "$(spread < "$work/ratios")" |
			tee -a "$out/summary.txt"
	done
}

# A random pause of up to $1 seconds (0.01 steps).
random_pause() {
	sleep "$(awk -v s="$(od -An -N2 -tu2 /dev/urandom)" -v m="$1" 'BEGIN { printf "%.2f", (s % (m * 100)) / 100 }')"
}

kill_cycles() { # kills (a rekey) or resuite-kills (set encryption=aes-128-gcm)
	what=$1
	echo "== $what: $kills kill -9 at random points of a ${what%-kills}" >&2
	start_daemon /dev/shm no
	make_pool /dev/shm 1536 # the head, what each snapshot keeps, and a rekey's room
	make_ds p/k 256
	fill p/k "$work/journal"
	# snapshots whose tables keep records, a clone with records of its own
	printf 'sd=sd1,dataset=p/k,threads=2\nwd=o,sd=sd1,rdpct=0,seekpct=random,xfersize=8k\nrd=o,wd=o,iorate=max,elapsed=1,interval=1\n' \
		> "$work/over.parm"
	c snapshot p/k@a
	c bench -q -v --journal "$work/journal" "$work/over.parm" > /dev/null
	c snapshot p/k@b
	c bench -q -v --journal "$work/journal" "$work/over.parm" > /dev/null
	c clone p/k@a p/k/c
	head -c 16M /dev/urandom | c write -o 1048576 p/k/c
	images() { for x in p/k@a p/k@b p/k/c; do c read "$x" | sha256sum; done; }
	images > "$out/$what-images-before.txt"
	if [ "$what" = kills ]; then
		c rekey --rate 32M p/k
	else
		# the first kill while the command runs: before its commit point
		# nothing started (then it is asked again), after it the switch
		# waits for the load-key
		c set encryption=aes-128-gcm --rate 32M p/k > /dev/null 2>&1 &
		asked=$!
		random_pause 0.5
		kill -KILL "$daemon_pid"
		wait "$daemon_pid" 2>/dev/null || true
		wait "$asked" || true
		restart_daemon
		c load-key p/k > /dev/null
		status p/k | grep -q '^none' && c set encryption=aes-128-gcm --rate 32M p/k
	fi
	kill_until_done p/k
	wait_done p/k/c
	c bench -q -vr "$work/journal" > "$out/$what-validate.txt" || die "validation failed: $out/$what-validate.txt"
	images > "$out/$what-images-after.txt"
	cmp -s "$out/$what-images-before.txt" "$out/$what-images-after.txt" ||
		die "a snapshot or the clone reads otherwise: $out/$what-images-*.txt"
	c pool check p > "$out/$what-check.txt" || die "pool check failed: $out/$what-check.txt"
	if [ "$what" = resuite-kills ]; then
		[ "$(c get -H -o value encryption p/k p/k/c | sort -u)" = aes-128-gcm ] ||
			die "not both of the new suite: $(c get -H -o value encryption p/k p/k/c)"
	fi
	printf '%s: %s kill -9, then done; every acknowledged write read back, the snapshots and the clone as before; pool check clean\n' "$what" "$n" |
		tee -a "$out/summary.txt"
}

# Kill the daemon at random points until the rekeystatus of $1 is done,
# each time restarting it and loading the key of $1. -> kills done
kill_until_done() { # dataset
	n=0
	while [ $n -lt "$kills" ] && ! status "$1" | grep -q '^done'; do
		random_pause 1
		kill -KILL "$daemon_pid"
		wait "$daemon_pid" 2>/dev/null || true
		restart_daemon
		c load-key "$1" > /dev/null
		n=$((n + 1))
	done
	wait_done "$1"
}

encrypt_kill_cycles() {
	echo "== encrypt-kills: $kills kill -9 at random points of an encryption in place" >&2
	start_daemon /dev/shm no
	make_pool /dev/shm 1536
	make_ds p/x 256 0
	fill p/x "$work/journal"
	printf 'sd=sd1,dataset=p/x,threads=2\nwd=o,sd=sd1,rdpct=0,seekpct=random,xfersize=8k\nrd=o,wd=o,iorate=max,elapsed=1,interval=1\n' \
		> "$work/over.parm"
	c snapshot p/x@a
	c bench -q -v --journal "$work/journal" "$work/over.parm" > /dev/null
	c snapshot p/x@b
	c clone p/x@a p/x/c
	head -c 16M /dev/urandom | c write -o 1048576 p/x/c
	images() { for x in p/x@a p/x@b p/x/c; do c read "$x" | sha256sum; done; }
	images > "$out/encrypt-images-before.txt"
	c set encryption=aes-256-gcm -o keyformat=raw -o keylocation="file://$work/key" --rate 32M p/x
	kill_until_done p/x
	wait_done p/x/c
	c bench -q -vr "$work/journal" > "$out/encrypt-validate.txt" || die "validation failed: $out/encrypt-validate.txt"
	images > "$out/encrypt-images-after.txt"
	cmp -s "$out/encrypt-images-before.txt" "$out/encrypt-images-after.txt" ||
		die "a snapshot or the clone reads otherwise: $out/encrypt-images-*.txt"
	c pool check p > "$out/encrypt-check.txt" || die "pool check failed: $out/encrypt-check.txt"
	awk '/^records:/ { gsub(/[(]/, ""); if ($2 != $3) exit 1 }' "$out/encrypt-check.txt" ||
		die "a pointer is still clear: $out/encrypt-check.txt"
	printf 'encrypt-kills: %s kill -9, then done; every pointer encrypted, every acknowledged write read back, the snapshots and the clone as before; pool check clean\n' "$n" |
		tee -a "$out/summary.txt"
}

for pass in $passes; do
	case $pass in
	speed) speed ;;
	impact) impact tmpfs /dev/shm no; impact direct "$dir" yes ;;
	impact-tmpfs) impact tmpfs /dev/shm no ;;
	impact-direct) impact direct "$dir" yes ;;
	kills|resuite-kills) kill_cycles "$pass" ;;
	encrypt-kills) encrypt_kill_cycles ;;
	*) die "unknown pass '$pass'" ;;
	esac
done
echo "results in $out"
