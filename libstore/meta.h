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

enum meta_table { META_POOL = 0, META_DS, META_BP, META_MAC, META_NTABLES };

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
/** Commit and free @t, even on failure. Durable when it returns 0. */
int meta_txn_commit(struct meta_txn *t);
/** Abort and free @t. NULL is a no-op. */
void meta_txn_abort(struct meta_txn *t);

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

#endif
