/* SPDX-License-Identifier: MIT */
/*
 * Internal metadata API: a transactional key-value store with a few tables.
 * meta_lmdb.c is its one backend and the only file that includes <lmdb.h>.
 */
#ifndef STOR_META_H
#define STOR_META_H

#include <stddef.h>
#include <stdint.h>

struct meta;
struct meta_txn;

/*
 * The tables the redo log carries, then META_SPACE: LMDB's alone, never
 * captured nor in a checkpoint, since its rows are derived from "bp" and
 * rebuilt when missing (txg/spacemap.c).
 */
enum meta_table { META_POOL = 0, META_DS, META_BP, META_MAC, META_NTABLES,
		  META_SPACE = META_NTABLES, META_ALL_TABLES };

/*
 * The redo log of write transactions (metalog.c writes it to the LUNs):
 * every meta_put and meta_del of a transaction is captured as an op,
 *   u8 table | u8 kind (META_OP_PUT, META_OP_DEL) | u16 key length |
 *   u32 value length (0 for a delete) | key | value
 * big-endian. A committed transaction's ops join the store's pending log,
 * in commit order, until a transaction takes them with meta_txn_log().
 * Tables at or above META_NTABLES are not LMDB's (metalog.c's key file).
 */
#define META_OP_PUT 0u
#define META_OP_DEL 1u
#define META_OP_HEAD 8u

struct meta_redo {
	uint8_t *buf;
	size_t len, cap;
};

struct meta_op {
	unsigned table, kind;
	const uint8_t *key, *val;
	size_t klen, vlen;
};

/** Append one op to @r. @return 0 or -ENOMEM */
int meta_redo_add(struct meta_redo *r, unsigned table, unsigned kind, const void *key,
		  size_t klen, const void *val, size_t vlen);
void meta_redo_free(struct meta_redo *r);
/** The op at *@p (moved past it). @return 1, 0 at @end, STOR_ECORRUPT */
int meta_redo_next(const uint8_t **p, const uint8_t *end, struct meta_op *op);

#define META_CREATE 0x1u

/** Open (or with META_CREATE create) the store in file @path. */
int meta_open(const char *path, size_t map_size, unsigned flags, struct meta **out);
void meta_close(struct meta *m);

/**
 * Make sure the file has room for the pages a transaction may touch: the
 * last used page plus a headroom plus @extra bytes. meta_txn_begin() calls
 * it with 0; a commit of many records calls it first with its estimate.
 * @return 0 or -ENOSPC (the file system is full), -errno
 */
int meta_reserve(struct meta *m, size_t extra);
/**
 * If a transaction ran out of map since the last call, double the map (no
 * transaction of this process may be open in the calling thread).
 * @return 1 grown, 0 nothing to do, or an error
 */
int meta_grow(struct meta *m);
/** Begin a read-write transaction (one at a time; others wait); -ENOSPC if no room (meta_reserve). */
int meta_txn_begin(struct meta *m, struct meta_txn **out);
/** Begin one whose changes the LUNs hold durable already (a txg's, after its
 *  log record): its commit may be undone by a system crash; meta_sync() after
 *  it when the LUNs did not take them after all. */
int meta_txn_begin_cached(struct meta *m, struct meta_txn **out);
/** Make every committed transaction durable. */
int meta_sync(struct meta *m);
/** Commit and free @t, even on failure. Durable when it returns 0 (but see
 *  meta_txn_begin_cached). */
int meta_txn_commit(struct meta_txn *t);
/** Abort and free @t. NULL is a no-op. */
void meta_txn_abort(struct meta_txn *t);

/** Capture nothing of @t (a replay of ops that are on the LUNs already). */
void meta_txn_nolog(struct meta_txn *t);
/**
 * The ops of every transaction committed since the last taker, then those
 * of @t so far, in one malloc'ed buffer (the caller frees it). They leave
 * the pending log when @t commits; if it fails they stay.
 * @return 0, -ENOMEM or an error of LMDB's
 */
int meta_txn_log(struct meta_txn *t, uint8_t **buf, size_t *len);
/** Bytes of ops committed and not yet taken by meta_txn_log(). */
size_t meta_pending(struct meta *m);
/** @return 1 if ops were committed that no transaction took before this
 *  environment was last closed or lost (the "unlogged" mark), 0 if not, or
 *  an error. Call it before any write transaction of this process. */
int meta_unlogged(struct meta *m);
/** Delete every key of @tab (read-write txn). */
int meta_clear(struct meta_txn *t, enum meta_table tab);

/*
 * A watcher of one table (txg/spacemap.c watches "bp"): told of every
 * change a write transaction makes to it, before the change, with the
 * value it replaces, and given the transaction at its commit to put rows
 * of its own. One write transaction runs at a time, so a watcher keeps its
 * state in itself. Calls: change, cleared (meta_clear of the table),
 * commit (before LMDB commits; an error fails the commit), end (after the
 * commit or the abort; @committed says which).
 */
struct meta_watch {
	int (*change)(void *ctx, const void *key, size_t klen, const void *old, size_t olen,
		      const void *val, size_t vlen);
	void (*cleared)(void *ctx);
	int (*commit)(void *ctx, struct meta_txn *t);
	void (*end)(void *ctx, int committed);
	void *ctx;
};

/** Watch @tab of @m with @w (copied; NULL stops). Before any write transaction. */
void meta_watch(struct meta *m, enum meta_table tab, const struct meta_watch *w);

/** A read-only snapshot, recycled between calls (mdb_txn_reset/renew). */
int meta_rtxn_get(struct meta *m, struct meta_txn **out);
void meta_rtxn_put(struct meta_txn *t);

/** @return 0 with *val (valid until the transaction ends), -ENOENT, or an error */
int meta_get(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen,
	     const void **val, size_t *vlen);
int meta_put(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen,
	     const void *val, size_t vlen);
/** @return 0 or -ENOENT */
int meta_del(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen);

typedef int (*meta_iter_fn)(const void *key, size_t klen, const void *val, size_t vlen, void *ctx);
/**
 * Call @fn for every key of @tab starting with @prefix (all if plen is 0),
 * in key order; stops and returns @fn's value when it is not 0.
 * With @del set (read-write txn only) each visited key is deleted after @fn.
 */
int meta_iter(struct meta_txn *t, enum meta_table tab, const void *prefix, size_t plen, int del,
	      meta_iter_fn fn, void *ctx);
/** Call @fn for every key of @tab from the first at or after @from, in key
 *  order, until @fn returns non-zero (its value is returned): a walk that
 *  resumes where it stopped (scrub.c). */
int meta_iter_from(struct meta_txn *t, enum meta_table tab, const void *from, size_t flen,
		   meta_iter_fn fn, void *ctx);

#endif
