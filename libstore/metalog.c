/* SPDX-License-Identifier: MIT */
/*
 * The pool's metadata on its LUNs (format.h says the layout and why): each
 * txg commit writes one log record - the redo ops LMDB captured (meta.h)
 * and the key file when it changed - in ditto copies on different LUNs,
 * then an uberblock naming it on every LUN, before LMDB commits. Now and
 * then the record is a checkpoint of every table instead, and the log
 * before it is freed once that commit is done.
 *
 * Invariants: the uberblock is written only after every copy it names is
 * durable, and LMDB commits only after the uberblock is; so an import finds
 * on the LUNs every txg LMDB has, and at most the one txg more that a crash
 * interrupted, which it replays. The log's extents are the allocator's like
 * any others, known at import from the walk (metalog_mark).
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

#include "alloc.h"
#include "array.h"
#include "lun.h"
#include "meta.h"
#include "metalog.h"
#include "store_impl.h"

struct mext {
	uint16_t lun;
	uint32_t n;
	uint64_t sector;
};

struct mptr {
	uint8_t ncopies;
	uint16_t lun[MLOG_COPIES];
	uint64_t sector[MLOG_COPIES];
	uint32_t nsect, len;
	uint64_t cksum;
};

struct metalog {
	pthread_mutex_t lock; /* keys, note */
	uint8_t *keys;
	size_t keys_len;
	uint64_t keys_ver, keys_logged; /* bumped per metalog_keys; the one on the LUNs */
	/* the log: touched by the one commit at a time, and by the import before */
	struct mptr head;
	int have_head, force_full;
	uint64_t seq;
	struct mext *live; /* copies of every record from the checkpoint on */
	size_t nlive, caplive;
	struct mext *dead; /* of a log a checkpoint replaced: freed after its commit */
	size_t ndead, capdead;
	uint64_t log_bytes, ckpt_bytes;
	unsigned nrecs;
	char note[512];
	int lag_noted;
	unsigned ring_ready; /* LUNs [0, ring_ready) have every ring slot allocated */
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
	dirty = ml->force_full || ml->keys_ver != ml->keys_logged;
	pthread_mutex_unlock(&ml->lock);
	return dirty;
}

void metalog_force_checkpoint(struct stor_pool *p)
{
	p->mlog->force_full = 1;
}

const char *metalog_note(struct stor_pool *p)
{
	return p->mlog->note;
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
	if (m->ncopies > MLOG_COPIES || (m->ncopies && (m->len < MLOG_HEAD_LEN ||
							 m->len > (uint64_t)m->nsect * STOR_SECTOR)))
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

/* Room for @nsect sectors on up to MLOG_COPIES LUNs, different ones while
 * there are enough, starting from a LUN that turns with @seq. */
static int place_copies(struct stor_pool *p, uint64_t seq, uint32_t nsect, struct mptr *m)
{
	unsigned nluns = atomic_load(&p->nluns);
	unsigned want = nluns >= 3 ? 3 : 2;

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

/* Write the uberblock on every LUN, each durable. @return how many made it. */
static unsigned write_ubs(struct stor_pool *p, uint64_t txg, uint64_t seq, const struct mptr *head)
{
	unsigned nluns = atomic_load(&p->nluns), ok = 0;
	uint8_t *ub = NULL;

	if (posix_memalign((void **)&ub, STOR_SECTOR, UB_SIZE))
		return 0;
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
	for (unsigned i = 0; i < nluns; i++) {
		struct lun *l = p->luns[i].lun;

		if (lun_reserved_io(l, 1, ub, UB_SIZE, UB_OFF + (seq % UB_SLOTS) * UB_SIZE) == 0 &&
		    lun_flush(l) == 0)
			ok++;
	}
	free(ub);
	return ok;
}

/*
 * No room for the record (a pool or a file system that data filled): LMDB
 * commits alone, ahead of the LUNs, rather than every write being refused,
 * and each commit tries a checkpoint until one gets through. A state
 * directory lost meanwhile loses the txgs since the last record.
 */
static int lag(struct metalog *ml, const char *why)
{
	ml->force_full = 1;
	if (!ml->lag_noted)
		add_note(ml, "%s: the LUNs lag LMDB until a checkpoint is written", why);
	ml->lag_noted = 1;
	return 0;
}

int metalog_commit(struct stor_pool *p, struct meta_txn *t, uint64_t txg)
{
	struct metalog *ml = p->mlog;
	struct meta_redo body = { 0 };
	struct lun_io io[MLOG_COPIES];
	uint64_t seq = ml->seq + 1, keys_ver = 0, limit;
	struct mptr m = { 0 };
	uint8_t *rec = NULL, *w;
	size_t len;
	unsigned written = 0, nluns = atomic_load(&p->nluns);
	int full, ret;

	/* the log may grow to the checkpoint's size (so checkpoints cost no more
	 * than the log), at least MLOG_MIN_CKPT, but on a small pool no more
	 * than 1/128 of its space */
	limit = MLOG_MIN_CKPT;
	{
		uint64_t space = 0, used, total;

		for (unsigned i = 0; i < nluns; i++) {
			alloc_usage(p->alloc, i, &used, &total);
			space += total * STOR_SECTOR;
		}
		if (limit > space / 128)
			limit = space / 128;
	}
	if (limit < ml->ckpt_bytes)
		limit = ml->ckpt_bytes;
	full = !ml->have_head || ml->force_full || ml->nrecs >= MLOG_MAX_RECORDS ||
	       ml->log_bytes >= limit;
	ret = record_body(ml, t, full, &body, &keys_ver);
	if (ret < 0)
		goto out;
	len = MLOG_HEAD_LEN + body.len;
	if (len > UINT32_MAX) {
		ret = -E2BIG;
		goto out;
	}
	m.nsect = (uint32_t)((len + STOR_SECTOR - 1) / STOR_SECTOR);
	m.len = (uint32_t)len;
	if (posix_memalign((void **)&rec, STOR_SECTOR, (size_t)m.nsect * STOR_SECTOR)) {
		rec = NULL;
		ret = -ENOMEM;
		goto out;
	}
	memset(rec + len, 0, (size_t)m.nsect * STOR_SECTOR - len);
	w = rec;
	put_u64(&w, MLOG_MAGIC);
	put_u32(&w, FORMAT_VERSION);
	put_u32(&w, full ? MLOG_FULL : MLOG_DELTA);
	put_u64(&w, p->guid);
	put_u64(&w, txg);
	put_u64(&w, seq);
	{
		struct mptr none = { 0 };
		mptr_put(&w, full ? &none : &ml->head);
	}
	put_u32(&w, (uint32_t)body.len);
	if (body.len)
		put_bytes(&w, body.buf, body.len);
	m.cksum = XXH64(rec, len, 0);

	ret = place_copies(p, seq, m.nsect, &m);
	if (ret == STOR_ENOSPC) {
		ret = lag(ml, "no room for the metadata log (pool full)");
		goto out;
	}
	if (ret < 0)
		goto out;
	for (unsigned c = 0; c < m.ncopies; c++)
		io[c] = (struct lun_io){ p->luns[m.lun[c]].lun, m.sector[c] * STOR_SECTOR, rec,
					 (size_t)m.nsect * STOR_SECTOR, 0 };
	mirror_write_copies(p, io, m.lun, m.ncopies);
	/* a copy that did not reach its LUN is left out of the pointer: fewer
	 * copies beat no commit; the extent stays taken until the next import */
	for (unsigned c = 0; c < m.ncopies; c++) {
		if (io[c].result == 0 && mirror_flush(p, m.lun[c]) == 0) {
			m.lun[written] = m.lun[c];
			m.sector[written] = m.sector[c];
			written++;
		}
	}
	if (!written) {
		int full_fs = 1;

		for (unsigned c = 0; c < m.ncopies; c++)
			full_fs &= io[c].result == -ENOSPC || io[c].result == -EDQUOT;
		unplace(p, &m);
		m.ncopies = 0;
		ret = full_fs ? lag(ml, "metadata log not written (file system full)") : -EIO;
		goto out;
	}
	m.ncopies = (uint8_t)written;
	if (write_ubs(p, txg, seq, &m) == 0) {
		ret = -EIO; /* the record's extents stay taken: an uberblock may name it */
		goto out;
	}
	/* the LUNs name this record now, whatever LMDB does next */
	ml->seq = seq;
	ml->head = m;
	ml->have_head = 1;
	ml->lag_noted = 0;
	if (full) {
		pthread_mutex_lock(&ml->lock);
		for (size_t i = 0; i < ml->nlive && ret == 0; i++)
			ret = ext_push(&ml->dead, &ml->ndead, &ml->capdead, ml->live[i]);
		ml->nlive = 0;
		pthread_mutex_unlock(&ml->lock);
		ml->log_bytes = 0;
		ml->nrecs = 0;
		ml->ckpt_bytes = len;
		ml->force_full = 0;
	} else {
		ml->log_bytes += (uint64_t)m.nsect * STOR_SECTOR;
		ml->nrecs++;
	}
	pthread_mutex_lock(&ml->lock);
	for (unsigned c = 0; c < m.ncopies && ret == 0; c++)
		ret = ext_push(&ml->live, &ml->nlive, &ml->caplive,
			       (struct mext){ m.lun[c], m.nsect, m.sector[c] });
	ml->keys_logged = keys_ver;
	pthread_mutex_unlock(&ml->lock);
	atomic_fetch_add(&ml->bytes, (uint64_t)m.nsect * STOR_SECTOR * m.ncopies +
					     (uint64_t)UB_SIZE * nluns);
	atomic_fetch_add(&ml->records, 1);
	/* an allocation failure above only leaks extents until the next import */
	ret = 0;
	m.ncopies = 0;
out:
	if (ret < 0 && m.ncopies && !written)
		unplace(p, &m);
	free(rec);
	meta_redo_free(&body);
	return ret;
}

void metalog_committed(struct stor_pool *p)
{
	struct metalog *ml = p->mlog;

	pthread_mutex_lock(&ml->lock);
	for (size_t i = 0; i < ml->ndead; i++)
		alloc_put_meta(p->alloc, ml->dead[i].lun, ml->dead[i].sector, ml->dead[i].n);
	ml->ndead = 0;
	pthread_mutex_unlock(&ml->lock);
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
	uint64_t txg;
	uint32_t kind;
	const uint8_t *ops;
	size_t olen;
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
	return mptr_get(&r, &u->head) < 0 || u->head.ncopies == 0 ? STOR_ECORRUPT : 0;
}

/* Every sound uberblock of every LUN, newest first. */
static int read_ubs(struct metalog_luns *L, struct ub **out, size_t *nout, uint64_t *newest)
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

			if (ub_decode(ring + (size_t)s * UB_SIZE, L->guid, &u) < 0)
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

/* Read the record @m names from any sound copy, noting each bad one. */
static int read_record(struct metalog *ml, struct metalog_luns *L, const struct mptr *m,
		       uint64_t guid, struct rec *out)
{
	size_t sz = (size_t)m->nsect * STOR_SECTOR;
	uint8_t *buf = NULL;
	int good = -1;

	if (posix_memalign((void **)&buf, STOR_SECTOR, sz))
		return -ENOMEM;
	for (unsigned c = 0; c < m->ncopies && good < 0; c++) {
		struct lun_io io = { L->lun[m->lun[c]], m->sector[c] * STOR_SECTOR, buf, sz, 0 };
		const uint8_t *r = buf;

		if (m->lun[c] >= L->n || !io.lun || lun_read_batch(&io, 1) ||
		    XXH64(buf, m->len, 0) != m->cksum || get_u64(&r) != MLOG_MAGIC)
			continue;
		good = (int)c;
	}
	if (good < 0) {
		free(buf);
		return STOR_ECORRUPT;
	}
	/* the other copies too, so status names every damaged one; a checkpoint
	 * at the first commit replaces them all */
	for (unsigned c = 0; c < m->ncopies; c++) {
		uint8_t *other = NULL;
		struct lun_io io = { NULL, m->sector[c] * STOR_SECTOR, NULL, sz, 0 };
		int sound = c == (unsigned)good;

		if (!sound && m->lun[c] < L->n && (io.lun = L->lun[m->lun[c]]) &&
		    !posix_memalign((void **)&other, STOR_SECTOR, sz)) {
			io.buf = other;
			sound = !lun_read_batch(&io, 1) && XXH64(other, m->len, 0) == m->cksum;
		}
		free(other);
		if (!sound) {
			add_note(ml, "metadata log copy on lun %u sector %llu damaged, read from "
				 "lun %u; rewritten by a checkpoint",
				 m->lun[c], (unsigned long long)m->sector[c], m->lun[good]);
			ml->force_full = 1;
		}
	}
	{
		const uint8_t *r = buf + 8;
		uint32_t olen;

		if (get_u32(&r) != FORMAT_VERSION)
			goto bad;
		out->kind = get_u32(&r);
		if (get_u64(&r) != guid || (out->kind != MLOG_DELTA && out->kind != MLOG_FULL))
			goto bad;
		out->txg = get_u64(&r);
		get_u64(&r); /* seq */
		if (mptr_get(&r, &out->prev) < 0)
			goto bad;
		olen = get_u32(&r);
		if (olen != m->len - MLOG_HEAD_LEN)
			goto bad;
		out->ops = r;
		out->olen = olen;
		out->buf = buf;
	}
	return 0;
bad:
	free(buf);
	return STOR_ECORRUPT;
}

static void recs_free(struct rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].buf);
	free(v);
}

/* From @head back to its checkpoint: v[0] newest, v[n-1] the checkpoint. */
static int walk(struct metalog *ml, struct metalog_luns *L, const struct mptr *head,
		struct rec **out, size_t *nout)
{
	struct rec *v = NULL;
	size_t n = 0, cap = 0;
	struct mptr at = *head;
	int ret;

	for (;;) {
		struct rec *g;

		if (n > 2 * MLOG_MAX_RECORDS + 2) {
			ret = STOR_ECORRUPT; /* a loop, or not ours */
			break;
		}
		g = array_grow(v, n, &cap, sizeof(*v), 16);
		if (!g) {
			ret = -ENOMEM;
			break;
		}
		v = g;
		ret = read_record(ml, L, &at, L->guid, &v[n]);
		if (ret < 0)
			break;
		v[n].where = at; /* where it is, kept for the extents */
		n++;
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
	return ret;
}

static int apply(struct metalog *ml, struct meta_txn *t, const struct rec *r, int keys_only)
{
	const uint8_t *p = r->ops, *end = r->ops + r->olen;
	struct meta_op op;
	int ret;

	while ((ret = meta_redo_next(&p, end, &op)) == 1) {
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

/* Bring @m up to the log @v (v[0] newest) from txg @have_txg. */
static int replay(struct metalog *ml, struct meta *m, struct rec *v, size_t n, uint64_t have_txg)
{
	struct meta_txn *t = NULL;
	size_t total = 0;
	int full = v[n - 1].txg > have_txg, ret;

	for (size_t i = 0; i < n; i++)
		total += v[i].olen;
	ret = m ? meta_reserve(m, total * 2) : 0;
	if (ret == 0 && m)
		ret = meta_txn_begin(m, &t);
	if (ret < 0)
		return ret;
	if (t)
		meta_txn_nolog(t); /* these ops are on the LUNs already */
	for (unsigned tab = 0; full && t && tab < META_NTABLES && ret == 0; tab++)
		ret = meta_clear(t, tab);
	for (size_t i = n; i-- > 0 && ret == 0;) {
		int skip = !t || (full ? 0 : v[i].txg <= have_txg);
		ret = apply(ml, t, &v[i], skip);
	}
	if (!t)
		return ret;
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

int metalog_import(struct stor_pool *p, struct metalog_luns *L, struct meta *m, uint64_t have_txg,
		   uint64_t *log_txg)
{
	struct metalog *ml = p->mlog;
	uint64_t *newest = calloc(L->n + 1, sizeof(*newest));
	struct ub *ubs = NULL;
	struct rec *v = NULL;
	size_t nubs = 0, n = 0, pick;
	int ret;

	*log_txg = 0;
	if (!newest)
		return -ENOMEM;
	ret = read_ubs(L, &ubs, &nubs, newest);
	if (ret < 0 || !nubs)
		goto out;
	ret = STOR_ECORRUPT;
	for (pick = 0; pick < nubs; pick++) {
		if (pick && ubs[pick].seq == ubs[pick - 1].seq &&
		    ubs[pick].head.cksum == ubs[pick - 1].head.cksum)
			continue; /* the same uberblock from another LUN: its log failed already */
		ret = walk(ml, L, &ubs[pick].head, &v, &n);
		if (ret != STOR_ECORRUPT)
			break;
		add_note(ml, "uberblock txg %llu (lun %u): its log does not verify, an older one used",
			 (unsigned long long)ubs[pick].txg, ubs[pick].lun);
	}
	if (ret < 0)
		goto out;
	for (unsigned i = 0; i < L->n; i++)
		if (L->lun[i] && newest[i] < ubs[pick].seq) {
			add_note(ml, "lun %u: uberblock of txg %llu missing or damaged; rewritten",
				 i, (unsigned long long)ubs[pick].txg);
			ml->force_full = 1; /* a commit at import writes every LUN's */
		}
	ret = replay(ml, m, v, n, have_txg);
	if (ret < 0)
		goto out;
	/* the log as the next commit continues it */
	ml->ring_ready = L->n;
	ml->seq = ubs[pick].seq;
	ml->head = ubs[pick].head;
	ml->have_head = 1;
	ml->nlive = 0;
	ml->log_bytes = 0;
	ml->nrecs = (unsigned)n - 1;
	for (size_t i = 0; i < n && ret == 0; i++) {
		for (unsigned c = 0; c < v[i].where.ncopies && ret == 0; c++)
			ret = ext_push(&ml->live, &ml->nlive, &ml->caplive,
				       (struct mext){ v[i].where.lun[c], v[i].where.nsect,
						      v[i].where.sector[c] });
		if (v[i].kind == MLOG_FULL)
			ml->ckpt_bytes = v[i].where.len;
		else
			ml->log_bytes += v[i].where.len;
	}
	pthread_mutex_lock(&ml->lock);
	ml->keys_logged = ml->keys_ver;
	pthread_mutex_unlock(&ml->lock);
	*log_txg = v[0].txg;
	ret = ret < 0 ? ret : 1;
out:
	recs_free(v, n);
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
