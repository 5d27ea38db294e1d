#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The reference encryption benchmark (issue 5), after Oracle's published run:
# P pools x L sparse LUN files, D datasets of S MiB per cipher suite with
# recordsize=8k and primarycache=metadata, filled with sequential 1 MiB
# writes (every suite once at the start of a pass, together, where twice
# their data fits on the LUNs' file system; else, on the shm and nbd
# passes, clear once and each other suite before the runs that pair it
# with clear's, seconds apart; on the others each suite before each of its
# runs), then 8 KiB random reads at queue depth 2 per dataset: iorate=max,
# then a curve of clear's maximum (rows PASS@90, PASS@50): once clear has run
# in a pass, every suite is offered the same rates, so the table compares
# the suites at equal load (mean response, CPU per I/O) and says how much of
# the rate each held. Suites run in a rotated order in each round
# so that machine drift hits all of them alike; on the tmpfs and NBD
# passes every suite but clear is read (and written) right beside a run of
# clear, first in odd rounds and second in even ones, and its ratio to
# clear is the median of the rounds' ratios of such neighbours
# (OUT/pairs.csv). Two passes: LUN files on
# disk opened O_DIRECT, and LUN files on tmpfs (/dev/shm) for the CPU-bound
# case (on this kind of VM the kernel drops page cache that goes unread for
# about a minute, so a "buffered" disk run quietly becomes a disk run).
#
# LUNs in RAM answer without blocking, so the shm pass runs record I/O on the
# daemon's loop thread (io_inline = yes), as an operator would configure it.
# After the reads, each suite runs 8 KiB random writes (sync=standard) for
# the same time: the PASS-write rows.
#
# Peers, in the same run at the same total queue depth (2 x datasets), when
# installed: on the O_DIRECT pass fio --ioengine=io_uring --direct=1 reading
# the clear suite's LUN files (row fio-io_uring), at the maximum and at the
# curve's rates (what the disk alone holds at them); on the shm pass nbdkit's
# file plugin serving a file of the same size on tmpfs over a Unix socket to
# fio --ioengine=nbd (row nbdkit-fio), a socket daemon doing no crypto.
#
# The mirror pass is the shm pass on the same LUNs paired into two-way
# mirror vdevs (each LUN twice the size, so the datasets fit as before):
# its rows against the shm rows are what redundancy costs, read and write.
# Then the reads run again in alternating slices of --slice seconds, --slices
# pairs: one with no scrub (mirror-idle), one while every pool scrubs at the
# default scrub_rate (mirror-scrub); what a scrub costs the foreground is the
# ratio of the two, measured seconds apart.
#
# The nbd pass serves the same datasets (LUNs on tmpfs, io_inline) over
# cofferd's NBD socket to fio --ioengine=nbd, one job of queue depth 2 per
# dataset, clear and every suite; its peers, in the same run with the same
# jobs at the same total queue depth, are nbdkit's file plugin (a file of
# the same size on tmpfs) and nbdkit's file plugin under its luks filter
# (a LUKSv1 aes-256-xts image made by qemu-img), and nbd_floor, a server
# that stores nothing and answers zeros (row nbd-floor: what the client and
# the cores leave for any server), so every row has the same client. Its
# rows are compared seconds apart: each suite is read right beside a run of
# clear, the peers right after aes-256-ccm's pair, and its ratios are the
# medians of the rounds' ratios of such neighbours (OUT/pairs.csv; see
# nbd_round). Its rows' CPU column is the server's (cofferd or nbdkit), over
# the steady part of each run, and OUT/nbd-cpu.csv gives the server's CPU
# time per I/O and fio's own: the CPUs over fio's time per I/O bound every row.
#
# The rados pass is the shm pass's shape (io_inline off: every I/O waits on
# the network) on LUNs in a Ceph pool, rados:POOL/PREFIX: those of the
# cluster --ceph-conf names (pool --ceph-pool, default coffer; its objects
# are removed afterwards), else a single-node memstore cluster that
# tests/e2e/ceph_cluster.sh starts and stops. It is meant to be run smaller
# (--quick, or a shape whose LUNs fit the cluster) beside the shm pass:
#   encryption.sh --quick --passes shm,rados
# Every table row also gives cofferd's CPU time per I/O (us/IO).
#
# It starts its own cofferd with a temp config and prints a table (suite,
# IOPS with the lowest and highest round, mean and p99 response, daemon CPU
# %, ratio to clear: medians over the rounds), cofferd's largest RssAnon, and
# the targets met or not; OUT/summary.json and OUT/summary.csv hold the same and name the full
# coffer bench (or fio) JSON of every run; OUT/encryption.png is drawn when
# gnuplot is installed.
#
# usage: encryption.sh [--quick] [--pools P] [--luns L] [--datasets D] [--size MiB]
#        [--time SEC] [--warmup SEC] [--curve LIST] [--rounds R] [--suites LIST]
#        [--slice SEC] [--slices N] [--workers N] [--loops N]
#        [--passes direct,shm,mirror,nbd,rados] [--dir DIR] [--out DIR]
#        [--ceph-conf FILE] [--ceph-pool NAME]
# env:   COFFERD, COFFER, NBD_FLOOR (binaries; default: from the build tree, else PATH)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

# five rounds for a median and its spread; short points and a short curve
# keep the whole run near half an hour
pools=4 luns=32 datasets=192 size=32 elapsed=5 warmup=1 rounds=5
slice=4 slices=3 workers= loops=
curve=90,50
suites="clear aes-128-ccm aes-192-ccm aes-256-ccm aes-256-gcm"
passes="direct shm nbd"
dir=${TMPDIR:-/var/tmp}
out=
ceph_conf= ceph_pool=coffer ceph_ours=
die() { echo "encryption.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
	case $1 in
	# the quick shape, about two minutes a pass; set here, so that options
	# after it still win (--quick --rounds 3)
	--quick) pools=2 luns=4 datasets=16 size=8 elapsed=3 warmup=1 rounds=1 curve=90,50 slice=3 ;;
	--pools) pools=$2; shift ;;
	--luns) luns=$2; shift ;;
	--datasets) datasets=$2; shift ;;
	--size) size=$2; shift ;;
	--time) elapsed=$2; shift ;;
	--warmup) warmup=$2; shift ;;
	--curve) curve=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--slice) slice=$2; shift ;;
	--slices) slices=$2; shift ;;
	--workers) workers=$2; shift ;;
	--loops) loops=$2; shift ;;
	--suites) suites=$(echo "$2" | tr ',' ' '); shift ;;
	--passes) passes=$(echo "$2" | tr ',' ' '); shift ;;
	--dir) dir=$2; shift ;;
	--out) out=$2; shift ;;
	--ceph-conf) ceph_conf=$2; shift ;;
	--ceph-pool) ceph_pool=$2; shift ;;
	-h|--help) sed -n '/^# usage/,/^# env/p' "$0" | sed 's/^# //'; exit 0 ;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
	shift
done

find_bin() { # name, build-tree path; prints nothing when neither has it
	for b in "$top/build/$2" "$(command -v "$1" 2>/dev/null || true)"; do
		[ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return; }
	done
	return 0
}
COFFERD=${COFFERD:-$(find_bin cofferd daemon/cofferd)}
COFFER=${COFFER:-$(find_bin coffer client/coffer)}
NBD_FLOOR=${NBD_FLOOR:-$(find_bin nbd_floor contrib/bench/nbd_floor)}
[ -x "${COFFERD:-}" ] || die "no cofferd: set COFFERD=/path/to/cofferd"
[ -x "${COFFER:-}" ] || die "no coffer: set COFFER=/path/to/coffer"

out=${out:-$PWD/encryption-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/coffer-encbench.XXXXXX")
daemon_pid=
lundir=
beside=

cleanup() {
	if [ -n "$daemon_pid" ]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	case $lundir in
	rados:*) ;;
	?*) rm -rf "$lundir" ;;
	esac
	[ -n "$ceph_ours" ] && "$top/tests/e2e/ceph_cluster.sh" stop "$ceph_conf" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sock=$work/sock
c() { "$COFFER" -S "$sock" "$@"; }

# LUN size: the suite's data plus a half. The volumes are thick (their whole
# size reserved), and beyond it copy-on-write overwrites, the metadata log
# with its reserve and the slop space need room; in a pool kept nearly full
# every few hundred writes force a txg commit, and the write rows would
# measure those commits rather than the I/O path.
lun_mib=$(( (datasets * size * 3 / 2 + pools * luns - 1) / (pools * luns) ))
[ $lun_mib -lt 16 ] && lun_mib=16

start_daemon() { # pass
	cat > "$work/cofferd.conf" <<-CONF
	[cofferd]
	socket = $sock
	state_dir = $work/state-$1
	cache_size = 0
	nbd_socket = $work/nbd-coffer.sock
	direct_io = $([ "$1" = direct ] && echo yes || echo no)
	io_inline = $([ "$1" = direct ] || [ "$1" = rados ] && echo no || echo yes)
	$([ -n "$workers" ] && echo "workers = $workers")
	$([ -n "$loops" ] && echo "loops = $loops")
	ceph_conf = $ceph_conf
	log_level = warning
	log_target = $out/cofferd-$1.log
	CONF
	# a crash leaves a core in $out for the daemon's developers
	(ulimit -c unlimited 2>/dev/null; cd "$out" && exec "$COFFERD" -f -c "$work/cofferd.conf") &
	daemon_pid=$!
	i=0
	until c ping >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -gt 100 ] && die "cofferd did not start; see $out/cofferd-$1.log"
		kill -0 "$daemon_pid" 2>/dev/null || die "cofferd exited; see $out/cofferd-$1.log"
		sleep 0.1
	done
}

stop_daemon() {
	kill -TERM "$daemon_pid"
	wait "$daemon_pid" || die "cofferd did not stop cleanly"
	daemon_pid=
}

make_pools() { # lundir pass
	ld=$1 kind=$2
	p=1
	while [ $p -le $pools ]; do
		set --
		l=0
		while [ $l -lt $luns ]; do
			# a mirror pass pairs the LUNs: mirror lun0 lun1 mirror lun2 lun3 ...
			[ "$kind" = mirror ] && [ $((l % 2)) = 0 ] && set -- "$@" mirror
			set -- "$@" "$ld/p$p-lun$l"
			l=$((l + 1))
		done
		c pool create -s "$([ "$kind" = mirror ] && echo $((pass_lun_mib * 2)) || echo $pass_lun_mib)M" \
			"p$p" "$@" >/dev/null
		p=$((p + 1))
	done
}

make_suite() { # suite [sparse]: an encryption root per pool, datasets round robin over pools
	p=1
	while [ $p -le $pools ]; do
		if [ "$1" = clear ]; then
			c create -o primarycache=metadata "p$p/$1" >/dev/null
		else
			c create -o encryption="$1" -o keyformat=raw -o keylocation="file://$work/key" \
				-o primarycache=metadata "p$p/$1" >/dev/null
		fi
		p=$((p + 1))
	done
	d=0
	while [ $d -lt $datasets ]; do
		c create -V "${size}M" ${2:+-s} -b 8k "p$((d % pools + 1))/$1/d$d"
		d=$((d + 1))
	done
}

destroy_suite() {
	p=1
	while [ $p -le $pools ]; do
		c destroy -r "p$p/$1"
		p=$((p + 1))
	done
}

# Wait until the txg holding a fill is on the LUNs of every pool (a flush of
# a dataset in each): a fill returns when its writes are acknowledged, and
# the commit that follows (their block pointers, gigabytes of records at the
# default shape) would otherwise run into the first measurement after it.
settle() { # suite
	p=1
	while [ $p -le $pools ] && [ $p -le $datasets ]; do
		c flush "p$p/$1/d$((p - 1))" || return 1
		p=$((p + 1))
	done
}

# Sequential 1 MiB writes over every dataset of the suite (* for every suite
# at once), then its txg on the LUNs.
fill_suite() { # pass round suite|*
	cat > "$work/fill.parm" <<-PARM
	sd=sd1,dataset=p*/$3/d*,threads=2
	wd=fill,sd=sd1,rdpct=0,seekpct=eof,xfersize=1m
	rd=fill,wd=fill,iorate=max,elapsed=10h,interval=5
	PARM
	fill_of=$3 fill_tag=$3
	[ "$3" = "*" ] && fill_of=$suites fill_tag=all
	echo "== $1 round $2: $fill_of: fill $datasets x ${size} MiB" >&2
	c bench -q --socket "$sock" "$work/fill.parm" > "$out/$1-$fill_tag-r$2-fill.txt" || return 1
	for x in $fill_of; do
		settle "$x" || return 1
	done
}

# A suite's reads: the maximum, then the curve.
read_run() { # pass round suite
	tag=$1-$3-r$2
	[ "$3" != clear ] || tag=$tag${beside:+-by-$beside}
	# the curve is clear's: once clear's maximum is known, every suite is
	# offered the same rates, those of clear's last run (where suites are
	# paired with clear, the one beside it in odd rounds, of the pair
	# before in even ones), so a suite that cannot hold them shows it
	rates=
	[ "$3" != clear ] && [ -n "$clear_max" ] &&
		rates=$(echo "$curve" | tr ',' '\n' | awk -v m="$clear_max" '{ printf "%s%.0f", (NR > 1 ? "," : ""), m * $1 / 100 }')
	{
		echo "* $datasets datasets, 8 KiB random reads, queue depth 2 each"
		echo "sd=sd1,dataset=p*/$3/d*,threads=2"
		echo "wd=rr,sd=sd1,rdpct=100,seekpct=random,xfersize=8k"
		if [ -n "$rates" ]; then
			echo "rd=rr,wd=rr,iorate=max,elapsed=$elapsed,warmup=$warmup,interval=1"
			echo "rd=rc,wd=rr,iorate=($rates),elapsed=$elapsed,warmup=$warmup,interval=1"
		else
			echo "rd=rr,wd=rr,iorate=curve,curve=($curve),elapsed=$elapsed,warmup=$warmup,interval=1"
		fi
	} > "$work/read.parm"
	echo "== $1 round $2: $3: 8k random reads, max then curve (${rates:-$curve% of its maximum})" >&2
	c bench -q --socket "$sock" --json "$out/$tag.json" --csv "$out/$tag.csv" \
		"$work/read.parm" > "$out/$tag.txt" || { failed "$@"; return 1; }
	max_row "$1" "$2" "$3" "$tag" "$rates"
	[ "$3" = clear ] && clear_max=$(awk -F, -v p="$1" -v r="$2" '$1 == p && $2 == r && $3 == "clear" { m = $4 } END { print m }' "$work/rows.csv")
	rss "$1" "$2" "$3" read
}

# A suite's writes, then their txg on the LUNs, not in the next run.
write_run() { # pass round suite
	tag=$1-$3-r$2
	[ "$3" != clear ] || tag=$tag${beside:+-by-$beside}
	cat > "$work/write.parm" <<-PARM
	* $datasets datasets, 8 KiB random writes, queue depth 2 each, sync=standard
	sd=sd1,dataset=p*/$3/d*,threads=2
	wd=rw,sd=sd1,rdpct=0,seekpct=random,xfersize=8k
	rd=rw,wd=rw,iorate=max,elapsed=$elapsed,warmup=$warmup,interval=1
	PARM
	echo "== $1 round $2: $3: 8k random writes" >&2
	c bench -q --socket "$sock" --json "$out/$tag-write.json" --csv "$out/$tag-write.csv" \
		"$work/write.parm" > "$out/$tag-write.txt" || { failed "$1-write" "$2" "$3"; return 1; }
	max_row "$1-write" "$2" "$3" "$tag-write"
	rss "$1" "$2" "$3" write
	settle "$3" || { failed "$1-write" "$2" "$3"; return 1; }
}

# A suite filled (unless kept), its reads, its writes; on the mirror pass the
# scrub slices.
run_suite() { # pass round suite
	[ -n "$keep" ] || fill_suite "$@" || { failed "$@"; return; }
	read_run "$@" || return 0
	write_run "$@" || return 0
	[ "$1" = mirror ] || return 0
	# the reads again in short slices, every other one while each pool scrubs
	# at scrub_rate: idle, scrub, idle, scrub...; a ratio of neighbours taken
	# seconds apart stands machine drift better than two long runs
	echo "== $1 round $2: $3: 8k random reads, slices without and with a scrub" >&2
	sed -e "s/iorate=curve,curve=([^)]*)/iorate=max/" -e "/^rd=rc,/d" -e "s/elapsed=$elapsed/elapsed=$slice/" \
		-e "s/warmup=$warmup/warmup=1/" "$work/read.parm" > "$work/slice.parm"
	k=1
	while [ $k -le $slices ]; do
		slice_run "$@" idle $k
		scrubbing start
		slice_run "$@" scrub $k
		scrubbing stop
		k=$((k + 1))
	done
	return 0
}

# Wait until the disk under the LUNs serves reads at a steady rate: runs of
# 3 s until two in a row agree within 5 % (at most 20). After gigabytes of
# fills the host's disk writes them back for minutes, and the reads first in
# line ran at a third of the rate of the same reads later. Every suite's
# datasets are read alike, so that none is warmer in the host's cache.
quiesce() { # pass
	printf 'sd=sd1,dataset=p*/*/d*,threads=2\nwd=q,sd=sd1,rdpct=100,seekpct=random,xfersize=8k\nrd=q,wd=q,iorate=max,elapsed=3,interval=1\n' \
		> "$work/quiesce.parm"
	echo "== $1: reads until the disk is steady after the fills" >&2
	prev=0 k=0
	while [ $k -lt 20 ]; do
		c bench -q --socket "$sock" --csv "$work/quiesce.csv" "$work/quiesce.parm" >/dev/null || return 0
		now=$(awk -F, '$4 ~ /^avg/ { print int($6); exit }' "$work/quiesce.csv")
		now=${now:-0}
		echo "$1,quiesce,$k,$now" >> "$out/quiesce.csv"
		[ "$prev" -gt 0 ] && [ $((now * 100)) -ge $((prev * 95)) ] && [ $((now * 100)) -le $((prev * 105)) ] && return 0
		prev=$now k=$((k + 1))
	done
}

slice_run() { # pass round suite idle|scrub k: one slice, its row as pass-idle or pass-scrub
	st=$1-$3-r$2-$4$5
	c bench -q --socket "$sock" --json "$out/$st.json" --csv "$out/$st.csv" \
		"$work/slice.parm" > "$out/$st.txt" || { failed "$1-$4" "$2" "$3"; return 0; }
	max_row "$1-$4" "$2" "$3" "$st"
}

scrubbing() { # start | stop: every pool scrubbing, started again as it ends, or none
	p=1
	if [ "$1" = stop ]; then
		rm -f "$work/scrubbing"
		wait "$scrubber" || true
		while [ $p -le $pools ]; do
			c pool scrub -s "p$p" >/dev/null 2>&1 || true
			p=$((p + 1))
		done
		return 0
	fi
	while [ $p -le $pools ]; do
		c pool scrub "p$p" >/dev/null 2>&1 || true
		p=$((p + 1))
	done
	: > "$work/scrubbing"
	(while [ -e "$work/scrubbing" ]; do
		p=1
		while [ $p -le $pools ]; do
			c pool scrub "p$p" >/dev/null 2>&1 || true
			p=$((p + 1))
		done
		sleep 0.2
	done) &
	scrubber=$!
}

# The rows of a run: its first avg row is the max (row PASS); the ones after
# it are the curve's points, in the order of --curve (rows PASS@PCT), each
# with the rate offered: @rates, or a share of the max of the same run.
max_row() { # pass round suite tag [rates]
	awk -F, -v pass="$1" -v round="$2" -v suite="$3" -v json="$4.json" -v curve="$curve" \
		-v rates="${5:-}" '
		BEGIN { split(curve, pct, ","); nr = split(rates, rate, ",") }
		$4 ~ /^avg/ && !seen[$1]++ {
			k++
			name = k == 1 ? pass : pass "@" pct[k - 1]
			if (k == 1) max = $6
			offered = k == 1 ? "" : nr ? rate[k - 1] : sprintf("%.0f", max * pct[k - 1] / 100)
			print name "," round "," suite "," $6 "," $10 "," $20 "," $17 "," json "," offered
		}
	' "$out/$4.csv" >> "$work/rows.csv"
}

rss() { # pass round suite phase: the daemon's private memory right after a run, and its datasets
	awk -v p="$1,$2,$3,$4" -v n="$(c list -H -o name 2>/dev/null | wc -l)" \
		'/^RssAnon:/ { print p "," $2 "," n }' "/proc/$daemon_pid/status" \
		>> "$out/rss.csv" 2>/dev/null || true
}

# fio's terse line: IOPS, mean completion latency and its p99 in ms, fio's CPU %
fio_row() { # pass round name terse-file json-file [rate offered]
	awk -F';' -v pass="$1" -v round="$2" -v name="$3" -v json="$5" -v offered="${6:-}" '
		NR == 1 {
			p99 = 0
			for (i = 18; i <= 37; i++) if ($i ~ /^99\.000000%=/) { sub(/.*=/, "", $i); p99 = $i }
			printf "%s,%s,%s,%.1f,%.3f,%.3f,%.1f,%s,%s\n", pass, round, name, $8, $16 / 1000,
			       p99 / 1000, $88 + $89, json, offered
		}' "$4" >> "$work/rows.csv"
}

# The peers of a pass, at the same total queue depth as coffer bench (2 x datasets:
# two connections, as coffer bench opens with two CPUs, of queue depth datasets).
peer() { # pass round lundir
	command -v fio >/dev/null 2>&1 || { echo "== no fio: peer rows skipped" >&2; return; }
	pp=$1 pr=$2 pd=$3
	set -- --rw=randread --bs=8k --numjobs=2 --iodepth="$datasets" \
		--time_based --runtime="$elapsed" --ramp_time="$warmup" --group_reporting \
		--size="$((datasets * size))M"
	case $pp in
	direct)
		# every LUN file of the pass (a filename= list would pass fio's 4 KiB
		# limit), at the maximum, then at the curve's rates of clear's maximum
		# of this round: what the disk holds at them with no store in the way
		for pct in max ${clear_max:+$(echo "$curve" | tr ',' ' ')}; do
			row=$pp@$pct tag=fio$pct rate= limit=
			if [ "$pct" = max ]; then
				row=$pp tag=fio
			else
				rate=$(awk -v m="$clear_max" -v p="$pct" 'BEGIN { printf "%.0f", m * p / 100 }')
				limit=--rate_iops=$(((rate + 1) / 2))
			fi
			echo "== $pp round $pr: fio io_uring O_DIRECT on the LUN files${rate:+ at $rate IOPS ($pct% of clear)}" >&2
			fio --name=peer --ioengine=io_uring --direct=1 --opendir="$pd" "$@" ${limit:+"$limit"} \
				--output-format=terse --output="$out/$pp-$tag-r$pr.terse" \
				>"$out/$pp-$tag-r$pr.log" 2>&1 ||
				{ echo "encryption.sh: fio io_uring failed; see $out/$pp-$tag-r$pr.log" >&2; return; }
			fio_row "$row" "$pr" fio-io_uring "$out/$pp-$tag-r$pr.terse" "$pp-$tag-r$pr.terse" "$rate"
		done
		;;
	shm)
		command -v nbdkit >/dev/null 2>&1 || { echo "== no nbdkit: peer row skipped" >&2; return; }
		room_for_image || return 0
		echo "== $pp round $pr: nbdkit file plugin, fio nbd" >&2
		fallocate -l "$((datasets * size))M" "$pd/peer.img"
		rm -f "$work/nbd.sock" "$work/nbd.pid"
		nbdkit -U "$work/nbd.sock" -P "$work/nbd.pid" -r file "$pd/peer.img" ||
			{ rm -f "$pd/peer.img"; echo "encryption.sh: nbdkit failed" >&2; return; }
		i=0
		while [ ! -S "$work/nbd.sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
		fio --name=peer --ioengine=nbd --uri="nbd+unix:///?socket=$work/nbd.sock" "$@" \
			--output-format=terse --output="$out/$pp-nbdkit-r$pr.terse" \
			>"$out/$pp-nbdkit-r$pr.log" 2>&1 &&
			fio_row "$pp" "$pr" nbdkit-fio "$out/$pp-nbdkit-r$pr.terse" "$pp-nbdkit-r$pr.terse" ||
			echo "encryption.sh: fio nbd failed; see $out/$pp-nbdkit-r$pr.log" >&2
		# nbdkit leaves its socket behind; the next round binds it again
		nbd_pid=$(cat "$work/nbd.pid")
		kill "$nbd_pid" 2>/dev/null || true
		while kill -0 "$nbd_pid" 2>/dev/null; do sleep 0.1; done
		rm -f "$pd/peer.img" "$work/nbd.sock"
		;;
	esac
}

# Is there memory for nbdkit's image of every dataset on tmpfs, and a GiB
# more? tmpfs keeps every page a LUN ever held, and the OOM killer took the
# benchmark when the image came on top of LUNs for two suites.
room_for_image() {
	room=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
	[ "${room:-0}" -ge $((datasets * size + 1024)) ] && return 0
	echo "== ${room:-0} MiB of memory left: no room for nbdkit's file image; its row skipped" >&2
	return 1
}

# CPU ticks (user + system) of process @1 so far
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# fio --ioengine=nbd, one job of queue depth 2 per dataset: @uri_of prints job i's URI
# and options. The server's CPU per I/O goes to nbd-cpu.csv.
fio_nbd() { # pass round name server-pid uri_of
	fp=$1 fr=$2 fn=$3 spid=$4 uri_of=$5
	ft=$fn-r$fr
	[ "$fn" != clear ] || ft=$ft${beside:+-by-$beside}
	{
		printf '[global]\nioengine=nbd\nrw=randread\nbs=8k\niodepth=2\ntime_based\n'
		printf 'runtime=%s\nramp_time=%s\ngroup_reporting\nsize=%sM\n' "$elapsed" "$warmup" "$size"
		i=0
		while [ $i -lt "$datasets" ]; do
			printf '[d%s]\n' "$i"
			"$uri_of" "$i"
			i=$((i + 1))
		done
	} > "$work/nbd.fio"
	# the server's CPU ticks every quarter second, for a window of the steady load
	( while :; do echo "$(date +%s.%N) $(cpu_ticks "$spid")"; sleep 0.25; done ) > "$work/ticks" &
	sampler=$!
	fio --output-format=terse --output="$out/$fp-$ft.terse" "$work/nbd.fio" \
		>"$out/$fp-$ft.log" 2>&1 ||
		{ kill "$sampler"; echo "encryption.sh: fio nbd ($fn) failed; see $out/$fp-$ft.log" >&2; return 1; }
	w1=$(date +%s.%N)
	kill "$sampler" 2>/dev/null || true
	wait "$sampler" 2>/dev/null || true
	fio_row "$fp" "$fr" "$fn" "$out/$fp-$ft.terse" "$fp-$ft.terse"
	# The server's CPU in the row, not fio's, over the last elapsed - 1 seconds
	# of the run up to half a second before fio ended: the load alone, not the
	# setup of its connections (for luks a key unlock each) nor the ramp. Into
	# nbd-cpu.csv: that and the CPU time per I/O of the server and of the client
	# (fio's own CPU per job, times its jobs): no server can serve more than
	# the machine's CPUs over the client's time per I/O.
	awk -F, -v OFS=, -v hz="$(getconf CLK_TCK)" -v end="$w1" -v span=$((elapsed > 1 ? elapsed - 1 : 1)) \
		-v ticksf="$work/ticks" -v cpuf="$out/nbd-cpu.csv" -v jobs="$datasets" \
		-v client="$(awk -F';' '{ print $88 + $89 }' "$out/$fp-$ft.terse")" '
		FILENAME == ticksf { # "time ticks"
			split($0, f, " ")
			if (f[1] <= end - 0.5 - span && (!ta || f[1] > ta)) { ta = f[1]; ka = f[2] }
			if (f[1] <= end - 0.5 && f[1] > tb) { tb = f[1]; kb = f[2] }
			next
		}
		{ rows[++n] = $0 }
		END {
			for (i = 1; i < n; i++) print rows[i]
			$0 = rows[n]
			share = tb > ta ? (kb - ka) / hz / (tb - ta) : 0
			$7 = sprintf("%.1f", 100 * share)
			print
			print $1, $2, $3, $4, $7, ($4 > 0 ? sprintf("%.1f", 1e6 * share / $4) : "-"),
			      ($4 > 0 ? sprintf("%.1f", client * jobs * 1e4 / $4) : "-") >> cpuf
		}' "$work/ticks" "$work/rows.csv" > "$work/rows.tmp" && mv "$work/rows.tmp" "$work/rows.csv"
}

coffer_uri() { printf 'uri=nbd+unix:///p%s/%s/d%s?socket=%s\n' $(($1 % pools + 1)) "$nbd_suite" "$1" "$work/nbd-coffer.sock"; }
nbdkit_uri() { printf 'uri=nbd+unix:///?socket=%s\noffset=%sM\n' "$work/nbdkit.sock" $(($1 * size)); }

nbd_read() { # round suite
	echo "== nbd round $1: $2: fio nbd, 8k random reads, qd 2 per dataset" >&2
	nbd_suite=$2
	fio_nbd nbd "$1" "$2" "$daemon_pid" coffer_uri || failed nbd "$1" "$2"
}

in_suites() { case " $suites " in *" $1 "*) return 0 ;; esac; return 1; }

# The IOPS of the last run of row @3 of pass @1 in round @2, if it ran.
row_iops() { awk -F, -v p="$1" -v r="$2" -v n="$3" -v from="${4:-0}" 'NR > from && $1 == p && $2 == r && $3 == n { v = $4 } END { print v }' "$work/rows.csv"; }
rows_mark() { wc -l < "$work/rows.csv"; }

# Row @3 beside row @4, both of pass @1 and round @2, into pairs.csv: the
# table's ratios of such a pass are the medians over the rounds of such
# neighbours' ratios.
pair() { # pass round a b [rows before the runs compared]
	a=$(row_iops "$1" "$2" "$3" "${5:-0}") b=$(row_iops "$1" "$2" "$4" "${5:-0}")
	[ -n "$a" ] && [ -n "$b" ] && echo "$1,$2,$3,$4,$a,$b" >> "$out/pairs.csv"
	return 0
}

# A round of the nbd pass. Its rows are compared seconds apart, as the
# mirror pass's slices are: the host's rate drifts within minutes, and a
# suite filled and read after clear's run (6 GiB a fill at the default
# shape) was read minutes after it; the same daemon read aes-256-ccm at
# 0.82 of clear so, and at 0.94 in runs alternated seconds apart. So clear
# stays filled all the pass, and every other suite, in the round's order, is
# filled (unless kept) and read right beside a run of clear, which goes
# first in odd rounds and second in even ones. The peers (nbd_floor, nbdkit
# file, nbdkit file + luks) follow the pair of aes-256-ccm, else of the
# round's last suite, so each is measured beside a run of clear and of it.
nbd_round() { # round order lundir
	nr=$1 nld=$3
	if ! in_suites clear; then # nothing to pair: each suite, then the peers
		for s in $2; do
			[ -n "$keep" ] || { make_suite "$s"; fill_suite nbd "$nr" "$s" || { failed nbd "$nr" "$s"; destroy_suite "$s"; continue; }; }
			nbd_read "$nr" "$s"
			[ -n "$keep" ] || destroy_suite "$s"
		done
		nbd_peers "$nr" "$nld"
		return
	fi
	others=$(for s in $2; do [ "$s" = clear ] || echo "$s"; done)
	[ -n "$others" ] || { nbd_read "$nr" clear; nbd_peers "$nr" "$nld"; return; }
	last=$(echo "$others" | tail -n 1)
	in_suites aes-256-ccm && last=aes-256-ccm
	for s in $others; do
		if [ -z "$keep" ]; then
			make_suite "$s" sparse
			if ! fill_suite nbd "$nr" "$s"; then
				failed nbd "$nr" "$s"
				destroy_suite "$s"
				[ "$s" != "$last" ] || nbd_peers "$nr" "$nld"
				continue
			fi
		fi
		mark=$(rows_mark) beside=$s
		if [ $((nr % 2)) = 1 ]; then
			nbd_read "$nr" clear
			nbd_read "$nr" "$s"
		else
			nbd_read "$nr" "$s"
			nbd_read "$nr" clear
		fi
		beside=
		pair nbd "$nr" "$s" clear "$mark"
		[ "$s" = "$last" ] && nbd_peers "$nr" "$nld" "$s" "$mark"
		[ -n "$keep" ] || destroy_suite "$s"
	done
}

# A round of the shm pass, paired as the nbd pass's rounds are: clear stays
# filled, and every other suite (filled first where the suites do not all
# fit, as at the default shape on tmpfs) is read, then written, right beside
# a run of clear (first in odd rounds, second in even ones), so that its
# read and write ratios are of runs seconds apart (pairs.csv). Filled
# before each of their runs, the suites' writes had been compared with
# clear's minutes apart. Where they all stay filled (the quick shape) the
# pass runs every round of reads, then every round of writes (@4, the
# phase: reads or writes; all where each suite is filled for its pair).
# The peer follows the round's first pair.
#
# Not the O_DIRECT pass, where the caches under a read (the host's, under
# the VM's disk; ours, of the metadata) favour the suite read most: paired
# so, clear is read four times a round and every other suite once, and at
# 192 datasets of 16 MiB aes-256-gcm read at 0.21-0.41 of clear, its
# daemon at half clear's CPU (waiting, not working), fio on clear's LUN
# files as fast as clear; the one pair right after every suite had been
# read alike (the reads that settle the disk) had aes-128-ccm at 1.07.
# There every suite is read once a round, in a rotated order.
shm_round() { # round order lundir phase
	sr=$1 sld=$3 sph=$4 speer=1
	if [ -z "$(for s in $2; do [ "$s" = clear ] || echo "$s"; done)" ]; then
		[ "$sph" = writes ] || read_run shm "$sr" clear || true
		[ "$sph" = reads ] || write_run shm "$sr" clear || true
		[ "$sph" = writes ] || peer shm "$sr" "$sld"
		return 0
	fi
	for s in $2; do
		[ "$s" != clear ] || continue
		if [ -z "$keep" ]; then
			make_suite "$s"
			fill_suite shm "$sr" "$s" || { failed shm "$sr" "$s"; destroy_suite "$s"; continue; }
		fi
		mark=$(rows_mark)
		if [ $((sr % 2)) = 1 ]; then set -- clear "$s"; else set -- "$s" clear; fi
		beside=$s
		if [ "$sph" != writes ]; then
			for x in "$@"; do read_run shm "$sr" "$x" || true; done
		fi
		if [ "$sph" != reads ]; then
			for x in "$@"; do write_run shm "$sr" "$x" || true; done
		fi
		beside=
		[ "$sph" = writes ] || pair shm "$sr" "$s" clear "$mark"
		[ "$sph" = reads ] || pair shm-write "$sr" "$s" clear "$mark"
		if [ "$sph" != writes ] && [ -n "$speer" ]; then
			peer shm "$sr" "$sld"
			speer=
		fi
		[ -n "$keep" ] || destroy_suite "$s"
	done
}

# nbdkit with @@ as its plugin arguments on $work/nbdkit.sock, fio against it, stopped.
nbdkit_row() { # round name nbdkit-args...
	kr=$1 kn=$2
	shift 2
	rm -f "$work/nbdkit.sock" "$work/nbdkit.pid"
	nbdkit -U "$work/nbdkit.sock" -P "$work/nbdkit.pid" "$@" ||
		{ echo "encryption.sh: nbdkit ($kn) failed" >&2; return; }
	i=0
	# nbdkit forks: its socket and its pid file come a moment after it returns
	while { [ ! -S "$work/nbdkit.sock" ] || [ ! -s "$work/nbdkit.pid" ]; } && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kpid=$(cat "$work/nbdkit.pid" 2>/dev/null) ||
		{ echo "encryption.sh: nbdkit ($kn) did not start" >&2; return; }
	echo "== nbd round $kr: $kn, fio nbd" >&2
	fio_nbd nbd "$kr" "$kn" "$kpid" nbdkit_uri || true
	kill "$kpid" 2>/dev/null || true
	while kill -0 "$kpid" 2>/dev/null; do sleep 0.1; done
}

# The floor: nbd_floor (contrib/bench) stores nothing and answers every read
# with zeros, a thread per core sending its replies as cofferd's loops do,
# so its row is what this client and these cores leave for any server.
floor_row() { # round
	[ -x "${NBD_FLOOR:-}" ] || { echo "== no nbd_floor: the floor row is skipped" >&2; return; }
	rm -f "$work/floor.sock"
	"$NBD_FLOOR" "$work/floor.sock" "$((datasets * size * 1048576))" > "$work/floor.out" &
	fpid=$!
	i=0
	while ! grep -q ready "$work/floor.out" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	echo "== nbd round $1: nbd-floor, fio nbd" >&2
	fio_nbd nbd "$1" nbd-floor "$fpid" floor_uri || true
	kill "$fpid" 2>/dev/null || true
	wait "$fpid" 2>/dev/null || true
}
floor_uri() { printf 'uri=nbd+unix:///?socket=%s\noffset=%sM\n' "$work/floor.sock" $(($1 * size)); }

# The nbd pass's peers: the floor, nbdkit's file plugin, and the same under
# its luks filter; each paired with clear's run and @3's just before them.
nbd_peers() { # round lundir [suite]
	floor_row "$1"
	img=$2/peer.img
	if ! command -v nbdkit >/dev/null 2>&1; then
		echo "== no nbdkit: nbd peer rows skipped" >&2
	elif room_for_image && fallocate -l "$((datasets * size))M" "$img"; then
		nbdkit_row "$1" nbdkit-file file "$img"
	fi
	rm -f "$img"
	if ! command -v nbdkit >/dev/null 2>&1; then
		:
	elif command -v qemu-img >/dev/null 2>&1; then
		# made once a pass (sparse: a header), and again when it failed:
		# qemu-img times its key's PBKDF and on a busy machine can
		# refuse ("Unable to get accurate CPU usage")
		luks=$2/peer-luks.img
		k=0
		while [ ! -s "$luks" ] && [ $k -lt 3 ]; do
			qemu-img create -q -f luks --object secret,id=s0,data=benchpass \
				-o key-secret=s0,cipher-alg=aes-256,cipher-mode=xts,iter-time=10 \
				"$luks" "$((datasets * size))M" || rm -f "$luks"
			k=$((k + 1))
		done
		if [ -s "$luks" ]; then
			nbdkit_row "$1" nbdkit-luks file "$luks" --filter=luks passphrase=benchpass
		else
			echo "encryption.sh: qemu-img create of the luks image failed; the row is skipped" >&2
		fi
	else
		echo "== no qemu-img: the nbdkit luks row is skipped" >&2
	fi
	for k in nbd-floor nbdkit-file nbdkit-luks; do
		in_suites clear && pair nbd "$1" clear "$k" "${4:-0}"
		[ -n "${3:-}" ] && [ "$3" != clear ] && pair nbd "$1" "$3" "$k" "${4:-0}"
	done
	return 0
}

# A failed run is noted and the benchmark goes on: if cofferd died, it is
# started again on the same state (its pools come back) with the keys loaded.
failed() { # pass round suite
	echo "encryption.sh: $1 round $2: $3 failed; see $out/$1-$3-r$2*.txt" >&2
	echo "$1,$2,$3,FAILED" >> "$work/failed.csv"
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		wait "$daemon_pid" 2>/dev/null || echo "encryption.sh: cofferd died (status $?)" >&2
		start_daemon "$pass"
		c load-key -a >/dev/null 2>&1 || true
	fi
}

# The targets, each met or not, from the medians and the RSS samples: those
# of the issue that spread the data path over every core (direct within 3%
# of clear and at clear's rates, an aes-256-ccm read on tmpfs at most 1.3 us
# of daemon CPU more than a clear one and 0.90 of its IOPS, writes, NBD
# against nbdkit with the same client, memory).
targets() {
	awk -F, -v rssfile="$out/rss.csv" -v nbdcpu="$out/nbd-cpu.csv" -v curve="$curve" -v ncpu="$(nproc)" \
	    -v suites="$suites" -v pairs="$out/pairs.csv" '
		FILENAME == rssfile {
			if ($5 > rss[$4]) rss[$4] = $5
			# the bound is for the datasets of one suite: judged
			# where the fewest datasets were open (a pass that keeps every
			# suite side by side holds that many per suite)
			if ($4 == "read" && $6 && (!fewest || $6 < fewest)) { fewest = $6; rss_few = 0 }
			if ($4 == "read" && $6 == fewest && $5 > rss_few) rss_few = $5
			next
		}
		# pass,round,a,b,IOPS of a,IOPS of b: rows measured side by side
		FILENAME == pairs { if ($6 > 0) { k = $1 "," $3 "," $4; pv[k, ++pn[k]] = $5 / $6 }; next }
		# pass,round,server,IOPS,CPU%,us per I/O: the mean over the rounds
		FILENAME == nbdcpu { if ($6 > 0) { srvsum[$3] += $6; srvn[$3]++ }
				     if ($7 > 0 && (!cli || $7 < cli)) cli = $7; next }
		{ iops[$1 "," $2] = $3; resp[$1 "," $2] = $4; ratio[$1 "," $2] = $7; held[$1 "," $2] = $10
		  if ($3 > 0) us[$1 "," $2] = 1e4 * $6 / $3 }
		# the daemon CPU a read of @a costs over one of @b, in microseconds
		function extra(what, a, b, max,    have) {
			have = (a in us) && (b in us) ? sprintf("%+.2f us", us[a] - us[b]) : "-"
			line(what, have, have != "-" && us[a] - us[b] <= max)
		}
		function line(what, have, ok) {
			printf "  %-58s %-22s %s\n", what, have, have == "-" ? "not measured" : ok ? "met" : "NOT MET"
		}
		function every(pass, min,    i, n, s, lo, have) {
			n = split(suites, s, " ")
			lo = 9
			for (i = 1; i <= n; i++)
				if (s[i] != "clear" && (pass "," s[i]) in ratio && ratio[pass "," s[i]] < lo)
					lo = ratio[pass "," s[i]]
			have = lo == 9 ? "-" : sprintf("lowest %.3f", lo)
			line(pass ": every suite >= " min " of clear", have, lo >= min)
		}
		# the median over the rounds of the ratios of pair @k
		function pmed(k,    m, i, j, t, a) {
			m = pn[k]
			for (i = 1; i <= m; i++) a[i] = pv[k, i]
			for (i = 2; i <= m; i++)
				for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
			return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		}
		# @a over @b ("pass,row"): of the rows measured side by side where
		# they were, else of the medians
		function vs(what, a, b, min,    have, pair) {
			pair = a "," substr(b, index(b, ",") + 1)
			if (pn[pair])
				have = sprintf("%.2f", pmed(pair))
			else
				have = (a in iops) && (b in iops) && iops[b] > 0 ? sprintf("%.2f", iops[a] / iops[b]) : "-"
			line(what, have, have != "-" && have + 0 >= min)
		}
		# every suite within @tol of @ref: the ratio furthest from 1
		function within(pass, ref, tol,    i, n, s, r, far, have) {
			n = split(suites, s, " ")
			far = 1
			for (i = 1; i <= n; i++) {
				if (s[i] == "clear" || !(ratio[pass "," s[i]] > 0) || !(ratio[pass "," ref] > 0))
					continue
				r = ratio[pass "," s[i]] / ratio[pass "," ref]
				if ((r > 1 ? r - 1 : 1 - r) > (far > 1 ? far - 1 : 1 - far)) far = r
			}
			have = (pass "," ref) in iops ? sprintf("furthest %.3f", far) : "-"
			line(pass ": every suite within " tol * 100 "% of " ref, have,
			     (far > 1 ? far - 1 : 1 - far) <= tol)
		}
		# a curve point: every suite holds the rate offered, at a mean response
		# time within 10% of clear at the same rate
		function point(pass,    i, n, s, lo, worst, have) {
			n = split(suites, s, " ")
			lo = 9
			worst = 0
			for (i = 1; i <= n; i++) {
				if (!((pass "," s[i]) in held) || held[pass "," s[i]] == "-") continue
				if (held[pass "," s[i]] < lo) lo = held[pass "," s[i]]
				if (s[i] != "clear" && resp[pass ",clear"] > 0 &&
				    resp[pass "," s[i]] / resp[pass ",clear"] > worst)
					worst = resp[pass "," s[i]] / resp[pass ",clear"]
			}
			have = lo == 9 ? "-" : sprintf("lowest %.3f", lo)
			line(pass ": every suite >= 0.99 of the rate offered", have, lo >= 0.99)
			have = worst == 0 ? "-" : sprintf("highest %.3f", worst)
			line(pass ": mean response <= 1.10 x clear", have, worst <= 1.10)
			# the limit itself: the disk read at the same rate with no store in the way
			if ((pass ",fio-io_uring") in held && held[pass ",fio-io_uring"] != "-")
				printf "  (%s: fio io_uring on the LUN files held %.3f of the rate, %.3f ms mean;" \
				       " clear held %s, %.3f ms)\n", pass, held[pass ",fio-io_uring"],
				       resp[pass ",fio-io_uring"], held[pass ",clear"], resp[pass ",clear"]
		}
		END {
			print "targets (medians of the rounds):"
			every("direct", 0.97)
			vs("shm: aes-256-ccm >= 0.90 of clear", "shm,aes-256-ccm", "shm,clear", 0.90)
			extra("shm: aes-256-ccm read <= clear + 1.3 us of CPU", "shm,aes-256-ccm",
			      "shm,clear", 1.3)
			# the same at a rate both held: the maxima are two different loads
			np = split(curve, pct, ",")
			for (i = 1; i <= np; i++) {
				k = "shm@" pct[i]
				if ((k ",aes-256-ccm") in us && (k ",clear") in us &&
				    held[k ",aes-256-ccm"] >= 0.99 && held[k ",clear"] >= 0.99)
					printf "  (%s, where both held the rate: aes-256-ccm read = clear %+.2f us)\n",
					       k, us[k ",aes-256-ccm"] - us[k ",clear"]
			}
			# what the client alone allows: the CPUs over the least time per I/O of fio
			if (cli > 0 && ("nbd,nbdkit-file" in iops))
				printf "  %-58s %-22s %s\n", "nbd: fio alone takes " cli " us of CPU an I/O: any server <=",
				       sprintf("%.0f IOPS", ncpu * 1e6 / cli),
				       sprintf("(%.2fx nbdkit file)", ncpu * 1e6 / cli / iops["nbd,nbdkit-file"])
			# what a server that stores nothing reaches with the same client
			if (("nbd,nbd-floor" in iops) && ("nbd,nbdkit-file" in iops))
				printf "  %-58s %-22s %s\n", "nbd: nbd_floor (no storage, zeros) reaches",
				       sprintf("%.0f IOPS", iops["nbd,nbd-floor"]),
				       sprintf("(%.2fx nbdkit file)", iops["nbd,nbd-floor"] / iops["nbd,nbdkit-file"])
			vs("nbd: clear >= 2x nbdkit file plugin", "nbd,clear", "nbd,nbdkit-file", 2)
			vs("nbd: aes-256-ccm >= 2.5x nbdkit file + luks", "nbd,aes-256-ccm", "nbd,nbdkit-luks", 2.5)
			vs("nbd: aes-256-ccm >= 0.90 of clear", "nbd,aes-256-ccm", "nbd,clear", 0.90)
			within("nbd", "aes-256-ccm", 0.10)
			for (k in srvn)
				if (k !~ /^nbd/ && srvsum[k] / srvn[k] > worst_us)
					worst_us = srvsum[k] / srvn[k]
			kit_us = srvn["nbdkit-file"] ? srvsum["nbdkit-file"] / srvn["nbdkit-file"] : 0
			have = worst_us && kit_us ? sprintf("highest %.2f of nbdkit file", worst_us / kit_us) : "-"
			line("nbd: cofferd CPU per I/O <= half of nbdkit file", have,
			     have != "-" && worst_us / kit_us <= 0.5)
			vs("direct: clear >= 0.90 of fio io_uring", "direct,clear", "direct,fio-io_uring", 0.90)
			np = split(curve, pct, ",")
			for (i = 1; i <= np; i++) {
				point("direct@" pct[i])
				point("shm@" pct[i])
			}
			every("direct-write", 0.90)
			every("shm-write", 0.85)
			vs("mirror: aes-256-ccm reads >= 0.90 of shm", "mirror,aes-256-ccm", "shm,aes-256-ccm", 0.90)
			vs("mirror: aes-256-ccm writes >= 0.55 of shm", "mirror-write,aes-256-ccm",
			   "shm-write,aes-256-ccm", 0.55)
			vs("mirror: reads under scrub >= 0.90 of reads beside them", "mirror-scrub,aes-256-ccm",
			   "mirror-idle,aes-256-ccm", 0.90)
			line("cofferd RssAnon < 64 MiB after the reads, cache off",
			     rss_few ? sprintf("largest %.1f MiB, %d datasets", rss_few / 1024, fewest) : "-",
			     rss_few && rss_few < 65536)
			if (rss["read"] > rss_few)
				printf "  (with more datasets open: largest %.1f MiB)\n", rss["read"] / 1024
			if (rss["write"])
				printf "  (right after the writes, with a txg of them still open: largest %.1f MiB)\n",
				       rss["write"] / 1024
		}' "$out/summary.csv" "$out/rss.csv" "$out/nbd-cpu.csv" "$out/pairs.csv"
}

(umask 077 && head -c 32 /dev/urandom >"$work/key")
: > "$work/failed.csv"
: > "$work/rows.csv"
: > "$out/rss.csv"
: > "$out/nbd-cpu.csv"
: > "$out/pairs.csv"
echo "coffer encryption benchmark: $pools pools x $luns LUNs of ${lun_mib} MiB, $datasets datasets x $size MiB per suite," \
	"8k random reads qd 2 each, ${elapsed}s per point (warmup ${warmup}s), curve $curve, $rounds round(s)" | tee "$out/setup.txt"
"$COFFER" version 2>/dev/null | head -n 1 >> "$out/setup.txt" || true
for pass in $passes; do
	case $pass in
	direct) lundir=$(mktemp -d "$dir/coffer-encbench-luns.XXXXXX") ;;
	shm | mirror | nbd) lundir=$(mktemp -d /dev/shm/coffer-encbench-luns.XXXXXX) ;;
	rados)
		if [ -z "$ceph_conf" ]; then
			ceph_conf=$("$top/tests/e2e/ceph_cluster.sh" start "$ceph_pool" | tail -n 1) ||
				die "no --ceph-conf, and the test cluster did not start"
			ceph_ours=1
		fi
		lundir=rados:$ceph_pool/encbench-$$-$(date +%s)
		;;
	*) die "unknown pass '$pass' (direct, shm, mirror, nbd or rados)" ;;
	esac
	[ "$pass" = mirror ] && [ $((luns % 2)) != 0 ] && die "the mirror pass needs an even --luns"
	# Every suite filled once, side by side in the same pools, where twice
	# their data fits in the LUNs' file system: the rounds then run back to
	# back with no fill between them. The suites are filled together, their
	# writes interleaved: filled one after the other, the last ones stayed
	# in the host's cache (a VM's disk is a file there) while the first were
	# read from its disk, and on such a VM aes-256-gcm, filled last, read at
	# 62k in the rounds where clear, filled first, read at 9-31k. A fill of
	# one suite before each of its runs put gigabytes of writes (and what
	# the host's disk does after them) between the runs it compares: on the
	# O_DIRECT pass the same code moved by 10-30 % from round to round, and
	# so did its ratio to clear. Where they do not fit (tmpfs at the default
	# shape), a suite is filled before each of its runs and destroyed after;
	# on the shm and nbd passes clear is kept, and each other suite runs
	# beside it (shm_round, nbd_round).
	keep=
	pass_lun_mib=$lun_mib
	case $lundir in
	rados:*) ;;
	*)
		nsuites=$(echo $suites | wc -w)
		free_mib=$(df -Pm "$lundir" | awk 'NR == 2 { print $4 }')
		if [ "${free_mib:-0}" -ge $((2 * nsuites * datasets * size)) ]; then
			keep=1
			pass_lun_mib=$((lun_mib * nsuites))
			echo "$pass: every suite kept side by side, LUNs of $pass_lun_mib MiB" | tee -a "$out/setup.txt"
		elif [ "$pass" = shm ] && in_suites clear; then
			# clear kept, each other suite beside it (shm_round), with
			# the half more of room that writes need each
			pass_lun_mib=$((lun_mib * 2))
			echo "$pass: clear kept, each other suite filled beside it for its runs, LUNs of $pass_lun_mib MiB" |
				tee -a "$out/setup.txt"
		elif [ "$pass" = nbd ] && in_suites clear; then
			# clear kept, each other suite beside it for its pairs
			# (nbd_round). Reads only: room for two suites and a fifth
			# (thick volumes, the metadata log's reserve, the slop), not
			# the half more that writes need. tmpfs keeps every page a
			# LUN ever held, and with twice that the LUNs and the peer
			# image came to more than this 24 GiB machine. The volumes
			# are sparse: the pass only reads them, and at this
			# capacity a thick suite's fill, promised its room, waits
			# on the metadata log's checkpoints for it (space.c).
			pass_lun_mib=$((lun_mib * 8 / 5))
			echo "$pass: clear kept, each other suite filled beside it for its runs, LUNs of $pass_lun_mib MiB" |
				tee -a "$out/setup.txt"
		fi
		;;
	esac
	start_daemon "$pass"
	make_pools "$lundir" "$pass"
	if [ -n "$keep" ]; then
		for s in $suites; do
			make_suite "$s"
		done
		fill_suite "$pass" 0 "*" || die "$pass: the fill failed; see $out/$pass-all-r0-fill.txt"
	elif [ "$pass" = nbd ] && in_suites clear; then
		make_suite clear sparse
		fill_suite "$pass" 0 clear || die "$pass: the fill failed; see $out/$pass-clear-r0-fill.txt"
	elif [ "$pass" = shm ] && in_suites clear; then
		# the peer while tmpfs is empty: LUNs for two suites leave no room
		# for its image after the first fill at the default shape
		peer shm 0 "$lundir"
		make_suite clear
		fill_suite "$pass" 0 clear || die "$pass: the fill failed; see $out/$pass-clear-r0-fill.txt"
	fi
	clear_max=
	# Kept suites (but on the mirror pass, whose slices follow each suite's
	# writes) run every round of reads, then every round of writes: reads
	# measured after a write run were measured during its write-back.
	phases=all
	if [ -n "$keep" ] && [ "$pass" != mirror ] && [ "$pass" != nbd ]; then
		phases="reads writes"
		[ "$pass" != direct ] || quiesce "$pass"
	fi
	for phase in $phases; do
		r=1
		while [ $r -le $rounds ]; do
			# rotate the order each round: drift over time hits every suite alike
			order=$suites
			k=1
			while [ $k -lt $r ]; do
				order="$(echo "$order" | cut -d' ' -f2-) $(echo "$order" | cut -d' ' -f1)"
				k=$((k + 1))
			done
			if [ "$pass" = nbd ]; then
				nbd_round "$r" "$order" "$lundir"
				r=$((r + 1))
				continue
			fi
			if [ "$pass" = shm ] && in_suites clear; then
				shm_round "$r" "$order" "$lundir" "$phase"
				r=$((r + 1))
				continue
			fi
			for s in $order; do
				if [ "$phase" = writes ]; then
					write_run "$pass" "$r" "$s" || true
					continue
				fi
				[ -n "$keep" ] || make_suite "$s"
				if [ "$phase" = reads ]; then
					read_run "$pass" "$r" "$s" || true
				else
					run_suite "$pass" "$r" "$s"
				fi
				# the direct peer reads the clear suite's extents, not holes
				[ "$s" = clear ] && peer "$pass" "$r" "$lundir"
				[ -n "$keep" ] || destroy_suite "$s"
			done
			r=$((r + 1))
		done
	done
	stop_daemon
	case $lundir in
	rados:*)
		# a cluster of our own goes whole at exit; another keeps nothing of ours
		[ -n "$ceph_ours" ] || rados -c "$ceph_conf" -p "$ceph_pool" ls |
			grep "^${lundir#rados:*/}/" | while read -r o; do
				rados -c "$ceph_conf" -p "$ceph_pool" rm "$o"
			done
		;;
	*) rm -rf "$lundir" ;;
	esac
	lundir=
done

# median over rounds per pass and suite (machine drift hits single rounds),
# the ratio to clear of the same pass
awk -F, -v suites="$suites fio-io_uring nbdkit-fio nbdkit-file nbdkit-luks nbd-floor" -v pairs="$out/pairs.csv" '
	function median(name, k, m,    i, j, t, a) {
		for (i = 1; i <= m; i++) a[i] = val[name, k, i]
		for (i = 2; i <= m; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	# pass,round,a,b,IOPS of a,IOPS of b: a suite beside clear
	FILENAME == pairs { if ($4 == "clear" && $6 > 0) { k = $1 "," $3; val["beside", k, ++nbeside[k]] = $5 / $6 }
			    next }
	{ k = $1 "," $3; i = ++n[k]
	  val["iops", k, i] = $4; val["resp", k, i] = $5; val["p99", k, i] = $6
	  val["cpu", k, i] = ($7 == "" ? 0 : $7)
	  if ($9 > 0) val["held", k, ++nheld[k]] = $4 / $9
	  if (!(k in lo) || $4 < lo[k]) lo[k] = $4
	  if (!(k in hi) || $4 > hi[k]) hi[k] = $4
	  if (!(($1) in seen)) { seen[$1] = 1; order[++np] = $1 } }
	END {
		ns = split(suites, s, " ")
		for (i = 1; i <= np; i++)
			for (j = 1; j <= ns; j++) {
				k = order[i] "," s[j]
				if (!n[k]) continue
				c = order[i] ",clear"
				ratio = n[c] ? median("iops", k, n[k]) / median("iops", c, n[c]) : 0
				# measured beside clear: the median of the ratios of the rounds
				if (nbeside[k]) ratio = median("beside", k, nbeside[k])
				held = "-"
				if (nheld[k] == n[k]) held = sprintf("%.3f", median("held", k, n[k]))
				printf "%s,%s,%.0f,%.3f,%.3f,%.1f,%.3f,%.0f,%.0f,%s\n", order[i], s[j],
				       median("iops", k, n[k]), median("resp", k, n[k]), median("p99", k, n[k]),
				       median("cpu", k, n[k]), ratio, lo[k], hi[k], held
			}
	}' "$out/pairs.csv" "$work/rows.csv" > "$out/summary.csv"

{
	printf '%-12s %-12s %10s %15s %10s %10s %9s %8s %8s %6s\n' pass suite IOPS "min-max" "mean ms" \
		"p99 ms" "cofferd%" "us/IO" "vs clear" held
	while IFS=, read -r pass suite iops resp p99 cpu ratio lo hi held; do
		us=$(awk -v c="$cpu" -v i="$iops" 'BEGIN { printf(i > 0 ? "%.1f" : "-", 1e4 * c / i) }')
		printf '%-12s %-12s %10s %15s %10s %10s %9s %8s %8s %6s\n' "$pass" "$suite" "$iops" "$lo-$hi" \
			"$resp" "$p99" "$cpu" "$us" "$ratio" "$held"
	done < "$out/summary.csv"
	echo "(peer rows of direct and shm: the CPU column is fio's own; of nbd: the server's;"
	echo " shm's and nbd's max and write rows vs clear: the median of each round's"
	echo " ratio to the clear run beside it;"
	echo " PASS@PCT: reads offered PCT% of clear's maximum; held: IOPS / the rate offered)"
	if [ -s "$out/nbd-cpu.csv" ]; then
		echo
		printf '%-12s %-6s %-12s %10s %9s %12s %12s\n' pass round server IOPS "server%" "CPU us/IO" \
			"fio us/IO"
		while IFS=, read -r pass round name iops cpu us cus; do
			printf '%-12s %-6s %-12s %10s %9s %12s %12s\n' "$pass" "$round" "$name" "$iops" "$cpu" \
				"$us" "$cus"
		done < "$out/nbd-cpu.csv"
	fi
	if [ -s "$out/pairs.csv" ]; then
		echo
		echo "rows side by side, IOPS ratio per round:"
		awk -F, '{ k = sprintf("%-10s %s / %s", $1, $3, $4); if (!(k in r)) o[++n] = k
			   r[k] = r[k] sprintf(" %.3f", $5 / $6) }
			END { for (i = 1; i <= n; i++) printf "  %-40s%s\n", o[i], r[o[i]] }' "$out/pairs.csv"
	fi
	while IFS=, read -r pass round suite what; do
		printf '%-12s %-12s %10s   (round %s)\n' "$pass" "$suite" "$what" "$round"
	done < "$work/failed.csv"
	echo
	targets
} | tee "$out/table.txt"

{
	printf '{\n "setup": {"pools": %s, "luns": %s, "lun_mib": %s, "datasets": %s, "size_mib": %s,' \
		"$pools" "$luns" "$lun_mib" "$datasets" "$size"
	printf ' "elapsed": %s, "warmup": %s, "curve": [%s], "rounds": %s},\n "results": [' \
		"$elapsed" "$warmup" "$curve" "$rounds"
	sep=
	while IFS=, read -r pass suite iops resp p99 cpu ratio lo hi held; do
		printf '%s\n  {"pass": "%s", "suite": "%s", "iops": %s, "iops_min": %s, "iops_max": %s, "resp_ms": %s, "p99_ms": %s, "daemon_cpu_pct": %s, "ratio_to_clear": %s, "held": %s}' \
			"$sep" "$pass" "$suite" "$iops" "$lo" "$hi" "$resp" "$p99" "$cpu" "$ratio" \
			"$([ "$held" = - ] && echo null || echo "$held")"
		sep=,
	done < "$out/summary.csv"
	printf '\n ],\n "runs": ['
	sep=
	while IFS=, read -r pass round suite iops resp p99 cpu json offered; do
		printf '%s\n  {"pass": "%s", "round": %s, "suite": "%s", "iops": %s, "offered": %s, "bench_json": "%s"}' \
			"$sep" "$pass" "$round" "$suite" "$iops" "${offered:-null}" "$json"
		sep=,
	done < "$work/rows.csv"
	printf '\n ]\n}\n'
} > "$out/summary.json"

# one line per suite: suite, IOPS and ratio of each pass ("-" when not run)
awk -F, -v suites="$suites" '
	{ iops[$1 "," $2] = $3; ratio[$1 "," $2] = $7 }
	END {
		n = split(suites, s, " ")
		for (i = 1; i <= n; i++) {
			d = s[i]
			printf "%s %s %s %s %s\n", d, ("direct," d in iops) ? iops["direct," d] : "-",
			       ("shm," d in iops) ? iops["shm," d] : "-",
			       ("direct," d in ratio) ? ratio["direct," d] : "-",
			       ("shm," d in ratio) ? ratio["shm," d] : "-"
		}
	}' "$out/summary.csv" > "$out/plot.dat"
if command -v gnuplot >/dev/null 2>&1; then
	gnuplot -e "datafile='$out/plot.dat'; outfile='$out/encryption.png'" "$here/bench_plot.gp" ||
		echo "encryption.sh: gnuplot failed; the table and JSON are complete" >&2
fi
echo "results in $out" >&2
