# SPDX-License-Identifier: MIT
# Reference benchmarks; built with `make`, run by hand (they are not tests).

# crypt_bench: ns per record to seal/open per suite, backend and batch size
noinst_PROGRAMS += %D%/crypt_bench
%C%_crypt_bench_SOURCES = %D%/crypt_bench.c
%C%_crypt_bench_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS) $(XXHASH_CFLAGS) $(STORE_INC)
%C%_crypt_bench_LDADD = $(STORE_LIBS)

# engine_bench: 8 KiB random read/write rates of libstore, buffered and O_DIRECT, one thread;
# with -t, how its reads scale over threads (stor_io_submit batches, a dataset per thread)
noinst_PROGRAMS += %D%/engine_bench
%C%_engine_bench_SOURCES = %D%/engine_bench.c
%C%_engine_bench_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_engine_bench_LDADD = $(STORE_LIBS)

# cache_sim: hit ratios of the data cache's policies (S3-FIFO vs LRU) on zipfian traces with scans
noinst_PROGRAMS += %D%/cache_sim
%C%_cache_sim_SOURCES = %D%/cache_sim.c
%C%_cache_sim_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_cache_sim_LDADD = $(STORE_LIBS) -lm

# scale_admin: the daemon's latency per create and per snapshot at scale, over one
# connection (no process start in the figure); scale.sh runs it
noinst_PROGRAMS += %D%/scale_admin
%C%_scale_admin_SOURCES = %D%/scale_admin.c
%C%_scale_admin_CPPFLAGS = $(AM_CPPFLAGS) $(CLIENT_INC) $(STORE_INC)
%C%_scale_admin_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
%C%_scale_admin_LDADD = $(CLIENT_LIBS)

# scale_records: the import of a pool of many records (sparse LUNs, pointers staged with
# no record written), with LMDB's rows of the free map and with a walk; scale_records.sh runs it
noinst_PROGRAMS += %D%/scale_records
%C%_scale_records_SOURCES = %D%/scale_records.c
%C%_scale_records_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_scale_records_LDADD = $(STORE_LIBS) $(LMDB_LIBS)

# nbd_floor: an NBD server that stores nothing (zeros, one thread, epoll), the floor that
# encryption.sh's nbd pass measures every server against with the same client
noinst_PROGRAMS += %D%/nbd_floor
%C%_nbd_floor_SOURCES = %D%/nbd_floor.c
%C%_nbd_floor_CPPFLAGS = $(AM_CPPFLAGS) $(COMMON_INC) -I$(top_srcdir)/daemon
%C%_nbd_floor_LDADD = $(URING_LIBS) -lpthread
