/* SPDX-License-Identifier: MIT */
/*
 * The pool's metadata on its LUNs (format.h: log records, checkpoints, the
 * uberblock ring), of which LMDB is the cache. txg.c calls metalog_write()
 * and metalog_publish() inside each txg's LMDB transaction; pool.c calls
 * metalog_import() before it reads LMDB, to replay what LMDB lacks or to
 * rebuild it whole.
 */
#ifndef STOR_METALOG_H
#define STOR_METALOG_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct stor_pool;
struct meta;
struct meta_txn;
struct metalog;

int metalog_create(struct metalog **out);
void metalog_free(struct metalog *ml);

/** The key file now holds @buf (its whole bytes): the next commit logs them. */
int metalog_keys(struct stor_pool *p, const uint8_t *buf, size_t len);
/** The newest key file bytes the LUNs hold (after metalog_import), or NULL. */
const uint8_t *metalog_keys_get(struct stor_pool *p, size_t *len);
/** Has the next commit something to write even with no block pointer staged? */
int metalog_dirty(struct stor_pool *p);

/**
 * Write the log record of the txg @txg whose LMDB transaction @t holds
 * every change (or a checkpoint of all of @t) to its ditto copies, not yet
 * durable, and set @flush[lun] for each LUN that took one. The caller
 * flushes those LUNs (with the txg's data, in one round), then calls
 * metalog_publish() with the results, or metalog_abort().
 * @return 0 (also when the pool has no room: then LMDB commits alone and the
 *         LUNs lag), -ENOMEM, -EIO (no copy written)
 */
int metalog_write(struct stor_pool *p, struct meta_txn *t, uint64_t txg, uint8_t *flush);
/**
 * The copies' LUNs were flushed (@flushed[lun]: 0 or -errno): name the
 * record in an uberblock on every LUN, durable. The caller commits @t next.
 * @return 1 (the LUNs hold the txg), 0 (no room: LMDB alone holds it), -EIO
 *         (no copy or no uberblock durable)
 */
int metalog_publish(struct stor_pool *p, const int *flushed);
/** The commit failed after metalog_write(): give the record's extents back. */
void metalog_abort(struct stor_pool *p);
/** The LMDB commit after metalog_publish() succeeded: free what the log no longer needs.
 *  @return the sectors freed */
uint64_t metalog_committed(struct stor_pool *p);

/** The LUNs an import reads, by label index; NULL where none was found.
 *  A record's copy is named by its vdev's first LUN and read from any side
 *  found, so a mirror whose first side is gone still gives it. */
struct metalog_luns {
	struct lun *lun[STOR_LUNS_MAX];
	uint16_t vdev[STOR_LUNS_MAX]; /* the first LUN of each one's vdev, from its label */
	unsigned n; /* one past the highest index found */
	uint64_t guid;
};

/**
 * Find the newest uberblock on @luns and walk its log. With @m (an LMDB
 * whose "pool"/"txg" is @have_txg), replay into it the records newer than
 * that; a record set that starts past it with a checkpoint replaces every
 * table. Remembers the log's extents and key file for the open pool.
 * @return 1 (a log was found), 0 (no uberblock on any LUN), or an error
 *         (STOR_ECORRUPT: uberblocks but no log that verifies)
 */
int metalog_import(struct stor_pool *p, struct metalog_luns *luns, struct meta *m,
		   uint64_t have_txg, uint64_t *log_txg);
/**
 * Rewrite in place what metalog_import() found damaged beside a sound copy:
 * each log record copy that did not verify, from a copy that did, and the
 * uberblock it took into the ring of each LUN that lacks it; each durable.
 * Call once the pool's LUNs are writable. Notes say what was repaired.
 * @return how many could not be (a checkpoint at the next commit replaces them)
 */
int metalog_repair(struct stor_pool *p);
/** What metalog_scrub() did, in bytes and copies. */
struct metalog_scrub {
	uint64_t examined, repaired; /* bytes read (every side), rewritten */
	uint64_t errors;             /* record copies with no sound side */
};
/**
 * Scrub the log: walk it from the newest record back to its checkpoint, as
 * an import does, read every copy on every sound side of its vdev, check it
 * against the pointer that names it, and rewrite a bad one from a sound
 * copy of the same record. A record with no sound copy left ends the walk
 * and makes the next commit a checkpoint. Holds the commit lock meanwhile.
 * @return 0 or -ENOMEM; @sc grows by what it did
 */
int metalog_scrub(struct stor_pool *p, struct metalog_scrub *sc);
/** Mark the log's extents used in the pool's allocator (after its LUNs joined). */
int metalog_mark(struct stor_pool *p);
/** Write a checkpoint with the next commit (LMDB is ahead of the LUNs, or has no log yet). */
void metalog_force_checkpoint(struct stor_pool *p);
/** Try a checkpoint with the next commit, which commits even with nothing
 *  staged; without room it writes a delta record, as a checkpoint due. */
void metalog_want_checkpoint(struct stor_pool *p);
/** Checkpoints whose commit is done, so the log before each is freed:
 *  one counted after a txg is committed holds nothing that txg deleted. */
uint64_t metalog_checkpoints(struct stor_pool *p);
/** Add a sentence to the pool status line of metalog_note(). */
void metalog_notef(struct stor_pool *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** A line for pool status: which copy was damaged or ignored at import, or "". */
const char *metalog_note(struct stor_pool *p);
/** The status line: metalog_note(), and while the LUNs lag LMDB (no room
 *  for the log) a sentence saying so and what to do. */
void metalog_status(struct stor_pool *p, char *buf, size_t len);
typedef int (*metalog_extent_fn)(unsigned lun, uint64_t sector, uint32_t n, void *ctx);
/** Call @fn for every extent the log holds; stops at a non-zero return. */
int metalog_extents(struct stor_pool *p, metalog_extent_fn fn, void *ctx);
/**
 * Bytes the log may hold for @records block pointers of one dataset, over
 * all copies: the row of each (and its share of a MAC row) in MLOG_COPIES
 * copies of a checkpoint and of as much log again, which is when the next
 * checkpoint is due (metalog_commit). A bound for reservations (space.c).
 */
uint64_t metalog_space_for(uint64_t records);
/** Sectors the log holds, over all LUNs. */
uint64_t metalog_sectors(struct stor_pool *p);
/** Bytes and records written to the LUNs since the pool was opened. */
void metalog_counters(struct stor_pool *p, uint64_t *bytes, uint64_t *records);

#endif
