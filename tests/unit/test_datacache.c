/* SPDX-License-Identifier: MIT */
/*
 * The data cache in the record pipeline: hits and misses are counted, the
 * primarycache property decides what is cached, overwrites never serve old
 * data, and no plaintext of a locked, destroyed or exported dataset stays
 * cached.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define VOL (1u << 20)

static struct tpool tp;
static void setup(void)
{
	tpool_init(&tp, 2, 32u << 20, NULL);
	cr_assert_eq(stor_cache_set_size(8u << 20), 0);
}
static void teardown(void)
{
	stor_cache_set_size(0);
	tpool_fini(&tp);
}
TestSuite(datacache, .init = setup, .fini = teardown, .timeout = 240);

static struct stor_ds *mk(const char *name, const char *const *props, size_t n,
			  const struct stor_key_material *key)
{
	struct stor_ds_opts o = { .volsize = VOL, .props = props, .nprops = n, .key = key };

	return tpool_ds_opts(&tp, name, &o);
}

static struct stor_io_stats ds_stats(const char *name)
{
	struct stor_io_stats st;

	cr_assert_eq(stor_ds_io_stats(tp.pool, name, &st), 0);
	return st;
}

Test(datacache, second_read_hits_and_is_counted)
{
	struct stor_ds *ds = mk("tank/a", NULL, 0, NULL);
	uint8_t in[8192], out[8192];
	struct stor_cache_stats cs;

	tpat_fill(in, sizeof(in), 1, 1);
	cr_assert_eq(stor_ds_write(ds, 8192, in, sizeof(in)), 0);
	cr_assert_eq(stor_ds_read(ds, 8192, out, sizeof(out)), 0);
	cr_assert_eq(ds_stats("tank/a").cache_misses, 1);
	cr_assert_eq(ds_stats("tank/a").cache_hits, 0);
	memset(out, 0, sizeof(out));
	cr_assert_eq(stor_ds_read(ds, 8192 + 100, out, 200), 0);
	cr_assert(memcmp(out, in + 100, 200) == 0);
	cr_assert_eq(ds_stats("tank/a").cache_hits, 1);
	stor_cache_stats(&cs);
	cr_assert_geq(cs.entries, 1);
	stor_ds_close(ds);
}

Test(datacache, overwrite_is_never_served_stale)
{
	struct stor_ds *ds = mk("tank/a", NULL, 0, NULL);
	uint8_t in[8192], out[8192];

	for (uint64_t gen = 1; gen < 20; gen++) {
		tpat_fill(in, sizeof(in), 2, gen);
		cr_assert_eq(stor_ds_write(ds, 2 * 8192, in, sizeof(in)), 0);
		cr_assert_eq(stor_ds_read(ds, 2 * 8192, out, sizeof(out)), 0);
		cr_assert_eq(tpat_check(out, sizeof(out), 2), (int64_t)gen);
		cr_assert_eq(stor_ds_read(ds, 2 * 8192, out, sizeof(out)), 0);
		cr_assert_eq(tpat_check(out, sizeof(out), 2), (int64_t)gen, "cached read is stale");
	}
	cr_assert_eq(stor_ds_discard(ds, 2 * 8192, 8192), 0);
	cr_assert_eq(stor_ds_read(ds, 2 * 8192, out, sizeof(out)), 0);
	cr_assert_eq(tpat_check(out, sizeof(out), 2), 0, "discarded record served from the cache");
	stor_ds_close(ds);
}

Test(datacache, primarycache_metadata_never_fills_the_cache)
{
	static const char *const meta[] = { "primarycache=metadata" };
	struct stor_ds *ds = mk("tank/m", meta, 1, NULL);
	uint8_t buf[8192];
	struct stor_cache_stats cs;

	memset(buf, 3, sizeof(buf));
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 0);
	cr_assert_eq(ds_stats("tank/m").cache_hits + ds_stats("tank/m").cache_misses, 0);
	/* inherited from a parent, and switched at run time */
	cr_assert_eq(stor_ds_set(tp.pool, "tank", "primarycache", "none"), 0);
	stor_ds_close(ds);
	ds = mk("tank/n", NULL, 0, NULL);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 0);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/n", "primarycache", "all"), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 1);
	stor_ds_close(ds);
}

Test(datacache, unload_key_leaves_nothing_cached_and_reads_fail)
{
	static const char *const p[] = { "encryption=aes-256-ccm", "keyformat=raw" };
	uint8_t key[32], buf[8192];
	struct stor_key_material km = { key, sizeof(key) };
	struct stor_cache_stats cs;
	struct stor_ds *ds;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(7 + 37 * i); /* one byte repeated is refused as a key */
	ds = mk("tank/e", p, 2, &km);
	memset(buf, 9, sizeof(buf));
	for (int r = 0; r < 8; r++)
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * 8192, buf, sizeof(buf)), 0);
	for (int r = 0; r < 8; r++)
		cr_assert_eq(stor_ds_read(ds, (uint64_t)r * 8192, buf, sizeof(buf)), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 8);
	cr_assert_eq(stor_key_unload(tp.pool, "tank/e", STOR_FORCE), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 0, "plaintext of a locked dataset stayed cached");
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), STOR_ENOKEY);
	stor_ds_close(ds);
}

Test(datacache, destroy_drops_the_dataset)
{
	struct stor_ds *ds = mk("tank/d", NULL, 0, NULL);
	uint8_t buf[8192] = { 1 };
	struct stor_cache_stats cs;

	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	stor_ds_close(ds);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 1);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d", 0), 0);
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 0);
}

/* cp -a of the pool's directory (LMDB state, key file, sparse LUN files) */
static void copy_dir(const char *from, const char *to)
{
	char cmd[3 * 1024];

	snprintf(cmd, sizeof(cmd),
		 "rm -rf '%s' && mkdir -p '%s' && cp -a --sparse=always '%s/.' '%s/'", to, to,
		 from, to);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(datacache, export_drops_the_pool_and_import_reads_what_the_luns_hold)
{
	uint8_t v1[2][8192], v2[8192], buf[8192], patch[200];
	struct stor_cache_stats cs;
	struct stor_ds *ds = mk("tank/x", NULL, 0, NULL);
	char snap[1100], cmd[1200];

	/* generation 1 of records 0 and 1, on disk; the pool as it is now is kept aside */
	for (int r = 0; r < 2; r++) {
		tpat_fill(v1[r], sizeof(v1[r]), (uint64_t)r, 1);
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * 8192, v1[r], sizeof(v1[r])), 0);
	}
	stor_ds_close(ds);
	tpool_close(&tp);
	snprintf(snap, sizeof(snap), "%s.snap", tp.dir);
	copy_dir(tp.dir, snap);

	/* generation 2, read back: in the cache when the pool is exported */
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/x", &ds), 0);
	for (int r = 0; r < 2; r++) {
		tpat_fill(v2, sizeof(v2), (uint64_t)r, 2);
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * 8192, v2, sizeof(v2)), 0);
		cr_assert_eq(stor_ds_read(ds, (uint64_t)r * 8192, buf, sizeof(buf)), 0);
	}
	stor_cache_stats(&cs);
	cr_assert_eq(cs.entries, 2);
	stor_ds_close(ds);
	tpool_close(&tp);
	stor_cache_stats(&cs);
	cr_expect_eq(cs.entries, 0, "export left %llu records in the cache",
		     (unsigned long long)cs.entries);

	/* meanwhile the LUNs went back to generation 1 (another host, a restore) */
	copy_dir(snap, tp.dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", snap);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/x", &ds), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	cr_expect_eq(tpat_check(buf, sizeof(buf), 0), 1, "record 0 read generation %lld",
		     (long long)tpat_check(buf, sizeof(buf), 0));
	/* a partial write merges into what the LUN holds, not into the old cache entry */
	memset(patch, 0xab, sizeof(patch));
	cr_assert_eq(stor_ds_write(ds, 8192 + 100, patch, sizeof(patch)), 0);
	memcpy(v1[1] + 100, patch, sizeof(patch));
	cr_assert_eq(stor_ds_read(ds, 8192, buf, sizeof(buf)), 0);
	cr_assert_arr_eq(buf, v1[1], sizeof(buf), "partial write merged stale data");
	stor_ds_close(ds);
}
