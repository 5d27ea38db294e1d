/* SPDX-License-Identifier: MIT */
/**
 * libstore: the coffer storage engine.
 *
 * A pool is a set of LUNs (files or block devices) and one LMDB environment
 * (<state_dir>/pools/<pool>.mdb) holding dataset records and block pointers.
 * A dataset is a fixed-size volume cut into records (512 B - 1 MiB, default
 * 8 KiB); each record is written copy-on-write to newly allocated 4 KiB
 * sectors striped over the LUNs, and its block pointer is staged in the open
 * transaction group (txg) until the txg commits: LUN data is fsync'ed first,
 * then all block pointers go to LMDB in one write transaction.
 *
 * Caveats
 * - Thread safety: a struct stor_pool and the struct stor_ds handles opened
 *   from it may be used from any number of threads at once for record I/O
 *   (stor_io_submit, stor_ds_read/write/discard/flush), property reads and
 *   stor_pool_sync. Administrative calls (dataset create/destroy/set, key
 *   load/unload/change) are serialised inside the pool and may also be made
 *   from any thread. stor_pool_close() must not race with any other call on
 *   the same pool, and every dataset handle must be closed before it.
 * - Fork: do not use a pool across fork(); the child must open its own.
 * - Key bytes passed in (stor_key_material) are copied; libstore cleanses its
 *   copies on unload and free. The caller cleanses its own buffer.
 * - libstore never prints; errors come back as return codes. The one
 *   exception is a failed internal assertion (stor_assert.h): a line on
 *   stderr, and abort() in a build configured with --enable-debug (for a
 *   lock a function needs and does not hold, with --enable-asan too).
 *   What happens without a caller asking (a LUN faulted, a copy repaired,
 *   a scrub done) goes to the one receiver of stor_set_event_fn(), called
 *   from any thread, pool locks perhaps held (see "events" below).
 * - Return values: 0 for success, >= 0 for a count, -errno for system
 *   failures, STOR_E* (below -10000) for store conditions.
 */
#ifndef STOR_STORE_H
#define STOR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Limits of names and sizes. */
#define STOR_SECTOR 4096u          /* allocation unit on every LUN */
#define STOR_RECSIZE_MIN 512u
#define STOR_RECSIZE_MAX (1u << 20)
#define STOR_RECSIZE_DEFAULT 8192u
#define STOR_LUNS_MAX 1024u
/** Most sides of a mirror vdev. */
#define STOR_MIRROR_MAX 3u

struct stor_pool;
struct stor_ds;

/** Pool-wide options. All-zero means defaults. */
/** How far an import has brought LMDB up from the log on the LUNs. */
struct stor_progress {
	uint64_t records, records_total; /**< log records applied, of those to apply */
	uint64_t bytes, bytes_total;     /**< their bytes */
	int rebuild;                     /**< 1: LMDB built anew, 0: brought up to date */
};
/** Called by an import from the thread that opens the pool; must not call into the pool. */
typedef void (*stor_progress_fn)(const struct stor_progress *pr, void *arg);

struct stor_pool_opts {
	const char *state_dir;   /**< holds pools/<pool>.mdb; required */
	int direct_io;           /**< open LUNs with O_DIRECT */
	int pread_only;          /**< read LUN files on tmpfs with pread, not in place */
	unsigned txg_timeout_ms; /**< commit the open txg at least this often; 0 = 5000 */
	uint64_t lun_size;       /**< create: size of LUN files that do not exist yet */
	size_t map_size;         /**< LMDB map size; 0 = 4 GiB */
	int force;               /**< create: take LUNs as STOR_FORCE does for add;
				  *   open: import a pool another host id holds */
	/** open: the path of LUN i as stor_pool_search() found it, for i below
	 *  nlun_paths (a NULL entry: the recorded path); the pool record is
	 *  rewritten with these after the open */
	const char *const *lun_paths;
	unsigned nlun_paths;
	/** open: rename the pool to this (dataset names, state files, labels) */
	const char *new_name;
	/** open: called before the first and after every log record replayed
	 *  into LMDB (a rebuild, or an LMDB behind the LUNs); NULL for none */
	stor_progress_fn progress;
	void *progress_arg;
	/** create: the LUNs in vdevs, in order: vdev v is the next vdev_sides[v]
	 *  paths, 1 a LUN of its own (a stripe), 2..STOR_MIRROR_MAX a mirror
	 *  whose sides hold the same bytes. NULL: every LUN a vdev of its own. */
	const unsigned *vdev_sides;
	unsigned nvdevs;
	/** scrub: bytes per second it reads at most, so foreground I/O keeps
	 *  its pace; 0 = as fast as the LUNs go */
	uint64_t scrub_rate;
};

/** LUN calls, unload-key: do what would otherwise be refused (see each call). */
#define STOR_FORCE 0x1u

/**
 * Create a pool named @name over @nluns LUN paths and open it.
 * Paths that do not exist are created as sparse files of opts->lun_size (so
 * is an existing empty file); other files and block devices are used at
 * their size. Every LUN gets a new label, and each is refused as
 * stor_pool_add_lun() says; opts->force is its STOR_FORCE.
 * @return 0, STOR_EBADNAME, -EEXIST (pool metadata exists), STOR_EFOREIGN,
 *         STOR_ENOTBLANK, -EBUSY, -ELOOP, -EINVAL (no LUNs, LUN too small,
 *         LUN inside the state directory), -errno from open/fallocate
 */
int stor_pool_create(const char *name, const char *const *luns, unsigned nluns,
		     const struct stor_pool_opts *opts, struct stor_pool **out);

/**
 * Open (import) an existing pool: read its metadata, check every LUN label
 * (magic, format version, pool GUID, LUN index, checksum, host id), then
 * write the labels active under this host's id (stor_hostid()). LUNs are
 * opened at opts->lun_paths where given (a pool whose LUNs moved while it
 * was exported), else at the paths the pool record names. With
 * opts->new_name the pool is renamed once it has opened (-EEXIST if a pool
 * of that name has metadata in opts->state_dir).
 * @return 0, -ENOENT (no such pool; with opts->lun_paths and no metadata in
 *         opts->state_dir, stor_pool_last_error() says so), STOR_ELABEL
 *         (damaged label), STOR_EFOREIGN (LUN of another pool),
 *         STOR_EHOSTID (labels active under another host id and no
 *         opts->force), STOR_EFORMAT, STOR_ECORRUPT, -errno (missing LUN:
 *         -ENOENT with stor_pool_last_error() naming it)
 */
int stor_pool_open(const char *name, const struct stor_pool_opts *opts, struct stor_pool **out);

/** Commit the open txg and close the pool; its records leave the data
 * cache, wiped, so an import reads what the LUNs hold by then. The labels
 * stay active (a daemon stopping: the same host imports it again). NULL is
 * a no-op. */
int stor_pool_close(struct stor_pool *pool);

/** stor_pool_close(), and once the final commit succeeded the labels are
 * written exported, so any host imports the pool without force. */
int stor_pool_export(struct stor_pool *pool);

/**
 * This host's id, as labels carry it: $COFFER_HOSTID (hex; meant for tests
 * that play two hosts on one machine), else the 4 bytes of /etc/hostid
 * (what gethostid() and ZFS read), else derived from /etc/machine-id, else 0
 * (no id: never refused, never refuses).
 */
uint32_t stor_hostid(void);

/* ---- LUNs on Ceph RADOS ---- */


#define STOR_RADOS_LOCK_DEFAULT 30u /**< seconds a pool's lock lasts unrenewed */
/**
 * How RADOS LUNs ("rados:POOL/PREFIX") reach the cluster, for every such
 * LUN opened after the call: the ceph.conf (NULL or "": Ceph's own search),
 * the client id without "client." (NULL: "admin"), the keyring (NULL: the
 * ceph.conf's) and the seconds the lock on a pool's LUNs lasts unless
 * renewed (0: STOR_RADOS_LOCK_DEFAULT). Nothing connects until a LUN opens.
 * Built without librados it does nothing, and such LUNs fail to open
 * (-EPROTONOSUPPORT). @return 0, -ENOMEM
 */
int stor_rados_config(const char *conf, const char *user, const char *keyring,
		      unsigned lock_timeout);
/**
 * Renew the claims on the LUNs of @pool (the RADOS lock; nothing for files).
 * Call it from a timer at least every third of the lock's duration: a pool
 * whose lock could not be renewed in time refuses writes (lun_rados.c); one
 * that another host took over is suspended with a pool.suspend event.
 * @return the number of LUNs whose claim was lost or not renewed
 */
int stor_pool_renew(struct stor_pool *pool);

/* ---- import by searching ---- */

/** A pool stor_pool_search() found, put together from the labels it read. */
struct stor_found_pool {
	char name[STOR_POOL_NAME_MAX + 1];
	uint64_t guid;
	unsigned state;           /**< STOR_FOUND_ACTIVE or STOR_FOUND_EXPORTED */
	uint32_t hostid;          /**< the host that last imported it */
	unsigned nluns;           /**< LUNs the pool has, as its labels say */
	unsigned nfound;          /**< of those, found */
	const char *const *paths; /**< nluns entries: the path of LUN i, NULL if missing */
	unsigned ndetached;       /**< of those, detached from their mirror: not missing */
	const unsigned char *detached; /**< nluns entries: 1 if LUN i was detached (its
					*   index stays taken, its path NULL), else 0 */
	int complete;             /**< every LUN found, but those detached */
	int degraded;             /**< not complete, but each LUN missing may be a side of a
				   *   mirror another side of which was found: it may import
				   *   DEGRADED (the import decides, from the pool record) */
};
#define STOR_FOUND_ACTIVE 0u   /**< imported, or not cleanly exported (any label says so) */
#define STOR_FOUND_EXPORTED 1u /**< every label found says exported */
/**
 * Read the labels of the regular files and block devices directly in each
 * of @dirs (a symbolic link only if it leads to a block device, as in
 * /dev/disk/by-id; no recursion), or of every LUN in a RADOS pool for a
 * "directory" spelled "rados:POOL", group them by pool GUID and call @fn for
 * each pool, in GUID order. Files that cannot be opened or carry no sound
 * label of this format are skipped, as is a directory that cannot be read;
 * a LUN seen twice (two links to one device) counts once, under its first
 * path. Nothing is written or claimed. @fn's argument lives only during the
 * call; a non-zero return stops the scan.
 * @return the number of pools found, the first non-zero of @fn, or -ENOMEM
 */
int stor_pool_search(const char *const *dirs, size_t ndirs,
		   int (*fn)(const struct stor_found_pool *pool, void *ctx), void *ctx);

/**
 * Destroy a closed pool: wipe its LUN labels and remove its metadata. A pool
 * that no longer imports (damaged metadata, missing or foreign LUNs) loses
 * its metadata only; its LUNs are left untouched.
 * @return 0, -ENOENT, -EBUSY (open), -errno
 */
int stor_pool_destroy(const char *name, const struct stor_pool_opts *opts);

/**
 * Add a LUN to an open pool (created sparse at @size if missing or empty).
 * The LUN is claimed (an exclusive flock, O_EXCL on a block device) while
 * the pool is open. Refused always: a LUN another pool or process has open
 * (-EBUSY, "in use by pool X" in stor_pool_last_error()), a path inside
 * the state directory (-EINVAL), a LUN labelled for a pool that has
 * metadata there (STOR_EFOREIGN). Refused unless @flags has STOR_FORCE: a
 * symbolic link that does not lead to a block device (-ELOOP), a LUN
 * labelled for a pool without metadata (STOR_EFOREIGN: a create that
 * crashed, another host's pool), an existing file or device that is not
 * zero where labels go (STOR_ENOTBLANK).
 */
int stor_pool_add_lun(struct stor_pool *pool, const char *path, uint64_t size, unsigned flags);

/**
 * Add a mirror of @n LUNs (2..STOR_MIRROR_MAX; 1 is stor_pool_add_lun) to
 * an open pool as one vdev: every extent placed on it is written to each
 * side. The sides' data areas must be of one size. Each path is refused as
 * stor_pool_add_lun() says; on failure none joins the pool.
 * @return 0, -EINVAL (@n out of range, sizes differ), or as stor_pool_add_lun()
 */
int stor_pool_add_mirror(struct stor_pool *pool, const char *const *paths, unsigned n,
			 uint64_t size, unsigned flags);

/**
 * Reset the error counters of LUN @lun of @pool (its path, or its index as
 * a decimal string; NULL: every LUN) and place new data on it again if it
 * was faulted. @return 0 or -ENOENT (no such LUN)
 */
int stor_pool_clear(struct stor_pool *pool, const char *lun);

/**
 * Wipe both label copies of the LUN at @path, which no open pool may hold.
 * Only a LUN label is ever wiped, never a file without one. Without
 * STOR_FORCE a label of a pool with metadata in opts->state_dir (an
 * exported pool: destroy it instead) or of another format version is kept.
 * @return 0, STOR_ELABEL (no label), STOR_EFOREIGN, STOR_EFORMAT, -EBUSY,
 *         -ELOOP, -EINVAL (inside the state directory), -errno
 */
int stor_lun_labelclear(const char *path, const struct stor_pool_opts *opts, unsigned flags);

/** Commit the open txg now: fsync LUN data, then one LMDB transaction. */
int stor_pool_sync(struct stor_pool *pool);
/**
 * Commit the open txg if administrative changes wait for one. Dataset
 * create, clone, receive, set, key changes and the pool record are in LMDB
 * when their call returns, but on the LUNs only with the next txg: call
 * this before acknowledging one, or an import from the LUNs alone after a
 * crash misses it. 0 at once when nothing waits (a suspended pool too).
 */
int stor_pool_sync_admin(struct stor_pool *pool);

/* ---- scrub ---- */

enum stor_scrub_state {
	STOR_SCRUB_NONE = 0,     /**< never scrubbed */
	STOR_SCRUB_RUNNING = 1,  /**< in progress (resumes after an import) */
	STOR_SCRUB_PAUSED = 2,   /**< stopped where it was: STOR_SCRUB_START resumes */
	STOR_SCRUB_FINISHED = 3, /**< every extent examined */
	STOR_SCRUB_CANCELED = 4  /**< stopped for good */
};
/** What stor_pool_scrub() does. */
#define STOR_SCRUB_START 0 /**< start, or resume a paused scrub; -EBUSY if one runs */
#define STOR_SCRUB_PAUSE 1 /**< pause a running scrub; -ENOENT if none runs */
#define STOR_SCRUB_STOP 2  /**< cancel a running or paused scrub; -ENOENT if none */
/**
 * Scrub @pool in the background: read every allocated extent on every side
 * of its vdev, check it against the keyless checksum in its block pointer
 * (no key is needed), and rewrite a bad copy from a sound side of its
 * mirror. Paced to opts->scrub_rate bytes per second. Where it is, and what
 * it found, is kept in the pool's metadata, so a scrub running when the pool
 * closed goes on after the next import. @return 0, -EBUSY, -ENOENT, -EINVAL
 */
int stor_pool_scrub(struct stor_pool *pool, int what);
#define STOR_SCAN_SCRUB 0    /**< stor_scrub_stat.function: a scrub */
#define STOR_SCAN_RESILVER 1 /**< a resilver: copies to the sides catching up */
struct stor_scrub_stat {
	int state;          /**< enum stor_scrub_state */
	int function;       /**< STOR_SCAN_SCRUB or STOR_SCAN_RESILVER */
	uint64_t total;     /**< bytes allocated when it started */
	uint64_t examined;  /**< bytes of extents examined (each once, whatever its sides) */
	uint64_t repaired;  /**< bytes of bad copies rewritten (a resilver: bytes copied) */
	uint64_t errors;    /**< extents with no sound copy on any side */
	uint64_t start;     /**< unix seconds it started, 0 if never */
	uint64_t end;       /**< unix seconds it finished or was canceled, 0 while not */
	uint64_t rate;      /**< bytes per second examined since it (re)started */
};
int stor_pool_scrub_stat(struct stor_pool *pool, struct stor_scrub_stat *st);

/** A record with an unrecoverable error (no sound copy), for pool status -v. */
struct stor_pool_error {
	char dataset[STOR_NAME_MAX + 32]; /**< its name, or "<dataset N, destroyed>" */
	uint64_t record;                  /**< record number */
	uint64_t offset;                  /**< its first byte in the volume */
};
/**
 * The records of @pool that a read, a scrub or a resilver found with no
 * sound copy, up to @max into @out; @more gets how many more there are (the
 * pool keeps a bounded list, and counts past it). Kept across restarts,
 * emptied by stor_pool_clear() of the whole pool or a scrub without errors.
 * @return the number in @out
 */
int stor_pool_errors(struct stor_pool *pool, struct stor_pool_error *out, unsigned max,
		     uint64_t *more);

/* ---- sides of a mirror: out of service and back (resilver) ---- */

/**
 * Take the side @lun (its path or index) of a mirror out of service: it is
 * neither read nor written, and lacks the writes from now on. Refused
 * (-EBUSY) when no other side holds every write, -EINVAL for a LUN that is
 * no mirror side, -ENOENT for none. A side out already stays out.
 */
int stor_pool_offline(struct stor_pool *pool, const char *lun);
/**
 * Put side @lun back: opened again at its path if it was not there, then a
 * resilver copies what it lacks (the extents born since it left) while it
 * takes new writes; once done it is read too. @return 0 (also for a side in
 * service), -ENOENT, -EINVAL, or why it did not open (last error says)
 */
int stor_pool_online(struct stor_pool *pool, const char *lun);
/**
 * LUN @lun grew, or is to grow to @size bytes (0: what backs it has now; a
 * file is extended, a RADOS LUN's size rewritten): its labels follow and
 * its vdev's new space serves at once, a mirror's once its smallest side
 * grew (pool/expand.c). @return 0 (also when nothing grew), -ENOENT,
 * -EINVAL (@size below its size, or a LUN cut short), -ENXIO (not open),
 * -errno (last error says)
 */
int stor_pool_expand(struct stor_pool *pool, const char *lun, uint64_t size);
/**
 * Put LUN @new (a path, taken as pool add takes one; made at the mirror's
 * size if missing) in the place of side @old, and resilver all of that
 * vdev onto it; @old's label is wiped. Refused (-EBUSY) when @old is the
 * only side holding every write.
 */
int stor_pool_replace(struct stor_pool *pool, const char *old, const char *new_lun,
		      unsigned flags);
/**
 * Make @new_lun one more side of the vdev of @existing (a LUN of its own
 * becomes a mirror of two; at most STOR_MIRROR_MAX sides), resilvered whole.
 */
int stor_pool_attach(struct stor_pool *pool, const char *existing, const char *new_lun,
		     unsigned flags);
/**
 * Take side @lun out of its mirror for good, its label wiped; its index
 * stays taken, DETACHED. Refused (-EBUSY) when no other side would hold
 * every write, -EINVAL for a LUN that is no mirror side.
 */
int stor_pool_detach(struct stor_pool *pool, const char *lun);

/**
 * A human-readable line about the last failure of a call in this thread that
 * has a reason its code cannot say ("lun 2 (/x/l2): label names another
 * pool", "recordsize must be a power of 2 from 512 to 1M"), or "" if none.
 */
const char *stor_pool_last_error(void);
/** Forget it: a caller that serves many requests on one thread calls this
 *  before each, so no reason outlives the call that set it. */
void stor_clear_error(void);

/** A LUN's state in its vdev (pool status: ONLINE, FAULTED, OFFLINE...). */
enum stor_side_state {
	STOR_SIDE_ONLINE = 0,
	STOR_SIDE_FAULTED = 1,     /**< out of service: failed I/O, or did not open */
	STOR_SIDE_OFFLINE = 2,     /**< out of service: stor_pool_offline() */
	STOR_SIDE_RESILVERING = 3, /**< written, not yet read: a resilver copies what it lacks */
	STOR_SIDE_DETACHED = 4     /**< no longer a side (its index stays taken) */
};

struct stor_lun_stat {
	char path[4096];
	uint64_t size;       /**< bytes of data space */
	uint64_t used;       /**< bytes allocated */
	uint64_t read_errors;
	uint64_t write_errors;
	uint64_t cksum_errors;
	uint64_t nospace_errors; /**< writes the file system had no space for; never fault */
	int faulted;         /**< too many I/O errors: no new data is placed on it; a
			      *   mirror side: out of service (not read or written) */
	unsigned vdev;       /**< index of the first LUN of its vdev (its own for a stripe) */
	unsigned sides;      /**< LUNs in its vdev: 1, or the mirror's width */
	unsigned side;       /**< its place among them, 0-based */
	uint64_t repaired;   /**< bad copies of extents rewritten from another side */
	int state;               /**< enum stor_side_state */
	uint64_t missing_since;  /**< a side out of service: the first txg it may lack, else 0 */
	char absent[256];        /**< why it did not open at import (UNAVAIL), or "" */
	unsigned label_damaged;  /**< label copies damaged at import: 1 front, 2 end */
	unsigned label_repaired; /**< of those, rewritten from the sound copy */
	uint64_t truncated_from; /**< its file was truncated: the data space (bytes) it had,
				  *   of which @size remains; records past it are lost. 0: whole */
};

/** I/O errors after which a LUN is faulted. */
#define STOR_LUN_FAULT_ERRORS 8

struct stor_pool_stat {
	char name[STOR_NAME_MAX + 1];
	uint64_t guid;
	unsigned nluns;
	uint64_t size;      /**< data space over all LUNs, bytes */
	uint64_t used;      /**< allocated to datasets, bytes (committed and staged) */
	uint64_t meta_used; /**< allocated to the metadata log on the LUNs, bytes */
	uint64_t txg;       /**< last committed txg */
	unsigned ndatasets;
	uint64_t logical_used; /**< bytes of records before compression, over all datasets */
	int suspended;         /**< enum stor_suspend: writes fail with STOR_ESUSPENDED */
	int suspend_error;     /**< what the failed LUN flush or metadata commit returned */
	char fenced_by[320];   /**< STOR_SUSPEND_FENCED: the LUN and who took it over */
	uint64_t bad_frees;    /**< double frees the allocator refused since import */
	char key_file[512];    /**< a copy of the key file repaired or not written, or "" */
	char meta_log[2048];   /**< at import: metadata copies ignored or repaired, a rebuild, or "" */
	uint64_t meta_bytes;   /**< metadata (log records, uberblocks) written to the LUNs since import */
	uint64_t meta_records; /**< log records written since import */
};

/*
 * Why a pool refuses writes. A failed LUN flush may have lost data: the
 * pool stays suspended until export. A failed metadata commit is retried
 * (timer, flush, export); the first one that succeeds lifts it. Fenced:
 * another host took a LUN over (a RADOS LUN's lock), and the cluster
 * refuses this host's writes; stor_pool_stat says it, the pool itself is
 * suspended as for a LUN, until export.
 */
enum stor_suspend {
	STOR_SUSPEND_NONE = 0,
	STOR_SUSPEND_LUN = 1,
	STOR_SUSPEND_META = 2,
	STOR_SUSPEND_FENCED = 3
};

int stor_pool_stat(struct stor_pool *pool, struct stor_pool_stat *st);
/** Fill @st for LUN @idx (0-based). @return 0 or -ENOENT past the last LUN. */
int stor_pool_lun_stat(struct stor_pool *pool, unsigned idx, struct stor_lun_stat *st);
/** zpool status's word for the LUN @st describes: ONLINE, FAULTED (a side so
 *  marked, or a LUN of its own past its error budget), OFFLINE, RESILVERING,
 *  DETACHED, or UNAVAIL (a side that did not open). */
const char *stor_lun_state_name(const struct stor_lun_stat *st);

/** What a finding of stor_pool_verify() is about. */
enum stor_verify_kind {
	STOR_VERIFY_MAC_GROUP,   /* records first..last: their block pointers' group MAC fails */
	STOR_VERIFY_MAC_ROOT,    /* the table's MAC root does not verify against its groups */
	STOR_VERIFY_NO_KEY,      /* an encrypted table whose MACs were not verified: no key */
	STOR_VERIFY_MAC_PENDING, /* ditto: its tree is being received or built at load-key */
};

/** One thing stor_pool_verify() names: a table (dataset or snapshot) and what of it. */
struct stor_verify_finding {
	char *table; /* "pool/ds" or "pool/ds@snap" */
	enum stor_verify_kind kind;
	uint64_t first, last; /* records, for STOR_VERIFY_MAC_GROUP */
};

/* Findings a report lists at most; the counts go on past it. */
#define STOR_VERIFY_FINDINGS_MAX 256

/** What stor_pool_verify() found; free it with stor_verify_report_free(). */
struct stor_verify_report {
	uint64_t records;       /* block pointers walked */
	uint64_t encrypted;     /* of which encrypted */
	uint64_t nonce_repeats; /* (dataset, key salt, nonce) seen more than once: must be 0 */
	uint64_t old_keys;      /* records under a master key their dataset no longer has (a
				 * generation other than its own, no rekey under way): must be 0 */
	uint64_t cksum_errors;  /* stored bytes that do not match their keyless checksum */
	uint64_t extent_errors; /* extents referenced twice or out of their LUN */
	uint64_t space_errors;  /* LUNs or datasets whose used space is not what is referenced */
	uint64_t bad_frees;     /* double frees the allocator refused since import */
	uint64_t kept;          /* pointers held by snapshots only (snapshot.c) */
	uint64_t mac_verified;  /* encrypted tables whose whole MAC tree was checked (key loaded) */
	uint64_t mac_errors;    /* their groups and roots that do not verify: must be 0 */
	uint64_t mac_unverified; /* encrypted tables not checked: no key, or tree pending */
	struct stor_verify_finding *findings; /* the MAC errors and unverified tables, in order */
	size_t nfindings;       /* at most STOR_VERIFY_FINDINGS_MAX */
};

/**
 * Check the pool's invariants: commit what is open, then walk every block
 * pointer, read its extent and compare its checksum, count nonces used
 * twice under one data key and extents referenced twice, and compare the
 * space the pointers reference with what the allocator and each dataset
 * count; none of that needs a key. Then, for every encrypted dataset and
 * snapshot whose key is loaded, check its whole MAC tree (bpmac.c): each
 * group MAC against all its block pointers, and the root against the
 * groups; each table whose key is not loaded is named as not verified.
 * Meant for a quiet pool (no writes while it runs).
 * @param[out] rep  zeroed first; free its findings with stor_verify_report_free()
 * @return 0 (see @rep) or an error
 */
int stor_pool_verify(struct stor_pool *pool, struct stor_verify_report *rep);
/** Free the findings of @rep (and zero them). NULL-safe. */
void stor_verify_report_free(struct stor_verify_report *rep);

/* ---- events ---- */

/*
 * What happens to a pool without a caller asking is reported as an event:
 * a class in OpenZFS's style (below) and named fields. Which fields each
 * class carries is listed beside it; every text field is printable, none
 * carries key material or record bytes.
 */
#define STOR_EV_LUN_FAULT "lun.fault"         /**< a LUN faulted: lun, vdev, state, old_state,
					       *   reason, read_errors, write_errors */
#define STOR_EV_LUN_STATE "lun.state"         /**< a side changed state otherwise (OFFLINE,
					       *   RESILVERING, ONLINE, DETACHED): lun, vdev,
					       *   state, old_state */
#define STOR_EV_POOL_STATE "pool.state"       /**< the pool became DEGRADED or ONLINE again:
					       *   state, old_state */
#define STOR_EV_POOL_SUSPEND "pool.suspend"   /**< writes refused: reason, error */
#define STOR_EV_POOL_RESUME "pool.resume"     /**< a commit succeeded again: writes go on */
#define STOR_EV_LUN_REMOVE "lun.remove"       /**< pool destroy removing a RADOS LUN's objects:
						 lun, removed, objects */
#define STOR_EV_POOL_TAKEOVER "pool.takeover" /**< a LUN taken from a holder that never let go:
						 lun, blocklisted (its address), previous */
#define STOR_EV_IO_REPAIR "io.repair"         /**< a bad copy rewritten from a sound side:
					       *   lun, offset, size, via (read, scrub) */
#define STOR_EV_IO_ERROR "io.error"           /**< a record with no sound copy (lost):
					       *   dataset, dataset_id, record, via */
#define STOR_EV_IO_NOSPACE "io.nospace"       /**< writes refused for want of space:
					       *   dataset, requests */
#define STOR_EV_SCRUB_START "scrub.start"     /**< total (bytes), resumed (0, 1) */
#define STOR_EV_SCRUB_FINISH "scrub.finish"   /**< examined, repaired (bytes), errors */
#define STOR_EV_SCRUB_ABORT "scrub.abort"     /**< stopped for good: examined, repaired, errors */
#define STOR_EV_SCRUB_PAUSE "scrub.pause"     /**< examined */
#define STOR_EV_RESILVER_START "resilver.start"   /**< total (bytes) */
#define STOR_EV_RESILVER_FINISH "resilver.finish" /**< examined, repaired (bytes copied), errors */
#define STOR_EV_KEY_LOAD "key.load"           /**< dataset (the encryption root), datasets */
#define STOR_EV_KEY_UNLOAD "key.unload"       /**< dataset, datasets */
#define STOR_EV_REKEY_START "rekey.start"     /**< dataset, resumed (0, 1) */
#define STOR_EV_REKEY_FINISH "rekey.finish"   /**< dataset, rewritten (records); the old key is gone */
#define STOR_EV_REKEY_FAIL "rekey.fail"       /**< dataset, error */

/** One field of an event: a text, or a number when @str is NULL. */
struct stor_event_field {
	const char *name; /**< lowercase letters, digits and '_' */
	const char *str;
	uint64_t num;
};

/** An event; it and everything it points to live only during the call. */
struct stor_event {
	const char *cls;  /**< a STOR_EV_* class */
	const char *pool; /**< the pool's name, "" for none */
	const struct stor_event_field *fields;
	size_t nfields;
};

/**
 * Called for every event, from whichever thread saw it (an I/O worker, a
 * scrub thread, an administrative call), possibly with locks of the pool
 * held: it must copy what it keeps, return soon and never call into
 * libstore. Floods happen (a scrub over a damaged side rewrites a copy per
 * extent): a receiver that logs should limit them.
 */
typedef void (*stor_event_fn)(const struct stor_event *ev, void *arg);

/**
 * Register the receiver of every event of the process (NULL: none, the
 * default). Call it before any pool opens: it is not meant to change while
 * events may be posted.
 */
void stor_set_event_fn(stor_event_fn fn, void *arg);

/* ---- key material ---- */

/**
 * Have @fn called (from the thread that did it, libstore's locks maybe
 * held: it must return soon and not call into libstore) each time a
 * dataset's loaded key is dropped: unloaded, its dataset closed for good,
 * or a load that failed. A program that keeps plaintext beside libstore
 * (the daemon's reply buffers) wipes it then. NULL: none, the default.
 */
void stor_set_key_drop_fn(void (*fn)(void));

enum stor_keyformat { STOR_KEY_NONE = 0, STOR_KEY_RAW, STOR_KEY_HEX, STOR_KEY_PASSPHRASE };

/** User key material for an encryption root, as read from keylocation. */
struct stor_key_material {
	const uint8_t *data; /**< raw: 32 bytes; hex: 64 hex chars; passphrase: 8-512 bytes */
	size_t len;
};


/* ---- datasets ---- */

/**
 * Dataset creation options. All-zero means defaults: 1 GiB volume, 8 KiB
 * records, properties inherited from the parent.
 * @props is an array of "name=value" strings (ZFS -o), e.g.
 * "encryption=aes-256-ccm", "keyformat=passphrase", "compression=zstd".
 * @key is required when the dataset becomes an encryption root (encryption
 * set locally, or keyformat given); it is copied.
 */
struct stor_ds_opts {
	uint64_t volsize;
	uint32_t recordsize;
	const char *const *props;
	size_t nprops;
	const struct stor_key_material *key;
};

/**
 * Create dataset @name (pool/a/b; the parent must exist) and return an open
 * handle in @out (may be NULL if the caller does not want one).
 * @return 0, STOR_EBADNAME, -EEXIST, -ENOENT (no parent), STOR_EBADPROP,
 *         STOR_EITERS (pbkdf2iters out of range),
 *         STOR_ENOKEY (encrypted parent whose key is not loaded),
 *         -EINVAL (bad volsize/recordsize, missing key)
 */
int stor_ds_create(struct stor_pool *pool, const char *name, const struct stor_ds_opts *opts,
		   struct stor_ds **out);

#define STOR_RECURSIVE 0x1u
#define STOR_DESTROY_CLONES 0x2u /**< destroy -R: the clones of what goes, too */

/**
 * Destroy dataset @name and free its space, in one txg with everything the
 * destroy takes (zfs destroy): with STOR_RECURSIVE its descendants and all
 * their snapshots; with STOR_DESTROY_CLONES (which needs STOR_RECURSIVE)
 * also every clone of those snapshots and what that clone's destroy takes,
 * and so on. Without it a clone of a doomed snapshot that is not doomed
 * anyway refuses the destroy.
 * @return 0, -ENOENT, -EBUSY (children or snapshots and no STOR_RECURSIVE,
 *         clones and no STOR_DESTROY_CLONES, open handles; the reason is
 *         in stor_pool_last_error())
 */
int stor_ds_destroy(struct stor_pool *pool, const char *name, unsigned flags);

/** stor_destroy_plan(): the handles on what goes are to be closed first
 *  (destroy -f), so an open dataset or snapshot is no refusal. */
#define STOR_DESTROY_OPEN_OK 0x4u

/**
 * The dry run of stor_ds_destroy() (zfs destroy -n): what a destroy of
 * @name (a dataset, DATASET@SNAP or DATASET@A%B) with @flags would take,
 * found by the destroy's own collector, so the two cannot disagree, and
 * refused as the destroy would be, with the same reason. Nothing changes.
 * @fn is called for each dataset and snapshot it would destroy (a
 * dataset's snapshots before it, children before parents, clones before
 * their origin), outside the pool's lock; *@reclaim gets the bytes it
 * would free: a dataset's own data, its snapshots' and its unused
 * refreservation; a snapshot's, the extents it holds that no older
 * snapshot that stays was born by.
 * @return 0, what stor_ds_destroy() would return, or what @fn returned
 */
int stor_destroy_plan(struct stor_pool *pool, const char *name, unsigned flags,
		      int (*fn)(const char *name, void *ctx), void *ctx, uint64_t *reclaim);

/** Open a handle on dataset @name. Reference counted; thread-safe. */
int stor_ds_open(struct stor_pool *pool, const char *name, struct stor_ds **out);
/** Close a handle. NULL is a no-op. */
void stor_ds_close(struct stor_ds *ds);

/** Call @fn for each dataset of the pool in name order; stops on non-zero. */
int stor_ds_list(struct stor_pool *pool, int (*fn)(const char *name, void *ctx), void *ctx);

/*
 * Snapshots (snapshot.c has the design). A snapshot DATASET@NAME is opened,
 * read and queried (stor_ds_open, stor_ds_read, stor_ds_get) like a
 * dataset, read-only: writes and discards on it are -EROFS, and while it is
 * open its dataset cannot be destroyed nor its key unloaded (-EBUSY).
 */
/**
 * Snapshot every DATASET@NAME of @names in one txg (atomic: all or none),
 * in constant time whatever the datasets' size; with STOR_RECURSIVE every
 * descendant of each dataset too, under the same NAME.
 * @return 0, STOR_EBADNAME, -ENOENT (no such dataset), -EEXIST,
 *         STOR_ENOKEY (an encrypted dataset's key is not loaded; the text
 *         is in stor_pool_last_error())
 */
int stor_snap_create(struct stor_pool *pool, const char *const *names, size_t n, unsigned flags);
/**
 * Destroy snapshot DATASET@NAME, or every snapshot from A to B, oldest
 * first, for DATASET@A%B (an empty A: from the oldest, an empty B: to the
 * newest), or a list of both, DATASET@A,C%E (each snapshot once, all or
 * none); STOR_RECURSIVE: the same in every descendant. Frees the extents
 * no other snapshot nor the head holds, in time proportional to what the
 * snapshot kept. @return 0, -ENOENT, -EINVAL (A newer than B), -EBUSY
 *         (open), STOR_ENOKEY (encrypted, an older snapshot stays and the
 *         key is not loaded)
 */
int stor_snap_destroy(struct stor_pool *pool, const char *name, unsigned flags);
/**
 * Roll DATASET back to its snapshot DATASET@NAME: what was written since is
 * freed and the dataset reads as the snapshot, which stays. Newer snapshots
 * are destroyed with STOR_RECURSIVE, else refused (-EEXIST), as zfs
 * rollback does. Costs one look at each of the dataset's pointers.
 * @return 0, STOR_EBADNAME, -ENOENT, -EEXIST, -EBUSY (the dataset or a newer
 *         snapshot is open), STOR_ENOKEY (encrypted, key not loaded)
 */
int stor_snap_rollback(struct stor_pool *pool, const char *name, unsigned flags);
/**
 * Clone snapshot @origin (DATASET@SNAP) as the new dataset @name of the same
 * pool, in constant time: it reads the snapshot's records until it writes
 * its own, and writes never touch the snapshot's. @opts: properties only
 * (volsize and recordsize are the snapshot's). A clone of an encrypted
 * dataset shares its encryption root and master key (the key must be
 * loaded) and must be created under that root. The snapshot cannot be
 * destroyed while it has clones (clone.c has the design).
 * @return 0, STOR_EBADNAME, -ENOENT (no snapshot or no parent), -EEXIST,
 *         -EXDEV (another pool), STOR_ENOKEY, -EINVAL (with the reason)
 */
int stor_ds_clone(struct stor_pool *pool, const char *origin, const char *name,
		  const struct stor_ds_opts *opts);
/**
 * Promote clone @name (zfs promote): it takes its origin's snapshots up to
 * and including its origin snapshot, and the old origin becomes a clone of
 * that snapshot; both read as before, and the space of the snapshots moves
 * with them. Costs one look at each pointer of the old origin.
 * @return 0, -ENOENT, -EINVAL (not a clone), -EBUSY (either open, or a
 *         snapshot of the old origin after the origin has a hole where the
 *         origin has data), -EEXIST (a snapshot name taken), STOR_ENOKEY
 */
int stor_ds_promote(struct stor_pool *pool, const char *name);

#define STOR_RENAME_PARENTS 0x4u /**< rename -p: create the missing parents of the target */

/**
 * Rename (zfs rename) within the pool, in one commit that reaches the LUNs
 * before it returns; a crash leaves the old names or the new ones.
 * - A dataset @from to @to: its descendants and every snapshot of them
 *   follow; its inherited properties come from its new parent. With
 *   STOR_RENAME_PARENTS the missing parents of @to are created first (as
 *   create -p makes them: sparse, every property inherited).
 * - A snapshot DATASET@A to DATASET@B of the same dataset; with
 *   STOR_RECURSIVE the snapshot A of every descendant that has one too.
 * Refused, nothing changed, the reason in stor_pool_last_error(): the
 * pool's root dataset; a dataset whose key is inherited leaving its
 * encryption root; a clear dataset going below an encrypted one; anything
 * of it open or being received.
 * @return 0, STOR_EBADNAME, -ENOENT (no such dataset or snapshot, or no
 *         parent of @to), -EEXIST (@to exists), -EXDEV (another pool, or a
 *         snapshot to another dataset), -EBUSY (open, received, the root),
 *         -EINVAL (below itself, or the encryption rules), STOR_ENOKEY (a
 *         list of encrypted children it leaves or joins needs its key)
 */
int stor_ds_rename(struct stor_pool *pool, const char *from, const char *to, unsigned flags);
/** Call @fn for each snapshot of the pool, by dataset name, oldest first. */
int stor_snap_list(struct stor_pool *pool, int (*fn)(const char *name, void *ctx), void *ctx);

/* ---- send and receive (send.c, recv.c; the stream format is libstore/send/stream.h) ---- */

#define STOR_SEND_RAW 0x1u /* the stored records as they are, no key needed (zfs send -w) */
/* the rest of a stream a receive -s kept part of (zfs send -t): the caller
 * sets the cursor from the token (stor_send_cursor_resume) */
#define STOR_SEND_RESUME 0x2u
/** The smallest chunk stor_send_chunk() writes into: a record of the largest size and more. */
#define STOR_SEND_CHUNK_MIN ((1u << 20) + (64u << 10))

/** Where a send goes on from. All zero starts a stream; the caller keeps it between chunks. */
struct stor_send_cursor {
	uint64_t next;  /* record number the next chunk starts at */
	uint64_t chain; /* the stream's chain of checksums so far */
	uint64_t parts; /* records written so far */
	uint64_t guid;  /* the snapshot's GUID, set by the first chunk */
	uint64_t from_guid; /* an incremental's: the GUID of the snapshot it starts from */
	int state;      /* 0 the header is due, 1 records, 2 done (nothing more) */
};

/**
 * The next chunk of the stream of snapshot @snapshot (DATASET@NAME) into
 * @out (@cap >= STOR_SEND_CHUNK_MIN bytes): the header in the first, then
 * whole records, the end in the last (cursor state 2 after it). Holds
 * nothing between calls. With @from (an earlier snapshot of the same
 * dataset, DATASET@FROM; NULL for a full stream) the stream is incremental:
 * what changed from @from to @snapshot (zfs send -i). Without STOR_SEND_RAW
 * an encrypted dataset needs its key. @return 0 with *@len bytes, -ENOENT,
 * -EINVAL (@from is not an earlier snapshot of it), STOR_ENOKEY, -ESTALE
 * (a snapshot was replaced since the first chunk), STOR_ECKSUM (a damaged
 * extent), -EIO; the reason in stor_pool_last_error()
 * With STOR_SEND_RESUME, a cursor in state 0 with guid, from_guid and next
 * from a resume token: the first chunk checks the snapshot is the token's
 * (-ESTALE if not), the stream is marked resumed and goes on from record
 * next (stream.h); later chunks as any.
 */
int stor_send_chunk(struct stor_pool *pool, const char *snapshot, const char *from,
		    unsigned flags, struct stor_send_cursor *cur, uint8_t *out, size_t cap,
		    size_t *len);

/** What stor_send_estimate() found: the stream stor_send_chunk() would write. */
struct stor_send_estimate {
	uint64_t bytes;   /* the stream's size: header, records, frees and end */
	uint64_t records; /* records it carries */
	uint64_t frees;   /* runs of freed records (an incremental's) */
};

/**
 * The size of the stream stor_send_chunk() would write for the same
 * arguments (zfs send -n -v), from the block pointers alone: no record is
 * read or opened, so it costs a lookup per record number. The same
 * refusals as the send (no such snapshot, @from no earlier one, a key not
 * loaded for a plain stream, a raw clone). Exact but for two things the
 * pointers cannot tell: a plain stream leaves out a record written as
 * zeros (counted here), and splits a run of frees where a chunk ends.
 * @return 0 with *@est, or what stor_send_chunk() would; the reason in
 *         stor_pool_last_error()
 */
int stor_send_estimate(struct stor_pool *pool, const char *snapshot, const char *from,
		       unsigned flags, struct stor_send_estimate *est);

/** A receive in progress: one stream (or a package of them) into one dataset. */
struct stor_recv;
/**
 * Start receiving into dataset @name (its parent must exist). A full
 * stream creates @name, with the stream's snapshot; with STOR_FORCE an
 * existing @name without children, snapshots or users is replaced (zfs
 * receive -F): received beside it, destroyed only once the stream is
 * whole; else it is refused (-EEXIST). An incremental goes onto @name,
 * whose newest snapshot must be the stream's FROM and which must not have
 * changed since, unless STOR_FORCE rolls it back to FROM first; it ends
 * with the stream's snapshot made, or, cut short, with @name rolled back
 * to FROM. Nothing is checked or changed before the first stor_recv_feed().
 */
int stor_recv_begin(struct stor_pool *pool, const char *name, unsigned flags,
		    struct stor_recv **out);
/* stor_recv_begin's flag (beside STOR_FORCE): zfs receive -s. A stream cut
 * short (a close before the end, a failure past the header, a crash) keeps
 * what was received and committed, and the dataset a receive_resume_token
 * (its property) for send -t; a resumed stream goes on with it. The
 * dataset stays closed to every other use until it is whole or
 * stor_recv_abandon() drops the state. A resumed stream keeps its state
 * with or without the flag. Not with STOR_FORCE. */
#define STOR_RECV_RESUMABLE 0x2u
/**
 * Abandon the partial state a receive -s kept in @name (zfs receive -A): a
 * full stream's dataset is destroyed, an incremental's target rolled back
 * to the snapshot it started from. @return 0, -ENOENT (no such dataset, or
 * it holds no partial state), -EBUSY (a resume is going on), or an error
 */
int stor_recv_abandon(struct stor_pool *pool, const char *name);
/** Would stor_recv_close() now keep a partial state (receive -s, past the header)? 1 or 0 */
int stor_recv_keeps(const struct stor_recv *r);
/**
 * Give the receive the next @len bytes of the stream, cut anywhere.
 * @return 0 (more is wanted), 1 (the end was read, checked and everything
 *         is committed: the dataset is whole), or an error: the stream is
 *         damaged (STOR_ECKSUM), foreign or newer (STOR_EFORMAT), out of
 *         bounds (STOR_ECORRUPT), or the pool refused; then the dataset is
 *         gone again and every later call fails. The reason is in
 *         stor_pool_last_error().
 */
int stor_recv_feed(struct stor_recv *r, const uint8_t *buf, size_t len);
/** End a receive: one not complete (feed never returned 1) leaves nothing
 *  behind. NULL is a no-op. */
void stor_recv_close(struct stor_recv *r);

enum stor_prop_source { STOR_SRC_NONE = 0, STOR_SRC_DEFAULT, STOR_SRC_LOCAL, STOR_SRC_INHERITED, STOR_SRC_FIXED };

struct stor_prop_value {
	char name[32];
	char value[256];
	enum stor_prop_source source;
	char inherited_from[STOR_NAME_MAX + 1];
};

/**
 * Get property @prop of dataset @name: the local value, else the nearest
 * ancestor's, else the default. Read-only properties (guid, used, volsize,
 * recordsize, keystatus, encryptionroot...) are computed.
 * @return 0, -ENOENT, STOR_EBADPROP (unknown property)
 */
int stor_ds_get(struct stor_pool *pool, const char *name, const char *prop,
		struct stor_prop_value *out);

/** Call @fn for every property of @name, in table order. */
int stor_ds_get_all(struct stor_pool *pool, const char *name,
		    int (*fn)(const struct stor_prop_value *v, void *ctx), void *ctx);

/**
 * A listing: for each dataset of the pool in name order (no snapshots),
 * call @fn with its name and the values of the @n properties @props (NULL:
 * every property, in table order; an unknown name gets the value "-" and
 * source STOR_SRC_NONE). The space figures of all are those of one moment,
 * summed once: stor_ds_get() of a space property sums the pool's table
 * each time. @fn runs under the pool's admin lock: it must not call into
 * the pool. Stops when @fn returns non-zero, and returns that.
 * @return 0, -ENOMEM, or what @fn returned
 */
int stor_ds_list_props(struct stor_pool *pool, const char *const *props, size_t n,
		       int (*fn)(const char *name, const struct stor_prop_value *v, size_t nv,
				 void *ctx),
		       void *ctx);
/**
 * stor_ds_list_props() of the pool's snapshots, as stor_snap_list() orders
 * them: the @n properties @props of each (a property a snapshot has not, or
 * an unknown name, gets the value "-" and source STOR_SRC_NONE), and @fn
 * runs under the pool's admin lock: no lookup by name, where a
 * stor_ds_get() per cell finds the snapshot and its dataset each time.
 */
int stor_snap_list_props(struct stor_pool *pool, const char *const *props, size_t n,
			 int (*fn)(const char *name, const struct stor_prop_value *v, size_t nv,
				   void *ctx),
			 void *ctx);

/**
 * Set property @prop of @name to @value locally (committed in the next txg).
 * @return 0, -ENOENT, STOR_EBADPROP, STOR_EREADONLY (fixed at creation)
 */
int stor_ds_set(struct stor_pool *pool, const char *name, const char *prop, const char *value);

/**
 * Set @n properties of @name at once, all or none (zfs set a=1 b=2): each
 * assignment is checked (name, value, settable, none given twice) before
 * any is made, then they are made in order, each seeing the ones before
 * it (a refreservation after a volsize), and saved in one commit; one that
 * fails (STOR_ENOSPC of a reservation) or a commit that fails puts every
 * one back as it was. User properties mix with the others.
 * @param[out] bad  the index of the assignment refused, -1 if none is to blame
 * @return 0, or what stor_ds_set() returns for the one refused; the reason
 *         in stor_pool_last_error()
 */
int stor_ds_set_many(struct stor_pool *pool, const char *name, size_t n, const char *const *props,
		     const char *const *values, int *bad);

/** Remove the local value of @prop so that it is inherited again. */
int stor_ds_inherit(struct stor_pool *pool, const char *name, const char *prop);

/*
 * User properties (module:property, prop_names.h's rule): stor_ds_set()
 * and stor_ds_inherit() take them as any other name; their values may be
 * longer than stor_prop_value's, so they are read through this call.
 */
struct stor_uprop_value {
	const char *name, *value;      /* value "-" when unset (source STOR_SRC_NONE) */
	enum stor_prop_source source;
	const char *inherited_from;    /* "" unless inherited */
};

/**
 * Call @fn for user property @prop of @name (a dataset or DATASET@SNAP,
 * whose values are its dataset's, inherited), or with @prop NULL for each
 * one that is set on it or above it, by name. @fn runs without any lock
 * and the strings last until it returns.
 * @return 0, -ENOENT (no such dataset), STOR_EBADPROP (@prop breaks the
 * rule), -ENOMEM, or what @fn returned when not 0
 */
int stor_ds_user_props(struct stor_pool *pool, const char *name, const char *prop,
		       int (*fn)(const struct stor_uprop_value *v, void *ctx), void *ctx);

/** Name, GUID and geometry of an open dataset. */
const char *stor_ds_name(const struct stor_ds *ds);
uint64_t stor_ds_guid(const struct stor_ds *ds);
uint64_t stor_ds_volsize(const struct stor_ds *ds);
uint32_t stor_ds_recordsize(const struct stor_ds *ds);
/** Is @ds encrypted (its plaintext is wiped wherever it is held)? */
int stor_ds_encrypted(const struct stor_ds *ds);

/* ---- record I/O ---- */

enum stor_io_op { STOR_IO_READ = 1, STOR_IO_WRITE, STOR_IO_DISCARD, STOR_IO_FLUSH };

/**
 * One request of a batch. @buf is read into (READ) or written from (WRITE);
 * any byte offset and length inside the volume. @result is 0 or a negative
 * code on return; the requests of a batch succeed or fail one by one.
 */
struct stor_io {
	struct stor_ds *ds;
	enum stor_io_op op;
	uint64_t off;
	uint64_t len;
	void *buf;
	int result;
};

/**
 * Run a batch of requests, possibly on different datasets. All records the
 * batch touches go through checksum/crypto as one batch and to the LUNs as
 * one batch of extents. Requests are applied in array order where they
 * overlap. Thread-safe.
 * @return the number of requests that failed (0 when all succeeded)
 */
int stor_io_submit(struct stor_io *ios, size_t n);

/**
 * Reads that complete one by one, for one thread (the daemon's loop): each
 * request's extents go out at once on a ring of the reader's own, and
 * @done is called for it (on that thread, from stor_read_start() or
 * stor_reader_reap()) when its own records are in, not a batch's. Its
 * completions are signalled on @efd, an eventfd the thread polls; then it
 * calls stor_reader_reap(). NULL where io_uring is not allowed.
 */
struct stor_reader;
struct stor_reader *stor_reader_new(int efd, void (*done)(struct stor_io *io));
/** Free an idle reader (stor_reader_inflight() is 0). */
void stor_reader_free(struct stor_reader *rd);
size_t stor_reader_inflight(const struct stor_reader *rd);
/** Do the reads of @ds go to a reader: every LUN of its pool an O_DIRECT file? */
int stor_ds_reads_async(const struct stor_ds *ds);
/**
 * Bytes for a read of @len bytes of @ds, to free(): sector-aligned when its
 * pool opens its LUNs O_DIRECT, so whole records are read straight into
 * them (on the loop's ring or a worker's pread), with no buffer of the
 * store's and no copy; plain malloc() otherwise.
 */
void *stor_ds_read_buf(const struct stor_ds *ds, size_t len);
/**
 * Start @n STOR_IO_READ requests (of any pools); the entries of @ios are
 * used up (set to NULL). Each ends in the reader's @done with ->result set,
 * perhaps before this returns.
 */
void stor_read_start(struct stor_reader *rd, struct stor_io **ios, size_t n);
/** Finish the requests whose extents have arrived, without waiting. */
void stor_reader_reap(struct stor_reader *rd);

/** Read @len bytes at @off. Unwritten records read as zeros. */
int stor_ds_read(struct stor_ds *ds, uint64_t off, void *buf, size_t len);
/** Write @len bytes at @off (partial records are read, modified, written). */
int stor_ds_write(struct stor_ds *ds, uint64_t off, const void *buf, size_t len);
/** Discard: records wholly inside the range are freed and read as zeros;
 *  partial records at the edges are zeroed. */
int stor_ds_discard(struct stor_ds *ds, uint64_t off, uint64_t len);
/** Make every write of this dataset so far durable (commits the txg). */
int stor_ds_flush(struct stor_ds *ds);

/** One run of stor_ds_map(): @len bytes at @off, @allocated or a hole. @return 0 or stop */
typedef int (*stor_map_fn)(uint64_t off, uint64_t len, int allocated, void *arg);
/**
 * The allocation map of [@off, @off + @len): @fn is called for each run of
 * records that have a block pointer (@allocated) or none (a hole, which
 * reads as zeros), in order, clipped to the range. Thread-safe, like reads.
 * @return 0, what @fn returned to stop, STOR_ERANGE (outside the volume),
 *         -ENOMEM, or an error of the metadata lookup
 */
int stor_ds_map(struct stor_ds *ds, uint64_t off, uint64_t len, stor_map_fn fn, void *arg);

/* ---- data cache ---- */

/**
 * Size the process-wide cache of plaintext records (0 = off, the default);
 * datasets with primarycache=all use it. May be called at any time; shrinking
 * evicts at once. @return 0 or -ENOMEM
 */
int stor_cache_set_size(size_t bytes);

struct stor_cache_stats {
	uint64_t hits, misses, inserts, evictions;
	uint64_t bytes, entries, capacity;
};
void stor_cache_stats(struct stor_cache_stats *st);

/* ---- statistics ---- */

/* Request latency histogram: log-linear, four buckets per power of two of
 * nanoseconds; bucket i starts at stor_lat_bucket_ns(i). */
#define STOR_LAT_BUCKETS 168

struct stor_io_stats {
	uint64_t reads, writes, discards, flushes; /**< requests that succeeded */
	uint64_t errors;                            /**< requests that failed */
	uint64_t read_bytes, write_bytes;
	uint64_t cache_hits, cache_misses;           /**< records, data cache */
	uint64_t sealed, opened;                     /**< records sealed and opened */
	uint64_t seal_ns, open_ns;                   /**< time spent sealing and opening */
	uint64_t cksum_errors, auth_errors;          /**< records that failed verification */
	uint64_t lat[STOR_LAT_BUCKETS];              /**< request latency histogram, every op */
	uint64_t lat_read[STOR_LAT_BUCKETS];         /**< ... of the reads alone */
	uint64_t lat_write[STOR_LAT_BUCKETS];        /**< ... of the writes alone */
	uint64_t read_ns, write_ns;                  /**< latency summed over those reads, writes */
};

/** Lower bound in nanoseconds of latency bucket @i. */
uint64_t stor_lat_bucket_ns(unsigned i);

/** Counters of dataset @name since the pool was opened. @return 0 or -ENOENT */
int stor_ds_io_stats(struct stor_pool *pool, const char *name, struct stor_io_stats *st);
/** The same summed over every dataset of the pool. */
int stor_pool_io_stats(struct stor_pool *pool, struct stor_io_stats *st);

/*
 * A LUN's own I/O (pool iostat, as zpool iostat's vdev counters): what the
 * LUN layer sent to the LUN, counted where each extent completes. Index 0
 * of each pair is reads, 1 writes. An extent counts once it completes
 * without error (errors are the status counters'); a mirror's write counts
 * on each side it reached. Counted: the data area (records, the metadata
 * log, resilver and scrub), the uberblock ring, reads served in place from
 * a LUN file on tmpfs (zero wait: the pages are RAM); not counted: labels.
 */
/** Latency buckets: bucket i counts waits of [2^i, 2^(i+1)) ns (0 and 1 ns
 *  in bucket 0), the last every wait from 2^36 ns (68.7 s) on. */
#define STOR_LUN_HIST_BUCKETS 37

struct stor_lun_iostat {
	uint64_t since_ns;  /**< CLOCK_MONOTONIC ns the counters started (the LUN's open) */
	uint64_t now_ns;    /**< CLOCK_MONOTONIC ns they were read */
	uint64_t ops[2];    /**< extents completed without error */
	uint64_t bytes[2];  /**< their bytes */
	uint64_t wait_ns[2]; /**< total wait summed over them: from the extent's issue to
			      *   its completion, as its caller waits (a batch's extents
			      *   wait for the batch) */
	uint64_t disk_ns[2]; /**< disk wait summed over them: the backend's time on the
			      *   extent alone (its own pread/pwrite, or submission to
			      *   completion in io_uring), without waiting for others */
	uint64_t inflight[2]; /**< extents issued and not completed, at @now_ns */
	uint64_t hist[2][STOR_LUN_HIST_BUCKETS];      /**< total wait histogram */
	uint64_t disk_hist[2][STOR_LUN_HIST_BUCKETS]; /**< disk wait histogram */
};

/** Fill @st with the I/O counters of LUN @idx (0-based); lock-free, so the
 *  pairs may be a moment apart while I/O runs. @return 0 or -ENOENT past
 *  the last LUN */
int stor_pool_lun_iostat(struct stor_pool *pool, unsigned idx, struct stor_lun_iostat *st);

/* ---- keys ---- */

#define STOR_KEY_NOOP 0x1u /**< load-key -n: check the key, load nothing */

/**
 * Load the wrapping key of encryption root @name and unwrap the master keys
 * of every dataset under it.
 * @return 0, STOR_EBADKEY (wrong key: nothing changes), -EEXIST (already
 *         loaded), STOR_ENOTENCRYPTED, STOR_ENOTROOT, -ENOENT
 */
int stor_key_load(struct stor_pool *pool, const char *name, const struct stor_key_material *key,
		  unsigned flags);


/**
 * Wipe the keys of encryption root @name and every dataset under it. With
 * STOR_FORCE handles still open stay valid, and their I/O fails with
 * STOR_ENOKEY until the key is loaded again.
 * @return 0, -EBUSY (a dataset using the key has open handles, no
 *         STOR_FORCE), -ENOENT (no such dataset), STOR_ENOKEY (key not
 *         loaded), STOR_ENOTENCRYPTED, STOR_ENOTROOT
 */
int stor_key_unload(struct stor_pool *pool, const char *name, unsigned flags);

/**
 * Rewrap the master keys under @name with a new wrapping key; the root's key
 * must be loaded. @props may set keyformat, keylocation, pbkdf2iters.
 * A child that inherits its root can be made a root of its own this way.
 * The new wrapped keys and these properties commit together, by the
 * replacement of the pool's key file: on failure nothing has changed.
 * @return 0, STOR_EBADPROP, STOR_EITERS (pbkdf2iters out of range),
 *         STOR_ENOKEY, STOR_ENOTENCRYPTED, -ENOENT, -EINVAL (key material of
 *         the wrong shape)
 */
int stor_key_change(struct stor_pool *pool, const char *name, const char *const *props,
		    size_t nprops, const struct stor_key_material *key);

/**
 * change-key -i: encryption root @name and the datasets that use its key
 * join the encryption root of its parent. Their master keys are rewrapped
 * by that root's wrapping key (no data changes), and @name's keyformat,
 * keylocation and pbkdf2iters are inherited from then on. Both keys must be
 * loaded. One commit, by the replacement of the key file, as change-key.
 * @return 0, -ENOENT, STOR_ENOTENCRYPTED, STOR_ENOTROOT (it uses a root's
 *         key already), -EINVAL (the parent is not encrypted, or @name is a
 *         pool's root dataset), STOR_ENOKEY (a key is not loaded); the reason
 *         in stor_pool_last_error()
 */
int stor_key_inherit(struct stor_pool *pool, const char *name);

/* ---- rekey ---- */

/** What stor_rekey() does. */
#define STOR_REKEY_START 0 /**< start, or resume one paused, stopped or failed */
#define STOR_REKEY_PAUSE 1 /**< pause a running rekey; -ENOENT if none runs */
#define STOR_REKEY_STOP 2  /**< stop a running or paused rekey; -ENOENT if none */
#define STOR_REKEY_RECURSIVE 0x10 /**< or'ed in: the encrypted datasets below it too */
#define STOR_REKEY_SCRUB_FREE 0x20 /**< or'ed in: free space written over before the end */
/**
 * Rekey encrypted dataset @name (rekey.c): a new master key, wrapped by its
 * root's wrapping key, then every record, its snapshots' too, sealed again
 * under it in the background at @rate bytes per second (0: as fast as it
 * goes; an eighth of it while clients' requests come), while the dataset
 * serves I/O. Its clones and origin share its master key and are rekeyed
 * with it. When the last record is under the new key, the old master key
 * leaves the key file. Both keys stay until then, so a rekey paused,
 * stopped, or cut by an export or a crash resumes where it was. Its key
 * must be loaded. With STOR_REKEY_RECURSIVE each encrypted dataset below
 * it too, every one checked before any starts. @return 0, -ENOENT,
 * STOR_ENOTENCRYPTED, STOR_ENOKEY, -EBUSY (one runs, or one being
 * received), STOR_EAUTH (its block pointers do not verify), -ENOSPC; the
 * reason in stor_pool_last_error(). Where it is: the read-only property
 * rekeystatus.
 */
int stor_rekey(struct stor_pool *pool, const char *name, int what, uint64_t rate);

/**
 * Encrypt the clear dataset @name in place: @props ("NAME=VALUE") give
 * encryption (the suite), keyformat, and optionally keylocation and
 * pbkdf2iters, @key the new key; it becomes an encryption root of its own.
 * From the commit this makes, its writes are sealed and its MAC tree
 * covers every pointer, clear ones too; its clear records (its snapshots'
 * too) are then sealed in place in the background as a rekey's are, at
 * @rate bytes per second, and progress shows in rekeystatus; when none is
 * left, no clear record reads any more. @flags: STOR_REKEY_SCRUB_FREE.
 * Pause, stop and resume are stor_rekey()'s. @return 0, -ENOENT, -EEXIST
 * (encrypted already), -EBUSY (being received, a clone, one with a clone,
 * a clear dataset below it), STOR_EBADPROP, -EINVAL; the reason in
 * stor_pool_last_error().
 */
int stor_ds_encrypt(struct stor_pool *pool, const char *name, const char *const *props,
		    size_t nprops, const struct stor_key_material *key, uint64_t rate,
		    unsigned flags);

/**
 * Pages of key memory (dataset and data keys, the crypto backends' per-thread
 * state) that mlock refused since the process started (RLIMIT_MEMLOCK,
 * EPERM). They stay out of core dumps and forked children but may be
 * swapped; libstore cannot say so itself, so the caller logs it. Thread-safe.
 */
uint64_t stor_key_pages_unlocked(void);

/*
 * The bursts the cipher was handed since the process started: calls of a
 * crypto backend by the number of records in them, bucket i counting
 * bursts of 2^i to 2^(i+1) - 1 records, the last one all larger. The
 * multi-buffer backend interleaves the records of a burst, so a burst of 4
 * costs each record almost three times what a burst of 16 does.
 */
#define STOR_BURST_BUCKETS 8
struct stor_crypt_bursts {
	uint64_t open[STOR_BURST_BUCKETS];
	uint64_t seal[STOR_BURST_BUCKETS];
};
/** Read the burst histogram. Thread-safe. */
void stor_crypt_bursts(struct stor_crypt_bursts *out);


#ifdef __cplusplus
}
#endif
#endif
