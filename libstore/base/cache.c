/* SPDX-License-Identifier: MIT */
/*
 * The data cache of plaintext records (cache.h). It owns the shards, their
 * hash tables, the S3-FIFO queues and ghost, the LRU kept for comparison,
 * and the per-slot generations that keep a racing reader from installing
 * old data.
 *
 * Invariants, per shard and under its lock held exclusive:
 * - used == sum of entry_cost() over the entries and used <= cap after
 *   every put, shrink or eviction;
 * - every entry is in the hash table and in exactly one queue (small or
 *   main; LRU uses main only);
 * - a generation slot only grows, and only under the lock, so a put that
 *   compares its generation under the same lock sees every drop before it.
 * (The functions that change a shard check that: STOR_ASSERT_WRHELD.)
 * A hit holds the lock shared and bumps the entry's frequency atomically
 * (S3-FIFO never moves an entry on a hit); LRU must relink, so it takes the
 * lock exclusive. Memory is wiped and freed after the lock is dropped.
 * Nothing here blocks on I/O or calls out of the module.
 *
 * The engine's own cache is one process-wide instance (cache_data()), made
 * on first use and off until stor_cache_set_size(); it lives here, not with
 * the record pipeline, because pools, datasets and key state drop from it
 * too, and none of them should need record.c for that.
 *
 * Why S3-FIFO: contrib/bench/cache_sim, 1M accesses zipfian over 100k 8 KiB
 * records, cache 10% of them, with every 5th access the next record of a
 * one-pass scan over 200k others: hit ratio of the zipfian accesses 0.661 /
 * 0.771 / 0.855 (s = 0.9 / 1.0 / 1.1) against 0.552 / 0.684 / 0.794 for
 * LRU, and 0.667 / 0.779 / 0.867 against 0.603 / 0.735 / 0.842 with no scan.
 * Promoting from the small FIFO after one hit beat two hits on every trace.
 */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache.h"
#include "base/stor_assert.h"
#include "store.h"

#define GEN_SLOTS 256      /* generation slots per shard */
#define SHARDS_MAX 1024
#define BUCKETS_MIN 64
#define GHOST_WAYS 4       /* ghost slots per ghost bucket */
#define FREQ_MAX 3
#define SMALL_PERCENT 10   /* S3-FIFO: the small FIFO's share of a shard */

enum { Q_SMALL, Q_MAIN };

struct centry {
	struct centry *hnext;       /* hash chain; victim list once unlinked */
	struct centry *prev, *next; /* queue: prev is newer, next is older */
	uint64_t guid, recno, hash;
	uint32_t len;
	uint8_t queue;
	_Atomic uint8_t freq;       /* bumped by hits under the shared lock */
	alignas(16) uint8_t data[];
};

struct queue {
	struct centry *head, *tail; /* head: newest */
	size_t bytes, n;
};

/* Keys recently evicted from the small FIFO, as fingerprints with the ghost
 * clock at insertion: a fingerprint is live while fewer than main.n others
 * were added after it. Lossy (a full bucket forgets its oldest), which only
 * costs a record one more pass through the small FIFO. */
struct ghost_slot {
	uint64_t fp, ts;
};

struct shard {
	pthread_rwlock_t lock;
	struct centry **buckets;
	size_t nbuckets, n;
	struct queue small, main;
	size_t cap, used;
	struct ghost_slot *ghost;
	size_t nghost; /* buckets of GHOST_WAYS slots */
	uint64_t ghost_clock;
	uint64_t inserts, evictions;
	atomic_uint_fast64_t hits, misses;
	_Atomic uint64_t gens[GEN_SLOTS];
} __attribute__((aligned(64)));

struct cache {
	enum cache_policy policy;
	unsigned nshards;
	_Atomic size_t capacity;
	struct shard *shards;
};

static size_t entry_cost(size_t len)
{
	return len + CACHE_ENTRY_OVERHEAD;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static uint64_t key_hash(uint64_t guid, uint64_t recno)
{
	return mix64(mix64(guid) ^ recno);
}

/* Shard from bits 48.., bucket from the low bits, generation slot from bits
 * 32..: independent parts of one hash. */
static struct shard *shard_of(const struct cache *c, uint64_t h)
{
	return &c->shards[(h >> 48) & (c->nshards - 1)];
}

static _Atomic uint64_t *gen_of(struct shard *s, uint64_t h)
{
	return &s->gens[(h >> 32) & (GEN_SLOTS - 1)];
}

static void wipe_free(struct centry *e)
{
	explicit_bzero(e, sizeof(*e) + e->len);
	free(e);
}

static void free_victims(struct centry *v)
{
	while (v) {
		struct centry *next = v->hnext;

		wipe_free(v);
		v = next;
	}
}

static void q_push_head(struct queue *q, struct centry *e)
{
	e->prev = NULL;
	e->next = q->head;
	if (q->head)
		q->head->prev = e;
	else
		q->tail = e;
	q->head = e;
	q->bytes += entry_cost(e->len);
	q->n++;
}

static void q_remove(struct queue *q, struct centry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		q->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		q->tail = e->prev;
	e->prev = e->next = NULL;
	q->bytes -= entry_cost(e->len);
	q->n--;
}

static struct queue *q_of(struct shard *s, const struct centry *e)
{
	return e->queue == Q_SMALL ? &s->small : &s->main;
}

static struct centry *find(const struct shard *s, uint64_t h, uint64_t guid, uint64_t recno)
{
	struct centry *e;

	for (e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && e->guid == guid && e->recno == recno)
			return e;
	return NULL;
}

/* Take @e out of the table and its queue and chain it on @victims. */
static void unlink_entry(struct shard *s, struct centry *e, struct centry **victims)
{
	struct centry **pp;

	STOR_ASSERT_WRHELD(&s->lock);
	pp = &s->buckets[e->hash & (s->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	q_remove(q_of(s, e), e);
	s->used -= entry_cost(e->len);
	s->n--;
	e->hnext = *victims;
	*victims = e;
}

/* Double the table when it is as full as it has buckets; on ENOMEM the
 * chains just grow longer. */
static void maybe_grow(struct shard *s)
{
	struct centry **nb;
	size_t i, nn;

	STOR_ASSERT_WRHELD(&s->lock);

	if (s->n <= s->nbuckets)
		return;
	nn = s->nbuckets * 2;
	nb = calloc(nn, sizeof(*nb));
	if (!nb)
		return;
	for (i = 0; i < s->nbuckets; i++) {
		struct centry *e = s->buckets[i];

		while (e) {
			struct centry *next = e->hnext;

			e->hnext = nb[e->hash & (nn - 1)];
			nb[e->hash & (nn - 1)] = e;
			e = next;
		}
	}
	free(s->buckets);
	s->buckets = nb;
	s->nbuckets = nn;

	/* the ghost remembers about as many keys as the shard holds entries */
	if (s->nghost * GHOST_WAYS < nn) {
		struct ghost_slot *g = calloc(nn / GHOST_WAYS * 2, sizeof(*g) * GHOST_WAYS);

		if (g) {
			free(s->ghost);
			s->ghost = g;
			s->nghost = nn / GHOST_WAYS * 2;
		}
	}
}

static struct ghost_slot *ghost_bucket(struct shard *s, uint64_t h)
{
	return &s->ghost[(h & (s->nghost - 1)) * GHOST_WAYS];
}

static void ghost_add(struct shard *s, uint64_t h)
{
	struct ghost_slot *b, *old;
	int i;

	STOR_ASSERT_WRHELD(&s->lock);

	if (!s->ghost)
		return;
	b = ghost_bucket(s, h);
	old = &b[0];
	for (i = 0; i < GHOST_WAYS; i++) {
		if (!b[i].fp) {
			old = &b[i];
			break;
		}
		if (b[i].ts < old->ts)
			old = &b[i];
	}
	old->fp = h | 1;
	old->ts = ++s->ghost_clock;
}

static bool ghost_take(struct shard *s, uint64_t h)
{
	struct ghost_slot *b;
	size_t live;
	int i;

	STOR_ASSERT_WRHELD(&s->lock);
	live = s->main.n > 16 ? s->main.n : 16;
	if (!s->ghost)
		return false;
	b = ghost_bucket(s, h);
	for (i = 0; i < GHOST_WAYS; i++) {
		if (b[i].fp == (h | 1)) {
			bool hit = s->ghost_clock - b[i].ts < live;

			b[i].fp = 0;
			return hit;
		}
	}
	return false;
}

/*
 * Evict one entry. S3-FIFO: while the small FIFO holds more than its share
 * (or main is empty), its oldest entry moves to main if it was hit while in
 * small, or leaves (its key to the ghost) if not; otherwise main's oldest
 * entry goes round again with one frequency less if it was hit, or leaves.
 * Returns false when the shard is empty.
 */
static bool evict_one(const struct cache *c, struct shard *s, struct centry **victims)
{
	struct centry *e;

	STOR_ASSERT_WRHELD(&s->lock);

	if (c->policy == CACHE_LRU) {
		e = s->main.tail;
		if (!e)
			return false;
		unlink_entry(s, e, victims);
		s->evictions++;
		return true;
	}
	for (;;) {
		if (s->small.n && (s->small.bytes > s->cap / 100 * SMALL_PERCENT || !s->main.n)) {
			e = s->small.tail;
			if (atomic_load_explicit(&e->freq, memory_order_relaxed) > 0) {
				q_remove(&s->small, e);
				e->queue = Q_MAIN;
				atomic_store_explicit(&e->freq, 0, memory_order_relaxed);
				q_push_head(&s->main, e);
				continue;
			}
			ghost_add(s, e->hash);
			unlink_entry(s, e, victims);
			s->evictions++;
			return true;
		}
		e = s->main.tail;
		if (!e)
			return false;
		uint8_t f = atomic_load_explicit(&e->freq, memory_order_relaxed);

		if (f > 0) {
			atomic_store_explicit(&e->freq, f - 1, memory_order_relaxed);
			q_remove(&s->main, e);
			q_push_head(&s->main, e);
			continue;
		}
		unlink_entry(s, e, victims);
		s->evictions++;
		return true;
	}
}

static void shard_fini(struct shard *s)
{
	struct centry *victims = NULL;

	/* no one else uses the shard any more: taken for unlink_entry's check */
	pthread_rwlock_wrlock(&s->lock);
	while (s->small.tail)
		unlink_entry(s, s->small.tail, &victims);
	while (s->main.tail)
		unlink_entry(s, s->main.tail, &victims);
	pthread_rwlock_unlock(&s->lock);
	free_victims(victims);
	free(s->buckets);
	free(s->ghost);
	pthread_rwlock_destroy(&s->lock);
}

static int shard_init(struct shard *s, size_t cap)
{
	pthread_rwlockattr_t attr;
	int ret;

	memset(s, 0, sizeof(*s));
	s->cap = cap;
	s->nbuckets = BUCKETS_MIN;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	s->nghost = BUCKETS_MIN / GHOST_WAYS * 2;
	s->ghost = calloc(s->nghost, sizeof(*s->ghost) * GHOST_WAYS);
	if (!s->buckets || !s->ghost) {
		free(s->buckets);
		free(s->ghost);
		return -ENOMEM;
	}
	/* hits take the lock shared: writers (puts, drops) must not starve */
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	ret = -pthread_rwlock_init(&s->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (ret < 0) {
		free(s->buckets);
		free(s->ghost);
	}
	return ret;
}

int cache_create_policy(size_t bytes, enum cache_policy policy, unsigned nshards,
			struct cache **out)
{
	struct cache *c = NULL;
	unsigned n = 1, i;
	int ret = 0;

	*out = NULL;
	if (policy != CACHE_S3FIFO && policy != CACHE_LRU)
		return -EINVAL;
	if (!nshards)
		nshards = CACHE_SHARDS;
	while (n < nshards && n < SHARDS_MAX)
		n <<= 1;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->policy = policy;
	c->shards = aligned_alloc(64, n * sizeof(*c->shards));
	if (!c->shards) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		ret = shard_init(&c->shards[i], bytes / n);
		if (ret < 0)
			goto out;
		c->nshards = i + 1;
	}
	atomic_store(&c->capacity, bytes);
out:
	if (ret < 0)
		cache_destroy(c);
	else
		*out = c;
	return ret;
}

int cache_create(size_t bytes, struct cache **out)
{
	return cache_create_policy(bytes, CACHE_S3FIFO, 0, out);
}

void cache_destroy(struct cache *c)
{
	unsigned i;

	if (!c)
		return;
	for (i = 0; i < c->nshards; i++)
		shard_fini(&c->shards[i]);
	free(c->shards);
	free(c);
}

void cache_resize(struct cache *c, size_t bytes)
{
	unsigned i;

	if (!c)
		return;
	atomic_store(&c->capacity, bytes);
	for (i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];
		struct centry *victims = NULL;

		pthread_rwlock_wrlock(&s->lock);
		s->cap = bytes / c->nshards;
		while (s->used > s->cap && evict_one(c, s, &victims))
			;
		pthread_rwlock_unlock(&s->lock);
		free_victims(victims);
	}
}

uint64_t cache_gen(struct cache *c, uint64_t ds_guid, uint64_t recno)
{
	uint64_t h;

	if (!c)
		return 0;
	h = key_hash(ds_guid, recno);
	/* acquire: pairs with the bump in a drop, which the writer makes after
	 * publishing its block pointer, so a reader that sees the new
	 * generation also sees the new block pointer */
	return atomic_load_explicit(gen_of(shard_of(c, h), h), memory_order_acquire);
}

int cache_get(struct cache *c, uint64_t ds_guid, uint64_t recno, void *buf, size_t len)
{
	struct shard *s;
	struct centry *e;
	uint64_t h;
	int ret = -ENOENT;

	if (!c || !atomic_load_explicit(&c->capacity, memory_order_relaxed))
		return -ENOENT;
	h = key_hash(ds_guid, recno);
	s = shard_of(c, h);
	if (c->policy == CACHE_LRU)
		pthread_rwlock_wrlock(&s->lock);
	else
		pthread_rwlock_rdlock(&s->lock);
	e = find(s, h, ds_guid, recno);
	if (e && e->len == len) {
		memcpy(buf, e->data, len);
		if (c->policy == CACHE_LRU) {
			q_remove(&s->main, e);
			q_push_head(&s->main, e);
		} else {
			/* racing hits may lose an increment: it is only a hint */
			uint8_t f = atomic_load_explicit(&e->freq, memory_order_relaxed);

			if (f < FREQ_MAX)
				atomic_store_explicit(&e->freq, f + 1, memory_order_relaxed);
		}
		ret = 0;
	}
	pthread_rwlock_unlock(&s->lock);
	atomic_fetch_add_explicit(ret ? &s->misses : &s->hits, 1, memory_order_relaxed);
	return ret;
}

void cache_put(struct cache *c, uint64_t ds_guid, uint64_t recno, const void *buf, size_t len,
	       uint64_t gen)
{
	struct centry *e = NULL, *old, *victims = NULL;
	struct shard *s;
	uint64_t h;

	if (!c || !len || len > UINT32_MAX ||
	    !atomic_load_explicit(&c->capacity, memory_order_relaxed))
		return;
	h = key_hash(ds_guid, recno);
	s = shard_of(c, h);
	/* copy before taking the lock, so the lock covers pointer work only */
	e = malloc(sizeof(*e) + len);
	if (!e)
		return;
	memset(e, 0, sizeof(*e));
	e->guid = ds_guid;
	e->recno = recno;
	e->hash = h;
	e->len = (uint32_t)len;
	memcpy(e->data, buf, len);

	pthread_rwlock_wrlock(&s->lock);
	if (atomic_load_explicit(gen_of(s, h), memory_order_relaxed) != gen ||
	    entry_cost(len) > s->cap)
		goto out;
	old = find(s, h, ds_guid, recno);
	if (old) {
		/* a record not dropped since is the same record: keep the
		 * entry and its place in the queues */
		if (old->len == len) {
			memcpy(old->data, buf, len);
			goto out;
		}
		unlink_entry(s, old, &victims);
	}
	while (s->used + entry_cost(len) > s->cap && evict_one(c, s, &victims))
		;
	if (c->policy == CACHE_S3FIFO && !ghost_take(s, h)) {
		e->queue = Q_SMALL;
		q_push_head(&s->small, e);
	} else {
		/* seen again soon after it left the small FIFO: straight to main */
		e->queue = Q_MAIN;
		q_push_head(&s->main, e);
	}
	e->hnext = s->buckets[h & (s->nbuckets - 1)];
	s->buckets[h & (s->nbuckets - 1)] = e;
	s->used += entry_cost(len);
	s->n++;
	s->inserts++;
	maybe_grow(s);
	e = NULL;
out:
	pthread_rwlock_unlock(&s->lock);
	if (e)
		wipe_free(e);
	free_victims(victims);
}

void cache_drop(struct cache *c, uint64_t ds_guid, uint64_t recno)
{
	struct centry *e, *victims = NULL;
	struct shard *s;
	uint64_t h;

	if (!c)
		return;
	h = key_hash(ds_guid, recno);
	s = shard_of(c, h);
	/* even when off: a resize up must not take a put read before this drop */
	pthread_rwlock_wrlock(&s->lock);
	atomic_fetch_add_explicit(gen_of(s, h), 1, memory_order_release);
	e = find(s, h, ds_guid, recno);
	if (e)
		unlink_entry(s, e, &victims);
	pthread_rwlock_unlock(&s->lock);
	free_victims(victims);
}

static void drop_queue(struct shard *s, struct queue *q, uint64_t guid, struct centry **victims)
{
	struct centry *e, *next;

	STOR_ASSERT_WRHELD(&s->lock);
	for (e = q->head; e; e = next) {
		next = e->next;
		if (e->guid == guid)
			unlink_entry(s, e, victims);
	}
}

void cache_drop_ds(struct cache *c, uint64_t ds_guid)
{
	unsigned i, j;

	if (!c)
		return;
	for (i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];
		struct centry *victims = NULL;

		pthread_rwlock_wrlock(&s->lock);
		/* every slot: a read of this dataset in flight may hash anywhere */
		for (j = 0; j < GEN_SLOTS; j++)
			atomic_fetch_add_explicit(&s->gens[j], 1, memory_order_release);
		drop_queue(s, &s->small, ds_guid, &victims);
		drop_queue(s, &s->main, ds_guid, &victims);
		pthread_rwlock_unlock(&s->lock);
		free_victims(victims);
	}
}

void cache_stats(struct cache *c, struct cache_stats *st)
{
	unsigned i;

	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	for (i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];

		pthread_rwlock_rdlock(&s->lock);
		st->hits += atomic_load_explicit(&s->hits, memory_order_relaxed);
		st->misses += atomic_load_explicit(&s->misses, memory_order_relaxed);
		st->inserts += s->inserts;
		st->evictions += s->evictions;
		st->bytes += s->used;
		st->entries += s->n;
		pthread_rwlock_unlock(&s->lock);
	}
	st->capacity = atomic_load(&c->capacity);
}

/* ---- the engine's data cache ---- */

static struct cache *data_cache;
static pthread_once_t data_once = PTHREAD_ONCE_INIT;
static atomic_bool data_on; /* a size above 0 was set: readers use it */

static void data_init(void)
{
	if (cache_create(0, &data_cache) < 0)
		data_cache = NULL; /* a NULL cache is an off one */
}

struct cache *cache_data(void)
{
	pthread_once(&data_once, data_init);
	return data_cache;
}

struct cache *cache_data_on(void)
{
	return atomic_load_explicit(&data_on, memory_order_acquire) ? data_cache : NULL;
}

int stor_cache_set_size(size_t bytes)
{
	if (!cache_data())
		return -ENOMEM;
	cache_resize(data_cache, bytes);
	atomic_store_explicit(&data_on, bytes != 0, memory_order_release);
	return 0;
}

void stor_cache_stats(struct stor_cache_stats *st)
{
	struct cache_stats cs;

	memset(st, 0, sizeof(*st));
	cache_stats(cache_data(), &cs);
	st->hits = cs.hits;
	st->misses = cs.misses;
	st->inserts = cs.inserts;
	st->evictions = cs.evictions;
	st->bytes = cs.bytes;
	st->entries = cs.entries;
	st->capacity = cs.capacity;
}
