/* SPDX-License-Identifier: MIT */
/*
 * Block pointer MACs of encrypted datasets (the scheme is in bpmac.c).
 */
#ifndef STOR_BPMAC_H
#define STOR_BPMAC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/seen_bits.h"
#include "kv/format.h"

struct meta;
struct meta_txn;

/* The MAC key of one dataset; the open txg holds a reference for its commit. */
struct mac_key {
	atomic_int refs;
	uint64_t staged_txg; /* txg.c: the newest stage holding a reference (stage_lock) */
	uint64_t guid;       /* the table's GUID (dataset or snapshot): in every leaf */
	uint8_t *k;          /* the keyed PRF state, KEYS_PRF_STATE_LEN bytes of secure memory */
};

/** Derive the MAC key of a dataset from its master key. @return NULL on failure */
struct mac_key *mac_key_new(const uint8_t *master, uint64_t guid, unsigned suite);
struct mac_key *mac_key_ref(struct mac_key *mk);
/** Drop a reference; the last one cleanses the key. NULL is a no-op. */
void mac_key_put(struct mac_key *mk);


/** The root of a new, empty dataset (in @t, with its dataset record). */
int bpmac_root_init(struct meta_txn *t, uint64_t ds_id, const struct mac_key *mk);

/**
 * Check the root of dataset @ds_id against its group MACs, in one snapshot.
 * @return 0, STOR_EAUTH (root missing or not verifying), or an error
 */
int bpmac_verify_root(struct meta *m, uint64_t ds_id, const struct mac_key *mk);

/**
 * Make sure the group of @recno verifies against its group MAC, once per
 * key load: the first call reads the group's block pointers from a
 * snapshot, later ones test a bit. @return 0, STOR_EAUTH, or an error
 */
int bpmac_check_group(struct meta *m, uint64_t ds_id, const struct mac_key *mk,
		      struct seen_bits *seen, uint64_t recno);

/**
 * Check every group MAC of table @ds_id against its block pointers, all of
 * them, in one snapshot (the checker's walk, not the read path's lazy one):
 * @bad is called for each group @g whose pointers do not sum to its stored
 * MAC, whose MAC is missing, or whose MAC remains with no pointers under it.
 * The root is bpmac_verify_root's. @return 0 or an error (not a mismatch)
 */
int bpmac_check_table(struct meta *m, uint64_t ds_id, const struct mac_key *mk,
		      void (*bad)(void *ctx, uint64_t g), void *ctx);

/*
 * The change a commit makes to @recno's group: the XOR of leaf(old) ^ leaf(new)
 * over the group's pointers it replaces (an absent pointer is zero).
 */
struct bpmac_change {
	uint64_t ds_id, recno;
	const struct mac_key *mk;
	uint8_t delta[MAC_LEN];
};

/** XOR the leaf of (@recno, encoded pointer @bp) into @acc. @return 0 or -EIO */
int bpmac_leaf_xor(const struct mac_key *mk, uint64_t recno, const uint8_t bp[BP_LEN],
		   uint8_t acc[MAC_LEN]);

/**
 * Apply the changes of one commit to the group MACs and roots in @t: cost
 * proportional to the changes, whatever the size of the datasets. Sorts @ch.
 * @return 0 or an error (the caller aborts @t)
 */
int bpmac_apply(struct meta_txn *t, struct bpmac_change *ch, size_t n);

/** Delete every MAC of dataset @ds_id (it is being destroyed). */
/**
 * Table @id's group MACs and root under @mk, made from its pointers in @t,
 * over whatever tree it had; its view root stays. Every pointer must be
 * born by @max_birth and, unless @clear_ok (a dataset encrypted in place,
 * rekey.c), encrypted (else STOR_EAUTH). *@end grows past the
 * highest record number seen.
 */
int bpmac_build_table(struct meta_txn *t, uint64_t id, const struct mac_key *mk,
		      uint64_t max_birth, int clear_ok, uint64_t *end);

int bpmac_forget(struct meta_txn *t, uint64_t ds_id);
/** Delete the tree of table @id, keeping its view root (it is rebuilt). */
int bpmac_forget_tree(struct meta_txn *t, uint64_t id);

/** The MAC_ROOT_LEN bytes of row @which (MAC_ROOT, MAC_VIEW) of table @id.
 *  @return 0, -ENOENT, STOR_EAUTH (malformed) or an error */
int bpmac_row_get(struct meta_txn *t, uint64_t id, uint64_t which, uint8_t out[MAC_ROOT_LEN]);
int bpmac_row_put(struct meta_txn *t, uint64_t id, uint64_t which, const uint8_t in[MAC_ROOT_LEN]);
/**
 * The view root of snapshot @snap_id: its dataset's root as it stands in
 * @t, the commit that makes the snapshot (a copy: no key is needed).
 * @return 0, STOR_EAUTH (the dataset has no root) or an error
 */
int bpmac_view_save(struct meta_txn *t, uint64_t ds_id, uint64_t snap_id);
/** Add the term of group @g whose MAC is @gmac to the root's sum @acc. */
int bpmac_sum_add(const struct mac_key *mk, uint64_t g, const uint8_t gmac[MAC_LEN],
		  uint8_t acc[MAC_LEN]);
/** PRF(@mk, @domain | @n | @v): a term or tag of a XOR sum under @mk, its
 *  domain byte one of bpmac.c's ('G') or children.c's ('N'). @return 0 or -EIO */
int bpmac_prf(const struct mac_key *mk, uint8_t domain, uint64_t n, const uint8_t v[MAC_LEN],
	      uint8_t out[MAC_LEN]);
/** Snapshot @snap_id's view root made anew from its sum @acc under the
 *  head's MAC key @mk (a rekey sealed its pointers again: rekey.c). */
int bpmac_view_put(struct meta_txn *t, uint64_t snap_id, const struct mac_key *mk,
		   const uint8_t acc[MAC_LEN]);
/** Check root @root (sum | tag) under @mk against the sum @acc computed.
 *  @return 0 or STOR_EAUTH */
int bpmac_root_check(const struct mac_key *mk, const uint8_t acc[MAC_LEN],
		     const uint8_t root[MAC_ROOT_LEN]);

#endif
