/* SPDX-License-Identifier: MIT */
/*
 * The structs every part of libstore from dev/ up works on: the pool
 * (struct stor_pool, its LUNs in struct pool_lun), the dataset (struct
 * stor_ds, its key state and counters) and the snapshot (struct snap).
 * A pool is LUNs first, so this is dev's: what it embeds comes from dev
 * and the layers before it, and a layer above reaches in through a
 * function pointer it is handed (keep_mac). daemon/ and client/ never
 * include this. Each module's functions are in its own header, in its
 * layer's folder (libstore/local.mk lists the layers; tests/layers.sh
 * checks them).
 */
#ifndef STOR_POOL_IMPL_H
#define STOR_POOL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/seen_bits.h"
#include "crypt/keys.h"
#include "prop_names.h"
#include "store.h"

struct lun;
struct meta;
struct spacemap;
struct alloc;
struct stage;

#define STRIPES 256

/* A data key derived for one key salt; kept until the key state is freed. */
struct salt_key {
	uint64_t salt;
	uint64_t guid; /* the dataset GUID it is derived for: a clone's own, or its origin's */
	unsigned gen;  /* the master key it is derived from (struct ds_keys) */
	struct crypt_key *key;
	struct salt_key *next; /* every key of the state, newest first */
};

#define DSKEYS_HOT 16
#define DSKEYS_MAX_SALTS 4096 /* data keys one key state keeps at most */

/* Key state of a dataset whose key is loaded; swapped as one pointer. */
struct ds_keys {
	uint8_t *master; /* KEYS_MASTER_LEN bytes of secure memory */
	/* a rekey's previous master key, until every record is sealed again
	 * (rekey.c); NULL otherwise. Records carry the generation bit of the
	 * one they were sealed under: BP_F_KEYGEN set for generation 1 */
	uint8_t *old;
	unsigned gen; /* of @master; @old is the other one */
	int suite[2];    /* of each generation's data keys (a suite change has two) */
	uint8_t *wk;     /* wrapping key, on an encryption root only */
	struct mac_key *mac;  /* block pointer MACs (bpmac.c) */
	unsigned mac_gen; /* the master @mac and the snapshots' MAC keys are of (rekey.c) */
	struct seen_bits seen; /* groups verified since the load */
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

/*
 * Counters of one dataset: struct stor_io_stats, field by field, atomic.
 * A request bumps one histogram, its op's (reads, writes, the rest); the
 * all-ops histogram of stor_io_stats is their sum, made when read.
 */
enum { DS_LAT_READ, DS_LAT_WRITE, DS_LAT_OTHER, DS_LAT_N };
struct ds_stats {
	atomic_uint_fast64_t reads, writes, discards, flushes, errors;
	atomic_uint_fast64_t read_bytes, write_bytes, cache_hits, cache_misses;
	atomic_uint_fast64_t sealed, opened, seal_ns, open_ns, cksum_errors, auth_errors;
	atomic_uint_fast64_t read_ns, write_ns;
	/* made at the dataset's first request (stats.c): 4 KiB a dataset that
	 * takes none (most, among 100,000) does without */
	_Atomic(struct ds_lat *) lat;
};
struct ds_lat {
	atomic_uint_fast64_t h[DS_LAT_N][STOR_LAT_BUCKETS];
};

/* A snapshot of a dataset (ds/snapshot.c); here because the write path
 * (txg.c) moves an overwritten pointer into the newest one's table. */
struct snap {
	char *name; /* pool/ds@snap */
	uint64_t id;      /* its table of kept pointers: META_BP keys (id, recno) */
	uint64_t guid;    /* binds its MAC key (keys_derive_mac) */
	uint64_t txg;     /* it holds what was committed up to this txg */
	uint64_t ctime;   /* seconds since the epoch */
	uint64_t volsize; /* the dataset's size then */
	uint64_t referenced; /* the bytes its dataset's pointers took then */
	struct stor_ds *ds; /* its dataset */
	atomic_int refs;  /* open handles */
	int dying;        /* its destroy is staged, not yet committed */
	int nclones;      /* datasets whose origin it is (admin lock) */
	pthread_mutex_t lock; /* @mk and @seen */
	struct mac_key *mk;   /* of an encrypted dataset, while its key is loaded */
	struct seen_bits seen; /* groups of its table verified since */
};

struct stor_uprop {
	char *name, *value;
};

struct stor_ds {
	struct stor_pool *pool;
	char *name;
	uint64_t id, guid, createtxg;
	uint64_t creation; /* seconds since the epoch; 0: not known (an older record) */
	_Atomic uint64_t volsize;
	uint32_t recsize;
	char *local[PROP_COUNT]; /* locally set values; NULL = unset */
	struct stor_uprop *uprops; /* local user properties, sorted by name (userprops.c) */
	size_t nuprops;
	int save_later; /* stor_ds_set_many: ds_save() waits for its one commit (admin lock) */
	atomic_int refs;
	int destroyed;
	atomic_int receiving; /* recv.c fills it: no one else opens it */
	int unlisted;         /* created by a receive not whole yet: in no parent's list (children.c) */
	atomic_int macs_later; /* recv.c: pointers staged with no MAC; the tree is rebuilt */
	atomic_int partial;    /* a receive -s cut short kept it (receiving is set too): it
				* waits for send -t or receive -A (recv_state.c) */

	/* effective values of inherited properties, for the I/O path */
	atomic_int sync_mode; /* enum prop_sync */
	atomic_int comp_level, checksum_on;
	atomic_int cache_all; /* primarycache=all: records go through the data cache */

	atomic_int_fast64_t used, logical_used; /* used: charged when allocated */
	atomic_int_fast64_t snap_used; /* extents only its snapshots hold (usedbysnapshots) */
	_Atomic uint64_t refres, res; /* refreservation, reservation in bytes (space.c) */
	size_t sp_idx;                /* its index in the pool's sp_ds, when that is current */
	/* space_lock: its metadata share (space.c) and the volsize and
	 * refreservation it was worked out for */
	uint64_t sp_share, sp_share_vol, sp_share_refres;
	struct ds_stats stats;

	/* encryption: fixed at creation */
	int suite;               /* enum crypt_suite; CRYPT_OFF if clear */
	uint64_t enc_root_id;    /* the dataset whose wrapping key wraps ours */
	uint8_t wrapped[KEYS_WRAPPED_LEN];
	/* key generations (rekey.c): @wrapped is generation @keygen; during a
	 * rekey @wrapped_old is the other, until the rekey completes */
	unsigned keygen;
	int has_old;
	uint8_t wrapped_old[KEYS_WRAPPED_LEN];
	/* a change of suite (rekey.c): the suite of @wrapped's master key and
	 * of @wrapped_old's, 0 when @suite (dskeys_suite_of) */
	int key_suite, old_suite;
	/* encryption in place (rekey.c): its key file entry written before the
	 * commit that makes it encrypted (key_pending, keyfile.c), and, from
	 * that commit to the end of the walk, clear records beside sealed ones
	 * (encrypting), each read through its MAC group like them */
	int key_pending;
	atomic_int encrypting;
	int keyformat;           /* enum stor_keyformat, on a root */
	uint32_t iters;          /* pbkdf2 iterations, on a root */
	uint8_t salt[KEYS_SALT_LEN];
	_Atomic(struct ds_keys *) keys; /* NULL while the key is not loaded */
	struct rekey *rekey; /* rekey.c: its state and thread, once asked (admin lock) */

	/* snapshots (snapshot.c): oldest first, under the pool's snap_lock;
	 * @keep is the newest one not being destroyed, where an overwrite puts
	 * the pointer it replaces when that pointer is older than it (written
	 * under the hold and stage_lock, read by txg_stage under stage_lock) */
	struct snap **snaps;
	size_t nsnaps, capsnaps;
	struct snap *keep;
	/* @snaps by the name after '@' (ds/snapnames.c; snap_lock):
	 * valid while snap_index_n == nsnaps */
	uint32_t *snap_index;
	size_t snap_index_cap, snap_index_n;
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

/* The stripe (p->stripes) a writer of record @recno of dataset @ds_id holds
 * from its read of old bytes to its stage (record.c, txg_stage). */
static inline unsigned pool_stripe(uint64_t ds_id, uint64_t recno)
{
	uint64_t h = (ds_id * 0x9e3779b97f4a7c15ull) ^ (recno * 0xc2b2ae3d27d4eb4full);

	return (unsigned)((h ^ (h >> 32)) % STRIPES);
}

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

/* A table a rekey's walk seals records of (record_reseal): a dataset's
 * head or one of its snapshots, with that table's MAC key and the bits of
 * its groups verified since the key was loaded. */
struct mac_key;
struct reseal_table {
	uint64_t id;
	struct mac_key *mk;
	struct seen_bits *seen;
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
	struct spacemap *smap; /* the free map's rows in meta (txg/spacemap.c) */
	struct metalog *mlog; /* the metadata on the LUNs (metalog.c) */
	struct scrub *scrub;  /* scrub.c */
	struct alloc *alloc;
	struct pool_lun luns[STOR_LUNS_MAX];
	atomic_uint nluns;
	atomic_int sides_dirty; /* a side's missing_since changed: the next commit writes it */
	atomic_int degraded;    /* a LUN is faulted, as the last pool.state event said */
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
	/* the MAC key of a snapshot (snap_mac), which txg.c needs for a pointer
	 * it moves into the kept snapshot's table: handed down by txg_init */
	int (*keep_mac)(struct snap *s, struct mac_key **out);
	/* record_reseal (io/record.c), which a rekey's walk (ds/rekey.c) calls:
	 * set by the pool when it opens */
	int (*reseal)(struct stor_ds *ds, const struct reseal_table *tb, size_t n,
		      const uint64_t *recnos, size_t *done);
	int timer_stop, timer_started;
	atomic_int suspended; /* enum stor_suspend: writes are refused */
	/* batches of clients' requests started (record.c), counted only while
	 * a walk watches it (client_io_watchers, rekey.c): it takes less of
	 * its rate while this moves, and clients pay one shared add per batch
	 * only then */
	atomic_uint_fast64_t client_io;
	atomic_int client_io_watchers;
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
	size_t sp_n, sp_cap;    /* entries, and room in each of the three */
	uint64_t sp_pending;          /* promised to datasets not yet in sp_ds */
	uint64_t sp_gone;             /* metadata shares of destroyed datasets (space.c) */
	uint64_t sp_gone_ckpts;       /* held until metalog_checkpoints() passes this */
	_Atomic uint64_t resv_total;  /* every reservation and promise: U at most */
};

#endif
