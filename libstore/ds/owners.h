/* SPDX-License-Identifier: MIT */
/*
 * Every owner of a table of block pointers - a dataset, or a snapshot's
 * kept pointers - by id, for the walks of META_BP in key order (the
 * import's rebuild of the free map, pool check): one lookup per owner, in
 * O(log n), where ds_find_id_locked and snap_find_id_locked walk the
 * tables. Built under the admin lock, used while it is held.
 */
#ifndef STOR_DS_OWNERS_H
#define STOR_DS_OWNERS_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct owner {
	uint64_t id;
	struct stor_ds *ds; /* a dataset's table, or NULL */
	struct snap *snap;  /* a snapshot's, or NULL */
};

struct owners;

/** The owners of @p. @return 0, -ENOMEM, or STOR_ECORRUPT (two share an
 *  id: the pool's error says which) */
int owners_index(struct stor_pool *p, struct owners **out);
/** The owner of id @id, or NULL. */
const struct owner *owners_find(const struct owners *o, uint64_t id);
/** How many owners, and the @i-th in id order (a walk's sums by owner). */
size_t owners_count(const struct owners *o);
const struct owner *owners_at(const struct owners *o, size_t i);
void owners_free(struct owners *o);

#endif
