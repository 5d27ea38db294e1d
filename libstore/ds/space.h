/* SPDX-License-Identifier: MIT */
/* space.c's functions inside libstore (its head comment says the rest).
 * Those named *_locked want the admin lock held: they read the dataset
 * table, or pair a promise with the change it is for. */
#ifndef STOR_SPACE_H
#define STOR_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

void space_init(struct stor_pool *p);

void space_fini(struct stor_pool *p);

/** Bytes of the pool that ordinary writes leave free, for a pool of @size. */
uint64_t space_slop(uint64_t size);

/** refreservation=auto of a volume: every record in whole sectors. */
uint64_t space_auto_refres(uint64_t volsize, uint32_t recsize);

/** Cache ds->refres and ds->res from its properties; admin lock held. */
void space_props_locked(struct stor_pool *p, struct stor_ds *ds);

/** Copy the dataset table after a change of it or of a reservation. */
int space_sync_locked(struct stor_pool *p);

/**
 * The same after @ds alone was added to the dataset table (a create): the
 * copy grows by one entry, without a pass over every dataset's name, when
 * it was current; otherwise it is copied whole.
 */
int space_insert_locked(struct stor_pool *p, struct stor_ds *ds);

/**
 * May @ds keep @n bytes just allocated (and charged to ds->used)? @replaces
 * is the size of the extent the record had, 0 for new data.
 * @return 0 or STOR_ENOSPC
 */
int space_admit(struct stor_pool *p, struct stor_ds *ds, uint64_t n, uint64_t replaces);

/** What `get` reports of a dataset's space. */
struct space_view {
	uint64_t own, rr, snaps, children, used, available;
};

void space_of_locked(struct stor_pool *p, struct stor_ds *ds, struct space_view *v);

/**
 * The space of every dataset at one moment, for a listing (admin lock held
 * from begin to end): space_of_locked() sums the whole table for each
 * dataset, this sums it once. space_of_all() is space_of_locked() from it.
 */
struct space_all {
	uint64_t fr, slop, u;
	uint64_t *tree; /* sp_tree as it was at begin; NULL: out of memory, each one alone */
};

void space_all_begin(struct stor_pool *p, struct space_all *sa);

void space_of_all(struct stor_pool *p, const struct space_all *sa, struct stor_ds *ds,
		  struct space_view *v);

void space_all_end(struct space_all *sa);

/**
 * Promise @need more bytes of reservation, under @from and its ancestors'
 * reservations (NULL: the pool's); refused with STOR_ENOSPC and a text
 * ("not enough space: N available, M needed; @hint") when the pool cannot
 * guarantee them. Undo with space_unpromise_locked() once the dataset's
 * new reservation is counted (space_sync_locked) or was not made.
 */
int space_promise_locked(struct stor_pool *p, struct stor_ds *from, uint64_t need,
			 const char *hint);

void space_unpromise_locked(struct stor_pool *p, uint64_t need);

/**
 * Keep the metadata shares of @v's @n datasets, being destroyed, in U until
 * a checkpoint frees what the log holds of them (space.c): before the
 * space table drops them. space_gone_done_locked() after the destroy's
 * commit (@committed: it succeeded) says which checkpoint that is.
 */
void space_gone_locked(struct stor_pool *p, struct stor_ds *const *v, size_t n);
void space_gone_done_locked(struct stor_pool *p, int committed);

#endif
