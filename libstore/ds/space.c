/* SPDX-License-Identifier: MIT */
/*
 * Space accounting: reservations, slop space, and what a write may take.
 *
 * The allocator (alloc.c) knows free sectors; this file knows who may use
 * them. A dataset's refreservation guarantees room for its own data, its
 * reservation room for it and its descendants, as ZFS has them. Per dataset
 * (own = bytes its block pointers reference, charged at allocation; snaps =
 * bytes only its snapshots hold, snapshot.c):
 *   rr     = max(0, refreservation - own)          usedbyrefreservation
 *   tree   = own + snaps + rr + sum of charged(children)   used
 *   charged = max(tree, reservation)               what its parent counts
 *   head   = max(0, reservation - tree)            reservation not yet used
 * U, the space promised and not yet used, is the sum of rr + head over all
 * datasets. The invariant every write of new data keeps:
 *   free >= slop + U
 * so nobody's writes eat another's reservation, and slop (space.c's
 * space_slop) stays free for what must succeed on a full pool: overwrites
 * of existing records (which need a new extent before the old one is freed
 * by the commit), and the allocations of txg commits. An overwrite whose
 * new extent is no larger than the old one only needs free >= U.
 *
 * The slop is not the allocator's metadata reserve (alloc.c), though both
 * keep room for a full pool: the slop is counted over the pool, and lets
 * overwrites through; the reserve is kept on every LUN, because a txg's log
 * record goes in copies on different LUNs, which free space counted over
 * the pool (possibly all on one LUN) cannot promise.
 *
 * A thick volume's refreservation holds a share for its block pointers in
 * the metadata log (space_auto_refres), which no write charges to its
 * own: the log's sectors beyond the reserves, which pool_bytes() counts
 * as used, are that promised metadata used, and U is less by as much of
 * them as the shares in the rr of datasets cover. Counted in U as well,
 * they would be taken twice, and a volume's own log would eat the room
 * promised to its data: a pool promised in full refused the last writes
 * of its thick volumes as soon as the log outgrew the reserves.
 *
 * The log frees a destroyed dataset's pointers only when a checkpoint
 * written after the destroy's commit is done (metalog.c): until then the
 * checkpoint before holds them, and the log its deletes. So the shares of
 * destroyed datasets stay in U (sp_gone) until metalog_checkpoints()
 * counts such a checkpoint; otherwise the volumes made in their place are
 * promised room the log still holds, and their writes find none. A
 * promise that finds no room while sp_gone holds some asks for that
 * checkpoint (space_promise_locked).
 *
 * The check runs after the allocation and the charge (lock-free fast path
 * against the sum of all reservations, an upper bound of U; the exact U
 * under space_lock only when that fails), so two writers racing for the
 * last space may both be refused but never both admitted. The admin lock
 * is never taken here: admin calls hold it across commits that wait for
 * writers. Lock order: admin, then space_lock.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "ds/dataset.h"
#include "ds/props.h"
#include "ds/space.h"
#include "pool_impl.h"
#include "txg/metalog.h"
#include "txg/txg.h"

#define SLOP_MIN (2ull << 20)   /* a few txgs of overwrites on a tiny pool */
#define SLOP_MAX (128ull << 30) /* ZFS's cap */

uint64_t space_slop(uint64_t size)
{
	uint64_t s = size / 32;

	if (s < SLOP_MIN)
		s = SLOP_MIN;
	if (s > size / 2)
		s = size / 2;
	return s > SLOP_MAX ? SLOP_MAX : s;
}

void space_init(struct stor_pool *p)
{
	pthread_mutex_init(&p->space_lock, NULL);
}

void space_fini(struct stor_pool *p)
{
	pthread_mutex_destroy(&p->space_lock);
	free(p->sp_ds);
	free(p->sp_parent);
	free(p->sp_tree);
}

/*
 * A thick volume's refreservation: its data in whole sectors (a 512-byte
 * record takes 4 KiB), and the metadata its records will need on the LUNs
 * (metalog_space_for: each block pointer and its share of a MAC row, in
 * every copy of a checkpoint and of the log that may follow it before the
 * next), as ZFS's counts a volume's indirect blocks, so that writing all
 * of the volume never finds its log out of room.
 */
static uint64_t auto_meta(uint64_t volsize, uint32_t recsize)
{
	uint64_t meta = metalog_space_for(volsize / recsize);

	return (meta + STOR_SECTOR - 1) / STOR_SECTOR * STOR_SECTOR;
}

uint64_t space_auto_refres(uint64_t volsize, uint32_t recsize)
{
	uint64_t per = (recsize + STOR_SECTOR - 1) / STOR_SECTOR * STOR_SECTOR;

	if (!recsize)
		return 0;
	return volsize / recsize * per + auto_meta(volsize, recsize);
}

/* The metadata share in a refreservation of @refres: space_auto_refres()'s,
 * if @refres is at least that */
static uint64_t share_of(uint64_t vol, uint32_t recsize, uint64_t refres)
{
	if (!recsize || !vol || refres < space_auto_refres(vol, recsize))
		return 0;
	return auto_meta(vol, recsize);
}

static uint64_t meta_share(const struct stor_ds *ds)
{
	return share_of(atomic_load(&ds->volsize), ds->recsize, atomic_load(&ds->refres));
}

/* meta_share(), worked out again only when its volsize or refreservation
 * changed: compute_locked() asks for every dataset's at every check that
 * the lock-free bound fails, and its divisions were half of that */
static uint64_t meta_share_locked(struct stor_pool *p, struct stor_ds *ds)
{
	uint64_t vol = atomic_load(&ds->volsize), refres = atomic_load(&ds->refres);

	STOR_ASSERT_HELD(&p->space_lock);
	if (vol != ds->sp_share_vol || refres != ds->sp_share_refres) {
		ds->sp_share = share_of(vol, ds->recsize, refres);
		ds->sp_share_vol = vol;
		ds->sp_share_refres = refres;
	}
	return ds->sp_share;
}

void space_props_locked(struct stor_pool *p, struct stor_ds *ds)
{
	uint64_t aut = space_auto_refres(atomic_load(&ds->volsize), ds->recsize);

	STOR_ASSERT_HELD(&p->admin);

	atomic_store(&ds->refres, prop_reservation_bytes(ds->local[PROP_REFRESERVATION], aut));
	atomic_store(&ds->res, prop_reservation_bytes(ds->local[PROP_RESERVATION], 0));
}

/* Is @name below @anc ("tank/a/b" below "tank" and "tank/a")? */
static int is_under(const char *name, const char *anc)
{
	size_t l = strlen(anc);

	return strncmp(name, anc, l) == 0 && name[l] == '/';
}

/* Make @d, @par and @tree (@n entries, @d renumbered) the space table; space_lock held. */
static void publish_locked(struct stor_pool *p, struct stor_ds **d, int *par, uint64_t *tree,
			   size_t n)
{
	STOR_ASSERT_HELD(&p->space_lock);

	for (size_t i = 0; i < n; i++)
		d[i]->sp_idx = i;
	free(p->sp_ds);
	free(p->sp_parent);
	free(p->sp_tree);
	p->sp_ds = d;
	p->sp_parent = par;
	p->sp_tree = tree;
	p->sp_n = p->sp_cap = n;
}

int space_sync_locked(struct stor_pool *p)
{
	struct stor_ds **d = NULL;
	int *par = NULL, *up = NULL;
	uint64_t *tree = NULL, total = 0;
	size_t n = p->nds;

	STOR_ASSERT_HELD(&p->admin);

	d = malloc((n ? n : 1) * sizeof(*d));
	par = malloc((n ? n : 1) * sizeof(*par));
	up = malloc((n ? n : 1) * sizeof(*up));
	tree = malloc((n ? n : 1) * sizeof(*tree));
	if (!d || !par || !up || !tree) {
		free(d);
		free(par);
		free(up);
		free(tree);
		/* no copy at all rather than one with datasets that may be gone:
		 * reservations go unenforced until the next change of the table */
		pthread_mutex_lock(&p->space_lock);
		p->sp_n = 0;
		pthread_mutex_unlock(&p->space_lock);
		return -ENOMEM;
	}
	/*
	 * The table is sorted, so a dataset's ancestors come before it and
	 * the nearest one is on the chain of parents of the dataset just before
	 * it: climb that chain. A dataset climbed past is under none that
	 * follow, so the whole walk is one pass, and a create costs no search
	 * per dataset (a scan back from each one past all its siblings was
	 * N^2 for N datasets).
	 */
	for (size_t i = 0; i < n; i++) {
		int j = (int)i - 1;

		d[i] = p->ds[i];
		total += atomic_load(&d[i]->refres) + atomic_load(&d[i]->res);
		while (j >= 0 && !is_under(d[i]->name, d[j]->name))
			j = up[j];
		up[i] = j; /* its nearest ancestor */
		/* which is its parent, unless a level in between is missing */
		par[i] = j >= 0 && !strchr(d[i]->name + strlen(d[j]->name) + 1, '/') ? j : -1;
	}
	free(up);
	pthread_mutex_lock(&p->space_lock);
	publish_locked(p, d, par, tree, n);
	atomic_store(&p->resv_total, total + p->sp_pending + p->sp_gone);
	pthread_mutex_unlock(&p->space_lock);
	return 0;
}

/* Room for @n entries in each array of the space table, grown by half
 * again each time (space_lock held). @return 0 or -ENOMEM (as it was) */
static int grow_table_locked(struct stor_pool *p, size_t n)
{
	size_t cap = n + n / 2 + 16;
	struct stor_ds **d;
	int *par;
	uint64_t *tree;

	STOR_ASSERT_HELD(&p->space_lock);
	if (n <= p->sp_cap)
		return 0;
	d = realloc(p->sp_ds, cap * sizeof(*d));
	if (d)
		p->sp_ds = d;
	par = d ? realloc(p->sp_parent, cap * sizeof(*par)) : NULL;
	if (par)
		p->sp_parent = par;
	tree = par ? realloc(p->sp_tree, cap * sizeof(*tree)) : NULL;
	if (!tree)
		return -ENOMEM; /* what grew is still the table, with room to spare */
	p->sp_tree = tree;
	p->sp_cap = cap;
	return 0;
}

/*
 * A create adds one dataset: at 10,000 datasets the whole pass above was
 * 60% of a create's daemon CPU (a string compare or two and a cache miss
 * per dataset), and at 100,000 three new copies of the table a create
 * (page faults of fresh mappings) made a create's latency grow from 0.2
 * to 5.5 ms. The table is current if it is p->ds without @ds; then @ds
 * goes in at its place, in the table's spare room, the entries after it
 * move up one, their parent indices with them, and @ds's parent is the
 * dataset named by its name less its last component. A dataset already
 * below the new one (its level was missing) would change parent: then, as
 * on any doubt, the whole pass.
 */
int space_insert_locked(struct stor_pool *p, struct stor_ds *ds)
{
	size_t n = p->nds, at = n, plen;
	struct stor_ds *parent;
	const char *slash = strrchr(ds->name, '/');
	char pname[STOR_NAME_MAX + 1];

	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < n; i++)
		if (p->ds[i] == ds) {
			at = i;
			break;
		}
	if (at == n || !slash || p->sp_n + 1 != n || !p->sp_ds ||
	    (at + 1 < n && is_under(p->ds[at + 1]->name, ds->name)))
		return space_sync_locked(p);
	for (size_t i = 0; i < n; i++)
		if (p->ds[i] != (i == at ? ds : p->sp_ds[i < at ? i : i - 1]))
			return space_sync_locked(p);
	plen = (size_t)(slash - ds->name);
	if (plen > STOR_NAME_MAX)
		return space_sync_locked(p);
	memcpy(pname, ds->name, plen);
	pname[plen] = '\0';
	parent = ds_find_locked(p, pname);
	/* the parent precedes @ds, so its index does not move */
	if (parent && (parent->sp_idx >= at || p->sp_ds[parent->sp_idx] != parent))
		return space_sync_locked(p);
	pthread_mutex_lock(&p->space_lock);
	if (grow_table_locked(p, n) < 0) {
		pthread_mutex_unlock(&p->space_lock);
		return space_sync_locked(p);
	}
	memmove(p->sp_ds + at + 1, p->sp_ds + at, (n - 1 - at) * sizeof(*p->sp_ds));
	memmove(p->sp_parent + at + 1, p->sp_parent + at, (n - 1 - at) * sizeof(*p->sp_parent));
	for (size_t i = at + 1; i < n; i++)
		p->sp_parent[i] += p->sp_parent[i] >= (int)at;
	p->sp_ds[at] = ds;
	p->sp_parent[at] = parent ? (int)parent->sp_idx : -1;
	for (size_t i = at; i < n; i++)
		p->sp_ds[i]->sp_idx = i;
	p->sp_n = n;
	atomic_fetch_add(&p->resv_total, atomic_load(&ds->refres) + atomic_load(&ds->res));
	pthread_mutex_unlock(&p->space_lock);
	return 0;
}

/* rr of dataset @i, from its atomic counters */
static uint64_t rr_of(const struct stor_ds *ds)
{
	int64_t own = atomic_load(&ds->used);
	uint64_t refres = atomic_load(&ds->refres);

	return own < 0 ? refres : refres > (uint64_t)own ? refres - (uint64_t)own : 0;
}

static uint64_t own_of(const struct stor_ds *ds)
{
	int64_t own = atomic_load(&ds->used);

	return own > 0 ? (uint64_t)own : 0;
}

/* tree of every dataset into sp_tree; @return U, less what of the promised
 * metadata the log's @log bytes beyond the reserves use. space_lock held. */
static uint64_t compute_locked(struct stor_pool *p, uint64_t log)
{
	uint64_t u, meta;

	STOR_ASSERT_HELD(&p->space_lock);

	if (p->sp_gone && metalog_checkpoints(p) > p->sp_gone_ckpts) {
		atomic_fetch_sub(&p->resv_total, p->sp_gone);
		p->sp_gone = 0;
	}
	u = p->sp_pending + p->sp_gone;
	meta = p->sp_gone;

	for (size_t i = 0; i < p->sp_n; i++) {
		int64_t snaps = atomic_load(&p->sp_ds[i]->snap_used);

		/* what its snapshots hold counts in its used, not in its refreservation */
		p->sp_tree[i] = own_of(p->sp_ds[i]) + rr_of(p->sp_ds[i]) +
				(snaps > 0 ? (uint64_t)snaps : 0);
	}
	/* descendants sort after their ancestors: children are done first */
	for (size_t i = p->sp_n; i-- > 0;) {
		uint64_t res = atomic_load(&p->sp_ds[i]->res), t = p->sp_tree[i];

		uint64_t rr = rr_of(p->sp_ds[i]), share = meta_share_locked(p, p->sp_ds[i]);

		u += rr + (res > t ? res - t : 0);
		meta += rr < share ? rr : share;
		if (p->sp_parent[i] >= 0)
			p->sp_tree[p->sp_parent[i]] += res > t ? res : t;
	}
	return u - (log < meta ? log : meta);
}

static int index_of(struct stor_pool *p, const struct stor_ds *ds)
{
	/* its own note of where it is, unless the table changed since */
	if (ds->sp_idx < p->sp_n && p->sp_ds[ds->sp_idx] == ds)
		return (int)ds->sp_idx;
	for (size_t i = 0; i < p->sp_n; i++)
		if (p->sp_ds[i] == ds)
			return (int)i;
	return -1;
}

/* @log: the bytes of the log beyond the reserves, which *@free_b leaves out */
static void pool_bytes(struct stor_pool *p, uint64_t *free_b, uint64_t *size, uint64_t *log)
{
	uint64_t used, total;

	alloc_totals(p->alloc, &used, &total);
	*size = total * STOR_SECTOR;
	/* the metadata log's sectors are not free for data (alloc.c): were
	 * they counted free, the log would grow into the slop unseen */
	*free_b = alloc_data_free(p->alloc, log) * STOR_SECTOR;
	*log *= STOR_SECTOR;
}

int space_admit(struct stor_pool *p, struct stor_ds *ds, uint64_t n, uint64_t replaces)
{
	uint64_t fr, size, slop, need, u, log;

	(void)ds;
	pool_bytes(p, &fr, &size, &log);
	slop = space_slop(size);
	/* an overwrite no larger than its old extent may use the slop */
	need = replaces >= n ? 0 : slop;
	if (fr >= need + atomic_load(&p->resv_total))
		return 0;
	pthread_mutex_lock(&p->space_lock);
	u = compute_locked(p, log);
	pthread_mutex_unlock(&p->space_lock);
	return fr >= need + u ? 0 : STOR_ENOSPC;
}

/* base: what anyone may still take; plus the headroom of @i and its ancestors */
static uint64_t room_locked(struct stor_pool *p, int i, uint64_t fr, uint64_t slop, uint64_t log)
{
	uint64_t u, room;

	STOR_ASSERT_HELD(&p->space_lock);
	u = compute_locked(p, log);
	room = fr > slop + u ? fr - slop - u : 0;
	for (; i >= 0; i = p->sp_parent[i]) {
		uint64_t res = atomic_load(&p->sp_ds[i]->res);
		room += res > p->sp_tree[i] ? res - p->sp_tree[i] : 0;
	}
	return room;
}

void space_of_locked(struct stor_pool *p, struct stor_ds *ds, struct space_view *v)
{
	uint64_t fr, size, log;
	int i;

	STOR_ASSERT_HELD(&p->admin);

	memset(v, 0, sizeof(*v));
	pool_bytes(p, &fr, &size, &log);
	v->own = own_of(ds);
	v->rr = rr_of(ds);
	v->snaps = atomic_load(&ds->snap_used) > 0 ? (uint64_t)atomic_load(&ds->snap_used) : 0;
	pthread_mutex_lock(&p->space_lock);
	i = index_of(p, ds);
	v->available = room_locked(p, i, fr, space_slop(size), log) + v->rr;
	v->used = i >= 0 ? p->sp_tree[i] : v->own + v->rr + v->snaps;
	pthread_mutex_unlock(&p->space_lock);
	v->children = v->used - v->own - v->rr - v->snaps;
}

void space_all_begin(struct stor_pool *p, struct space_all *sa)
{
	uint64_t size, log;

	memset(sa, 0, sizeof(*sa));
	pool_bytes(p, &sa->fr, &size, &log);
	sa->slop = space_slop(size);
	pthread_mutex_lock(&p->space_lock);
	sa->u = compute_locked(p, log);
	sa->tree = malloc((p->sp_n ? p->sp_n : 1) * sizeof(*sa->tree));
	if (sa->tree)
		memcpy(sa->tree, p->sp_tree, p->sp_n * sizeof(*sa->tree));
	pthread_mutex_unlock(&p->space_lock);
}

void space_of_all(struct stor_pool *p, const struct space_all *sa, struct stor_ds *ds,
		  struct space_view *v)
{
	uint64_t room;
	int i;

	if (!sa->tree) {
		space_of_locked(p, ds, v);
		return;
	}
	memset(v, 0, sizeof(*v));
	v->own = own_of(ds);
	v->rr = rr_of(ds);
	v->snaps = atomic_load(&ds->snap_used) > 0 ? (uint64_t)atomic_load(&ds->snap_used) : 0;
	/* sp_ds and sp_parent change only under the admin lock, which the listing holds */
	i = index_of(p, ds);
	room = sa->fr > sa->slop + sa->u ? sa->fr - sa->slop - sa->u : 0;
	for (int k = i; k >= 0; k = p->sp_parent[k]) {
		uint64_t res = atomic_load(&p->sp_ds[k]->res);

		room += res > sa->tree[k] ? res - sa->tree[k] : 0;
	}
	v->available = room + v->rr;
	v->used = i >= 0 ? sa->tree[i] : v->own + v->rr + v->snaps;
	/* the counters moved since begin: never less than its own parts */
	if (v->used < v->own + v->rr + v->snaps)
		v->used = v->own + v->rr + v->snaps;
	v->children = v->used - v->own - v->rr - v->snaps;
}

void space_all_end(struct space_all *sa)
{
	free(sa->tree);
	sa->tree = NULL;
}

int space_promise_locked(struct stor_pool *p, struct stor_ds *from, uint64_t need,
			 const char *hint)
{
	uint64_t fr, size, room, log;
	char a[32], b[32];

	STOR_ASSERT_HELD(&p->admin);

	if (!need)
		return 0;
	/* counted before the free space is read: a writer racing with us sees it */
	pthread_mutex_lock(&p->space_lock);
	atomic_fetch_add(&p->resv_total, need);
	pool_bytes(p, &fr, &size, &log);
	room = room_locked(p, from ? index_of(p, from) : -1, fr, space_slop(size), log);
	for (int i = 0; i < 2 && room < need; i++) {
		/* extents freed by a destroy come back only when its txg is
		 * durable, and the next one (txg.c), and the log it held only
		 * with a checkpoint after it: commit before refusing */
		if (p->sp_gone)
			metalog_want_checkpoint(p);
		pthread_mutex_unlock(&p->space_lock);
		txg_sync(p, 0);
		pthread_mutex_lock(&p->space_lock);
		pool_bytes(p, &fr, &size, &log);
		room = room_locked(p, from ? index_of(p, from) : -1, fr, space_slop(size), log);
	}
	if (room < need) {
		atomic_fetch_sub(&p->resv_total, need);
		pthread_mutex_unlock(&p->space_lock);
		stor_format_size(room, a, sizeof(a));
		stor_format_size(need, b, sizeof(b));
		pool_set_error("not enough space: %s available, %s needed%s%s", a, b,
			       hint ? "; " : "", hint ? hint : "");
		return STOR_ENOSPC;
	}
	p->sp_pending += need; /* until space_sync_locked() counts the dataset */
	pthread_mutex_unlock(&p->space_lock);
	return 0;
}

void space_gone_locked(struct stor_pool *p, struct stor_ds *const *v, size_t n)
{
	uint64_t gone = 0;

	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < n; i++)
		gone += meta_share(v[i]);
	if (!gone)
		return;
	pthread_mutex_lock(&p->space_lock);
	p->sp_gone += gone;
	/* none is released before space_gone_done_locked() says which checkpoint */
	p->sp_gone_ckpts = UINT64_MAX;
	atomic_fetch_add(&p->resv_total, gone);
	pthread_mutex_unlock(&p->space_lock);
}

void space_gone_done_locked(struct stor_pool *p, int committed)
{
	STOR_ASSERT_HELD(&p->admin);

	pthread_mutex_lock(&p->space_lock);
	/* a checkpoint counted from now on is of a txg after the destroy's, if
	 * that is committed; if not, one being written now may be of a txg
	 * before it, and only the one after that holds none of its pointers */
	if (p->sp_gone)
		p->sp_gone_ckpts = metalog_checkpoints(p) + !committed;
	pthread_mutex_unlock(&p->space_lock);
}

void space_unpromise_locked(struct stor_pool *p, uint64_t need)
{
	STOR_ASSERT_HELD(&p->admin);

	if (!need)
		return;
	pthread_mutex_lock(&p->space_lock);
	p->sp_pending -= need;
	atomic_fetch_sub(&p->resv_total, need);
	pthread_mutex_unlock(&p->space_lock);
}
