/* SPDX-License-Identifier: MIT */
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
 *
 * Here, above the record pipeline, because the zeros are written through
 * it (stor_ds_write); the commit of a plan is ds/clone.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/snapnames.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "ds/rekey.h"
#include "io/record.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/txg.h"

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

	STOR_ASSERT_HELD(&p->admin);

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

	STOR_ASSERT_HELD(&p->admin);

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

	STOR_ASSERT_HELD(&p->admin);

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

	STOR_ASSERT_HELD(&p->admin);

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
	/* the rekey walks the tables each had when it started */
	if (rekey_under_way(C) || rekey_under_way(D)) {
		rekey_busy_error(rekey_under_way(C) ? C : D, "promote it");
		return -EBUSY;
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
			snap_names_stale(C);
			snap_names_stale(D);
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
