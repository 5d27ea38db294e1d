/* SPDX-License-Identifier: MIT */
/**
 * The data cache: plaintext records keyed by (dataset GUID, record number).
 *
 * Byte-bounded (each entry costs its length plus CACHE_ENTRY_OVERHEAD), split
 * into shards by a hash of the key, each with its own lock, so there is no
 * global lock on any path. The default policy is S3-FIFO (a small FIFO for
 * new entries, a main FIFO for entries seen twice, a ghost list of keys
 * recently evicted from the small one): a one-pass scan goes through the
 * small FIFO and never pushes the hot set out. A hit takes its shard's lock
 * shared only, so hits in one shard run side by side.
 *
 * Caveats
 * - Thread safety: every call may be made from any thread at once, except
 *   cache_destroy(), which must not race with any other call.
 * - Freshness: a reader takes cache_gen() before it looks up the block
 *   pointer, reads and opens the record, then passes that generation to
 *   cache_put(). A writer calls cache_drop() after its new block pointer is
 *   visible to readers. A put whose generation is older than a drop of its
 *   key (or of its dataset) is refused, so a reader racing a writer never
 *   installs old data. Generations are kept per slot (a hash of the key),
 *   so a drop may refuse a racing put of another key too: a lost insert,
 *   never wrong data.
 * - Plaintext: entries are wiped (explicit_bzero) before their memory is
 *   freed, whether evicted, dropped, replaced or destroyed.
 * - Off: a cache of 0 bytes keeps no data; get misses and put does nothing.
 *   Drops still advance generations, so a later cache_resize() up can never
 *   be fed a record read before the drop.
 * - All calls take a NULL cache as an off one.
 */
#ifndef STOR_CACHE_H
#define STOR_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct cache;

/** Bytes charged per entry on top of its data: the entry header, its hash
 * chain link and the allocator's own header, roughly. */
#define CACHE_ENTRY_OVERHEAD 96

/** Shards of a cache made by cache_create(); the byte bound is split evenly,
 * so a record larger than bytes / CACHE_SHARDS is never cached. */
#define CACHE_SHARDS 16

enum cache_policy {
	CACHE_S3FIFO = 0, /* the default: scan-resistant */
	CACHE_LRU,        /* plain LRU, for comparison (bench and tests) */
};

/**
 * Create a cache of at most @bytes bytes (0: off, see cache_resize()).
 * @param[out] out  the cache, NULL on failure
 * @return 0 or -ENOMEM
 */
int cache_create(size_t bytes, struct cache **out);

/**
 * cache_create() with a chosen policy and shard count (0: CACHE_SHARDS;
 * rounded up to a power of two, at most 1024). For the policy bench and tests.
 * @return 0, -EINVAL (unknown policy) or -ENOMEM
 */
int cache_create_policy(size_t bytes, enum cache_policy policy, unsigned nshards,
			struct cache **out);

/** Wipe and free every entry and the cache. NULL is a no-op. */
void cache_destroy(struct cache *c);

/** Set the byte bound at run time. Shrinking evicts at once; 0 empties the
 * cache and turns it off. */
void cache_resize(struct cache *c, size_t bytes);

/** The generation of a key, to pass to cache_put() (see Freshness). */
uint64_t cache_gen(struct cache *c, uint64_t ds_guid, uint64_t recno);

/**
 * Copy a cached record into @buf.
 * @param len  the record's length; an entry of another length is a miss
 * @return 0 (a hit), -ENOENT (a miss, or the cache is off)
 */
int cache_get(struct cache *c, uint64_t ds_guid, uint64_t recno, void *buf, size_t len);

/**
 * Insert a copy of a record read with generation @gen. Does nothing if the
 * cache is off, @gen is stale, the record does not fit a shard, or memory
 * runs out: the cache is only ever a hint.
 */
void cache_put(struct cache *c, uint64_t ds_guid, uint64_t recno, const void *buf, size_t len,
	       uint64_t gen);

/** Remove a record (overwrite, discard) and advance its generation. */
void cache_drop(struct cache *c, uint64_t ds_guid, uint64_t recno);

/** Remove every record of a dataset (destroy, unload-key), wiped, and
 * advance every generation so no read in flight can put one back. */
void cache_drop_ds(struct cache *c, uint64_t ds_guid);

struct cache_stats {
	uint64_t hits, misses;  /* gets; not counted while the cache is off */
	uint64_t inserts;       /* puts that added an entry */
	uint64_t evictions;     /* entries pushed out by the policy or a shrink */
	uint64_t bytes;         /* charged bytes now held, overhead included */
	uint64_t entries;       /* entries now held */
	uint64_t capacity;      /* the byte bound */
};

/** A snapshot of the counters (each shard's read under its lock). */
void cache_stats(struct cache *c, struct cache_stats *st);

/**
 * The engine's data cache: one per process, made on first use, 0 bytes (off)
 * until stor_cache_set_size(). NULL if it could not be made (an off cache).
 * Writers and droppers use this one, even while it is off (see Off).
 */
struct cache *cache_data(void);
/** cache_data() while its size is above 0, else NULL: readers skip it. */
struct cache *cache_data_on(void);

#endif
