/* SPDX-License-Identifier: MIT */
/*
 * Private definitions shared inside libstore; daemon/ and client/ never
 * include this. Who calls whom, top down (a unit calls only those below it,
 * or its own row):
 *   record.c                      the I/O pipeline
 *   pool, dataset, dskeys, keyfile  one subsystem, mutually dependent (pool.c
 *                                 says why); stats.c, verify.c, errlog.c beside it;
 *                                 snapshot.c and clone.c in it (a clone is a dataset
 *                                 that reads a snapshot)
 *   scrub.c, resilver.c           the scans, and sides back in service: one row
 *                                 (a resilver is scrub's walk; its end is resilver's)
 *   txg.c, lunset.c, mirror.c, bpmac.c  commits, the LUN set, a mirror's sides,
 *                                 block pointer MACs
 *   metalog.c                     the metadata log on the LUNs (txg.c, pool.c)
 *   lun, alloc, meta_lmdb, bp, cache, crypt*, keys, compress, props,
 *   statedir, pool_error, errors  leaves
 */
#ifndef STOR_STORE_IMPL_H
#define STOR_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "crypt/crypt.h"
#include "crypt/keys.h"
#include "ds/props.h"
#include "store.h"
#include "txg/bpmac.h"
#include "txg/txg.h"

struct lun;
struct meta;
struct alloc;
struct stage;

#define STRIPES 256

/* A data key derived for one key salt; kept until the key state is freed. */
struct salt_key {
	uint64_t salt;
	uint64_t guid; /* the dataset GUID it is derived for: a clone's own, or its origin's */
	struct crypt_key *key;
	struct salt_key *next; /* every key of the state, newest first */
};

#define DSKEYS_HOT 16
#define DSKEYS_MAX_SALTS 4096 /* data keys one key state keeps at most */

/* Key state of a dataset whose key is loaded; swapped as one pointer. */
struct ds_keys {
	uint8_t *master; /* KEYS_MASTER_LEN bytes of secure memory */
	uint8_t *wk;     /* wrapping key, on an encryption root only */
	struct mac_key *mac;  /* block pointer MACs (bpmac.c) */
	struct mac_seen seen; /* groups verified since the load */
	_Atomic(struct salt_key *) hot[DSKEYS_HOT]; /* by salt; entries live in @all */
	struct salt_key *all;
	size_t nall;
	pthread_mutex_t lock; /* deriving a data key */
	/* the nonce block writes draw from (crypt.c, nonce scheme) */
	pthread_mutex_t nonce_lock;
	int have_block;
	uint32_t prefix;
	uint64_t salt, next;
};

/* Counters of one dataset: struct stor_io_stats, field by field, atomic. */
struct ds_stats {
	atomic_uint_fast64_t reads, writes, discards, flushes, errors;
	atomic_uint_fast64_t read_bytes, write_bytes, cache_hits, cache_misses;
	atomic_uint_fast64_t sealed, opened, seal_ns, open_ns, cksum_errors, auth_errors;
	atomic_uint_fast64_t lat[STOR_LAT_BUCKETS];
};

struct stor_ds {
	struct stor_pool *pool;
	char *name;
	uint64_t id, guid, createtxg;
	_Atomic uint64_t volsize;
	uint32_t recsize;
	char *local[PROP_COUNT]; /* locally set values; NULL = unset */
	atomic_int refs;
	int destroyed;
	atomic_int receiving; /* recv.c fills it: no one else opens it */
	int unlisted;         /* created by a receive not whole yet: in no parent's list (children.c) */
	atomic_int macs_later; /* recv.c: pointers staged with no MAC; the tree is rebuilt */

	/* effective values of inherited properties, for the I/O path */
	atomic_int sync_mode; /* enum prop_sync */
	atomic_int comp_level, checksum_on;
	atomic_int cache_all; /* primarycache=all: records go through the data cache */

	atomic_int_fast64_t used, logical_used; /* used: charged when allocated */
	atomic_int_fast64_t snap_used; /* extents only its snapshots hold (usedbysnapshots) */
	_Atomic uint64_t refres, res; /* refreservation, reservation in bytes (space.c) */
	size_t sp_idx;                /* its index in the pool's sp_ds, when that is current */
	struct ds_stats stats;

	/* encryption: fixed at creation */
	int suite;               /* enum crypt_suite; CRYPT_OFF if clear */
	uint64_t enc_root_id;    /* the dataset whose wrapping key wraps ours */
	uint8_t wrapped[KEYS_WRAPPED_LEN];
	int keyformat;           /* enum stor_keyformat, on a root */
	uint32_t iters;          /* pbkdf2 iterations, on a root */
	uint8_t salt[KEYS_SALT_LEN];
	_Atomic(struct ds_keys *) keys; /* NULL while the key is not loaded */

	/* snapshots (snapshot.c): oldest first, under the pool's snap_lock;
	 * @keep is the newest one not being destroyed, where an overwrite puts
	 * the pointer it replaces when that pointer is older than it (written
	 * under the hold and stage_lock, read by txg_stage under stage_lock) */
	struct snap **snaps;
	size_t nsnaps, capsnaps;
	struct snap *keep;
	/* a clone (clone.c): the snapshot it reads for what it has not
	 * written (origin_id in its record), and the bytes of that image it
	 * still references (its referenced is own + shared_ref) */
	struct snap *origin;
	uint64_t origin_id;
	atomic_int_fast64_t shared_ref;
	/* a promoted clone (clone.c): the records of its tables born by
	 * sealers[i].upto (the first that holds) were sealed under
	 * sealers[i].guid, its old origin's; later ones under its own. Set
	 * under the admin lock while the dataset is closed; in its record */
	struct sealer {
		uint64_t upto, guid;
	} *sealers;
	size_t nsealers;
	/* a handle on a snapshot: @head is its dataset, @snap the snapshot */
	struct stor_ds *head;
	struct snap *snap;
};

/* What I/O a mirror side takes (pool_lun.out): read and written; written
 * only (a resilver's target: it takes new writes, and is read once it has
 * the old ones too); neither (it missed writes, or is not there). */
#define SIDE_IN 0
#define SIDE_CATCHING_UP 1
#define SIDE_OUT 2

/* A side's state, as the sides row keeps it (lunset.c) and status shows it. */
enum side_state {
	SIDE_ONLINE = STOR_SIDE_ONLINE,
	SIDE_FAULTED = STOR_SIDE_FAULTED,
	SIDE_OFFLINE = STOR_SIDE_OFFLINE,
	SIDE_RESILVERING = STOR_SIDE_RESILVERING,
	SIDE_DETACHED = STOR_SIDE_DETACHED
};

/* The dataset whose keys and records a handle reads: a snapshot's head. */
static inline struct stor_ds *ds_head(const struct stor_ds *ds)
{
	return ds->head ? ds->head : (struct stor_ds *)ds;
}

struct pool_lun {
	struct lun *lun;
	uint64_t guid;
	atomic_uint_fast64_t cksum_errors;
	unsigned label_damaged, label_repaired; /* label copies at import (lun_label_read bits) */
	/* the vdev (mirror.c): the index of its first LUN, the one block
	 * pointers name; that one lists every side, itself first */
	unsigned vdev;
	unsigned nsides;
	uint16_t side[STOR_MIRROR_MAX];
	atomic_int out; /* SIDE_IN, SIDE_CATCHING_UP or SIDE_OUT (mirror.c) */
	atomic_int state; /* enum side_state: what the sides row keeps and status shows */
	/* the first txg whose writes this side may lack (0: none), durable in
	 * the pool's "sides" row (lunset.c): a side out stays out across an
	 * import, and a resilver knows from where to copy */
	_Atomic uint64_t missing_since;
	char *absent; /* why the LUN did not open at import (lun_absent), or NULL */
	/* its file was truncated below the data end the pool record gives: that
	 * end (bytes), which the record keeps; the records past the file's end
	 * are lost (the import notes them in the errlog). 0 when whole. */
	uint64_t cut;
	atomic_uint_fast64_t repaired;
	atomic_uint turn; /* on the first LUN: which side the next read goes to */
};

/* errlog.c: records with unrecoverable errors */
#define ERRLOG_MAX 128
struct errlog_ent {
	uint64_t ds_id, recno;
};
struct errlog {
	struct errlog_ent e[ERRLOG_MAX];
	unsigned n;
	uint64_t more;   /* noted past ERRLOG_MAX */
	atomic_int dirty; /* the next commit writes the row */
};

struct stor_pool {
	char *name;
	char *path; /* the LMDB file */
	int lock_fd; /* flock'ed <pool>.lock: one opener at a time, in any process */
	uint64_t keyfile_gen;  /* generation of the key file's copies (keyfile.c) */
	char keyfile_note[512]; /* a copy repaired or not written, for pool status */
	struct stor_pool_opts opts;
	uint64_t guid;
	uint64_t next_ds_id;
	struct meta *meta;
	struct metalog *mlog; /* the metadata on the LUNs (metalog.c) */
	struct scrub *scrub;  /* scrub.c */
	struct alloc *alloc;
	struct pool_lun luns[STOR_LUNS_MAX];
	atomic_uint nluns;
	atomic_int sides_dirty; /* a side's missing_since changed: the next commit writes it */
	/* LUNs (and absent reasons) a side no longer uses, closed with the pool:
	 * a status call may still hold the pointer (lunset_retire) */
	struct errlog errlog;
	atomic_int resilver_asked; /* a side began catching up: the resilver starts over */
	struct lun **retired;
	char **retired_why;
	size_t nretired;

	pthread_mutex_t admin; /* dataset table, properties, keys, pool config */
	pthread_mutex_t snap_lock; /* every dataset's snapshot list (a leaf lock) */
	struct stor_ds **ds;   /* sorted by name */
	size_t nds, capds;

	pthread_mutex_t stripes[STRIPES]; /* serialise writers of one record */

	/* txg.c */
	pthread_rwlock_t hold;
	pthread_mutex_t stage_lock;
	struct stage *open, *syncing;
	pthread_mutex_t commit_lock;
	_Atomic uint64_t synced_txg;
	_Atomic uint64_t freed; /* sectors commits gave back to the allocator, ever */
	pthread_t timer;
	pthread_mutex_t timer_lock;
	pthread_cond_t timer_cond;
	int timer_stop, timer_started;
	atomic_int suspended; /* enum stor_suspend: writes are refused */
	atomic_int suspend_error; /* what the failed flush or commit returned */
	pthread_mutex_t sync_lock; /* one txg_read_synchronize at a time */
	_Atomic uint64_t read_epoch;
	atomic_long readers[2];

	/* space.c: a copy of the dataset table for the write path, which may
	 * not take the admin lock, and the reservations promised */
	pthread_mutex_t space_lock;
	struct stor_ds **sp_ds; /* sorted by name, as p->ds */
	int *sp_parent;         /* index of each one's parent, -1 for the root */
	uint64_t *sp_tree;      /* scratch of the computation */
	size_t sp_n;
	uint64_t sp_pending;          /* promised to datasets not yet in sp_ds */
	_Atomic uint64_t resv_total;  /* every reservation and promise: U at most */
};

/* dataset.c */
struct stor_ds *ds_find_locked(struct stor_pool *p, const char *name);
struct stor_ds *ds_find_id_locked(struct stor_pool *p, uint64_t id);
/** The index in p->ds of @ds's parent, or SIZE_MAX (the pool's root). */
size_t ds_parent_index_locked(struct stor_pool *p, const struct stor_ds *ds);
int ds_load_all(struct stor_pool *p);
void ds_free(struct stor_ds *ds);
int ds_save(struct stor_pool *p, struct stor_ds *ds);
struct meta_txn;
/** Put the record of @ds in @t (a read-write transaction). */
int ds_save_txn(struct meta_txn *t, struct stor_ds *ds);
/** The record of @ds, malloc'ed, in *@out. @return 0 or -ENOMEM */
int ds_record(struct stor_ds *ds, uint8_t **out, size_t *len);
/** Effective (local or inherited) value of @id for @ds; admin lock held. */
const char *ds_prop_locked(struct stor_pool *p, struct stor_ds *ds, int id, struct stor_ds **from);

/* clone.c */
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
/** A clone's key state: its origin's master key, wrapped by their root's
 *  wrapping key under its own GUID (dskeys.c). */
int dskeys_clone(struct stor_pool *p, struct stor_ds *ds, const struct stor_ds *parent,
		 const struct stor_ds *origin);
struct promote_plan;
/** Apply a promote's moves and records in @t (snap_commit_op). */
int clone_promote_commit(struct meta_txn *t, const struct promote_plan *pl);
void clone_plan_free(struct promote_plan *pl);
/** Create a dataset; a clone when @origin is set (dataset.c). Admin lock held. */
int ds_create_locked(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
		     struct snap *origin, struct stor_ds **out);
/** Destroy @name as stor_ds_destroy() does; admin lock held. */
int ds_destroy_locked(struct stor_pool *p, const char *name, unsigned flags);
/** Destroy @seeds, with -r (@flags) their descendants and snapshots, with -R
 *  the clones of those too, recursively, all in one txg; admin lock held.
 *  @return 0, -EBUSY (with the reason: children, snapshots or clones and no
 *  flag for them, open, or the pool's root among them) */
int ds_destroy_set_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			  unsigned flags);

/* space.c: reservations and slop (its head comment gives the rules) */
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

/* pool_error.c: the text stor_pool_last_error() returns, per thread */
void pool_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pool_clear_error(void);
/** 1 if a call of this thread set a text since the last pool_clear_error(). */
int pool_error_set(void);

/* pool.c; pool_create_root() is in dataset.c */
int pool_create_root(struct stor_pool *p);
int pool_save_config(struct stor_pool *p);
/** The pool record put in @t, which the caller commits: for a change that
 * leaves the LUNs as they are (a new dataset's id), so <pool>.luns stays. */
int pool_config_txn(struct stor_pool *p, struct meta_txn *t);
/** The pool record naming LUNs [0, @n), one not yet published among them (attach). */
int pool_save_config_n(struct stor_pool *p, unsigned n);

/* pool_rename.c: a pool renamed on import */
/** Bring dataset record keys named for another pool in line with p->name
 *  (a rename cut short); before the datasets load. */
int pool_follow_name(struct stor_pool *p);
/** Rename the open pool @p to @name: dataset records, state files, memory. */
int pool_rename(struct stor_pool *p, const char *name);

/* lunset.c: the pool's LUNs, p->luns[0, nluns) */
/** Open LUN @idx of a pool being imported and check its label names this
 *  pool, @guid and @idx; then it joins the set and the allocator. @end is
 *  where the pool record says its data ends (bytes from the LUN's start):
 *  a file cut short of it is refused as a side of a @mirror (the other
 *  sides hold its data), else joins cut short (pool_lun.cut). */
int lunset_attach(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t end, int mirror);
/** A LUN being added: taken and labelled, not yet published. */
struct lunset_new {
	struct lun *lun;
	struct alloc_map *map;
	unsigned idx;
	int labelled;
};
/** Take @path as the LUN after @prev (NULL: the next LUN of @p), refusing
 *  what must not be taken over, and label it as side @side of a vdev of
 *  @sides LUNs whose first is @prev's first (side 0: itself); p->luns[idx]
 *  is set but nluns does not count it. Admin lock held. On failure nothing
 *  is left behind. */
int lunset_prepare(struct stor_pool *p, const char *path, uint64_t size, unsigned flags,
		   const struct lunset_new *prev, unsigned side, unsigned sides,
		   struct lunset_new *n);
/** LUN @idx of the pool record did not open (@why): a stand-in (lun_absent)
 *  of @size bytes takes its place as a side of the mirror of lun @vdev, out
 *  of service; the import goes on while another side of it is there. With
 *  @why NULL, LUN @idx was detached: a stand-in in no vdev's list of sides
 *  (DETACHED), whose index stays taken, never opened. */
int lunset_absent(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t size, unsigned vdev, const char *why);
/** The sides' state from the pool's "sides" row of @t (after every LUN
 *  joined): which are out, and since which txg; a LUN absent that the row
 *  has in service is out since @txg, the last one committed. */
struct meta_txn;
int lunset_load_sides(struct stor_pool *p, struct meta_txn *t, uint64_t txg);
/** Which of the first @n LUNs the "sides" row of @t has detached, before
 *  any joins: @detached[i] is 1 for each, else 0. @return 0 or an error */
int lunset_row_detached(struct meta_txn *t, unsigned n, uint8_t *detached);
/** Put the "sides" row into @t (the txg's transaction) if it changed.
 *  @return 1 put, 0 nothing to put, or an error (the change stays due);
 *  after 1, a commit that fails calls lunset_sides_undo() */
int lunset_save_sides(struct stor_pool *p, struct meta_txn *t);
/** Write the sides row of LUNs [0, @n) now, in a transaction of its own
 *  (@n may count a LUN not yet published). Commit lock held. */
int lunset_write_sides(struct stor_pool *p, unsigned n);
/** LUN @lun of the pool by path or by index ("0", "1"...); -1 if none. */
int lunset_index(struct stor_pool *p, const char *lun);
/** Take @path (as lun_take does for an add; a missing file is made the size
 *  of the vdev's sides) and label it LUN @idx, side of the vdev of lun
 *  @vdev, @sides wide, with a new LUN guid in @guid. Admin lock held. */
int lunset_new_side(struct stor_pool *p, unsigned idx, const char *path, unsigned flags,
		    unsigned vdev, unsigned sides, struct lun **out, uint64_t *guid);
/** Rewrite the labels of the sides of vdev @vdev as @sides wide, with its
 *  detached LUNs (format.h): wider before the pool record counts a side,
 *  narrower only after the record and sides row without it are on the LUNs. */
int lunset_relabel_width(struct stor_pool *p, unsigned vdev, unsigned sides);
/** Open LUN @idx again at its path (it was absent) and check its label is
 *  that LUN's; the caller puts it in place. */
int lunset_reopen(struct stor_pool *p, unsigned idx, struct lun **out);
/** Put @l (and @why, either may be NULL) aside until the pool closes. */
int lunset_retire(struct stor_pool *p, struct lun *l, char *why);
/** Take LUN @idx out of its vdev's list of sides for good (detach). */
void lunset_drop_side(struct stor_pool *p, unsigned idx);
/** The commit that took lunset_save_sides() failed: the change is due again. */
void lunset_sides_undo(struct stor_pool *p);
/** Count the prepared LUN in nluns and give its space to the allocator. */
void lunset_publish(struct stor_pool *p, struct lunset_new *n);
/** Undo lunset_prepare(): wipe the label, close (the claim goes). */
void lunset_abandon(struct stor_pool *p, struct lunset_new *n);
void lunset_close(struct stor_pool *p);
/** Rewrite every LUN's label with this host's id, @state (LABEL_ACTIVE,
 *  LABEL_EXPORTED), the pool's name and its LUN count; the first error. */
int lunset_mark(struct stor_pool *p, unsigned state);
/** Wipe every LUN's label (destroy, a failed create); the first error. */
int lunset_wipe(struct stor_pool *p);
/** A mirror side whose file was deleted goes out of service while another
 *  side holds every write: it would be gone at the next import anyway. */
void lunset_check_gone(struct stor_pool *p);
/** Note that I/O on @lun failed; fault it when errors pile up. */
void lunset_failed(struct stor_pool *p, struct lun *lun);

/* mirror.c: the sides of a vdev; block pointers name its first LUN */
/** Make LUN @idx side @side of the vdev whose first LUN is @vdev. */
void mirror_join(struct stor_pool *p, unsigned idx, unsigned vdev, unsigned side);
/** Is LUN @idx a side of a mirror? */
int mirror_is_side(const struct stor_pool *p, unsigned idx);
/** The sides of the vdev whose first LUN is @vdev that are in service, into
 *  @out; a LUN of its own is its one side, whatever its state. */
unsigned mirror_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX]);
/** Does a write or flush that side @idx took count for its vdev? A side
 *  catching up does not while a sound side is there: data it alone holds
 *  is not read until the resilver is done, so it is not acknowledged. */
int mirror_side_counts(struct stor_pool *p, unsigned idx);
/** The sides of vdev @vdev that hold every extent (SIDE_IN): those to read. */
unsigned mirror_sound_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX]);
/** The side a read of an extent of vdev @vdev goes to, turning over them. */
unsigned mirror_read_side(struct stor_pool *p, unsigned vdev);
/** I/O on LUN @idx failed (@write: it missed a write): a mirror side with
 *  a sound sibling goes out of service. @return 1 if it did */
int mirror_side_failed(struct stor_pool *p, unsigned idx, int write);
/** fsync every side in service of vdev @vdev; a side whose fsync fails goes
 *  out while one succeeded. @return 0, or the error when none did */
int mirror_flush(struct stor_pool *p, unsigned vdev);
/** Write each of @ios (@n <= MLOG_COPIES; the metadata log's copies, on
 *  vdevs @vdev) to every side in service of its vdev; its result is 0 when
 *  any side took it, and a side that missed it then goes out of service. */
struct lun_io;
void mirror_write_copies(struct stor_pool *p, struct lun_io *ios, const uint16_t *vdev,
			 unsigned n);
/** The extent a read is repairing: where, and how to tell sound bytes. */
struct mirror_ext {
	const struct bp *bp;
	uint64_t guid, recno; /* dataset GUID and record: a clear record's checksum */
};
/**
 * Sound stored bytes of @e into @buf (bp->psize bytes, sector-aligned) from a
 * side other than @bad, whose copy failed (read error, checksum, tag):
 * every side whose copy is bad is rewritten from the sound one and counted
 * as repaired. Sound means the keyless checksum of the stored bytes (or a
 * clear record's checksum) matches; without either only a read error is
 * recoverable. @return 0, or @err when @bad's own copy is sound (the
 * pointer, not the bytes, is wrong) or no side has a sound copy
 */
int mirror_recover(struct stor_pool *p, const struct mirror_ext *e, unsigned bad, int err,
		   uint8_t *buf);

/** Read the extent of @e on every side in service of its vdev and rewrite
 *  the bad copies from a sound one (scrub); @fixed grows by the bytes
 *  rewritten. @return 0, STOR_ECKSUM or -EIO (no sound copy), -ENOMEM */
int mirror_check_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *fixed);

/** Copy the extent of @e from a sound side to every side of its vdev that
 *  is catching up and lacks it (missing since its birth txg or before);
 *  @copied grows by the bytes written. @return 0, STOR_ECKSUM or -EIO (no
 *  sound copy), -ENOMEM */
int mirror_resilver_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *copied);
/** Copy @nsect sectors at @sector of vdev @vdev as they are (metadata log
 *  extents, whose records carry their own checksums) from a sound side to
 *  the sides catching up. @return 0 or the read's error */
int mirror_copy_raw(struct stor_pool *p, unsigned vdev, uint64_t sector, uint32_t nsect);

/* errlog.c: the pool's list of records with unrecoverable errors */
/** Record @recno of dataset @ds_id has no sound copy (a read, scrub or
 *  resilver found none); any thread, no lock held but leaves. */
void errlog_note(struct stor_pool *p, uint64_t ds_id, uint64_t recno);
/** Empty the list (pool clear, a scrub without errors). */
void errlog_clear(struct stor_pool *p);
/** The list from the "errlog" row of @t, at import. */
struct meta_txn;
int errlog_load(struct stor_pool *p, struct meta_txn *t);
/** Put the row into @t if the list changed: 1 put, 0 nothing, or an error;
 *  after 1, a commit that fails calls errlog_undo() */
int errlog_save(struct stor_pool *p, struct meta_txn *t);
void errlog_undo(struct stor_pool *p);

/* resilver.c: sides going out of service and back (store.h: offline,
 * online, replace, attach, detach) */
/** Is a side of the pool catching up (a resilver has work)? */
int resilver_wanted(struct stor_pool *p);
/** The resilver's walk is done: copy the metadata log to the sides
 *  catching up, and put them in service. */
void resilver_done(struct stor_pool *p);

/* scrub.c: the pool's scrub thread (store.h: stor_pool_scrub) */
/** Start a resilver now (in place of a scrub or a resilver running): the
 *  walk of every block pointer, from the first, for the sides catching up. */
int scan_resilver(struct stor_pool *p);
/** Load the scrub's row; one that was running goes on. After txg_init. */
int scrub_init(struct stor_pool *p);
/** Stop the thread (a close), keeping the row as it is. NULL-safe. */
void scrub_fini(struct stor_pool *p);

/* dskeys.c: key state of datasets (load, unload, change, nonces) */
int dskeys_create(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *parent,
		  const struct stor_ds_opts *opts);
void dskeys_drop(struct stor_ds *ds);
/** Draw @n nonces for a batch of writes from the current nonce block of @k. */
void dskeys_nonces(struct ds_keys *k, size_t n, uint64_t *salt, uint32_t *prefix,
		   uint64_t *first);
/**
 * The data key of key salt @salt, derived on first use and kept with the
 * key state; past DSKEYS_MAX_SALTS salts a key of its own in *@own, which
 * the caller frees (crypt_key_free) once its ops are done. NULL on failure.
 */
const struct crypt_key *dskeys_data_key(struct ds_keys *k, uint64_t guid, int suite,
					uint64_t salt, struct crypt_key **own);
#define DSKEYS_RECORD_LEN 1
void dskeys_record(struct stor_ds *ds, uint8_t **p);
int dskeys_parse(struct stor_ds *ds, const uint8_t **p, const uint8_t *end);
struct recv_identity;
/** Give @ds the GUID and wrapped key of a raw stream (recv.c). */
int dskeys_adopt(struct stor_ds *ds, const struct recv_identity *id);
/** Write the MAC root of a new encrypted dataset @ds into @t. */
int dskeys_init_macs(struct meta_txn *t, struct stor_ds *ds);

/* record.c: records received as they were stored elsewhere (recv.c) */
struct bp;
int record_write_stored(struct stor_ds *ds, size_t n, const uint64_t *recnos,
			const struct bp *bps, uint8_t *const *bufs);

/* recv.c: what a raw stream's dataset is (dataset.c creates it so) */
struct recv_identity {
	int raw; /* else only the mark: a fresh GUID and key as for any create */
	uint64_t guid;
	int suite, keyformat;
	uint32_t iters;
	uint8_t salt[KEYS_SALT_LEN];
	uint8_t wrapped[KEYS_WRAPPED_LEN];
	uint8_t kids_empty[MAC_LEN]; /* its empty list's tag (children.c) */
};
/** Create @name as the copy of a raw stream's dataset: its GUID, its
 *  encryption root's wrapping, no key (admin lock held). */
/** What received @ds joins as its receive ends: its encrypted parent's list
 *  (@join->mk set, a reference), or nothing. @return 0 or STOR_ENOKEY */
struct kids_join;
int ds_list_join(struct stor_pool *p, struct stor_ds *ds, struct kids_join *join);
int ds_create_received_locked(struct stor_pool *p, const char *name,
			      const struct stor_ds_opts *o, const struct recv_identity *id,
			      struct stor_ds **out);
#define RECV_RECEIVING 1u /* the pool table's mark of a dataset: being received */
#define RECV_MACS 2u      /* its MAC tree waits for a key; its roots are there (recv.c) */
#define RECV_INCR 3u      /* an incremental going in: undone to its newest snapshot */
/** Mark dataset @id (@state 0: unmark) in @t. */
int recv_mark_txn(struct meta_txn *t, uint64_t id, unsigned state);
/** @ds, received under a name of its own (receive -F), takes @name, whose
 *  dataset is destroyed already; its mark becomes @mark in the same commit. */
int ds_rename_received(struct stor_pool *p, struct stor_ds *ds, const char *name, unsigned mark);
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
/** A receive of no pool: every check of the stream, nothing stored (the
 *  fuzz harness); stor_recv_feed() and stor_recv_close() as for any. */
struct stor_recv *recv_parser_new(void);
/** Destroy what receives cut short left (at import). */
int recv_cleanup(struct stor_pool *p);

/* statedir.c: the files of a pool in the state directory */
/** fsync the directory holding @path, so a file created or renamed there stays. */
int statedir_sync(const char *path);
/** <state_dir>/pools/<name>.mdb, malloc'ed; NULL on ENOMEM. */
char *statedir_meta_path(const char *state_dir, const char *name);
/** The state directory of pool @name from its statedir_meta_path(); malloc'ed or NULL. */
char *statedir_of(const char *meta_path, const char *name);
/** Does pool @name have metadata in @state_dir? 1, 0 or -ENOMEM */
int statedir_has_pool(const char *state_dir, const char *name);
/** Path of key file copy @copy (0 or 1) of the pool whose metadata is @meta_path. */
void statedir_keyfile_path(const char *meta_path, int copy, char *out, size_t len);
/** Give the files of the pool at @from (a meta path) the names of @to:
 *  -EEXIST if one is taken (nothing renamed then). */
int statedir_rename_pool(const char *from, const char *to);
/** Path of the list of LUN paths of the pool whose metadata is @meta_path:
 *  where an import looks for its LUNs when the metadata is missing. */
void statedir_luns_path(const char *meta_path, char *out, size_t len);
/** Remove the metadata, its lock files and the key file copies of a pool.
 *  @return 0 or -errno of removing the metadata itself */
int statedir_remove_pool(const char *meta_path);

/* keyfile.c: wrapped keys and their parameters, outside LMDB */
/** Replace the key file with the keys of every encrypted dataset (and @extra). */
int keyfile_save(struct stor_pool *p, struct stor_ds *extra);
/** Fill the key fields of the pool's encrypted datasets from the key file. */
int keyfile_load(struct stor_pool *p);
/** The key file's bytes as the LUNs hold them: write both copies when neither
 *  is sound and as new (a state directory lost or restored from an older copy);
 *  when a copy here is newer than the LUNs' (they lagged), hand it to the
 *  metadata log for the next commit instead.
 *  @return 1 rewritten, 0 nothing to do, or an error */
int keyfile_restore(struct stor_pool *p, const uint8_t *buf, size_t len);

#endif
