/* SPDX-License-Identifier: MIT */
/*
 * Clones on a real pool: a clone reads its origin snapshot's data, writes
 * on its own and never changes its origin (nor the origin it); the origin
 * snapshot and its dataset cannot be destroyed while it has clones, and
 * destroying them with -R gives the space back exactly; the metadata log
 * carries clones through an import from the LUNs alone; an encrypted clone
 * shares its root's key and never a (key, nonce) pair of its origin's, and
 * a changed shared pointer reads as EAUTH; a random sequence of clones,
 * writes, snapshots and destroys leaves the allocation checker nothing;
 * promote hands the snapshots over while every view reads as before, and
 * the old origin can then go.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

TestSuite(clone, .init = setup, .fini = teardown, .timeout = 240);

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

static void put_name(const char *name, uint64_t rec, uint64_t gen)
{
	struct stor_ds *ds = NULL;
	int ret = stor_ds_open(tp.pool, name, &ds);

	cr_assert_eq(ret, 0, "open %s: %s", name, stor_strerror(ret));
	put(ds, rec, gen);
	stor_ds_close(ds);
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

static void clone(const char *origin, const char *name)
{
	int ret = stor_ds_clone(tp.pool, origin, name, NULL);

	cr_assert_eq(ret, 0, "clone %s %s: %s (%s)", origin, name, stor_strerror(ret),
		     stor_pool_last_error());
}

static void sync_pool(void)
{
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
}

static uint64_t prop(const char *name, const char *p)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, p, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", p, name, stor_strerror(ret));
	return strtoull(v.value, NULL, 10);
}

static const char *sprop(const char *name, const char *p)
{
	static struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, p, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", p, name, stor_strerror(ret));
	return v.value;
}

Test(clone, a_clone_reads_its_origin_and_each_writes_on_its_own)
{
	uint8_t half[REC / 2], buf[REC];
	struct stor_ds *d, *c = NULL;
	uint64_t d_used;

	tpool_init(&tp, 2, 16u << 20, NULL);
	d = tpool_ds(&tp, "tank/d", VOL, REC);
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1); /* A */
	snap("tank/d@s");
	clone("tank/d@s", "tank/c");
	cr_assert_str_eq(sprop("tank/c", "origin"), "tank/d@s");
	cr_assert_str_eq(sprop("tank/d", "origin"), "-");
	cr_assert_eq(prop("tank/c", "volsize"), VOL);
	cr_assert_eq(prop("tank/c", "recordsize"), REC);
	for (uint64_t r = 0; r < NREC; r++)
		cr_assert_eq(gen_of("tank/c", r), 1, "the clone reads A at %llu",
			     (unsigned long long)r);
	sync_pool();
	d_used = prop("tank/d", "used");
	cr_assert_eq(prop("tank/c", "used"), 0, "a fresh clone holds nothing of its own");
	cr_assert_eq(prop("tank/c", "referenced"), prop("tank/d@s", "referenced"));

	/* B into the clone: the origin and its snapshot still read A */
	cr_assert_eq(stor_ds_open(tp.pool, "tank/c", &c), 0);
	for (uint64_t r = 0; r < NREC; r += 2)
		put(c, r, 2);
	cr_assert_eq(stor_ds_discard(c, 1 * REC, REC), 0);
	/* half a record: the other half is the origin's */
	tpat_fill(half, sizeof(half), 3, 9);
	cr_assert_eq(stor_ds_write(c, 3 * REC, half, sizeof(half)), 0);
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/d", r), 1);
		cr_assert_eq(gen_of("tank/d@s", r), 1);
	}
	/* C into the origin: the clone still has B (and A where it wrote nothing) */
	for (uint64_t r = 0; r < NREC; r += 3)
		put(d, r, 3);
	for (uint64_t r = 0; r < NREC; r++) {
		int64_t want = r % 2 == 0 ? 2 : r == 1 ? 0 : 1;

		if (r == 3)
			continue;
		cr_assert_eq(gen_of("tank/c", r), want, "clone record %llu",
			     (unsigned long long)r);
		cr_assert_eq(gen_of("tank/d", r), r % 3 ? 1 : 3, "origin record %llu",
			     (unsigned long long)r);
		cr_assert_eq(gen_of("tank/d@s", r), 1);
	}
	cr_assert_eq(stor_ds_read(c, 3 * REC, buf, REC), 0);
	cr_assert_eq(tpat_check(buf, REC / 2, 3), 9, "the half written");
	cr_assert_eq(tpat_check(buf + REC / 2, REC / 2, 3), 1, "the origin's half");
	stor_ds_close(c);
	stor_ds_close(d);
	sync_pool();
	assert_clean("clone and origin written");

	/* space as zfs reports it: the clone's used is its own; its referenced
	 * adds the origin's records it still reads; written is its own */
	{
		uint64_t own = (NREC / 2 + 2) * (uint64_t)REC; /* evens, the zeros at 1, 3 */
		uint64_t shared = (NREC - NREC / 2 - 2) * (uint64_t)REC;

		cr_assert_eq(prop("tank/c", "used"), own, "used %llu",
			     (unsigned long long)prop("tank/c", "used"));
		cr_assert_eq(prop("tank/c", "written"), own);
		cr_assert_eq(prop("tank/c", "referenced"), own + shared, "referenced %llu",
			     (unsigned long long)prop("tank/c", "referenced"));
	}
	/* the origin's used moved only by its own overwrites (kept by @s) */
	cr_assert_eq(prop("tank/d", "used"),
		     d_used + ((NREC + 2) / 3) * (uint64_t)REC, "origin used %llu",
		     (unsigned long long)prop("tank/d", "used"));
}

Test(clone, the_origin_stays_while_it_has_clones_and_destroy_R_returns_the_space)
{
	const char *older = "tank/d@o";
	struct stor_ds *d;
	uint64_t before;

	tpool_init(&tp, 2, 16u << 20, NULL);
	d = tpool_ds(&tp, "tank/d", VOL, REC);
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1);
	snap(older);
	sync_pool();
	before = tpool_used(&tp);
	snap("tank/d@s");
	clone("tank/d@s", "tank/c");
	clone("tank/d@s", "tank/c2");
	snap("tank/c@cs");
	clone("tank/c@cs", "tank/cc"); /* a clone of a clone */
	for (uint64_t r = 0; r < NREC; r++) {
		put(d, r, 2);
		put_name("tank/c", r, 3);
		put_name("tank/cc", r, 4);
	}
	cr_assert_eq(gen_of("tank/cc", 5), 4);
	cr_assert_eq(gen_of("tank/c@cs", 5), 1, "a snapshot of a clone reads its origin's");
	stor_ds_close(d);

	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d@s", 0), -EBUSY);
	cr_assert(strstr(stor_pool_last_error(), "snapshot has dependent clones"), "%s",
		  stor_pool_last_error());
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d", STOR_RECURSIVE), -EBUSY);
	cr_assert(strstr(stor_pool_last_error(), "dependent clones"), "%s",
		  stor_pool_last_error());
	cr_assert_eq(stor_snap_rollback(tp.pool, older, STOR_RECURSIVE), -EBUSY);
	cr_assert(strstr(stor_pool_last_error(), "dependent clones"), "%s",
		  stor_pool_last_error());
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c@cs", 0), -EBUSY);
	/* nothing changed */
	cr_assert_eq(gen_of("tank/d@s", 7), 1);
	cr_assert_eq(gen_of("tank/c", 7), 3);
	cr_assert_eq(gen_of("tank/cc", 7), 4);
	sync_pool();
	assert_clean("refusals");
	/* a clone that is no origin goes alone */
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c2", 0), 0);
	/* -R: the clones, their clones, then the snapshot */
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d@s", STOR_DESTROY_CLONES), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/c", &d), -ENOENT);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/cc", &d), -ENOENT);
	cr_assert_eq(gen_of("tank/d@o", 9), 1);
	cr_assert_eq(gen_of("tank/d", 9), 2);
	/* back to A with @o: the space is what it was before @s */
	cr_assert_eq(stor_snap_rollback(tp.pool, older, 0), 0, "%s", stor_pool_last_error());
	sync_pool();
	sync_pool();
	cr_assert_eq(tpool_used(&tp), before, "used %llu, %llu before the clones",
		     (unsigned long long)tpool_used(&tp), (unsigned long long)before);
	assert_clean("after destroy -R");
}

Test(clone, bad_clones_are_refused_and_change_nothing)
{
	const char *props[] = { "volsize=1M" };
	struct stor_ds_opts o = { .props = props, .nprops = 1 };

	tpool_init(&tp, 1, 16u << 20, NULL);
	stor_ds_close(tpool_ds(&tp, "tank/d", VOL, REC));
	snap("tank/d@s");
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@nope", "tank/c", NULL), -ENOENT);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d", "tank/c", NULL), STOR_EBADNAME);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@s", "tank/d", NULL), -EEXIST);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@s", "tank/x/c", NULL), -ENOENT);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@s", "other/c", NULL), -EXDEV);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@s", "tank/c", &o), -EINVAL);
	cr_assert(strstr(stor_pool_last_error(), "volsize"), "%s", stor_pool_last_error());
	props[0] = "encryption=aes-256-gcm";
	cr_assert_neq(stor_ds_clone(tp.pool, "tank/d@s", "tank/c", &o), 0);
	props[0] = "compression=zstd";
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/d@s", "tank/c", &o), 0);
	cr_assert_str_eq(sprop("tank/c", "compression"), "zstd");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c", 0), 0);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d@s", 0), 0, "no clone left");
}

Test(clone, clones_survive_a_restart_and_an_import_from_the_luns_alone)
{
	char mdb[PATH_MAX + 64];
	struct stor_ds *d;
	uint64_t ref;

	tpool_init(&tp, 2, 16u << 20, NULL);
	d = tpool_ds(&tp, "tank/d", VOL, REC);
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1);
	snap("tank/d@s");
	stor_ds_close(d);
	clone("tank/d@s", "tank/c");
	for (uint64_t r = 0; r < NREC; r += 4)
		put_name("tank/c", r, 2);
	for (uint64_t r = 0; r < NREC; r += 2)
		put_name("tank/d", r, 3);
	sync_pool();
	ref = prop("tank/c", "referenced");
	tpool_reopen(&tp);
	cr_assert_eq(prop("tank/c", "referenced"), ref);
	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(mdb), 0, "unlink %s: %s", mdb, strerror(errno));
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	cr_assert_str_eq(sprop("tank/c", "origin"), "tank/d@s");
	cr_assert_eq(prop("tank/c", "referenced"), ref, "referenced %llu, %llu before",
		     (unsigned long long)prop("tank/c", "referenced"), (unsigned long long)ref);
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/c", r), r % 4 ? 1 : 2);
		cr_assert_eq(gen_of("tank/d", r), r % 2 ? 1 : 3);
	}
	assert_clean("rebuilt from the LUNs");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d@s", 0), -EBUSY, "still its origin");
}

/* ---- encryption ---- */

static const struct stor_key_material pass = { (const uint8_t *)"correct horse battery", 21 };

static struct stor_ds *enc_root(const char *name)
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

/* ---- an attacker who holds the LMDB file (pool closed) ---- */

struct lm {
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi ds, bp;
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

static uint64_t id_of(struct lm *l, const char *name)
{
	MDB_val k = { strlen(name), (void *)name }, v;

	cr_assert_eq(mdb_get(l->txn, l->ds, &k, &v), 0, "%s", name);
	return be64((const uint8_t *)v.mv_data + 4);
}

static void bpkey(uint8_t k[16], uint64_t id, uint64_t rec)
{
	for (int i = 0; i < 8; i++) {
		k[i] = (uint8_t)(id >> (56 - 8 * i));
		k[8 + i] = (uint8_t)(rec >> (56 - 8 * i));
	}
}

/* Key salt and nonce (bytes 32..51 of a pointer, bp.c's order) of table @id. */
static size_t nonces_of(struct lm *l, uint64_t id, uint8_t (*out)[20], size_t max)
{
	uint8_t key[16];
	MDB_cursor *cur;
	MDB_val k = { 8, key }, v;
	size_t n = 0;
	int ret;

	bpkey(key, id, 0);
	cr_assert_eq(mdb_cursor_open(l->txn, l->bp, &cur), 0);
	for (ret = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	     ret == 0 && be64(k.mv_data) == id && n < max;
	     ret = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		memcpy(out[n++], (const uint8_t *)v.mv_data + 32, 20);
	mdb_cursor_close(cur);
	return n;
}

Test(clone, an_encrypted_clone_shares_the_key_and_never_a_nonce)
{
	uint8_t a[NREC * 2][20], b[NREC * 2][20], buf[REC];
	struct stor_ds *d, *c = NULL;
	size_t na, nb;
	struct lm l;

	tpool_init(&tp, 1, 16u << 20, NULL);
	d = enc_root("tank/e");
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1);
	snap("tank/e@s");
	/* outside its root it could not follow the root's change-key */
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/e@s", "tank/c", NULL), -EINVAL);
	cr_assert(strstr(stor_pool_last_error(), "encryption root"), "%s",
		  stor_pool_last_error());
	clone("tank/e@s", "tank/e/c");
	cr_assert_str_eq(sprop("tank/e/c", "encryptionroot"), "tank/e");
	cr_assert_str_eq(sprop("tank/e/c", "encryption"), "aes-256-gcm");
	cr_assert_str_eq(sprop("tank/e/c", "keystatus"), "available");
	for (uint64_t r = 0; r < NREC; r++)
		cr_assert_eq(gen_of("tank/e/c", r), 1);
	/* both write: the same records, the same txgs */
	cr_assert_eq(stor_ds_open(tp.pool, "tank/e/c", &c), 0);
	for (uint64_t r = 0; r < NREC; r++) {
		put(c, r, 2);
		put(d, r, 3);
	}
	stor_ds_close(c);
	stor_ds_close(d);
	sync_pool();
	assert_clean("encrypted clone written");
	/* keystatus follows the root: unload it, the clone reads nothing */
	cr_assert_eq(stor_key_unload(tp.pool, "tank/e", 0), 0);
	cr_assert_str_eq(sprop("tank/e/c", "keystatus"), "unavailable");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/e/c", &c), 0);
	cr_assert_eq(stor_ds_read(c, 0, buf, REC), STOR_ENOKEY);
	stor_ds_close(c);
	cr_assert_eq(stor_ds_clone(tp.pool, "tank/e@s", "tank/e/c2", NULL), STOR_ENOKEY);
	tpool_close(&tp);

	/* no (key salt, nonce) of the clone's is one of its origin's or its
	 * snapshot's (and the data keys differ by GUID besides) */
	lm_open(&l);
	na = nonces_of(&l, id_of(&l, "tank/e"), a, NREC);
	na += nonces_of(&l, id_of(&l, "tank/e@s"), a + na, NREC);
	nb = nonces_of(&l, id_of(&l, "tank/e/c"), b, NREC * 2);
	cr_assert_eq(na, 2 * NREC);
	cr_assert_eq(nb, NREC);
	for (size_t i = 0; i < na; i++)
		for (size_t k = 0; k < nb; k++)
			cr_assert(memcmp(a[i], b[k], 20), "origin pointer %zu and clone pointer "
							  "%zu share a salt and nonce",
				  i, k);
	mdb_txn_abort(l.txn);
	mdb_env_close(l.env);

	/* load-key of the root loads the clone, after a restart */
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0);
	cr_assert_str_eq(sprop("tank/e/c", "keystatus"), "available");
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/e/c", r), 2);
		cr_assert_eq(gen_of("tank/e", r), 3);
		cr_assert_eq(gen_of("tank/e@s", r), 1);
	}
	assert_clean("reopened");
}

Test(clone, a_changed_shared_pointer_or_a_dropped_own_one_reads_as_eauth)
{
	static const char *const what[] = { "the origin's pointer of a shared record changed",
					    "the clone's own pointer deleted" };

	for (int a = 0; a < 2; a++) {
		struct stor_ds *d, *c = NULL;
		uint8_t buf[REC], key[16], copy[128];
		struct lm l;
		MDB_val k = { sizeof(key), key }, v;
		int ret;

		tpool_init(&tp, 1, 16u << 20, NULL);
		d = enc_root("tank/e");
		for (uint64_t r = 0; r < 4; r++)
			put(d, r, 1);
		snap("tank/e@s");
		stor_ds_close(d);
		clone("tank/e@s", "tank/e/c");
		put_name("tank/e/c", 2, 2);
		sync_pool();
		tpool_close(&tp);

		lm_open(&l);
		if (a == 0) {
			/* record 1 is shared: it lives in the origin's head */
			bpkey(key, id_of(&l, "tank/e"), 1);
			cr_assert_eq(mdb_get(l.txn, l.bp, &k, &v), 0);
			memcpy(copy, v.mv_data, v.mv_size);
			copy[40] ^= 1; /* its nonce */
			v.mv_data = copy;
			cr_assert_eq(mdb_put(l.txn, l.bp, &k, &v, 0), 0);
		} else {
			/* uncover the origin's record 2 */
			bpkey(key, id_of(&l, "tank/e/c"), 2);
			cr_assert_eq(mdb_del(l.txn, l.bp, &k, NULL), 0);
		}
		lm_commit(&l);

		cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
		cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0, "%s",
			     stor_pool_last_error());
		cr_assert_eq(stor_ds_open(tp.pool, "tank/e/c", &c), 0);
		ret = stor_ds_read(c, (a == 0 ? 1 : 2) * REC, buf, REC);
		cr_assert_eq(ret, STOR_EAUTH, "%s: got %s", what[a], stor_strerror(ret));
		stor_ds_close(c);
		tpool_fini(&tp);
	}
}

/* ---- a random sequence ---- */

#define MAXDS 16
#define MAXSNAP 24
#define SREC 16u

struct model {
	char name[96];
	int live;
	int owner;  /* a snapshot's dataset (index in heads) */
	int origin; /* a clone's origin (index in snaps), -1 */
	uint8_t gen[SREC];
};

static struct model heads[MAXDS], snaps[MAXSNAP];
static int nheads, nsnaps;

static void check_model(const char *when)
{
	for (int i = 0; i < nheads; i++)
		for (uint64_t r = 0; heads[i].live && r < SREC; r++)
			cr_assert_eq(gen_of(heads[i].name, r), heads[i].gen[r], "%s: %s record %llu",
				     when, heads[i].name, (unsigned long long)r);
	for (int i = 0; i < nsnaps; i++)
		for (uint64_t r = 0; snaps[i].live && r < SREC; r++)
			cr_assert_eq(gen_of(snaps[i].name, r), snaps[i].gen[r], "%s: %s record %llu",
				     when, snaps[i].name, (unsigned long long)r);
}

/* Mark dead what a destroy of @name (a dataset or a snapshot) with -R took. */
static void forget(void)
{
	struct stor_ds *ds;

	for (int i = 0; i < nheads; i++)
		if (heads[i].live && stor_ds_open(tp.pool, heads[i].name, &ds) == 0)
			stor_ds_close(ds);
		else
			heads[i].live = 0;
	for (int i = 0; i < nsnaps; i++)
		if (snaps[i].live && stor_ds_open(tp.pool, snaps[i].name, &ds) == 0)
			stor_ds_close(ds);
		else
			snaps[i].live = 0;
}

Test(clone, a_random_sequence_of_clones_writes_and_destroys_leaves_nothing_wrong)
{
	/* CLONE_SEED replays a run */
	unsigned seed = getenv("CLONE_SEED") ? (unsigned)strtoul(getenv("CLONE_SEED"), NULL, 10)
					      : (unsigned)time(NULL);
	unsigned nclones = 0, ndestroyed = 0, nrefused = 0, npromoted = 0;
	uint64_t gen = 1;

	srand(seed);
	cr_log_info("CLONE_SEED=%u", seed);
	tpool_init(&tp, 2, 32u << 20, NULL);
	stor_ds_close(tpool_ds(&tp, "tank/d0", (uint64_t)SREC * REC, REC));
	snprintf(heads[0].name, sizeof(heads[0].name), "tank/d0");
	heads[0].live = 1;
	heads[0].origin = -1;
	nheads = 1;
	int steps = getenv("CLONE_STEPS") ? atoi(getenv("CLONE_STEPS")) : 400;

	for (int step = 0; step < steps; step++) {
		int op = rand() % 12, h = rand() % nheads, s = nsnaps ? rand() % nsnaps : 0;
		char name[80];

		if (op < 5 && heads[h].live) {
			uint64_t r = (uint64_t)rand() % SREC;

			if (rand() % 8 == 0) {
				struct stor_ds *ds = NULL;

				cr_assert_eq(stor_ds_open(tp.pool, heads[h].name, &ds), 0);
				cr_assert_eq(stor_ds_discard(ds, r * REC, REC), 0);
				stor_ds_close(ds);
				heads[h].gen[r] = 0;
			} else {
				gen = gen % 250 + 1;
				put_name(heads[h].name, r, gen);
				heads[h].gen[r] = (uint8_t)gen;
			}
		} else if (op == 5 && heads[h].live && nsnaps < MAXSNAP) {
			snprintf(name, sizeof(name), "%s@s%d", heads[h].name, nsnaps);
			snap(name);
			if (getenv("CLONE_TRACE"))
				fprintf(stderr, "%d snapshot %s\n", step, name);
			snaps[nsnaps] = heads[h];
			snaps[nsnaps].owner = h;
			snprintf(snaps[nsnaps].name, sizeof(snaps[nsnaps].name), "%s", name);
			nsnaps++;
		} else if (op == 6 && nsnaps && snaps[s].live && nheads < MAXDS) {
			snprintf(name, sizeof(name), "tank/d%d", nheads);
			clone(snaps[s].name, name);
			if (getenv("CLONE_TRACE"))
				fprintf(stderr, "%d clone %s %s\n", step, snaps[s].name, name);
			nclones++;
			heads[nheads] = snaps[s];
			heads[nheads].origin = s;
			snprintf(heads[nheads].name, sizeof(heads[nheads].name), "%s", name);
			nheads++;
		} else if (op == 7 && nsnaps && snaps[s].live) {
			unsigned fl = rand() % 2 ? STOR_DESTROY_CLONES : 0;
			int ret = stor_ds_destroy(tp.pool, snaps[s].name, fl);

			cr_assert(ret == 0 || (ret == -EBUSY && !fl), "destroy %s: %s (%s)",
				  snaps[s].name, stor_strerror(ret), stor_pool_last_error());
			ndestroyed += ret == 0;
			nrefused += ret != 0;
			forget();
		} else if (op == 8 && h && heads[h].live) {
			unsigned fl = STOR_RECURSIVE | (rand() % 2 ? STOR_DESTROY_CLONES : 0);
			int ret = stor_ds_destroy(tp.pool, heads[h].name, fl);

			cr_assert(ret == 0 || (ret == -EBUSY && !(fl & STOR_DESTROY_CLONES)),
				  "destroy %s: %s (%s)", heads[h].name, stor_strerror(ret),
				  stor_pool_last_error());
			ndestroyed += ret == 0;
			nrefused += ret != 0;
			forget();
		} else if (op == 9) {
			sync_pool();
		} else if (op >= 10 && heads[h].live && heads[h].origin >= 0) {
			/* the snapshots of the origin's dataset up to the origin
			 * (made in index order) pass to the clone, every view stays */
			int o = heads[h].origin, d = snaps[o].owner;
			int ret = stor_ds_promote(tp.pool, heads[h].name);

			if (getenv("CLONE_TRACE"))
				fprintf(stderr, "%d promote %s (origin %s): %d\n", step, heads[h].name,
					snaps[o].name, ret);

			cr_assert(ret == 0 || ret == -EBUSY, "promote %s: %s (%s)", heads[h].name,
				  stor_strerror(ret), stor_pool_last_error());
			if (ret == 0) {
				for (int j = 0; j <= o; j++) {
					char at[96];

					if (!snaps[j].live || snaps[j].owner != d)
						continue;
					snaps[j].owner = h;
					snprintf(at, sizeof(at), "%s", strchr(snaps[j].name, '@'));
					snprintf(snaps[j].name, sizeof(snaps[j].name), "%s%s",
						 heads[h].name, at);
				}
				heads[h].origin = heads[d].origin;
				heads[d].origin = o;
				npromoted++;
			}
		}
		if (step % 50 == 49 || getenv("CLONE_STEPS")) {
			check_model("during");
			assert_clean("during");
		}
	}
	check_model("at the end");
	assert_clean("at the end");
	tpool_reopen(&tp);
	check_model("reopened");
	assert_clean("reopened");
	/* everything goes: only the root's space stays */
	for (int i = 0; i < nsnaps; i++)
		if (snaps[i].live)
			stor_ds_destroy(tp.pool, snaps[i].name, STOR_DESTROY_CLONES);
	forget();
	for (int i = 1; i < nheads; i++)
		if (heads[i].live)
			cr_assert_eq(stor_ds_destroy(tp.pool, heads[i].name,
						     STOR_RECURSIVE | STOR_DESTROY_CLONES),
				     0, "%s", stor_pool_last_error());
	forget();
	sync_pool();
	assert_clean("all gone");
	cr_log_info("seed %u: %u clones, %u destroys, %u refused for clones, %u promotes", seed,
		    nclones, ndestroyed, nrefused, npromoted);
	cr_assert_gt(nclones, 0);
}

/* ---- promote ---- */

#define NVIEW 6
static const char *const views[NVIEW] = { "tank/c", "tank/d", "tank/d@o", "tank/d@s", "tank/d@after",
					  "tank/c@mine" };
static const char *const promoted[NVIEW] = { "tank/c", "tank/d", "tank/c@o", "tank/c@s",
					     "tank/d@after", "tank/c@mine" };

static struct stor_ds *plain_ds(const char *name)
{
	return tpool_ds(&tp, name, VOL, REC);
}

Test(clone, promote_swaps_the_snapshots_and_both_read_as_before)
{
	int64_t want[NVIEW][NREC];
	struct stor_ds *d;
	uint64_t before;

	tpool_init(&tp, 2, 16u << 20, NULL);
	d = plain_ds("tank/d");
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1);
	snap("tank/d@o");
	for (uint64_t r = 0; r < NREC; r += 2)
		put(d, r, 2);
	cr_assert_eq(stor_ds_discard(d, 9 * REC, REC), 0); /* a hole in @s and after */
	snap("tank/d@s");
	clone("tank/d@s", "tank/c");
	for (uint64_t r = 0; r < NREC; r += 3)
		put_name("tank/c", r, 3);
	snap("tank/c@mine");
	put_name("tank/c", 1, 5);
	for (uint64_t r = 0; r < NREC; r += 4)
		put(d, r, 4);
	snap("tank/d@after");
	cr_assert_eq(stor_ds_discard(d, 1 * REC, REC), 0); /* a hole in the head only */
	stor_ds_close(d);
	for (int v = 0; v < NVIEW; v++)
		for (uint64_t r = 0; r < NREC; r++)
			want[v][r] = gen_of(views[v], r);
	cr_assert_eq(want[1][1], 0);
	cr_assert_eq(want[3][1], 1);
	sync_pool();
	before = tpool_used(&tp);

	cr_assert_eq(stor_ds_promote(tp.pool, "tank/d"), -EINVAL, "not a clone");
	cr_assert_eq(stor_ds_promote(tp.pool, "tank/c"), 0, "%s", stor_pool_last_error());
	cr_assert_str_eq(sprop("tank/c", "origin"), "-");
	cr_assert_str_eq(sprop("tank/d", "origin"), "tank/c@s");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/d@s", &d), -ENOENT);
	for (int v = 0; v < NVIEW; v++)
		for (uint64_t r = 0; r < NREC; r++)
			cr_assert_eq(gen_of(promoted[v], r), want[v][r], "%s record %llu",
				     promoted[v], (unsigned long long)r);
	sync_pool();
	assert_clean("promoted");
	/* only the record of zeros the old origin got for its hole is new */
	cr_assert_eq(tpool_used(&tp), before + REC, "used %llu, %llu before",
		     (unsigned long long)tpool_used(&tp), (unsigned long long)before);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c@s", 0), -EBUSY, "tank/d is its clone");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c", STOR_RECURSIVE), -EBUSY);
	/* the old origin goes; the clone keeps its data and its snapshots theirs */
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d", STOR_RECURSIVE), 0, "%s",
		     stor_pool_last_error());
	tpool_reopen(&tp);
	for (int v = 0; v < NVIEW; v++)
		for (uint64_t r = 0; v != 1 && v != 4 && r < NREC; r++)
			cr_assert_eq(gen_of(promoted[v], r), want[v][r], "%s record %llu",
				     promoted[v], (unsigned long long)r);
	sync_pool();
	assert_clean("old origin destroyed");
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/c", STOR_RECURSIVE), 0);
	sync_pool();
	sync_pool();
	assert_clean("all gone");
}

Test(clone, promote_is_refused_over_a_later_snapshots_hole)
{
	struct stor_ds *d;
	uint64_t used;

	tpool_init(&tp, 1, 16u << 20, NULL);
	d = plain_ds("tank/d");
	for (uint64_t r = 0; r < 4; r++)
		put(d, r, 1);
	snap("tank/d@s");
	clone("tank/d@s", "tank/c");
	cr_assert_eq(stor_ds_discard(d, 2 * REC, REC), 0);
	snap("tank/d@later");
	cr_assert_eq(stor_ds_discard(d, 3 * REC, REC), 0); /* the head's alone: zeros if promoted */
	stor_ds_close(d);
	sync_pool();
	used = tpool_used(&tp);
	cr_assert_eq(stor_ds_promote(tp.pool, "tank/c"), -EBUSY);
	cr_assert(strstr(stor_pool_last_error(), "tank/d@later"), "%s", stor_pool_last_error());
	cr_assert_str_eq(sprop("tank/c", "origin"), "tank/d@s", "nothing changed");
	sync_pool();
	cr_assert_eq(tpool_used(&tp), used, "a refused promote wrote nothing");
	cr_assert_eq(gen_of("tank/d", 3), 0);
	cr_assert_eq(gen_of("tank/d@later", 2), 0);
	cr_assert_eq(gen_of("tank/c", 2), 1);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/d@later", 0), 0);
	cr_assert_eq(stor_ds_promote(tp.pool, "tank/c"), 0, "%s", stor_pool_last_error());
	cr_assert_eq(gen_of("tank/d", 2), 0);
	cr_assert_eq(gen_of("tank/c", 2), 1);
	sync_pool();
	assert_clean("promoted");
}

Test(clone, an_encrypted_promote_keeps_every_record_authenticated)
{
	struct stor_ds *d;

	tpool_init(&tp, 1, 16u << 20, NULL);
	d = enc_root("tank/e");
	for (uint64_t r = 0; r < NREC; r++)
		put(d, r, 1);
	snap("tank/e@s");
	for (uint64_t r = 0; r < NREC; r += 2)
		put(d, r, 2);
	stor_ds_close(d);
	clone("tank/e@s", "tank/e/c");
	for (uint64_t r = 0; r < NREC; r += 3)
		put_name("tank/e/c", r, 3);
	cr_assert_eq(stor_ds_promote(tp.pool, "tank/e/c"), 0, "%s", stor_pool_last_error());
	cr_assert_str_eq(sprop("tank/e", "origin"), "tank/e/c@s");
	/* the old origin is the clone's parent and their encryption root: it
	 * stays; the clone's snapshot reads the old origin's records under its
	 * GUID, the clone its own under its own */
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/e/c", r), r % 3 ? 1 : 3);
		cr_assert_eq(gen_of("tank/e/c@s", r), 1);
		cr_assert_eq(gen_of("tank/e", r), r % 2 ? 1 : 2);
	}
	sync_pool();
	assert_clean("encrypted, promoted");
	tpool_reopen(&tp);
	cr_assert_eq(stor_key_load(tp.pool, "tank/e", &pass, 0), 0, "%s", stor_pool_last_error());
	for (uint64_t r = 0; r < NREC; r++) {
		cr_assert_eq(gen_of("tank/e/c", r), r % 3 ? 1 : 3);
		cr_assert_eq(gen_of("tank/e/c@s", r), 1);
		cr_assert_eq(gen_of("tank/e", r), r % 2 ? 1 : 2);
	}
	assert_clean("encrypted, promoted, reopened");
}
