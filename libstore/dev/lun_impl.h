/* SPDX-License-Identifier: MIT */
/*
 * Inside the LUN interface: struct lun and the table of operations a
 * backend fills in. lun.c owns the interface (labels, the blank check, the
 * error counters, the reserved area's bounds, the split of a batch or a
 * durable round by backend); lun_file.c is the file and block device
 * backend, lun_rados.c the Ceph RADOS one. Every operation sees whole
 * LUN byte offsets (labels at 0 and at the end, the data area from
 * LUN_DATA_OFF); a backend moves bytes and claims its LUN, nothing more.
 */
#ifndef STOR_LUN_IMPL_H
#define STOR_LUN_IMPL_H

#include <stdatomic.h>

#include "dev/lun.h"
#include "store.h"

struct lun_ops {
	/* @len bytes at byte @off of the whole LUN; 0 or -errno */
	int (*rw)(struct lun *l, int write, void *buf, size_t len, uint64_t off);
	/* a batch, all of this backend's: each io->result set, not counted */
	void (*batch)(struct lun_io *ios, size_t n, int write);
	/* one durable round over @n LUNs of this backend, as lun_flush_batch
	 * and lun_reserved_write_sync: @res[i] gets 0 or a positive errno */
	void (*sync_round)(struct lun **luns, int *res, size_t n, const void *buf, size_t len,
			   uint64_t off);
	/* keep the claim alive; 0 or -errno (the claim is lost) */
	int (*renew)(struct lun *l);
	/* lun_fenced(), lun_took_over(); NULL: never */
	int (*fenced)(struct lun *l, char *why, size_t len);
	int (*took_over)(struct lun *l, char *who, size_t wlen, char *addr, size_t alen);
	/* the backing's size now, made at least @size first (0: as it is) */
	int (*grow)(struct lun *l, uint64_t size, uint64_t *now);
	/* lun_remove(); NULL: the LUN stays (a file, a device) */
	int (*remove)(struct lun *l, lun_progress_fn progress, void *ctx);
	/* remove what the open made, before close (lun_discard) */
	void (*unmake)(struct lun *l);
	void (*close)(struct lun *l);
};

/*
 * A LUN's I/O counters of one direction (pool iostat), counted at the
 * extent's completion (lun_count_result) with relaxed atomics: the I/O path
 * takes no lock and orders nothing by them; a reader sees each counter
 * whole, the set possibly a moment apart.
 *
 * Each thread adds to a shard of its own (LUN_IO_SHARDS, the sum is the
 * counter): with every event loop striping over the same LUNs, one set of
 * counters was cache lines bounced between cores on every extent, 23 ns a
 * record of the 150 a second loop cost (engine_bench -t 1,2, perf).
 */
#define LUN_IO_SHARDS 8
struct lun_iodir {
	atomic_uint_fast64_t ops, bytes, wait_ns, disk_ns, inflight;
	atomic_uint_fast64_t hist[STOR_LUN_HIST_BUCKETS], disk_hist[STOR_LUN_HIST_BUCKETS];
	uint64_t pad[(64 - (5 + 2 * STOR_LUN_HIST_BUCKETS) * 8 % 64) / 8 % 8]; /* whole lines */
};

struct lun {
	const struct lun_ops *ops;
	int fd;              /* files and block devices; -1 otherwise */
	struct lun_rados *rados; /* RADOS LUNs: lun_rados.c's */
	unsigned flags;
	uint64_t size; /* whole file or device; only grows (lun_grow, atomic store) */
	const uint8_t *mmapped; /* the file, read-only, when on tmpfs and LUN_MAP */
	uint64_t mapped_len;    /* of it: its size at the open */
	char *path;
	int created; /* LUN_MADE, LUN_SIZED or 0 */
	atomic_uint_fast64_t read_errors, write_errors, nospace_errors;
	uint64_t since_ns; /* when the I/O counters started: the open */
	struct lun_iodir io[LUN_IO_SHARDS][2]; /* the I/O counters: [shard][0] reads, [1] writes */
};

/*
 * A backend as lun_open() sees it: the paths it takes and how it opens one.
 * lun.c keeps the table of them; a path goes to the first whose prefix it
 * begins with.
 */
struct lun_backend {
	const char *prefix; /* of the paths it takes; "" takes any */
	/* lun_open() of such a path: *@out set, ->ops, ->path and ->flags
	 * filled in, or NULL and -errno */
	int (*open)(const char *path, unsigned flags, uint64_t size, struct lun **out);
};

extern const struct lun_backend lun_file_backend;  /* files, block devices */
extern const struct lun_backend lun_rados_backend; /* "rados:POOL/PREFIX" */

/** Call @fn with the path of every LUN in RADOS pool @pool ("rados:POOL").
 *  @return 0, what @fn returned if not 0, -errno */
int lun_rados_list(const char *pool, int (*fn)(const char *path, void *ctx), void *ctx);
/** @io goes out now: it is in flight until lun_count_result(). */
void lun_io_issue(struct lun_io *io, int write);
/** Count @io's completion after @wait_ns of total wait: its I/O counters,
 *  and its failure, if it failed, in its LUN's error counters and *@failed
 *  (a write refused for want of space apart from I/O errors). */
void lun_count_result(struct lun_io *io, int write, uint64_t wait_ns, int *failed);

#endif
