/* SPDX-License-Identifier: MIT */
/*
 * Space accounting (space.c): thick volumes keep their refreservation
 * whatever their neighbours write, the slop space keeps overwrites, frees
 * and commits working on a full pool, and `get` reports the space as ZFS
 * does. Pools of a few MiB, so the numbers are known.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds/space.h"
#include "fixture.h"
#include "store.h"
#include "pool_impl.h" /* the space table, against a full rebuild */

#define REC 8192u
#define MIB (1ull << 20)

static struct tpool tp;

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(space, .fini = teardown, .timeout = 240);

/* Create a volume: thick unless @sparse. */
static int mkvol(const char *name, uint64_t volsize, int sparse, struct stor_ds **out)
{
	const char *props[] = { "refreservation=none" };
	struct stor_ds_opts o = { .volsize = volsize, .recordsize = REC, .props = props,
				  .nprops = sparse ? 1 : 0 };

	return stor_ds_create(tp.pool, name, &o, out);
}

/*
 * A thick volume's refreservation of @volsize (REC records): its data, and
 * its metadata on the LUNs - per block pointer a 100-byte log row, per 256 a
 * 40-byte MAC row, in 3 copies of a checkpoint and of as much log again -
 * in whole sectors.
 */
static uint64_t thick_refres(uint64_t volsize)
{
	uint64_t n = volsize / REC, meta = (n * 100 + (n + 255) / 256 * 40) * 3 * 2;

	return volsize + (meta + 4095) / 4096 * 4096;
}

static uint64_t prop_u64(const char *name, const char *prop)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, prop, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", prop, name, stor_strerror(ret));
	return strcmp(v.value, "none") == 0 ? 0 : strtoull(v.value, NULL, 10);
}

/* Write records [from, to) of @ds until one is refused; @return how many went in. */
static unsigned fill(struct stor_ds *ds, unsigned from, unsigned to, int gen, int *last)
{
	unsigned char buf[REC];
	unsigned n;

	*last = 0;
	for (n = from; n < to; n++) {
		tpat_fill(buf, REC, n, gen);
		*last = stor_ds_write(ds, (uint64_t)n * REC, buf, REC);
		if (*last)
			break;
		if (n % 64 == 63)
			cr_assert_eq(stor_pool_sync(tp.pool), 0);
	}
	return n - from;
}

Test(space, a_thick_volume_larger_than_the_pool_is_refused_and_a_sparse_one_is_not)
{
	struct stor_ds *ds = NULL;
	int ret;

	tpool_init(&tp, 2, 2 * MIB, NULL);
	ret = mkvol(TPOOL_NAME "/big", 10ull << 30, 0, &ds);
	cr_assert_eq(ret, STOR_ENOSPC, "got %s", stor_strerror(ret));
	cr_assert_null(ds);
	cr_assert(strstr(stor_pool_last_error(), "not enough space: ") &&
			  strstr(stor_pool_last_error(), "10.7G needed; use -s for a sparse volume"),
		  "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/big", &ds), -ENOENT, "nothing was made");
	ret = mkvol(TPOOL_NAME "/big", 10ull << 30, 1, &ds);
	cr_assert_eq(ret, 0, "sparse: %s", stor_strerror(ret));
	cr_assert_eq(prop_u64(TPOOL_NAME "/big", "refreservation"), 0);
	stor_ds_close(ds);
}

Test(space, a_sparse_neighbour_cannot_eat_a_thick_volumes_reservation)
{
	struct stor_ds *thick, *sparse;
	unsigned n, got;
	uint64_t avail;
	int last;

	struct stor_pool_stat st;

	tpool_init(&tp, 2, 5 * MIB, NULL); /* 8 MiB of data space (1 MiB of labels each), slop 2 MiB */
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/thick", 2 * MIB, 0, &thick), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/sparse", 64 * MIB, 1, &sparse), 0);
	avail = prop_u64(TPOOL_NAME "/sparse", "available");
	got = fill(sparse, 0, 8192, 1, &last);
	cr_assert_eq(last, STOR_ENOSPC, "the neighbour: %s", stor_strerror(last));
	/* what it was told it has: the pool less slop, the metadata reserve and
	 * the thick volume's 2 MiB */
	cr_assert_leq(avail, st.size - 2 * MIB - 2 * MIB, "available %llu", (unsigned long long)avail);
	cr_assert_eq(got, avail / REC, "the neighbour wrote %u records, available %llu", got,
		     (unsigned long long)avail);
	n = fill(thick, 0, 2 * MIB / REC, 2, &last);
	cr_assert_eq(last, 0, "the thick volume after %u records: %s", n, stor_strerror(last));
	cr_assert_eq(n, 2 * MIB / REC);
	cr_assert_eq(stor_ds_flush(thick), 0);
	stor_ds_close(thick);
	stor_ds_close(sparse);
}

/*
 * The pool is full of ordinary writes: new data is refused, but what must
 * work on a full pool does, out of the slop space.
 */
Test(space, a_pool_full_of_writes_still_overwrites_flushes_discards_destroys_and_exports)
{
	struct stor_ds *ds, *other;
	unsigned char buf[REC];
	unsigned n;
	int last, ret;

	tpool_init(&tp, 2, 2 * MIB, NULL); /* 2 MiB of data space, slop 1 MiB (half) */
	cr_assert_eq(mkvol(TPOOL_NAME "/a", 64 * MIB, 1, &ds), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/b", 64 * MIB, 1, &other), 0);
	cr_assert_eq(fill(other, 0, 16, 1, &last), 16);
	n = fill(ds, 0, 8192, 1, &last);
	cr_assert_eq(last, STOR_ENOSPC, "%s", stor_strerror(last));
	/* every record of the full pool overwritten, twice, without a flush between */
	for (int gen = 2; gen <= 3; gen++) {
		for (unsigned i = 0; i < n; i++) {
			tpat_fill(buf, REC, i, gen);
			ret = stor_ds_write(ds, (uint64_t)i * REC, buf, REC);
			cr_assert_eq(ret, 0, "overwrite %u of a full pool: %s", i, stor_strerror(ret));
		}
	}
	tpat_fill(buf, REC, n, 3);
	ret = stor_ds_write(ds, (uint64_t)n * REC, buf, REC);
	cr_assert_eq(ret, STOR_ENOSPC, "new data on a full pool: %s", stor_strerror(ret));
	cr_assert_eq(stor_ds_flush(ds), 0);
	cr_assert_eq(stor_ds_discard(ds, 0, 2 * REC), 0);
	cr_assert_eq(stor_ds_discard(ds, 5 * REC + REC / 2, REC), 0, "a discard that rewrites edges");
	cr_assert_eq(stor_ds_flush(ds), 0);
	stor_ds_close(other);
	cr_assert_eq(stor_ds_destroy(tp.pool, TPOOL_NAME "/b", 0), 0);
	stor_ds_close(ds);
	tpool_reopen(&tp); /* export and import */
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/a", &ds), 0);
	for (unsigned i = 7; i < n; i++) {
		cr_assert_eq(stor_ds_read(ds, (uint64_t)i * REC, buf, REC), 0);
		cr_assert_eq(tpat_check(buf, REC, i), 3, "record %u after import", i);
	}
	stor_ds_close(ds);
}

Test(space, a_thick_volume_grows_only_when_the_pool_can_guarantee_it)
{
	struct stor_ds *ds;
	int ret;

	tpool_init(&tp, 2, 4 * MIB, NULL); /* 6 MiB of data space, slop 2 MiB */
	cr_assert_eq(mkvol(TPOOL_NAME "/t", 2 * MIB, 0, &ds), 0);
	ret = stor_ds_set(tp.pool, TPOOL_NAME "/t", "volsize", "16M");
	cr_assert_eq(ret, STOR_ENOSPC, "%s", stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "not enough space"), "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_volsize(ds), 2 * MIB, "refused: not grown");
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "refreservation"), thick_refres(2 * MIB));
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/t", "volsize", "3M"), 0);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "refreservation"), thick_refres(3 * MIB), "grows with it");
	/* sparse, it grows past the pool */
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/t", "refreservation", "none"), 0);
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/t", "volsize", "1G"), 0);
	ret = stor_ds_set(tp.pool, TPOOL_NAME "/t", "refreservation", "auto");
	cr_assert_eq(ret, STOR_ENOSPC, "auto is 1G now: %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, TPOOL_NAME "/t", "reservation", "7M");
	cr_assert_eq(ret, STOR_ENOSPC, "past slop: %s", stor_strerror(ret));
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/t", "reservation", "1M"), 0);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "reservation"), 1 * MIB);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "reservation"), 1 * MIB, "kept across import");
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "volsize"), 1ull << 30);
}

Test(space, get_reports_used_available_and_referenced_as_zfs_does)
{
	struct stor_pool_stat st;
	struct stor_ds *t, *s;
	unsigned char buf[2 * REC];
	uint64_t slop = 2 * MIB, fr, rr, avail;

	tpool_init(&tp, 2, 4 * MIB, NULL); /* 6 MiB of data space, slop 2 MiB */
	cr_assert_eq(mkvol(TPOOL_NAME "/t", 1 * MIB, 0, &t), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/s", 1 * MIB, 1, &s), 0);
	memset(buf, 0x5a, sizeof(buf));
	cr_assert_eq(stor_ds_write(t, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_write(s, 0, buf, REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	fr = st.size - st.used;
	rr = thick_refres(1 * MIB) - 2 * REC;
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "refreservation"), thick_refres(1 * MIB));
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "referenced"), 2 * REC);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "usedbydataset"), 2 * REC);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "usedbyrefreservation"), rr);
	cr_assert_eq(prop_u64(TPOOL_NAME "/t", "used"), thick_refres(1 * MIB));
	/* free space less slop, less what of the metadata reserve (at most 1/16
	 * of each LUN, alloc.c) the log does not use yet */
	avail = prop_u64(TPOOL_NAME "/t", "available");
	cr_assert(avail <= fr - slop && avail >= fr - slop - st.size / 16, "available %llu of %llu",
		  (unsigned long long)avail, (unsigned long long)(fr - slop));
	cr_assert_eq(prop_u64(TPOOL_NAME "/s", "used"), REC);
	cr_assert_eq(prop_u64(TPOOL_NAME "/s", "usedbyrefreservation"), 0);
	cr_assert_eq(prop_u64(TPOOL_NAME "/s", "available"), avail - rr);
	cr_assert_eq(prop_u64(TPOOL_NAME, "usedbychildren"), thick_refres(1 * MIB) + REC);
	cr_assert_eq(prop_u64(TPOOL_NAME, "used"), thick_refres(1 * MIB) + REC);
	cr_assert_eq(prop_u64(TPOOL_NAME, "available"), avail - rr);
	stor_ds_close(t);
	stor_ds_close(s);
}

/* A reservation covers the dataset and its descendants: a child writes into it, a neighbour cannot. */
Test(space, a_parents_reservation_is_kept_for_its_children)
{
	struct stor_pool_stat st;
	struct stor_ds *child, *other;
	unsigned got, n;
	uint64_t avail;
	int last;

	tpool_init(&tp, 2, 5 * MIB, NULL); /* 8 MiB of data space, slop 2 MiB */
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(stor_ds_create(tp.pool, TPOOL_NAME "/p", NULL, NULL), 0, "a container: sparse");
	cr_assert_eq(prop_u64(TPOOL_NAME "/p", "refreservation"), 0);
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/p", "reservation", "3M"), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/p/c", 64 * MIB, 1, &child), 0);
	cr_assert_eq(mkvol(TPOOL_NAME "/other", 64 * MIB, 1, &other), 0);
	avail = prop_u64(TPOOL_NAME "/other", "available");
	cr_assert_leq(avail, st.size - 2 * MIB - 3 * MIB, "available %llu", (unsigned long long)avail);
	got = fill(other, 0, 8192, 1, &last);
	cr_assert_eq(last, STOR_ENOSPC, "the neighbour: %s", stor_strerror(last));
	cr_assert_eq(got, avail / REC, "the neighbour wrote %u records, available %llu", got,
		     (unsigned long long)avail);
	n = fill(child, 0, 3 * MIB / REC, 2, &last);
	cr_assert_eq(last, 0, "the child after %u records: %s", n, stor_strerror(last));
	cr_assert_eq(prop_u64(TPOOL_NAME "/p", "used"), 3 * MIB);
	cr_assert_eq(prop_u64(TPOOL_NAME "/p", "usedbychildren"), 3 * MIB);
	/* the reservation is used up: the next record of new data has nowhere to go */
	cr_assert_eq(fill(child, 3 * MIB / REC, 3 * MIB / REC + 1, 2, &last), 0);
	cr_assert_eq(last, STOR_ENOSPC, "%s", stor_strerror(last));
	stor_ds_close(child);
	stor_ds_close(other);
}

/*
 * A thick volume reserves the metadata its records will need too: one whose
 * data alone fits what is available but not with its block pointers in the
 * log is refused, and one that fits with them can be written whole.
 */
Test(space, a_thick_volume_reserves_room_for_its_metadata_too)
{
	struct stor_pool_stat st;
	struct stor_ds *ds = NULL;
	uint64_t avail, v;
	unsigned n;
	int last, ret;

	tpool_init(&tp, 2, 4 * MIB, NULL); /* 6 MiB of data space, slop 2 MiB */
	avail = prop_u64(TPOOL_NAME, "available");
	v = avail / REC * REC;
	cr_assert_gt(thick_refres(v), avail, "pool too large to tell: %llu available",
		     (unsigned long long)avail);
	ret = mkvol(TPOOL_NAME "/data-only", v, 0, &ds);
	cr_assert_eq(ret, STOR_ENOSPC, "a volume of all the space, no room for its metadata: %s",
		     stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "not enough space"), "%s", stor_pool_last_error());
	while (thick_refres(v) > avail)
		v -= REC;
	cr_assert_eq(mkvol(TPOOL_NAME "/fits", v, 0, &ds), 0, "%s", stor_pool_last_error());
	cr_assert_eq(prop_u64(TPOOL_NAME "/fits", "refreservation"), thick_refres(v));
	n = fill(ds, 0, (unsigned)(v / REC), 1, &last);
	cr_assert_eq(n, v / REC, "record %u of %llu refused: %s", n, (unsigned long long)(v / REC),
		     stor_strerror(last));
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_null(strstr(st.meta_log, "lag"), "%s", st.meta_log);
	/* and overwrites of all of it still go through */
	n = fill(ds, 0, (unsigned)(v / REC), 2, &last);
	cr_assert_eq(n, v / REC, "overwrite %u refused: %s", n, stor_strerror(last));
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	stor_ds_close(ds);
}

/* The space table's parents and total, as the pool holds them now. */
struct sp_copy {
	size_t n;
	const struct stor_ds *ds[16];
	int par[16];
	uint64_t resv;
};

static void sp_take(struct sp_copy *c)
{
	struct stor_pool *p = tp.pool;

	pthread_mutex_lock(&p->space_lock);
	c->n = p->sp_n;
	cr_assert_leq(c->n, 16);
	for (size_t i = 0; i < c->n; i++) {
		c->ds[i] = p->sp_ds[i];
		c->par[i] = p->sp_parent[i];
		cr_assert_eq(p->sp_ds[i]->sp_idx, i, "%s: sp_idx %zu at %zu", p->sp_ds[i]->name,
			     p->sp_ds[i]->sp_idx, i);
	}
	c->resv = atomic_load(&p->resv_total);
	pthread_mutex_unlock(&p->space_lock);
}

/*
 * A create grows the space table by one entry instead of rebuilding it
 * (space_insert_locked): after each create, in an order that inserts at the
 * front, in the middle and at the end, under parents with reservations,
 * the table is what a whole rebuild makes of the same datasets.
 */
Test(space, a_create_leaves_the_space_table_a_whole_rebuild_would_make)
{
	static const char *const names[] = { "m", "m/b", "a", "m/a", "z", "m/a/x", "b", "m/c" };
	struct sp_copy inc, full;

	tpool_init(&tp, 2, 64 * MIB, NULL);
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		char name[64];

		snprintf(name, sizeof(name), TPOOL_NAME "/%s", names[k]);
		cr_assert_eq(mkvol(name, 1 * MIB, (int)(k % 2), NULL), 0, "create %s", name);
		if (k == 2)
			cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/m", "reservation", "2M"), 0);
		sp_take(&inc);
		pthread_mutex_lock(&tp.pool->admin);
		cr_assert_eq(space_sync_locked(tp.pool), 0);
		pthread_mutex_unlock(&tp.pool->admin);
		sp_take(&full);
		cr_assert_eq(inc.n, full.n, "after %s", name);
		for (size_t i = 0; i < full.n; i++) {
			cr_assert_eq(inc.ds[i], full.ds[i], "after %s: entry %zu", name, i);
			cr_assert_eq(inc.par[i], full.par[i], "after %s: parent of %s", name,
				     full.ds[i]->name);
		}
		cr_assert_eq(inc.resv, full.resv, "after %s: reserved %llu, a rebuild says %llu",
			     name, (unsigned long long)inc.resv, (unsigned long long)full.resv);
	}
}
