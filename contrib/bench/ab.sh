#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Two builds of cofferd against each other, in alternating slices of one run.
#
# A whole encryption.sh round per build leaves minutes between the figures
# it compares, and on a shared VM the machine changes in minutes (other
# work, page reporting, how often idle vCPUs halt): rounds of the same
# code moved by 10-28%. Here both daemons are up at once, each with the
# same pool of LUNs on tmpfs (io_inline, cache off) and the same datasets,
# filled once; then for each suite and operation the same 8 KiB random
# load (queue depth 2 per dataset, iorate=max) runs against A, then B, for
# --slice seconds each, --slices pairs, the order flipping every pair. The
# daemon not measured idles meanwhile. Each pair gives a ratio B/A taken
# seconds apart; the table shows the medians of IOPS and of daemon CPU per
# I/O (from cofferd% of the bench), the median of the pair ratios and
# their min-max.
#
# The same build twice with another cofferd.conf line on each side (--conf-a,
# --conf-b: "loops = 1" against "loops = 2") compares a setting the same way.
#
# usage: ab.sh --a BUILD --b BUILD [--suites LIST] [--ops read,write]
#        [--datasets D] [--size MiB] [--slice SEC] [--slices N] [--out DIR]
#        [--conf-a LINE] [--conf-b LINE]
# BUILD is a build tree holding daemon/cofferd and client/coffer.
set -eu

a= b= conf_a= conf_b= suites="clear aes-256-ccm" ops="read write" datasets=16 size=8 slice=3 slices=7 out=
die() { echo "ab.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--a) a=$2; shift ;;
	--b) b=$2; shift ;;
	--conf-a) conf_a=$2; shift ;;
	--conf-b) conf_b=$2; shift ;;
	--suites) suites=$(echo "$2" | tr ',' ' '); shift ;;
	--ops) ops=$(echo "$2" | tr ',' ' '); shift ;;
	--datasets) datasets=$2; shift ;;
	--size) size=$2; shift ;;
	--slice) slice=$2; shift ;;
	--slices) slices=$2; shift ;;
	--out) out=$2; shift ;;
	-h|--help) sed -n '/^# usage/,/^# BUILD/p' "$0" | sed 's/^# //'; exit 0 ;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
	shift
done
[ -n "$a" ] && [ -n "$b" ] || die "--a and --b are required (see --help)"
for x in "$a" "$b"; do
	[ -x "$x/daemon/cofferd" ] && [ -x "$x/client/coffer" ] || die "$x: no daemon/cofferd or client/coffer"
done
out=${out:-$PWD/ab-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
work=$(mktemp -d /dev/shm/coffer-ab.XXXXXX)
pids=
cleanup() {
	for p in $pids; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

c() { # side args...
	side=$1; shift
	"$(eval echo \$"$side")/client/coffer" -S "$work/$side/sock" "$@"
}

(umask 077 && head -c 32 /dev/urandom >"$work/key")
nsuites=$(echo $suites | wc -w)
# two LUNs holding every suite's datasets and a half (thick volumes, copy-on-write)
lun_mib=$(( nsuites * datasets * size * 3 / 4 + 16 ))
for side in a b; do
	mkdir -p "$work/$side"
	cat > "$work/$side/cofferd.conf" <<-CONF
	[cofferd]
	socket = $work/$side/sock
	state_dir = $work/$side/state
	cache_size = 0
	io_inline = yes
	log_level = warning
	log_target = $out/cofferd-$side.log
	$(if [ $side = a ]; then echo "$conf_a"; else echo "$conf_b"; fi)
	CONF
	"$(eval echo \$"$side")/daemon/cofferd" -f -c "$work/$side/cofferd.conf" &
	pids="$pids $!"
	i=0
	until c $side ping >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -gt 300 ] && die "cofferd $side did not start; see $out/cofferd-$side.log"
		sleep 0.1
	done
	c $side pool create -s "${lun_mib}M" p "$work/$side/l0" "$work/$side/l1" >/dev/null
	for s in $suites; do
		if [ "$s" = clear ]; then
			c $side create -o primarycache=metadata "p/$s" >/dev/null
		else
			c $side create -o encryption="$s" -o keyformat=raw -o keylocation="file://$work/key" \
				-o primarycache=metadata "p/$s" >/dev/null
		fi
		d=0
		while [ $d -lt "$datasets" ]; do
			c $side create -V "${size}M" -b 8k "p/$s/d$d"
			d=$((d + 1))
		done
		printf 'sd=sd1,dataset=p/%s/d*,threads=2\nwd=f,sd=sd1,rdpct=0,seekpct=eof,xfersize=1m\nrd=f,wd=f,iorate=max,elapsed=10h,interval=5\n' \
			"$s" > "$work/fill.parm"
		c $side bench -q "$work/fill.parm" >/dev/null
	done
done

echo "side,suite,op,slice,iops,cpu_pct" > "$out/slices.csv"
for s in $suites; do
	for op in $ops; do
		rd=100
		[ "$op" = write ] && rd=0
		printf 'sd=sd1,dataset=p/%s/d*,threads=2\nwd=w,sd=sd1,rdpct=%s,seekpct=random,xfersize=8k\nrd=r,wd=w,iorate=max,elapsed=%s,warmup=1,interval=1\n' \
			"$s" "$rd" "$slice" > "$work/run.parm"
		k=1
		while [ $k -le "$slices" ]; do
			order="a b"
			[ $((k % 2)) = 0 ] && order="b a"
			for side in $order; do
				c $side bench -q --csv "$work/r.csv" "$work/run.parm" >/dev/null
				awk -F, -v p="$side,$s,$op,$k" '$4 ~ /^avg/ && !d { print p "," $6 "," $17; d = 1 }' \
					"$work/r.csv" >> "$out/slices.csv"
			done
			k=$((k + 1))
		done
	done
done

# medians: IOPS, CPU us per I/O (cofferd% * 1e4 / IOPS), the pair ratios B/A
awk -F, 'NR > 1 {
	k = $2 "," $3
	if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
	iops[$1, k, $4] = $5; cpu[$1, k, $4] = $6 * 1e4 / ($5 > 0 ? $5 : 1); n[k] = $4
}
function med(arr, m,   i, j, t) {
	for (i = 2; i <= m; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
	return m % 2 ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
}
END {
	printf "%-12s %-6s %10s %10s %8s %8s %8s %14s\n", "suite", "op", "A IOPS", "B IOPS", "A us/io", "B us/io", "B/A", "B/A min-max"
	for (x = 1; x <= nk; x++) {
		k = keys[x]; m = n[k]
		for (i = 1; i <= m; i++) { ia[i] = iops["a", k, i]; ib[i] = iops["b", k, i]; ca[i] = cpu["a", k, i]; cb[i] = cpu["b", k, i]; r[i] = ib[i] / (ia[i] > 0 ? ia[i] : 1) }
		lo = hi = r[1]; for (i = 2; i <= m; i++) { if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
		split(k, f, ",")
		printf "%-12s %-6s %10.0f %10.0f %8.2f %8.2f %8.3f %6.2f-%-6.2f\n", f[1], f[2], med(ia, m), med(ib, m), med(ca, m), med(cb, m), med(r, m), lo, hi
	}
}' "$out/slices.csv" | tee "$out/summary.txt"
