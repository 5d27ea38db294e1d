/* SPDX-License-Identifier: MIT */
/*
 * Snapshots on a real pool: a snapshot reads what was written before it
 * while the head moves on; creation is atomic across datasets; destroy
 * returns exactly the space no one else holds; 100 snapshots of a busy
 * dataset destroyed in random order leave no leaked or doubly referenced
 * extent (stor_pool_verify) and every survivor reads its own data; the
 * metadata log on the LUNs carries them; encrypted datasets keep their
 * snapshots' pointers authenticated. Many snapshots of a dataset are found
 * by name through renames, destroys, rollback, promote and an import (the
 * name index), and the one-pass listing says what a get of each cell says.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <lmdb.h>

#include "fixture.h"

#define REC 4096u
#define NREC 64u
#define VOL ((uint64_t)REC * NREC)

static struct tpool tp;

static void setup(void)
{
	setenv("TMPDIR", "/dev/shm", 0); /* the LUN traffic stays off the disk */
}

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(snapshot, .init = setup, .fini = teardown, .timeout = 240);

static void assert_clean(const char *when)
{
	struct stor_verify_report r;
	int ret = stor_pool_verify(tp.pool, &r);
	char first[128] = "";

	if (r.nfindings && r.findings[0].kind <= STOR_VERIFY_MAC_ROOT)
		snprintf(first, sizeof(first), ", the first in %s from record %llu",
			 r.findings[0].table, (unsigned long long)r.findings[0].first);
	stor_verify_report_free(&r);
	cr_assert_eq(ret, 0, "%s: verify: %s", when, stor_strerror(ret));
	cr_assert_eq(r.extent_errors + r.space_errors + r.bad_frees + r.cksum_errors +
			     r.nonce_repeats + r.mac_errors,
		     0,
		     "%s: %llu extent errors (leaked or twice referenced), %llu space errors, "
		     "%llu double frees, %llu checksum errors, %llu nonce repeats, "
		     "%llu MAC errors%s",
		     when, (unsigned long long)r.extent_errors, (unsigned long long)r.space_errors,
		     (unsigned long long)r.bad_frees, (unsigned long long)r.cksum_errors,
		     (unsigned long long)r.nonce_repeats, (unsigned long long)r.mac_errors, first);
}

static void put(struct stor_ds *ds, uint64_t rec, uint64_t gen)
{
	uint8_t buf[REC];
	int ret;

	tpat_fill(buf, REC, rec, gen);
	ret = stor_ds_write(ds, rec * REC, buf, REC);
	cr_assert_eq(ret, 0, "write record %llu: %s", (unsigned long long)rec, stor_strerror(ret));
}

/* The generation record @rec of @name reads as (0: zeros). */
static int64_t gen_of(const char *name, uint64_t rec)
{
	uint8_t buf[REC];
	struct stor_ds *ds = NULL;
	int ret = stor_ds_open(tp.pool, name, &ds);

	cr_assert_eq(ret, 0, "open %s: %s", name, stor_strerror(ret));
	ret = stor_ds_read(ds, rec * REC, buf, REC);
	stor_ds_close(ds);
	cr_assert_eq(ret, 0, "read %s record %llu: %s", name, (unsigned long long)rec,
		     stor_strerror(ret));
	return tpat_check(buf, REC, rec);
}

static void snap(const char *name)
{
	int ret = stor_snap_create(tp.pool, &name, 1, 0);

	cr_assert_eq(ret, 0, "snapshot %s: %s (%s)", name, stor_strerror(ret),
		     stor_pool_last_error());
}

static void destroy(const char *name)
{
	int ret = stor_ds_destroy(tp.pool, name, 0);

	cr_assert_eq(ret, 0, "destroy %s: %s (%s)", name, stor_strerror(ret),
		     stor_pool_last_error());
}

static void sync_pool(void)
{
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
}

Test(snapshot, a_snapshot_reads_what_was_written_before_it_and_the_head_moves_on)
{
	struct stor_ds *ds;
	uint64_t used_a;

	tpool_init(&tp, 2, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (uint64_t r = 0; r < NREC; r += 2)
		put(ds, r, 1); /* A; the odd records are holes */
	sync_pool();
	used_a = tpool_used(&tp);
	snap("tank/v@a");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 2); /* B over everything, holes too */
	cr_assert_eq(stor_ds_discard(ds, 0, REC), 0);
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/v@a", r), r % 2 ? 0 : 1, "snapshot record %llu",
			     (unsigned long long)r);
		cr_assert_eq(gen_of("tank/v", r), r ? 2 : 0, "head record %llu",
			     (unsigned long long)r);
	}
	sync_pool();
	assert_clean("with the snapshot");
	cr_assert_gt(tpool_used(&tp), used_a, "the snapshot keeps A's extents");
	stor_ds_close(ds);
	destroy("tank/v@a");
	sync_pool();
	/* the head now holds NREC - 1 records where A had NREC / 2 */
	cr_assert_eq(tpool_used(&tp), used_a + (NREC / 2 - 1) * (uint64_t)REC,
		     "used %llu, want %llu", (unsigned long long)tpool_used(&tp),
		     (unsigned long long)(used_a + (NREC / 2 - 1) * (uint64_t)REC));
	assert_clean("after the destroy");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@a", &ds), -ENOENT);
}

Test(snapshot, destroying_the_last_reference_returns_the_space_exactly)
{
	struct stor_ds *ds;
	uint64_t before;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 1);
	sync_pool();
	before = tpool_used(&tp);
	snap("tank/v@a");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 2);
	snap("tank/v@b");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 3);
	sync_pool();
	cr_assert_eq(tpool_used(&tp), before * 3, "three generations are held");
	destroy("tank/v@a");
	sync_pool();
	cr_assert_eq(tpool_used(&tp), before * 2);
	destroy("tank/v@b");
	sync_pool();
	cr_assert_eq(tpool_used(&tp), before, "used %llu, want %llu as before the snapshots",
		     (unsigned long long)tpool_used(&tp), (unsigned long long)before);
	assert_clean("after both");
	stor_ds_close(ds);
}

Test(snapshot, a_middle_snapshot_destroyed_hands_what_older_ones_need_to_them)
{
	struct stor_ds *ds;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	put(ds, 0, 1);
	put(ds, 1, 1);
	snap("tank/v@a");
	put(ds, 2, 2);
	snap("tank/v@b");
	put(ds, 0, 3); /* born before @a, killed after @b: @b keeps it, @a needs it */
	put(ds, 2, 3); /* born between: only @b needs it */
	destroy("tank/v@b");
	cr_assert_eq(gen_of("tank/v@a", 0), 1);
	cr_assert_eq(gen_of("tank/v@a", 1), 1);
	cr_assert_eq(gen_of("tank/v@a", 2), 0);
	cr_assert_eq(gen_of("tank/v", 0), 3);
	cr_assert_eq(gen_of("tank/v", 2), 3);
	sync_pool();
	assert_clean("after the middle one went");
	stor_ds_close(ds);
}

Test(snapshot, several_datasets_are_snapshotted_in_one_txg)
{
	const char *names[] = { "tank/a@s", "tank/b@s" };
	struct stor_prop_value va, vb;
	struct stor_ds *a, *b;

	tpool_init(&tp, 1, 16u << 20, NULL);
	a = tpool_ds(&tp, "tank/a", VOL, REC);
	b = tpool_ds(&tp, "tank/b", VOL, REC);
	tpool_ds(&tp, "tank/a/c", VOL, REC);
	/* names that sort between "tank/a" and its descendants, and after them */
	tpool_ds(&tp, "tank/a-b", VOL, REC);
	tpool_ds(&tp, "tank/a/c/d", VOL, REC);
	tpool_ds(&tp, "tank/a0", VOL, REC);
	put(a, 0, 1);
	put(b, 0, 1);
	cr_assert_eq(stor_snap_create(tp.pool, names, 2, 0), 0);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a@s", "createtxg", &va), 0);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/b@s", "createtxg", &vb), 0);
	cr_assert_str_eq(va.value, vb.value);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a@s", "type", &va), 0);
	cr_assert_str_eq(va.value, "snapshot");
	/* a name taken fails the whole call: nothing is made */
	const char *again[] = { "tank/a@t", "tank/b@s" };
	cr_assert_eq(stor_snap_create(tp.pool, again, 2, 0), -EEXIST);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a@t", "type", &va), -ENOENT);
	/* -r: the descendants too */
	const char *rec[] = { "tank/a@r" };
	cr_assert_eq(stor_snap_create(tp.pool, rec, 1, STOR_RECURSIVE), 0);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a/c@r", "type", &va), 0);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a/c/d@r", "type", &va), 0);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/b@r", "type", &va), -ENOENT);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a-b@r", "type", &va), -ENOENT);
	cr_assert_eq(stor_ds_get(tp.pool, "tank/a0@r", "type", &va), -ENOENT);
	/* bad names */
	const char *bad[] = { "tank/a@", "tank/a@x%y", "tank/a@x@y", "@x", "tank/a@x y" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		cr_assert_eq(stor_snap_create(tp.pool, &bad[i], 1, 0), STOR_EBADNAME, "%s", bad[i]);
	const char *none[] = { "tank/zz@x" };
	cr_assert_eq(stor_snap_create(tp.pool, none, 1, 0), -ENOENT);
	stor_ds_close(a);
	stor_ds_close(b);
}

Test(snapshot, a_snapshot_is_read_only_and_holds_its_dataset)
{
	uint8_t buf[REC] = { 0 };
	struct stor_ds *ds, *s = NULL;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	put(ds, 0, 1);
	stor_ds_close(ds);
	snap("tank/v@a");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@a", &s), 0);
	cr_assert_eq(stor_ds_write(s, 0, buf, REC), -EROFS);
	cr_assert_eq(stor_ds_discard(s, 0, REC), -EROFS);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v@a", 0), -EBUSY, "open");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v", STOR_RECURSIVE), -EBUSY, "open");
	stor_ds_close(s);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v", 0), -EBUSY, "has snapshots");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v", STOR_RECURSIVE), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@a", &s), -ENOENT);
	sync_pool();
	assert_clean("dataset and snapshot gone");
	cr_assert_eq(tpool_used(&tp), 0);
}

Test(snapshot, ranges_destroy_every_snapshot_between_their_ends)
{
	static const char *const n[] = { "tank/v@s0", "tank/v@s1", "tank/v@s2", "tank/v@s3",
					 "tank/v@s4" };
	struct stor_ds *ds, *x = NULL;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (int i = 0; i < 5; i++) {
		put(ds, 0, (uint64_t)i + 1);
		snap(n[i]);
	}
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v@s3%s1", 0), -EINVAL, "reversed");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/v@s1%nope", 0), -ENOENT);
	destroy("tank/v@s1%s3");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@s2", &x), -ENOENT);
	cr_assert_eq(gen_of("tank/v@s0", 0), 1);
	cr_assert_eq(gen_of("tank/v@s4", 0), 5);
	destroy("tank/v@%");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@s0", &x), -ENOENT);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@s4", &x), -ENOENT);
	sync_pool();
	assert_clean("all gone");
	stor_ds_close(ds);
}

/* Each snapshot's expected generations, the head's in model[NSNAP]. */
#define NSNAP 100
static uint32_t model[NSNAP + 1][NREC];

Test(snapshot, a_hundred_snapshots_of_a_busy_dataset_destroyed_in_random_order_leak_nothing)
{
	char name[NSNAP][32];
	int order[NSNAP], alive[NSNAP];
	struct stor_ds *ds;
	uint64_t gen = 0, empty;
	unsigned seed = 19;

	tpool_init(&tp, 2, 32u << 20, NULL);
	empty = tpool_used(&tp);
	ds = tpool_ds(&tp, "tank/busy", VOL, REC);
	for (int s = 0; s < NSNAP; s++) {
		for (int k = 0; k < 8; k++) {
			uint64_t r = (uint64_t)rand_r(&seed) % NREC;

			if (rand_r(&seed) % 5 == 0) {
				cr_assert_eq(stor_ds_discard(ds, r * REC, REC), 0);
				model[NSNAP][r] = 0;
			} else {
				put(ds, r, ++gen);
				model[NSNAP][r] = (uint32_t)gen;
			}
		}
		if (s % 7 == 0)
			sync_pool(); /* some snapshots share nothing staged, some do */
		snprintf(name[s], sizeof(name[s]), "tank/busy@s%d", s);
		snap(name[s]);
		memcpy(model[s], model[NSNAP], sizeof(model[s]));
		order[s] = s;
		alive[s] = 1;
	}
	for (int i = NSNAP - 1; i > 0; i--) {
		int j = rand_r(&seed) % (i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < NSNAP; i++) {
		destroy(name[order[i]]);
		alive[order[i]] = 0;
		/* overwrites between destroys move pointers into the newest survivor */
		if (i % 3 == 0) {
			uint64_t r = (uint64_t)rand_r(&seed) % NREC;

			put(ds, r, ++gen);
			model[NSNAP][r] = (uint32_t)gen;
		}
		if (i % 10 != 9)
			continue;
		sync_pool();
		assert_clean("during the destroys");
		for (int s = 0; s < NSNAP; s++) {
			if (!alive[s])
				continue;
			for (uint64_t r = 0; r < NREC; r += 5)
				cr_assert_eq(gen_of(name[s], r), model[s][r],
					     "%s record %llu after %d destroys", name[s],
					     (unsigned long long)r, i + 1);
		}
	}
	for (uint64_t r = 0; r < NREC; r++)
		cr_assert_eq(gen_of("tank/busy", r), model[NSNAP][r]);
	sync_pool();
	assert_clean("every snapshot destroyed");
	stor_ds_close(ds);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/busy", 0), 0);
	sync_pool();
	cr_assert_eq(tpool_used(&tp), empty, "everything returned");
}

Test(snapshot, snapshots_survive_an_import_from_the_luns_alone)
{
	char mdb[PATH_MAX + 64];
	struct stor_ds *ds;

	tpool_init(&tp, 2, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 1);
	snap("tank/v@a");
	for (uint64_t r = 0; r < NREC; r += 2)
		put(ds, r, 2);
	snap("tank/v@b");
	for (uint64_t r = 0; r < NREC; r += 4)
		put(ds, r, 3);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	assert_clean("reopened");
	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(mdb), 0, "unlink %s: %s", mdb, strerror(errno));
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/v@a", r), 1);
		cr_assert_eq(gen_of("tank/v@b", r), r % 2 ? 1 : 2);
		cr_assert_eq(gen_of("tank/v", r), r % 4 == 0 ? 3 : r % 2 ? 1 : 2);
	}
	assert_clean("rebuilt from the LUNs");
	/* a snapshot made after the import keeps working */
	ds = NULL;
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	snap("tank/v@c");
	put(ds, 1, 4);
	cr_assert_eq(gen_of("tank/v@c", 1), 1);
	destroy("tank/v@a");
	cr_assert_eq(gen_of("tank/v@b", 1), 1);
	stor_ds_close(ds);
	sync_pool();
	assert_clean("after more");
}

static const struct stor_key_material pass = { (const uint8_t *)"correct horse battery", 21 };

static struct stor_ds *enc_ds(const char *name)
{
	const char *props[] = { "encryption=aes-256-gcm", "keyformat=passphrase",
				"pbkdf2iters=100000" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 3,
				  .key = &pass };
	struct stor_ds *ds = NULL;
	int ret = stor_ds_create(tp.pool, name, &o, &ds);

	cr_assert_eq(ret, 0, "create %s: %s", name, stor_strerror(ret));
	return ds;
}

Test(snapshot, an_encrypted_dataset_keeps_its_snapshots_authenticated)
{
	const char *sn = "tank/e@c";
	struct stor_ds *ds, *s = NULL;
	uint8_t buf[REC];

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = enc_ds("tank/e");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 1);
	snap("tank/e@a");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 2);
	snap("tank/e@b");
	for (uint64_t r = 0; r < NREC; r += 2)
		put(ds, r, 3);
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/e@a", r), 1);
		cr_assert_eq(gen_of("tank/e@b", r), 2);
	}
	stor_ds_close(ds);
	sync_pool();
	assert_clean("encrypted, with snapshots");
	/* the key goes: snapshots are not read, and none can be made */
	cr_assert_eq(stor_key_unload(tp.pool, "tank/e", 0), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/e@a", &s), 0);
	cr_assert_eq(stor_ds_read(s, 0, buf, REC), STOR_ENOKEY);
	stor_ds_close(s);
	cr_assert_eq(stor_snap_create(tp.pool, &sn, 1, 0), STOR_ENOKEY);
	cr_assert(strstr(stor_pool_last_error(), "load"), "%s", stor_pool_last_error());
	/* destroying @b would move pointers into @a, under @a's key */
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/e@b", 0), STOR_ENOKEY);
	/* after an import (the MAC roots of the tables come from the LUNs) */
	tpool_reopen(&tp);
	cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0);
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/e@a", r), 1);
		cr_assert_eq(gen_of("tank/e@b", r), 2);
		cr_assert_eq(gen_of("tank/e", r), r % 2 ? 2 : 3);
	}
	destroy("tank/e@b");
	for (uint64_t r = 0; r < NREC; r++)
		cr_assert_eq(gen_of("tank/e@a", r), 1);
	/* the oldest needs no key: it hands nothing on */
	cr_assert_eq(stor_key_unload(tp.pool, "tank/e", 0), 0);
	destroy("tank/e@a");
	sync_pool();
	assert_clean("encrypted, snapshots gone");
}

/* ---- an attacker who holds the LMDB file (pool closed) ---- */

struct lm {
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi ds, bp, mac;
};

static void lm_open(struct lm *l)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(mdb_env_create(&l->env), 0);
	mdb_env_set_maxdbs(l->env, 4);
	mdb_env_set_mapsize(l->env, (size_t)4 << 30);
	cr_assert_eq(mdb_env_open(l->env, path, MDB_NOSUBDIR, 0600), 0);
	cr_assert_eq(mdb_txn_begin(l->env, NULL, 0, &l->txn), 0);
	cr_assert_eq(mdb_dbi_open(l->txn, "ds", 0, &l->ds), 0);
	cr_assert_eq(mdb_dbi_open(l->txn, "bp", 0, &l->bp), 0);
	cr_assert_eq(mdb_dbi_open(l->txn, "mac", 0, &l->mac), 0);
}

static void lm_commit(struct lm *l)
{
	cr_assert_eq(mdb_txn_commit(l->txn), 0);
	mdb_env_close(l->env);
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void bpkey(uint8_t k[16], uint64_t id, uint64_t rec)
{
	for (int i = 0; i < 8; i++) {
		k[i] = (uint8_t)(id >> (56 - 8 * i));
		k[8 + i] = (uint8_t)(rec >> (56 - 8 * i));
	}
}

/* The table id of @snap and the dataset id of @ds, from their records. */
static void ids_of(struct lm *l, const char *ds, const char *snap, uint64_t *ds_id, uint64_t *id)
{
	MDB_val k = { strlen(ds), (void *)ds }, v;

	cr_assert_eq(mdb_get(l->txn, l->ds, &k, &v), 0);
	*ds_id = be64((const uint8_t *)v.mv_data + 4);
	k = (MDB_val){ strlen(snap), (void *)snap };
	cr_assert_eq(mdb_get(l->txn, l->ds, &k, &v), 0);
	*id = be64((const uint8_t *)v.mv_data + 4);
}

enum attack { DROP_KEPT, HEAD_INTO_SNAPSHOT, KEPT_MOVED, DROP_TABLE, NATTACKS };

/* Move the pointer at @from to @to (LMDB, pool closed). */
static void move_bp(struct lm *l, uint64_t from_id, uint64_t from_rec, uint64_t to_id,
		    uint64_t to_rec)
{
	uint8_t fk[16], tk[16], copy[128];
	MDB_val f = { sizeof(fk), fk }, t = { sizeof(tk), tk }, v;

	bpkey(fk, from_id, from_rec);
	bpkey(tk, to_id, to_rec);
	cr_assert_eq(mdb_get(l->txn, l->bp, &f, &v), 0);
	cr_assert_leq(v.mv_size, sizeof(copy));
	memcpy(copy, v.mv_data, v.mv_size);
	v.mv_data = copy;
	cr_assert_eq(mdb_del(l->txn, l->bp, &f, NULL), 0);
	cr_assert_eq(mdb_put(l->txn, l->bp, &t, &v, 0), 0);
}

Test(snapshot, a_kept_pointer_dropped_or_replaced_or_a_table_dropped_reads_as_eauth)
{
	static const char *const what[] = { "a kept pointer deleted",
					    "the head's pointer moved into the snapshot's table",
					    "a kept pointer moved to another record",
					    "the snapshot's pointers and MACs deleted" };

	for (int a = 0; a < NATTACKS; a++) {
		uint8_t buf[REC], key[16];
		uint64_t ds_id, id;
		struct stor_ds *ds, *s = NULL;
		struct lm l;
		MDB_val k, v;
		int ret;

		tpool_init(&tp, 1, 16u << 20, NULL);
		ds = enc_ds("tank/e");
		for (uint64_t r = 0; r < 4; r++)
			put(ds, r, 1);
		snap("tank/e@a");
		for (uint64_t r = 0; r < 4; r++)
			put(ds, r, 2);
		stor_ds_close(ds);
		tpool_close(&tp);

		lm_open(&l);
		ids_of(&l, "tank/e", "tank/e@a", &ds_id, &id);
		bpkey(key, id, 1);
		k = (MDB_val){ sizeof(key), key };
		if (a == DROP_KEPT) {
			cr_assert_eq(mdb_del(l.txn, l.bp, &k, NULL), 0);
		} else if (a == HEAD_INTO_SNAPSHOT) {
			cr_assert_eq(mdb_del(l.txn, l.bp, &k, NULL), 0);
			move_bp(&l, ds_id, 1, id, 1);
		} else if (a == KEPT_MOVED) {
			cr_assert_eq(mdb_del(l.txn, l.bp, &k, NULL), 0);
			move_bp(&l, id, 2, id, 1);
		} else {
			MDB_cursor *cur;
			MDB_dbi dbis[2] = { l.bp, l.mac };

			for (int d = 0; d < 2; d++) {
				cr_assert_eq(mdb_cursor_open(l.txn, dbis[d], &cur), 0);
				bpkey(key, id, 0);
				k = (MDB_val){ 8, key };
				for (ret = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
				     ret == 0 && be64(k.mv_data) == id;
				     ret = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
					cr_assert_eq(mdb_cursor_del(cur, 0), 0);
				mdb_cursor_close(cur);
			}
		}
		lm_commit(&l);

		cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
		cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0);
		cr_assert_eq(stor_ds_open(tp.pool, "tank/e@a", &s), 0);
		ret = stor_ds_read(s, REC, buf, REC);
		cr_assert_eq(ret, STOR_EAUTH, "%s: got %s", what[a], stor_strerror(ret));
		stor_ds_close(s);
		tpool_fini(&tp);
	}
}

Test(snapshot, a_rollback_brings_the_dataset_back_and_frees_what_it_wrote_since)
{
	struct stor_ds *ds;
	uint64_t used_a;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (uint64_t r = 0; r < NREC; r += 2)
		put(ds, r, 1);
	sync_pool();
	used_a = tpool_used(&tp);
	snap("tank/v@a");
	for (uint64_t r = 0; r < NREC; r++)
		put(ds, r, 2); /* over A, and into its holes */
	cr_assert_eq(stor_ds_discard(ds, 4 * REC, REC), 0);
	snap("tank/v@b");
	put(ds, 1, 3);
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@a", STOR_RECURSIVE), -EBUSY, "open");
	stor_ds_close(ds);
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@a", 0), -EEXIST, "@b is newer");
	cr_assert(strstr(stor_pool_last_error(), "-r"), "%s", stor_pool_last_error());
	cr_assert_eq(gen_of("tank/v@b", 1), 2, "refused: nothing changed");
	/* to the newest first: the write after it goes */
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@b", 0), 0);
	cr_assert_eq(gen_of("tank/v", 1), 2);
	cr_assert_eq(gen_of("tank/v", 4), 0);
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@a", STOR_RECURSIVE), 0);
	for (uint64_t r = 0; r < NREC; r++)
		cr_assert_eq(gen_of("tank/v", r), r % 2 ? 0 : 1, "record %llu",
			     (unsigned long long)r);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v@b", &ds), -ENOENT, "-r destroyed it");
	sync_pool();
	assert_clean("rolled back");
	cr_assert_eq(tpool_used(&tp), used_a, "only A's records are held");
	/* and on from there: the snapshot keeps A against new writes */
	ds = NULL;
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	put(ds, 0, 5);
	cr_assert_eq(gen_of("tank/v@a", 0), 1);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(gen_of("tank/v", 0), 5);
	cr_assert_eq(gen_of("tank/v", 2), 1);
	assert_clean("after an import");
}

Test(snapshot, an_encrypted_rollback_keeps_the_macs_whole)
{
	struct stor_ds *ds;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = enc_ds("tank/e");
	for (uint64_t r = 0; r < 8; r++)
		put(ds, r, 1);
	snap("tank/e@a");
	for (uint64_t r = 0; r < 8; r += 2)
		put(ds, r, 2);
	snap("tank/e@b");
	for (uint64_t r = 0; r < 8; r += 3)
		put(ds, r, 3);
	stor_ds_close(ds);
	cr_assert_eq(stor_key_unload(tp.pool, "tank/e", 0), 0);
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/e@a", STOR_RECURSIVE), STOR_ENOKEY);
	cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0);
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/e@a", STOR_RECURSIVE), 0);
	for (uint64_t r = 0; r < 8; r++)
		cr_assert_eq(gen_of("tank/e", r), 1);
	/* the MAC trees are checked afresh after an import */
	tpool_reopen(&tp);
	cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0);
	for (uint64_t r = 0; r < 8; r++) {
		cr_assert_eq(gen_of("tank/e", r), 1);
		cr_assert_eq(gen_of("tank/e@a", r), 1);
	}
	sync_pool();
	assert_clean("encrypted, rolled back");
}

static uint64_t num(const char *name, const char *prop)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, prop, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", prop, name, stor_strerror(ret));
	return strtoull(v.value, NULL, 10);
}

Test(snapshot, space_is_reported_as_zfs_does)
{
	const uint64_t R = REC;
	struct stor_ds *ds;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/v", "refreservation", "none"), 0);
	for (uint64_t r = 0; r < 16; r++)
		put(ds, r, 1);
	sync_pool();
	cr_assert_eq(num("tank/v", "written"), 16 * R, "no snapshot: all it references");
	snap("tank/v@a");
	cr_assert_eq(num("tank/v", "written"), 0);
	for (uint64_t r = 0; r < 8; r++)
		put(ds, r, 2);
	snap("tank/v@b");
	for (uint64_t r = 0; r < 4; r++)
		put(ds, r, 3); /* born after @a, killed after @b: @b's alone */
	put(ds, 12, 3);    /* born before @a: @a and @b share it */
	sync_pool();
	/* the head */
	cr_assert_eq(num("tank/v", "referenced"), 16 * R);
	cr_assert_eq(num("tank/v", "usedbysnapshots"), (8 + 4 + 1) * R);
	cr_assert_eq(num("tank/v", "used"), (16 + 13) * R);
	cr_assert_eq(num("tank/v", "written"), 5 * R);
	/* the snapshots */
	cr_assert_eq(num("tank/v@a", "referenced"), 16 * R);
	cr_assert_eq(num("tank/v@b", "referenced"), 16 * R);
	cr_assert_eq(num("tank/v@a", "written"), 16 * R);
	cr_assert_eq(num("tank/v@b", "written"), 8 * R);
	cr_assert_eq(num("tank/v@a", "used"), 8 * R, "A's first 8, only @a has them");
	cr_assert_eq(num("tank/v@b", "used"), 4 * R, "the 2s @b kept; record 12 is shared");
	/* the parent counts its child's snapshots in its used */
	cr_assert_geq(num("tank", "used"), (16 + 13) * R);
	assert_clean("accounted");
	/* destroying @a frees what it alone held; @b now has record 12 alone */
	destroy("tank/v@a");
	cr_assert_eq(num("tank/v", "usedbysnapshots"), 5 * R);
	cr_assert_eq(num("tank/v@b", "used"), 5 * R);
	cr_assert_eq(num("tank/v@b", "written"), 16 * R, "no snapshot before it now");
	cr_assert_eq(num("tank/v", "used"), (16 + 5) * R);
	assert_clean("after a destroy");
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(num("tank/v", "usedbysnapshots"), 5 * R, "rebuilt at import");
	cr_assert_eq(num("tank/v@b", "referenced"), 16 * R);
	assert_clean("after an import");
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@b", 0), 0);
	cr_assert_eq(num("tank/v", "usedbysnapshots"), 0);
	cr_assert_eq(num("tank/v", "used"), 16 * R);
	cr_assert_eq(num("tank/v", "written"), 0);
	assert_clean("after a rollback");
}

/* A pool refusing new data keeps its slop for what must succeed; an
 * overwrite under a snapshot frees nothing, so it is new data there. */
Test(snapshot, overwrites_under_a_snapshot_do_not_eat_the_slop)
{
	struct stor_pool_stat st;
	struct stor_ds *ds;
	uint64_t n = 0, kept = 0;
	uint8_t buf[REC];
	int ret = 0;

	tpool_init(&tp, 1, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", 64u << 20, REC);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/v", "refreservation", "none"), 0);
	for (; ret == 0; n++) {
		tpat_fill(buf, REC, n, 1);
		ret = stor_ds_write(ds, n * REC, buf, REC);
	}
	cr_assert_eq(ret, STOR_ENOSPC, "new data stops at the slop: %s", stor_strerror(ret));
	n--;
	sync_pool();
	/* without a snapshot an overwrite may draw on the slop */
	tpat_fill(buf, REC, 0, 2);
	cr_assert_eq(stor_ds_write(ds, 0, buf, REC), 0);
	snap("tank/v@a");
	for (uint64_t r = 1; r < n && (ret = stor_ds_write(ds, r * REC, buf, REC)) == 0; r++)
		kept++;
	cr_assert_eq(ret, STOR_ENOSPC, "an overwrite under a snapshot: %s", stor_strerror(ret));
	sync_pool();
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_geq(st.size - st.used - st.meta_used, (2u << 20) - 64 * REC,
		      "the slop is still free: %llu of %llu after %llu overwrites",
		      (unsigned long long)(st.size - st.used - st.meta_used),
		      (unsigned long long)st.size, (unsigned long long)kept);
	cr_assert_eq(gen_of("tank/v@a", 1), 1);
	/* a destroy still goes through, and gives the space back */
	stor_ds_close(ds);
	destroy("tank/v@a");
	sync_pool();
	assert_clean("full pool, snapshot gone");
}

/* @name is snapshot @t of the dataset below: record t holds generation
 * t + 1 from snapshot t on, and zeros before it */
static void is_snap(const char *name, int t, int nsnaps)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, "createtxg", &v);

	cr_assert_eq(ret, 0, "%s not found: %s", name, stor_strerror(ret));
	cr_assert_eq(gen_of(name, (uint64_t)t), t + 1, "%s is not snapshot %d", name, t);
	if (t + 1 < nsnaps)
		cr_assert_eq(gen_of(name, (uint64_t)t + 1), 0, "%s is not snapshot %d", name, t);
}

static void is_gone(const char *name)
{
	struct stor_prop_value v;

	cr_assert_eq(stor_ds_get(tp.pool, name, "createtxg", &v), -ENOENT, "%s still found", name);
}

/* Past a few snapshots a dataset's are found by an index of their names
 * (ds/snapnames.c): every change of the list or of a name must reach it. */
static void many_snaps_found(void)
{
	char name[64];

	for (int t = 0; t < 40; t++) {
		const char *ds = t <= 25 ? "tank/c" : "tank/v";

		if (t == 10 || t == 20 || t > 35) {
			snprintf(name, sizeof(name), "tank/v@s%d", t);
			is_gone(name);
			snprintf(name, sizeof(name), "tank/c@s%d", t);
			is_gone(name);
			continue;
		}
		snprintf(name, sizeof(name), "%s@%c%d", ds, t == 5 || t == 30 ? 'r' : 's', t);
		is_snap(name, t, 40);
		snprintf(name, sizeof(name), "%s@s%d", t <= 25 ? "tank/v" : "tank/c", t);
		is_gone(name);
	}
	is_gone("tank/v@s5");
	is_gone("tank/c@s5");
	is_gone("tank/v@s30");
	is_gone("tank/v@nothing");
}

Test(snapshot, many_snapshots_are_found_by_name_through_renames_destroys_promote_and_import)
{
	struct stor_ds *ds;
	char name[64];

	tpool_init(&tp, 2, 16u << 20, NULL);
	ds = tpool_ds(&tp, "tank/v", VOL, REC);
	for (int t = 0; t < 40; t++) {
		put(ds, (uint64_t)t, (uint64_t)t + 1);
		snprintf(name, sizeof(name), "tank/v@s%d", t);
		snap(name);
	}
	stor_ds_close(ds);
	for (int t = 0; t < 40; t++) {
		snprintf(name, sizeof(name), "tank/v@s%d", t);
		is_snap(name, t, 40);
	}
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/v@s5", "tank/v@r5", 0), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/v@s30", "tank/v@r30", 0), 0, "%s",
		     stor_pool_last_error());
	is_snap("tank/v@r5", 5, 40);
	is_snap("tank/v@r30", 30, 40);
	is_gone("tank/v@s5");
	destroy("tank/v@s10");
	destroy("tank/v@s20");
	cr_assert_eq(stor_snap_rollback(tp.pool, "tank/v@s35", STOR_RECURSIVE), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/v@s25", "tank/c", NULL), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(stor_ds_promote(tp.pool, "tank/c"), 0, "%s", stor_pool_last_error());
	many_snaps_found();
	sync_pool();
	tpool_reopen(&tp);
	many_snaps_found();
	/* and one more after the import */
	ds = NULL;
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	put(ds, 36, 37);
	stor_ds_close(ds);
	snap("tank/v@s36");
	is_snap("tank/v@s36", 36, 37);
	assert_clean("after the lookups");
}

#define LIST_ROWS 8
#define LIST_COLS 14

struct rows_seen {
	size_t rows;
	char name[LIST_ROWS][64];
	struct stor_prop_value v[LIST_ROWS][LIST_COLS];
};

/* The listing's rows, kept: its callback runs under the admin lock. */
static int keep_rows(const char *name, const struct stor_prop_value *v, size_t nv, void *arg)
{
	struct rows_seen *rs = arg;

	cr_assert(rs->rows < LIST_ROWS && nv == LIST_COLS);
	snprintf(rs->name[rs->rows], sizeof(rs->name[0]), "%s", name);
	memcpy(rs->v[rs->rows++], v, nv * sizeof(*v));
	return 0;
}

Test(snapshot, a_listing_of_snapshots_in_one_pass_says_what_a_get_of_each_cell_says)
{
	static const char *const props[LIST_COLS] = {
		"type", "createtxg", "creation", "guid", "volsize", "used", "referenced",
		"written", "recordsize", "encryption", "encryptionroot", "keystatus",
		"compression", "no_such_prop",
	};
	static struct rows_seen rs;
	struct stor_ds *v, *e;

	tpool_init(&tp, 2, 16u << 20, NULL);
	v = tpool_ds(&tp, "tank/v", VOL, REC);
	e = enc_ds("tank/e");
	for (int i = 0; i < 3; i++) {
		char a[32], b[32];

		put(v, (uint64_t)i, (uint64_t)i + 1);
		put(e, (uint64_t)i, (uint64_t)i + 1);
		snprintf(a, sizeof(a), "tank/v@%d", i);
		snprintf(b, sizeof(b), "tank/e@%d", i);
		snap(a);
		snap(b);
		sync_pool();
	}
	stor_ds_close(v);
	stor_ds_close(e);
	destroy("tank/v@1");
	cr_assert_eq(stor_snap_list_props(tp.pool, props, sizeof(props) / sizeof(*props),
					  keep_rows, &rs),
		     0);
	cr_assert_eq(rs.rows, 5, "%zu rows, not the 5 snapshots", rs.rows);
	/* each cell is what a get of that cell says */
	for (size_t r = 0; r < rs.rows; r++) {
		for (size_t k = 0; k < LIST_COLS; k++) {
			const struct stor_prop_value *c = &rs.v[r][k];
			struct stor_prop_value g;

			if (stor_ds_get(tp.pool, rs.name[r], props[k], &g) < 0) {
				memset(&g, 0, sizeof(g));
				snprintf(g.value, sizeof(g.value), "-");
			}
			cr_assert_str_eq(c->name, props[k], "%s: column %zu", rs.name[r], k);
			cr_assert_str_eq(c->value, g.value, "%s %s: listed %s, get %s", rs.name[r],
					 props[k], c->value, g.value);
			cr_assert_eq(c->source, g.source, "%s %s: source", rs.name[r], props[k]);
			cr_assert_str_eq(c->inherited_from, g.inherited_from, "%s %s", rs.name[r],
					 props[k]);
		}
	}
	cr_assert_str_eq(rs.name[0], "tank/e@0");
	cr_assert_str_eq(rs.v[0][9].value, "aes-256-gcm");
	cr_assert_str_eq(rs.v[4][0].value, "snapshot");
}
