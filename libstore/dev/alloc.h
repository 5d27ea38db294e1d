/* SPDX-License-Identifier: MIT */
/*
 * Sector allocation over the LUNs of a pool. The free map lives in memory
 * and is made at import from the block pointers, which are the one
 * persistent record of what is allocated (through the rows that LMDB keeps
 * of them, txg/spacemap.c): a crash can therefore neither leak nor
 * double-allocate space. Frees are deferred by txg.c until the txg that
 * freed the extent is durable and no reader can still be reading it.
 */
#ifndef STOR_ALLOC_H
#define STOR_ALLOC_H

#include <stdint.h>

struct alloc;
struct alloc_lun;

int alloc_create(struct alloc **out);
void alloc_destroy(struct alloc *a);
/** Add a LUN of @sectors sectors; it gets the next index. */
int alloc_add_lun(struct alloc *a, uint64_t sectors);
/** LUN @lun has @sectors now (it grew): the new ones are free. @return 0
 *  (also when it is not larger), -EINVAL (a LUN cut short), -ENOMEM */
int alloc_grow(struct alloc *a, unsigned lun, uint64_t sectors);
/** The map of a LUN to add later: made where failing is still harmless... */
int alloc_lun_new(uint64_t sectors, struct alloc_lun **out);
/** ...published by alloc_publish_lun (the next index; cannot fail) or freed (NULL-safe). */
void alloc_publish_lun(struct alloc *a, struct alloc_lun *map);
void alloc_lun_free(struct alloc_lun *map);
/** Mark an extent used (import). @return 0 or STOR_ECORRUPT (overlap, out of range) */
int alloc_mark(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n);
/** Mark used the sectors whose bits are set in @words (@nwords from sector
 *  0 of LUN @lun): the import's load of a persisted free map (spacemap.c).
 *  @return 0 or STOR_ECORRUPT (overlap, past the end), nothing marked then */
int alloc_mark_words(struct alloc *a, unsigned lun, const uint64_t *words, uint64_t nwords);
/** Copy @n words of LUN @lun's map from word @first into @out (zero past its end). */
void alloc_copy_words(struct alloc *a, unsigned lun, uint64_t first, uint64_t *out, uint64_t n);
/** The same for an extent of the metadata log: not counted in alloc_totals(). */
int alloc_mark_meta(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n);
/** Allocate @n contiguous sectors, striping successive calls over the LUNs,
 *  leaving what the log does not hold of each LUN's metadata reserve
 *  (alloc.c) to alloc_get_on().
 *  @return 0 or STOR_ENOSPC */
int alloc_get(struct alloc *a, uint32_t n, unsigned *lun, uint64_t *sector);
/** Allocate @n contiguous sectors on LUN @lun (metadata copies). @return 0 or STOR_ENOSPC */
int alloc_get_on(struct alloc *a, unsigned lun, uint32_t n, uint64_t *sector);
/** LUN @lun had @was sectors before its file was cut short (import): an
 *  extent past its end is marked and freed only where it remains. */
void alloc_set_cut(struct alloc *a, unsigned lun, uint64_t was);
/** Place no new extent on LUN @lun (faulted). @return 1 if it was not faulted before */
int alloc_set_faulted(struct alloc *a, unsigned lun);
/** Place new extents on LUN @lun again (pool clear). */
void alloc_clear_faulted(struct alloc *a, unsigned lun);
/**
 * Return an extent. One not wholly in use (a double free) is refused and
 * counted, never half applied. @return 0 or STOR_ECORRUPT
 */
/**
 * Claim the first run of free sectors of @lun at or after @from, at most
 * @max, as alloc_get() would (so no writer takes them meanwhile): rekey's
 * scrub of free space writes over it, then gives it back (alloc_put).
 * The metadata log's reserve stays free. @return 0 with *@sector and *@n,
 * -ENOENT when none is left, STOR_ENOSPC when all free space is reserve
 */
int alloc_claim_free(struct alloc *a, unsigned lun, uint64_t from, uint32_t max,
		     uint64_t *sector, uint32_t *n);
int alloc_put(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n);
/** Free an extent of the metadata log (taken by alloc_get_on or alloc_mark_meta). */
int alloc_put_meta(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n);
/** How many alloc_put() calls were refused. */
uint64_t alloc_bad_frees(struct alloc *a);
/** Sectors in use and in all on LUN @lun. */
void alloc_usage(struct alloc *a, unsigned lun, uint64_t *used, uint64_t *total);
/** Sectors in use and in all over every LUN; lock-free, so a moment's view. */
void alloc_totals(struct alloc *a, uint64_t *used, uint64_t *total);
/** Sectors data may still take over every LUN: alloc_totals()' free less
 *  what the metadata log holds beyond its reserves (alloc.c), that many
 *  in *@log; lock-free, so a moment's view. */
uint64_t alloc_data_free(struct alloc *a, uint64_t *log);

#endif
