#!/bin/sh
# SPDX-License-Identifier: MIT
# The README's run command: install what is missing (the build set of
# contrib/deps.sh, no test toolchain), build, start cofferd on its embedded
# defaults, make a pool of sparse LUN files with a clear and an aes-256-ccm
# dataset, move data through both and check it, then run a short 8 KiB
# random-read load test on each and print encrypted vs clear.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh contrib/deps.sh
[ -x configure ] || ./autogen.sh >/dev/null 2>&1
mkdir -p build-run
cd build-run
[ -f Makefile ] || ../configure CFLAGS='-O2 -g' >/dev/null
make -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
cofferd=$PWD/daemon/cofferd
coffer=$PWD/client/coffer

demo=${COFFER_DEMO_DIR:-/var/tmp/coffer-demo}
secs=${COFFER_DEMO_SECONDS:-5}
mkdir -p "$demo"

if ! "$coffer" ping >/dev/null 2>&1; then
	echo "run: starting cofferd on its embedded defaults"
	"$cofferd"
	for _ in $(seq 50); do "$coffer" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
"$coffer" version

# a fresh demo pool every run (destroy also clears one that no longer imports)
"$coffer" pool destroy -f demo >/dev/null 2>&1 || true
rm -f "$demo"/lun0 "$demo"/lun1 "$demo"/key "$demo"/in "$demo"/out
"$coffer" pool create -s 512M demo "$demo/lun0" "$demo/lun1"

# the passphrase lives in a file the client reads (keylocation=file://)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$demo/key"
chmod 600 "$demo/key"
"$coffer" create -V 128M -o encryption=aes-256-ccm -o keyformat=passphrase \
	-o keylocation="file://$demo/key" demo/secure
"$coffer" create -V 128M demo/clear

head -c 4M /dev/urandom >"$demo/in"
for ds in demo/secure demo/clear; do
	"$coffer" write "$ds" <"$demo/in"
	"$coffer" flush "$ds"
	"$coffer" read "$ds" -l 4M >"$demo/out"
	cmp "$demo/in" "$demo/out"
	echo "run: $ds: 4 MiB written, flushed, read back identical"
done
"$coffer" list

# fill both so every read below finds a record, then one short run on each
for ds in demo/secure demo/clear; do
	head -c 128M /dev/urandom | "$coffer" write "$ds"
	"$coffer" flush "$ds"
done
for ds in demo/clear demo/secure; do
	"$coffer" bench --datasets "$ds" --rw randread --bs 8k --qd 16 --time "${secs}s" \
		--json "$demo/$(basename "$ds").json" >"$demo/$(basename "$ds").out"
	tail -n 4 "$demo/$(basename "$ds").out"
done
clear=$(awk '$2 ~ /^avg_/ { print $3; exit }' "$demo/clear.out")
secure=$(awk '$2 ~ /^avg_/ { print $3; exit }' "$demo/secure.out")
awk -v c="$clear" -v s="$secure" 'BEGIN {
	printf "run: 8 KiB random reads, qd 16: clear %.0f IOPS, aes-256-ccm %.0f IOPS (%.1f%% of clear)\n",
		c, s, (c > 0 ? 100 * s / c : 0) }'
# its pid file sits beside its socket (pid_file, cofferd.conf(5)): where cofferd puts that
case ${XDG_RUNTIME_DIR:-} in
/*) rundir=$XDG_RUNTIME_DIR/coffer ;;
*) rundir=/tmp/coffer-$(id -u) ;;
esac
[ "$(id -u)" = 0 ] && rundir=/run/coffer
echo "run: cofferd keeps running; stop it with: kill \$(cat $rundir/cofferd.pid)"
