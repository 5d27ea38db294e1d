/* SPDX-License-Identifier: MIT */
/*
 * The pool's metadata on its LUNs (format.h says the layout and why): each
 * txg commit writes one log record - the redo ops LMDB captured (meta.h)
 * and the key file when it changed - in ditto copies on different LUNs,
 * then an uberblock naming it on every LUN, before LMDB commits. Now and
 * then the record is a checkpoint of every table instead, and the log
 * before it is freed once that commit is done. A checkpoint due only to
 * keep the log short that finds no room (a full pool) is put off: a delta
 * record is written instead, up to twice MLOG_MAX_RECORDS of them. One
 * is also tried when space.c wants the log of destroyed datasets back
 * (metalog_want_checkpoint), and metalog_checkpoints() counts those done.
 *
 * Invariants: the uberblock is written only after every copy it names is
 * durable, and LMDB commits only after the uberblock is; so an import finds
 * on the LUNs every txg LMDB has, and at most the one txg more that a crash
 * interrupted, which it replays. The log's extents are the allocator's like
 * any others, marked at import from the log itself (metalog_mark).
 *
 * Which txg an import takes: the candidates are the distinct uberblocks
 * found on the LUNs (seq and record checksum), newest first, and each must
 * have a log that verifies (every record from at least one copy, back to
 * its checkpoint). One that a majority of the pool's LUNs hold (n/2 + 1 of
 * n) is taken. One that fewer hold - a commit a crash cut short among its
 * uberblock writes, or a stale or damaged ring - is taken only if every
 * copy of its newest record verifies too; otherwise the next older one is
 * judged the same way. When none passes, the newest whose log verifies is
 * taken after all (a pool that lost most of its rings still imports). This
 * passes over nothing acknowledged: a commit succeeds only once a majority
 * holds its uberblock, so a minority one was never promised to a writer,
 * and ZFS's "newest uberblock whose tree verifies" becomes "newest that
 * enough LUNs agree on, or that nothing about is in doubt".
 *
 * Repair: every copy of every record the taken log names is read, and each
 * that does not verify is rewritten in place from a sound one, as is the
 * taken uberblock's slot on each LUN that lacks it (metalog_repair, once
 * the LUNs are writable); pool status names each copy and LUN repaired.
 * What cannot be rewritten is superseded by a checkpoint at the next
 * commit.
 *
 * It reads and writes only LUNs and LMDB through meta.h; it never decides
 * which LUNs a pool has (pool.c hands them in) and never prints.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/array.h"
#include "base/pool_error.h"
#include "dev/alloc.h"
#include "dev/lun.h"
#include "dev/mirror.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/metalog.h"

struct mext {
	uint16_t lun;
	uint32_t n;
	uint64_t sector;
};

/* A log record copy import found damaged, and the sound bytes for it. */
struct mfix {
	uint16_t lun, from;
	uint32_t nsect;
	uint64_t sector, txg;
	uint8_t *buf;
};

struct mptr {
	uint8_t ncopies;
	uint16_t lun[MLOG_COPIES];
	uint64_t sector[MLOG_COPIES];
	uint32_t nsect, len;
	uint64_t cksum;
};

/*
 * A txg's record is written in parts of at most PART_MAX_SECT sectors (an
 * op is never split): copy-on-write leaves the free space in short runs,
 * and a checkpoint of a large pool would need a run no LUN has. The parts
 * share the txg, take consecutive seqs and each names the one before; a
 * checkpoint's first part is its MLOG_FULL record, the others deltas, so
 * the import replays them in order like any records.
 */
#define PART_MAX_SECT 64u /* 256 KiB */

struct part {
	size_t off, len; /* the slice of the ops */
	struct mptr m;
};

/* the record metalog_write() put on the LUNs, for metalog_publish() */
struct pending {
	int on, full;
	struct part *parts;
	size_t nparts;
	uint64_t txg, seq, keys_ver; /* seq: the last part's */
	uint64_t bytes;              /* of one copy of every part */
};

struct metalog {
	pthread_mutex_t lock; /* keys, note */
	uint8_t *keys;
	size_t keys_len;
	uint64_t keys_ver, keys_logged; /* bumped per metalog_keys; the one on the LUNs */
	/* the log: touched by the one commit at a time, and by the import before */
	struct mptr head;
	int have_head, force_full;
	atomic_int want_full;   /* metalog_want_checkpoint(): one try */
	int ckpt_published;     /* a checkpoint is on the LUNs, its commit not done */
	_Atomic uint64_t ckpts; /* checkpoints whose commit is done (metalog_checkpoints) */
	uint64_t seq;
	struct mext *live; /* copies of every record from the checkpoint on */
	size_t nlive, caplive;
	struct mext *dead; /* of a log a checkpoint replaced: freed after its commit */
	size_t ndead, capdead;
	uint64_t log_bytes, ckpt_bytes;
	unsigned nrecs;
	char note[2048]; /* room for a copy damaged on every LUN in every txg of a small pool */
	int lag_noted;
	char lag[384]; /* while the LUNs lag LMDB: the status sentence; "" once caught up */
	unsigned ring_ready; /* LUNs [0, ring_ready) have every ring slot allocated */
	struct pending pend;
	/* found damaged at import, repaired by metalog_repair() */
	struct mfix *fix;
	size_t nfix, capfix;
	unsigned *ub_fix, ub_fix_n; /* LUNs lacking the uberblock import took */
	uint64_t ub_txg;
	_Atomic uint64_t bytes, records;
};

int metalog_create(struct metalog **out)
{
	struct metalog *ml = calloc(1, sizeof(*ml));

	*out = ml;
	if (!ml)
		return -ENOMEM;
	pthread_mutex_init(&ml->lock, NULL);
	return 0;
}

void metalog_free(struct metalog *ml)
{
	if (!ml)
		return;
	if (ml->keys)
		keys_secure_free(ml->keys, ml->keys_len);
	free(ml->live);
	free(ml->dead);
	free(ml->pend.parts);
	for (size_t i = 0; i < ml->nfix; i++)
		free(ml->fix[i].buf);
	free(ml->fix);
	free(ml->ub_fix);
	pthread_mutex_destroy(&ml->lock);
	free(ml);
}

static int set_keys(struct metalog *ml, const uint8_t *buf, size_t len)
{
	uint8_t *copy = len ? keys_secure_alloc(len) : NULL;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	pthread_mutex_lock(&ml->lock);
	if (ml->keys)
		keys_secure_free(ml->keys, ml->keys_len);
	ml->keys = copy;
	ml->keys_len = len;
	ml->keys_ver++;
	pthread_mutex_unlock(&ml->lock);
	return 0;
}

int metalog_keys(struct stor_pool *p, const uint8_t *buf, size_t len)
{
	return set_keys(p->mlog, buf, len);
}

const uint8_t *metalog_keys_get(struct stor_pool *p, size_t *len)
{
	*len = p->mlog->keys_len;
	return p->mlog->keys;
}

int metalog_dirty(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;
	int dirty;

	pthread_mutex_lock(&ml->lock);
	dirty = ml->force_full || atomic_load(&ml->want_full) || ml->keys_ver != ml->keys_logged;
	pthread_mutex_unlock(&ml->lock);
	return dirty;
}

void metalog_force_checkpoint(struct stor_pool *p)
{
	p->mlog->force_full = 1;
}

void metalog_want_checkpoint(struct stor_pool *p)
{
	atomic_store(&p->mlog->want_full, 1);
}

uint64_t metalog_checkpoints(struct stor_pool *p)
{
	return atomic_load(&p->mlog->ckpts);
}

const char *metalog_note(struct stor_pool *p)
{
	return p->mlog->note;
}

void metalog_status(struct stor_pool *p, char *buf, size_t len)
{
	struct metalog *ml = p->mlog;

	pthread_mutex_lock(&ml->lock);
	snprintf(buf, len, "%s%s%s", ml->note, ml->note[0] && ml->lag[0] ? "; " : "", ml->lag);
	pthread_mutex_unlock(&ml->lock);
}

void metalog_counters(struct stor_pool *p, uint64_t *bytes, uint64_t *records)
{
	*bytes = atomic_load(&p->mlog->bytes);
	*records = atomic_load(&p->mlog->records);
}

static void add_note(struct metalog *ml, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(struct metalog *ml, const char *fmt, ...)
{
	size_t n = strlen(ml->note);
	va_list ap;

	if (n + 3 >= sizeof(ml->note))
		return;
	if (n) {
		memcpy(ml->note + n, "; ", 3);
		n += 2;
	}
	va_start(ap, fmt);
	vsnprintf(ml->note + n, sizeof(ml->note) - n, fmt, ap);
	va_end(ap);
}

void metalog_notef(struct stor_pool *p, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	add_note(p->mlog, "%s", buf);
}

static int ext_push(struct mext **v, size_t *n, size_t *cap, struct mext e)
{
	struct mext *g = array_grow(*v, *n, cap, sizeof(**v), 64);

	if (!g)
		return -ENOMEM;
	*v = g;
	(*v)[(*n)++] = e;
	return 0;
}

static void mptr_put(uint8_t **w, const struct mptr *m)
{
	put_u8(w, m->ncopies);
	for (unsigned i = 0; i < MLOG_COPIES; i++) {
		put_u16(w, i < m->ncopies ? m->lun[i] : 0);
		put_u64(w, i < m->ncopies ? m->sector[i] : 0);
	}
	put_u32(w, m->nsect);
	put_u32(w, m->len);
	put_u64(w, m->cksum);
}

static int mptr_get(const uint8_t **r, struct mptr *m)
{
	memset(m, 0, sizeof(*m));
	m->ncopies = get_u8(r);
	for (unsigned i = 0; i < MLOG_COPIES; i++) {
		m->lun[i] = get_u16(r);
		m->sector[i] = get_u64(r);
	}
	m->nsect = get_u32(r);
	m->len = get_u32(r);
	m->cksum = get_u64(r);
	/* the import allocates and reads nsect sectors of each copy before its
	 * checksum can vouch for them: only what a writer makes is sound */
	if (m->ncopies > MLOG_COPIES ||
	    (m->ncopies && (m->len < MLOG_HEAD_LEN || m->nsect > MLOG_PART_MAX_SECT ||
			    m->nsect != ((uint64_t)m->len + STOR_SECTOR - 1) / STOR_SECTOR)))
		return STOR_ECORRUPT;
	return 0;
}

/* ---- writing ---- */

struct dump {
	struct meta_redo *r;
	unsigned table;
};

static int dump_row(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct dump *d = ctx;

	return meta_redo_add(d->r, d->table, META_OP_PUT, key, klen, val, vlen);
}

/* The ops of the record: this txg's (and what committed since the last
 * record), or every row of @t for a checkpoint; then the key file. */
static int record_body(struct metalog *ml, struct meta_txn *t, int full, struct meta_redo *body,
		       uint64_t *keys_ver)
{
	uint8_t *ops = NULL;
	size_t olen = 0;
	int ret = meta_txn_log(t, &ops, &olen);

	if (ret < 0)
		return ret;
	if (full) {
		free(ops);
		for (unsigned tab = 0; tab < META_NTABLES && ret == 0; tab++) {
			struct dump d = { body, tab };
			ret = meta_iter(t, tab, NULL, 0, 0, dump_row, &d);
		}
	} else {
		*body = (struct meta_redo){ ops, olen, olen + 1 };
	}
	pthread_mutex_lock(&ml->lock);
	*keys_ver = ml->keys_ver;
	if (ret == 0 && ml->keys && (full || ml->keys_ver != ml->keys_logged))
		ret = meta_redo_add(body, MLOG_TABLE_KEYS, META_OP_PUT, "keys", 4, ml->keys,
				    ml->keys_len);
	pthread_mutex_unlock(&ml->lock);
	return ret;
}

/* How many copies a record gets: one per vdev up to MLOG_COPIES, at least
 * two, but one on a lone mirror, whose sides each hold it already. Counted
 * by vdevs, not LUNs: a mirror's copy is on every side of it. */
static unsigned copies_wanted(struct stor_pool *p, unsigned nluns)
{
	unsigned nvdevs = 0;
	int mirror = 0;

	for (unsigned i = 0; i < nluns; i++) {
		if (p->luns[i].vdev != i)
			continue;
		nvdevs++;
		mirror = p->luns[i].nsides > 1;
	}
	if (nvdevs == 1 && mirror)
		return 1;
	return nvdevs >= MLOG_COPIES ? MLOG_COPIES : 2;
}

/* Room for @nsect sectors on up to MLOG_COPIES vdevs, different ones while
 * there are enough, starting from a LUN that turns with @seq (only a vdev's
 * first LUN has space, so the others are passed over). */
static int place_copies(struct stor_pool *p, uint64_t seq, uint32_t nsect, struct mptr *m)
{
	unsigned nluns = atomic_load(&p->nluns);
	unsigned want = copies_wanted(p, nluns);

	m->ncopies = 0;
	for (unsigned k = 0; k < nluns * 2 && m->ncopies < want; k++) {
		unsigned lun = (unsigned)((seq + k) % nluns);
		uint64_t sector;
		int taken = 0;

		/* on the first round each LUN takes one copy at most */
		for (unsigned c = 0; c < m->ncopies && k < nluns; c++)
			taken |= m->lun[c] == lun;
		if (taken || alloc_get_on(p->alloc, lun, nsect, &sector) < 0)
			continue;
		m->lun[m->ncopies] = (uint16_t)lun;
		m->sector[m->ncopies] = sector;
		m->ncopies++;
	}
	return m->ncopies ? 0 : STOR_ENOSPC;
}

static void unplace(struct stor_pool *p, const struct mptr *m)
{
	for (unsigned c = 0; c < m->ncopies; c++)
		alloc_put_meta(p->alloc, m->lun[c], m->sector[c], m->nsect);
}

static void ub_encode(uint8_t *buf, uint64_t guid, uint64_t txg, uint64_t seq,
		      const struct mptr *head)
{
	uint8_t *w = buf;

	memset(buf, 0, UB_SIZE);
	put_u64(&w, UB_MAGIC);
	put_u32(&w, FORMAT_VERSION);
	put_u32(&w, 0);
	put_u64(&w, guid);
	put_u64(&w, txg);
	put_u64(&w, seq);
	mptr_put(&w, head);
	put_u64(&w, XXH64(buf, UB_LEN - 8, 0));
}

/* Whether a LUN of the vdev of LUN @idx (itself aside) took the uberblock:
 * @res holds the results of the LUNs @at names. */
static int sibling_took(struct stor_pool *p, unsigned idx, const unsigned *at, const int *res,
			unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		if (at[k] != idx && p->luns[at[k]].vdev == p->luns[idx].vdev && res[k] == 0)
			return 1;
	return 0;
}

/* Write the uberblock on every LUN, durable, all at once. A mirror side
 * that fails it while a sibling took it goes out of service, as one that
 * misses a data write does (mirror.c), and is not counted in @tried: one
 * side's failure must not fail the commit of a pool whose every vdev holds
 * the uberblock, and a side out of service is left out of the count anyway.
 * @return how many are durable */
static unsigned write_ubs(struct stor_pool *p, uint64_t txg, uint64_t seq, const struct mptr *head,
			  unsigned *tried)
{
	unsigned nluns = atomic_load(&p->nluns), ok = 0, n = 0;
	int failed;
	struct lun **luns = calloc(nluns ? nluns : 1, sizeof(*luns));
	unsigned *at = calloc(nluns ? nluns : 1, sizeof(*at));
	int *res = calloc(nluns ? nluns : 1, sizeof(*res));
	uint8_t *ub = NULL;

	*tried = 0;
	if (!luns || !at || !res || posix_memalign((void **)&ub, STOR_SECTOR, UB_SIZE)) {
		free(luns);
		free(at);
		free(res);
		return 0;
	}
	/* a LUN new to the pool (this pool's creation, an add) gets its whole
	 * ring written first: its slots then never need space of a file system
	 * that data filled, and a sparse LUN reads zero there anyway */
	for (unsigned i = p->mlog->ring_ready; i < nluns; i++) {
		memset(ub, 0, UB_SIZE);
		for (unsigned s = 0; s < UB_SLOTS; s++)
			lun_reserved_io(p->luns[i].lun, 1, ub, UB_SIZE, UB_OFF + s * UB_SIZE);
	}
	p->mlog->ring_ready = nluns;
	ub_encode(ub, p->guid, txg, seq, head);
	/* not on a mirror side out of service: it lacks extents since */
	for (unsigned i = 0; i < nluns; i++)
		if (!atomic_load(&p->luns[i].out)) {
			at[n] = i;
			luns[n++] = p->luns[i].lun;
		}
	*tried = n;
	failed = lun_reserved_write_sync(luns, res, n, ub, UB_SIZE,
					 UB_OFF + (seq % UB_SLOTS) * UB_SIZE);
	ok = failed < 0 ? 0 : n - (unsigned)failed;
	for (unsigned k = 0; failed > 0 && k < n; k++)
		if (res[k] < 0 && sibling_took(p, at[k], at, res, n) &&
		    mirror_side_failed(p, at[k], 1))
			--*tried;
	free(ub);
	free(luns);
	free(at);
	free(res);
	return ok;
}

/*
 * No room for the record (a pool or a file system that data filled): LMDB
 * commits alone, ahead of the LUNs, rather than every write being refused,
 * and each commit tries a checkpoint until one gets through. A crash
 * meanwhile loses nothing acknowledged: LMDB is durable, the import takes
 * it as ahead of the LUNs and writes the checkpoint, with the key file of
 * the state directory when it is newer than the LUNs' (keyfile_restore).
 * A state directory lost meanwhile loses the txgs since the last record.
 */
static int lag(struct metalog *ml, const char *why, uint64_t txg)
{
	ml->force_full = 1;
	if (!ml->lag_noted) {
		/* pool status says it while it lasts, and what ends it */
		pthread_mutex_lock(&ml->lock);
		snprintf(ml->lag, sizeof(ml->lag),
			 "%s: the LUNs lag LMDB from txg %llu on; those txgs are in the state "
			 "directory only, and an import from the LUNs alone (import -d on another "
			 "host) would miss them; free space on the LUNs' file system or in the "
			 "pool, then a commit writes a checkpoint",
			 why, (unsigned long long)txg);
		pthread_mutex_unlock(&ml->lock);
	}
	ml->lag_noted = 1;
	return 0;
}

static int no_space(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/* Split @body into parts of at most @max bytes with their head; an op is
 * never split (a part holds at least one). */
static int split(const struct meta_redo *body, size_t max, struct part **out, size_t *nout)
{
	const uint8_t *p = body->buf, *end = body->buf + body->len, *at = p;
	size_t n = 0, cap = 0, room = max > MLOG_HEAD_LEN ? max - MLOG_HEAD_LEN : 1;
	struct part *v = NULL, *g;
	struct meta_op op;
	int ret;

	*out = NULL;
	*nout = 0;
	for (;;) {
		const uint8_t *before = p;

		ret = body->len ? meta_redo_next(&p, end, &op) : 0;
		if (ret < 0) {
			free(v);
			return ret;
		}
		/* close the part when this op would overflow it, or at the end */
		if ((ret == 0 && (at < before || n == 0)) ||
		    (ret == 1 && before > at && (size_t)(p - at) > room)) {
			if (!(g = array_grow(v, n, &cap, sizeof(*v), 8))) {
				free(v);
				return -ENOMEM;
			}
			v = g;
			v[n++] = (struct part){ .off = (size_t)(at - body->buf), .len = (size_t)(before - at) };
			at = before;
		}
		if (ret == 0)
			break;
	}
	*out = v;
	*nout = n;
	return 0;
}

static void unplace_parts(struct stor_pool *p, struct part *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		unplace(p, &v[i].m);
}

/* Split and place the record in parts of PART_MAX_SECT sectors, smaller
 * ones while the LUNs have no run that long. STOR_ENOSPC: not even in
 * parts of one sector each. */
static int place_parts(struct stor_pool *p, const struct meta_redo *body, uint64_t seq,
		       struct part **out, size_t *nout)
{
	for (uint32_t psect = PART_MAX_SECT; psect; psect /= 4) {
		struct part *v;
		size_t n, k = 0;
		int ret = split(body, (size_t)psect * STOR_SECTOR, &v, &n);

		if (ret < 0)
			return ret;
		for (; k < n; k++) {
			size_t len = MLOG_HEAD_LEN + v[k].len;

			/* one op alone larger than a part: the key file, bounded
			 * by keyfile_save below what an import reads */
			if (len > (size_t)MLOG_PART_MAX_SECT * STOR_SECTOR) {
				unplace_parts(p, v, k);
				free(v);
				return -E2BIG;
			}
			v[k].m.len = (uint32_t)len;
			v[k].m.nsect = (uint32_t)((len + STOR_SECTOR - 1) / STOR_SECTOR);
			if (place_copies(p, seq + k, v[k].m.nsect, &v[k].m) < 0)
				break;
		}
		if (k == n) {
			*out = v;
			*nout = n;
			return 0;
		}
		unplace_parts(p, v, k);
		free(v);
	}
	return STOR_ENOSPC;
}

/* Each part in its sectors of @buf: head, naming the part before it (the
 * previous txg's last for the first part of a delta), then its ops. */
static void encode_parts(struct stor_pool *p, const struct meta_redo *body, struct part *v,
			 size_t n, int full, uint64_t txg, uint64_t seq, uint8_t *buf)
{
	struct mptr none = { 0 };

	for (size_t k = 0; k < n; k++) {
		uint8_t *rec = buf, *w = rec;

		memset(rec + v[k].m.len, 0, (size_t)v[k].m.nsect * STOR_SECTOR - v[k].m.len);
		put_u64(&w, MLOG_MAGIC);
		put_u32(&w, FORMAT_VERSION);
		put_u32(&w, full && k == 0 ? MLOG_FULL : MLOG_DELTA);
		put_u64(&w, p->guid);
		put_u64(&w, txg);
		put_u64(&w, seq + k);
		mptr_put(&w, k ? &v[k - 1].m : full ? &none : &p->mlog->head);
		put_u32(&w, (uint32_t)v[k].len);
		if (v[k].len)
			put_bytes(&w, body->buf + v[k].off, v[k].len);
		v[k].m.cksum = XXH64(rec, v[k].m.len, 0);
		buf += (size_t)v[k].m.nsect * STOR_SECTOR;
	}
}

/* Keep the copies of each part whose LUN result in @res (indexed by copy,
 * or by LUN with @by_lun) is 0; @return 0, or the first part left with none
 * (all its copies failed for want of space: *@full_fs). */
static int keep_good(struct part *v, size_t n, const int *res, int by_lun, int *full_fs)
{
	size_t x = 0;
	int lost = 0;

	*full_fs = 1;
	for (size_t k = 0; k < n; k++) {
		struct mptr *m = &v[k].m;
		unsigned written = 0;

		for (unsigned c = 0; c < m->ncopies; c++, x++) {
			int r = by_lun ? res[m->lun[c]] : res[x];

			if (r == 0) {
				m->lun[written] = m->lun[c];
				m->sector[written] = m->sector[c];
				written++;
			} else {
				*full_fs &= no_space(r);
			}
		}
		if (!written)
			lost = 1;
		else
			m->ncopies = (uint8_t)written;
	}
	return lost;
}

int metalog_write(struct stor_pool *p, struct meta_txn *t, uint64_t txg, uint8_t *flush)
{
	struct metalog *ml = p->mlog;
	struct meta_redo body = { 0 };
	struct lun_io *io = NULL;
	struct part *v = NULL;
	uint64_t seq = ml->seq + 1, keys_ver = 0, limit, total = 0;
	uint8_t *buf = NULL;
	size_t n = 0, nio = 0;
	unsigned nluns = atomic_load(&p->nluns);
	int *res = NULL, full, need_full, full_fs, ret;

	ml->pend.on = 0;
	/* the log may grow to the checkpoint's size (so checkpoints cost no more
	 * than the log), at least MLOG_MIN_CKPT, but on a small pool no more
	 * than 1/128 of its space */
	limit = MLOG_MIN_CKPT;
	{
		uint64_t space = 0, used, tot;

		for (unsigned i = 0; i < nluns; i++) {
			alloc_usage(p->alloc, i, &used, &tot);
			space += tot * STOR_SECTOR;
		}
		if (limit > space / 128)
			limit = space / 128;
	}
	if (limit < ml->ckpt_bytes)
		limit = ml->ckpt_bytes;
	/* a checkpoint the log needs (none yet, or LMDB ahead of it), or one
	 * only due to keep the log short: that one, when it finds no room,
	 * gives way to a delta record while the log may still grow */
	need_full = !ml->have_head || ml->force_full || ml->nrecs >= 2 * MLOG_MAX_RECORDS;
	/* one wanted (metalog_want_checkpoint) is tried once, as one due */
	full = need_full || atomic_exchange(&ml->want_full, 0) || ml->nrecs >= MLOG_MAX_RECORDS ||
	       ml->log_bytes >= limit;
	for (;;) {
		ret = record_body(ml, t, full, &body, &keys_ver);
		if (ret < 0)
			goto out;
		ret = place_parts(p, &body, seq, &v, &n);
		if (ret != STOR_ENOSPC || !full || need_full)
			break;
		full = 0;
		meta_redo_free(&body);
		body = (struct meta_redo){ 0 };
	}
	if (ret == STOR_ENOSPC) {
		ret = lag(ml, "no room for the metadata log (pool full)", txg);
		goto out;
	}
	if (ret < 0)
		goto out;
	for (size_t k = 0; k < n; k++) {
		total += (uint64_t)v[k].m.nsect * STOR_SECTOR;
		nio += v[k].m.ncopies;
	}
	if (posix_memalign((void **)&buf, STOR_SECTOR, (size_t)total) ||
	    !(io = calloc(nio, sizeof(*io))) || !(res = calloc(nio, sizeof(*res)))) {
		unplace_parts(p, v, n);
		ret = -ENOMEM;
		goto out;
	}
	encode_parts(p, &body, v, n, full, txg, seq, buf);
	nio = 0;
	for (size_t k = 0, off = 0; k < n; off += (size_t)v[k].m.nsect * STOR_SECTOR, k++)
		for (unsigned c = 0; c < v[k].m.ncopies; c++)
			io[nio++] = (struct lun_io){ p->luns[v[k].m.lun[c]].lun,
						     v[k].m.sector[c] * STOR_SECTOR, buf + off,
						     (size_t)v[k].m.nsect * STOR_SECTOR, 0, 0, 0 };
	/* to every side in service of each copy's vdev */
	for (size_t k = 0, x = 0; k < n; x += v[k].m.ncopies, k++)
		mirror_write_copies(p, io + x, v[k].m.lun, v[k].m.ncopies);
	for (size_t x = 0; x < nio; x++)
		res[x] = io[x].result;
	/* a copy that did not reach its LUN is left out of the pointer: fewer
	 * copies beat no commit; the extent stays taken until the next import */
	if (keep_good(v, n, res, 0, &full_fs)) {
		unplace_parts(p, v, n);
		ret = full_fs ? lag(ml, "metadata log not written (file system full)", txg) : -EIO;
		goto out;
	}
	for (size_t k = 0; k < n; k++)
		for (unsigned c = 0; c < v[k].m.ncopies; c++)
			flush[v[k].m.lun[c]] = 1;
	ml->pend = (struct pending){ 1, full, v, n, txg, seq + n - 1, keys_ver, total };
	v = NULL;
out:
	free(v);
	free(buf);
	free(io);
	free(res);
	meta_redo_free(&body);
	return ret;
}

void metalog_abort(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;

	if (ml->pend.on)
		unplace_parts(p, ml->pend.parts, ml->pend.nparts);
	free(ml->pend.parts);
	ml->pend = (struct pending){ 0 };
}

int metalog_publish(struct stor_pool *p, const int *flushed)
{
	struct metalog *ml = p->mlog;
	struct pending pd = ml->pend;
	unsigned nluns = atomic_load(&p->nluns);
	uint64_t bytes = (uint64_t)UB_SIZE * nluns;
	unsigned tried = 0;
	int ret = 0, full_fs;

	ml->pend = (struct pending){ 0 };
	if (!pd.on)
		return 0; /* lagging: LMDB commits alone, and must be durable itself */
	if (keep_good(pd.parts, pd.nparts, flushed, 1, &full_fs)) {
		unplace_parts(p, pd.parts, pd.nparts);
		free(pd.parts);
		return full_fs ? lag(ml, "metadata log not written (file system full)", pd.txg)
			       : -EIO;
	}
	/* a txg is acknowledged only once most LUNs hold its uberblock: the
	 * import rule (head comment) may pass over one that fewer hold */
	if (write_ubs(p, pd.txg, pd.seq, &pd.parts[pd.nparts - 1].m, &tried) < tried / 2 + 1) {
		free(pd.parts);
		return -EIO; /* the record's extents stay taken: an uberblock may name it */
	}
	/* the LUNs name this record now, whatever LMDB does next */
	ml->seq = pd.seq;
	ml->head = pd.parts[pd.nparts - 1].m;
	ml->have_head = 1;
	ml->lag_noted = 0;
	pthread_mutex_lock(&ml->lock);
	ml->lag[0] = '\0'; /* caught up: the LUNs name this txg */
	if (pd.full) {
		for (size_t i = 0; i < ml->nlive && ret == 0; i++)
			ret = ext_push(&ml->dead, &ml->ndead, &ml->capdead, ml->live[i]);
		ml->nlive = 0;
		ml->log_bytes = 0;
		ml->nrecs = 0;
		ml->ckpt_bytes = pd.bytes;
		ml->force_full = 0;
		ml->ckpt_published = 1;
	} else {
		ml->log_bytes += pd.bytes;
		ml->nrecs++;
	}
	for (size_t k = 0; k < pd.nparts; k++) {
		const struct mptr *m = &pd.parts[k].m;

		for (unsigned c = 0; c < m->ncopies && ret == 0; c++)
			ret = ext_push(&ml->live, &ml->nlive, &ml->caplive,
				       (struct mext){ m->lun[c], m->nsect, m->sector[c] });
		bytes += (uint64_t)m->nsect * STOR_SECTOR * m->ncopies;
	}
	ml->keys_logged = pd.keys_ver;
	pthread_mutex_unlock(&ml->lock);
	free(pd.parts);
	atomic_fetch_add(&ml->bytes, bytes);
	atomic_fetch_add(&ml->records, 1);
	/* an allocation failure above only leaks extents until the next import */
	return 1;
}

uint64_t metalog_committed(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;
	uint64_t freed = 0;

	pthread_mutex_lock(&ml->lock);
	for (size_t i = 0; i < ml->ndead; i++)
		if (alloc_put_meta(p->alloc, ml->dead[i].lun, ml->dead[i].sector, ml->dead[i].n) == 0)
			freed += ml->dead[i].n;
	ml->ndead = 0;
	if (ml->ckpt_published)
		atomic_fetch_add(&ml->ckpts, 1);
	ml->ckpt_published = 0;
	pthread_mutex_unlock(&ml->lock);
	return freed;
}

int metalog_extents(struct stor_pool *p, metalog_extent_fn fn, void *ctx)
{
	struct metalog *ml = p->mlog;
	int ret = 0;

	pthread_mutex_lock(&ml->lock);
	for (size_t i = 0; i < ml->nlive && ret == 0; i++)
		ret = fn(ml->live[i].lun, ml->live[i].sector, ml->live[i].n, ctx);
	for (size_t i = 0; i < ml->ndead && ret == 0; i++)
		ret = fn(ml->dead[i].lun, ml->dead[i].sector, ml->dead[i].n, ctx);
	pthread_mutex_unlock(&ml->lock);
	return ret;
}

uint64_t metalog_space_for(uint64_t records)
{
	/* a redo op per pointer: its head, the "bp" key (dataset id, record)
	 * and the pointer; a "mac" row per MAC_GROUP pointers, rounded up */
	const uint64_t bp_row = META_OP_HEAD + 16 + BP_LEN;
	const uint64_t mac_row = META_OP_HEAD + 16 + MAC_LEN;
	uint64_t per_copy = records * bp_row + (records + MAC_GROUP - 1) / MAC_GROUP * mac_row;

	return per_copy * MLOG_COPIES * 2;
}

static int count_one(unsigned lun, uint64_t sector, uint32_t n, void *ctx)
{
	(void)lun;
	(void)sector;
	*(uint64_t *)ctx += n;
	return 0;
}

uint64_t metalog_sectors(struct stor_pool *p)
{
	uint64_t n = 0;

	metalog_extents(p, count_one, &n);
	return n;
}


/* ---- import ---- */

struct ub {
	uint64_t txg, seq;
	struct mptr head;
	unsigned lun;
};

struct rec {
	uint8_t *buf; /* the record's bytes, MLOG_HEAD_LEN + ops */
	struct mptr where, prev;
	uint64_t txg, seq;
	uint32_t kind;
	const uint8_t *ops;
	size_t olen;
	unsigned bad, good; /* copies that do not verify (bits); the one read */
};

static int ub_decode(const uint8_t *buf, uint64_t guid, struct ub *u)
{
	const uint8_t *r = buf;

	const uint8_t *sum = buf + UB_LEN - 8;

	if (get_u64(&r) != UB_MAGIC)
		return -ENOENT;
	if (XXH64(buf, UB_LEN - 8, 0) != get_u64(&sum))
		return STOR_ECORRUPT;
	if (get_u32(&r) != FORMAT_VERSION)
		return STOR_EFORMAT;
	get_u32(&r);
	if (get_u64(&r) != guid)
		return -ENOENT; /* another pool's, from before this LUN was labelled */
	u->txg = get_u64(&r);
	u->seq = get_u64(&r);
	if (mptr_get(&r, &u->head) < 0)
		return -ERANGE; /* u->head as it reads, for the message */
	return u->head.ncopies == 0 ? STOR_ECORRUPT : 0;
}

/* Every sound uberblock of every LUN, newest first; in @odd (lun L->n if
 * none) the first whose checksum holds but whose pointer no writer makes. */
static int read_ubs(struct metalog_luns *L, struct ub **out, size_t *nout, uint64_t *newest,
		    struct ub *odd)
{
	uint8_t *ring = NULL;
	struct ub *v = NULL;
	size_t n = 0, cap = 0;

	*out = NULL;
	*nout = 0;
	if (posix_memalign((void **)&ring, STOR_SECTOR, (size_t)UB_SLOTS * UB_SIZE))
		return -ENOMEM;
	for (unsigned i = 0; i < L->n; i++) {
		newest[i] = 0;
		if (!L->lun[i] ||
		    lun_reserved_io(L->lun[i], 0, ring, (size_t)UB_SLOTS * UB_SIZE, UB_OFF) < 0)
			continue;
		for (unsigned s = 0; s < UB_SLOTS; s++) {
			struct ub u;
			struct ub *g;

			int bad = ub_decode(ring + (size_t)s * UB_SIZE, L->guid, &u);

			if (bad == -ERANGE && odd->lun == L->n) {
				*odd = u;
				odd->lun = i;
			}
			if (bad < 0)
				continue;
			u.lun = i;
			if (u.seq > newest[i])
				newest[i] = u.seq;
			g = array_grow(v, n, &cap, sizeof(*v), 64);
			if (!g) {
				free(v);
				free(ring);
				return -ENOMEM;
			}
			v = g;
			v[n++] = u;
		}
	}
	free(ring);
	/* newest first: a few hundred entries at most, insertion sort */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && v[j].seq > v[j - 1].seq; j--) {
			struct ub tmp = v[j];
			v[j] = v[j - 1];
			v[j - 1] = tmp;
		}
	*out = v;
	*nout = n;
	return 0;
}

/* The header of the sound record @m names, in @buf, into @out (all but buf). */
static int rec_head(const uint8_t *buf, const struct mptr *m, uint64_t guid, struct rec *out)
{
	const uint8_t *r = buf + 8;
	uint32_t olen;

	if (get_u32(&r) != FORMAT_VERSION)
		return STOR_ECORRUPT;
	out->kind = get_u32(&r);
	if (get_u64(&r) != guid || (out->kind != MLOG_DELTA && out->kind != MLOG_FULL))
		return STOR_ECORRUPT;
	out->txg = get_u64(&r);
	out->seq = get_u64(&r);
	if (mptr_get(&r, &out->prev) < 0)
		return STOR_ECORRUPT;
	olen = get_u32(&r);
	if (olen != m->len - MLOG_HEAD_LEN)
		return STOR_ECORRUPT;
	out->ops = r;
	out->olen = olen;
	return 0;
}

/* Do the @m->len bytes of @buf hold the record @m names? */
static int copy_sound(const uint8_t *buf, const struct mptr *m)
{
	const uint8_t *r = buf;

	return XXH64(buf, m->len, 0) == m->cksum && get_u64(&r) == MLOG_MAGIC;
}

/* Copy @c of the record @m into @buf (nsect sectors) from the first side of
 * its vdev that holds it sound: the copy's own LUN, then the others whose
 * label puts them in its vdev. @return 0, or -EIO when no side does */
static int read_copy(struct metalog_luns *L, const struct mptr *m, unsigned c, uint8_t *buf)
{
	unsigned vdev = m->lun[c];

	for (unsigned k = 0; k <= L->n; k++) {
		/* k == 0: the LUN the pointer names; then every other side */
		unsigned i = k == 0 ? vdev : k - 1;
		struct lun_io io = { i < L->n ? L->lun[i] : NULL, m->sector[c] * STOR_SECTOR, buf,
				     (size_t)m->nsect * STOR_SECTOR, 0, 0, 0 };

		if (!io.lun || (k && (i == vdev || L->vdev[i] != vdev)))
			continue;
		if (lun_read_batch(&io, 1) == 0 && copy_sound(buf, m))
			return 0;
	}
	return -EIO;
}

/* Read the record @m names from any sound copy; r->bad gets a bit for
 * every copy that does not verify (unreadable, or another checksum). */
static int read_record(struct metalog_luns *L, const struct mptr *m, uint64_t guid, struct rec *out)
{
	size_t sz = (size_t)m->nsect * STOR_SECTOR;
	uint8_t *buf = NULL, *other = NULL;
	int good = -1;

	out->bad = 0;
	if (posix_memalign((void **)&buf, STOR_SECTOR, sz) ||
	    posix_memalign((void **)&other, STOR_SECTOR, sz)) {
		free(buf);
		return -ENOMEM;
	}
	/* every copy, so the import knows each damaged one and repairs it */
	for (unsigned c = 0; c < m->ncopies; c++) {
		uint8_t *into = good < 0 ? buf : other;

		if (read_copy(L, m, c, into) < 0) {
			out->bad |= 1u << c;
			continue;
		}
		if (good < 0)
			good = (int)c;
	}
	free(other);
	if (good < 0) {
		free(buf);
		return STOR_ECORRUPT;
	}
	out->good = (unsigned)good;
	if (rec_head(buf, m, guid, out) < 0) {
		free(buf);
		return STOR_ECORRUPT;
	}
	out->buf = buf;
	return 0;
}

static void recs_free(struct rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].buf);
	free(v);
}

/* The key file a log gives, from the records an import does not replay. */
struct walk_keys {
	uint8_t *buf; /* keys_secure_alloc'ed */
	size_t len;
	int found;
};

static void walk_keys_free(struct walk_keys *k)
{
	if (k->buf)
		keys_secure_free(k->buf, k->len);
	*k = (struct walk_keys){ 0 };
}

/*
 * Record @r, which LMDB has already (its txg is not past have_txg), leaves
 * only its key file behind, if no newer record gave one: its ops are
 * parsed as a replay parses them, and its body can go. So an import holds
 * the records it replays, not the whole log back to the checkpoint (a
 * pool's every pointer). @return 0, -ENOMEM, STOR_ECORRUPT
 */
static int keep_keys(const struct rec *r, struct walk_keys *k)
{
	const uint8_t *p = r->ops, *end = r->ops + r->olen;
	struct meta_op op, last = { 0 };
	int ret, have = 0;

	while ((ret = meta_redo_next(&p, end, &op)) == 1) {
		if (op.table == MLOG_TABLE_KEYS) {
			last = op;
			have = 1;
		} else if (op.table >= META_NTABLES) {
			return STOR_ECORRUPT;
		}
	}
	if (ret < 0 || k->found || !have)
		return ret;
	k->found = 1;
	if (!last.vlen)
		return 0;
	if (!(k->buf = keys_secure_alloc(last.vlen)))
		return -ENOMEM;
	memcpy(k->buf, last.val, last.vlen);
	k->len = last.vlen;
	return 0;
}

/* From @head back to its checkpoint: v[0] newest, v[n-1] the checkpoint.
 * The bodies of the records at or before @have_txg are dropped once read
 * (keep_keys), but for those with a damaged copy to repair from them. */
static int walk(struct metalog_luns *L, const struct mptr *head, uint64_t have_txg,
		struct walk_keys *keys, struct rec **out, size_t *nout)
{
	struct rec *v = NULL;
	size_t n = 0, cap = 0;
	struct mptr at = *head;
	int ret;

	for (;;) {
		struct rec *g;

		g = array_grow(v, n, &cap, sizeof(*v), 16);
		if (!g) {
			ret = -ENOMEM;
			break;
		}
		v = g;
		ret = read_record(L, &at, L->guid, &v[n]);
		if (ret < 0)
			break;
		v[n].where = at; /* where it is, kept for the extents */
		n++;
		if (n > 1 && (v[n - 1].seq >= v[n - 2].seq || v[n - 1].txg > v[n - 2].txg)) {
			ret = STOR_ECORRUPT; /* a loop, or not ours */
			break;
		}
		if (v[n - 1].txg <= have_txg) {
			ret = keep_keys(&v[n - 1], keys);
			if (ret < 0)
				break;
			if (!v[n - 1].bad) {
				free(v[n - 1].buf);
				v[n - 1].buf = NULL;
				v[n - 1].ops = NULL;
			}
		}
		if (v[n - 1].kind == MLOG_FULL) {
			*out = v;
			*nout = n;
			return 0;
		}
		if (v[n - 1].prev.ncopies == 0) {
			ret = STOR_ECORRUPT;
			break;
		}
		at = v[n - 1].prev;
	}
	recs_free(v, n);
	walk_keys_free(keys);
	return ret;
}

/* Apply the ops of @r to @t (only its key file with @keys_only); with @pr,
 * tell @pl's progress hook every MiB of a large record as well. */
static int apply(struct stor_pool *pl, struct meta_txn *t, const struct rec *r, int keys_only,
		 struct stor_progress *pr)
{
	struct metalog *ml = pl->mlog;
	const uint8_t *p = r->ops, *end = r->ops + r->olen, *told = r->ops;
	uint64_t base = pr ? pr->bytes : 0;
	struct meta_op op;
	int ret;

	while ((ret = meta_redo_next(&p, end, &op)) == 1) {
		if (pr && p - told >= (1 << 20)) {
			told = p;
			pr->bytes = base + (uint64_t)(p - r->ops);
			pl->opts.progress(pr, pl->opts.progress_arg);
		}
		if (op.table == MLOG_TABLE_KEYS) {
			ret = set_keys(ml, op.val, op.vlen);
		} else if (op.table >= META_NTABLES) {
			ret = STOR_ECORRUPT;
		} else if (keys_only) {
			ret = 0;
		} else if (op.kind == META_OP_PUT) {
			ret = meta_put(t, op.table, op.key, op.klen, op.val, op.vlen);
		} else {
			ret = meta_del(t, op.table, op.key, op.klen);
			ret = ret == -ENOENT ? 0 : ret;
		}
		if (ret < 0)
			return ret;
	}
	return ret;
}

/* Bring @m up to the log @v (v[0] newest) from txg @have_txg, telling
 * the pool's progress hook before the first record, after each, and every
 * MiB within one (a checkpoint of a large pool is one record). */
static int replay(struct stor_pool *p, struct meta *m, struct rec *v, size_t n, uint64_t have_txg,
		  const struct walk_keys *keys)
{
	struct meta_txn *t = NULL;
	int full = v[n - 1].txg > have_txg, ret;
	struct stor_progress pr = { .rebuild = full };

	for (size_t i = 0; i < n; i++) {
		if (full || v[i].txg > have_txg) {
			pr.records_total++;
			pr.bytes_total += v[i].olen;
		}
	}
	/* room for what is replayed only: the log back to its checkpoint is
	 * most of the pool's metadata, and posix_fallocate makes it disk */
	ret = m ? meta_reserve(m, pr.bytes_total * 2) : 0;
	if (ret == 0 && m)
		ret = meta_txn_begin(m, &t);
	if (ret < 0)
		return ret;
	if (t)
		meta_txn_nolog(t); /* these ops are on the LUNs already */
	for (unsigned tab = 0; full && t && tab < META_NTABLES && ret == 0; tab++)
		ret = meta_clear(t, tab);
	if (p->opts.progress && t && pr.records_total)
		p->opts.progress(&pr, p->opts.progress_arg);
	/* the key file of the records LMDB has, then the newer ones' own */
	if (ret == 0 && keys->found && keys->len)
		ret = set_keys(p->mlog, keys->buf, keys->len);
	for (size_t i = n; i-- > 0 && ret == 0;) {
		int skip = !t || (full ? 0 : v[i].txg <= have_txg);
		struct stor_progress *tell = !skip && p->opts.progress ? &pr : NULL;
		uint64_t before = pr.bytes;

		if (v[i].txg <= have_txg && !full)
			continue; /* parsed by walk, its key file in @keys */
		ret = apply(p, t, &v[i], skip, tell);
		if (ret == 0 && tell) {
			pr.records++;
			pr.bytes = before + v[i].olen;
			p->opts.progress(&pr, p->opts.progress_arg);
		}
	}
	if (!t)
		return ret;
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

/* How many LUNs hold the uberblock ubs[i] (the same seq and record). */
static unsigned ub_holders(const struct ub *ubs, size_t n, size_t i)
{
	unsigned k = 0;

	for (size_t j = 0; j < n; j++)
		k += ubs[j].seq == ubs[i].seq && ubs[j].head.cksum == ubs[i].head.cksum;
	return k;
}

static int same_ub(const struct ub *a, const struct ub *b)
{
	return a->seq == b->seq && a->head.cksum == b->head.cksum;
}

/* Keep what import found damaged in the log @v, for metalog_repair(). */
static int note_fixes(struct metalog *ml, const struct rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t sz = (size_t)v[i].where.nsect * STOR_SECTOR;

		for (unsigned c = 0; c < v[i].where.ncopies; c++) {
			struct mfix f = { v[i].where.lun[c], (uint16_t)v[i].where.lun[v[i].good],
					  v[i].where.nsect, v[i].where.sector[c], v[i].txg, NULL };
			struct mfix *g;

			if (!(v[i].bad & (1u << c)))
				continue;
			g = array_grow(ml->fix, ml->nfix, &ml->capfix, sizeof(*g), 8);
			if (!g || posix_memalign((void **)&f.buf, STOR_SECTOR, sz)) {
				ml->force_full = 1; /* not repaired in place: a checkpoint */
				return -ENOMEM;
			}
			ml->fix = g;
			memcpy(f.buf, v[i].buf, sz);
			ml->fix[ml->nfix++] = f;
		}
	}
	return 0;
}

int metalog_import(struct stor_pool *p, struct metalog_luns *L, struct meta *m, uint64_t have_txg,
		   uint64_t *log_txg)
{
	struct metalog *ml = p->mlog;
	uint64_t *newest = calloc(L->n + 1, sizeof(*newest));
	struct ub *ubs = NULL, odd = { .lun = L->n };
	struct rec *v = NULL, *fallback = NULL;
	struct walk_keys keys = { 0 }, fkeys = { 0 };
	size_t nubs = 0, n = 0, nfallback = 0, pick, fpick = 0;
	unsigned quorum = L->n / 2 + 1, passed = 0;
	int ret;

	*log_txg = 0;
	if (!newest)
		return -ENOMEM;
	ret = read_ubs(L, &ubs, &nubs, newest, &odd);
	if (ret == 0 && odd.lun < L->n) {
		char what[160];

		snprintf(what, sizeof(what), "an uberblock of txg %llu names a log record of %u "
			 "sectors for %u bytes in %u copies", (unsigned long long)odd.txg,
			 odd.head.nsect, odd.head.len, odd.head.ncopies);
		if (!nubs) {
			pool_set_error("pool %s: lun %u: %s (a record has its length in sectors, "
				       "%u at most): refused unread, and no other uberblock found",
				       p->name, odd.lun, what, MLOG_PART_MAX_SECT);
			ret = STOR_ECORRUPT;
		} else {
			add_note(ml, "lun %u: %s: ignored", odd.lun, what);
		}
	}
	if (ret < 0 || !nubs)
		goto out;
	/* the rule of the head comment: the newest uberblock that a majority
	 * holds, or that fewer hold and nothing of its newest record is in
	 * doubt, if its log verifies; failing that, the newest that verifies */
	ret = STOR_ECORRUPT;
	for (pick = 0; pick < nubs; pick++) {
		unsigned holders;

		if (pick && same_ub(&ubs[pick], &ubs[pick - 1]))
			continue; /* the same uberblock from another LUN: judged already */
		holders = ub_holders(ubs, nubs, pick);
		walk_keys_free(&keys);
		ret = walk(L, &ubs[pick].head, have_txg, &keys, &v, &n);
		if (ret == STOR_ECORRUPT) {
			add_note(ml, "uberblock txg %llu (on %u of %u LUNs): its log does not "
				 "verify, an older one used",
				 (unsigned long long)ubs[pick].txg, holders, L->n);
			continue;
		}
		if (ret < 0 || holders >= quorum || v[0].bad == 0)
			break;
		/* the first in words, the rest counted: a note names each
		 * one passed over only until its buffer is full */
		if (!passed++)
			add_note(ml, "uberblock txg %llu is on %u of %u LUNs and a copy of its "
				 "record on lun %u does not verify: an older txg that more LUNs "
				 "hold is preferred",
				 (unsigned long long)ubs[pick].txg, holders, L->n,
				 v[0].where.lun[__builtin_ctz(v[0].bad)]);
		if (!fallback) {
			fallback = v;
			nfallback = n;
			fpick = pick;
			fkeys = keys;
			keys = (struct walk_keys){ 0 };
		} else {
			recs_free(v, n);
		}
		v = NULL;
		n = 0;
		ret = STOR_ECORRUPT;
	}
	if (passed > 1)
		add_note(ml, "%u older uberblocks alike", passed - 1);
	if (ret == STOR_ECORRUPT && fallback) {
		add_note(ml, "no older txg verifies: txg %llu used",
			 (unsigned long long)ubs[fpick].txg);
		v = fallback;
		n = nfallback;
		pick = fpick;
		walk_keys_free(&keys);
		keys = fkeys;
		fkeys = (struct walk_keys){ 0 };
		fallback = NULL;
		nfallback = 0;
		ret = 0;
	}
	if (ret < 0)
		goto out;
	/* what is damaged is repaired in place once the LUNs are writable */
	ml->ub_fix_n = 0;
	free(ml->ub_fix);
	ml->ub_fix = calloc(L->n + 1, sizeof(*ml->ub_fix));
	for (unsigned i = 0; i < L->n; i++) {
		int has = 0;

		for (size_t j = 0; j < nubs && !has; j++)
			has = ubs[j].lun == i && same_ub(&ubs[j], &ubs[pick]);
		if (!L->lun[i] || has)
			continue;
		if (ml->ub_fix)
			ml->ub_fix[ml->ub_fix_n++] = i;
		else
			ml->force_full = 1; /* a commit at import writes every LUN's */
	}
	ml->ub_txg = ubs[pick].txg;
	if (note_fixes(ml, v, n) < 0)
		add_note(ml, "out of memory keeping damaged log copies to repair: a checkpoint "
			 "replaces them");
	ret = replay(p, m, v, n, have_txg, &keys);
	if (ret < 0)
		goto out;
	/* the log as the next commit continues it */
	ml->ring_ready = L->n;
	ml->seq = ubs[pick].seq;
	ml->head = ubs[pick].head;
	ml->have_head = 1;
	ml->nlive = 0;
	ml->log_bytes = 0;
	ml->ckpt_bytes = 0;
	ml->nrecs = 0;
	for (size_t i = 0; i < n && ret == 0; i++) {
		uint64_t bytes = (uint64_t)v[i].where.nsect * STOR_SECTOR;

		for (unsigned c = 0; c < v[i].where.ncopies && ret == 0; c++)
			ret = ext_push(&ml->live, &ml->nlive, &ml->caplive,
				       (struct mext){ v[i].where.lun[c], v[i].where.nsect,
						      v[i].where.sector[c] });
		/* the checkpoint's parts share its txg; a txg after it is a record */
		if (v[i].txg == v[n - 1].txg) {
			ml->ckpt_bytes += bytes;
		} else {
			ml->log_bytes += bytes;
			ml->nrecs += i == 0 || v[i].txg != v[i - 1].txg;
		}
	}
	pthread_mutex_lock(&ml->lock);
	ml->keys_logged = ml->keys_ver;
	pthread_mutex_unlock(&ml->lock);
	*log_txg = v[0].txg;
	ret = ret < 0 ? ret : 1;
out:
	recs_free(v, n);
	recs_free(fallback, nfallback);
	walk_keys_free(&keys);
	walk_keys_free(&fkeys);
	free(ubs);
	free(newest);
	return ret;
}

int metalog_mark(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;

	for (size_t i = 0; i < ml->nlive; i++) {
		int ret = alloc_mark_meta(p->alloc, ml->live[i].lun, ml->live[i].sector, ml->live[i].n);

		if (ret < 0) {
			pool_set_error("pool %s: metadata log extent on lun %u sector %llu overlaps "
				       "or is out of range",
				       p->name, ml->live[i].lun,
				       (unsigned long long)ml->live[i].sector);
			return ret;
		}
	}
	return 0;
}

int metalog_repair(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;
	unsigned nluns = atomic_load(&p->nluns);
	uint8_t *ub = NULL;
	unsigned failed = 0;

	for (size_t i = 0; i < ml->nfix; i++) {
		struct mfix *f = &ml->fix[i];
		int ret = f->lun < nluns && p->luns[f->lun].vdev == f->lun ? 0 : -ENODEV;

		/* a LUN cut short lost it with its end: writing it there would
		 * grow the file past its end label again */
		if (ret == 0 && (f->sector + f->nsect) * STOR_SECTOR >
					lun_data_size(p->luns[f->lun].lun)) {
			failed++;
			add_note(ml, "metadata log copy on lun %u sector %llu (txg %llu) lay past "
				 "the end of the truncated LUN; a checkpoint replaces it",
				 f->lun, (unsigned long long)f->sector, (unsigned long long)f->txg);
			free(f->buf);
			continue;
		}
		/* the copy goes to every side in service of its vdev */
		if (ret == 0) {
			struct lun_io ios[MLOG_COPIES];
			uint16_t vdev = f->lun;

			ios[0] = (struct lun_io){ NULL, f->sector * STOR_SECTOR, f->buf,
						  (size_t)f->nsect * STOR_SECTOR, 0, 0, 0 };
			mirror_write_copies(p, ios, &vdev, 1);
			ret = ios[0].result ? ios[0].result : mirror_flush(p, f->lun);
		}
		if (ret < 0) {
			failed++;
			add_note(ml, "metadata log copy on lun %u sector %llu (txg %llu) damaged, "
				 "read from lun %u; not repaired (%s), a checkpoint replaces it",
				 f->lun, (unsigned long long)f->sector, (unsigned long long)f->txg,
				 f->from, stor_strerror(ret));
		} else {
			add_note(ml, "metadata log copy on lun %u sector %llu (txg %llu) damaged; "
				 "repaired from lun %u",
				 f->lun, (unsigned long long)f->sector, (unsigned long long)f->txg,
				 f->from);
		}
		free(f->buf);
	}
	ml->nfix = 0;
	if (ml->ub_fix_n && posix_memalign((void **)&ub, STOR_SECTOR, UB_SIZE))
		ub = NULL;
	for (unsigned i = 0; i < ml->ub_fix_n; i++) {
		unsigned lun = ml->ub_fix[i];
		struct lun *l = lun < nluns ? p->luns[lun].lun : NULL;
		int ret = l && ub ? 0 : -ENOMEM;

		/* a side out of service keeps its old ring: it lacks what the new
		 * uberblock names, and must not look as if it held it */
		if (l && atomic_load(&p->luns[lun].out))
			continue;
		if (ret == 0) {
			ub_encode(ub, p->guid, ml->ub_txg, ml->seq, &ml->head);
			ret = lun_reserved_io(l, 1, ub, UB_SIZE, UB_OFF + (ml->seq % UB_SLOTS) * UB_SIZE);
			if (ret == 0)
				ret = lun_flush(l);
		}
		if (ret < 0) {
			failed++;
			add_note(ml, "lun %u: uberblock of txg %llu missing or damaged; not repaired "
				 "(%s), the next commit writes it",
				 lun, (unsigned long long)ml->ub_txg, stor_strerror(ret));
		} else {
			add_note(ml, "lun %u: uberblock of txg %llu missing or damaged; repaired", lun,
				 (unsigned long long)ml->ub_txg);
		}
	}
	free(ub);
	ml->ub_fix_n = 0;
	if (failed)
		ml->force_full = 1; /* what was not repaired, a checkpoint supersedes */
	return (int)failed;
}

/*
 * One copy of a record on every sound side of its vdev: read, check against
 * the pointer that names it, and the bad ones rewritten from @good (which
 * gets the first sound bytes). @return 1 if a sound copy was found, 0 if
 * not, -ENOMEM
 */
static int scrub_copy(struct stor_pool *p, const struct mptr *m, unsigned c, uint8_t *good,
		      int have, struct metalog_scrub *sc)
{
	size_t sz = (size_t)m->nsect * STOR_SECTOR;
	unsigned sides[STOR_MIRROR_MAX], n = mirror_sound_sides(p, m->lun[c], sides);
	unsigned bad[STOR_MIRROR_MAX], nbad = 0;
	uint8_t *tmp = NULL;

	if (posix_memalign((void **)&tmp, STOR_SECTOR, sz))
		return -ENOMEM;
	for (unsigned s = 0; s < n; s++) {
		struct lun_io io = { p->luns[sides[s]].lun, m->sector[c] * STOR_SECTOR, tmp, sz, 0, 0, 0 };

		sc->examined += sz;
		if (lun_read_batch(&io, 1) || !copy_sound(tmp, m)) {
			bad[nbad++] = sides[s];
		} else if (!have) {
			memcpy(good, tmp, sz);
			have = 1;
		}
	}
	for (unsigned i = 0; have && i < nbad; i++) {
		struct lun_io io = { p->luns[bad[i]].lun, m->sector[c] * STOR_SECTOR, good, sz, 0, 0, 0 };

		if (lun_write_batch(&io, 1) == 0 && lun_flush(io.lun) == 0) {
			sc->repaired += sz;
			atomic_fetch_add(&p->luns[bad[i]].repaired, 1);
			mirror_repair_event(p, bad[i], m->sector[c], sz, "scrub");
		} else {
			mirror_side_failed(p, bad[i], 1);
		}
	}
	free(tmp);
	return have;
}

int metalog_scrub(struct stor_pool *p, struct metalog_scrub *sc)
{
	struct metalog *ml = p->mlog;
	uint64_t last_seq = UINT64_MAX;
	struct mptr at;
	int ret = 0;

	/* the log as it is: no commit adds to it or frees its extents meanwhile */
	pthread_mutex_lock(&p->commit_lock);
	at = ml->head;
	while (ml->have_head && ret == 0 && at.ncopies) {
		uint8_t *good = NULL;
		struct rec r;
		int have = 0;

		if (posix_memalign((void **)&good, STOR_SECTOR, (size_t)at.nsect * STOR_SECTOR)) {
			ret = -ENOMEM;
			break;
		}
		/* every copy, though one sound copy would do to walk on */
		for (unsigned c = 0; c < at.ncopies && ret == 0; c++) {
			int k = scrub_copy(p, &at, c, good, have, sc);

			if (k < 0)
				ret = k;
			else if (k == 0)
				sc->errors++; /* that copy is lost on every side */
			have |= k > 0;
		}
		/* no copy left: the chain ends here (a checkpoint replaces it) */
		if (ret || !have || rec_head(good, &at, p->guid, &r) < 0 || r.seq >= last_seq) {
			if (ret == 0 && !have)
				ml->force_full = 1;
			free(good);
			break;
		}
		last_seq = r.seq;
		at = r.kind == MLOG_FULL ? (struct mptr){ 0 } : r.prev;
		free(good);
	}
	pthread_mutex_unlock(&p->commit_lock);
	return ret;
}
