/* SPDX-License-Identifier: MIT */
/*
 * The file and block device backend of the LUN interface (lun_impl.h):
 * pread/pwrite (io_uring for batches on O_DIRECT LUNs, and a thread's own
 * ring for reads that complete one by one), fdatasync to flush, the claim a
 * flock + O_EXCL for as long as the LUN is open. Opening never writes:
 * whether a file may become a LUN (blank, not a symbolic link, not state of
 * ours) is decided by lunset.c from what lun_open, lun_is_blank and
 * lun_label_read report. Labels, counters and the split of a batch by
 * backend are lun.c's; this file only moves bytes and holds the claim.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "dev/lun_impl.h"
#include "store.h"

static const struct lun_ops file_ops;

static int file_size(int fd, uint64_t *size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, size) < 0)
			return -errno;
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*size = (uint64_t)st.st_size;
	return 0;
}

/*
 * A LUN file on tmpfs is RAM already: reading it through a shared mapping
 * lets the record be checked or decrypted straight from those pages into the
 * reply, where pread would first copy it into a buffer of ours. Only tmpfs:
 * a disk-backed mapping turns an I/O error into SIGBUS, and a pread there
 * costs little beside the disk. The mapping is coherent with pwrite (one
 * page cache) and extents are only read while referenced, so never a hole.
 * The first read of a page pwrite filled takes a fault to map it; mapping
 * each written batch at once (MADV_POPULATE_READ) cost writes 12-17 % on
 * tmpfs (ab.sh) and gained reads nothing measurable, so faults it is.
 */
static void map_if_ram(struct lun *l)
{
	struct statfs fs;
	void *m;

	if (!(l->flags & LUN_MAP) || (l->flags & LUN_DIRECT) || fstatfs(l->fd, &fs) < 0 ||
	    fs.f_type != TMPFS_MAGIC || l->size > SIZE_MAX)
		return;
	m = mmap(NULL, (size_t)l->size, PROT_READ, MAP_SHARED, l->fd, 0);
	if (m != MAP_FAILED) {
		l->mmapped = m;
		l->mapped_len = l->size; /* a grown file reads its new part by pread */
	}
}

/*
 * Open without following a final symbolic link, unless it leads to a block
 * device (udev's /dev/disk/by-* links) or the caller forces it: a link to a
 * root-only file in a directory a user controls must not become a LUN.
 * O_EXCL without O_CREAT claims a block device (EBUSY if mounted or claimed)
 * and is ignored for other files.
 */
static int open_nofollow(const char *path, int oflags, unsigned flags)
{
	struct stat st;
	int fd;

	if (!(flags & LUN_NEW) || (flags & LUN_FORCE))
		return open(path, oflags);
	fd = open(path, oflags | O_NOFOLLOW);
	if (fd >= 0 || errno != ELOOP)
		return fd;
	fd = open(path, oflags);
	if (fd < 0)
		return -1;
	/* the descriptor decides, not a second look at the path */
	if (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode)) {
		close(fd);
		errno = ELOOP;
		return -1;
	}
	return fd;
}

static int file_open(const char *path, unsigned flags, uint64_t size, struct lun **out)
{
	struct lun *l = NULL;
	struct stat st;
	int fd = -1, oflags = O_RDWR | O_CLOEXEC | O_NOCTTY, ret, created = 0, made = 0;

	*out = NULL;
	if (flags & LUN_DIRECT)
		oflags |= O_DIRECT;
	if (flags & LUN_PEEK) {
		flags &= ~(unsigned)(LUN_CREATE | LUN_MAP);
		oflags = (oflags & ~O_RDWR) | O_RDONLY;
	}
	fd = open_nofollow(path, oflags | (flags & LUN_PEEK ? 0 : O_EXCL), flags);
	if (fd < 0 && errno == ENOENT && (flags & LUN_CREATE)) {
		if (size < LUN_MIN_SIZE)
			return -EINVAL;
		fd = open(path, oflags | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
		if (fd >= 0 && ftruncate(fd, (off_t)size) < 0) {
			ret = -errno;
			close(fd);
			unlink(path);
			return ret;
		}
		created = made = fd >= 0 ? LUN_MADE : 0;
	}
	if (fd < 0)
		return -errno;
	if (!(flags & LUN_PEEK) && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto fail;
	}
	/* an empty file is as good as a missing one, and sized the same way */
	if (!created && (flags & LUN_CREATE) && size >= LUN_MIN_SIZE && fstat(fd, &st) == 0 &&
	    S_ISREG(st.st_mode) && st.st_size == 0) {
		if (ftruncate(fd, (off_t)size) < 0) {
			ret = -errno;
			goto fail;
		}
		created = LUN_SIZED;
	}
	l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(path))) {
		ret = -ENOMEM;
		goto fail;
	}
	l->ops = &file_ops;
	l->fd = fd;
	l->flags = flags;
	l->created = created;
	ret = file_size(fd, &l->size);
	if (ret < 0)
		goto fail;
	if (l->size < LUN_MIN_SIZE) {
		ret = -EINVAL;
		goto fail;
	}
	map_if_ram(l);
	*out = l;
	return 0;
fail:
	if (l)
		free(l->path);
	free(l);
	close(fd);
	if (made)
		unlink(path);
	return ret;
}

/* The stand-in's descriptor is -1: every pread, pwrite and fdatasync fails
 * at once (EBADF), so no path of the I/O code needs a test of its own; a
 * side it stands for is out of service, so none is tried in the first place. */
struct lun *lun_absent(const char *path, uint64_t size)
{
	struct lun *l = calloc(1, sizeof(*l));

	if (!l || !(l->path = strdup(path))) {
		free(l);
		return NULL;
	}
	l->ops = &file_ops;
	l->fd = -1;
	l->size = size;
	l->since_ns = lun_now_ns();
	return l;
}

int lun_unlinked(const struct lun *l)
{
	struct stat st;

	return l->fd >= 0 && fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0;
}

static void file_unmake(struct lun *l)
{
	unlink(l->path);
}

static void file_close(struct lun *l)
{
	if (l->mmapped)
		munmap((void *)l->mmapped, (size_t)l->mapped_len);
	close(l->fd);
}

/* A regular file below @size is extended (sparse); a device is what it is. */
static int file_grow(struct lun *l, uint64_t size, uint64_t *now)
{
	struct stat st;
	int ret;

	if (l->fd < 0)
		return -ENXIO;
	if (size && fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size < size &&
	    ftruncate(l->fd, (off_t)size) < 0)
		return -errno;
	ret = file_size(l->fd, now);
	if (ret == 0 && size && *now < size)
		ret = -ENOSPC; /* a device smaller than asked */
	return ret;
}

int lun_real_path(const struct lun *l, char *buf, size_t len)
{
	char proc[64];
	ssize_t n;

	if (l->fd < 0) {
		/* not a file: its path is all it has */
		if (strlen(l->path) >= len)
			return -ENAMETOOLONG;
		strcpy(buf, l->path);
		return 0;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", l->fd);
	n = readlink(proc, buf, len - 1);
	if (n < 0 || (size_t)n >= len - 1) {
		/* no /proc: the path as it resolves now */
		char *r = realpath(l->path, NULL);

		if (!r)
			return -errno;
		if (strlen(r) >= len) {
			free(r);
			return -ENAMETOOLONG;
		}
		strcpy(buf, r);
		free(r);
		return 0;
	}
	buf[n] = '\0';
	return 0;
}

static int file_rw(struct lun *l, int write, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = write ? pwrite(l->fd, (char *)buf + done, len - done, (off_t)(off + done))
				  : pread(l->fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return write ? -EIO : -EIO; /* short read past the end */
		done += (size_t)r;
	}
	return 0;
}

/*
 * Extents of O_DIRECT LUNs go to the device together, as one io_uring
 * submission, so a batch of 64 is 64 requests in flight rather than 64 in a
 * row: the device's queue depth, not its latency, sets the pace. Rings are
 * kept on a free list and taken per batch, so any thread may run a batch and
 * none holds a ring while it waits for work. Where io_uring is not allowed
 * (a seccomp filter, an old kernel) batches run one pread/pwrite at a time.
 * Buffered LUNs keep pread/pwrite: page-cache hits complete at once anyway.
 */
#define RING_ENTRIES 64u

struct ring {
	struct io_uring uring;
	struct ring *next;
};

static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring *free_rings;
static atomic_int uring_unavailable;

static struct ring *ring_get(void)
{
	struct ring *r;

	if (atomic_load(&uring_unavailable))
		return NULL;
	pthread_mutex_lock(&rings_lock);
	r = free_rings;
	if (r)
		free_rings = r->next;
	pthread_mutex_unlock(&rings_lock);
	if (r)
		return r;
	r = calloc(1, sizeof(*r));
	if (r && io_uring_queue_init(RING_ENTRIES, &r->uring, 0) < 0) {
		free(r);
		r = NULL;
		atomic_store(&uring_unavailable, 1);
	}
	return r;
}

/* Back on the free list after a batch; NULL-safe. */
static void ring_put(struct ring *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&rings_lock);
	r->next = free_rings;
	free_rings = r;
	pthread_mutex_unlock(&rings_lock);
}

/* A ring that refused work is dropped, never put back: the entries it did
 * not take would go out with the next batch. @return NULL, the ring now */
static struct ring *ring_drop(struct ring *r)
{
	io_uring_queue_exit(&r->uring);
	free(r);
	return NULL;
}

/* Wait for @n completions of @ios, submitted at @t0 (ns); a short transfer
 * is finished by file_rw(). Each extent's disk time ends when its
 * completion is seen. */
static void ring_reap(struct io_uring *u, struct lun_io *ios, unsigned n, int write, uint64_t t0)
{
	while (n) {
		struct io_uring_cqe *cqe;
		struct lun_io *io;
		int ret = io_uring_wait_cqe(u, &cqe);

		if (ret == -EINTR)
			continue;
		if (ret < 0)
			abort(); /* requests are in flight into our buffers: no way out */
		io = &ios[cqe->user_data];
		if (cqe->res < 0 && cqe->res != -EAGAIN && cqe->res != -EINTR)
			io->result = cqe->res;
		else if (cqe->res < 0 || (size_t)cqe->res < io->len) {
			size_t done = cqe->res < 0 ? 0 : (size_t)cqe->res;

			io->result = file_rw(io->lun, write, (char *)io->buf + done, io->len - done,
					 LUN_DATA_OFF + io->off + done);
		} else
			io->result = 0;
		io->disk_ns = lun_now_ns() - t0;
		io_uring_cqe_seen(u, cqe);
		n--;
	}
}

/* Submit the @n prepared entries. @return how many the ring took; *@err
 * says why it took no more (0, or -errno) */
static unsigned ring_submit(struct io_uring *u, unsigned n, int *err)
{
	unsigned queued = 0;

	*err = 0;
	while (queued < n) {
		int ret = io_uring_submit(u);

		if (ret == -EINTR)
			continue;
		if (ret <= 0) {
			*err = ret < 0 ? ret : -EIO;
			break;
		}
		queued += (unsigned)ret;
	}
	return queued;
}

/* Submit @n (<= RING_ENTRIES) extents and wait for all. @return -errno if
 * the ring failed before taking them all; those it did not take keep
 * result 1 (not run). */
static int ring_run(struct io_uring *u, struct lun_io *ios, unsigned n, int write)
{
	unsigned queued;
	uint64_t t0;
	int ret;

	for (unsigned i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(u);
		struct lun_io *io = &ios[i];

		if (write)
			io_uring_prep_write(sqe, io->lun->fd, io->buf, (unsigned)io->len,
					    LUN_DATA_OFF + io->off);
		else
			io_uring_prep_read(sqe, io->lun->fd, io->buf, (unsigned)io->len,
					   LUN_DATA_OFF + io->off);
		sqe->user_data = i;
	}
	t0 = lun_now_ns();
	queued = ring_submit(u, n, &ret);
	ring_reap(u, ios, queued, write, t0);
	return ret;
}

static int all_direct(const struct lun_io *ios, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(ios[i].lun->flags & LUN_DIRECT))
			return 0;
	return n > 0;
}

static void file_batch(struct lun_io *ios, size_t n, int write)
{
	struct ring *r = all_direct(ios, n) ? ring_get() : NULL;
	uint64_t t;

	for (size_t i = 0; i < n; i++)
		ios[i].result = 1; /* not run yet */
	for (size_t i = 0; r && i < n; i += RING_ENTRIES) {
		unsigned k = n - i < RING_ENTRIES ? (unsigned)(n - i) : RING_ENTRIES;

		if (ring_run(&r->uring, ios + i, k, write) < 0)
			r = ring_drop(r);
	}
	ring_put(r);
	t = 0;
	/* in a row: each extent's disk time is its own pread or pwrite, one
	 * clock read apiece (the end of one is the start of the next) */
	for (size_t i = 0; i < n; i++) {
		struct lun_io *io = &ios[i];
		uint64_t now;

		if (io->result != 1)
			continue;
		if (!t)
			t = lun_now_ns();
		io->result = file_rw(io->lun, write, io->buf, io->len, LUN_DATA_OFF + io->off);
		now = lun_now_ns();
		io->disk_ns = now - t;
		t = now;
	}
}

/*
 * A ring of one thread's own, for reads that complete one by one (the
 * daemon's loop): each extent is handed back as it arrives, so a request
 * waits for its own extents, not for the slowest of a batch, and new reads
 * go out while others are in flight. Its completions are signalled on an
 * eventfd the thread polls.
 */
struct lun_ring {
	struct io_uring uring;
	unsigned queued; /* prepared, not yet submitted */
};

struct lun_ring *lun_ring_new(unsigned entries, int efd)
{
	struct lun_ring *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	if (io_uring_queue_init(entries, &r->uring, 0) < 0) {
		free(r);
		return NULL;
	}
	if (io_uring_register_eventfd(&r->uring, efd) < 0) {
		io_uring_queue_exit(&r->uring);
		free(r);
		return NULL;
	}
	return r;
}

void lun_ring_free(struct lun_ring *r)
{
	if (!r)
		return;
	io_uring_queue_exit(&r->uring);
	free(r);
}

int lun_ring_takes(const struct lun *l)
{
	return l->ops == &file_ops && (l->flags & LUN_DIRECT);
}

/*
 * Send what is queued. A ring whose completions overflowed refuses new
 * work (-EBUSY, -EAGAIN) until they are reaped: what stays queued goes out
 * from lun_ring_reap(), which the completions' eventfd brings about.
 * @return 0, or -EBUSY if something stays queued
 */
static int ring_send(struct lun_ring *r)
{
	while (r->queued) {
		int ret = io_uring_submit(&r->uring);

		if (ret == -EINTR)
			continue;
		if (ret == -EAGAIN || ret == -EBUSY)
			return -EBUSY;
		if (ret <= 0)
			abort(); /* prepared reads into our buffers cannot be taken back */
		r->queued -= (unsigned)ret < r->queued ? (unsigned)ret : r->queued;
	}
	return 0;
}

void lun_ring_submit(struct lun_ring *r)
{
	ring_send(r);
}

int lun_ring_read(struct lun_ring *r, struct lun_io *io)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);

	/* the submission queue is full: send it, then there is room */
	if (!sqe && ring_send(r) == 0)
		sqe = io_uring_get_sqe(&r->uring);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, io->lun->fd, io->buf, (unsigned)io->len, LUN_DATA_OFF + io->off);
	io_uring_sqe_set_data(sqe, io);
	r->queued++;
	lun_io_issue(io, 0);
	io->issued_ns = lun_now_ns();
	return 0;
}

unsigned lun_ring_reap(struct lun_ring *r, struct lun_io **done, unsigned max)
{
	unsigned n = 0;
	int failed = 0;
	uint64_t now = 0;

	while (n < max) {
		struct io_uring_cqe *cqe;
		struct lun_io *io;

		if (io_uring_peek_cqe(&r->uring, &cqe) != 0)
			break;
		io = io_uring_cqe_get_data(cqe);
		if (cqe->res < 0 && cqe->res != -EAGAIN && cqe->res != -EINTR) {
			io->result = cqe->res;
		} else if (cqe->res < 0 || (size_t)cqe->res < io->len) {
			size_t got = cqe->res < 0 ? 0 : (size_t)cqe->res;

			io->result = file_rw(io->lun, 0, (char *)io->buf + got, io->len - got,
					     LUN_DATA_OFF + io->off + got);
		} else {
			io->result = 0;
		}
		io_uring_cqe_seen(&r->uring, cqe);
		/* one clock read a reap, for all it hands back: they were done by then;
		 * the caller waits for this extent alone, so its wait is its disk time */
		if (!now)
			now = lun_now_ns();
		io->disk_ns = now - io->issued_ns;
		lun_count_result(io, 0, io->disk_ns, &failed);
		done[n++] = io;
	}
	if (r->queued)
		ring_send(r); /* refused before: the completions made room */
	return n;
}

/*
 * Wait for @queued completions of fsyncs or writes whose full result is
 * @want: @res[i] gets 0, an errno, or 1 (interrupted or short: the caller
 * does it again, in a row).
 */
static void ring_wait(struct io_uring *u, int *res, unsigned queued, int want)
{
	for (unsigned k = 0; k < queued;) {
		struct io_uring_cqe *cqe;
		int ret = io_uring_wait_cqe(u, &cqe);

		if (ret == -EINTR)
			continue;
		if (ret < 0)
			abort(); /* requests in flight on our descriptors: no way out */
		if (cqe->res == want)
			res[cqe->user_data] = 0;
		else if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -EAGAIN)
			res[cqe->user_data] = -cqe->res;
		else
			res[cqe->user_data] = 1;
		io_uring_cqe_seen(u, cqe);
		k++;
	}
}

static int all_direct_luns(struct lun **luns, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(luns[i]->flags & LUN_DIRECT))
			return 0;
	return n > 1;
}

/* On @n (<= RING_ENTRIES) LUNs: an fdatasync, or with @buf a write of it at
 * @off made durable by itself (RWF_DSYNC); wait for all. Those the ring did
 * not take keep result 1. */
static int ring_sync(struct io_uring *u, struct lun **luns, int *res, unsigned n,
		     const void *buf, size_t len, uint64_t off)
{
	unsigned queued;
	int err;

	for (unsigned i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(u);

		if (buf) {
			io_uring_prep_write(sqe, luns[i]->fd, buf, (unsigned)len, off);
			sqe->rw_flags = RWF_DSYNC;
		} else {
			io_uring_prep_fsync(sqe, luns[i]->fd, IORING_FSYNC_DATASYNC);
		}
		sqe->user_data = i;
	}
	queued = ring_submit(u, n, &err);
	ring_wait(u, res, queued, buf ? (int)len : 0);
	return err;
}

/*
 * One durable round over @n LUNs: a flush of each, or with @buf the same
 * block written into each one's reserved area (an uberblock). On O_DIRECT
 * LUNs all go at once through io_uring, so a round costs the slowest LUN,
 * not the sum of all; buffered LUNs keep pwrite and fdatasync in a row, as
 * their reads and writes keep pread/pwrite. What the ring did not finish is
 * done in a row too.
 */
static void file_sync_round(struct lun **luns, int *results, size_t n, const void *buf,
			    size_t len, uint64_t off)
{
	struct ring *r = all_direct_luns(luns, n) ? ring_get() : NULL;

	for (size_t i = 0; i < n; i++)
		results[i] = 1; /* not run yet: positive, an errno once run */
	for (size_t i = 0; r && i < n; i += RING_ENTRIES) {
		unsigned k = n - i < RING_ENTRIES ? (unsigned)(n - i) : RING_ENTRIES;

		if (ring_sync(&r->uring, luns + i, results + i, k, buf, len, off) < 0)
			r = ring_drop(r);
	}
	ring_put(r);
	for (size_t i = 0; i < n; i++) {
		if (results[i] == 1) {
			int ret = buf ? file_rw(luns[i], 1, (void *)buf, len, off) : 0;

			results[i] = ret < 0 ? -ret : fdatasync(luns[i]->fd) < 0 ? errno : 0;
		}
	}
}

static const struct lun_ops file_ops = {
	.rw = file_rw,
	.batch = file_batch,
	.sync_round = file_sync_round,
	.grow = file_grow,
	.unmake = file_unmake,
	.close = file_close,
};

const struct lun_backend lun_file_backend = {
	.prefix = "", /* any path: a file or a block device */
	.open = file_open,
};
