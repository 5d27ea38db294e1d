/* SPDX-License-Identifier: MIT */
/* clone.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_CLONE_H
#define STOR_CLONE_H

#include <stddef.h>
#include <stdint.h>

#include "kv/format.h"
#include "pool_impl.h"

struct meta_txn;
struct snap;

/** After the dataset table is loaded: each clone's origin from its id. */
int clone_link_all(struct stor_pool *p);

/** After the key file and txg_init at import: each clone's encryption root
 *  checked against its origin's, and its shared_ref counted from its pointers.
 *  @return 0 or STOR_ECORRUPT */
int clone_import(struct stor_pool *p);

/** The same for one clone, after a rollback changed its pointers (committed). */
void clone_count_shared_ds(struct stor_pool *p, struct stor_ds *ds);

/** The bytes of @ds's origin image at @recno (0: a hole there or no origin). */
uint64_t clone_shared_psize(struct stor_pool *p, const struct stor_ds *ds, uint64_t recno);

/** Refuse (-EBUSY, with the reason) to destroy @snaps, which have clones, unless
 *  STOR_DESTROY_CLONES is in @flags: then destroy those clones and all they take,
 *  in one txg. Admin lock held. @return the number of clones destroyed, or < 0 */
int clone_destroy_dependents_locked(struct stor_pool *p, struct snap *const *snaps, size_t n,
				    unsigned flags);

/** The GUID a record of @ds's tables born at @birth was sealed under. */
static inline uint64_t ds_sealer(const struct stor_ds *ds, uint64_t birth)
{
	for (size_t i = 0; i < ds->nsealers; i++)
		if (birth <= ds->sealers[i].upto)
			return ds->sealers[i].guid;
	return ds->guid;
}

/** The bytes of its origin's image a clone references (0 for others). */
static inline uint64_t clone_shared_of(const struct stor_ds *ds)
{
	int64_t n = atomic_load(&ds->shared_ref);

	return ds->origin && n > 0 ? (uint64_t)n : 0;
}

/* A promote's changes, planned by pool/promote.c and committed as a
 * snapshot op (snap_commit_op calls clone_promote_commit). */
struct move {
	uint64_t from, to, recno;
	const struct mac_key *from_mk, *to_mk;
	uint8_t bp[BP_LEN];
};

struct promote_plan {
	struct move *v;
	size_t n, cap;
	struct mac_key *mks[64]; /* references the moves' keys point to */
	size_t nmks;
	size_t nrec;
	char **names; /* META_DS: a NULL rec deletes the name */
	uint8_t **recs;
	size_t *lens;
};

/** Apply a promote's moves and records in @t (snap_commit_op). */
int clone_promote_commit(struct meta_txn *t, const struct promote_plan *pl);

void clone_plan_free(struct promote_plan *pl);

#endif
