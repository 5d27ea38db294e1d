/* SPDX-License-Identifier: MIT */
/*
 * Transaction groups (see txg.h). Invariants:
 * - a block pointer reaches LMDB only after the LUN data it points to has
 *   been fsync'ed, and LMDB commits only after the txg's log record and
 *   uberblocks are durable on the LUNs (commit: build the LMDB transaction,
 *   write the log record's copies, fsync them and the txg's data LUNs in
 *   one round, write and fsync the uberblocks, then the LMDB commit);
 * - an extent freed in txg N goes back to the allocator only after N is
 *   durable and every reader section that might have looked it up is over;
 * - lookups see the open txg, then the committing one, then LMDB, all taken
 *   under stage_lock so no committed-but-unstaged gap is visible.
 * One commit runs at a time (commit_lock); a failed commit keeps its stage
 * and is retried by the next one, so nothing staged is ever dropped.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/array.h"
#include "base/events.h"
#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "dev/errlog.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "kv/bp.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/bpmac.h"
#include "txg/metalog.h"
#include "txg/txg.h"

struct stage_ent {
	uint64_t ds_id, recno;
	struct bp bp;
	/* leaf(bp) under leaf_mk (bpmac.c), kept so that an overwrite within a
	 * txg or of the txg syncing pays one PRF, for the new pointer only */
	const struct mac_key *leaf_mk;
	uint8_t leaf[MAC_LEN];
};

/*
 * The MAC change of one group of an encrypted dataset (bpmac.c): the XOR of
 * leaf(what the commit replaces) ^ leaf(staged pointer) over the group's
 * pointers staged in this txg. Summed at staging time, where the replaced
 * pointer is at hand, so the commit reads no old pointer back and handles
 * one change per group, not one per pointer.
 */
struct stage_group {
	uint64_t ds_id, group;
	struct mac_key *mk; /* held by the stage's mks */
	uint8_t delta[MAC_LEN];
	int used;
};

struct extent {
	uint16_t lun;
	uint32_t n;
	uint64_t sector;
};

struct stage {
	uint64_t txg;
	pthread_mutex_t *stage_lock; /* the pool's: held for the open stage's helpers below */
	/* entries in staging order, found through an index of 8-byte slots
	 * small enough to stay in cache when the entries do not */
	struct stage_ent *ents;
	size_t n, capents;
	uint64_t *slots;
	size_t cap;
	struct extent *frees;
	size_t nfrees, capfrees;
	struct gone {
		uint64_t id;
		char *name;
	} *gone; /* destroyed datasets */
	size_t ngone;
	struct stage_group *groups; /* open addressing */
	size_t gcap, ngroups;
	struct mac_key **mks; /* a reference on the MAC key of each dataset staged */
	size_t nmks, capmks;
	size_t resv; /* entries txg_reserve() promised room for, not staged yet */
	struct txg_task *tasks; /* participants' work, in the order enlisted */
	size_t ntasks, captasks;
	uint8_t dirty[STOR_LUNS_MAX];
};

static struct stage *stage_new(struct stor_pool *p, uint64_t txg)
{
	struct stage *s = calloc(1, sizeof(*s));

	if (s) {
		s->txg = txg;
		s->stage_lock = &p->stage_lock;
	}
	return s;
}

static void stage_free(struct stage *s)
{
	if (!s)
		return;
	free(s->ents);
	free(s->slots);
	free(s->groups);
	free(s->frees);
	for (size_t i = 0; i < s->ngone; i++)
		free(s->gone[i].name);
	free(s->gone);
	for (size_t i = 0; i < s->nmks; i++)
		mac_key_put(s->mks[i]);
	free(s->mks);
	for (size_t i = 0; i < s->ntasks; i++)
		if (s->tasks[i].release)
			s->tasks[i].release(s->tasks[i].arg);
	free(s->tasks);
	free(s);
}

/* The stage's commit will need @mk: hold a reference once per stage. */
static int stage_hold_mk(struct stage *s, struct mac_key *mk)
{
	struct mac_key **m;

	if (!mk || mk->staged_txg == s->txg)
		return 0;
	m = array_grow(s->mks, s->nmks, &s->capmks, sizeof(*m), 16);
	if (!m)
		return -ENOMEM;
	s->mks = m;
	s->mks[s->nmks++] = mac_key_ref(mk);
	mk->staged_txg = s->txg;
	return 0;
}

static int stage_empty(const struct stage *s)
{
	return s->n == 0 && s->nfrees == 0 && s->ngone == 0 && s->ntasks == 0;
}

int txg_name_gone(struct stor_pool *p, const char *name)
{
	int found = 0;

	pthread_mutex_lock(&p->stage_lock);
	for (struct stage *s = p->open; s; s = s == p->open ? p->syncing : NULL)
		for (size_t i = 0; i < s->ngone && !found; i++)
			found = strcmp(s->gone[i].name, name) == 0;
	pthread_mutex_unlock(&p->stage_lock);
	return found;
}

int txg_stage_idle(struct stor_pool *p)
{
	STOR_ASSERT_HELD(&p->stage_lock);

	return stage_empty(p->open) && !p->syncing;
}

static uint64_t hash_of(uint64_t ds_id, uint64_t recno)
{
	uint64_t h = (ds_id * 0x9e3779b97f4a7c15ull) ^ (recno * 0xc2b2ae3d27d4eb4full);

	return h ^ (h >> 29);
}

/* A slot of the index: the hash's top 32 bits, and the entry's index + 1. */
static uint64_t slot_make(uint64_t h, size_t idx)
{
	return (h & 0xffffffff00000000ull) | (uint64_t)(idx + 1);
}

static struct stage_ent *stage_find(struct stage *s, uint64_t ds_id, uint64_t recno)
{
	uint64_t h, v;

	if (!s || s->cap == 0)
		return NULL;
	h = hash_of(ds_id, recno);
	for (size_t i = h & (s->cap - 1); (v = s->slots[i]) != 0; i = (i + 1) & (s->cap - 1)) {
		struct stage_ent *e = &s->ents[(uint32_t)v - 1];

		if ((v >> 32) == (h >> 32) && e->ds_id == ds_id && e->recno == recno)
			return e;
	}
	return NULL;
}

static void slot_put(uint64_t *slots, size_t cap, uint64_t h, size_t idx)
{
	size_t i = h & (cap - 1);

	while (slots[i])
		i = (i + 1) & (cap - 1);
	slots[i] = slot_make(h, idx);
}

/* Room for @n more entries (stage_lock held): the index stays under 3/4 full. */
static int stage_grow(struct stage *s, size_t n)
{
	size_t cap = s->cap ? s->cap : 1024, ecap = s->capents ? s->capents : 768;
	uint64_t *slots;

	STOR_ASSERT_HELD(s->stage_lock);

	while ((s->n + n) * 4 > cap * 3)
		cap *= 2;
	while (ecap < s->n + n)
		ecap *= 2;
	if (ecap != s->capents) {
		struct stage_ent *ents = realloc(s->ents, ecap * sizeof(*ents));
		if (!ents)
			return -ENOMEM;
		s->ents = ents;
		s->capents = ecap;
	}
	if (cap == s->cap)
		return 0;
	slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++)
		slot_put(slots, cap, hash_of(s->ents[i].ds_id, s->ents[i].recno), i);
	free(s->slots);
	s->slots = slots;
	s->cap = cap;
	return 0;
}

static struct stage_ent *stage_insert(struct stage *s, uint64_t ds_id, uint64_t recno)
{
	struct stage_ent *e = stage_find(s, ds_id, recno);

	if (e)
		return e;
	if (stage_grow(s, 1) < 0)
		return NULL;
	slot_put(s->slots, s->cap, hash_of(ds_id, recno), s->n);
	e = &s->ents[s->n++];
	memset(e, 0, sizeof(*e));
	e->ds_id = ds_id;
	e->recno = recno;
	return e;
}

static struct stage_group *group_slot(struct stage_group *tab, size_t cap, uint64_t ds_id,
				      uint64_t group)
{
	size_t i = hash_of(ds_id, group) & (cap - 1);

	while (tab[i].used && (tab[i].ds_id != ds_id || tab[i].group != group))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* Room for @n more groups (stage_lock held). */
static int group_room(struct stage *s, size_t n)
{
	size_t cap = s->gcap ? s->gcap : 64;
	struct stage_group *tab;

	STOR_ASSERT_HELD(s->stage_lock);

	while ((s->ngroups + n) * 4 > cap * 3)
		cap *= 2;
	if (cap == s->gcap)
		return 0;
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < s->gcap; i++)
		if (s->groups[i].used)
			*group_slot(tab, cap, s->groups[i].ds_id, s->groups[i].group) = s->groups[i];
	free(s->groups);
	s->groups = tab;
	s->gcap = cap;
	return 0;
}

/* XOR @delta into the change of @recno's group (stage_lock held, room made). */
static void group_add(struct stage *s, uint64_t ds_id, uint64_t recno, struct mac_key *mk,
		      const uint8_t delta[MAC_LEN])
{
	struct stage_group *g;

	STOR_ASSERT_HELD(s->stage_lock);
	g = group_slot(s->groups, s->gcap, ds_id, recno / MAC_GROUP);
	if (!g->used) {
		*g = (struct stage_group){ .ds_id = ds_id, .group = recno / MAC_GROUP, .used = 1 };
		s->ngroups++;
	}
	g->mk = mk;
	for (int i = 0; i < MAC_LEN; i++)
		g->delta[i] ^= delta[i];
}

static int stage_free_extent(struct stage *s, const struct bp *bp)
{
	struct extent *f = array_grow(s->frees, s->nfrees, &s->capfrees, sizeof(*f), 256);

	if (!f)
		return -ENOMEM;
	s->frees = f;
	s->frees[s->nfrees++] = (struct extent){ bp->lun, bp->psize / STOR_SECTOR, bp->sector };
	return 0;
}

/* ---- reader sections: two counters flipped by an epoch, as in RCU ---- */

unsigned txg_read_enter(struct stor_pool *p)
{
	for (;;) {
		uint64_t e = atomic_load(&p->read_epoch);
		unsigned slot = (unsigned)(e & 1);

		atomic_fetch_add(&p->readers[slot], 1);
		if (atomic_load(&p->read_epoch) == e)
			return slot;
		atomic_fetch_sub(&p->readers[slot], 1);
	}
}

void txg_read_exit(struct stor_pool *p, unsigned slot)
{
	atomic_fetch_sub(&p->readers[slot], 1);
}

void txg_read_synchronize(struct stor_pool *p)
{
	/* per pool: a reader stuck on one pool's LUN delays that pool only */
	pthread_mutex_lock(&p->sync_lock);
	/* Two flips: readers in either slot when we started have left. */
	for (int round = 0; round < 2; round++) {
		uint64_t e = atomic_fetch_add(&p->read_epoch, 1);
		while (atomic_load(&p->readers[e & 1]) != 0) {
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
		}
	}
	pthread_mutex_unlock(&p->sync_lock);
}

/* ---- the open txg ---- */

uint64_t txg_hold(struct stor_pool *p)
{
	uint64_t txg;

	pthread_rwlock_rdlock(&p->hold);
	pthread_mutex_lock(&p->stage_lock);
	txg = p->open->txg;
	pthread_mutex_unlock(&p->stage_lock);
	return txg;
}

void txg_rele(struct stor_pool *p)
{
	pthread_rwlock_unlock(&p->hold);
}

void txg_advance(struct stor_pool *p, uint64_t min)
{
	/* under the write hold: no writer is between its txg_hold and its
	 * stage, so everything staged is in the open txg already and born
	 * at or before it */
	pthread_rwlock_wrlock(&p->hold);
	pthread_mutex_lock(&p->stage_lock);
	if (p->open->txg < min)
		p->open->txg = min;
	pthread_mutex_unlock(&p->stage_lock);
	pthread_rwlock_unlock(&p->hold);
}

static int lookup_committed(struct meta_txn *t, uint64_t ds_id, uint64_t recno, struct bp *bp)
{
	uint8_t key[BP_KEY_LEN];
	const void *v;
	size_t vlen;
	int ret;

	bp_key(ds_id, recno, key);
	ret = meta_get(t, META_BP, key, sizeof(key), &v, &vlen);
	if (ret < 0)
		return ret;
	return bp_decode(v, vlen, bp);
}

/* Room for @n more entries, frees and MAC keys in @s (stage_lock held). */
static int stage_room(struct stage *s, size_t n)
{
	STOR_ASSERT_HELD(s->stage_lock);

	if (stage_grow(s, n) < 0)
		return -ENOMEM;
	if (s->capfrees < s->nfrees + n) {
		struct extent *f = realloc(s->frees, (s->nfrees + n) * sizeof(*f));
		if (!f)
			return -ENOMEM;
		s->frees = f;
		s->capfrees = s->nfrees + n;
	}
	if (group_room(s, n) < 0)
		return -ENOMEM;
	if (s->capmks < s->nmks + n) {
		struct mac_key **m = realloc(s->mks, (s->nmks + n) * sizeof(*m));
		if (!m)
			return -ENOMEM;
		s->mks = m;
		s->capmks = s->nmks + n;
	}
	return 0;
}

int txg_reserve(struct stor_pool *p, size_t n)
{
	int ret;

	pthread_mutex_lock(&p->stage_lock);
	ret = stage_room(p->open, p->open->resv + n);
	if (ret == 0)
		p->open->resv += n;
	pthread_mutex_unlock(&p->stage_lock);
	return ret;
}

void txg_unreserve(struct stor_pool *p, size_t n)
{
	pthread_mutex_lock(&p->stage_lock);
	p->open->resv -= n < p->open->resv ? n : p->open->resv;
	pthread_mutex_unlock(&p->stage_lock);
}

/*
 * The pointer @recno has now (stage_lock held): in a stage, else in LMDB.
 * A staged one may bring its leaf under @mk into @leaf (*@have_leaf).
 */
static int find_current(struct stor_pool *p, uint64_t ds_id, uint64_t recno,
			const struct mac_key *mk, struct bp *old, int *had_old,
			uint8_t leaf[MAC_LEN], int *have_leaf)
{
	struct stage_ent *e;
	struct meta_txn *t = NULL;
	int ret;

	STOR_ASSERT_HELD(&p->stage_lock);
	e = stage_find(p->open, ds_id, recno);
	*had_old = 0;
	if (!e)
		e = stage_find(p->syncing, ds_id, recno);
	if (e) {
		*had_old = !(e->bp.flags & BP_F_HOLE);
		if (*had_old)
			*old = e->bp;
		*have_leaf = *had_old && mk && e->leaf_mk == mk;
		if (*have_leaf)
			memcpy(leaf, e->leaf, MAC_LEN);
		return 0;
	}
	/* snapshot taken under stage_lock: consistent with the stages */
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = lookup_committed(t, ds_id, recno, old);
	meta_rtxn_put(t);
	*had_old = ret == 0;
	return ret == -ENOENT ? 0 : ret;
}

/*
 * leaf(@old) ^ leaf(@bp) into @delta and leaf(@bp) into @leaf; a hole or no
 * @old has no leaf (bpmac.c). @old_leaf, when not NULL, is leaf(@old).
 */
static int mac_delta(const struct mac_key *mk, uint64_t recno, const struct bp *bp,
		     const struct bp *old, const uint8_t *old_leaf, uint8_t delta[MAC_LEN],
		     uint8_t leaf[MAC_LEN])
{
	uint8_t enc[BP_LEN];
	int ret = 0;

	memset(leaf, 0, MAC_LEN);
	if (!(bp->flags & BP_F_HOLE)) {
		bp_encode(bp, enc);
		ret = bpmac_leaf_xor(mk, recno, enc, leaf);
	}
	for (int i = 0; i < MAC_LEN; i++)
		delta[i] ^= leaf[i];
	if (ret == 0 && old && old_leaf) {
		for (int i = 0; i < MAC_LEN; i++)
			delta[i] ^= old_leaf[i];
	} else if (ret == 0 && old) {
		bp_encode(old, enc);
		ret = bpmac_leaf_xor(mk, recno, enc, delta);
	}
	return ret;
}

/*
 * Move @old, which @recno of @ds points to now, into the table of snapshot
 * @keep instead of freeing it (stage_lock held, dropped for the PRF). Room
 * for it and for the head's new pointer is made first, so the two are
 * staged together or not at all. A kept pointer is never sealed again: it
 * keeps its extent, nonce and tag; on an encrypted dataset its leaf joins
 * the snapshot's own MAC tree, under the snapshot's key.
 */
static int stage_keep(struct stor_pool *p, struct stor_ds *ds, struct snap *keep,
		      uint64_t recno, const struct bp *old)
{
	uint8_t delta[MAC_LEN] = { 0 }, leaf[MAC_LEN];
	struct mac_key *kmk = NULL;
	struct stage_ent *e;
	int ret = 0;

	STOR_ASSERT_HELD(&p->stage_lock);

	/* a raw receive's tables get their MACs when its tree is built (recv.c) */
	if (ds->suite && !atomic_load(&ds->macs_later)) {
		pthread_mutex_unlock(&p->stage_lock);
		ret = p->keep_mac(keep, &kmk);
		if (ret == 0)
			ret = mac_delta(kmk, recno, old, NULL, NULL, delta, leaf);
		pthread_mutex_lock(&p->stage_lock);
	}
	if (ret == 0)
		ret = stage_room(p->open, p->open->resv + 2);
	if (ret == 0 && kmk)
		ret = stage_hold_mk(p->open, kmk);
	if (ret == 0) {
		e = stage_insert(p->open, keep->id, recno);
		e->bp = *old;
		if (kmk)
			group_add(p->open, keep->id, recno, kmk, delta);
		atomic_fetch_add(&ds->snap_used, old->psize); /* usedbysnapshots */
	}
	mac_key_put(kmk);
	return ret;
}

/*
 * The record is the caller's (its stripe is locked) and the open txg cannot
 * close (the caller holds it), so what find_current() saw stays true while
 * stage_lock, which every writer and reader of the pool takes, is dropped
 * for the PRFs of the MAC change.
 */
int txg_stage(struct stor_pool *p, struct stor_ds *ds, uint64_t recno, const struct bp *bp,
	      struct mac_key *mk, struct bp *old, int *had_old)
{
	return txg_stage_at(p, ds, ds->id, recno, bp, mk, old, had_old);
}

int txg_stage_at(struct stor_pool *p, struct stor_ds *ds, uint64_t ds_id, uint64_t recno,
		 const struct bp *bp, struct mac_key *mk, struct bp *old, int *had_old)
{
	struct stage_ent *e;
	struct snap *keep;
	uint8_t delta[MAC_LEN] = { 0 }, leaf[MAC_LEN], old_leaf[MAC_LEN];
	int ret, have_leaf = 0;

	/* the hold of the open txg is a read lock: that one cannot be checked */
	STOR_ASSERT_HELD(&p->stripes[pool_stripe(ds_id, recno)]);

	pthread_mutex_lock(&p->stage_lock);
	ret = find_current(p, ds_id, recno, mk, old, had_old, old_leaf, &have_leaf);
	/* the newest snapshot holds what it was born before (snapshot.c) */
	keep = ret == 0 && *had_old && ds_id == ds->id && ds->keep && old->birth <= ds->keep->txg &&
	       old->birth != bp->birth ? ds->keep : NULL;
	if (keep)
		ret = stage_keep(p, ds, keep, recno, old);
	if (ret == 0 && mk) {
		pthread_mutex_unlock(&p->stage_lock);
		ret = mac_delta(mk, recno, bp, *had_old ? old : NULL, have_leaf ? old_leaf : NULL,
				delta, leaf);
		pthread_mutex_lock(&p->stage_lock);
		if (ret == 0)
			ret = stage_hold_mk(p->open, mk);
		if (ret == 0)
			ret = group_room(p->open, 1);
	}
	if (ret < 0)
		goto out;
	if (*had_old && !keep) {
		ret = stage_free_extent(p->open, old);
		if (ret < 0)
			goto out;
	}
	e = stage_insert(p->open, ds_id, recno);
	if (!e) {
		if (*had_old && !keep)
			p->open->nfrees--;
		ret = -ENOMEM;
		goto out;
	}
	e->bp = *bp;
	e->leaf_mk = mk && !(bp->flags & BP_F_HOLE) ? mk : NULL;
	if (e->leaf_mk)
		memcpy(e->leaf, leaf, MAC_LEN);
	/* a pointer staged again in this txg sums its changes: old ^ mid ^ mid ^ new */
	if (mk)
		group_add(p->open, ds_id, recno, mk, delta);
	if (!(bp->flags & BP_F_HOLE))
		p->open->dirty[bp->lun] = 1;
	if (p->open->resv)
		p->open->resv--;
out:
	pthread_mutex_unlock(&p->stage_lock);
	return ret;
}

int txg_lookup(struct stor_pool *p, size_t n, const uint64_t *ds_ids, const uint64_t *recnos,
	       struct bp *bps, int *found)
{
	struct meta_txn *t = NULL;
	size_t missing = 0;
	int ret = 0;

	pthread_mutex_lock(&p->stage_lock);
	for (size_t i = 0; i < n; i++) {
		struct stage_ent *e = stage_find(p->open, ds_ids[i], recnos[i]);
		if (!e)
			e = stage_find(p->syncing, ds_ids[i], recnos[i]);
		if (e) {
			found[i] = !(e->bp.flags & BP_F_HOLE);
			bps[i] = e->bp;
		} else {
			found[i] = -1;
			missing++;
		}
	}
	pthread_mutex_unlock(&p->stage_lock);
	if (!missing)
		return 0;
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < n; i++) {
		int r;
		if (found[i] != -1)
			continue;
		r = lookup_committed(t, ds_ids[i], recnos[i], &bps[i]);
		if (r == 0) {
			found[i] = 1;
		} else if (r == -ENOENT) {
			found[i] = 0;
		} else {
			found[i] = 0;
			ret = r;
			break;
		}
	}
	meta_rtxn_put(t);
	return ret;
}

static int enlist_locked(struct stage *s, const struct txg_task *task)
{
	STOR_ASSERT_HELD(s->stage_lock);

	if (s->captasks == s->ntasks) {
		size_t cap = s->captasks ? 2 * s->captasks : 8;
		struct txg_task *t = realloc(s->tasks, cap * sizeof(*t));

		if (!t)
			return -ENOMEM;
		s->tasks = t;
		s->captasks = cap;
	}
	s->tasks[s->ntasks++] = *task;
	return 0;
}

int txg_forget_ds(struct stor_pool *p, uint64_t ds_id, const char *name,
		  const struct txg_task *also)
{
	struct stage *s;
	struct gone *gone = NULL;
	char *dup = strdup(name);
	int ret = -ENOMEM;

	pthread_rwlock_wrlock(&p->hold);
	pthread_mutex_lock(&p->stage_lock);
	s = p->open;
	if (dup)
		gone = realloc(s->gone, (s->ngone + 1) * sizeof(*gone));
	if (gone) {
		s->gone = gone;
		ret = also ? enlist_locked(s, also) : 0;
	}
	/*
	 * The dataset's staged pointers stay: the commit writes them, then
	 * frees every extent LMDB lists for the dataset and deletes them. The
	 * extents they replaced are on this stage's free list already, so each
	 * extent is freed once (taking the staged ones out here would free
	 * them, and then the commit would free the replaced ones again).
	 */
	if (ret == 0)
		s->gone[s->ngone++] = (struct gone){ ds_id, dup };
	pthread_mutex_unlock(&p->stage_lock);
	pthread_rwlock_unlock(&p->hold);
	if (ret < 0) {
		free(dup);
		if (also && also->release)
			also->release(also->arg);
	}
	return ret;
}

/* ---- commit ---- */

struct gone_ctx {
	struct stage *s;
};

static int free_gone(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct gone_ctx *g = ctx;
	struct bp bp;

	(void)key;
	(void)klen;
	if (bp_decode(val, vlen, &bp) == 0)
		return stage_free_extent(g->s, &bp);
	return 0;
}

static int free_kept(void *arg, const struct bp *bp)
{
	return stage_free_extent(arg, bp);
}

/* The MAC changes of a commit, one per group staged (struct stage_group). */
static int commit_macs(struct stage *s, struct meta_txn *t)
{
	struct bpmac_change *ch;
	size_t n = 0;
	int ret;

	if (!s->ngroups)
		return 0;
	ch = malloc(s->ngroups * sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	for (size_t i = 0; i < s->gcap; i++) {
		const struct stage_group *g = &s->groups[i];

		if (!g->used)
			continue;
		ch[n] = (struct bpmac_change){ .ds_id = g->ds_id, .recno = g->group * MAC_GROUP,
					       .mk = g->mk };
		memcpy(ch[n].delta, g->delta, MAC_LEN);
		n++;
	}
	ret = bpmac_apply(t, ch, n);
	free(ch);
	return ret;
}

/*
 * Delete the record of a destroyed dataset, unless its name now belongs to
 * a dataset created since (a commit that failed and is retried later).
 */
static int forget_record(struct meta_txn *t, const struct gone *g)
{
	const uint8_t *r;
	const void *v;
	size_t vlen;
	int ret = meta_get(t, META_DS, g->name, strlen(g->name), &v, &vlen);

	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	r = (const uint8_t *)v + 4; /* after the format version */
	if (vlen < 12 || get_u64(&r) != g->id)
		return 0;
	return meta_del(t, META_DS, g->name, strlen(g->name));
}

/*
 * One flush round for the txg: every side in service of the vdevs its data
 * went to and of those its log record's copies went to, all at once.
 * @res[vdev] gets each vdev's result: 0 when a side of it is durable (a
 * side that failed goes out of service, as mirror_flush() has it).
 */
static int flush_round(struct stor_pool *p, struct stage *s, const uint8_t *want, int *res)
{
	struct lun **luns = NULL;
	unsigned *idx = NULL, *side = NULL, *ok = NULL, n = 0, nluns = atomic_load(&p->nluns);
	int *r = NULL, ret = 0;

	if (!(luns = malloc(nluns * sizeof(*luns) + 1)) || !(idx = malloc(nluns * sizeof(*idx) + 1)) ||
	    !(side = malloc(nluns * sizeof(*side) + 1)) || !(ok = calloc(nluns + 1, sizeof(*ok))) ||
	    !(r = malloc(nluns * sizeof(*r) + 1))) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < nluns; i++) {
		unsigned sides[STOR_MIRROR_MAX], ns;

		res[i] = 0;
		if (!want[i] && !s->dirty[i])
			continue;
		ns = mirror_sides(p, i, sides);
		res[i] = ns ? 0 : -EIO;
		for (unsigned k = 0; k < ns && n < nluns; k++) {
			luns[n] = p->luns[sides[k]].lun;
			side[n] = sides[k];
			idx[n++] = i;
		}
	}
	lun_flush_batch(luns, r, n);
	for (unsigned k = 0; k < n; k++) {
		if (r[k] == 0)
			ok[idx[k]] += mirror_side_counts(p, side[k]);
		else if (res[idx[k]] == 0)
			res[idx[k]] = r[k];
	}
	for (unsigned k = 0; k < n; k++) {
		unsigned i = idx[k];

		if (ok[i]) {
			res[i] = 0;
			if (r[k] < 0)
				mirror_side_failed(p, side[k], 1);
		}
	}
	for (unsigned i = 0; i < nluns; i++) {
		if (!s->dirty[i] || res[i] == 0 || ret < 0)
			continue;
		/* after a failed fsync the kernel may have dropped the dirty
		 * pages: a retry could "succeed" over lost data, so stop */
		atomic_store(&p->suspend_error, res[i]);
		if (atomic_exchange(&p->suspended, STOR_SUSPEND_LUN) != STOR_SUSPEND_LUN)
			EVENT(STOR_EV_POOL_SUSPEND, p->name, EV_STR("reason", "a LUN flush failed"),
			      EV_STR("lun", lun_path(p->luns[i].lun)),
			      EV_STR("error", stor_strerror(res[i])));
		lunset_failed(p, p->luns[i].lun);
		ret = res[i];
	}
	if (ret == 0)
		memset(s->dirty, 0, nluns);
out:
	free(luns);
	free(idx);
	free(side);
	free(ok);
	free(r);
	return ret;
}

static int commit_stage(struct stor_pool *p, struct stage *s)
{
	struct meta_txn *t = NULL;
	uint8_t key[BP_KEY_LEN], val[BP_LEN], txgbuf[8], *w;
	uint8_t *want = NULL;
	int *flushed = NULL;
	int ret = 0, written = 0, on_luns = 0, sides = 0, errs = 0;

	/* room for every pointer, its MAC group and the tree pages above, twice over */
	ret = meta_reserve(p->meta, s->n * 2 * (BP_KEY_LEN + BP_LEN + 2 * MAC_LEN + 64));
	if (ret == 0)
		ret = meta_txn_begin_cached(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = commit_macs(s, t);
	for (size_t i = 0; i < s->n && ret == 0; i++) {
		struct stage_ent *e = &s->ents[i];
		bp_key(e->ds_id, e->recno, key);
		if (e->bp.flags & BP_F_HOLE) {
			ret = meta_del(t, META_BP, key, sizeof(key));
			if (ret == -ENOENT)
				ret = 0;
		} else {
			bp_encode(&e->bp, val);
			ret = meta_put(t, META_BP, key, sizeof(key), val, sizeof(val));
		}
	}
	/* records of destroyed datasets; their frees join this txg's */
	size_t nfrees_before = s->nfrees;
	for (size_t i = 0; i < s->ntasks && ret == 0; i++)
		ret = s->tasks[i].commit(t, s->tasks[i].arg, free_kept, s);
	for (size_t i = 0; i < s->ngone && ret == 0; i++) {
		struct gone_ctx g = { s };
		uint8_t prefix[8], *pw = prefix;
		put_u64(&pw, s->gone[i].id);
		ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 1, free_gone, &g);
		if (ret == 0)
			ret = bpmac_forget(t, s->gone[i].id);
		if (ret == 0)
			ret = forget_record(t, &s->gone[i]);

	}
	w = txgbuf;
	put_u64(&w, s->txg);
	if (ret == 0)
		ret = meta_put(t, META_POOL, "txg", 3, txgbuf, sizeof(txgbuf));
	/* a side gone out of service since the last commit: durable with this one */
	if (ret == 0)
		ret = sides = lunset_save_sides(p, t);
	/* and the list of records with errors; either put, the commit goes on */
	if (ret >= 0)
		ret = errs = errlog_save(p, t);
	if (ret > 0)
		ret = 0;
	if (ret == 0 && (!(want = calloc(STOR_LUNS_MAX, 1)) ||
			 !(flushed = calloc(STOR_LUNS_MAX, sizeof(*flushed)))))
		ret = -ENOMEM;
	/* the LUNs get the txg before LMDB does (LMDB is their cache): the log
	 * record's copies go out with the txg's data, one flush round makes both
	 * durable, then the uberblocks name the record */
	if (ret == 0) {
		ret = metalog_write(p, t, s->txg, want);
		written = ret == 0;
	}
	if (ret == 0)
		ret = flush_round(p, s, want, flushed);
	if (ret == 0) {
		ret = metalog_publish(p, flushed);
		on_luns = ret == 1;
		ret = ret < 0 ? ret : 0;
	} else if (written) {
		metalog_abort(p);
	}
	free(want);
	free(flushed);
	if (ret < 0) {
		meta_txn_abort(t);
		s->nfrees = nfrees_before;
		if (sides > 0)
			lunset_sides_undo(p);
		if (errs > 0)
			errlog_undo(p);
		return ret;
	}
	ret = meta_txn_commit(t);
	if (ret < 0) {
		s->nfrees = nfrees_before;
		if (sides > 0)
			lunset_sides_undo(p);
		if (errs > 0)
			errlog_undo(p);
		return ret;
	}
	atomic_fetch_add(&p->freed, metalog_committed(p));
	/* a txg the log could not take lives in LMDB alone: sync all of it. A
	 * failure is not a failed commit (retrying would apply the MAC changes
	 * twice): LMDB has it, and the next commit's sync writes it out */
	if (!on_luns && (ret = meta_sync(p->meta)) < 0)
		metalog_notef(p, "LMDB sync failed after txg %llu: %s", (unsigned long long)s->txg,
			      stor_strerror(ret));
	return 0;
}

int txg_enlist(struct stor_pool *p, const struct txg_task *task)
{
	/* only from a txg_close_fn: the txg closes under both */
	STOR_ASSERT_WRHELD(&p->hold);
	STOR_ASSERT_HELD(&p->stage_lock);

	return enlist_locked(p->open, task);
}

static int sync_hooked(struct stor_pool *p, uint64_t min, txg_close_fn fn, void *arg);

int txg_sync(struct stor_pool *p, uint64_t min)
{
	return sync_hooked(p, min, NULL, NULL);
}

int txg_sync_close(struct stor_pool *p, txg_close_fn fn, void *arg)
{
	return sync_hooked(p, 0, fn, arg);
}

/* Entries of a stage whose commit is worth a trim: some MiB of arrays. */
#define TRIM_ENTS (64u * 1024)

/*
 * After a commit that freed a stage of @freed entries: give the heap back
 * if the writes have stopped. glibc keeps what is freed in its arenas, and
 * the daemon's workers trim only when they go idle, which is before the
 * commit frees their writes' stage: a loop that made, filled, wrote, read
 * and destroyed 192 thick volumes kept 52 MiB of RssAnon where a trim
 * left 25. Not while writes go on (an open stage near as large): the
 * trim takes every arena's lock, and the next stage would grow again.
 */
static void trim_after_commit(struct stor_pool *p, size_t freed)
{
	size_t open;

	if (freed < TRIM_ENTS)
		return;
	pthread_mutex_lock(&p->stage_lock);
	open = p->open ? p->open->n : 0;
	pthread_mutex_unlock(&p->stage_lock);
	if (open < freed / 16)
		stor_heap_trim();
}

static int sync_hooked(struct stor_pool *p, uint64_t min, txg_close_fn fn, void *arg)
{
	struct stage *s, *next;
	int ret = 0, retried;
	size_t freed = 0;

	pthread_mutex_lock(&p->commit_lock);
	for (;;) {
		if (atomic_load(&p->suspended) == STOR_SUSPEND_LUN) {
			ret = STOR_ESUSPENDED;
			break;
		}
		if (min && atomic_load(&p->synced_txg) >= min)
			break;
		retried = p->syncing != NULL;
		if (!retried) {
			next = stage_new(p, 0);
			if (!next) {
				ret = -ENOMEM;
				break;
			}
			pthread_rwlock_wrlock(&p->hold);
			pthread_mutex_lock(&p->stage_lock);
			/* the hook's changes close this txg: nothing staged after
			 * them can join it */
			if (fn && (ret = fn(p, p->open->txg, arg)) < 0) {
				pthread_mutex_unlock(&p->stage_lock);
				pthread_rwlock_unlock(&p->hold);
				stage_free(next);
				break;
			}
			/* nothing staged, and no metadata committed since the last
			 * record (a dataset created, a property set, a key changed) */
			if (!fn && stage_empty(p->open) && !meta_pending(p->meta) && !metalog_dirty(p) &&
			    !atomic_load(&p->sides_dirty) && !atomic_load(&p->errlog.dirty)) {
				pthread_mutex_unlock(&p->stage_lock);
				pthread_rwlock_unlock(&p->hold);
				stage_free(next);
				break;
			}
			fn = NULL;
			next->txg = p->open->txg + 1;
			p->syncing = p->open;
			p->open = next;
			pthread_mutex_unlock(&p->stage_lock);
			pthread_rwlock_unlock(&p->hold);
		}
		s = p->syncing;
		ret = commit_stage(p, s);
		if (ret == -ENOSPC && meta_grow(p->meta) == 1)
			ret = commit_stage(p, s); /* the map was full: once more in a larger one */
		if (ret < 0) {
			/* the stage stays and the next sync retries it; until one
			 * succeeds, no write is acknowledged into a stage that may
			 * never commit */
			int none = STOR_SUSPEND_NONE;

			if (atomic_load(&p->suspended) != STOR_SUSPEND_LUN)
				atomic_store(&p->suspend_error, ret);
			/* said once, as it begins: every retry fails alike until one does not */
			if (atomic_compare_exchange_strong(&p->suspended, &none, STOR_SUSPEND_META))
				EVENT(STOR_EV_POOL_SUSPEND, p->name,
				      EV_STR("reason", "a metadata commit failed"),
				      EV_STR("error", stor_strerror(ret)));
			break;
		}
		{
			int meta = STOR_SUSPEND_META;

			if (atomic_compare_exchange_strong(&p->suspended, &meta, 0))
				EVENT(STOR_EV_POOL_RESUME, p->name,
				      EV_STR("reason", "a metadata commit succeeded"));
		}
		pthread_mutex_lock(&p->stage_lock);
		p->syncing = NULL;
		pthread_mutex_unlock(&p->stage_lock);
		atomic_store(&p->synced_txg, s->txg);
		txg_read_synchronize(p);
		for (size_t i = 0; i < s->nfrees; i++)
			if (alloc_put(p->alloc, s->frees[i].lun, s->frees[i].sector,
				      s->frees[i].n) == 0)
				atomic_fetch_add(&p->freed, s->frees[i].n);
		freed += s->n;
		stage_free(s);
		if (!retried)
			break; /* what was open at the call is durable now */
	}
	pthread_mutex_unlock(&p->commit_lock);
	trim_after_commit(p, freed);
	return ret;
}

/* Does @s give space back when it commits: extents it replaced, datasets
 * or snapshots it destroys? */
static int stage_frees(const struct stage *s)
{
	return s && (s->nfrees || s->ngone || s->ntasks);
}

uint64_t txg_freed(struct stor_pool *p)
{
	return atomic_load(&p->freed);
}

int txg_sync_for_space(struct stor_pool *p, uint64_t *mark)
{
	uint64_t was = *mark;
	int pending, ret = 0;

	pthread_mutex_lock(&p->stage_lock);
	pending = stage_frees(p->open) || stage_frees(p->syncing);
	pthread_mutex_unlock(&p->stage_lock);
	/* a commit since @mark (the timer's, another writer's) may have given
	 * back what was missing: then no sync is needed to try again */
	if (pending && atomic_load(&p->freed) == was)
		ret = txg_sync(p, 0);
	*mark = atomic_load(&p->freed);
	if (ret < 0)
		return ret;
	return *mark != was;
}

static void *timer_main(void *arg)
{
	struct stor_pool *p = arg;
	unsigned ms = p->opts.txg_timeout_ms ? p->opts.txg_timeout_ms : 5000;
	char name[16];

	/* named after the pool as imported (top -H, perf): the commits of txg_timeout */
	snprintf(name, sizeof(name), "txg:%s", p->name);
	(void)pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&p->timer_lock);
	while (!p->timer_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&p->timer_cond, &p->timer_lock, &ts);
		if (p->timer_stop)
			break;
		pthread_mutex_unlock(&p->timer_lock);
		lunset_check_gone(p); /* a side whose file went: out, with this commit */
		txg_sync(p, 0); /* errors are retried on the next tick */
		pthread_mutex_lock(&p->timer_lock);
	}
	pthread_mutex_unlock(&p->timer_lock);
	return NULL;
}

int txg_init(struct stor_pool *p, uint64_t last_txg,
	     int (*keep_mac)(struct snap *s, struct mac_key **out))
{
	pthread_rwlockattr_t ra;
	pthread_condattr_t ca;

	p->open = stage_new(p, last_txg + 1);
	if (!p->open)
		return -ENOMEM;
	atomic_store(&p->synced_txg, last_txg);
	p->keep_mac = keep_mac;
	pthread_rwlockattr_init(&ra);
	/* a commit must not starve behind a steady stream of writers */
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&p->hold, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&p->stage_lock, NULL);
	pthread_mutex_init(&p->commit_lock, NULL);
	pthread_mutex_init(&p->sync_lock, NULL);
	pthread_mutex_init(&p->timer_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->timer_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&p->timer, NULL, timer_main, p) != 0)
		return -EAGAIN;
	p->timer_started = 1;
	return 0;
}

int txg_fini(struct stor_pool *p)
{
	int ret;

	if (!p->open)
		return 0;
	if (p->timer_started) {
		pthread_mutex_lock(&p->timer_lock);
		p->timer_stop = 1;
		pthread_cond_signal(&p->timer_cond);
		pthread_mutex_unlock(&p->timer_lock);
		pthread_join(p->timer, NULL);
		p->timer_started = 0;
	}
	ret = txg_sync(p, 0);
	stage_free(p->open);
	stage_free(p->syncing);
	p->open = p->syncing = NULL;
	pthread_rwlock_destroy(&p->hold);
	pthread_mutex_destroy(&p->stage_lock);
	pthread_mutex_destroy(&p->commit_lock);
	pthread_mutex_destroy(&p->sync_lock);
	pthread_mutex_destroy(&p->timer_lock);
	pthread_cond_destroy(&p->timer_cond);
	return ret;
}
