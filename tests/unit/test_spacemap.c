/* SPDX-License-Identifier: MIT */
/*
 * The free map's rows (txg/spacemap.c): an import takes the free map and
 * every table's space from them instead of walking the block pointers, so
 * after every kind of change (writes, overwrites, discards, snapshots kept
 * and destroyed, clones, datasets destroyed, folds of the change rows into
 * the chunks) an import must find what a walk finds; pool check compares
 * the two. Then the rows are damaged in LMDB, as by a hand that holds the
 * file: rows that do not add up make the import walk, and rows that add up
 * but lie are what pool check reports.
 */
#include <criterion/criterion.h>
#include <lmdb.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "fixture.h"
#include "pool_impl.h"
#include "store.h"
#include "txg/spacemap.h"

#define REC 8192u
#define MIB (1ull << 20)

TPOOL_FIXTURE(2, 64 * MIB)
TestSuite(spacemap, .init = setup, .fini = teardown, .timeout = 240);

static void write_rec(struct stor_ds *ds, unsigned rec, int gen)
{
	unsigned char buf[REC];

	tpat_fill(buf, REC, rec, gen);
	cr_assert_eq(stor_ds_write(ds, (uint64_t)rec * REC, buf, REC), 0, "write %u", rec);
}

static void check_clean(const char *when)
{
	struct stor_verify_report r;
	int ret = stor_pool_verify(tp.pool, &r);

	cr_assert_eq(ret, 0, "%s: verify: %s", when, stor_strerror(ret));
	cr_assert_eq(r.space_errors + r.extent_errors + r.bad_frees, 0,
		     "%s: space %llu extent %llu bad frees %llu", when,
		     (unsigned long long)r.space_errors, (unsigned long long)r.extent_errors,
		     (unsigned long long)r.bad_frees);
	stor_verify_report_free(&r);
}

static uint64_t used_of(const char *name)
{
	struct stor_prop_value v;

	cr_assert_eq(stor_ds_get(tp.pool, name, "used", &v), 0);
	return strtoull(v.value, NULL, 10);
}

/* Every kind of change, each followed by an import that must agree with a walk. */
Test(spacemap, an_import_finds_what_a_walk_finds_after_every_kind_of_change)
{
	const char *snaps[] = { TPOOL_NAME "/a@s1" };
	struct stor_ds *a, *b;
	uint64_t ua, ub;

	spacemap_fold_bytes = 4096; /* fold often */
	a = tpool_ds(&tp, TPOOL_NAME "/a", 4 * MIB, REC);
	b = tpool_ds(&tp, TPOOL_NAME "/b", 4 * MIB, REC);
	for (unsigned i = 0; i < 200; i++) {
		write_rec(a, i, 1);
		write_rec(b, i, 1);
		if (i % 50 == 49)
			cr_assert_eq(stor_pool_sync(tp.pool), 0);
	}
	cr_assert_eq(stor_snap_create(tp.pool, snaps, 1, 0), 0);
	for (unsigned i = 0; i < 200; i += 3)
		write_rec(a, i, 2); /* the old ones go to a@s1 */
	cr_assert_eq(stor_ds_discard(b, 0, 40 * REC), 0);
	for (unsigned i = 100; i < 150; i++)
		write_rec(b, i, 3); /* freed at once */
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	check_clean("before the first import");
	ua = used_of(TPOOL_NAME "/a");
	ub = used_of(TPOOL_NAME "/b");
	stor_ds_close(a);
	stor_ds_close(b);
	tpool_reopen(&tp);
	check_clean("after the first import");
	cr_assert_eq(used_of(TPOOL_NAME "/a"), ua);
	cr_assert_eq(used_of(TPOOL_NAME "/b"), ub);

	cr_assert_eq(stor_ds_clone(tp.pool, TPOOL_NAME "/a@s1", TPOOL_NAME "/c", NULL), 0);
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/c", &a), 0);
	for (unsigned i = 0; i < 20; i++)
		write_rec(a, i, 4);
	stor_ds_close(a);
	cr_assert_eq(stor_ds_destroy(tp.pool, TPOOL_NAME "/b", 0), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	tpool_reopen(&tp);
	check_clean("after a clone and a destroy");
	cr_assert_eq(stor_ds_destroy(tp.pool, TPOOL_NAME "/c", 0), 0);
	cr_assert_eq(stor_snap_destroy(tp.pool, TPOOL_NAME "/a@s1", 0), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	check_clean("after the snapshot's destroy");
	tpool_reopen(&tp);
	check_clean("after the last import");
	cr_assert_eq(used_of(TPOOL_NAME "/a"), 200 * (uint64_t)REC);
}

/* ---- a hand on the LMDB file, the pool closed ---- */

struct lm {
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi space;
};

static void lm_open(struct lm *l)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(mdb_env_create(&l->env), 0);
	mdb_env_set_maxdbs(l->env, 8);
	mdb_env_set_mapsize(l->env, (size_t)4 << 30);
	cr_assert_eq(mdb_env_open(l->env, path, MDB_NOSUBDIR, 0600), 0);
	cr_assert_eq(mdb_txn_begin(l->env, NULL, 0, &l->txn), 0);
	cr_assert_eq(mdb_dbi_open(l->txn, "space", 0, &l->space), 0);
}

static void lm_put(struct lm *l, const void *key, size_t klen, const void *val, size_t vlen)
{
	MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val };

	cr_assert_eq(mdb_put(l->txn, l->space, &k, &v, 0), 0);
}

static void lm_commit(struct lm *l)
{
	cr_assert_eq(mdb_txn_commit(l->txn), 0);
	mdb_env_close(l->env);
}

/* Dataset a with records 0-9 written, the pool closed: a's id. */
static uint64_t ten_records_closed(void)
{
	struct stor_ds *a = tpool_ds(&tp, TPOOL_NAME "/a", 4 * MIB, REC);
	uint64_t id = a->id;

	for (unsigned i = 0; i < 10; i++)
		write_rec(a, i, 1);
	stor_ds_close(a);
	tpool_close(&tp);
	return id;
}

/*
 * A table's sums that add up but lie: the import believes them (a walk
 * would not: so the import did not walk), and pool check names the lie.
 */
Test(spacemap, the_import_takes_a_tables_space_from_the_rows_and_pool_check_catches_a_lie)
{
	uint64_t id = ten_records_closed();
	struct stor_verify_report r;
	uint8_t key[9], *w = key, val[24];
	const uint8_t *rd;
	MDB_val k = { sizeof(key), key }, v;
	struct lm l;

	put_u8(&w, 'o');
	put_u64(&w, id);
	lm_open(&l);
	cr_assert_eq(mdb_get(l.txn, l.space, &k, &v), 0, "no row of the table's sums");
	cr_assert_eq(v.mv_size, sizeof(val));
	rd = v.mv_data;
	cr_assert_eq(get_u64(&rd), 10 * (uint64_t)REC);
	memcpy(val, v.mv_data, sizeof(val));
	w = val;
	put_u64(&w, 11 * (uint64_t)REC);
	lm_put(&l, key, sizeof(key), val, sizeof(val));
	lm_commit(&l);
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(used_of(TPOOL_NAME "/a"), 11 * (uint64_t)REC,
		     "the import walked the pointers instead of reading the rows");
	cr_assert_eq(stor_pool_verify(tp.pool, &r), 0);
	cr_assert_gt(r.space_errors, 0, "pool check passed a table's sums that lie");
	stor_verify_report_free(&r);
}

/*
 * A change row that removes what no chunk holds does not add up: the
 * import walks the pointers instead, finds the truth, and writes the rows
 * anew (pool check clean, and the next import too).
 */
Test(spacemap, rows_that_do_not_add_up_make_the_import_walk_and_write_them_anew)
{
	uint8_t key[9], *w = key, row[15], *rw = row;
	struct lm l;

	ten_records_closed();
	/* a removal of sectors no pointer ever held, as the newest change */
	put_u8(&w, 'd');
	put_u64(&w, UINT64_MAX);
	put_u8(&rw, 1);
	put_u16(&rw, 0);
	put_u32(&rw, 16);
	put_u64(&rw, 100000);
	lm_open(&l);
	lm_put(&l, key, sizeof(key), row, sizeof(row));
	lm_commit(&l);
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(used_of(TPOOL_NAME "/a"), 10 * (uint64_t)REC);
	check_clean("after rows that do not add up");
	tpool_reopen(&tp);
	check_clean("after the rows were written anew");
}
