/* SPDX-License-Identifier: MIT */
/* recv_state.c's functions: the receive mark of a dataset and the MAC tree a raw receive waits for. */
#ifndef STOR_RECV_STATE_H
#define STOR_RECV_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"
#include "txg/bpmac.h"

struct ds_keys;
struct meta_txn;

struct recv_identity {
	int raw; /* else only the mark: a fresh GUID and key as for any create */
	uint64_t guid;
	int suite, keyformat;
	uint32_t iters;
	uint8_t salt[KEYS_SALT_LEN];
	uint8_t wrapped[KEYS_WRAPPED_LEN];
	unsigned keygen; /* of @wrapped and the records (rekey.c) */
	uint8_t kids_empty[MAC_LEN]; /* its empty list's tag (children.c) */
};

#define RECV_MARK_PREFIX "recv/" /* + the dataset id in 16 hex digits */
#define RECV_RECEIVING 1u /* the pool table's mark of a dataset: being received */
#define RECV_MACS 2u      /* its MAC tree waits for a key; its roots are there (recv.c) */
#define RECV_INCR 3u      /* an incremental going in: undone to its newest snapshot */
/** Mark dataset @id (@state 0: unmark) in @t. */
int recv_mark_txn(struct meta_txn *t, uint64_t id, unsigned state);
/** The same in a transaction of its own. */
int recv_mark(struct stor_pool *p, uint64_t id, unsigned state);
/** The mark of dataset @id (0: none), or an error. */
int recv_mark_of(struct stor_pool *p, uint64_t id);

/*
 * What a receive -s keeps for its resume, beside its mark (format.h):
 * "resume/<id>" -> u8 version (1) | u8 flags (STOR_RESUME_*) | u64 dataset
 * guid | u64 snapshot guid | u64 from guid | u64 snapshot txg | u64 next
 * record number | u16 header length | the stream's header as it came. Only
 * beside a mark RECV_RECEIVING or RECV_INCR: any other mark drops it in the
 * same transaction (recv_mark_txn), so a receive that ends, is undone or
 * abandoned leaves none. Its next record number never runs ahead of what
 * is committed (recv.c's checkpoints).
 */
#define RECV_RESUME_PREFIX "resume/" /* + the dataset id in 16 hex digits */
#define RECV_HDR_MAX 320u
struct recv_resume {
	struct stor_resume_token id;
	size_t hdr_len;
	uint8_t hdr[RECV_HDR_MAX];
};
/** Save @rs as dataset @id's resume state, in @t or (NULL) a transaction of its own. */
int recv_resume_save(struct stor_pool *p, struct meta_txn *t, uint64_t id,
		     const struct recv_resume *rs);
/** Dataset @id's resume state. @return 0, -ENOENT (none), STOR_ECORRUPT */
int recv_resume_load(struct stor_pool *p, uint64_t id, struct recv_resume *rs);
/** @ds's receive_resume_token into @out (STOR_RESUME_TOKEN_MAX bytes), "-" if none. */
void recv_resume_token(struct stor_pool *p, const struct stor_ds *ds, char *out, size_t len);
/** Why @ds, which is being received or holds a partial receive, is refused:
 *  into pool_set_error(), naming send -t and receive -A for a partial one. */
void recv_busy_error(const struct stor_ds *ds);

/** Is @ds waiting for its MAC tree (a raw receive)? 1 yes, 0 no, -EBUSY
 *  while it is being received, or an error. */
int recv_macs_pending(struct stor_pool *p, const struct stor_ds *ds);

/**
 * Build the MAC tree of @ds, its head's under @k->mac and each snapshot
 * table's under its own key, from the pointers, and check it: the head
 * must come out with root @expect (a raw stream's view root), else with
 * the root it holds, which must be its newest snapshot's view root, and
 * each snapshot must read as its view root (recv.c). Clears the mark
 * unless RECV_BUILD_KEEP_MARK; RECV_BUILD_DRY checks and keeps nothing.
 * Admin lock held. @return 0, STOR_EAUTH (the reason in pool_set_error)
 */
int recv_build_macs(struct stor_pool *p, struct stor_ds *ds, const struct ds_keys *k,
		    const uint8_t *expect, unsigned flags);

#define RECV_BUILD_DRY 0x1u
#define RECV_BUILD_KEEP_MARK 0x2u

/** Destroy dataset @id, cut short while being received, and its mark. */
int recv_discard(struct stor_pool *p, uint64_t id);
/** Dataset @id, cut short while an incremental went in, back to its newest
 *  snapshot; the caller holds @held handles on it (0, or the receive's 1). */
int recv_undo_incr(struct stor_pool *p, uint64_t id, int held);
/** Undo what receives cut short left (at import): recv_discard or recv_undo_incr by their marks. */
int recv_cleanup(struct stor_pool *p);

/**
 * The sum (bpmac.c's acc) of snapshot @idx of @ds's view: what snapshot.c's
 * read rule gives, the pointers born by its txg in the head and in its own
 * and every newer table, at most one per record (else STOR_EAUTH), as
 * leaves under the head's MAC key @head_mk (a view root is a root of the
 * head's). Records [0, @end), in @t.
 */
int view_sum(struct meta_txn *t, const struct stor_ds *ds, size_t idx,
	     const struct mac_key *head_mk, uint64_t end, uint8_t acc[MAC_LEN]);

#endif
