/* SPDX-License-Identifier: MIT */
/*
 * The LUN interface. A LUN is a byte range with a claim on it, the label
 * codec with its two copies, and error counters; it knows nothing about
 * records or pools. How the bytes move is a table of operations
 * (lun_impl.h) that a backend fills in: files and block devices in
 * lun_file.c, Ceph RADOS objects in lun_rados.c for a path
 * "rados:POOL/PREFIX". lun_open() hands a path to the first backend of
 * its table whose prefix the path begins with, so a new backend is a row
 * there and a file of its own. The labels, the reserved area and the data
 * area go through the same operations, so a backend carries them all and
 * nothing above lun.c knows which one it talks to. A batch or a durable
 * round that spans backends is split here, one part per backend. A write
 * that fails for want of space is counted apart from I/O errors: a full
 * file system is not a failing disk.
 *
 * Every extent of the data area and the reserved area is counted here too
 * as it completes (pool iostat): ops, bytes, its wait and the backend's time
 * on it alone, a histogram of each, and what is in flight. The I/O path pays
 * a few relaxed atomic adds on counters of its own LUN, no lock, and the
 * clock (CLOCK_MONOTONIC, a vDSO read) twice a batch, whatever its size;
 * the file backend reads it once more an extent for its disk time.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "dev/lun_impl.h"
#include "store.h"

static_assert(STOR_LUNS_MAX <= 8 * LABEL_DETACHED_LEN, "a label's bitmap has every LUN index");

static void io_done(struct lun_io *io, int write, uint64_t wait_ns);

int lun_is_direct(const struct lun *l)
{
	return (l->flags & LUN_DIRECT) != 0;
}

/* A read in place counts as a read that waited for nothing: the pages are RAM. */
const void *lun_mapped(struct lun *l, uint64_t off, size_t len)
{
	struct lun_io io = { l, off, NULL, len, 0, 0, 0 };
	int failed = 0;

	if (!l->mmapped || LUN_DATA_OFF + off + len > l->mapped_len)
		return NULL;
	lun_io_issue(&io, 0);
	lun_count_result(&io, 0, 0, &failed);
	return l->mmapped + LUN_DATA_OFF + off;
}

uint64_t lun_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The backends, in the order a path is offered to them: the first whose
 * prefix the path begins with opens it. The file backend takes any path,
 * so it comes last; another backend is a row above it.
 */
static const struct lun_backend *const backends[] = {
	&lun_rados_backend,
	&lun_file_backend,
};

int lun_open(const char *path, unsigned flags, uint64_t size, struct lun **out)
{
	*out = NULL;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		const struct lun_backend *b = backends[i];

		if (!strncmp(path, b->prefix, strlen(b->prefix))) {
			int ret = b->open(path, flags, size, out);

			if (ret == 0)
				(*out)->since_ns = lun_now_ns();
			return ret;
		}
	}
	return -EINVAL; /* no backend takes it */
}

void lun_close(struct lun *l)
{
	if (!l)
		return;
	l->ops->close(l);
	free(l->path);
	free(l);
}

void lun_discard(struct lun *l)
{
	if (l && l->created == LUN_MADE)
		l->ops->unmake(l);
	lun_close(l);
}

int lun_renew(struct lun *l)
{
	return l->ops->renew ? l->ops->renew(l) : 0;
}

int lun_fenced(struct lun *l, char *why, size_t len)
{
	return l->ops->fenced ? l->ops->fenced(l, why, len) : 0;
}

int lun_took_over(struct lun *l, char *who, size_t wlen, char *addr, size_t alen)
{
	return l->ops->took_over ? l->ops->took_over(l, who, wlen, addr, alen) : 0;
}

int lun_grow(struct lun *l, uint64_t size)
{
	uint64_t now = 0;
	int ret;

	if (!l->ops->grow)
		return -EOPNOTSUPP;
	if (size && size < l->size)
		return -EINVAL; /* a LUN never shrinks */
	ret = l->ops->grow(l, size, &now);
	if (ret < 0)
		return ret;
	if (now < l->size)
		return -ERANGE; /* it shrank under the pool: not ours to follow */
	/* readers check offsets against it without a lock: only ever larger */
	__atomic_store_n(&l->size, now, __ATOMIC_RELEASE);
	return 0;
}

int lun_remove(struct lun *l, lun_progress_fn progress, void *ctx)
{
	return l->ops->remove ? l->ops->remove(l, progress, ctx) : 0;
}

const char *lun_path(const struct lun *l)
{
	return l->path;
}

int lun_created(const struct lun *l)
{
	return l->created;
}

/* Byte offset of label copy @i. */
static uint64_t label_off(const struct lun *l, unsigned i)
{
	return i == 0 ? 0 : (l->size & ~(uint64_t)(LUN_LABEL_SIZE - 1)) - LUN_LABEL_SIZE;
}

uint64_t lun_data_size(const struct lun *l)
{
	return label_off(l, 1) - LUN_DATA_OFF; /* both ends are 4 KiB aligned */
}

uint64_t lun_size(const struct lun *l)
{
	return l->size;
}

static int pio(struct lun *l, int write, void *buf, size_t len, uint64_t off)
{
	return l->ops->rw(l, write, buf, len, off);
}

/* The label sector goes through an aligned buffer so O_DIRECT LUNs work. */
static void *sector_buf(void)
{
	void *p = NULL;

	if (posix_memalign(&p, STOR_SECTOR, LUN_LABEL_SIZE))
		return NULL;
	memset(p, 0, LUN_LABEL_SIZE);
	return p;
}

static int label_decode(const uint8_t *buf, struct lun_label *lab)
{
	const uint8_t *p = buf;
	uint64_t magic, sum;

	memset(lab, 0, sizeof(*lab)); /* copies are compared with memcmp */
	magic = get_u64(&p);
	lab->version = get_u32(&p);
	lab->index = get_u32(&p);
	lab->pool_guid = get_u64(&p);
	lab->lun_guid = get_u64(&p);
	lab->size = get_u64(&p);
	lab->nluns = get_u32(&p);
	get_bytes(&p, lab->pool_name, LABEL_NAME_LEN);
	lab->pool_name[LABEL_NAME_LEN - 1] = '\0';
	lab->hostid = get_u32(&p);
	lab->state = get_u32(&p);
	sum = get_u64(&p);
	lab->vdev = lab->index;
	lab->sides = 1;
	if (magic != LUN_MAGIC)
		return STOR_ELABEL;
	if (sum == XXH64(buf, LABEL_LEN - 8, 0) && lab->version == LABEL_VERSION_DETACHED) {
		/* the vdev, its width and its detached indexes, checksummed apart */
		lab->vdev = get_u32(&p);
		lab->sides = get_u32(&p);
		get_bytes(&p, lab->detached, LABEL_DETACHED_LEN);
		sum = get_u64(&p);
		if (sum != XXH64(buf, LABEL_LEN_DETACHED - 8, 0))
			return STOR_ELABEL;
		lab->version = FORMAT_VERSION;
		if (lab->sides < 1 || lab->sides > STOR_MIRROR_MAX || lab->vdev > lab->index ||
		    lab->index >= STOR_LUNS_MAX)
			return STOR_ELABEL;
		/* a LUN with a label is none of the detached */
		return lab->detached[lab->index / 8] & (1u << lab->index % 8) ? STOR_ELABEL : 0;
	}
	if (sum == XXH64(buf, LABEL_LEN - 8, 0) && lab->version == LABEL_VERSION_MIRROR) {
		/* the mirror's layout follows, under a checksum of its own */
		lab->vdev = get_u32(&p);
		lab->sides = get_u32(&p);
		sum = get_u64(&p);
		if (sum != XXH64(buf, LABEL_LEN_MIRROR - 8, 0))
			return STOR_ELABEL;
		lab->version = FORMAT_VERSION;
		return lab->sides >= 2 && lab->sides <= STOR_MIRROR_MAX && lab->vdev <= lab->index
			       ? 0
			       : STOR_ELABEL;
	}
	if (sum == XXH64(buf, LABEL_LEN - 8, 0))
		return lab->version == FORMAT_VERSION ? 0 : STOR_EFORMAT;
	/* versions 2 and 3 end before the host id, their checksum where it is
	 * now: a sound old label says "another version", not "damaged" */
	p = buf + LABEL_LEN_V3 - 8;
	if (lab->version < FORMAT_VERSION && get_u64(&p) == XXH64(buf, LABEL_LEN_V3 - 8, 0))
		return STOR_EFORMAT;
	return STOR_ELABEL;
}

/* The oldest label version that says what @lab says (format.h). */
static uint32_t label_version(const struct lun_label *lab)
{
	for (unsigned i = 0; i < LABEL_DETACHED_LEN; i++)
		if (lab->detached[i])
			return LABEL_VERSION_DETACHED;
	if (lab->vdev != lab->index && lab->sides <= 1)
		return LABEL_VERSION_DETACHED; /* the last LUN of a vdev not its own */
	return lab->sides > 1 ? LABEL_VERSION_MIRROR : FORMAT_VERSION;
}

static void label_encode(uint8_t *buf, const struct lun_label *lab)
{
	uint32_t version = label_version(lab);
	uint8_t *p = buf;

	memset(buf, 0, LUN_LABEL_SIZE);
	put_u64(&p, LUN_MAGIC);
	put_u32(&p, version);
	put_u32(&p, lab->index);
	put_u64(&p, lab->pool_guid);
	put_u64(&p, lab->lun_guid);
	put_u64(&p, lab->size);
	put_u32(&p, lab->nluns);
	memcpy(p, lab->pool_name, strnlen(lab->pool_name, LABEL_NAME_LEN - 1));
	p += LABEL_NAME_LEN;
	put_u32(&p, lab->hostid);
	put_u32(&p, lab->state);
	put_u64(&p, XXH64(buf, LABEL_LEN - 8, 0));
	if (version == LABEL_VERSION_DETACHED) {
		put_u32(&p, lab->vdev);
		put_u32(&p, lab->sides);
		put_bytes(&p, lab->detached, LABEL_DETACHED_LEN);
		put_u64(&p, XXH64(buf, LABEL_LEN_DETACHED - 8, 0));
	} else if (version == LABEL_VERSION_MIRROR) {
		put_u32(&p, lab->vdev);
		put_u32(&p, lab->sides);
		put_u64(&p, XXH64(buf, LABEL_LEN_MIRROR - 8, 0));
	}
}

int lun_label_read(struct lun *l, struct lun_label *lab, unsigned *bad)
{
	uint8_t *buf = sector_buf();
	struct lun_label c[LUN_LABELS];
	int r[LUN_LABELS], good = -1;

	*bad = 0;
	if (!buf)
		return -ENOMEM;
	for (unsigned i = 0; i < LUN_LABELS; i++) {
		r[i] = pio(l, 0, buf, LUN_LABEL_SIZE, label_off(l, i));
		if (r[i] == 0)
			r[i] = label_decode(buf, &c[i]);
		if (r[i] < 0)
			*bad |= 1u << i;
		else if (good < 0)
			good = (int)i;
	}
	free(buf);
	if (good < 0) {
		for (unsigned i = 0; i < LUN_LABELS; i++)
			if (r[i] == STOR_EFORMAT)
				return STOR_EFORMAT;
		for (unsigned i = 0; i < LUN_LABELS; i++)
			if (r[i] != STOR_ELABEL)
				return r[i]; /* could not read it: say why */
		return STOR_ELABEL;
	}
	/* a sound copy that says something else is stale (a torn relabel) */
	for (unsigned i = (unsigned)good + 1; i < LUN_LABELS; i++)
		if (r[i] == 0 && memcmp(&c[i], &c[good], sizeof(c[i])))
			*bad |= 1u << i;
	*lab = c[good];
	return 0;
}

static int label_put(struct lun *l, const struct lun_label *lab, unsigned copies)
{
	uint8_t *buf = sector_buf();
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	if (lab)
		label_encode(buf, lab);
	for (unsigned i = 0; ret == 0 && i < LUN_LABELS; i++)
		if (copies & (1u << i))
			ret = pio(l, 1, buf, LUN_LABEL_SIZE, label_off(l, i));
	if (ret == 0) {
		int err;

		l->ops->sync_round(&l, &err, 1, NULL, 0, 0);
		ret = -err;
	}
	free(buf);
	return ret;
}

int lun_label_write(struct lun *l, const struct lun_label *lab)
{
	return label_put(l, lab, (1u << LUN_LABELS) - 1);
}

int lun_label_repair(struct lun *l, const struct lun_label *lab, unsigned copies)
{
	return label_put(l, lab, copies);
}

int lun_label_wipe(struct lun *l)
{
	uint8_t *zero = NULL;
	int ret;

	/* the uberblock ring goes too: a wiped LUN is blank, and names no log */
	if (posix_memalign((void **)&zero, STOR_SECTOR, (size_t)UB_SLOTS * UB_SIZE))
		return -ENOMEM;
	memset(zero, 0, (size_t)UB_SLOTS * UB_SIZE);
	ret = pio(l, 1, zero, (size_t)UB_SLOTS * UB_SIZE, UB_OFF);
	free(zero);
	return ret < 0 ? ret : label_put(l, NULL, (1u << LUN_LABELS) - 1);
}

int lun_reserved_io(struct lun *l, int write, void *buf, size_t len, uint64_t off)
{
	struct lun_io io = { l, off, buf, len, 0, 0, 0 };
	uint64_t t0;

	if (off < LUN_LABEL_SIZE || off + len > LUN_DATA_OFF || off + len < off)
		return -EINVAL;
	lun_io_issue(&io, write);
	t0 = lun_now_ns();
	io.result = pio(l, write, buf, len, off);
	io_done(&io, write, lun_now_ns() - t0);
	if (io.result < 0)
		atomic_fetch_add(write ? &l->write_errors : &l->read_errors, 1);
	return io.result;
}

int lun_is_blank(struct lun *l)
{
	const size_t chunk = 64u << 10;
	uint8_t *buf = NULL;
	int ret = 1;

	if (posix_memalign((void **)&buf, STOR_SECTOR, chunk))
		return -ENOMEM;
	for (uint64_t off = 0; ret == 1 && off <= LUN_DATA_OFF; off += chunk) {
		/* the front area in chunks, then the end copy's block */
		uint64_t at = off < LUN_DATA_OFF ? off : label_off(l, 1);
		size_t len = off < LUN_DATA_OFF ? chunk : LUN_LABEL_SIZE;
		int r = pio(l, 0, buf, len, at);

		if (r < 0)
			ret = r;
		for (size_t i = 0; ret == 1 && i < len; i++)
			if (buf[i])
				ret = 0;
	}
	free(buf);
	return ret;
}

/* The power-of-two bucket of @ns (store.h: STOR_LUN_HIST_BUCKETS). */
static unsigned hist_bucket(uint64_t ns)
{
	unsigned b = 63u - (unsigned)__builtin_clzll(ns | 1);

	return b < STOR_LUN_HIST_BUCKETS ? b : STOR_LUN_HIST_BUCKETS - 1;
}

/* The calling thread's shard of the I/O counters, given out in turn. */
static unsigned io_shard(void)
{
	static atomic_uint next;
	static _Thread_local unsigned shard = UINT_MAX;

	if (shard == UINT_MAX)
		shard = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % LUN_IO_SHARDS;
	return shard;
}

void lun_io_issue(struct lun_io *io, int write)
{
	io->disk_ns = 0;
	atomic_fetch_add_explicit(&io->lun->io[io_shard()][write].inflight, 1,
				  memory_order_relaxed);
}

/*
 * Relaxed: the counters order nothing and guard nothing, a reader only
 * adds them up, and each add is one instruction on the LUN's own cache
 * lines (no lock, no fence on x86 beyond the locked add itself).
 */
static void io_done(struct lun_io *io, int write, uint64_t wait_ns)
{
	struct lun_iodir *d = &io->lun->io[io_shard()][write];

	/* an extent issued on another thread's shard: the sum is still right */
	atomic_fetch_sub_explicit(&d->inflight, 1, memory_order_relaxed);
	if (io->result == 0) {
		/* a backend that does not time an extent alone: its wait is all it knows */
		uint64_t disk = io->disk_ns ? io->disk_ns : wait_ns;

		atomic_fetch_add_explicit(&d->ops, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->bytes, io->len, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->wait_ns, wait_ns, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->disk_ns, disk, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->hist[hist_bucket(wait_ns)], 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->disk_hist[hist_bucket(disk)], 1,
					  memory_order_relaxed);
	}
}

void lun_count_result(struct lun_io *io, int write, uint64_t wait_ns, int *failed)
{
	io_done(io, write, wait_ns);
	if (io->result < 0) {
		(*failed)++;
		if (io->result == -ENOSPC || io->result == -EDQUOT)
			atomic_fetch_add(&io->lun->nospace_errors, 1);
		else
			atomic_fetch_add(write ? &io->lun->write_errors : &io->lun->read_errors, 1);
	}
}

/*
 * A batch goes to its backend whole; one that spans backends (a pool of
 * files and RADOS LUNs) is split into one batch per backend, in a row.
 */
static int batch(struct lun_io *ios, size_t n, int write)
{
	int failed = 0;
	size_t same = 0;
	uint64_t t0, wait;

	for (size_t i = 0; i < n; i++)
		lun_io_issue(&ios[i], write);
	t0 = lun_now_ns();
	while (same < n && ios[same].lun->ops == ios[0].lun->ops)
		same++;
	if (same == n) {
		if (n)
			ios[0].lun->ops->batch(ios, n, write);
	} else {
		struct lun_io *part = malloc(n * sizeof(*part));
		size_t *at = malloc(n * sizeof(*at));
		unsigned char *taken = calloc(n, 1);

		for (size_t first = 0; part && at && taken && first < n; first++) {
			const struct lun_ops *ops = ios[first].lun->ops;
			size_t k = 0;

			if (taken[first])
				continue;
			for (size_t i = first; i < n; i++) {
				if (!taken[i] && ios[i].lun->ops == ops) {
					taken[i] = 1;
					at[k] = i;
					part[k++] = ios[i];
				}
			}
			ops->batch(part, k, write);
			for (size_t j = 0; j < k; j++) {
				ios[at[j]].result = part[j].result;
				ios[at[j]].disk_ns = part[j].disk_ns;
			}
		}
		if (!part || !at || !taken)
			for (size_t i = 0; i < n; i++)
				ios[i].result = -ENOMEM;
		free(part);
		free(at);
		free(taken);
	}
	/* every extent of a batch waits for the batch: its caller sees it then */
	wait = lun_now_ns() - t0;
	for (size_t i = 0; i < n; i++)
		lun_count_result(&ios[i], write, wait, &failed);
	return failed;
}

int lun_read_batch(struct lun_io *ios, size_t n)
{
	return batch(ios, n, 0);
}

int lun_write_batch(struct lun_io *ios, size_t n)
{
	return batch(ios, n, 1);
}

static int flush_result(struct lun *l, int err)
{
	if (err) {
		atomic_fetch_add(err == ENOSPC || err == EDQUOT ? &l->nospace_errors
								 : &l->write_errors,
				 1);
		return -err;
	}
	return 0;
}

int lun_flush(struct lun *l)
{
	int err;

	l->ops->sync_round(&l, &err, 1, NULL, 0, 0);
	return flush_result(l, err);
}

/* A durable round goes to each backend with its own LUNs, as a batch does. */
static int sync_round(struct lun **luns, int *results, size_t n, const void *buf, size_t len,
		      uint64_t off)
{
	struct lun **part = NULL;
	int *res = NULL;
	size_t *at = NULL, same = 0;
	unsigned char *taken = NULL;
	int failed = 0;

	while (same < n && luns[same]->ops == luns[0]->ops)
		same++;
	if (same == n) {
		/* one backend, as every pool but a mixed one: no split, no allocation */
		if (n)
			luns[0]->ops->sync_round(luns, results, n, buf, len, off);
		for (size_t i = 0; i < n; i++) {
			results[i] = flush_result(luns[i], results[i]);
			failed += results[i] < 0;
		}
		return failed;
	}
	part = malloc(n * sizeof(*part));
	res = malloc(n * sizeof(*res));
	at = malloc(n * sizeof(*at));
	taken = calloc(n, 1);
	for (size_t first = 0; part && res && at && taken && first < n; first++) {
		const struct lun_ops *ops = luns[first]->ops;
		size_t k = 0;

		if (taken[first])
			continue;
		for (size_t i = first; i < n; i++) {
			if (!taken[i] && luns[i]->ops == ops) {
				taken[i] = 1;
				at[k] = i;
				part[k++] = luns[i];
			}
		}
		ops->sync_round(part, res, k, buf, len, off);
		for (size_t j = 0; j < k; j++)
			results[at[j]] = res[j];
	}
	for (size_t i = 0; i < n; i++) {
		if (!part || !res || !at || !taken)
			results[i] = ENOMEM;
		results[i] = flush_result(luns[i], results[i]);
		failed += results[i] < 0;
	}
	free(part);
	free(res);
	free(at);
	free(taken);
	return failed;
}

int lun_reserved_write_sync(struct lun **luns, int *results, size_t n, const void *buf,
			    size_t len, uint64_t off)
{
	uint64_t t0, wait;
	int failed;

	if (off < LUN_LABEL_SIZE || off + len > LUN_DATA_OFF || off + len < off || !buf)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		struct lun_io io = { luns[i], off, NULL, len, 0, 0, 0 };

		lun_io_issue(&io, 1);
	}
	t0 = lun_now_ns();
	failed = sync_round(luns, results, n, buf, len, off);
	wait = lun_now_ns() - t0;
	for (size_t i = 0; i < n; i++) {
		/* its errors are sync_round's, counted there */
		struct lun_io io = { luns[i], off, NULL, len, results[i], 0, 0 };

		io_done(&io, 1, wait);
	}
	return failed;
}

int lun_flush_batch(struct lun **luns, int *results, size_t n)
{
	return sync_round(luns, results, n, NULL, 0, 0);
}

void lun_counters(const struct lun *l, struct lun_counters *c)
{
	c->read_errors = atomic_load(&l->read_errors);
	c->write_errors = atomic_load(&l->write_errors);
	c->nospace_errors = atomic_load(&l->nospace_errors);
}

void lun_iostat(const struct lun *l, struct stor_lun_iostat *st)
{
	memset(st, 0, sizeof(*st));
	st->since_ns = l->since_ns;
	st->now_ns = lun_now_ns();
	for (unsigned s = 0; s < LUN_IO_SHARDS; s++) {
		for (int w = 0; w < 2; w++) {
			const struct lun_iodir *d = &l->io[s][w];

			st->ops[w] += atomic_load_explicit(&d->ops, memory_order_relaxed);
			st->bytes[w] += atomic_load_explicit(&d->bytes, memory_order_relaxed);
			st->wait_ns[w] += atomic_load_explicit(&d->wait_ns, memory_order_relaxed);
			st->disk_ns[w] += atomic_load_explicit(&d->disk_ns, memory_order_relaxed);
			st->inflight[w] += atomic_load_explicit(&d->inflight, memory_order_relaxed);
			for (unsigned b = 0; b < STOR_LUN_HIST_BUCKETS; b++) {
				st->hist[w][b] +=
					atomic_load_explicit(&d->hist[b], memory_order_relaxed);
				st->disk_hist[w][b] +=
					atomic_load_explicit(&d->disk_hist[b], memory_order_relaxed);
			}
		}
	}
}

void lun_counters_reset(struct lun *l)
{
	atomic_store(&l->read_errors, 0);
	atomic_store(&l->write_errors, 0);
	atomic_store(&l->nospace_errors, 0);
}
