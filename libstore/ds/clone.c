/* SPDX-License-Identifier: MIT */
/*
 * Clones: a dataset made from a snapshot in constant time, that reads the
 * snapshot's image for every record it has not written and writes on its
 * own (after OpenZFS's dsl_dataset_clone; zfs-clone(8)).
 *
 * A clone is an ordinary dataset (its own id, GUID, table of pointers,
 * snapshots) whose record names its origin snapshot (origin_id). Nothing
 * is copied at creation: its table starts empty.
 * - Read of record r: its own pointer if it has one; else r as the origin
 *   snapshot S sees it (snap_resolve_at: S's dataset's head, then its
 *   tables down to S's), and if S's dataset is a clone too and has none,
 *   its origin's, and so on. So "not in the clone's table" means "the
 *   origin's": a discard in a clone stores a record of zeros instead of
 *   deleting the pointer (record.c), since a table has no tombstone.
 * - Writes go to its table only. An overwrite replaces (frees or keeps for
 *   a snapshot of the clone) only a pointer of the clone's own: a shared
 *   record's pointer lives in the origin's tables, never in the clone's,
 *   so no write of the clone can free the origin's extent, and each extent
 *   is still in exactly one table (freed once; verify.c checks it). The
 *   origin's own overwrites keep what S holds in S's table as before.
 * - S cannot be destroyed while it has clones (nclones), nor can its
 *   dataset or a rollback past it: "snapshot has dependent clones", unless
 *   destroy -R, which destroys the clones with all they take (dataset.c:
 *   doomed_locked) in one txg first. So the origin a clone reads is there
 *   as long as it is.
 * - Space, as zfs reports it: a clone's used is what only it holds (its own
 *   pointers and its snapshots'); its referenced is its own plus the part
 *   of S's image it still reads (shared_ref: S's referenced at creation,
 *   less the origin's extent of each record the clone has written since,
 *   counted at staging and again from the pointers at import); written is
 *   its own bytes since its newest snapshot. The origin's space is
 *   unchanged by clones.
 * - The metadata log carries the clone's record (origin_id) with every
 *   other dataset record, so an import from the LUNs alone has it.
 * - Promote (below) swaps the roles: the clone takes its origin's older
 *   snapshots, the old origin becomes a clone of the origin snapshot.
 *
 * Encryption. A clone reads its origin's records, so it has the same
 * master key and encryption root (dskeys_clone), as in ZFS: its keystatus
 * follows the root and load-key of the root loads it. It never uses its
 * origin's (key, nonce) pairs: a data key is HKDF(master, dataset GUID,
 * suite, key salt) (crypt.c), and the clone has its own random GUID and its
 * own nonce blocks (a key state of its own draws them), so its data keys
 * are not its origin's at all. The record AAD holds the GUID of the dataset
 * that sealed it: a read through the origin opens the record with the
 * origin's GUID (the data key and AAD derived from the shared master key),
 * its own records with its own. The pointers authenticate the same way:
 * the clone's table has its MAC tree under its own MAC key (its GUID), and
 * a shared pointer is found through the origin's tables, whose groups are
 * checked under the origin's head and snapshot MAC keys (snap_resolve_at),
 * so a shared pointer changed, or one of the clone's dropped to uncover
 * the origin's, reads as EAUTH. A rekey of either rekeys both (rekey.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/recv_state.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "kv/meta.h"
#include "pool_impl.h"

int stor_ds_clone(struct stor_pool *p, const char *origin, const char *name,
		  const struct stor_ds_opts *opts)
{
	struct stor_ds_opts o = { 0 };
	struct snap *S = NULL;
	size_t plen = strlen(p->name);
	int ret;

	pool_clear_error();
	if (stor_name_check(origin, STOR_NAME_SNAPSHOT) < 0 || strpbrk(origin, "%,")) {
		pool_set_error("'%s': the origin of a clone is DATASET@SNAP", origin);
		return STOR_EBADNAME;
	}
	if (strncmp(name, p->name, plen) || name[plen] != '/' || strncmp(origin, p->name, plen) ||
	    !strchr("/@", origin[plen])) {
		pool_set_error("a clone is made in the pool of its origin");
		return -EXDEV;
	}
	if (opts) {
		o.props = opts->props;
		o.nprops = opts->nprops;
	}
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds && !S; i++)
		for (size_t k = 0; k < p->ds[i]->nsnaps; k++)
			if (!strcmp(p->ds[i]->snaps[k]->name, origin) && !p->ds[i]->snaps[k]->dying)
				S = p->ds[i]->snaps[k];
	if (!S) {
		pool_set_error("%s: no such snapshot", origin);
		ret = -ENOENT;
	} else if (atomic_load(&S->ds->receiving)) {
		/* a receive that fails rolls its dataset back past what it made */
		recv_busy_error(S->ds);
		ret = -EBUSY;
	} else {
		ret = ds_create_locked(p, name, &o, S, NULL);
	}
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int clone_link_all(struct stor_pool *p)
{
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *ds = p->ds[i];
		struct snap *S;

		if (!ds->origin_id)
			continue;
		S = snap_find_id_locked(p, ds->origin_id);
		/* a clone of its own snapshot, or of one of another suite, would
		 * read what it cannot open: the metadata was changed (the key
		 * file, and so the roots, are read later: clone_import) */
		if (!S || S->ds == ds || S->ds->suite != ds->suite) {
			pool_set_error("pool %s: dataset %s: its origin %llu is no snapshot it can "
				       "read; the metadata was changed",
				       p->name, ds->name, (unsigned long long)ds->origin_id);
			return STOR_ECORRUPT;
		}
		ds->origin = S;
		S->nclones++;
	}
	/* no cycle: following origins from any clone ends at a dataset that
	 * is none (each step goes to another dataset; p->nds steps at most) */
	for (size_t i = 0; i < p->nds; i++) {
		struct snap *S = p->ds[i]->origin;

		for (size_t n = 0; S; S = S->ds->origin)
			if (++n > p->nds) {
				pool_set_error("pool %s: dataset %s: its origins loop; the metadata "
					       "was changed",
					       p->name, p->ds[i]->name);
				return STOR_ECORRUPT;
			}
	}
	return 0;
}

int clone_resolve(struct stor_pool *p, struct snap *S, uint64_t recno, struct bp *bp, int *found,
		  uint64_t *guid)
{
	int ret = 0;

	*found = 0;
	for (; S && ret == 0 && !*found; S = S->ds->origin) {
		ret = snap_resolve_at(p, S, recno, bp, found, guid);
	}
	return ret;
}

/* Like clone_resolve without the MAC checks: for space, which needs no key. */
static uint64_t image_psize(struct stor_pool *p, struct snap *S, uint64_t recno)
{
	for (; S; S = S->ds->origin) {
		struct stor_ds *ds = S->ds;
		uint64_t *ids;
		size_t n = 0;
		struct bp bp;
		int found = 0;

		/* the head, then the tables from the newest down to S's (as
		 * snap_resolve_at walks them), copied: no lookup under snap_lock */
		pthread_mutex_lock(&p->snap_lock);
		ids = malloc((ds->nsnaps + 1) * sizeof(*ids));
		if (ids) {
			ids[n++] = ds->id;
			for (size_t i = ds->nsnaps; i-- > 0 && ds->snaps[i]->txg >= S->txg;)
				ids[n++] = ds->snaps[i]->id;
		}
		pthread_mutex_unlock(&p->snap_lock);
		if (!ids)
			return 0;
		for (size_t i = 0; i < n; i++) {
			if (txg_lookup(p, 1, &ids[i], &recno, &bp, &found) == 0 && found &&
			    bp.birth <= S->txg) {
				free(ids);
				return bp.psize;
			}
		}
		free(ids);
	}
	return 0;
}

uint64_t clone_shared_psize(struct stor_pool *p, const struct stor_ds *ds, uint64_t recno)
{
	return ds->origin ? image_psize(p, ds->origin, recno) : 0;
}

struct own_recs {
	uint64_t *v;
	size_t n, cap;
};

static int collect(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct own_recs *o = ctx;
	const uint8_t *k = (const uint8_t *)key + 8;
	uint64_t *a;

	(void)val, (void)vlen;
	if (klen != BP_KEY_LEN)
		return STOR_ECORRUPT;
	if (o->n == o->cap) {
		a = realloc(o->v, (o->cap ? o->cap * 2 : 256) * sizeof(*a));
		if (!a)
			return -ENOMEM;
		o->v = a;
		o->cap = o->cap ? o->cap * 2 : 256;
	}
	o->v[o->n++] = get_u64(&k);
	return 0;
}

void clone_count_shared_ds(struct stor_pool *p, struct stor_ds *ds)
{
	struct own_recs o = { 0 };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *w = prefix;
	int64_t shared;

	if (!ds->origin)
		return;
	shared = (int64_t)ds->origin->referenced;
	put_u64(&w, ds->id);
	if (meta_rtxn_get(p->meta, &t) == 0) {
		meta_iter(t, META_BP, prefix, sizeof(prefix), 0, collect, &o);
		meta_rtxn_put(t);
	}
	for (size_t k = 0; k < o.n; k++)
		shared -= (int64_t)image_psize(p, ds->origin, o.v[k]);
	atomic_store(&ds->shared_ref, shared);
	free(o.v);
}

int clone_import(struct stor_pool *p)
{
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *ds = p->ds[i];

		if (ds->origin && ds->suite && ds->origin->ds->enc_root_id != ds->enc_root_id) {
			pool_set_error("pool %s: clone %s has another encryption root than its "
				       "origin %s; the metadata was changed",
				       p->name, ds->name, ds->origin->name);
			return STOR_ECORRUPT;
		}
		clone_count_shared_ds(p, ds);
	}
	return 0;
}

int clone_destroy_dependents_locked(struct stor_pool *p, struct snap *const *snaps, size_t n,
				    unsigned flags)
{
	struct stor_ds **clones = NULL;
	size_t k = 0;
	int ret;

	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < p->nds; i++) {
		struct snap *o = p->ds[i]->origin;

		for (size_t j = 0; o && j < n; j++)
			if (o == snaps[j] && !(flags & STOR_DESTROY_CLONES)) {
				pool_set_error("%s: snapshot has dependent clones (%s); use -R to "
					       "destroy them too",
					       o->name, p->ds[i]->name);
				return -EBUSY;
			}
	}
	clones = calloc(p->nds + 1, sizeof(*clones));
	if (!clones)
		return -ENOMEM;
	for (size_t i = 0; i < p->nds; i++)
		for (size_t j = 0; p->ds[i]->origin && j < n; j++)
			if (p->ds[i]->origin == snaps[j]) {
				clones[k++] = p->ds[i];
				break;
			}
	/* each clone with all it takes, in one txg (dataset.c) */
	ret = k ? ds_destroy_set_locked(p, clones, k, STOR_RECURSIVE | STOR_DESTROY_CLONES) : 0;
	free(clones);
	return ret < 0 ? ret : (int)k;
}

/* ---- promote: the commit (its planning is pool/promote.c's) ---- */

void clone_plan_free(struct promote_plan *pl)
{
	if (!pl)
		return;
	for (size_t i = 0; i < pl->nmks; i++)
		mac_key_put(pl->mks[i]);
	for (size_t i = 0; i < pl->nrec; i++) {
		free(pl->names[i]);
		free(pl->recs[i]);
	}
	free(pl->v);
	free(pl->names);
	free(pl->recs);
	free(pl->lens);
	free(pl);
}

int clone_promote_commit(struct meta_txn *t, const struct promote_plan *pl)
{
	struct bpmac_change *ch = NULL;
	uint8_t key[BP_KEY_LEN];
	size_t nch = 0;
	int ret = 0;

	if (pl->n && !(ch = calloc(2 * pl->n, sizeof(*ch))))
		return -ENOMEM;
	for (size_t i = 0; i < pl->n && ret == 0; i++) {
		const struct move *x = &pl->v[i];

		bp_key(x->from, x->recno, key);
		ret = meta_del(t, META_BP, key, sizeof(key));
		bp_key(x->to, x->recno, key);
		if (ret == 0)
			ret = meta_put(t, META_BP, key, sizeof(key), x->bp, BP_LEN);
		if (ret == 0 && x->from_mk) {
			/* out of the tree it leaves, into the one it joins */
			ch[nch] = (struct bpmac_change){ .ds_id = x->from, .recno = x->recno,
							 .mk = x->from_mk };
			ret = bpmac_leaf_xor(x->from_mk, x->recno, x->bp, ch[nch++].delta);
			ch[nch] = (struct bpmac_change){ .ds_id = x->to, .recno = x->recno,
							 .mk = x->to_mk };
			if (ret == 0)
				ret = bpmac_leaf_xor(x->to_mk, x->recno, x->bp, ch[nch++].delta);
		}
	}
	if (ret == 0 && nch)
		ret = bpmac_apply(t, ch, nch);
	for (size_t i = 0; i < pl->nrec && ret == 0; i++) {
		if (pl->recs[i])
			ret = meta_put(t, META_DS, pl->names[i], strlen(pl->names[i]), pl->recs[i],
				       pl->lens[i]);
		else if ((ret = meta_del(t, META_DS, pl->names[i], strlen(pl->names[i]))) == -ENOENT)
			ret = 0;
	}
	free(ch);
	return ret;
}
