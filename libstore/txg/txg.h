/* SPDX-License-Identifier: MIT */
/*
 * Transaction groups. Writers stage block pointers in the open txg under a
 * hold; a commit swaps in a new open txg, fsyncs the LUNs that txg wrote,
 * puts every block pointer in one LMDB write transaction, then returns the
 * extents it freed to the allocator once no reader can still see them.
 */
#ifndef STOR_TXG_H
#define STOR_TXG_H

#include <stdint.h>

#include "kv/bp.h"

struct stor_pool;
struct stor_ds;
struct mac_key;
struct snap;

/** @keep_mac gives the MAC key of a snapshot (ds/snapshot.c's snap_mac),
 *  for the pointers an overwrite moves into the kept snapshot's table. */
int txg_init(struct stor_pool *p, uint64_t last_txg,
	     int (*keep_mac)(struct snap *s, struct mac_key **out));
/** Commit what is open and stop the timer. */
int txg_fini(struct stor_pool *p);

/** Hold the open txg while sealing, writing and staging; returns its number. */
uint64_t txg_hold(struct stor_pool *p);
void txg_rele(struct stor_pool *p);
/** Number the open txg @min at least (a raw receive: records born up to
 *  @min - 1 elsewhere, so later snapshots here come after them). */
void txg_advance(struct stor_pool *p, uint64_t min);

/**
 * Stage @bp for record @recno of @ds in the open txg (caller holds it); @mk
 * is the dataset's MAC key if it is encrypted (the commit updates its MACs).
 * The previous block pointer (staged or committed) is returned in @old
 * (*had_old = 0 if none); its extent is freed when this txg is durable,
 * unless the newest snapshot holds it (snapshot.c): then it moves into that
 * snapshot's table in the same txg. A pointer of the same birth as the one
 * it replaces is that version sealed again (rekey.c): whoever read the old
 * one reads it, and the old extent is freed.
 */
int txg_stage(struct stor_pool *p, struct stor_ds *ds, uint64_t recno, const struct bp *bp,
	      struct mac_key *mk, struct bp *old, int *had_old);
/** txg_stage() into table @table of @ds: its head's (ds->id) or one of its
 *  snapshots' (@mk that table's MAC key), whose pointer @bp replaces. */
int txg_stage_at(struct stor_pool *p, struct stor_ds *ds, uint64_t table, uint64_t recno,
		 const struct bp *bp, struct mac_key *mk, struct bp *old, int *had_old);

/**
 * Promise room for @n txg_stage() calls in the open txg (caller holds it),
 * so a batch stages all of its records or, on -ENOMEM here, none. Each
 * txg_stage() uses one; txg_unreserve() gives back what was not used.
 */
int txg_reserve(struct stor_pool *p, size_t n);
void txg_unreserve(struct stor_pool *p, size_t n);

/**
 * Look up block pointers for a batch: staged ones first, then LMDB.
 * @found[i] is 0 for a record never written (or discarded).
 */
int txg_lookup(struct stor_pool *p, size_t n, const uint64_t *ds_ids, const uint64_t *recnos,
	       struct bp *bps, int *found);

/**
 * Forget dataset @ds_id: the next commit writes what is staged for it,
 * then deletes its block pointers and MACs, frees their extents, and
 * deletes its record (@name) if the record still has @ds_id, and runs
 * @also (or NULL, the stage's now: released if this fails), all in one
 * transaction, so a crash leaves the dataset either whole or gone.
 * @return 0 or -ENOMEM (nothing changed)
 */
struct bp;
struct meta_txn;
/* The stage's own freeing of an extent no record holds any more (@stage is
 * the commit's). @return 0 or -ENOMEM */
typedef int (*txg_free_fn)(void *stage, const struct bp *bp);
/*
 * Work of a layer above for a commit: the participants enlist, as with
 * OpenZFS's dsl_synctask, and the commit knows none of them by name.
 * @commit runs inside the commit's LMDB transaction, in the order enlisted
 * (extents it frees go to @free_extent(@stage)); a failed commit aborts the
 * transaction and runs it again with the next one. @release runs once, when
 * the stage goes.
 */
struct txg_task {
	int (*commit)(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage);
	void (*release)(void *arg);
	void *arg;
};
int txg_forget_ds(struct stor_pool *p, uint64_t ds_id, const char *name,
		  const struct txg_task *also);

/** 1 if a dataset named @name was destroyed and its removal is not committed yet. */
int txg_name_gone(struct stor_pool *p, const char *name);

/** Nothing staged and nothing being committed (caller holds stage_lock). */
int txg_stage_idle(struct stor_pool *p);

/** Commit until txg @min is durable (0: commit whatever is open now). */
int txg_sync(struct stor_pool *p, uint64_t min);

/** Sectors commits have given back to the allocator so far: a mark for
 *  txg_sync_for_space(). */
uint64_t txg_freed(struct stor_pool *p);
/**
 * A write found no room: copy-on-write frees an extent only when the txg
 * that replaced it commits, so commit the open txg if it (or the one
 * syncing) holds frees, as ZFS's writers wait on a sync when dirty data
 * runs short. Call with no hold, stripe or stage lock (the commit needs
 * them). @mark is txg_freed() from before the failed try, and is moved on.
 * @return 1 if space came back since @mark (try again), 0 if none did and
 *         no txg holds frees (the pool is full), or the commit's error
 */
int txg_sync_for_space(struct stor_pool *p, uint64_t *mark);
/** Called by txg_sync_close() with the hold and stage_lock held, as txg
 *  @txg closes: what it changes (txg_enlist) is in @txg and no write
 *  staged after it is. A failure leaves the txg open and is returned. */
typedef int (*txg_close_fn)(struct stor_pool *p, uint64_t txg, void *arg);
/** Close the open txg through @fn, even if nothing is staged, and commit it. */
int txg_sync_close(struct stor_pool *p, txg_close_fn fn, void *arg);
/** Enlist @task in the open txg (its arg is the stage's now); only from a
 *  txg_close_fn. @return 0 or -ENOMEM (not taken) */
int txg_enlist(struct stor_pool *p, const struct txg_task *task);

/* Reader sections: extents and keys seen inside one stay valid until it ends. */
unsigned txg_read_enter(struct stor_pool *p);
void txg_read_exit(struct stor_pool *p, unsigned slot);
/** Wait until every reader section that began before the call has ended. */
void txg_read_synchronize(struct stor_pool *p);

#endif
