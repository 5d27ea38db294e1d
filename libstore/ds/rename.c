/* SPDX-License-Identifier: MIT */
/*
 * Rename (zfs rename): a dataset with its descendants and every snapshot of
 * them, or a snapshot (with -r, the snapshot of that name of every
 * descendant too), within one pool.
 *
 * Where a name is stored: only in the keys of the dataset and snapshot
 * records (META_DS "pool/a/b", "pool/a/b@s"). Block pointers, MAC trees,
 * lists of encrypted children and receive marks are keyed by dataset id; a
 * clone names its origin by the id of its table; the key file by GUID and
 * root id; AADs and MAC keys bind GUIDs, never names. So a rename moves
 * records to new keys and nothing it reads or verifies changes. All of
 * them move in one commit, a txg_task of a txg_sync_close(): one LMDB
 * transaction, whose ops the txg's log record takes to the LUNs before it
 * commits, so a crash leaves the old names or the new ones, an import from
 * the LUNs alone finds the new ones, and the rename is durable when it
 * returns.
 *
 * What a name also decides, by the parent it gives:
 * - inherited properties come from the new parent (as in zfs);
 * - the top dataset leaves its old parent's list of encrypted children and
 *   joins the new parent's (children.c), each under that parent's key;
 * - encryption roots: the members of a root are the encrypted datasets
 *   below it by name (change-key rewraps those, a clone must sit below its
 *   origin's root), so a dataset whose key is inherited may not leave its
 *   encryption root; and a clear dataset may not go below an encrypted one
 *   (the import refuses that, dataset.c's check_crypto). An encryption root
 *   moves anywhere; below an encrypted parent it stays a root of its own.
 * Refused as busy: a dataset or snapshot that is open (handles, NBD
 * exports, a send's chunk in progress), one being received, or one whose
 * destroy is not committed yet. A scrub walks by id and holds nothing.
 * Everything is checked before anything changes; with -p the missing
 * parents are created only once the rename is known to be allowed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/crypt.h"
#include "ds/children.h"
#include "ds/dataset.h"
#include "ds/snapnames.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/bpmac.h"
#include "txg/txg.h"

/* One record under a new key: @from goes, @rec goes under @to. */
struct move_rec {
	char *from, *to;
	uint8_t *rec;
	size_t len;
};

/* What one rename commits: a txg_task's argument, the stage's once enlisted. */
struct rn_plan {
	struct move_rec *v;
	size_t n, cap;
	/* the top dataset leaves one list of encrypted children and joins
	 * another (mk NULL: no list to change) */
	struct kids_join leave, join;
};

/* A name to set in memory once the plan is enlisted: @s's, or else @ds's. */
struct rn_mem {
	struct stor_ds *ds;
	struct snap *s;
	char *name;
};

struct rn {
	struct rn_plan *pl;
	struct rn_mem *mem;
	size_t nmem;
	int added;
};

static void plan_free(void *arg)
{
	struct rn_plan *pl = arg;

	if (!pl)
		return;
	for (size_t i = 0; i < pl->n; i++) {
		free(pl->v[i].from);
		free(pl->v[i].to);
		free(pl->v[i].rec);
	}
	free(pl->v);
	mac_key_put(pl->leave.mk);
	mac_key_put(pl->join.mk);
	free(pl);
}

static void rn_free(struct rn *r)
{
	if (!r->added)
		plan_free(r->pl);
	r->pl = NULL;
	for (size_t i = 0; i < r->nmem; i++)
		free(r->mem[i].name);
	free(r->mem);
	r->mem = NULL;
	r->nmem = 0;
}

/* A list change in the commit: one that does not verify was refused before
 * planning; should it fail now, the list stays as it was and its parent's
 * load-key says so, never a failed commit (the snapshot create's rule). */
static int list_change(struct meta_txn *t, const struct kids_join *j, int add)
{
	int ret;

	if (!j->mk)
		return 0;
	ret = children_change(t, j->parent_id, j->mk, j->guid, j->suite, add);
	return ret == STOR_EAUTH ? 0 : ret;
}

static int plan_commit(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage)
{
	struct rn_plan *pl = arg;
	int ret = 0;

	(void)free_extent;
	(void)stage;
	/* every old key first, then the new ones: no new name is an old one
	 * (the target does not exist), and the order would keep that so */
	for (size_t i = 0; i < pl->n && ret == 0; i++) {
		ret = meta_del(t, META_DS, pl->v[i].from, strlen(pl->v[i].from));
		if (ret == -ENOENT)
			ret = 0;
	}
	for (size_t i = 0; i < pl->n && ret == 0; i++)
		ret = meta_put(t, META_DS, pl->v[i].to, strlen(pl->v[i].to), pl->v[i].rec,
			       pl->v[i].len);
	if (ret == 0)
		ret = list_change(t, &pl->leave, 0);
	if (ret == 0)
		ret = list_change(t, &pl->join, 1);
	return ret;
}

static int rename_close(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct rn *r = arg;
	struct txg_task task = { plan_commit, plan_free, r->pl };
	int ret;

	(void)txg;
	ret = txg_enlist(p, &task);
	if (ret == 0)
		r->added = 1;
	return ret;
}

/* Put @from's record @rec (taken) under @to, and note @to for memory. */
static int plan_add(struct rn *r, size_t cap, struct stor_ds *ds, struct snap *s, const char *from,
		    const char *to, uint8_t *rec, size_t len)
{
	struct rn_plan *pl = r->pl;
	struct move_rec *m;

	if (!pl->v && !(pl->v = calloc(cap, sizeof(*pl->v))))
		goto nomem;
	if (!r->mem && !(r->mem = calloc(cap, sizeof(*r->mem))))
		goto nomem;
	if (STOR_FAILS_ASSERT(pl->n < cap))
		goto nomem;
	m = &pl->v[pl->n];
	m->from = strdup(from);
	m->to = strdup(to);
	r->mem[r->nmem].name = strdup(to);
	if (!m->from || !m->to || !r->mem[r->nmem].name) {
		free(m->from);
		free(m->to);
		free(r->mem[r->nmem].name);
		r->mem[r->nmem].name = NULL;
		goto nomem;
	}
	m->rec = rec;
	m->len = len;
	pl->n++;
	r->mem[r->nmem].ds = ds;
	r->mem[r->nmem].s = s;
	r->nmem++;
	return 0;
nomem:
	free(rec);
	return -ENOMEM;
}

/* The names in memory, once the plan is the stage's (committed, or retried
 * with the next commit: either way the records will say the new names). */
static void apply_names(struct stor_pool *p, struct rn *r)
{
	pthread_mutex_lock(&p->snap_lock);
	for (size_t i = 0; i < r->nmem; i++) {
		char **slot = r->mem[i].s ? &r->mem[i].s->name : &r->mem[i].ds->name;

		if (r->mem[i].s)
			snap_names_stale(r->mem[i].s->ds);

		free(*slot);
		*slot = r->mem[i].name;
		r->mem[i].name = NULL;
	}
	pthread_mutex_unlock(&p->snap_lock);
}

/* Commit the plan of @r; @what names the rename in the error of a commit
 * that failed after the plan was enlisted (it is retried, not dropped). */
static int run(struct stor_pool *p, struct rn *r, const char *what)
{
	int ret = txg_sync_close(p, rename_close, r);

	if (!r->added)
		return ret;
	apply_names(p, r);
	if (ret < 0)
		pool_set_error("%s: renamed, but its commit failed (%s): the rename is applied "
			       "with the next commit that succeeds",
			       what, stor_strerror(ret));
	return ret;
}

/* Is @name @top or below it? */
static int at_or_below(const char *name, const char *top)
{
	size_t n = strlen(top);

	return !strncmp(name, top, n) && (name[n] == '\0' || name[n] == '/');
}

/* What keeps @ds from being renamed now (its snapshots too): -EBUSY with
 * the reason, or 0. */
static int busy(struct stor_ds *ds)
{
	if (atomic_load(&ds->receiving) || ds->unlisted) {
		pool_set_error("%s is being received; rename it once the receive has ended",
			       ds->name);
		return -EBUSY;
	}
	for (size_t i = 0; i < ds->nsnaps; i++) {
		struct snap *s = ds->snaps[i];

		if (s->dying) {
			pool_set_error("the destroy of %s is not committed yet; rename %s after the "
				       "next commit",
				       s->name, ds->name);
			return -EBUSY;
		}
		if (atomic_load(&s->refs) > 0) {
			pool_set_error("%s is open (%d handles); close it, or end its send, first",
				       s->name, atomic_load(&s->refs));
			return -EBUSY;
		}
	}
	if (atomic_load(&ds->refs) > 0) {
		pool_set_error("%s is open (%d handles); close it first", ds->name,
			       atomic_load(&ds->refs));
		return -EBUSY;
	}
	return 0;
}

/* The parent name of @name into @buf; 0 if it has none. */
static int parent_name(const char *name, char buf[STOR_NAME_MAX + 1])
{
	const char *slash = strrchr(name, '/');
	size_t n = slash ? (size_t)(slash - name) : 0;

	if (!slash || n > STOR_NAME_MAX)
		return 0;
	memmove(buf, name, n); /* @buf may be @name */
	buf[n] = '\0';
	return 1;
}

/*
 * The encryption rules (head comment) for moving @S, and the datasets
 * below it (@M, @nm), to @to, whose nearest existing ancestor is @A (its
 * parent, or the one -p creates the missing parents under, which they
 * would inherit from). @return 0, or -EINVAL with the reason.
 */
static int check_crypto_move(struct stor_pool *p, struct stor_ds *S, struct stor_ds *const *M,
			     size_t nm, const char *to, struct stor_ds *A)
{
	size_t flen = strlen(S->name);

	if (!S->suite && A->suite) {
		pool_set_error("%s is not encrypted and %s is: a clear dataset may not go below an "
			       "encrypted one (its writes would look encrypted and be clear); "
			       "send it into an encrypted dataset instead",
			       S->name, A->name);
		return -EINVAL;
	}
	for (size_t i = 0; i < nm; i++) {
		struct stor_ds *d = M[i], *r;
		char newname[STOR_NAME_MAX + 1];

		if (!d->suite || d->enc_root_id == d->id)
			continue;
		r = ds_find_id_locked(p, d->enc_root_id);
		if (!r || at_or_below(r->name, S->name))
			continue; /* its root moves with it */
		snprintf(newname, sizeof(newname), "%s%s", to, d->name + flen);
		if (!at_or_below(newname, r->name) || !strcmp(newname, r->name)) {
			pool_set_error("%s inherits its key from its encryption root %s and may not "
				       "leave it: rename it to a name below %s, or make it an "
				       "encryption root first (change-key -o keyformat=... %s)",
				       d->name, r->name, r->name, d->name);
			return -EINVAL;
		}
	}
	return 0;
}

/* The key of encrypted parent @pa, for the list @S leaves or joins. */
static int list_key(struct stor_ds *pa, struct stor_ds *S, int joins, struct kids_join *j)
{
	struct ds_keys *k;

	memset(j, 0, sizeof(*j));
	if (!S->suite || !pa->suite)
		return 0;
	k = atomic_load(&pa->keys);
	if (!k) {
		pool_set_error("%s: the key of %s is not loaded, and it authenticates the list of "
			       "its encrypted children, which %s would %s (load the key of its "
			       "encryption root first)",
			       S->name, pa->name, S->name, joins ? "join" : "leave");
		return STOR_ENOKEY;
	}
	*j = (struct kids_join){ .parent_id = pa->id, .guid = S->guid, .suite = (unsigned)S->suite,
				 .mk = mac_key_ref(k->mac) };
	return 0;
}

/* Does the list change of @j verify now? A scratch transaction, aborted. */
static int list_verifies(struct stor_pool *p, const struct kids_join *j, int add, const char *pname)
{
	struct meta_txn *t = NULL;
	int ret;

	if (!j->mk)
		return 0;
	ret = meta_txn_begin(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = children_change(t, j->parent_id, j->mk, j->guid, j->suite, add);
	meta_txn_abort(t);
	if (ret == STOR_EAUTH)
		pool_set_error("the list of encrypted children of %s does not verify: a child was "
			       "removed, added or made clear without its key; nothing was renamed",
			       pname);
	return ret;
}

/* create -p's parents of @to below its nearest existing ancestor, top first. */
static int make_parents(struct stor_pool *p, const char *to)
{
	static const char *const sparse[] = { "refreservation=none" };
	const struct stor_ds_opts o = { .props = sparse, .nprops = 1 };
	char part[STOR_NAME_MAX + 1];
	int ret = 0;

	for (const char *s = strchr(to, '/'); s && ret == 0; s = strchr(s + 1, '/')) {
		snprintf(part, sizeof(part), "%.*s", (int)(s - to), to);
		if (!ds_find_locked(p, part))
			ret = ds_create_locked(p, part, &o, NULL, NULL);
	}
	if (ret < 0 && !pool_error_set())
		pool_set_error("creating the parent %s: %s", part, stor_strerror(ret));
	return ret;
}

static int rename_ds_locked(struct stor_pool *p, const char *from, const char *to, unsigned flags)
{
	struct stor_ds *S = ds_find_locked(p, from), *P1 = NULL, *P2, *A = NULL, **M = NULL;
	struct kids_join leave = { 0 }, join = { 0 };
	size_t flen = strlen(from), plen = strlen(p->name), nm = 0, nrec = 0;
	char buf[STOR_NAME_MAX + 1], *enc_set = NULL;
	struct rn r = { 0 };
	int ret;

	STOR_ASSERT_HELD(&p->admin);

	if (!S) {
		pool_set_error("%s: no such dataset", from);
		return -ENOENT;
	}
	if (!strcmp(from, p->name)) {
		pool_set_error("%s is the pool's root dataset, which has the pool's name: rename "
			       "the pool instead (pool export, then pool import %s NEWNAME)",
			       from, from);
		return -EBUSY;
	}
	if (flags & STOR_RECURSIVE) {
		pool_set_error("-r renames snapshots (DATASET@SNAP); a dataset's descendants "
			       "follow it anyway");
		return -EINVAL;
	}
	if (strchr(to, '@') || stor_name_check(to, STOR_NAME_DATASET) < 0) {
		pool_set_error("'%.300s' is no dataset name (POOL/NAME, no '@')", to);
		return STOR_EBADNAME;
	}
	if (strncmp(to, p->name, plen) || (to[plen] != '/' && to[plen] != '\0')) {
		pool_set_error("%s is not in pool %s: a rename stays in its pool (send and receive "
			       "copy to another)",
			       to, p->name);
		return -EXDEV;
	}
	if (ds_find_locked(p, to)) {
		pool_set_error("%s exists; destroy it or choose another name", to);
		return -EEXIST;
	}
	if (at_or_below(to, from)) {
		pool_set_error("%s is below %s: a dataset cannot move below itself", to, from);
		return -EINVAL;
	}
	if (txg_name_gone(p, to)) {
		pool_set_error("%s is being destroyed; rename to it after the next commit", to);
		return -EBUSY;
	}
	/* the nearest existing ancestor of the target */
	snprintf(buf, sizeof(buf), "%s", to);
	while (!A && parent_name(buf, buf))
		A = ds_find_locked(p, buf);
	if (STOR_FAILS_ASSERT(A != NULL)) /* the root exists */
		return -ENOENT;
	parent_name(to, buf);
	if (strcmp(A->name, buf) && !(flags & STOR_RENAME_PARENTS)) {
		pool_set_error("the parent %s of %s does not exist; create it, or give -p", buf, to);
		return -ENOENT;
	}
	parent_name(from, buf);
	P1 = ds_find_locked(p, buf);
	if (STOR_FAILS_ASSERT(P1 != NULL))
		return -ENOENT;

	/* S and its descendants: they sort together, right after S */
	M = calloc(p->nds + 1, sizeof(*M));
	if (!M)
		return -ENOMEM;
	ret = 0;
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct stor_ds *d = p->ds[i];

		if (at_or_below(d->name, from)) {
			M[nm++] = d;
			nrec += 1 + d->nsnaps;
			if (strlen(to) + strlen(d->name) - flen > STOR_NAME_MAX)
				ret = STOR_EBADNAME;
			for (size_t k = 0; k < d->nsnaps && ret == 0; k++)
				if (strlen(to) + strlen(d->snaps[k]->name) - flen > STOR_NAME_MAX)
					ret = STOR_EBADNAME;
			if (ret < 0)
				pool_set_error("%s: a name below it would be longer than %d bytes "
					       "under %s",
					       from, STOR_NAME_MAX, to);
			if (ret == 0)
				ret = busy(d);
		} else if (atomic_load(&d->receiving) && !strncmp(d->name, from, flen) &&
			   !strncmp(d->name + flen, "-recv-", 6)) {
			/* receive -F over it: the stream takes its name at the end */
			pool_set_error("%s is being replaced by a receive (-F into %s); rename it "
				       "once the receive has ended",
				       from, from);
			ret = -EBUSY;
		}
	}
	if (ret == 0)
		ret = check_crypto_move(p, S, M, nm, to, A);
	/* the lists of encrypted children it leaves and joins: a parent -p
	 * creates (P2 NULL) is encrypted as A is, under A's root's key */
	parent_name(to, buf);
	P2 = ds_find_locked(p, buf);
	if (ret == 0 && P2 != P1) {
		ret = list_key(P1, S, 0, &leave);
		if (ret == 0)
			ret = list_key(P2 ? P2 : A, S, 1, &join);
		if (ret == 0)
			ret = list_verifies(p, &leave, 0, P1->name);
		if (ret == 0 && P2)
			ret = list_verifies(p, &join, 1, P2->name);
	}
	mac_key_put(join.mk); /* taken again below, of the parent it gets */
	join.mk = NULL;
	if (ret < 0)
		goto out;

	/* allowed: the parents first (-p) */
	if (flags & STOR_RENAME_PARENTS) {
		ret = make_parents(p, to);
		if (ret < 0)
			goto out;
	}
	parent_name(to, buf);
	P2 = ds_find_locked(p, buf);
	if (STOR_FAILS_ASSERT(P2 != NULL)) {
		ret = -ENOENT;
		goto out;
	}
	if (P2 != P1) {
		ret = list_key(P2, S, 1, &join);
		if (ret < 0)
			goto out;
	} else {
		mac_key_put(leave.mk);
		leave.mk = NULL;
	}
	/* an encrypted dataset that showed its suite by inheritance keeps
	 * showing it below a parent of another suite */
	if (S->suite && !S->local[PROP_ENCRYPTION] && P2->suite != S->suite) {
		enc_set = strdup(crypt_suite_name((enum crypt_suite)S->suite));
		if (!enc_set) {
			ret = -ENOMEM;
			goto out;
		}
		S->local[PROP_ENCRYPTION] = enc_set;
	}

	r.pl = calloc(1, sizeof(*r.pl));
	if (!r.pl) {
		ret = -ENOMEM;
		goto out;
	}
	r.pl->leave = leave;
	r.pl->join = join;
	leave.mk = join.mk = NULL;
	for (size_t i = 0; i < nm && ret == 0; i++) {
		struct stor_ds *d = M[i];
		uint8_t *rec = NULL;
		size_t len = 0;

		snprintf(buf, sizeof(buf), "%s%s", to, d->name + flen);
		ret = ds_record(d, &rec, &len);
		if (ret == 0)
			ret = plan_add(&r, nrec, d, NULL, d->name, buf, rec, len);
		for (size_t k = 0; k < d->nsnaps && ret == 0; k++) {
			struct snap *s = d->snaps[k];
			char sname[STOR_NAME_MAX + 2];

			rec = malloc(SNAP_RECORD_MAX);
			if (!rec) {
				ret = -ENOMEM;
				break;
			}
			snprintf(sname, sizeof(sname), "%s%s", to, s->name + flen);
			ret = plan_add(&r, nrec, d, s, s->name, sname, rec,
				       (size_t)snap_record(s, rec));
		}
	}
	if (ret == 0)
		ret = run(p, &r, from);
	if (r.added) {
		enc_set = NULL; /* in the record now */
		ds_table_renamed_locked(p, S);
		space_sync_locked(p);
	}
out:
	if (enc_set) {
		S->local[PROP_ENCRYPTION] = NULL;
		free(enc_set);
	}
	mac_key_put(leave.mk);
	mac_key_put(join.mk);
	rn_free(&r);
	free(M);
	return ret;
}

static int rename_snap_locked(struct stor_pool *p, const char *from, const char *to,
			      unsigned flags)
{
	char dsname[STOR_NAME_MAX + 1], newname[STOR_NAME_MAX + 2];
	const char *at = strchr(from, '@'), *snap = at + 1, *newsnap = strchr(to, '@');
	size_t dlen = (size_t)(at - from), nrec = 0;
	struct stor_ds *ds;
	struct rn r = { 0 };
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);

	if (flags & STOR_RENAME_PARENTS) {
		pool_set_error("-p creates parents of a dataset; a snapshot keeps its dataset");
		return -EINVAL;
	}
	if (stor_name_check(from, STOR_NAME_SNAPSHOT) < 0 || strpbrk(from, "%,")) {
		pool_set_error("'%.300s' is no snapshot name (DATASET@NAME)", from);
		return STOR_EBADNAME;
	}
	if (!newsnap) {
		pool_set_error("a snapshot is renamed to DATASET@NAME (or @NAME), not to %.300s",
			       to);
		return STOR_EBADNAME;
	}
	newsnap++;
	if (newsnap - 1 != to && ((size_t)(newsnap - 1 - to) != dlen || strncmp(to, from, dlen))) {
		pool_set_error("%s: a snapshot stays with its dataset: rename it to %.*s@NAME, or "
			       "rename its dataset to move it",
			       from, (int)dlen, from);
		return -EXDEV;
	}
	snprintf(dsname, sizeof(dsname), "%.*s", (int)dlen, from);
	if ((size_t)snprintf(newname, sizeof(newname), "%s@%s", dsname, newsnap) > STOR_NAME_MAX ||
	    stor_name_check(newname, STOR_NAME_SNAPSHOT) < 0 || strpbrk(newsnap, "%,")) {
		pool_set_error("'%.300s' is no snapshot name (DATASET@NAME)", newname);
		return STOR_EBADNAME;
	}
	ds = ds_find_locked(p, dsname);
	if (!ds) {
		pool_set_error("%s: no such dataset", dsname);
		return -ENOENT;
	}
	if (!snap_find_locked(p, from)) {
		pool_set_error("%s: no such snapshot", from);
		return -ENOENT;
	}
	if (!strcmp(snap, newsnap))
		return 0; /* zfs too: nothing to do */
	/* the set: the dataset, with -r each descendant that has the snapshot */
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct stor_ds *d = p->ds[i];
		char n[STOR_NAME_MAX + 2];
		struct snap *s;

		if (d != ds && !((flags & STOR_RECURSIVE) && at_or_below(d->name, dsname)))
			continue;
		snprintf(n, sizeof(n), "%s@%s", d->name, snap);
		s = snap_find_locked(p, n);
		if (!s)
			continue;
		nrec++;
		if ((size_t)snprintf(n, sizeof(n), "%s@%s", d->name, newsnap) > STOR_NAME_MAX) {
			pool_set_error("%s@%s: longer than %d bytes", d->name, newsnap,
				       STOR_NAME_MAX);
			ret = STOR_EBADNAME;
		} else if (snap_find_locked(p, n)) {
			pool_set_error("%s exists; destroy it or choose another name", n);
			ret = -EEXIST;
		} else if (atomic_load(&d->receiving)) {
			pool_set_error("%s is being received; rename its snapshots once the receive "
				       "has ended",
				       d->name);
			ret = -EBUSY;
		} else if (atomic_load(&s->refs) > 0) {
			pool_set_error("%s is open (%d handles); close it, or end its send, first",
				       s->name, atomic_load(&s->refs));
			ret = -EBUSY;
		}
	}
	if (ret < 0)
		return ret;
	r.pl = calloc(1, sizeof(*r.pl));
	if (!r.pl)
		return -ENOMEM;
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct stor_ds *d = p->ds[i];
		char n[STOR_NAME_MAX + 2];
		struct snap *s;
		uint8_t *rec;

		if (d != ds && !((flags & STOR_RECURSIVE) && at_or_below(d->name, dsname)))
			continue;
		snprintf(n, sizeof(n), "%s@%s", d->name, snap);
		s = snap_find_locked(p, n);
		if (!s)
			continue;
		rec = malloc(SNAP_RECORD_MAX);
		if (!rec) {
			ret = -ENOMEM;
			break;
		}
		snprintf(n, sizeof(n), "%s@%s", d->name, newsnap);
		ret = plan_add(&r, nrec, d, s, s->name, n, rec, (size_t)snap_record(s, rec));
	}
	if (ret == 0)
		ret = run(p, &r, from);
	rn_free(&r);
	return ret;
}

int stor_ds_rename(struct stor_pool *p, const char *from, const char *to, unsigned flags)
{
	int ret;

	pool_clear_error();
	if (!from || !to)
		return -EINVAL;
	pthread_mutex_lock(&p->admin);
	ret = strchr(from, '@') ? rename_snap_locked(p, from, to, flags)
				: rename_ds_locked(p, from, to, flags);
	pthread_mutex_unlock(&p->admin);
	return ret;
}
