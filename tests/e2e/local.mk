# SPDX-License-Identifier: MIT
# End-to-end tests: the real cofferd on a temp socket, driven through client.h and coffer.
E2E_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS) $(STORE_INC) -I$(top_srcdir)/daemon $(CLIENT_INC)
E2E_LDADD = $(CLIENT_LIBS) $(CRITERION_LIBS)
E2E_FIXTURE = %D%/daemon.c %D%/daemon.h

check_PROGRAMS += %D%/test_rpc
%C%_test_rpc_SOURCES = %D%/test_rpc.c $(E2E_FIXTURE)
%C%_test_rpc_CFLAGS = $(E2E_CFLAGS)
%C%_test_rpc_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_data
%C%_test_data_SOURCES = %D%/test_data.c $(E2E_FIXTURE)
%C%_test_data_CFLAGS = $(E2E_CFLAGS)
%C%_test_data_LDADD = $(E2E_LDADD)

# test_data runs `systemd-analyze verify` on the unit make generates
AM_TESTS_ENVIRONMENT += COFFER_UNIT=$(abs_top_builddir)/conf/cofferd.service; export COFFER_UNIT;

check_PROGRAMS += %D%/test_bench
%C%_test_bench_SOURCES = %D%/test_bench.c $(E2E_FIXTURE)
%C%_test_bench_CFLAGS = $(E2E_CFLAGS)
%C%_test_bench_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_pidfile
%C%_test_pidfile_SOURCES = %D%/test_pidfile.c $(E2E_FIXTURE)
%C%_test_pidfile_CFLAGS = $(E2E_CFLAGS)
%C%_test_pidfile_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_proto
%C%_test_proto_SOURCES = %D%/test_proto.c
%C%_test_proto_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(STORE_INC)
%C%_test_proto_LDADD = common/libcommon.a $(CRITERION_LIBS)

check_PROGRAMS += %D%/test_faults
%C%_test_faults_SOURCES = %D%/test_faults.c $(E2E_FIXTURE)
%C%_test_faults_CFLAGS = $(E2E_CFLAGS)
%C%_test_faults_LDADD = $(E2E_LDADD)

# reliability scripts: make check runs short variants of contrib/bench's crash and load runs
TESTS += %D%/crash_short.sh %D%/load_short.sh
EXTRA_DIST += %D%/ceph_cluster.sh %D%/crash_short.sh contrib/bench/crash.sh %D%/load_short.sh contrib/bench/load.sh \
	contrib/bench/daemon.sh

check_PROGRAMS += %D%/test_stats
%C%_test_stats_SOURCES = %D%/test_stats.c $(E2E_FIXTURE)
%C%_test_stats_CFLAGS = $(E2E_CFLAGS)
%C%_test_stats_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_metadata
%C%_test_metadata_SOURCES = %D%/test_metadata.c $(E2E_FIXTURE)
%C%_test_metadata_CFLAGS = $(E2E_CFLAGS)
%C%_test_metadata_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_mirror
%C%_test_mirror_SOURCES = %D%/test_mirror.c $(E2E_FIXTURE)
%C%_test_mirror_CFLAGS = $(E2E_CFLAGS)
%C%_test_mirror_LDADD = $(E2E_LDADD)
check_PROGRAMS += %D%/test_mirror_direct
%C%_test_mirror_direct_SOURCES = $(%C%_test_mirror_SOURCES)
%C%_test_mirror_direct_CFLAGS = $(%C%_test_mirror_CFLAGS) -DTEST_DIRECT_IO=1
%C%_test_mirror_direct_LDADD = $(%C%_test_mirror_LDADD)

check_PROGRAMS += %D%/test_vdev
%C%_test_vdev_SOURCES = %D%/test_vdev.c $(E2E_FIXTURE)
%C%_test_vdev_CFLAGS = $(E2E_CFLAGS)
%C%_test_vdev_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_luns
%C%_test_luns_SOURCES = %D%/test_luns.c $(E2E_FIXTURE)
%C%_test_luns_CFLAGS = $(E2E_CFLAGS)
%C%_test_luns_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_import
%C%_test_import_SOURCES = %D%/test_import.c $(E2E_FIXTURE)
%C%_test_import_CFLAGS = $(E2E_CFLAGS)
%C%_test_import_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_hostile
%C%_test_hostile_SOURCES = %D%/test_hostile.c $(E2E_FIXTURE)
%C%_test_hostile_CFLAGS = $(E2E_CFLAGS) $(LMDB_CFLAGS)
%C%_test_hostile_LDADD = $(E2E_LDADD) $(LMDB_LIBS)


# crypto integrity against an attacker holding the LUN and LMDB files: tamper.c
# edits a stopped daemon's LMDB with liblmdb; the offline verify links libstore
check_PROGRAMS += %D%/test_integrity
%C%_test_integrity_SOURCES = %D%/test_integrity.c %D%/tamper.c %D%/tamper.h $(E2E_FIXTURE)
%C%_test_integrity_CFLAGS = $(E2E_CFLAGS) $(LMDB_CFLAGS) $(XXHASH_CFLAGS)
%C%_test_integrity_LDADD = $(E2E_LDADD) $(STORE_LIBS) $(LMDB_LIBS) $(XXHASH_LIBS)
# the same attacks on O_DIRECT LUNs, whose reads take the loop's own ring
check_PROGRAMS += %D%/test_integrity_direct
%C%_test_integrity_direct_SOURCES = $(%C%_test_integrity_SOURCES)
%C%_test_integrity_direct_CFLAGS = $(%C%_test_integrity_CFLAGS) -DTEST_DIRECT_IO=1
%C%_test_integrity_direct_LDADD = $(%C%_test_integrity_LDADD)

# reads of O_DIRECT pools, finished one by one on the loop's ring
check_PROGRAMS += %D%/test_direct
%C%_test_direct_SOURCES = %D%/test_direct.c $(E2E_FIXTURE)
%C%_test_direct_CFLAGS = $(E2E_CFLAGS)
%C%_test_direct_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_memscan
%C%_test_memscan_SOURCES = %D%/test_memscan.c tests/memscan.c tests/memscan.h $(E2E_FIXTURE)
%C%_test_memscan_CFLAGS = $(E2E_CFLAGS) -I$(top_srcdir)/tests
%C%_test_memscan_LDADD = $(E2E_LDADD)

# who owns the socket: a second daemon, stale sockets, the socket directory, the client's check
check_PROGRAMS += %D%/test_socket
%C%_test_socket_SOURCES = %D%/test_socket.c $(E2E_FIXTURE)
%C%_test_socket_CFLAGS = $(E2E_CFLAGS)
%C%_test_socket_LDADD = $(E2E_LDADD)

# limits a local user cannot push the daemon past: connections, requests, memory, timeouts
check_PROGRAMS += %D%/test_limits
%C%_test_limits_SOURCES = %D%/test_limits.c $(E2E_FIXTURE)
%C%_test_limits_CFLAGS = $(E2E_CFLAGS)
%C%_test_limits_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_space
%C%_test_space_SOURCES = %D%/test_space.c $(E2E_FIXTURE)
%C%_test_space_CFLAGS = $(E2E_CFLAGS)
%C%_test_space_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_snapshot
%C%_test_snapshot_SOURCES = %D%/test_snapshot.c $(E2E_FIXTURE)
%C%_test_snapshot_CFLAGS = $(E2E_CFLAGS)
%C%_test_snapshot_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_send
%C%_test_send_SOURCES = %D%/test_send.c %D%/tamper.c %D%/tamper.h $(E2E_FIXTURE)
%C%_test_send_CFLAGS = $(E2E_CFLAGS) $(LMDB_CFLAGS)
# it forges streams with libstore's stream codec (stream.c, its checksums),
# and reads the copy's block pointers from its LMDB file (tamper.c)
%C%_test_send_LDADD = $(E2E_LDADD) $(STORE_LIBS) $(LMDB_LIBS) $(XXHASH_LIBS)

check_PROGRAMS += %D%/test_resume
%C%_test_resume_SOURCES = %D%/test_resume.c $(E2E_FIXTURE)
%C%_test_resume_CFLAGS = $(E2E_CFLAGS)
%C%_test_resume_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_clone
%C%_test_clone_SOURCES = %D%/test_clone.c $(E2E_FIXTURE)
%C%_test_clone_CFLAGS = $(E2E_CFLAGS)
%C%_test_clone_LDADD = $(E2E_LDADD)

# the NBD export against the clients of libnbd-bin, python3-libnbd, qemu-utils and fio
check_PROGRAMS += %D%/test_nbd
%C%_test_nbd_SOURCES = %D%/test_nbd.c %D%/nbdraw.c %D%/nbdraw.h $(E2E_FIXTURE)
%C%_test_nbd_CFLAGS = $(E2E_CFLAGS)
%C%_test_nbd_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_cli
%C%_test_cli_SOURCES = %D%/test_cli.c $(E2E_FIXTURE)
%C%_test_cli_CFLAGS = $(E2E_CFLAGS)
%C%_test_cli_LDADD = $(E2E_LDADD)

# the NBD export over TCP with TLS (PSK and certificates), libnbd's clients and a raw peer
check_PROGRAMS += %D%/test_nbd_tls
%C%_test_nbd_tls_SOURCES = %D%/test_nbd_tls.c %D%/nbdraw.c %D%/nbdraw.h $(E2E_FIXTURE)
%C%_test_nbd_tls_CFLAGS = $(E2E_CFLAGS)
%C%_test_nbd_tls_LDADD = $(E2E_LDADD)

# keys at boot: the load-key unit, load-key -a/-r, change-key -i/-l, https key servers
check_PROGRAMS += %D%/test_keys_boot
%C%_test_keys_boot_SOURCES = %D%/test_keys_boot.c $(E2E_FIXTURE)
%C%_test_keys_boot_CFLAGS = $(E2E_CFLAGS)
%C%_test_keys_boot_LDADD = $(E2E_LDADD)
AM_TESTS_ENVIRONMENT += COFFER_LOAD_KEY_UNIT=$(abs_top_builddir)/conf/cofferd-load-key.service; export COFFER_LOAD_KEY_UNIT;

# LUNs on Ceph RADOS, against the single-node cluster ceph_cluster.sh starts
# (the program exits 77, SKIP, when it cannot)
check_PROGRAMS += %D%/test_rados
%C%_test_rados_SOURCES = %D%/test_rados.c $(E2E_FIXTURE)
%C%_test_rados_CFLAGS = $(E2E_CFLAGS)
%C%_test_rados_LDADD = $(E2E_LDADD)
AM_TESTS_ENVIRONMENT += COFFER_CEPH_CLUSTER=$(abs_top_srcdir)/%D%/ceph_cluster.sh; export COFFER_CEPH_CLUSTER;

# admin changes on the LUNs once acknowledged: kill -9 and state directory loss after each
check_PROGRAMS += %D%/test_durable
%C%_test_durable_SOURCES = %D%/test_durable.c $(E2E_FIXTURE)
%C%_test_durable_CFLAGS = $(E2E_CFLAGS)
%C%_test_durable_LDADD = $(E2E_LDADD)

# every order of clone, promote and destroy -r/-R against a model of zfs destroy
check_PROGRAMS += %D%/test_lineage
%C%_test_lineage_SOURCES = %D%/test_lineage.c $(E2E_FIXTURE)
%C%_test_lineage_CFLAGS = $(E2E_CFLAGS)
%C%_test_lineage_LDADD = $(E2E_LDADD)

# events from real faults, repairs, no space and keys; the list, -f, the hooks
check_PROGRAMS += %D%/test_events
%C%_test_events_SOURCES = %D%/test_events.c $(E2E_FIXTURE)
%C%_test_events_CFLAGS = $(E2E_CFLAGS)
%C%_test_events_LDADD = $(E2E_LDADD)

# every pool and dataset verb on a faulted pool
check_PROGRAMS += %D%/test_faulted
%C%_test_faulted_SOURCES = %D%/test_faulted.c $(E2E_FIXTURE)
%C%_test_faulted_CFLAGS = $(E2E_CFLAGS)
%C%_test_faulted_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_rename
%C%_test_rename_SOURCES = %D%/test_rename.c $(E2E_FIXTURE)
%C%_test_rename_CFLAGS = $(E2E_CFLAGS)
%C%_test_rename_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_verbs
%C%_test_verbs_SOURCES = %D%/test_verbs.c $(E2E_FIXTURE)
%C%_test_verbs_CFLAGS = $(E2E_CFLAGS)
%C%_test_verbs_LDADD = $(E2E_LDADD)

check_PROGRAMS += %D%/test_metrics
%C%_test_metrics_SOURCES = %D%/test_metrics.c $(E2E_FIXTURE)
%C%_test_metrics_CFLAGS = $(E2E_CFLAGS)
%C%_test_metrics_LDADD = $(E2E_LDADD)
# the reference parser of the exposition: python3-prometheus-client
EXTRA_DIST += %D%/metrics_check.py
AM_TESTS_ENVIRONMENT += COFFER_METRICS_CHECK=$(abs_top_srcdir)/%D%/metrics_check.py; export COFFER_METRICS_CHECK; \
	COFFER_DASHBOARD=$(abs_top_srcdir)/contrib/grafana-coffer.json; export COFFER_DASHBOARD;

# pool iostat: per-LUN counters against what was written and read, reports, bad input
check_PROGRAMS += %D%/test_iostat
%C%_test_iostat_SOURCES = %D%/test_iostat.c $(E2E_FIXTURE)
%C%_test_iostat_CFLAGS = $(E2E_CFLAGS)
%C%_test_iostat_LDADD = $(E2E_LDADD)
# dry runs (send -n, destroy -n) against the real thing, and set of several at once
check_PROGRAMS += %D%/test_dryrun
%C%_test_dryrun_SOURCES = %D%/test_dryrun.c $(E2E_FIXTURE)
%C%_test_dryrun_CFLAGS = $(E2E_CFLAGS)
%C%_test_dryrun_LDADD = $(E2E_LDADD)

# four loops at once: writers on each beside a forced unload-key, the per-uid
# limit over them, a SIGTERM with writes in flight on every one
check_PROGRAMS += %D%/test_loops
%C%_test_loops_SOURCES = %D%/test_loops.c $(E2E_FIXTURE)
%C%_test_loops_CFLAGS = $(E2E_CFLAGS)
%C%_test_loops_LDADD = $(E2E_LDADD)

# a rekey under validated writes and reads, cut by kill -9, the old key file
# put back, and what it refuses
check_PROGRAMS += %D%/test_rekey
%C%_test_rekey_SOURCES = %D%/test_rekey.c %D%/tamper.c %D%/tamper.h $(E2E_FIXTURE)
%C%_test_rekey_CFLAGS = $(E2E_CFLAGS) $(LMDB_CFLAGS) $(XXHASH_CFLAGS)
%C%_test_rekey_LDADD = $(E2E_LDADD) $(LMDB_LIBS) $(XXHASH_LIBS)
