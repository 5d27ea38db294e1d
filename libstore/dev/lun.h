/* SPDX-License-Identifier: MIT */
/*
 * The LUN interface: open, label, read and write a batch of extents, flush,
 * size, close. Each call goes through the LUN's table of operations
 * (lun_impl.h) to its backend: files and block devices (lun_file.c) or
 * Ceph RADOS objects for a path "rados:POOL/PREFIX" (lun_rados.c). Nothing
 * above lun.c sees a file descriptor or an object.
 */
#ifndef STOR_LUN_H
#define STOR_LUN_H

#include <stddef.h>
#include <stdint.h>

#include "kv/format.h"

struct lun;

struct lun_label {
	uint32_t version;
	uint32_t index;
	uint64_t pool_guid;
	uint64_t lun_guid;
	uint64_t size;
	uint32_t nluns;
	char pool_name[LABEL_NAME_LEN];
	uint32_t hostid; /* the host that last imported the pool */
	uint32_t state;  /* LABEL_ACTIVE or LABEL_EXPORTED */
	uint32_t vdev;   /* index of the first LUN of its vdev (itself unless a mirror side) */
	uint32_t sides;  /* LUNs of its vdev not detached: 1, or a mirror's width */
	/* indexes of its vdev's detached LUNs, bit i % 8 of byte i / 8 (format.h) */
	uint8_t detached[LABEL_DETACHED_LEN];
};

/** One extent of a batch: @off is a byte offset into the LUN's data area. */
struct lun_io {
	struct lun *lun;
	uint64_t off;
	void *buf;
	size_t len;
	int result; /* 0 or -errno; a short read is -EIO */
	/* the LUN layer's, for pool iostat: when the extent went out
	 * (CLOCK_MONOTONIC ns; the thread's ring only), and the time the
	 * backend spent on it alone (0: it does not say, the wait counts) */
	uint64_t issued_ns, disk_ns;
};

#define LUN_CREATE 0x1u /* create a sparse file of the given size if missing */
#define LUN_DIRECT 0x2u /* O_DIRECT: buffers, offsets and lengths 4 KiB aligned */
#define LUN_MAP 0x4u    /* a file on tmpfs is also mapped, for lun_mapped() */
#define LUN_NEW 0x8u    /* about to be labelled: a symbolic link is refused (-ELOOP)
			 * unless it leads to a block device or LUN_FORCE is set */
#define LUN_FORCE 0x10u
#define LUN_PEEK 0x20u  /* read-only and unclaimed: only to read the label of a
			 * LUN another opener claims */

/**
 * Open the LUN at @path and claim it: an exclusive flock on the file (and
 * O_EXCL, which the kernel honours for block devices) held until
 * lun_close(), so no second pool, here or in another process, opens it; a
 * RADOS LUN ("rados:POOL/PREFIX") takes an exclusive lock in the cluster
 * instead, which lun_renew() keeps.
 * With LUN_CREATE a missing file, or an existing empty one, is made sparse
 * at @size bytes. The open never truncates or writes.
 * @return 0, -EBUSY (claimed elsewhere, or a block device in use), -ELOOP
 *         (LUN_NEW: a symbolic link), -EINVAL (neither a regular file nor a
 *         block device, or smaller than LUN_MIN_SIZE), -ENXIO (RADOS: no such
 *         pool), -ENOTCONN (RADOS: the cluster was not reached), -errno
 */
int lun_open(const char *path, unsigned flags, uint64_t size, struct lun **out);
void lun_close(struct lun *l);
/** lun_close(), and remove the file or RADOS LUN again if this open made it
 *  (LUN_MADE): a LUN taken for nothing leaves nothing behind. */
void lun_discard(struct lun *l);
/** Keep the claim on @l alive: a RADOS LUN renews its lock (lun_rados.c),
 *  a file's flock needs nothing. @return 0, -ENOLCK (the claim is lost and
 *  the LUN refuses writes from now on), -errno (try again) */
int lun_renew(struct lun *l);
/** Has another host taken @l over (the cluster refuses our writes, or our
 *  lock is gone)? 1 with who holds it now in @why (it may ask the
 *  cluster: not for the I/O path), 0 if not. */
int lun_fenced(struct lun *l, char *why, size_t len);
/** Did this open take @l over from a holder that never let go, and fence
 *  it off in the cluster (lun_rados.c)? 1 with that holder ("host H pid P")
 *  in @who and the client address blocklisted in @addr, 0 if not. */
int lun_took_over(struct lun *l, char *who, size_t wlen, char *addr, size_t alen);
/** Take the size of what backs @l now, after making it @size bytes (0: as
 *  it is): a file is extended, a RADOS LUN's size object rewritten. Only
 *  lun_size() changes; the labels and the data area's users are the
 *  caller's. @return 0, -EINVAL (@size below the size now), -ERANGE (the
 *  backing shrank), -ENOSPC (a device smaller than @size), -EOPNOTSUPP,
 *  -errno */
int lun_grow(struct lun *l, uint64_t size);
/** How far a lun_remove() has come: @done of @total objects. */
typedef void (*lun_progress_fn)(void *ctx, struct lun *l, uint64_t done, uint64_t total);
/** Remove what holds @l's data for good, for pool destroy: a RADOS LUN's
 *  objects (its lock with them), @progress called after each window; a file
 *  or device stays. Close it after. @return 0, -ENOLCK (not ours to
 *  remove), -errno */
int lun_remove(struct lun *l, lun_progress_fn progress, void *ctx);
/**
 * A stand-in for a LUN that did not open (missing, or a label not this
 * pool's), so a mirror side it was keeps its place, path and size: every
 * I/O on it fails (-EBADF) and it claims nothing. @size is the whole
 * LUN's, as its pool record says. NULL on ENOMEM.
 */
struct lun *lun_absent(const char *path, uint64_t size);
/** Was the file of @l deleted while open (no name left)? I/O still works on
 *  such a file, but nothing will find it after a restart. */
int lun_unlinked(const struct lun *l);
const char *lun_path(const struct lun *l);
/** Did this lun_open() make the file (LUN_MADE), size an empty one
 *  (LUN_SIZED) or neither (0)? */
#define LUN_MADE 1
#define LUN_SIZED 2
int lun_created(const struct lun *l);
/** The path the open descriptor really names (symbolic links resolved). */
int lun_real_path(const struct lun *l, char *buf, size_t len);
/** Bytes in the data area: between the front area and the end copy. */
uint64_t lun_data_size(const struct lun *l);
/** Bytes of the whole file or device. */
uint64_t lun_size(const struct lun *l);

/**
 * Read and check both label copies. @lab gets the front copy if it is
 * sound, else the end copy. @bad gets a bit (1 << copy) per copy that is
 * damaged, missing or differs from the front one.
 * @return 0 (at least one sound copy), STOR_ELABEL (none: magic or
 *         checksum), STOR_EFORMAT (a sound copy of another version), -errno
 */
int lun_label_read(struct lun *l, struct lun_label *lab, unsigned *bad);
/** Write both copies of a label and fdatasync. */
int lun_label_write(struct lun *l, const struct lun_label *lab);
/** Write the copies named by @copies (bits as lun_label_read's @bad). */
int lun_label_repair(struct lun *l, const struct lun_label *lab, unsigned copies);
/** Overwrite both label copies with zeros (pool destroy, labelclear). */
int lun_label_wipe(struct lun *l);
/**
 * Is the LUN blank where labels go: the front area [0, LUN_DATA_OFF) and
 * the end copy's block all zero (a new or sparse file)? Anything else may
 * be a file system, a partition table or another program's data.
 * @return 1 blank, 0 not, -errno
 */
int lun_is_blank(struct lun *l);

/**
 * Read or write @len bytes at byte @off of the reserved area between the
 * front label and the data area (format.h: the uberblock ring), no flush.
 * @buf is 4 KiB aligned for O_DIRECT. @return 0, -EINVAL (outside), -errno
 */
int lun_reserved_io(struct lun *l, int write, void *buf, size_t len, uint64_t off);

int lun_is_direct(const struct lun *l);
/** The extent at @off of a LUN opened with LUN_MAP whose file is on tmpfs,
 *  readable in place; NULL otherwise (read it with lun_read_batch). */
const void *lun_mapped(struct lun *l, uint64_t off, size_t len);

/** Run a batch of reads or writes, possibly over several LUNs.
 *  @return the number of extents that failed */
int lun_read_batch(struct lun_io *ios, size_t n);
int lun_write_batch(struct lun_io *ios, size_t n);
/**
 * A thread's own io_uring for reads that complete one by one, signalled
 * on @efd (an eventfd): for extents of LUNs lun_ring_takes(). Queued reads
 * go out at lun_ring_submit(); lun_ring_reap() hands back, without
 * waiting, up to @max that are done, each with its result (and counted).
 * lun_ring_read() returns -EBUSY for a read the ring cannot take now (its
 * completions overflowed): the caller reads that extent itself.
 */
struct lun_ring;
struct lun_ring *lun_ring_new(unsigned entries, int efd);
void lun_ring_free(struct lun_ring *r);
int lun_ring_takes(const struct lun *l);
int lun_ring_read(struct lun_ring *r, struct lun_io *io);
void lun_ring_submit(struct lun_ring *r);
unsigned lun_ring_reap(struct lun_ring *r, struct lun_io **done, unsigned max);
/** Make all written data durable. */
int lun_flush(struct lun *l);
/** lun_flush() @n LUNs at once; @results[i] gets 0 or -errno.
 *  @return the number that failed */
int lun_flush_batch(struct lun **luns, int *results, size_t n);
/** Write @buf at @off of the reserved area of @n LUNs, each durable;
 *  @results[i] gets 0 or -errno. @return the number that failed, -EINVAL */
int lun_reserved_write_sync(struct lun **luns, int *results, size_t n, const void *buf,
			    size_t len, uint64_t off);

/** Error counters, for pool status. */
struct lun_counters {
	uint64_t read_errors, write_errors;
	uint64_t nospace_errors; /* writes refused for want of space: no fault */
};
void lun_counters(const struct lun *l, struct lun_counters *c);
/** The I/O counters of @l (store.h's struct stor_lun_iostat), read now. */
struct stor_lun_iostat;
void lun_iostat(const struct lun *l, struct stor_lun_iostat *st);
/** CLOCK_MONOTONIC in nanoseconds, the clock of the I/O counters. */
uint64_t lun_now_ns(void);
/** Zero the counters (pool clear). */
void lun_counters_reset(struct lun *l);

#endif
