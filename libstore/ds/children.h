/* SPDX-License-Identifier: MIT */
/*
 * The encrypted children of an encrypted dataset, under its key (children.c).
 */
#ifndef STOR_CHILDREN_H
#define STOR_CHILDREN_H

#include <stdint.h>

#include "txg/bpmac.h"
#include "txg/txg.h"

/* A change of one parent's list: (@guid, @suite) in or out of @parent_id's, under @mk. */
struct kids_join {
	uint64_t parent_id, guid;
	unsigned suite;
	struct mac_key *mk; /* the parent's MAC key; NULL: no list to change */
};

/**
 * The commit task of destroying encrypted dataset @id: its own list goes,
 * and with @leave->mk it leaves that parent's list (a reference on the key
 * is taken). @return 0 or -ENOMEM
 */
int children_destroy_task(uint64_t id, const struct kids_join *leave, struct txg_task *out);

/** The list of a new encrypted dataset @id: empty, under its own MAC key @mk. */
int children_init(struct meta_txn *t, uint64_t id, const struct mac_key *mk);
/** The list of a raw stream's dataset: empty, with the tag its sender stored. */
int children_adopt(struct meta_txn *t, uint64_t id, const uint8_t empty[MAC_LEN]);
/** The tag of @id's empty list, for a raw stream. @return 0, STOR_EAUTH or an error */
int children_empty_tag(struct meta_txn *t, uint64_t id, uint8_t out[MAC_LEN]);
/**
 * Add (@add) or take out child (@guid, @suite) of @parent_id's list under
 * the parent's MAC key @pmk, in @t. A list that does not verify is left as
 * it is. @return 0, STOR_EAUTH or an error
 */
int children_change(struct meta_txn *t, uint64_t parent_id, const struct mac_key *pmk,
		    uint64_t guid, unsigned suite, int add);
/** Delete @id's list (it is being destroyed). */
int children_forget(struct meta_txn *t, uint64_t id);
/** XOR the term of child (@guid, @suite) under @pmk into @acc. */
int children_sum_add(const struct mac_key *pmk, uint64_t guid, unsigned suite,
		     uint8_t acc[MAC_LEN]);
/**
 * Check @id's list against the @n children whose terms sum to @acc;
 * @listed gets how many it lists. @return 0, STOR_EAUTH or an error
 */
int children_check(struct meta_txn *t, uint64_t id, const struct mac_key *mk, uint64_t n,
		   const uint8_t acc[MAC_LEN], uint64_t *listed);

#endif
