# SPDX-License-Identifier: MIT
# One Criterion binary per libstore module; fixture.c makes temp pools.
UNIT_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(STORE_INC) $(CLIENT_INC)
UNIT_LDADD = $(STORE_LIBS) $(CRITERION_LIBS)
UNIT_FIXTURE = %D%/fixture.c %D%/fixture.h

check_PROGRAMS += %D%/test_crypt
%C%_test_crypt_SOURCES = %D%/test_crypt.c tests/memscan.c tests/memscan.h
%C%_test_crypt_CFLAGS = $(UNIT_CFLAGS) $(CRYPTO_CFLAGS) -I$(top_srcdir)/tests
%C%_test_crypt_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_keys
%C%_test_keys_SOURCES = %D%/test_keys.c
%C%_test_keys_CFLAGS = $(UNIT_CFLAGS)
%C%_test_keys_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_config
%C%_test_config_SOURCES = %D%/test_config.c daemon/conf.c daemon/log.c daemon/conf.h daemon/log.h
%C%_test_config_CFLAGS = $(UNIT_CFLAGS) $(INIH_CFLAGS) -DSRCDIR='"$(abs_top_srcdir)"'
%C%_test_config_LDADD = common/libcommon.a $(INIH_LIBS) $(CRITERION_LIBS)

# the rules shared by libstore, cofferd and coffer: sizes, names, error texts
check_PROGRAMS += %D%/test_size
%C%_test_size_SOURCES = %D%/test_size.c
%C%_test_size_CFLAGS = $(UNIT_CFLAGS)
%C%_test_size_LDADD = $(UNIT_LDADD)

# lock contracts (base/stor_assert.h): checked where the build has them
check_PROGRAMS += %D%/test_assert
%C%_test_assert_SOURCES = %D%/test_assert.c $(UNIT_FIXTURE)
%C%_test_assert_CFLAGS = $(UNIT_CFLAGS)
%C%_test_assert_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_hist
%C%_test_hist_SOURCES = %D%/test_hist.c client/hist.c client/hist.h
%C%_test_hist_CFLAGS = $(UNIT_CFLAGS)
%C%_test_hist_LDADD = $(CRITERION_LIBS) -lm

check_PROGRAMS += %D%/test_durability
%C%_test_durability_SOURCES = %D%/test_durability.c $(UNIT_FIXTURE)
%C%_test_durability_CFLAGS = $(UNIT_CFLAGS)
%C%_test_durability_LDADD = $(UNIT_LDADD) -lpthread

check_PROGRAMS += %D%/test_mirror
%C%_test_mirror_SOURCES = %D%/test_mirror.c $(UNIT_FIXTURE)
%C%_test_mirror_CFLAGS = $(UNIT_CFLAGS)
%C%_test_mirror_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_pool
%C%_test_pool_SOURCES = %D%/test_pool.c $(UNIT_FIXTURE)
%C%_test_pool_CFLAGS = $(UNIT_CFLAGS)
%C%_test_pool_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_search
%C%_test_search_SOURCES = %D%/test_search.c $(UNIT_FIXTURE)
%C%_test_search_CFLAGS = $(UNIT_CFLAGS) $(XXHASH_CFLAGS)
%C%_test_search_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_rename
%C%_test_rename_SOURCES = %D%/test_rename.c $(UNIT_FIXTURE)
%C%_test_rename_CFLAGS = $(UNIT_CFLAGS)
%C%_test_rename_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_dataset
%C%_test_dataset_SOURCES = %D%/test_dataset.c $(UNIT_FIXTURE)
%C%_test_dataset_CFLAGS = $(UNIT_CFLAGS)
%C%_test_dataset_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_record
%C%_test_record_SOURCES = %D%/test_record.c $(UNIT_FIXTURE)
%C%_test_record_CFLAGS = $(UNIT_CFLAGS)
%C%_test_record_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_txg
%C%_test_txg_SOURCES = %D%/test_txg.c $(UNIT_FIXTURE)
%C%_test_txg_CFLAGS = $(UNIT_CFLAGS)
%C%_test_txg_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_snapshot
%C%_test_snapshot_SOURCES = %D%/test_snapshot.c $(UNIT_FIXTURE)
%C%_test_snapshot_CFLAGS = $(UNIT_CFLAGS) $(LMDB_CFLAGS)
%C%_test_snapshot_LDADD = $(UNIT_LDADD) $(LMDB_LIBS)

check_PROGRAMS += %D%/test_clone
%C%_test_clone_SOURCES = %D%/test_clone.c $(UNIT_FIXTURE)
%C%_test_clone_CFLAGS = $(UNIT_CFLAGS) $(LMDB_CFLAGS)
%C%_test_clone_LDADD = $(UNIT_LDADD) $(LMDB_LIBS)

check_PROGRAMS += %D%/test_bench_parse
%C%_test_bench_parse_SOURCES = %D%/test_bench_parse.c client/bench_parse.c client/bench_parse.h
%C%_test_bench_parse_CFLAGS = $(UNIT_CFLAGS)
%C%_test_bench_parse_LDADD = common/libcommon.a $(CRITERION_LIBS) -lm

check_PROGRAMS += %D%/test_bench_verify
%C%_test_bench_verify_SOURCES = %D%/test_bench_verify.c client/bench_verify.c client/bench_verify.h
%C%_test_bench_verify_CFLAGS = $(UNIT_CFLAGS) $(XXHASH_CFLAGS)
%C%_test_bench_verify_LDADD = $(XXHASH_LIBS) $(CRITERION_LIBS)

check_PROGRAMS += %D%/test_encryption
%C%_test_encryption_SOURCES = %D%/test_encryption.c $(UNIT_FIXTURE)
%C%_test_encryption_CFLAGS = $(UNIT_CFLAGS) $(LMDB_CFLAGS) $(XXHASH_CFLAGS)
%C%_test_encryption_LDADD = $(UNIT_LDADD) $(LMDB_LIBS)

check_PROGRAMS += %D%/test_cache
%C%_test_cache_SOURCES = %D%/test_cache.c $(UNIT_FIXTURE)
%C%_test_cache_CFLAGS = $(UNIT_CFLAGS)
%C%_test_cache_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_compress
%C%_test_compress_SOURCES = %D%/test_compress.c $(UNIT_FIXTURE)
%C%_test_compress_CFLAGS = $(UNIT_CFLAGS)
%C%_test_compress_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_stats
%C%_test_stats_SOURCES = %D%/test_stats.c $(UNIT_FIXTURE)
%C%_test_stats_CFLAGS = $(UNIT_CFLAGS)
%C%_test_stats_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_datacache
%C%_test_datacache_SOURCES = %D%/test_datacache.c $(UNIT_FIXTURE)
%C%_test_datacache_CFLAGS = $(UNIT_CFLAGS)
%C%_test_datacache_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_metalog
%C%_test_metalog_SOURCES = %D%/test_metalog.c $(UNIT_FIXTURE)
%C%_test_metalog_CFLAGS = $(UNIT_CFLAGS)
%C%_test_metalog_LDADD = $(UNIT_LDADD)

TESTS += $(check_PROGRAMS)

check_PROGRAMS += %D%/test_spacemap
%C%_test_spacemap_SOURCES = %D%/test_spacemap.c $(UNIT_FIXTURE)
%C%_test_spacemap_CFLAGS = $(UNIT_CFLAGS)
%C%_test_spacemap_LDADD = $(UNIT_LDADD) $(LMDB_LIBS)

check_PROGRAMS += %D%/test_space
%C%_test_space_SOURCES = %D%/test_space.c $(UNIT_FIXTURE)
%C%_test_space_CFLAGS = $(UNIT_CFLAGS)
%C%_test_space_LDADD = $(UNIT_LDADD)
