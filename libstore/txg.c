/* SPDX-License-Identifier: MIT */
/*
 * Transaction groups (see txg.h). Invariants:
 * - a block pointer reaches LMDB only after the LUN data it points to has
 *   been fsync'ed (commit: fsync dirty LUNs, then one LMDB transaction);
 * - an extent freed in txg N goes back to the allocator only after N is
 *   durable and every reader section that might have looked it up is over;
 * - lookups see the open txg, then the committing one, then LMDB, all taken
 *   under stage_lock so no committed-but-unstaged gap is visible.
 * One commit runs at a time (commit_lock); a failed commit keeps its stage
 * and is retried by the next one, so nothing staged is ever dropped.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "array.h"
#include "lun.h"
#include "meta.h"
#include "store_impl.h"

struct stage_ent {
	uint64_t ds_id, recno;
	struct bp bp;
	struct mac_key *mk; /* encrypted datasets: held by the stage's mks */
	uint8_t delta[MAC_LEN]; /* leaf(what the commit replaces) ^ leaf(bp), bpmac.c */
	int used;
};

struct extent {
	uint16_t lun;
	uint32_t n;
	uint64_t sector;
};

struct stage {
	uint64_t txg;
	struct stage_ent *tab;
	size_t cap, n;
	struct extent *frees;
	size_t nfrees, capfrees;
	struct gone {
		uint64_t id;
		char *name;
	} *gone; /* destroyed datasets */
	size_t ngone;
	struct mac_key **mks; /* a reference on the MAC key of each dataset staged */
	size_t nmks, capmks;
	size_t resv; /* entries txg_reserve() promised room for, not staged yet */
	uint8_t dirty[STOR_LUNS_MAX];
};

static struct stage *stage_new(uint64_t txg)
{
	struct stage *s = calloc(1, sizeof(*s));

	if (s)
		s->txg = txg;
	return s;
}

static void stage_free(struct stage *s)
{
	if (!s)
		return;
	free(s->tab);
	free(s->frees);
	for (size_t i = 0; i < s->ngone; i++)
		free(s->gone[i].name);
	free(s->gone);
	for (size_t i = 0; i < s->nmks; i++)
		mac_key_put(s->mks[i]);
	free(s->mks);
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
	return s->n == 0 && s->nfrees == 0 && s->ngone == 0;
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
	return stage_empty(p->open) && !p->syncing;
}

static size_t slot_of(uint64_t ds_id, uint64_t recno, size_t cap)
{
	uint64_t h = (ds_id * 0x9e3779b97f4a7c15ull) ^ (recno * 0xc2b2ae3d27d4eb4full);

	h ^= h >> 29;
	return (size_t)(h & (cap - 1));
}

static struct stage_ent *stage_find(struct stage *s, uint64_t ds_id, uint64_t recno)
{
	if (!s || s->cap == 0)
		return NULL;
	for (size_t i = slot_of(ds_id, recno, s->cap);; i = (i + 1) & (s->cap - 1)) {
		struct stage_ent *e = &s->tab[i];
		if (!e->used)
			return NULL;
		if (e->ds_id == ds_id && e->recno == recno)
			return e;
	}
}

static int stage_grow(struct stage *s)
{
	size_t cap = s->cap ? s->cap * 2 : 1024;
	struct stage_ent *tab = calloc(cap, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < s->cap; i++) {
		struct stage_ent *e = &s->tab[i];
		size_t j;
		if (!e->used)
			continue;
		for (j = slot_of(e->ds_id, e->recno, cap); tab[j].used; j = (j + 1) & (cap - 1))
			;
		tab[j] = *e;
	}
	free(s->tab);
	s->tab = tab;
	s->cap = cap;
	return 0;
}

static struct stage_ent *stage_insert(struct stage *s, uint64_t ds_id, uint64_t recno)
{
	struct stage_ent *e = stage_find(s, ds_id, recno);
	size_t i;

	if (e)
		return e;
	if ((s->n + 1) * 4 > s->cap * 3 && stage_grow(s) < 0)
		return NULL;
	for (i = slot_of(ds_id, recno, s->cap); s->tab[i].used; i = (i + 1) & (s->cap - 1))
		;
	e = &s->tab[i];
	memset(e, 0, sizeof(*e));
	e->used = 1;
	e->ds_id = ds_id;
	e->recno = recno;
	s->n++;
	return e;
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
	while ((s->n + n) * 4 > s->cap * 3)
		if (stage_grow(s) < 0)
			return -ENOMEM;
	if (s->capfrees < s->nfrees + n) {
		struct extent *f = realloc(s->frees, (s->nfrees + n) * sizeof(*f));
		if (!f)
			return -ENOMEM;
		s->frees = f;
		s->capfrees = s->nfrees + n;
	}
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

int txg_stage(struct stor_pool *p, uint64_t ds_id, uint64_t recno, const struct bp *bp,
	      struct mac_key *mk, struct bp *old, int *had_old)
{
	struct meta_txn *t = NULL;
	struct stage_ent *e;
	uint8_t delta[MAC_LEN] = { 0 }, enc[BP_LEN];
	int ret = 0;

	*had_old = 0;
	/* the MAC change of this pointer, as the commit will need it: its own
	 * leaf now, the leaf of what it replaces once that is known */
	if (mk && !(bp->flags & BP_F_HOLE)) {
		bp_encode(bp, enc);
		ret = bpmac_leaf_xor(mk, recno, enc, delta);
		if (ret < 0)
			return ret;
	}
	pthread_mutex_lock(&p->stage_lock);
	e = stage_find(p->open, ds_id, recno);
	if (!e)
		e = stage_find(p->syncing, ds_id, recno);
	if (e) {
		if (!(e->bp.flags & BP_F_HOLE)) {
			*old = e->bp;
			*had_old = 1;
		}
	} else {
		/* snapshot taken under stage_lock: consistent with the stages */
		ret = meta_rtxn_get(p->meta, &t);
		if (ret == 0) {
			ret = lookup_committed(t, ds_id, recno, old);
			meta_rtxn_put(t);
			if (ret == 0)
				*had_old = 1;
			else if (ret == -ENOENT)
				ret = 0;
		}
	}
	if (ret == 0)
		ret = stage_hold_mk(p->open, mk);
	if (ret == 0 && mk && *had_old) {
		bp_encode(old, enc);
		ret = bpmac_leaf_xor(mk, recno, enc, delta);
	}
	if (ret < 0)
		goto out;
	if (*had_old) {
		ret = stage_free_extent(p->open, old);
		if (ret < 0)
			goto out;
	}
	e = stage_insert(p->open, ds_id, recno);
	if (!e) {
		if (*had_old)
			p->open->nfrees--;
		ret = -ENOMEM;
		goto out;
	}
	e->bp = *bp;
	e->mk = mk;
	/* an entry staged again in this txg sums its changes: old ^ mid ^ mid ^ new */
	for (int i = 0; i < MAC_LEN; i++)
		e->delta[i] ^= delta[i];
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

int txg_forget_ds(struct stor_pool *p, uint64_t ds_id, const char *name)
{
	struct stage *s;
	struct gone *gone;
	char *dup = strdup(name);

	if (!dup)
		return -ENOMEM;
	pthread_rwlock_wrlock(&p->hold);
	pthread_mutex_lock(&p->stage_lock);
	s = p->open;
	gone = realloc(s->gone, (s->ngone + 1) * sizeof(*gone));
	if (!gone) {
		pthread_mutex_unlock(&p->stage_lock);
		pthread_rwlock_unlock(&p->hold);
		free(dup);
		return -ENOMEM;
	}
	s->gone = gone;
	/*
	 * The dataset's staged pointers stay: the commit writes them, then
	 * frees every extent LMDB lists for the dataset and deletes them. The
	 * extents they replaced are on this stage's free list already, so each
	 * extent is freed once (taking the staged ones out here would free
	 * them, and then the commit would free the replaced ones again).
	 */
	s->gone[s->ngone++] = (struct gone){ ds_id, dup };
	pthread_mutex_unlock(&p->stage_lock);
	pthread_rwlock_unlock(&p->hold);
	return 0;
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

/*
 * The MAC changes of a commit: each staged pointer of an encrypted dataset
 * carries leaf(what it replaces) ^ leaf(itself) from txg_stage(), where the
 * replaced pointer was at hand, so the commit reads no old pointer back.
 */
static int commit_macs(struct stage *s, struct meta_txn *t)
{
	struct bpmac_change *ch;
	size_t n = 0;
	int ret;

	for (size_t i = 0; i < s->cap; i++)
		n += s->tab[i].used && s->tab[i].mk;
	if (!n)
		return 0;
	ch = malloc(n * sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	n = 0;
	for (size_t i = 0; i < s->cap; i++) {
		struct stage_ent *e = &s->tab[i];

		if (!e->used || !e->mk)
			continue;
		ch[n] = (struct bpmac_change){ .ds_id = e->ds_id, .recno = e->recno, .mk = e->mk };
		memcpy(ch[n].delta, e->delta, MAC_LEN);
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

static int commit_stage(struct stor_pool *p, struct stage *s)
{
	struct meta_txn *t = NULL;
	uint8_t key[BP_KEY_LEN], val[BP_LEN], txgbuf[8], *w;
	int ret = 0;

	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		if (!s->dirty[i])
			continue;
		ret = lun_flush(p->luns[i].lun);
		if (ret < 0) {
			/* after a failed fsync the kernel may have dropped the dirty
			 * pages: a retry could "succeed" over lost data, so stop */
			atomic_store(&p->suspend_error, ret);
			atomic_store(&p->suspended, STOR_SUSPEND_LUN);
			lunset_failed(p, p->luns[i].lun);
			return ret;
		}
		s->dirty[i] = 0;
	}
	/* room for every pointer, its MAC group and the tree pages above, twice over */
	ret = meta_reserve(p->meta, s->n * 2 * (BP_KEY_LEN + BP_LEN + 2 * MAC_LEN + 64));
	if (ret == 0)
		ret = meta_txn_begin(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = commit_macs(s, t);
	for (size_t i = 0; i < s->cap && ret == 0; i++) {
		struct stage_ent *e = &s->tab[i];
		if (!e->used)
			continue;
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
	if (ret < 0) {
		meta_txn_abort(t);
		s->nfrees = nfrees_before;
		return ret;
	}
	ret = meta_txn_commit(t);
	if (ret < 0)
		s->nfrees = nfrees_before;
	return ret;
}

int txg_sync(struct stor_pool *p, uint64_t min)
{
	struct stage *s, *next;
	int ret = 0, retried;

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
			next = stage_new(0);
			if (!next) {
				ret = -ENOMEM;
				break;
			}
			pthread_rwlock_wrlock(&p->hold);
			pthread_mutex_lock(&p->stage_lock);
			if (stage_empty(p->open)) {
				pthread_mutex_unlock(&p->stage_lock);
				pthread_rwlock_unlock(&p->hold);
				stage_free(next);
				break;
			}
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
			if (atomic_load(&p->suspended) != STOR_SUSPEND_LUN) {
				atomic_store(&p->suspend_error, ret);
				atomic_store(&p->suspended, STOR_SUSPEND_META);
			}
			break;
		}
		{
			int meta = STOR_SUSPEND_META;
			atomic_compare_exchange_strong(&p->suspended, &meta, 0);
		}
		pthread_mutex_lock(&p->stage_lock);
		p->syncing = NULL;
		pthread_mutex_unlock(&p->stage_lock);
		atomic_store(&p->synced_txg, s->txg);
		txg_read_synchronize(p);
		for (size_t i = 0; i < s->nfrees; i++)
			alloc_put(p->alloc, s->frees[i].lun, s->frees[i].sector, s->frees[i].n);
		stage_free(s);
		if (!retried)
			break; /* what was open at the call is durable now */
	}
	pthread_mutex_unlock(&p->commit_lock);
	return ret;
}

static void *timer_main(void *arg)
{
	struct stor_pool *p = arg;
	unsigned ms = p->opts.txg_timeout_ms ? p->opts.txg_timeout_ms : 5000;

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
		txg_sync(p, 0); /* errors are retried on the next tick */
		pthread_mutex_lock(&p->timer_lock);
	}
	pthread_mutex_unlock(&p->timer_lock);
	return NULL;
}

int txg_init(struct stor_pool *p, uint64_t last_txg)
{
	pthread_rwlockattr_t ra;
	pthread_condattr_t ca;

	p->open = stage_new(last_txg + 1);
	if (!p->open)
		return -ENOMEM;
	atomic_store(&p->synced_txg, last_txg);
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
