#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages coffer needs, when missing.
#
#   sh contrib/deps.sh           the build set: build cofferd and coffer, run them (contrib/run.sh)
#   sh contrib/deps.sh --test    the build set and the test set: make check, the fuzzers, the
#                                benchmarks' peers (contrib/test.sh, .ci/run)
#   sh contrib/deps.sh --list [--test]   print the packages instead of installing them
#
# The table below is the one place that names a package: its set and what
# needs it. The build set alone is 175 packages (129 MB) on a bare Debian 12;
# with the test set (Ceph, clang, qemu, fio, nbdkit) it is 398 (359 MB).
set -e

table() {
	cat <<'EOF'
build build-essential      the C compiler, make and the C library's headers
build autoconf             ./autogen.sh (autoreconf)
build automake             ./autogen.sh; the non-recursive Makefile.am
build pkg-config           configure finds every library below through its .pc file
build libuv1-dev           cofferd's event loop
build libssl-dev           libcrypto (keys, the OpenSSL cipher backend) and libssl (NBD over TLS)
build liblmdb-dev          the pools' metadata (libstore/kv/meta_lmdb.c)
build libzstd-dev          compression=zstd
build libxxhash-dev        record checksums
build libipsec-mb-dev      the multi-buffer AES backend (else --without-ipsec-mb)
build libinih-dev          cofferd.conf
build libjansson-dev       the control protocol's JSON, coffer -j, coffer bench --json
build libsystemd-dev       READY=1 to systemd (sd_notify)
build liburing-dev         batched O_DIRECT LUN I/O
build libcurl4-openssl-dev keylocation=https:// (else --without-curl)
build librados-dev         LUNs on Ceph RADOS, rados:POOL/PREFIX (else --without-rados)
build libmicrohttpd-dev    cofferd's metrics_listen (HTTP GET /metrics)
test  libcriterion-dev     the unit and e2e tests (make check)
test  systemd              systemd-analyze verify of the generated units (test_data, test_keys_boot)
test  util-linux           setpriv: tests that act as another user
test  procps               ps, pgrep: a look at the daemons a test left behind
test  lmdb-utils           mdb_stat, mdb_dump: a look into the state directory a test left behind
test  mandoc               mandoc -Tlint of the man pages
test  clang                the libFuzzer harnesses (tests/fuzz/run.sh)
test  libclang-rt-14-dev   their fuzzer and sanitizer runtimes
test  libnbd-bin           nbdinfo, nbdcopy, nbdsh, nbdfuse against the NBD exports (test_nbd)
test  python3-libnbd       nbdsh
test  fuse3                fusermount3 unmounts nbdfuse for users other than root
test  qemu-utils           qemu-img and qemu-io against the NBD exports; a benchmark peer
test  fio                  fio's nbd engine (test_nbd, test_limits); a benchmark peer
test  nbdkit               the peer of contrib/bench/encryption.sh --passes nbd
test  openssl              the certificates of the NBD TLS and key server tests
test  python3              the key server test's HTTPS server; contrib/soak/soak.py
test  python3-prometheus-client  test_metrics parses the exposition with it
test  ceph-mon             the single-node cluster tests/e2e/ceph_cluster.sh starts for test_rados
test  ceph-mgr             its manager
test  ceph-osd             its object store
test  ceph-common          ceph, rados and monmaptool for it
test  uuid-runtime         uuidgen for it
EOF
}

sets=build
list=0
for arg; do
	case $arg in
	--test) sets="build test" ;;
	--list) list=1 ;;
	*)
		echo "usage: sh contrib/deps.sh [--test] [--list]" >&2
		exit 2
		;;
	esac
done
PKGS=$(table | awk -v sets=" $sets " 'index(sets, " " $1 " ") { print $2 }')
if [ $list = 1 ]; then
	echo $PKGS
	exit 0
fi
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq $missing
