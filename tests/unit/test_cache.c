/* SPDX-License-Identifier: MIT */
/*
 * The data cache on its own: hit and miss accounting, the byte bound with
 * mixed record sizes, scan resistance of S3-FIFO against plain LRU, drops
 * of a record and of a dataset, stale puts refused after a drop, resizing
 * down to off, and threads racing get/put/drop/resize under a writer
 * protocol like the engine's (publish the block pointer, then drop), where
 * a hit must hold one whole put of that key, never older than a write that
 * had completed before the get began.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "base/cache.h"
#include "fixture.h"

TestSuite(cache, .timeout = 240);

#define COST(len) ((len) + CACHE_ENTRY_OVERHEAD)

/* every 8-byte word names the key and a version, so a torn or misplaced
 * copy shows */
static uint64_t word(uint64_t guid, uint64_t recno, uint64_t ver)
{
	return (guid & 0xff) << 56 | (recno & 0xffff) << 40 | (ver & 0xffffffffffull);
}

static void fill(void *buf, size_t len, uint64_t guid, uint64_t recno, uint64_t ver)
{
	uint64_t *w = buf;
	size_t i;

	for (i = 0; i < len / 8; i++)
		w[i] = word(guid, recno, ver);
}

/* the version a buffer holds, or -1 if any word disagrees */
static int64_t version_of(const void *buf, size_t len, uint64_t guid, uint64_t recno)
{
	const uint64_t *w = buf;
	uint64_t v = w[0] & 0xffffffffffull;
	size_t i;

	for (i = 0; i < len / 8; i++)
		if (w[i] != word(guid, recno, v))
			return -1;
	return (int64_t)v;
}

/* a reader's miss path: generation first, then "read" and put */
static void put_ver(struct cache *c, uint64_t guid, uint64_t recno, size_t len, uint64_t ver)
{
	uint8_t *buf = malloc(len);
	uint64_t gen = cache_gen(c, guid, recno);

	cr_assert_not_null(buf);
	fill(buf, len, guid, recno, ver);
	cache_put(c, guid, recno, buf, len, gen);
	free(buf);
}

static bool has(struct cache *c, uint64_t guid, uint64_t recno, size_t len)
{
	uint8_t *buf = malloc(len);
	bool hit;

	cr_assert_not_null(buf);
	hit = cache_get(c, guid, recno, buf, len) == 0;
	if (hit)
		cr_assert_geq(version_of(buf, len, guid, recno), 0, "torn entry %lu/%lu",
			      (unsigned long)guid, (unsigned long)recno);
	free(buf);
	return hit;
}

Test(cache, counts_hits_misses_and_inserts)
{
	struct cache *c = NULL;
	struct cache_stats st;
	uint8_t buf[4096];

	cr_assert_eq(cache_create(1 << 20, &c), 0);
	cr_assert_eq(cache_get(c, 7, 1, buf, sizeof(buf)), -ENOENT);
	put_ver(c, 7, 1, sizeof(buf), 42);
	cr_assert_eq(cache_get(c, 7, 1, buf, sizeof(buf)), 0);
	cr_assert_eq(version_of(buf, sizeof(buf), 7, 1), 42);
	cr_assert_eq(cache_get(c, 7, 1, buf, 512), -ENOENT, "another length is a miss");
	cr_assert_eq(cache_get(c, 8, 1, buf, sizeof(buf)), -ENOENT);
	cache_stats(c, &st);
	cr_assert_eq(st.hits, 1);
	cr_assert_eq(st.misses, 3);
	cr_assert_eq(st.inserts, 1);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, COST(4096));
	cr_assert_eq(st.capacity, 1 << 20);
	cr_assert_eq(st.evictions, 0);
	/* putting the same record again replaces, it does not add */
	put_ver(c, 7, 1, sizeof(buf), 43);
	cr_assert_eq(cache_get(c, 7, 1, buf, sizeof(buf)), 0);
	cr_assert_eq(version_of(buf, sizeof(buf), 7, 1), 43);
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, COST(4096));
	cache_destroy(c);
}

static void check_bound(unsigned nshards, size_t cap)
{
	enum { N = 2000 };
	static size_t lens[N];
	struct cache *c = NULL;
	struct cache_stats st;
	unsigned i, seed = 1;
	uint64_t bytes = 0;

	cr_assert_eq(cache_create_policy(cap, CACHE_S3FIFO, nshards, &c), 0);
	for (i = 0; i < N; i++) {
		/* 512 B .. 1 MiB, mostly small */
		lens[i] = (size_t)512 << (rand_r(&seed) % (rand_r(&seed) % 8 ? 5 : 12));
		put_ver(c, 1 + i % 3, i, lens[i], i);
		cache_stats(c, &st);
		cr_assert_leq(st.bytes, cap, "put %u: %lu bytes held, bound %zu", i,
			      (unsigned long)st.bytes, cap);
		if (i % 7 == 0)
			has(c, 1 + i % 3, i, lens[i]);
	}
	cache_stats(c, &st);
	cr_assert_gt(st.evictions, 0);
	cr_assert_gt(st.bytes, cap / 2, "the cache should be well used: %lu of %zu",
		     (unsigned long)st.bytes, cap);
	/* the counted bytes are those of the entries held */
	for (i = 0; i < N; i++)
		if (has(c, 1 + i % 3, i, lens[i]))
			bytes += COST(lens[i]);
	cr_assert_eq(bytes, st.bytes);
	cache_destroy(c);
}

Test(cache, holds_to_its_byte_bound_with_mixed_sizes)
{
	check_bound(1, 3 << 20);
	check_bound(0, 16 << 20);
}

/* a hot set hit a few times, then a one-pass scan ten times the cache */
static unsigned hot_left_after_scan(enum cache_policy policy)
{
	enum { HOT = 100, SLOTS = 1000, SCAN = 20000, LEN = 4096 };
	struct cache *c = NULL;
	uint8_t buf[LEN];
	unsigned i, r, left = 0;

	cr_assert_eq(cache_create_policy(SLOTS * COST(LEN), policy, 1, &c), 0);
	for (i = 0; i < HOT; i++)
		put_ver(c, 1, i, LEN, 1);
	for (r = 0; r < 3; r++)
		for (i = 0; i < HOT; i++)
			cr_assert_eq(cache_get(c, 1, i, buf, LEN), 0);
	for (i = 0; i < SCAN; i++)
		if (cache_get(c, 2, i, buf, LEN) < 0)
			put_ver(c, 2, i, LEN, 1);
	for (i = 0; i < HOT; i++)
		left += has(c, 1, i, LEN);
	cache_destroy(c);
	return left;
}

Test(cache, hot_set_survives_a_scan_with_s3fifo_not_with_lru)
{
	unsigned s3 = hot_left_after_scan(CACHE_S3FIFO);
	unsigned lru = hot_left_after_scan(CACHE_LRU);

	cr_assert_eq(s3, 100, "S3-FIFO kept %u of 100 hot records", s3);
	cr_assert_eq(lru, 0, "LRU kept %u of 100 hot records", lru);
}

Test(cache, drop_and_drop_ds_remove_entries)
{
	struct cache *c = NULL;
	struct cache_stats st;
	unsigned i;

	cr_assert_eq(cache_create(8 << 20, &c), 0);
	for (i = 0; i < 200; i++) {
		put_ver(c, 1, i, 8192, i);
		put_ver(c, 2, i, 8192, i);
	}
	cache_drop(c, 1, 5);
	cr_assert(!has(c, 1, 5, 8192));
	cr_assert(has(c, 1, 6, 8192));
	cr_assert(has(c, 2, 5, 8192));
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 399);
	cache_drop(c, 1, 5); /* twice, or never cached: harmless */
	cache_drop(c, 9, 9);

	cache_drop_ds(c, 1);
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 200);
	cr_assert_eq(st.bytes, 200 * COST(8192));
	for (i = 0; i < 200; i++) {
		cr_assert(!has(c, 1, i, 8192), "record 1/%u outlived drop_ds", i);
		cr_assert(has(c, 2, i, 8192), "record 2/%u lost by drop_ds of another", i);
	}
	cache_destroy(c);
}

Test(cache, refuses_a_put_read_before_a_drop)
{
	struct cache *c = NULL;
	uint8_t buf[8192];
	uint64_t g;

	cr_assert_eq(cache_create(8 << 20, &c), 0);
	/* reader takes the generation, a writer overwrites and drops, the
	 * reader's old bytes must not go in */
	g = cache_gen(c, 1, 3);
	cache_drop(c, 1, 3);
	fill(buf, sizeof(buf), 1, 3, 1);
	cache_put(c, 1, 3, buf, sizeof(buf), g);
	cr_assert(!has(c, 1, 3, sizeof(buf)));
	/* a read that starts after the drop may fill */
	put_ver(c, 1, 3, sizeof(buf), 2);
	cr_assert(has(c, 1, 3, sizeof(buf)));

	/* the same across drop_ds (unload-key while a read is in flight) */
	g = cache_gen(c, 1, 4);
	cache_drop_ds(c, 1);
	fill(buf, sizeof(buf), 1, 4, 1);
	cache_put(c, 1, 4, buf, sizeof(buf), g);
	cr_assert(!has(c, 1, 4, sizeof(buf)));
	cr_assert(!has(c, 1, 3, sizeof(buf)));
	cache_destroy(c);

	/* and across a cache that was off at the time of the drop */
	cr_assert_eq(cache_create(0, &c), 0);
	g = cache_gen(c, 1, 5);
	cache_drop(c, 1, 5);
	cache_resize(c, 8 << 20);
	fill(buf, sizeof(buf), 1, 5, 1);
	cache_put(c, 1, 5, buf, sizeof(buf), g);
	cr_assert(!has(c, 1, 5, sizeof(buf)));
	cache_destroy(c);
}

Test(cache, resize_shrinks_at_once_and_zero_turns_it_off)
{
	struct cache *c = NULL;
	struct cache_stats st;
	unsigned i;

	cr_assert_eq(cache_create(16 << 20, &c), 0);
	for (i = 0; i < 1000; i++)
		put_ver(c, 1, i, 8192, i);
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 1000);

	cache_resize(c, 4 << 20);
	cache_stats(c, &st);
	cr_assert_leq(st.bytes, 4 << 20);
	cr_assert_gt(st.evictions, 0);

	cache_resize(c, 0);
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 0);
	cr_assert_eq(st.bytes, 0);
	cr_assert_eq(st.capacity, 0);
	put_ver(c, 1, 1, 8192, 1);
	cr_assert(!has(c, 1, 1, 8192));
	cache_stats(c, &st);
	cr_assert_eq(st.entries, 0);
	cr_assert_eq(st.inserts, 1000, "a put while off inserts nothing");

	cache_resize(c, 4 << 20);
	put_ver(c, 1, 1, 8192, 1);
	cr_assert(has(c, 1, 1, 8192));
	cache_destroy(c);

	/* a NULL cache is an off one */
	cr_assert_eq(cache_get(NULL, 1, 1, &i, sizeof(i)), -ENOENT);
	cache_put(NULL, 1, 1, &i, sizeof(i), 0);
	cache_drop(NULL, 1, 1);
	cache_drop_ds(NULL, 1);
	cache_resize(NULL, 1);
	cache_destroy(NULL);
}

/* ---- threads ---- */

#define T_DS 2
#define T_REC 48
#define T_THREADS 4

struct tkey {
	pthread_mutex_t wlock;       /* writers of one record, as the engine's stripes */
	_Atomic uint64_t bp;         /* the "block pointer": version on disk */
	_Atomic uint64_t done;       /* newest version whose drop has returned */
};

static struct cache *tc;
static struct tkey tkeys[T_DS][T_REC];
static _Atomic uint64_t tversion;
static atomic_bool tstop;
static atomic_ulong tbad, thits, tputs;

static size_t tlen(unsigned r)
{
	return (size_t)512 << (r % 4);
}

static void *hammer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919 + 1, n = 0;
	uint8_t *buf = malloc(4096);

	while (!atomic_load(&tstop)) {
		unsigned d = rand_r(&seed) % T_DS, r = rand_r(&seed) % T_REC;
		unsigned op = rand_r(&seed) % 100;
		struct tkey *k = &tkeys[d][r];
		uint64_t guid = 100 + d;
		size_t len = tlen(r);

		if (op < 65) {
			uint64_t before = atomic_load(&k->done);

			if (cache_get(tc, guid, r, buf, len) == 0) {
				int64_t v = version_of(buf, len, guid, r);

				/* whole, not older than a completed write, not invented */
				if (v < 0 || (uint64_t)v < before ||
				    (uint64_t)v > atomic_load(&k->bp))
					atomic_fetch_add(&tbad, 1);
				atomic_fetch_add(&thits, 1);
			} else {
				uint64_t gen = cache_gen(tc, guid, r);

				fill(buf, len, guid, r, atomic_load(&k->bp));
				cache_put(tc, guid, r, buf, len, gen);
				atomic_fetch_add(&tputs, 1);
			}
		} else if (op < 97) {
			pthread_mutex_lock(&k->wlock);
			uint64_t v = atomic_fetch_add(&tversion, 1) + 1;

			atomic_store(&k->bp, v);
			cache_drop(tc, guid, r);
			atomic_store(&k->done, v);
			pthread_mutex_unlock(&k->wlock);
		} else if (op < 98 && rand_r(&seed) % 16 == 0) {
			/* a destroy: every record of the dataset gets a new version */
			unsigned i;

			for (i = 0; i < T_REC; i++) {
				pthread_mutex_lock(&tkeys[d][i].wlock);
				atomic_store(&tkeys[d][i].bp, atomic_fetch_add(&tversion, 1) + 1);
			}
			cache_drop_ds(tc, guid);
			for (i = 0; i < T_REC; i++) {
				atomic_store(&tkeys[d][i].done, atomic_load(&tkeys[d][i].bp));
				pthread_mutex_unlock(&tkeys[d][i].wlock);
			}
		} else if (op == 99 && ++n % 64 == 0) {
			/* now and then a size that forces evictions, or off */
			static const size_t sizes[] = { 0, 64 << 10, 1 << 20 };

			cache_resize(tc, sizes[rand_r(&seed) % 3]);
		}
	}
	free(buf);
	return NULL;
}

static bool enough_hits(void *arg)
{
	(void)arg;
	return atomic_load(&thits) > 1000;
}

Test(cache, threads_racing_get_put_drop_see_whole_fresh_records)
{
	pthread_t th[T_THREADS];
	struct cache_stats st;
	unsigned i, j;

	for (i = 0; i < T_DS; i++)
		for (j = 0; j < T_REC; j++)
			pthread_mutex_init(&tkeys[i][j].wlock, NULL);
	cr_assert_eq(cache_create_policy(1 << 20, CACHE_S3FIFO, 4, &tc), 0);
	for (i = 0; i < T_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, hammer, (void *)(uintptr_t)i), 0);
	trace_for(2, 20, enough_hits, NULL);
	atomic_store(&tstop, true);
	for (i = 0; i < T_THREADS; i++)
		pthread_join(th[i], NULL);
	cache_stats(tc, &st);
	cr_assert_eq(atomic_load(&tbad), 0, "%lu hits held torn or stale bytes",
		     atomic_load(&tbad));
	cr_assert_gt(atomic_load(&thits), 1000, "only %lu hits", atomic_load(&thits));
	cr_assert_leq(st.bytes, st.capacity);
	cr_log_info("hits %lu puts %lu inserts %lu evictions %lu", atomic_load(&thits),
		    atomic_load(&tputs), (unsigned long)st.inserts, (unsigned long)st.evictions);
	cache_destroy(tc);
}
