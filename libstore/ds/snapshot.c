/* SPDX-License-Identifier: MIT */
/*
 * Snapshots: a read-only image of a dataset as of a txg, made in constant
 * time, that keeps exactly the extents it needs (after OpenZFS's deadlists,
 * dsl_deadlist.c, with one table per snapshot instead of a deadlist of
 * birth-txg buckets).
 *
 * A snapshot is (dataset, name, txg, guid) and a table of its own, the
 * block pointers it keeps: META_BP keys (its id, record), ids taken from the
 * dataset id space, so every pointer of the pool, head or kept, lives in the
 * one table, goes through meta_put/meta_del and so into the metadata log on
 * the LUNs (metalog.c), and the import rebuilds the allocator from it.
 *
 * - Create: a txg_close_fn (txg.c) records every named snapshot in the txg
 *   it closes, T, and makes the newest its dataset's @keep. Nothing is
 *   copied: creation costs the same for 16 MiB as for 1 TiB (one commit).
 *   Everything staged before is born at or before T, everything after in
 *   T + 1 or later. All names of one call share T: atomic.
 * - Overwrite or discard: txg_stage() moves the pointer it replaces into the
 *   newest snapshot's table when it was born at or before that snapshot's
 *   txg, instead of freeing its extent (txg.c: stage_keep). So a snapshot's
 *   table holds the pointers born by its txg and killed before the next
 *   snapshot: at most one per record, because only one version of a record
 *   is alive at any txg.
 * - Read of snapshot S, record r: the head's pointer, then each table from
 *   the newest snapshot down to S's own; the first born at or before S's
 *   txg is the version alive at S (any pointer found so is: it was alive at
 *   S's txg). None: r was a hole at S. Pointers only move downwards (head
 *   to the newest table, a destroyed table into an older one), in the order
 *   a read walks them, so a read running beside a commit cannot miss one.
 *   A read costs one lookup per newer snapshot, never a scan.
 * - Destroy of S: the commit walks S's table only; a pointer born at or
 *   before the nearest older surviving snapshot P moves to P's table (P
 *   still needs it), every other one is freed: no one else can reference
 *   it (the head killed it, newer snapshots were born after it was killed).
 *   The cost is the size of S's table, not of the dataset or the pool.
 *   A snapshot destroyed while its dataset is written stays in every
 *   read's walk ("dying") until its commit is over.
 * - Rollback to S: the newer snapshots are destroyed in the same txg
 *   (folding into S), then every head pointer born after S's txg is freed
 *   and S's table comes back to the head, which then reads as S did; S
 *   stays, its table empty. This one looks at each pointer of the head:
 *   the head keeps no list of what it wrote since S.
 * - Walks by birth txg (resilver, scrub): every table is META_BP rows like
 *   the head's, so a walk of META_BP visits kept pointers too, and
 *   snap_guid_of() gives the dataset GUID a clear record's checksum needs.
 *
 * Encryption: kept pointers stay authenticated. A snapshot's table has a
 * MAC tree of its own (bpmac.c) under a key derived from the dataset's
 * master key and the snapshot's GUID, so a pointer cannot move between the
 * head and a snapshot, or between snapshots, unseen; a kept pointer keeps
 * its extent, nonce and tag, so no nonce is used twice, until a rekey
 * seals it again in place under a new master key (rekey.c). The table's MAC root is made at creation, under that key, and
 * checked once per key load (snap_mac); a read checks the group of every
 * table it walks, so a kept pointer dropped, added or swapped reads as
 * EAUTH. The commit that makes a snapshot also keeps its dataset's root as
 * the snapshot's view root (bpmac.c), which a raw send carries; a rollback
 * keeps it. Unlike ZFS, a snapshot of an encrypted dataset needs its key
 * loaded, and so does a destroy that moves pointers into an older snapshot
 * (destroying the oldest ones needs none). The limit, as for the dataset
 * table: the snapshot record (name, txg) is not under a MAC, so an attacker
 * who holds the metadata can make a snapshot show an older or newer
 * authenticated version of its own dataset's records, never bytes of
 * another place.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/array.h"
#include "base/cache.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "ds/children.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/recv_state.h"
#include "ds/rekey.h"
#include "ds/snapnames.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/pool_record.h"

#define SNAP_RECORD_LEN SNAP_RECORD_MAX

static void recount_kept(struct stor_pool *p, struct stor_ds *ds);

static void snap_free(struct snap *s)
{
	if (!s)
		return;
	mac_key_put(s->mk);
	seen_bits_free(&s->seen);
	pthread_mutex_destroy(&s->lock);
	free(s->name);
	free(s);
}

static struct snap *snap_new(const char *name)
{
	struct snap *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->name = strdup(name);
	if (!s->name) {
		free(s);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

static void encode(const struct snap *s, uint8_t out[SNAP_RECORD_LEN])
{
	uint8_t *w = out;

	put_u32(&w, FORMAT_VERSION);
	put_u64(&w, s->id); /* where txg.c's forget_record looks for it */
	put_u64(&w, s->guid);
	put_u64(&w, s->ds->id);
	put_u64(&w, s->txg);
	put_u64(&w, s->ctime);
	put_u64(&w, s->volsize);
	put_u64(&w, s->referenced);
}

/* The dataset part of @name into @ds; the snapshot part, or NULL. */
static const char *split(const char *name, char ds[STOR_NAME_MAX + 1])
{
	const char *at = strchr(name, '@');

	if (!at || (size_t)(at - name) > STOR_NAME_MAX)
		return NULL;
	memcpy(ds, name, (size_t)(at - name));
	ds[at - name] = '\0';
	return at + 1;
}

/* Insert @s by txg (snap_lock held or no one else sees @ds yet). */
static int attach(struct stor_ds *ds, struct snap *s)
{
	struct snap **a = array_grow(ds->snaps, ds->nsnaps, &ds->capsnaps, sizeof(*a), 4);
	size_t i;

	if (!a)
		return -ENOMEM;
	ds->snaps = a;
	for (i = ds->nsnaps; i > 0 && ds->snaps[i - 1]->txg > s->txg; i--)
		ds->snaps[i] = ds->snaps[i - 1];
	ds->snaps[i] = s;
	ds->nsnaps++;
	s->ds = ds;
	if (i + 1 == ds->nsnaps)
		snap_names_added(ds);
	else
		snap_names_stale(ds);
	return 0;
}

static void detach(struct stor_ds *ds, struct snap *s)
{
	for (size_t i = 0; i < ds->nsnaps; i++) {
		if (ds->snaps[i] != s)
			continue;
		memmove(&ds->snaps[i], &ds->snaps[i + 1], (ds->nsnaps - i - 1) * sizeof(*ds->snaps));
		ds->nsnaps--;
		snap_names_stale(ds);
		return;
	}
}

/* The newest snapshot of @ds not being destroyed, or NULL. */
static struct snap *newest_alive(const struct stor_ds *ds)
{
	for (size_t i = ds->nsnaps; i-- > 0;)
		if (!ds->snaps[i]->dying)
			return ds->snaps[i];
	return NULL;
}

void snap_free_all(struct stor_ds *ds)
{
	for (size_t i = 0; i < ds->nsnaps; i++)
		snap_free(ds->snaps[i]);
	free(ds->snaps);
	ds->snaps = NULL;
	ds->nsnaps = ds->capsnaps = 0;
	snap_names_free(ds);
	ds->keep = NULL;
}

int snap_mac(struct snap *s, struct mac_key **out)
{
	struct ds_keys *k;
	int ret = 0;

	*out = NULL;
	pthread_mutex_lock(&s->lock);
	if (!s->mk) {
		struct mac_key *mk = NULL;

		k = atomic_load(&s->ds->keys);
		if (!k) {
			ret = STOR_ENOKEY;
		} else {
			/* the tables are under the master the head's tree is under */
			pthread_mutex_lock(&k->lock);
			mk = mac_key_new(k->mac_gen == k->gen ? k->master : k->old, s->guid,
					 (unsigned)s->ds->suite);
			pthread_mutex_unlock(&k->lock);
			ret = mk ? 0 : -ENOMEM;
		}
		/* the table's root, once per key load: a group dropped or added
		 * whole, or the root itself gone, is found here */
		if (ret == 0)
			ret = bpmac_verify_root(s->ds->pool->meta, s->id, mk);
		if (ret == 0)
			s->mk = mk;
		else
			mac_key_put(mk);
	}
	if (s->mk)
		*out = mac_key_ref(s->mk);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void snap_drop_keys(struct stor_ds *ds)
{
	struct stor_pool *p = ds->pool;

	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < ds->nsnaps; i++) {
		struct snap *s = ds->snaps[i];

		pthread_mutex_lock(&s->lock);
		mac_key_put(s->mk);
		s->mk = NULL;
		seen_bits_free(&s->seen);
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&p->snap_lock);
}

/* ---- the import ---- */

int snap_load_one(struct stor_pool *p, const char *name, const void *val, size_t vlen)
{
	char dsname[STOR_NAME_MAX + 1];
	const uint8_t *r = val;
	struct stor_ds *ds;
	struct snap *s;
	uint64_t ds_id;
	int ret;

	if (stor_name_check(name, STOR_NAME_SNAPSHOT) < 0 || strpbrk(name, "%,") ||
	    !split(name, dsname) || vlen < SNAP_RECORD_LEN)
		return STOR_ECORRUPT;
	if (get_u32(&r) != FORMAT_VERSION)
		return STOR_EFORMAT;
	ds = ds_find_locked(p, dsname); /* key order puts a dataset before its snapshots */
	s = snap_new(name);
	if (!s)
		return -ENOMEM;
	s->id = get_u64(&r);
	s->guid = get_u64(&r);
	ds_id = get_u64(&r);
	s->txg = get_u64(&r);
	s->ctime = get_u64(&r);
	s->volsize = get_u64(&r);
	s->referenced = get_u64(&r);
	/* an id that a dataset has too: owners_index() refuses it at import */
	if (!ds || ds->id != ds_id || s->id >= p->next_ds_id) {
		pool_set_error("pool %s: snapshot record %s names no dataset of this pool", p->name,
			       name);
		snap_free(s);
		return STOR_ECORRUPT;
	}
	ret = attach(ds, s);
	if (ret < 0) {
		snap_free(s);
		return ret;
	}
	ds->keep = newest_alive(ds);
	return 0;
}

struct snap *snap_find_id_locked(struct stor_pool *p, uint64_t id)
{
	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < p->nds; i++)
		for (size_t k = 0; k < p->ds[i]->nsnaps; k++)
			if (p->ds[i]->snaps[k]->id == id)
				return p->ds[i]->snaps[k];
	return NULL;
}

uint64_t snap_guid_of(struct stor_pool *p, uint64_t id)
{
	uint64_t guid = 0;

	/* space.c's copy of the table: a reader section may take its lock */
	pthread_mutex_lock(&p->space_lock);
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < p->sp_n && !guid; i++)
		for (size_t k = 0; k < p->sp_ds[i]->nsnaps; k++)
			if (p->sp_ds[i]->snaps[k]->id == id)
				guid = p->sp_ds[i]->guid;
	pthread_mutex_unlock(&p->snap_lock);
	pthread_mutex_unlock(&p->space_lock);
	return guid;
}

uint64_t snap_sealer_of(struct stor_pool *p, uint64_t id, uint64_t birth, int *ranged)
{
	uint64_t guid = 0;

	*ranged = 0;
	pthread_mutex_lock(&p->space_lock);
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < p->sp_n && !guid; i++) {
		struct stor_ds *ds = p->sp_ds[i];
		int mine = ds->id == id;

		for (size_t k = 0; k < ds->nsnaps && !mine; k++)
			mine = ds->snaps[k]->id == id;
		if (mine) {
			guid = ds_sealer(ds, birth);
			*ranged = ds->nsealers != 0;
		}
	}
	pthread_mutex_unlock(&p->snap_lock);
	pthread_mutex_unlock(&p->space_lock);
	return guid;
}

/* "pool/a@s" under pool name @name, malloc'ed; NULL if too long or no memory. */
static char *renamed(const struct stor_pool *p, const struct snap *s, const char *name)
{
	char *n = NULL;

	if (asprintf(&n, "%s%s", name, s->name + strlen(p->name)) < 0)
		return NULL;
	if (strlen(n) > STOR_NAME_MAX) {
		free(n);
		return NULL;
	}
	return n;
}

int snap_rename_txn(struct stor_pool *p, struct meta_txn *t, const char *name)
{
	uint8_t rec[SNAP_RECORD_LEN];
	int ret = 0;

	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		for (size_t k = 0; k < p->ds[i]->nsnaps && ret == 0; k++) {
			struct snap *s = p->ds[i]->snaps[k];
			char *n = renamed(p, s, name);

			if (!n) {
				pool_set_error("pool %s: snapshot %s: too long a name under %s",
					       p->name, s->name, name);
				return STOR_EBADNAME;
			}
			encode(s, rec);
			ret = meta_del(t, META_DS, s->name, strlen(s->name));
			if (ret == 0)
				ret = meta_put(t, META_DS, n, strlen(n), rec, sizeof(rec));
			free(n);
		}
	}
	return ret;
}

void snap_rename_mem(struct stor_pool *p, const char *name)
{
	for (size_t i = 0; i < p->nds; i++) {
		for (size_t k = 0; k < p->ds[i]->nsnaps; k++) {
			struct snap *s = p->ds[i]->snaps[k];
			char *n = renamed(p, s, name);

			if (n) { /* else the old name until the next import */
				free(s->name);
				s->name = n;
			}
		}
	}
}

/* ---- what a commit does ---- */

void snap_ops_free(struct snap_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(ops[i].name);
		free(ops[i].rec);
		mac_key_put(ops[i].mk);
		mac_key_put(ops[i].prev_mk);
		mac_key_put(ops[i].join.mk);
		clone_plan_free(ops[i].promote);
	}
}

struct fold {
	const struct snap_op *op;
	int (*free_fn)(void *arg, const struct bp *bp);
	void *arg;
	struct moved {
		uint64_t recno;
		uint8_t bp[BP_LEN];
	} *v;
	size_t n, cap;
};

static int fold_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct fold *f = ctx;
	const uint8_t *k = (const uint8_t *)key + 8;
	struct bp bp;
	struct moved *m;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (!f->op->prev_id || bp.birth > f->op->prev_txg)
		return f->free_fn(f->arg, &bp);
	m = array_grow(f->v, f->n, &f->cap, sizeof(*m), 256);
	if (!m)
		return -ENOMEM;
	f->v = m;
	f->v[f->n].recno = get_u64(&k);
	memcpy(f->v[f->n].bp, val, BP_LEN);
	f->n++;
	return 0;
}

static int destroy_commit(struct meta_txn *t, const struct snap_op *op,
			  int (*free_fn)(void *arg, const struct bp *bp), void *arg)
{
	struct fold f = { .op = op, .free_fn = free_fn, .arg = arg };
	struct bpmac_change *ch = NULL;
	uint8_t prefix[8], *w = prefix, key[BP_KEY_LEN];
	const void *v;
	size_t vlen;
	int ret;

	put_u64(&w, op->id);
	ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 1, fold_one, &f);
	if (ret == 0)
		ret = bpmac_forget(t, op->id);
	if (ret == 0 && op->prev_mk && f.n && !(ch = calloc(f.n, sizeof(*ch))))
		ret = -ENOMEM;
	for (size_t i = 0; i < f.n && ret == 0; i++) {
		bp_key(op->prev_id, f.v[i].recno, key);
		ret = meta_put(t, META_BP, key, sizeof(key), f.v[i].bp, BP_LEN);
		if (ret == 0 && ch) {
			ch[i] = (struct bpmac_change){ .ds_id = op->prev_id, .recno = f.v[i].recno,
						       .mk = op->prev_mk };
			ret = bpmac_leaf_xor(op->prev_mk, f.v[i].recno, f.v[i].bp, ch[i].delta);
		}
	}
	if (ret == 0 && ch)
		ret = bpmac_apply(t, ch, f.n);
	if (ret == 0) {
		ret = meta_get(t, META_DS, op->name, strlen(op->name), &v, &vlen);
		if (ret == 0) {
			const uint8_t *r = (const uint8_t *)v + 4;

			ret = vlen >= 12 && get_u64(&r) == op->id
				      ? meta_del(t, META_DS, op->name, strlen(op->name))
				      : 0;
		} else if (ret == -ENOENT) {
			ret = 0;
		}
	}
	free(ch);
	free(f.v);
	return ret;
}

/* The head's pointers born after the snapshot: freed and deleted (collected first). */
struct newer {
	const struct snap_op *op;
	int (*free_fn)(void *arg, const struct bp *bp);
	void *arg;
	struct moved *v;
	size_t n, cap;
};

static int newer_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct newer *w = ctx;
	const uint8_t *k = (const uint8_t *)key + 8;
	struct bp bp;
	struct moved *m;
	int ret;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (bp.birth <= w->op->prev_txg)
		return 0;
	ret = w->free_fn(w->arg, &bp);
	m = ret == 0 ? array_grow(w->v, w->n, &w->cap, sizeof(*m), 256) : NULL;
	if (!m)
		return ret < 0 ? ret : -ENOMEM;
	w->v = m;
	w->v[w->n].recno = get_u64(&k);
	memcpy(w->v[w->n].bp, val, BP_LEN);
	w->n++;
	return 0;
}

/*
 * The head goes back to the snapshot: what it wrote since is freed, and
 * what the snapshot kept comes back to it; the snapshot's table is then
 * empty, with a fresh root. Every pointer of the head is looked at once
 * (the cost of a rollback is the dataset's size; a create's is not).
 */
static int rollback_commit(struct meta_txn *t, const struct snap_op *op,
			   int (*free_fn)(void *arg, const struct bp *bp), void *arg)
{
	struct newer w = { .op = op, .free_fn = free_fn, .arg = arg };
	struct fold f = { .free_fn = free_fn, .arg = arg };
	struct bpmac_change *ch = NULL;
	uint8_t prefix[8], *pw = prefix, key[BP_KEY_LEN];
	size_t n = 0;
	int ret;

	put_u64(&pw, op->prev_id);
	ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, newer_one, &w);
	/* every kept pointer comes back: a fold into "no older snapshot"
	 * would free them, so they are collected with prev_id set */
	f.op = &(struct snap_op){ .prev_id = 1, .prev_txg = UINT64_MAX };
	pw = prefix;
	put_u64(&pw, op->id);
	if (ret == 0)
		ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 1, fold_one, &f);
	if (ret == 0 && op->prev_mk && w.n + f.n && !(ch = calloc(w.n + f.n, sizeof(*ch))))
		ret = -ENOMEM;
	for (size_t i = 0; i < w.n && ret == 0; i++) {
		bp_key(op->prev_id, w.v[i].recno, key);
		ret = meta_del(t, META_BP, key, sizeof(key));
		if (ret == 0 && ch) {
			ch[n] = (struct bpmac_change){ .ds_id = op->prev_id, .recno = w.v[i].recno,
						       .mk = op->prev_mk };
			ret = bpmac_leaf_xor(op->prev_mk, w.v[i].recno, w.v[i].bp, ch[n++].delta);
		}
	}
	for (size_t i = 0; i < f.n && ret == 0; i++) {
		bp_key(op->prev_id, f.v[i].recno, key);
		ret = meta_put(t, META_BP, key, sizeof(key), f.v[i].bp, BP_LEN);
		if (ret == 0 && ch) {
			ch[n] = (struct bpmac_change){ .ds_id = op->prev_id, .recno = f.v[i].recno,
						       .mk = op->prev_mk };
			ret = bpmac_leaf_xor(op->prev_mk, f.v[i].recno, f.v[i].bp, ch[n++].delta);
		}
	}
	if (ret == 0 && ch)
		ret = bpmac_apply(t, ch, n);
	if (ret == 0 && op->mk) {
		ret = bpmac_forget_tree(t, op->id); /* S's view is what the head reads now */
		if (ret == 0)
			ret = bpmac_root_init(t, op->id, op->mk);
	}
	free(ch);
	free(w.v);
	free(f.v);
	return ret;
}

int snap_commit_op(struct meta_txn *t, const struct snap_op *op,
		   int (*free_fn)(void *arg, const struct bp *bp), void *arg)
{
	int ret;

	if (op->kind == SNAP_OP_DESTROY)
		return destroy_commit(t, op, free_fn, arg);
	if (op->kind == SNAP_OP_ROLLBACK)
		return rollback_commit(t, op, free_fn, arg);
	if (op->kind == SNAP_OP_PROMOTE)
		return clone_promote_commit(t, op->promote);
	ret = meta_put(t, META_DS, op->name, strlen(op->name), op->rec, op->reclen);
	if (ret == 0 && op->mk)
		ret = bpmac_root_init(t, op->id, op->mk);
	/* the view root: the dataset's root now (this commit's MACs are in),
	 * or the one a raw stream carried, which the head then reads as too */
	if (ret == 0 && op->have_view) {
		ret = bpmac_row_put(t, op->id, MAC_VIEW, op->view);
		if (ret == 0)
			ret = bpmac_row_put(t, op->head_id, MAC_ROOT, op->view);
	} else if (ret == 0 && op->mk) {
		ret = bpmac_view_save(t, op->head_id, op->id);
	}
	if (ret == 0 && op->mark_id)
		ret = recv_mark_txn(t, op->mark_id, op->mark);
	if (ret == 0 && op->join.mk) {
		ret = children_change(t, op->join.parent_id, op->join.mk, op->join.guid,
				      op->join.suite, 1);
		/* a list that did not verify stays so: its load-key says it, never the commit */
		if (ret == STOR_EAUTH)
			ret = 0;
	}
	return ret;
}

/* A batch of ops, one participant of a commit (txg.h: struct txg_task). */
struct op_batch {
	struct snap_op *ops;
	size_t n;
};

static int batch_commit(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage)
{
	struct op_batch *b = arg;
	int ret = 0;

	for (size_t i = 0; i < b->n && ret == 0; i++)
		ret = snap_commit_op(t, &b->ops[i], free_extent, stage);
	return ret;
}

static void batch_release(void *arg)
{
	struct op_batch *b = arg;

	snap_ops_free(b->ops, b->n);
	free(b->ops);
	free(b);
}

int snap_enlist(struct stor_pool *p, const struct snap_op *ops, size_t n)
{
	struct op_batch *b = malloc(sizeof(*b));
	struct txg_task task = { batch_commit, batch_release, b };
	int ret = -ENOMEM;

	/* only from a txg_close_fn: the txg closes under both */
	STOR_ASSERT_WRHELD(&p->hold);
	STOR_ASSERT_HELD(&p->stage_lock);

	if (b && (b->ops = malloc((n ? n : 1) * sizeof(*ops)))) {
		memcpy(b->ops, ops, n * sizeof(*ops));
		b->n = n;
		ret = txg_enlist(p, &task);
		if (ret < 0)
			free(b->ops);
	}
	if (ret < 0)
		free(b);
	return ret;
}

/* ---- create ---- */

struct create_ctx {
	struct snap **s;
	size_t n;
	struct snap_op *ops;
	int added; /* the stage owns the ops, the datasets the snapshots */
	const struct snap_recv *as; /* a receive's snapshot (snap_create_received) */
};

static int create_close(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct create_ctx *c = arg;
	int ret;

	for (size_t i = 0; i < c->n; i++) {
		/* no write is in flight: what its dataset holds now is final */
		c->s[i]->txg = c->as && c->as->txg ? c->as->txg : txg;
		c->s[i]->referenced = (uint64_t)atomic_load(&c->s[i]->ds->used) +
				      clone_shared_of(c->s[i]->ds);
		encode(c->s[i], c->ops[i].rec);
	}
	ret = snap_enlist(p, c->ops, c->n);
	if (ret < 0)
		return ret;
	c->added = 1;
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < c->n; i++) {
		/* room was made before: attach cannot fail here */
		attach(c->s[i]->ds, c->s[i]);
		c->s[i]->ds->keep = c->s[i];
	}
	pthread_mutex_unlock(&p->snap_lock);
	return 0;
}

/* Add a snapshot @snapname of @ds to @c, checked (admin lock held). */
static int want_snap(struct stor_pool *p, struct create_ctx *c, struct stor_ds *ds,
		     const char *snapname)
{
	char name[STOR_NAME_MAX + 2];
	struct snap *s;
	struct ds_keys *k = atomic_load(&ds->keys);
	struct snap **a;
	size_t mine = 0;
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);

	if ((size_t)snprintf(name, sizeof(name), "%s@%s", ds->name, snapname) > STOR_NAME_MAX)
		return STOR_EBADNAME;
	if (snap_names_find(ds, snapname))
		return -EEXIST;
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->s[i]->name, name))
			return -EEXIST;
	if (atomic_load(&ds->receiving) && !c->as) {
		recv_busy_error(ds);
		return -EBUSY;
	}
	/* the rekey walks the tables it had when it started */
	if (rekey_under_way(ds)) {
		rekey_busy_error(ds, "snapshot it");
		return -EBUSY;
	}
	if (c->as && c->as->nomacs)
		k = NULL; /* its MAC tree is built later, each table's root with it (recv.c) */
	else if (ds->suite && !k) {
		pool_set_error("%s: the key of %s is not loaded; load it to snapshot", name,
			       ds->name);
		return STOR_ENOKEY;
	}
	/* room in the dataset's list now, so the close hook cannot fail on it
	 * (under snap_lock: a read may be walking the list) */
	for (size_t i = 0; i < c->n; i++)
		mine += c->s[i]->ds == ds;
	pthread_mutex_lock(&p->snap_lock);
	a = array_grow(ds->snaps, ds->nsnaps + mine, &ds->capsnaps, sizeof(*a), 4);
	if (a)
		ds->snaps = a;
	pthread_mutex_unlock(&p->snap_lock);
	if (!a)
		return -ENOMEM;
	s = snap_new(name);
	if (!s)
		return -ENOMEM;
	s->ds = ds;
	s->id = p->next_ds_id++;
	s->ctime = (uint64_t)time(NULL);
	s->volsize = atomic_load(&ds->volsize);
	if (c->as)
		s->guid = c->as->guid;
	else
		ret = keys_random(&s->guid, sizeof(s->guid));
	if (ret == 0 && ds->suite && k && !(s->mk = mac_key_new(k->master, s->guid, (unsigned)ds->suite)))
		ret = -ENOMEM;
	if (ret < 0) {
		snap_free(s);
		return ret;
	}
	c->s[c->n] = s;
	c->ops[c->n] = (struct snap_op){ .kind = SNAP_OP_CREATE, .id = s->id,
					 .name = strdup(name), .rec = malloc(SNAP_RECORD_LEN),
					 .reclen = SNAP_RECORD_LEN,
					 .mk = s->mk ? mac_key_ref(s->mk) : NULL,
					 .mark_id = c->as ? c->as->mark_id : 0,
					 .mark = c->as ? c->as->mark : 0, .head_id = ds->id,
					 .have_view = c->as ? c->as->have_view : 0 };
	if (c->as && c->as->have_view)
		memcpy(c->ops[c->n].view, c->as->view, MAC_ROOT_LEN);
	if (c->as && c->as->join.mk)
		c->ops[c->n].join = c->as->join, mac_key_ref(c->as->join.mk);
	c->n++;
	if (!c->ops[c->n - 1].name || !c->ops[c->n - 1].rec)
		return -ENOMEM;
	return 0;
}

int stor_snap_create(struct stor_pool *p, const char *const *names, size_t n, unsigned flags)
{
	struct create_ctx c = { 0 };
	size_t cap = 0;
	int ret = 0;

	pool_clear_error();
	for (size_t i = 0; i < n; i++)
		if (stor_name_check(names[i], STOR_NAME_SNAPSHOT) < 0 || strpbrk(names[i], "%,"))
			return STOR_EBADNAME;
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < n; i++) {
		char dsname[STOR_NAME_MAX + 1], below[STOR_NAME_MAX + 2];
		const char *snapname = split(names[i], dsname);
		size_t len = strlen(dsname), from = 0, to = 0;
		struct stor_ds *ds = ds_find_locked(p, dsname);

		if (!ds) {
			ret = -ENOENT;
			pool_set_error("%s: no such dataset", dsname);
			goto out;
		}
		/* with -r each descendant too: in name order, those from "NAME/" on
		 * that begin with it; a lookup, not a walk of every dataset */
		if (flags & STOR_RECURSIVE) {
			snprintf(below, sizeof(below), "%s/", dsname);
			from = to = ds_lower_bound_locked(p, below);
			while (to < p->nds && !strncmp(p->ds[to]->name, below, len + 1))
				to++;
		}
		cap += 1 + (to - from);
		struct snap **s = realloc(c.s, cap * sizeof(*s));
		struct snap_op *o = s ? realloc(c.ops, cap * sizeof(*o)) : NULL;

		if (s)
			c.s = s;
		if (!s || !o) {
			ret = -ENOMEM;
			goto out;
		}
		c.ops = o;
		ret = want_snap(p, &c, ds, snapname);
		for (size_t k = from; k < to && ret == 0; k++)
			ret = want_snap(p, &c, p->ds[k], snapname);
		if (ret < 0)
			goto out;
	}
	/* the ids are taken before any table can be written */
	ret = pool_save_config(p);
	if (ret == 0)
		ret = txg_sync_close(p, create_close, &c);
	if (c.added)
		c.n = 0; /* a failed commit is retried by the next one */
out:
	for (size_t i = 0; i < c.n; i++) {
		snap_free(c.s[i]);
		snap_ops_free(&c.ops[i], 1);
	}
	pthread_mutex_unlock(&p->admin);
	free(c.s);
	free(c.ops);
	return ret;
}

int snap_create_received(struct stor_pool *p, struct stor_ds *ds, const char *snapname,
			 const struct snap_recv *as)
{
	struct snap *s = NULL;
	struct snap_op op = { 0 };
	struct create_ctx c = { .s = &s, .ops = &op, .as = as };
	int ret;

	pthread_mutex_lock(&p->admin);
	ret = want_snap(p, &c, ds, snapname);
	if (ret == 0)
		ret = pool_save_config(p);
	if (ret == 0)
		ret = txg_sync_close(p, create_close, &c);
	if (!c.added) {
		snap_free(s);
		snap_ops_free(&op, c.n);
	}
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/* ---- destroy ---- */

struct destroy_ctx {
	struct snap **s; /* the snapshots destroyed */
	size_t n;
	struct snap_op *ops;
	size_t nops; /* 0: one per snapshot (a rollback has one more) */
	int added;   /* the stage owns the ops */
};

static int destroy_close(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct destroy_ctx *c = arg;
	int ret;

	(void)txg;
	ret = snap_enlist(p, c->ops, c->nops ? c->nops : c->n);
	if (ret < 0)
		return ret;
	c->added = 1;
	/* writers from now on keep into the newest survivor */
	for (size_t i = 0; i < c->n; i++)
		c->s[i]->ds->keep = newest_alive(c->s[i]->ds);
	return 0;
}

/* Is @s among the targets already (a list's ranges may overlap)? */
static int picked(const struct destroy_ctx *c, const struct snap *s)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->s[i] == s)
			return 1;
	return 0;
}

/* Mark the snapshots of @ds @spec names (one, or a range a%b) as targets. */
static int pick_one(struct stor_ds *ds, const char *spec, struct destroy_ctx *c, int must)
{
	const char *pct = strchr(spec, '%');
	size_t first = 0, last, before = c->n;

	if (!pct) {
		struct snap *s = snap_names_find(ds, spec);

		if (!s || s->dying)
			return must ? -ENOENT : 0;
		if (!picked(c, s))
			c->s[c->n++] = s;
		return 0;
	}
	if (!ds->nsnaps)
		return must ? -ENOENT : 0;
	last = ds->nsnaps - 1;
	if (pct != spec) {
		char a[STOR_NAME_MAX + 1];
		struct snap *s;

		memcpy(a, spec, (size_t)(pct - spec));
		a[pct - spec] = '\0';
		if (!(s = snap_names_find(ds, a)))
			return must ? -ENOENT : 0;
		while (ds->snaps[first] != s)
			first++;
	}
	if (pct[1]) {
		struct snap *s = snap_names_find(ds, pct + 1);

		if (!s)
			return must ? -ENOENT : 0;
		while (ds->snaps[last] != s)
			last--;
	}
	if (first > last)
		return must ? -EINVAL : 0;
	for (size_t i = first; i <= last; i++)
		if (!ds->snaps[i]->dying && !picked(c, ds->snaps[i]))
			c->s[c->n++] = ds->snaps[i];
	return c->n == before && must ? -ENOENT : 0;
}

/* Mark the snapshots of @ds that @spec names, a list of names and ranges
 * (a,c%e as zfs destroy takes it), as targets; each at most once. */
static int pick(struct stor_ds *ds, const char *spec, struct destroy_ctx *c, int must)
{
	char one[STOR_NAME_MAX + 1];
	int ret = 0;

	for (const char *e = spec; ret == 0; e += strlen(one) + 1) {
		size_t n = strcspn(e, ",");

		if (n >= sizeof(one))
			return -EINVAL;
		memcpy(one, e, n);
		one[n] = '\0';
		ret = pick_one(ds, one, c, must);
		if (!e[n])
			break;
	}
	return ret;
}

/*
 * The dataset @dsname whose snapshots a destroy (or its plan) takes, in
 * *@top. It refuses while @top or, with STOR_RECURSIVE, a descendant is
 * being received: an incremental going in rolls back to its newest snapshot
 * if it fails. @return -ENOENT, -EBUSY (the text set), or 0 with *@total the
 * pool's snapshot count, the most targets there can be. Admin lock held.
 */
static int destroy_top_locked(struct stor_pool *p, const char *dsname, unsigned flags,
			      struct stor_ds **top, size_t *total)
{
	size_t len = strlen(dsname);

	STOR_ASSERT_HELD(&p->admin);
	*total = 0;
	*top = ds_find_locked(p, dsname);
	if (!*top)
		return -ENOENT;
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *d = p->ds[i];

		int mine = d == *top || ((flags & STOR_RECURSIVE) && !strncmp(d->name, dsname, len) &&
					 d->name[len] == '/');

		if (mine && atomic_load(&d->receiving)) {
			recv_busy_error(d);
			return -EBUSY;
		}
		/* the rekey walks the tables it had when it started */
		if (mine && rekey_under_way(d)) {
			rekey_busy_error(d, "destroy its snapshots");
			return -EBUSY;
		}
		*total += d->nsnaps;
	}
	return 0;
}

int stor_snap_destroy(struct stor_pool *p, const char *name, unsigned flags)
{
	char dsname[STOR_NAME_MAX + 1];
	struct destroy_ctx c = { 0 };
	const char *spec;
	struct stor_ds *top;
	size_t total = 0, len;
	int ret = 0;

	pool_clear_error();
	if (stor_name_check(name, STOR_NAME_SNAPSHOT) < 0 || !(spec = split(name, dsname)))
		return STOR_EBADNAME;
	len = strlen(dsname);
	pthread_mutex_lock(&p->admin);
	ret = destroy_top_locked(p, dsname, flags, &top, &total);
	if (ret < 0)
		goto out;
	c.s = calloc(total + 1, sizeof(*c.s));
	c.ops = calloc(total + 1, sizeof(*c.ops));
	if (!c.s || !c.ops) {
		ret = -ENOMEM;
		goto out;
	}
again:
	c.n = 0;
	ret = pick(top, spec, &c, 1);
	for (size_t i = 0; i < p->nds && ret == 0 && (flags & STOR_RECURSIVE); i++)
		if (!strncmp(p->ds[i]->name, dsname, len) && p->ds[i]->name[len] == '/')
			ret = pick(p->ds[i], spec, &c, 0);
	if (ret < 0)
		goto out;
	/* with -R their clones go first, with all they take, in a txg of
	 * their own; then the targets are picked again: a clone's own
	 * snapshots may have been among them, and after a promote even the
	 * dataset named may have gone with them (a child clone's origin is
	 * its parent), which leaves nothing to do. Refused without -R. */
	ret = clone_destroy_dependents_locked(p, c.s, c.n, flags);
	if (ret < 0)
		goto out;
	if (ret > 0) {
		ret = 0;
		top = ds_find_locked(p, dsname);
		if (!top)
			goto out;
		goto again;
	}
	for (size_t i = 0; i < c.n; i++) {
		if (atomic_load(&c.s[i]->refs) > 0) {
			pool_set_error("%s: snapshot is open", c.s[i]->name);
			ret = -EBUSY;
			goto out;
		}
	}
	/* each folds into the nearest older snapshot that stays */
	for (size_t i = 0; i < c.n; i++)
		c.s[i]->dying = 1;
	for (size_t i = 0; i < c.n && ret == 0; i++) {
		struct snap *s = c.s[i], *prev = NULL;
		struct stor_ds *ds = s->ds;

		for (size_t k = 0; k < ds->nsnaps && ds->snaps[k] != s; k++)
			if (!ds->snaps[k]->dying)
				prev = ds->snaps[k];
		c.ops[i] = (struct snap_op){ .kind = SNAP_OP_DESTROY, .id = s->id,
					     .name = strdup(s->name) };
		if (!c.ops[i].name)
			ret = -ENOMEM;
		if (prev) {
			c.ops[i].prev_id = prev->id;
			c.ops[i].prev_txg = prev->txg;
		}
		if (ret == 0 && prev && ds->suite &&
		    (ret = snap_mac(prev, &c.ops[i].prev_mk)) == STOR_ENOKEY)
			pool_set_error("%s: the key of %s is not loaded; load it to destroy a "
				       "snapshot that has older ones",
				       s->name, ds->name);
	}
	if (ret < 0) {
		for (size_t i = 0; i < c.n; i++)
			c.s[i]->dying = 0;
		goto out;
	}
	ret = txg_sync_close(p, destroy_close, &c);
	if (!c.added) {
		for (size_t i = 0; i < c.n; i++)
			c.s[i]->dying = 0;
		goto out;
	}
	/* the stage owns the ops, whether its commit failed (it is retried) or not */
	memset(c.ops, 0, (c.n + 1) * sizeof(*c.ops));
	txg_read_synchronize(p); /* no read still walks them */
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < c.n; i++)
		detach(c.s[i]->ds, c.s[i]);
	pthread_mutex_unlock(&p->snap_lock);
	for (size_t i = 0; i < c.n; i++)
		if (i == 0 || c.s[i]->ds != c.s[i - 1]->ds)
			recount_kept(p, c.s[i]->ds);
	for (size_t i = 0; i < c.n; i++)
		snap_free(c.s[i]);
	c.n = 0;
out:
	if (c.ops)
		snap_ops_free(c.ops, c.n);
	pthread_mutex_unlock(&p->admin);
	free(c.s);
	free(c.ops);
	return ret;
}

static uint64_t sum_table(struct stor_pool *p, uint64_t id, uint64_t after, uint64_t upto);

/* Is @s among @v[0..n)? */
static int among(struct snap *const *v, size_t n, const struct snap *s)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == s)
			return 1;
	return 0;
}

/*
 * The dry run of stor_snap_destroy(): the same targets (pick), the same
 * clones (with -R, their datasets through ds_destroy_plan_locked, which is
 * the destroy's own collector) and the same refusals in the same order,
 * under the admin lock and changing nothing. A target freed frees what its
 * table holds that was born after the nearest older snapshot that stays
 * (the rest passes to that one, as destroy_close folds it).
 */
int snap_destroy_plan(struct stor_pool *p, const char *name, unsigned flags,
		      struct destroy_plan *pl)
{
	char dsname[STOR_NAME_MAX + 1];
	struct destroy_ctx c = { 0 };
	struct stor_ds **gone = NULL, **clones = NULL, *top;
	struct snap **kept = NULL;
	size_t total = 0, len, nclones = 0, nkept = 0;
	const char *spec;
	int ret = 0;

	if (stor_name_check(name, STOR_NAME_SNAPSHOT) < 0 || !(spec = split(name, dsname)))
		return STOR_EBADNAME;
	len = strlen(dsname);
	pthread_mutex_lock(&p->admin);
	ret = destroy_top_locked(p, dsname, flags, &top, &total);
	if (ret < 0)
		goto out;
	c.s = calloc(total + 1, sizeof(*c.s));
	kept = calloc(total + 1, sizeof(*kept));
	clones = calloc(p->nds + 1, sizeof(*clones));
	if (!c.s || !kept || !clones) {
		ret = -ENOMEM;
		goto out;
	}
	ret = pick(top, spec, &c, 1);
	for (size_t i = 0; i < p->nds && ret == 0 && (flags & STOR_RECURSIVE); i++)
		if (!strncmp(p->ds[i]->name, dsname, len) && p->ds[i]->name[len] == '/')
			ret = pick(p->ds[i], spec, &c, 0);
	if (ret < 0)
		goto out;
	/* clone_destroy_dependents_locked's refusal and its set of clones */
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct snap *o = p->ds[i]->origin;

		if (!o || !among(c.s, c.n, o))
			continue;
		if (!(flags & STOR_DESTROY_CLONES)) {
			pool_set_error("%s: snapshot has dependent clones (%s); use -R to destroy "
				       "them too",
				       o->name, p->ds[i]->name);
			ret = -EBUSY;
			goto out;
		}
		clones[nclones++] = p->ds[i];
	}
	if (nclones)
		ret = ds_destroy_plan_locked(p, clones, nclones,
					     STOR_RECURSIVE | STOR_DESTROY_CLONES |
						     (flags & STOR_DESTROY_OPEN_OK),
					     pl, &gone);
	if (ret < 0)
		goto out;
	/* what the clones take goes with them; the targets left are picked
	 * again by the destroy, which finds these */
	for (size_t i = 0; i < c.n; i++) {
		int with_clone = 0;

		for (size_t g = 0; gone && gone[g]; g++)
			with_clone |= gone[g] == c.s[i]->ds;
		if (!with_clone)
			kept[nkept++] = c.s[i];
	}
	for (size_t i = 0; i < nkept; i++) {
		if (atomic_load(&kept[i]->refs) > 0 && !(flags & STOR_DESTROY_OPEN_OK)) {
			pool_set_error("%s: snapshot is open", kept[i]->name);
			ret = -EBUSY;
			goto out;
		}
	}
	for (size_t i = 0; i < nkept && ret == 0; i++) {
		struct snap *s = kept[i], *prev = NULL;
		struct stor_ds *ds = s->ds;
		struct mac_key *mk = NULL;

		for (size_t k = 0; k < ds->nsnaps && ds->snaps[k] != s; k++)
			if (!among(kept, nkept, ds->snaps[k]))
				prev = ds->snaps[k];
		if (prev && ds->suite && (ret = snap_mac(prev, &mk)) == STOR_ENOKEY)
			pool_set_error("%s: the key of %s is not loaded; load it to destroy a "
				       "snapshot that has older ones",
				       s->name, ds->name);
		mac_key_put(mk);
		if (ret == 0)
			ret = destroy_plan_add(pl, s->name);
		pl->bytes += sum_table(p, s->id, prev ? prev->txg : 0, UINT64_MAX);
	}
out:
	pthread_mutex_unlock(&p->admin);
	free(gone);
	free(clones);
	free(kept);
	free(c.s);
	return ret;
}

/* ---- space ---- */

struct sum {
	uint64_t after, upto, bytes;
};

static int sum_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct sum *s = ctx;
	struct bp bp;

	(void)key, (void)klen;
	if (bp_decode(val, vlen, &bp) == 0 && bp.birth > s->after && bp.birth <= s->upto)
		s->bytes += bp.psize;
	return 0;
}

/* Bytes of table @id's pointers born in (@after, @upto], as last committed. */
static uint64_t sum_table(struct stor_pool *p, uint64_t id, uint64_t after, uint64_t upto)
{
	struct sum s = { after, upto, 0 };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *w = prefix;

	put_u64(&w, id);
	if (meta_rtxn_get(p->meta, &t) < 0)
		return 0;
	meta_iter(t, META_BP, prefix, sizeof(prefix), 0, sum_one, &s);
	meta_rtxn_put(t);
	return s.bytes;
}

/* usedbysnapshots of @ds anew from its tables, after a destroy or rollback
 * moved pointers between them at commit time. Admin lock held. */
static void recount_kept(struct stor_pool *p, struct stor_ds *ds)
{
	uint64_t kept = 0;

	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < ds->nsnaps; i++)
		kept += sum_table(p, ds->snaps[i]->id, 0, UINT64_MAX);
	atomic_store(&ds->snap_used, (int64_t)kept);
}

/* The txg of the snapshot before @s (0: none). */
static uint64_t prev_txg(const struct snap *s)
{
	uint64_t t = 0;

	for (size_t i = 0; i < s->ds->nsnaps && s->ds->snaps[i] != s; i++)
		if (!s->ds->snaps[i]->dying)
			t = s->ds->snaps[i]->txg;
	return t;
}

int snap_head_changed(struct stor_pool *p, struct stor_ds *ds, const struct snap *S)
{
	STOR_ASSERT_HELD(&p->admin);

	return sum_table(p, ds->id, S->txg, UINT64_MAX) || sum_table(p, S->id, 0, UINT64_MAX) ||
	       atomic_load(&ds->volsize) != S->volsize;
}

uint64_t snap_written_head(struct stor_pool *p, struct stor_ds *ds)
{
	struct snap *n;

	STOR_ASSERT_HELD(&p->admin);
	n = newest_alive(ds);
	return sum_table(p, ds->id, n ? n->txg : 0, UINT64_MAX);
}

/* written of @s: what it references that was born since the snapshot before
 * it, wherever those pointers are now (the head or newer tables). */
static uint64_t written_of(struct stor_pool *p, struct snap *s)
{
	uint64_t after = prev_txg(s), w = sum_table(p, s->ds->id, after, s->txg);

	for (size_t i = 0; i < s->ds->nsnaps; i++)
		if (s->ds->snaps[i]->txg >= s->txg)
			w += sum_table(p, s->ds->snaps[i]->id, after, s->txg);
	return w;
}

/* ---- rollback ---- */

/* The head's space from its pointers, after a rollback changed them. */
struct recount {
	int64_t used, lused;
};

static int recount_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct recount *r = ctx;
	struct bp bp;

	(void)key, (void)klen;
	if (bp_decode(val, vlen, &bp) == 0) {
		r->used += bp.psize;
		r->lused += bp.lsize;
	}
	return 0;
}

static void recount(struct stor_pool *p, struct stor_ds *ds);

void snap_recount_space(struct stor_pool *p, struct stor_ds *ds)
{
	STOR_ASSERT_HELD(&p->admin);

	recount(p, ds);
	recount_kept(p, ds);
	clone_count_shared_ds(p, ds);
}

int snap_record(const struct snap *s, uint8_t rec[SNAP_RECORD_MAX])
{
	encode(s, rec);
	return SNAP_RECORD_LEN;
}

int snap_record_for(const struct snap *s, const struct stor_ds *to, char **name,
		    uint8_t rec[SNAP_RECORD_MAX])
{
	struct snap moved = *s;

	moved.ds = (struct stor_ds *)to;
	if (asprintf(name, "%s%s", to->name, strchr(s->name, '@')) < 0) {
		*name = NULL;
		return -ENOMEM;
	}
	encode(&moved, rec);
	return SNAP_RECORD_LEN;
}

static void recount(struct stor_pool *p, struct stor_ds *ds)
{
	struct recount r = { 0 };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *w = prefix;

	put_u64(&w, ds->id);
	if (meta_rtxn_get(p->meta, &t) < 0)
		return;
	if (meta_iter(t, META_BP, prefix, sizeof(prefix), 0, recount_one, &r) == 0) {
		atomic_store(&ds->used, r.used);
		atomic_store(&ds->logical_used, r.lused);
	}
	meta_rtxn_put(t);
}

int stor_snap_rollback(struct stor_pool *p, const char *name, unsigned flags)
{
	char dsname[STOR_NAME_MAX + 1];
	struct destroy_ctx c = { 0 };
	const char *snapname;
	struct stor_ds *ds;
	struct ds_keys *k;
	struct snap *S;
	size_t at;
	int ret = 0;

	pool_clear_error();
	if (stor_name_check(name, STOR_NAME_SNAPSHOT) < 0 || strpbrk(name, "%,") ||
	    !(snapname = split(name, dsname)))
		return STOR_EBADNAME;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, dsname);
	S = ds ? snap_names_find(ds, snapname) : NULL;
	if (!S || S->dying) {
		ret = -ENOENT;
		goto out;
	}
	if (rekey_under_way(ds)) {
		rekey_busy_error(ds, "roll it back");
		ret = -EBUSY;
		goto out;
	}
	for (at = 0; ds->snaps[at] != S; at++)
		;
	if (at + 1 < ds->nsnaps && !(flags & STOR_RECURSIVE)) {
		pool_set_error("%s: more recent snapshots exist; use -r to destroy them", name);
		ret = -EEXIST;
		goto out;
	}
	if (atomic_load(&ds->refs) > (flags & SNAP_HELD ? 1 : 0)) {
		pool_set_error("%s: the dataset is open", ds->name);
		ret = -EBUSY;
		goto out;
	}
	k = atomic_load(&ds->keys);
	if (ds->suite && !k && !(flags & SNAP_NOMACS)) {
		pool_set_error("%s: the key of %s is not loaded; load it to roll back", name,
			       ds->name);
		ret = STOR_ENOKEY;
		goto out;
	}
	/* the newer snapshots go in the same txg, folding into S, then S's
	 * table comes back to the head: ops in that order */
	c.s = calloc(ds->nsnaps + 1, sizeof(*c.s));
	c.ops = calloc(ds->nsnaps + 2, sizeof(*c.ops));
	if (!c.s || !c.ops) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = ds->nsnaps; i-- > at + 1;) {
		struct snap *x = ds->snaps[i];

		if (atomic_load(&x->refs) > 0) {
			pool_set_error("%s: snapshot is open", x->name);
			ret = -EBUSY;
			goto out;
		}
		if (x->nclones) {
			pool_set_error("%s: snapshot has dependent clones; destroy them first",
				       x->name);
			ret = -EBUSY;
			goto out;
		}
		c.s[c.n] = x;
		c.ops[c.n] = (struct snap_op){ .kind = SNAP_OP_DESTROY, .id = x->id,
					       .name = strdup(x->name), .prev_id = S->id,
					       .prev_txg = S->txg };
		if (!c.ops[c.n++].name) {
			ret = -ENOMEM;
			goto out;
		}
	}
	c.ops[c.n] = (struct snap_op){ .kind = SNAP_OP_ROLLBACK, .id = S->id, .prev_id = ds->id,
				       .prev_txg = S->txg };
	if (ds->suite && !(flags & SNAP_NOMACS)) {
		ret = snap_mac(S, &c.ops[c.n].mk);
		c.ops[c.n].prev_mk = ret == 0 ? mac_key_ref(k->mac) : NULL;
		for (size_t i = 0; i < c.n && ret == 0; i++)
			c.ops[i].prev_mk = mac_key_ref(c.ops[c.n].mk);
		if (ret < 0)
			goto out;
	}
	c.nops = c.n + 1;
	for (size_t i = 0; i < c.n; i++)
		c.s[i]->dying = 1;
	ret = txg_sync_close(p, destroy_close, &c);
	if (!c.added) {
		for (size_t i = 0; i < c.n; i++)
			c.s[i]->dying = 0;
		goto out;
	}
	memset(c.ops, 0, c.nops * sizeof(*c.ops));
	txg_read_synchronize(p);
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < c.n; i++)
		detach(ds, c.s[i]);
	pthread_mutex_unlock(&p->snap_lock);
	for (size_t i = 0; i < c.n; i++)
		snap_free(c.s[i]);
	c.n = 0;
	c.nops = 0;
	recount(p, ds);
	recount_kept(p, ds);
	clone_count_shared_ds(p, ds);
	space_sync_locked(p);
	cache_drop_ds(cache_data(), ds->guid); /* no plaintext of what went */
out:
	if (c.ops)
		snap_ops_free(c.ops, c.nops ? c.nops : c.n + 1);
	pthread_mutex_unlock(&p->admin);
	free(c.s);
	free(c.ops);
	return ret;
}

/* ---- list, properties ---- */

int stor_snap_list(struct stor_pool *p, int (*fn)(const char *name, void *ctx), void *ctx)
{
	char **names = NULL;
	size_t n = 0, k = 0;
	int ret = 0;

	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds; i++)
		n += p->ds[i]->nsnaps;
	names = calloc(n + 1, sizeof(*names));
	for (size_t i = 0; names && i < p->nds; i++)
		for (size_t j = 0; j < p->ds[i]->nsnaps; j++)
			if (!p->ds[i]->snaps[j]->dying)
				names[k++] = strdup(p->ds[i]->snaps[j]->name);
	pthread_mutex_unlock(&p->admin);
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < k && ret == 0; i++)
		ret = names[i] ? fn(names[i], ctx) : -ENOMEM;
	for (size_t i = 0; i < k; i++)
		free(names[i]);
	free(names);
	return ret;
}

struct snap *snap_find_locked(struct stor_pool *p, const char *name)
{
	char dsname[STOR_NAME_MAX + 1];
	const char *snapname = split(name, dsname);
	struct stor_ds *ds;
	struct snap *s;

	STOR_ASSERT_HELD(&p->admin);
	ds = snapname ? ds_find_locked(p, dsname) : NULL;
	s = ds ? snap_names_find(ds, snapname) : NULL;
	return s && !s->dying ? s : NULL;
}

/* A snapshot's properties, in the order get all shows them: its own, then
 * those of its dataset that hold for it too. */
static const int snap_props[] = {
	PROP_TYPE, PROP_CREATETXG, PROP_CREATION, PROP_GUID, PROP_VOLSIZE, PROP_USED,
	PROP_REFERENCED, PROP_WRITTEN, PROP_RECORDSIZE, PROP_ENCRYPTION, PROP_ENCRYPTIONROOT,
	PROP_KEYSTATUS,
};

/* A snapshot's own property @id, @text, into @v. */
static void fixed_value(struct stor_prop_value *v, int id, const char *text)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", prop_table[id].name);
	snprintf(v->value, sizeof(v->value), "%s", text);
	v->source = STOR_SRC_FIXED;
}

/* Property @id of @s into @v (admin lock held). @return 1, or 0 when a
 * snapshot has no such property */
static int snap_value_locked(struct stor_pool *p, struct snap *s, int id,
			     struct stor_prop_value *v)
{
	char num[24];
	uint64_t x;

	switch (id) {
	case PROP_TYPE:
		fixed_value(v, id, "snapshot");
		return 1;
	case PROP_CREATETXG:
		x = s->txg;
		break;
	case PROP_CREATION:
		x = s->ctime;
		break;
	case PROP_GUID:
		x = s->guid;
		break;
	case PROP_VOLSIZE:
		x = s->volsize;
		break;
	case PROP_USED:
		/* what destroying it alone would free (born since the one before
		 * it, kept by it only); as of the last commit */
		x = sum_table(p, s->id, prev_txg(s), UINT64_MAX);
		break;
	case PROP_REFERENCED:
		x = s->referenced;
		break;
	case PROP_WRITTEN:
		x = written_of(p, s);
		break;
	case PROP_RECORDSIZE:
	case PROP_ENCRYPTION:
	case PROP_ENCRYPTIONROOT:
	case PROP_KEYSTATUS:
		ds_value_locked(p, s->ds, id, v);
		return 1;
	default:
		return 0;
	}
	snprintf(num, sizeof(num), "%llu", (unsigned long long)x);
	fixed_value(v, id, num);
	return 1;
}

int snap_get_all(struct stor_pool *p, const char *name, const char *want,
		 int (*fn)(const struct stor_prop_value *v, void *ctx), void *ctx)
{
	struct stor_prop_value v[sizeof(snap_props) / sizeof(*snap_props)];
	int only = want ? prop_lookup(want) : -1, ret = 0;
	struct snap *s;
	size_t n = 0;

	pthread_mutex_lock(&p->admin);
	s = snap_find_locked(p, name);
	for (size_t i = 0; s && i < sizeof(snap_props) / sizeof(*snap_props); i++)
		if (!want || snap_props[i] == only)
			n += (size_t)snap_value_locked(p, s, snap_props[i], &v[n]);
	pthread_mutex_unlock(&p->admin);
	if (!s)
		return -ENOENT;
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = fn(&v[i], ctx);
	return ret;
}

int stor_snap_list_props(struct stor_pool *p, const char *const *props, size_t n,
			 int (*fn)(const char *name, const struct stor_prop_value *v, size_t nv,
				   void *ctx),
			 void *ctx)
{
	struct stor_prop_value *vals = calloc(n ? n : 1, sizeof(*vals));
	int *ids = calloc(n ? n : 1, sizeof(*ids));
	int ret = 0;

	if (!vals || !ids) {
		free(vals);
		free(ids);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++)
		ids[k] = prop_lookup(props[k]);
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		for (size_t j = 0; j < p->ds[i]->nsnaps && ret == 0; j++) {
			struct snap *s = p->ds[i]->snaps[j];

			if (s->dying)
				continue;
			for (size_t k = 0; k < n; k++) {
				if (ids[k] < 0 || !snap_value_locked(p, s, ids[k], &vals[k]))
					ds_value_none(&vals[k], props[k]);
			}
			ret = fn(s->name, vals, n, ctx);
		}
	}
	pthread_mutex_unlock(&p->admin);
	free(vals);
	free(ids);
	return ret;
}

/* ---- reading ---- */

int snap_open(struct stor_pool *p, const char *name, struct stor_ds **out)
{
	struct stor_ds *h = NULL, *ds;
	struct snap *s;
	int ret = 0;

	*out = NULL;
	pthread_mutex_lock(&p->admin);
	s = snap_find_locked(p, name);
	if (!s) {
		ret = -ENOENT;
		goto out;
	}
	ds = s->ds;
	if (atomic_load(&ds->receiving)) {
		recv_busy_error(ds);
		ret = -EBUSY;
		goto out;
	}
	h = calloc(1, sizeof(*h));
	if (!h || !(h->name = strdup(name))) {
		free(h);
		ret = -ENOMEM;
		goto out;
	}
	h->pool = p;
	h->id = s->id;
	h->guid = ds->guid;
	atomic_store(&h->volsize, s->volsize);
	h->recsize = ds->recsize;
	h->suite = ds->suite;
	h->enc_root_id = ds->enc_root_id;
	h->createtxg = s->txg;
	atomic_store(&h->checksum_on, atomic_load(&ds->checksum_on));
	h->head = ds;
	h->snap = s;
	/* its dataset stays, and keeps its key, while the handle is open */
	atomic_fetch_add(&ds->refs, 1);
	atomic_fetch_add(&s->refs, 1);
	*out = h;
out:
	pthread_mutex_unlock(&p->admin);
	return ret;
}

void snap_close(struct stor_ds *h)
{
	atomic_fetch_sub(&h->snap->refs, 1);
	atomic_fetch_sub(&h->head->refs, 1);
	free(atomic_load(&h->stats.lat)); /* its reads' latencies (stats.c) */
	free(h->name);
	free(h);
}

/* Look up @recno in table @id and, on an encrypted dataset, check its group. */
static int look(struct stor_pool *p, uint64_t id, const struct mac_key *mk,
		struct seen_bits *seen, uint64_t recno, struct bp *bp, int *found)
{
	int ret = txg_lookup(p, 1, &id, &recno, bp, found);

	if (ret == 0 && mk)
		ret = bpmac_check_group(p->meta, id, mk, seen, recno);
	return ret;
}

int snap_resolve(struct stor_pool *p, struct stor_ds *h, uint64_t recno, struct bp *bp,
		 int *found, uint64_t *guid)
{
	int ret = snap_resolve_at(p, h->snap, recno, bp, found, guid);

	if (ret == 0 && !*found && h->head->origin)
		ret = clone_resolve(p, h->head->origin, recno, bp, found, guid);
	return ret;
}

int snap_resolve_at(struct stor_pool *p, struct snap *S, uint64_t recno, struct bp *bp,
		    int *found, uint64_t *guid)
{
	struct snap **walk = NULL;
	struct stor_ds *ds = S->ds;
	struct ds_keys *k = NULL;
	size_t n = 0;
	int ret;

	*found = 0;
	if (ds->suite && !(k = atomic_load(&ds->keys)))
		return STOR_ENOKEY;
	ret = look(p, ds->id, k ? k->mac : NULL, k ? &k->seen : NULL, recno, bp, found);
	if (ret == 0 && *found)
		*guid = ds_sealer(ds, bp->birth);
	if (ret < 0 || (*found && bp->birth <= S->txg))
		return ret;
	/* the tables from the newest down to S's; a destroy frees none of
	 * them before every reader section that may hold the list is over */
	pthread_mutex_lock(&p->snap_lock);
	walk = malloc(ds->nsnaps * sizeof(*walk) + 1);
	for (size_t i = ds->nsnaps; walk && i-- > 0 && ds->snaps[i]->txg >= S->txg;)
		walk[n++] = ds->snaps[i];
	pthread_mutex_unlock(&p->snap_lock);
	if (!walk)
		return -ENOMEM;
	*found = 0;
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct mac_key *mk = NULL;

		if (ds->suite && (ret = snap_mac(walk[i], &mk)) < 0)
			break;
		ret = look(p, walk[i]->id, mk, &walk[i]->seen, recno, bp, found);
		mac_key_put(mk);
		if (ret == 0 && *found && bp->birth <= S->txg) {
			*guid = ds_sealer(ds, bp->birth);
			break;
		}
		*found = 0;
	}
	free(walk);
	return ret;
}
