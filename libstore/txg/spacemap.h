/* SPDX-License-Identifier: MIT */
/*
 * The persisted free map (spacemap.c): what the committed block pointers
 * hold, kept in LMDB's local "space" table by watching "bp", so that an
 * import loads it instead of walking every pointer.
 */
#ifndef STOR_TXG_SPACEMAP_H
#define STOR_TXG_SPACEMAP_H

#include <stddef.h>
#include <stdint.h>

struct alloc;
struct meta;
struct meta_txn;
struct stor_pool;
struct spacemap;

/** Bytes of "d" rows that make a commit fold them into the chunks (8 MiB;
 *  the tests set less). */
extern uint64_t spacemap_fold_bytes;

/** What the pointers of one table (a dataset's or a snapshot's) hold. */
struct sm_sum {
	uint64_t id;
	uint64_t psize, lsize; /* bytes stored, and before compression */
	uint64_t nenc;         /* pointers sealed (BP_F_ENCRYPTED) */
};

/** Watch "bp" of @m, the metadata of @p (its notes go to @p's log). The
 *  rows are kept from then on if @m has them already (spacemap_write_base). */
int spacemap_attach(struct stor_pool *p, struct meta *m, struct spacemap **out);
/** Stop watching and free; NULL-safe. */
void spacemap_free(struct spacemap *sm);

typedef int (*sm_sum_fn)(void *ctx, const struct sm_sum *s);
/**
 * The import's free map: mark in @a what the rows say the pointers hold,
 * and call @fn for each table's sums. @a is as the pointers left it only
 * if this returns 1. @return 1, 0 (no rows: walk the pointers), or an
 * error (STOR_ECORRUPT: rows that do not add up)
 */
int spacemap_load(struct spacemap *sm, struct alloc *a, sm_sum_fn fn, void *ctx);
/** After a walk of the pointers into @a (nothing else marked yet) that
 *  summed @n tables into @sums: the rows anew, kept from then on. */
int spacemap_write_base(struct spacemap *sm, struct alloc *a, const struct sm_sum *sums, size_t n);

/**
 * The rows as of @t, for pool check: the sectors of LUN i they hold as
 * bits (a set bit is a used sector) in @bits[i], @nsectors[i] of them,
 * zeroed by the caller. @return 0, -ENOENT (no rows), STOR_ECORRUPT
 */
int spacemap_view(struct meta_txn *t, unsigned nluns, uint64_t *const bits[],
		  const uint64_t nsectors[]);
/** Each table's sums as of @t. @return 0, -ENOENT (no rows), @fn's error */
int spacemap_sums(struct meta_txn *t, sm_sum_fn fn, void *ctx);

#endif
