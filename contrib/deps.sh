#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages coffer builds, tests and benchmarks with, when missing
# (openssl(1): the NBD TLS and key server tests make their certificates with it;
# nbdfuse comes with libnbd-bin here, fuse3's fusermount3 unmounts it for users
# other than root; libcurl4-openssl-dev: keylocation=https://, python3: the
# key server test's HTTPS server; librados-dev: LUNs on Ceph RADOS; ceph-mon,
# ceph-mgr, ceph-osd, ceph-common (ceph, rados, monmaptool) and uuid-runtime
# (uuidgen): the single-node cluster tests/e2e/ceph_cluster.sh starts for the
# RADOS tests, which skip without it); libmicrohttpd-dev: cofferd's metrics_listen;
# python3-prometheus-client: the metrics test parses the exposition with it).
set -e
PKGS="build-essential autoconf automake pkg-config libuv1-dev libssl-dev liblmdb-dev lmdb-utils
libzstd-dev libxxhash-dev libcriterion-dev libipsec-mb-dev libinih-dev libjansson-dev
libsystemd-dev liburing-dev systemd mandoc util-linux procps clang libclang-rt-14-dev
libnbd-bin python3-libnbd qemu-utils fio nbdkit openssl fuse3 libcurl4-openssl-dev python3
librados-dev ceph-mon ceph-mgr ceph-osd ceph-common uuid-runtime libmicrohttpd-dev
python3-prometheus-client"
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
