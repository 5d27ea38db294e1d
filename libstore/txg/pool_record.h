/* SPDX-License-Identifier: MIT */
/* The pool record and <pool>.luns (pool_record.c's head comment says what they hold). */
#ifndef STOR_POOL_RECORD_H
#define STOR_POOL_RECORD_H

#include <stdint.h>

#include "pool_impl.h"

struct meta_txn;

/* A pool record as read; the paths are the caller's to free (pool_record_free). */
struct pool_record {
	uint32_t version;
	uint64_t guid, next_ds_id;
	uint32_t n;
	uint64_t lun_guid[STOR_LUNS_MAX], size[STOR_LUNS_MAX];
	char *path[STOR_LUNS_MAX];
	/* the index of the first LUN of each LUN's vdev; layout: 0, or
	 * STOR_ECORRUPT when the tail that holds them is damaged */
	uint32_t vdev[STOR_LUNS_MAX];
	int layout;
};

/** Read the pool record in @t: 0; -ENOENT, there is none; STOR_EFORMAT,
 *  another version (@rec->version says which); STOR_ECORRUPT. */
int pool_record_read(struct meta_txn *t, struct pool_record *rec);
void pool_record_free(struct pool_record *rec);

/** The pool record naming every LUN, committed, and <pool>.luns with them. */
int pool_save_config(struct stor_pool *p);

/** The pool record put in @t, which the caller commits: for a change that
 * leaves the LUNs as they are (a new dataset's id), so <pool>.luns stays. */
int pool_config_txn(struct stor_pool *p, struct meta_txn *t);

/** The pool record naming LUNs [0, @n), one not yet published among them (attach). */
int pool_save_config_n(struct stor_pool *p, unsigned n);

#endif
