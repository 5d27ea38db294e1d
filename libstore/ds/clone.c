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
 * the origin's, reads as EAUTH.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "ds/clone.h"
#include "ds/dataset.h"
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
	if (stor_name_check(origin, STOR_NAME_SNAPSHOT) < 0 || strchr(origin, '%')) {
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
		pool_set_error("%s is being received; wait for the receive to end", S->ds->name);
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

/* ---- promote ---- */

/*
 * Promote C, a clone of S = D@s (zfs promote): C takes D's snapshots up to
 * and including S, and D becomes a clone of C@s. Every view reads what it
 * read before; what changes is who owns the snapshots, and where the
 * pointers of S's image live, since a head's table holds every record it
 * has and a snapshot's walk visits its own dataset's tables only:
 * - P, the version of record r alive at S that D wrote (in D's head, in
 *   S's table, or in the table of one of D's later snapshots), becomes C's:
 *   into C's head if C never wrote r, else into the table of C's newest
 *   snapshot made before C first wrote r (S's if none), the table every C
 *   snapshot that still sees P walks (txg.c's keep rule). D then reads P
 *   through its new origin. All moves are one commit, each under the MAC
 *   key of the table it leaves and of the one it joins; extents, nonces
 *   and tags stay: nothing is sealed again. The cost is D's pointers.
 * - P was sealed under D's GUID (or what sealed it for D): C's sealers say
 *   so for every record of its tables born by S's txg (ds_sealer); C's own
 *   are all born after, since C was made after S.
 * - Records D discarded since S (a hole in D over P) would read P once D
 *   is a clone, so D gets a record of zeros there first; a hole of that
 *   kind in a snapshot of D after S cannot get one (it would be born in the
 *   past), so promote is refused then, naming it.
 * Space moves with the snapshots: every table's bytes are counted again.
 * C and D may not be open, and an encrypted pair needs its key.
 */
struct move {
	uint64_t from, to, recno;
	const struct mac_key *from_mk, *to_mk;
	uint8_t bp[BP_LEN];
};

struct promote_plan {
	struct move *v;
	size_t n, cap;
	struct mac_key *mks[64]; /* references the moves' keys point to */
	size_t nmks;
	size_t nrec;
	char **names; /* META_DS: a NULL rec deletes the name */
	uint8_t **recs;
	size_t *lens;
};

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

/* ---- planning (admin lock held, C and D closed, everything committed) ---- */

struct source {
	struct promote_plan *pl;
	uint64_t from, upto;
	const struct mac_key *mk;
};

/* A pointer of D's born by S's txg: P, to be placed (its .to later). */
static int collect_p(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct source *src = ctx;
	struct promote_plan *pl = src->pl;
	const uint8_t *k = (const uint8_t *)key + 8;
	struct bp bp;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (bp.birth > src->upto)
		return 0;
	if (pl->n == pl->cap) {
		struct move *a = realloc(pl->v, (pl->cap ? pl->cap * 2 : 256) * sizeof(*a));

		if (!a)
			return -ENOMEM;
		pl->v = a;
		pl->cap = pl->cap ? pl->cap * 2 : 256;
	}
	pl->v[pl->n] = (struct move){ .from = src->from, .recno = get_u64(&k),
				      .from_mk = src->mk };
	memcpy(pl->v[pl->n].bp, val, BP_LEN);
	pl->n++;
	return 0;
}

/* A reference held by the plan (NULL for a clear pair). */
static const struct mac_key *hold(struct promote_plan *pl, struct mac_key *mk)
{
	if (!mk || pl->nmks == sizeof(pl->mks) / sizeof(pl->mks[0])) {
		mac_key_put(mk);
		return NULL;
	}
	pl->mks[pl->nmks++] = mk;
	return mk;
}

/* Is record @recno found (any version) in @ds's lineage at snapshot @s? */
static int found_at(struct stor_pool *p, struct stor_ds *ds, struct snap *s, uint64_t recno)
{
	struct bp bp;
	int found = 0;

	if (txg_lookup(p, 1, &ds->id, &recno, &bp, &found) == 0 && found && bp.birth <= s->txg)
		return 1;
	for (size_t i = ds->nsnaps; i-- > 0 && ds->snaps[i]->txg >= s->txg;) {
		uint64_t id = ds->snaps[i]->id;

		if (txg_lookup(p, 1, &id, &recno, &bp, &found) == 0 && found && bp.birth <= s->txg)
			return 1;
	}
	return 0;
}

/* The birth of @C's first version of @recno (its head and tables), 0: none. */
static uint64_t first_written(struct stor_pool *p, struct stor_ds *C, uint64_t recno)
{
	uint64_t first = 0;
	struct bp bp;
	int found = 0;

	if (txg_lookup(p, 1, &C->id, &recno, &bp, &found) == 0 && found)
		first = bp.birth;
	for (size_t i = 0; i < C->nsnaps; i++) {
		uint64_t id = C->snaps[i]->id;

		if (txg_lookup(p, 1, &id, &recno, &bp, &found) == 0 && found &&
		    (!first || bp.birth < first))
			first = bp.birth;
	}
	return first;
}

/*
 * Collect every P (D's head, S's table, D's later tables: born by S's txg)
 * and place it; write zeros into D's head where D discarded P since S;
 * refuse when a later snapshot of D has such a hole.
 */
static int plan_moves(struct stor_pool *p, struct promote_plan *pl, struct stor_ds *C,
		      struct stor_ds *D, size_t at)
{
	struct snap *S = D->snaps[at];
	struct ds_keys *ck = atomic_load(&C->keys), *dk = atomic_load(&D->keys);
	const struct mac_key *c_mk = D->suite ? hold(pl, mac_key_ref(ck->mac)) : NULL;
	const struct mac_key *s_mk = NULL;
	struct meta_txn *t = NULL;
	uint8_t *zeros = NULL;
	int ret = 0;

	if (D->suite) {
		struct mac_key *mk = NULL;

		ret = snap_mac(S, &mk);
		s_mk = hold(pl, mk);
	}
	if (ret == 0)
		ret = meta_rtxn_get(p->meta, &t);
	for (size_t i = at; i <= D->nsnaps && ret == 0; i++) {
		/* D's head first, then S's table and the later ones */
		struct source src = { pl, i == at ? D->id : D->snaps[i - 1]->id, S->txg, NULL };
		uint8_t prefix[8], *w = prefix;
		struct mac_key *mk = NULL;

		if (D->suite) {
			if (i == at)
				mk = mac_key_ref(dk->mac);
			else
				ret = snap_mac(D->snaps[i - 1], &mk);
			src.mk = hold(pl, mk);
			if (ret == 0 && !src.mk)
				ret = -ENOMEM;
		}
		put_u64(&w, src.from);
		if (ret == 0)
			ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, collect_p, &src);
	}
	if (t)
		meta_rtxn_put(t);
	/* a hole over P in a later snapshot of D cannot be kept: refused
	 * before anything is written */
	for (size_t i = 0; i < pl->n && ret == 0; i++)
		for (size_t j = at + 1; j < D->nsnaps && ret == 0; j++)
			if (!found_at(p, D, D->snaps[j], pl->v[i].recno)) {
				pool_set_error("%s: record %llu is a hole there and has data in %s; "
					       "destroy %s first to promote",
					       D->snaps[j]->name, (unsigned long long)pl->v[i].recno,
					       S->name, D->snaps[j]->name);
				ret = -EBUSY;
			}
	for (size_t i = 0; i < pl->n && ret == 0; i++) {
		struct move *x = &pl->v[i];
		uint64_t first = first_written(p, C, x->recno);
		struct snap *X = S;
		struct bp bp;
		int found = 0;

		/* where it goes in C */
		if (!first) {
			x->to = C->id;
			x->to_mk = c_mk;
		} else {
			for (size_t j = 0; j < C->nsnaps; j++)
				if (C->snaps[j]->txg < first)
					X = C->snaps[j];
			x->to = X->id;
			if (X == S) {
				x->to_mk = s_mk;
			} else if (D->suite) {
				struct mac_key *mk = NULL;

				ret = snap_mac(X, &mk);
				x->to_mk = hold(pl, mk);
				if (ret == 0 && !x->to_mk)
					ret = -ENOMEM;
			}
		}
		/* a record D discarded since S: zeros, or D would read P (a
		 * clone's discards are zeros, but D may have been made a clone
		 * by a promote after a discard) */
		if (ret == 0 && x->from != D->id &&
		    (ret = txg_lookup(p, 1, &D->id, &x->recno, &bp, &found)) == 0 && !found) {
			if (!zeros && !(zeros = calloc(1, D->recsize)))
				ret = -ENOMEM;
			if (ret == 0) {
				atomic_fetch_add(&D->refs, 1);
				ret = stor_ds_write(D, x->recno * D->recsize, zeros, D->recsize);
				atomic_fetch_sub(&D->refs, 1);
			}
		}
	}
	/* an entry of S's table that stays there is no move */
	for (size_t i = 0, k = 0; ret == 0 && i <= pl->n; i++) {
		if (i == pl->n) {
			pl->n = k;
			break;
		}
		if (pl->v[i].from != pl->v[i].to)
			pl->v[k++] = pl->v[i];
	}
	free(zeros);
	return ret;
}

static int plan_record(struct promote_plan *pl, char *name, uint8_t *rec, size_t len)
{
	if (!name) {
		free(rec);
		return -ENOMEM;
	}
	pl->names[pl->nrec] = name;
	pl->recs[pl->nrec] = rec;
	pl->lens[pl->nrec] = len;
	pl->nrec++;
	return 0;
}

struct promote_ctx {
	struct snap_op op;
	int added;
};

static int promote_close(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct promote_ctx *c = arg;
	int ret;

	(void)txg;
	ret = snap_enlist(p, &c->op, 1);
	if (ret == 0)
		c->added = 1;
	return ret;
}

/* C's sealers once it holds D's records born by S's txg: D's (then D's
 * GUID) up to S's txg, C's own sealers after it. */
static struct sealer *sealers_for(const struct stor_ds *C, const struct stor_ds *D,
				  const struct snap *S, size_t *n)
{
	struct sealer *v = calloc(D->nsealers + C->nsealers + 1, sizeof(*v));
	size_t k = 0;

	if (!v)
		return NULL;
	for (size_t i = 0; i < D->nsealers && D->sealers[i].upto < S->txg; i++)
		v[k++] = D->sealers[i];
	v[k++] = (struct sealer){ S->txg, ds_sealer(D, S->txg) };
	for (size_t i = 0; i < C->nsealers; i++)
		if (C->sealers[i].upto > S->txg)
			v[k++] = C->sealers[i];
	*n = k;
	return v;
}

static int promote_checks(struct stor_pool *p, struct stor_ds *C, struct stor_ds *D, size_t n)
{
	size_t cn = strlen(C->name);

	(void)p;
	if (atomic_load(&C->refs) > 0 || atomic_load(&D->refs) > 0) {
		pool_set_error("%s: it or its origin %s is open", C->name, D->name);
		return -EBUSY;
	}
	for (size_t i = 0; i < D->nsnaps; i++) {
		struct snap *s = D->snaps[i];

		if (s->dying || atomic_load(&s->refs) > 0) {
			pool_set_error("%s: snapshot is open or being destroyed", s->name);
			return -EBUSY;
		}
		for (size_t j = 0; i < n && j < C->nsnaps; j++)
			if (!strcmp(C->snaps[j]->name + cn, strchr(s->name, '@'))) {
				pool_set_error("%s exists: %s cannot take %s", C->snaps[j]->name,
					       C->name, s->name);
				return -EEXIST;
			}
	}
	if (D->suite && (!atomic_load(&D->keys) || !atomic_load(&C->keys))) {
		pool_set_error("%s: the key is not loaded; load it to promote", C->name);
		return STOR_ENOKEY;
	}
	return 0;
}

int stor_ds_promote(struct stor_pool *p, const char *name)
{
	struct promote_ctx c = { .op = { .kind = SNAP_OP_PROMOTE } };
	struct promote_plan *pl = NULL;
	struct sealer *sealers = NULL, *old_sealers = NULL;
	struct stor_ds *C, *D;
	char **newnames = NULL;
	struct snap *S = NULL, *O;
	size_t at = 0, n = 0, nsealers = 0, old_n;
	int ret = 0;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	C = ds_find_locked(p, name);
	if (!C) {
		ret = -ENOENT;
		goto out;
	}
	S = C->origin;
	if (!S) {
		pool_set_error("%s: not a clone (its origin is -)", name);
		ret = -EINVAL;
		goto out;
	}
	D = S->ds;
	while (D->snaps[at] != S)
		at++;
	n = at + 1;
	ret = promote_checks(p, C, D, n);
	if (ret == 0)
		ret = txg_sync(p, 0); /* what D and C staged is in the tables */
	pl = ret == 0 ? calloc(1, sizeof(*pl)) : NULL;
	newnames = ret == 0 ? calloc(n, sizeof(*newnames)) : NULL;
	if (ret == 0 && (!pl || !newnames))
		ret = -ENOMEM;
	if (ret == 0)
		ret = plan_moves(p, pl, C, D, at);
	if (ret == 0)
		ret = txg_sync(p, 0); /* the zeros D got */
	if (ret < 0)
		goto out;
	pl->names = calloc(2 * n + 2, sizeof(*pl->names));
	pl->recs = calloc(2 * n + 2, sizeof(*pl->recs));
	pl->lens = calloc(2 * n + 2, sizeof(*pl->lens));
	sealers = sealers_for(C, D, S, &nsealers);
	if (!pl->names || !pl->recs || !pl->lens || !sealers) {
		ret = -ENOMEM;
		goto out;
	}
	/* the snapshots' records under their new names, C's and D's records */
	for (size_t i = 0; i < n && ret == 0; i++) {
		uint8_t *rec = malloc(SNAP_RECORD_MAX);
		char *nn = NULL;
		int len = rec ? snap_record_for(D->snaps[i], C, &nn, rec) : -ENOMEM;

		if (len < 0 || !(newnames[i] = strdup(nn))) {
			free(rec);
			free(nn);
			ret = -ENOMEM;
			break;
		}
		ret = plan_record(pl, strdup(D->snaps[i]->name), NULL, 0);
		if (ret == 0)
			ret = plan_record(pl, nn, rec, (size_t)len);
	}
	if (ret < 0)
		goto out;
	O = D->origin;
	old_sealers = C->sealers;
	old_n = C->nsealers;
	/* before the commit: no reader sees a record born by S in C's tables
	 * before C's sealers name who sealed it */
	C->sealers = sealers;
	C->nsealers = nsealers;
	sealers = NULL;
	C->origin_id = O ? O->id : 0;
	D->origin_id = S->id;
	for (int i = 0; i < 2 && ret == 0; i++) {
		struct stor_ds *x = i ? D : C;
		uint8_t *rec = NULL;
		size_t len = 0;

		ret = ds_record(x, &rec, &len);
		if (ret == 0)
			ret = plan_record(pl, strdup(x->name), rec, len);
	}
	if (ret == 0) {
		c.op.promote = pl;
		ret = txg_sync_close(p, promote_close, &c);
	}
	if (!c.added) {
		sealers = C->sealers; /* freed below */
		C->sealers = old_sealers;
		C->nsealers = old_n;
		C->origin_id = S->id;
		D->origin_id = O ? O->id : 0;
		goto out;
	}
	pl = NULL; /* the stage's now, whether its commit failed (retried) or not */
	if (ret < 0)
		/* the commit is retried with the stage, promote and all: the
		 * caller must not take the error for "nothing changed" */
		pool_set_error("%s: promoted, but its commit failed (%s): the promote is applied "
			       "with the next commit that succeeds",
			       name, stor_strerror(ret));
	txg_read_synchronize(p);
	free(old_sealers);

	/* in memory: S and the older ones are C's, D is S's clone */
	pthread_mutex_lock(&p->snap_lock);
	{
		struct snap **a = realloc(C->snaps, (C->nsnaps + n) * sizeof(*a));

		if (a) {
			C->snaps = a;
			C->capsnaps = C->nsnaps + n;
			memmove(C->snaps + n, C->snaps, C->nsnaps * sizeof(*a));
			memcpy(C->snaps, D->snaps, n * sizeof(*a));
			C->nsnaps += n;
			memmove(D->snaps, D->snaps + n, (D->nsnaps - n) * sizeof(*a));
			D->nsnaps -= n;
			for (size_t i = 0; i < n; i++) {
				C->snaps[i]->ds = C;
				free(C->snaps[i]->name);
				C->snaps[i]->name = newnames[i];
				newnames[i] = NULL;
			}
			C->origin = O;
			D->origin = S;
			D->keep = D->nsnaps ? D->snaps[D->nsnaps - 1] : NULL;
			C->keep = C->snaps[C->nsnaps - 1];
		} else {
			ret = -ENOMEM; /* the records are right: the next import has it */
		}
	}
	pthread_mutex_unlock(&p->snap_lock);
	snap_recount_space(p, C);
	snap_recount_space(p, D);
	space_sync_locked(p);
out:
	pthread_mutex_unlock(&p->admin);
	clone_plan_free(pl);
	free(sealers);
	for (size_t i = 0; newnames && i < n; i++)
		free(newnames[i]);
	free(newnames);
	return ret;
}
