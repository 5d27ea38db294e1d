/* SPDX-License-Identifier: MIT */
/*
 * Snapshots inside libstore (snapshot.c has the design): the in-memory
 * snapshot, the changes a txg commits for them, and the hooks the txg,
 * the read path, the import and the checker call.
 */
#ifndef STOR_SNAPSHOT_H
#define STOR_SNAPSHOT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ds/children.h"
#include "kv/bp.h"
#include "pool_impl.h"
#include "txg/bpmac.h"

struct stor_pool;
struct stor_ds;
struct meta_txn;
struct stor_prop_value;

#define SNAP_RECORD_MAX (4 + 7 * 8)

/* A change a txg commits for a snapshot, in the order staged. */
enum snap_op_kind { SNAP_OP_CREATE, SNAP_OP_DESTROY, SNAP_OP_ROLLBACK, SNAP_OP_PROMOTE };
struct promote_plan;
struct snap_op {
	enum snap_op_kind kind;
	uint64_t id;
	char *name;
	uint8_t *rec; /* CREATE: the record */
	size_t reclen;
	struct mac_key *mk; /* CREATE: the new table's MAC root; NULL if clear */
	/* DESTROY: the next older snapshot, which takes the pointers it needs;
	 * ROLLBACK: the dataset (prev_id, its MAC key prev_mk) and the txg of
	 * the snapshot @id it goes back to (prev_txg; @mk is the snapshot's) */
	uint64_t prev_id, prev_txg;
	struct mac_key *prev_mk;
	struct promote_plan *promote; /* PROMOTE: planned by pool/promote.c */
	uint64_t mark_id; /* CREATE: a receive's mark that changes with it (recv.c) */
	unsigned mark;
	/* CREATE: the snapshot's dataset, and the view root a raw stream
	 * carried (have_view), which is then the dataset's root too */
	uint64_t head_id;
	int have_view;
	uint8_t view[MAC_ROOT_LEN];
	struct kids_join join; /* CREATE: a received dataset joins its parent's list */
};

/* A snapshot a receive makes (recv.c): the stream's guid, the source's txg
 * for a raw stream (0: the txg it is made in), no MAC root when the MAC
 * tree waits for a key (nomacs), and the receive's mark set to @mark on
 * dataset @mark_id in the same commit (0: none). */
struct snap_recv {
	uint64_t guid, txg;
	int nomacs;
	uint64_t mark_id;
	unsigned mark;
	int have_view; /* a raw stream's: the view root it carried (stream.h) */
	uint8_t view[MAC_ROOT_LEN];
	struct kids_join join; /* mk set: the dataset joins its parent's list (children.c) */
};
/** Make snapshot @ds@@snapname as @as says, in one commit (admin lock not held). */
int snap_create_received(struct stor_pool *p, struct stor_ds *ds, const char *snapname,
			 const struct snap_recv *as);

/* stor_snap_rollback()'s flags inside libstore: the caller holds one handle
 * on the dataset (SNAP_HELD); no MAC is changed, the dataset's tree is
 * rebuilt after (SNAP_NOMACS, recv.c). */
#define SNAP_HELD 0x100u
#define SNAP_NOMACS 0x200u
/** Has @ds changed since its snapshot @S (a pointer born after it, one it
 *  keeps, another volsize), as last committed? Admin lock held. */
int snap_head_changed(struct stor_pool *p, struct stor_ds *ds, const struct snap *S);

/** Enlist @n ops in the open txg (their references are the stage's now);
 *  only from a txg_close_fn. @return 0 or -ENOMEM (none taken) */
int snap_enlist(struct stor_pool *p, const struct snap_op *ops, size_t n);
/** Release what @n ops hold. */
void snap_ops_free(struct snap_op *ops, size_t n);
/** Apply @op in @t; an extent no one holds any more goes to @free_fn. */
int snap_commit_op(struct meta_txn *t, const struct snap_op *op,
		   int (*free_fn)(void *arg, const struct bp *bp), void *arg);

/** A reference on the MAC key of @s's table in *@out, derived (and the
 *  table's MAC root checked) once while its dataset's key is loaded.
 *  @return 0, STOR_ENOKEY, STOR_EAUTH (the root does not verify), -ENOMEM */
int snap_mac(struct snap *s, struct mac_key **out);

/** A snapshot record found while loading the dataset table (after its dataset). */
int snap_load_one(struct stor_pool *p, const char *name, const void *val, size_t vlen);
/** The snapshot whose table is @id (admin lock held), or NULL. */
struct snap *snap_find_id_locked(struct stor_pool *p, uint64_t id);
/** The snapshot DATASET@SNAP @name, unless it is being destroyed; NULL if none. */
struct snap *snap_find_locked(struct stor_pool *p, const char *name);
/** The dataset GUID of table @id if it is a snapshot's, else 0 (any thread). */
uint64_t snap_guid_of(struct stor_pool *p, uint64_t id);
/** The GUID a record of table @id (a head's or a snapshot's) born at @birth
 *  was sealed under (ds_sealer), and in *@ranged whether that depends on the
 *  birth (a promoted dataset); 0 if no such table (any thread). */
uint64_t snap_sealer_of(struct stor_pool *p, uint64_t id, uint64_t birth, int *ranged);
/** Pool @p is being renamed @name: its snapshots' records under their new
 *  names in @t, then (after the commit) their names in memory. */
int snap_rename_txn(struct stor_pool *p, struct meta_txn *t, const char *name);
void snap_rename_mem(struct stor_pool *p, const char *name);
/** Free the snapshots of a dataset being freed. */
struct destroy_plan;
/** The dry run of stor_snap_destroy() into @pl (stor_destroy_plan). */
int snap_destroy_plan(struct stor_pool *p, const char *name, unsigned flags,
		      struct destroy_plan *pl);
void snap_free_all(struct stor_ds *ds);
/** Wipe the MAC keys of @ds's snapshots (its key is being unloaded). */
void snap_drop_keys(struct stor_ds *ds);

/** Open a read-only handle on snapshot @name (admin lock not held). */
int snap_open(struct stor_pool *p, const char *name, struct stor_ds **out);
void snap_close(struct stor_ds *h);
/**
 * The pointer of record @recno as snapshot handle @h sees it: the head's,
 * then each snapshot's table from the newest down to its own, the first
 * born at or before the snapshot's txg (its group MAC checked on an
 * encrypted dataset). Called inside a reader section.
 * @return 0 with *found (0: a hole then), STOR_EAUTH, STOR_ENOKEY, an error
 */
int snap_resolve(struct stor_pool *p, struct stor_ds *h, uint64_t recno, struct bp *bp,
		 int *found, uint64_t *guid);
/** The pointer of @recno in the image of snapshot @S: its dataset's head and
 *  tables only, each group checked; then, if none and its dataset is a
 *  clone, its origin's image, and so on (clone.c). @guid: the GUID of the
 *  dataset that sealed what was found. Inside a reader section. */
int snap_resolve_at(struct stor_pool *p, struct snap *S, uint64_t recno, struct bp *bp,
		    int *found, uint64_t *guid);
int clone_resolve(struct stor_pool *p, struct snap *S, uint64_t recno, struct bp *bp, int *found,
		  uint64_t *guid);
/** Bytes of @ds's pointers born after its newest snapshot (its written
 *  property; all it references when it has none). Admin lock held. */
uint64_t snap_written_head(struct stor_pool *p, struct stor_ds *ds);
/** The record of snapshot @s as it is (a rename puts it under a new key).
 *  @return its length */
int snap_record(const struct snap *s, uint8_t rec[SNAP_RECORD_MAX]);
/** The record of snapshot @s once it belongs to @to (a promote): its new
 *  name in *@name (malloc'ed) and its bytes in @rec. @return its length or -ENOMEM */
int snap_record_for(const struct snap *s, const struct stor_ds *to, char **name,
		    uint8_t rec[SNAP_RECORD_MAX]);
/** @ds's space anew from its tables (after a commit moved pointers). Admin lock. */
void snap_recount_space(struct stor_pool *p, struct stor_ds *ds);
/** stor_ds_get_all() of a snapshot; with @want, of that property alone
 *  (used and written each walk tables: a list of 100,000 snapshots asks
 *  for one or two of them, not for all). */
int snap_get_all(struct stor_pool *p, const char *name, const char *want,
		 int (*fn)(const struct stor_prop_value *v, void *ctx), void *ctx);

#endif
