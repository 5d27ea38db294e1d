/* SPDX-License-Identifier: MIT */
/*
 * LMDB backend of meta.h: one environment per pool in a single file
 * (MDB_NOSUBDIR), one named database per table. LMDB's map is the metadata
 * cache. Read-only transactions are reset and renewed instead of being
 * allocated per lookup; MDB_NOTLS lets any thread use any of them.
 * MDB_* codes become store codes in lmdb_error() and nowhere else.
 *
 * MDB_WRITEMAP: a write transaction changes the mapped file's pages in place
 * (still copy-on-write inside LMDB, msync'ed at commit). Without it LMDB
 * copies every page a commit touches into malloc'ed memory and keeps those
 * pages for reuse until the environment closes: a txg of random writes over
 * 192 datasets touches most leaf pages of the block-pointer tree, and the
 * daemon's private memory stayed at that peak (240 MiB in encryption.sh).
 * The file is sized to the map, sparse, so a page first touched when the
 * file system is full would be a SIGBUS that takes the daemon down: before
 * a write transaction begins, the pages it may touch are allocated
 * (posix_fallocate) up to the last used page plus headroom, and a file
 * system without room makes that transaction fail with STOR_EMETAFULL instead.
 * A map that fills doubles (meta_grow, up to META_MAP_MAX) once every
 * transaction of the process has ended, which LMDB requires; each
 * transaction holds a shared lock for that, from begin (or get) to its end.
 *
 * Redo capture (meta.h): each put and delete of a write transaction is
 * copied into the transaction's redo buffer; at commit the buffer joins the
 * pending log under plock, which is held across mdb_txn_commit so that the
 * pending log holds exactly the committed transactions in commit order (a
 * failed commit takes its ops out before any other writer can take them).
 *
 * The pending log lives in memory, so a crash loses it while LMDB keeps its
 * transactions: every later log record would be a delta on a LUN state
 * that lacks them. A transaction that adds to it therefore also puts the
 * "unlogged" mark in the pool table, and the one that takes it (meta_txn_log)
 * deletes the mark; neither is captured, so the mark never reaches the
 * LUNs. An open that finds it (meta_unlogged) writes a checkpoint.
 *
 * Local tables (META_SPACE) are LMDB's alone: their puts and deletes are
 * never captured. A watcher (meta_watch) of one table is told of each
 * change with the value it replaces (found by the cursor that then puts
 * or deletes, so no lookup more) and puts its
 * own rows at the commit; each write transaction holds wlock from its
 * begin until the watcher was told how it ended, since LMDB lets its
 * writer lock go inside mdb_txn_commit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "store.h"

#define RTXN_CACHE 64

/* Allocated beyond the last used page, besides an eighth of what is used:
 * more than a small transaction touches (a big commit asks for its own). */
#define META_HEADROOM (4u << 20)

/* The map doubles when it fills, up to this. */
#define META_MAP_MAX ((size_t)1 << 40)

struct meta {
	MDB_env *env;
	pthread_rwlock_t resize; /* shared by every transaction, exclusive to grow the map */
	/* held by a write transaction from its begin until its watcher was told
	 * how it ended: LMDB lets its writer lock go inside mdb_txn_commit,
	 * and the next writer's changes must not reach the watcher before that */
	pthread_mutex_t wlock;
	atomic_int map_full;     /* a transaction ran out of map since the last growth */
	size_t map_size;
	_Atomic size_t reserved; /* bytes of the file known to be allocated */
	MDB_dbi dbi[META_ALL_TABLES];
	struct meta_watch watch; /* of watched, when watch.change is set */
	enum meta_table watched;
	pthread_mutex_t rlock;
	struct meta_txn *rfree[RTXN_CACHE];
	unsigned nrfree;
	pthread_mutex_t plock; /* pending */
	struct meta_redo pending;
	_Atomic size_t npending;
};

struct meta_txn {
	struct meta *m;
	MDB_txn *txn;
	int rdonly;
	int nolog, logged;
	struct meta_redo redo;
	MDB_cursor *wcur; /* on the watched table: meta_put and meta_del (watched_row) */
};

static const char *const table_names[META_ALL_TABLES] = { "pool", "ds", "bp", "mac", "space" };

static MDB_val unlogged_key = { 8, (void *)"unlogged" };

static int lmdb_error(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_KEYEXIST:
		return -EEXIST;
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
		return -ENOSPC; /* the map grows (meta_grow); note_full says when it cannot */
	case ENOSPC:
	case EDQUOT:
		return STOR_EMETAFULL; /* the state directory's file system, not the pool */
	case MDB_READERS_FULL:
		return -EAGAIN;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		return STOR_ECORRUPT;
	case MDB_VERSION_MISMATCH:
		return STOR_EFORMAT;
	}
	return rc > 0 ? -rc : -EIO;
}

int meta_open(const char *path, size_t map_size, unsigned flags, struct meta **out)
{
	struct meta *m = NULL;
	MDB_txn *txn = NULL;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->rlock, NULL);
	pthread_mutex_init(&m->plock, NULL);
	pthread_mutex_init(&m->wlock, NULL);
	pthread_rwlock_init(&m->resize, NULL);
	rc = mdb_env_create(&m->env);
	if (rc)
		goto fail;
	mdb_env_set_maxdbs(m->env, META_ALL_TABLES);
	mdb_env_set_maxreaders(m->env, 512);
	m->map_size = map_size ? map_size : (size_t)4 << 30;
	mdb_env_set_mapsize(m->env, m->map_size);
	if (!(flags & META_CREATE)) {
		/* mdb_env_open would create a missing file: refuse instead. */
		if (access(path, F_OK) < 0) {
			rc = errno;
			goto fail;
		}
	}
	rc = mdb_env_open(m->env, path, MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD | MDB_WRITEMAP, 0600);
	if (rc)
		goto fail;
	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		goto fail;
	for (int i = 0; i < META_ALL_TABLES; i++) {
		/* a local table is made in a file that predates it */
		rc = mdb_dbi_open(txn, table_names[i],
				  (flags & META_CREATE) || i >= META_NTABLES ? MDB_CREATE : 0,
				  &m->dbi[i]);
		if (rc)
			goto fail;
	}
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc)
		goto fail;
	/* a new file's name is durable too, or a crash can lose the pool */
	if ((flags & META_CREATE) && statedir_sync(path) < 0) {
		rc = EIO;
		goto fail;
	}
	*out = m;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	if (m->env)
		mdb_env_close(m->env);
	pthread_mutex_destroy(&m->rlock);
	pthread_mutex_destroy(&m->plock);
	pthread_mutex_destroy(&m->wlock);
	pthread_rwlock_destroy(&m->resize);
	free(m);
	return lmdb_error(rc);
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < m->nrfree; i++) {
		mdb_txn_abort(m->rfree[i]->txn);
		free(m->rfree[i]);
	}
	mdb_env_close(m->env);
	meta_redo_free(&m->pending);
	pthread_mutex_destroy(&m->rlock);
	pthread_mutex_destroy(&m->plock);
	pthread_mutex_destroy(&m->wlock);
	pthread_rwlock_destroy(&m->resize);
	free(m);
}

int meta_redo_add(struct meta_redo *r, unsigned table, unsigned kind, const void *key,
		  size_t klen, const void *val, size_t vlen)
{
	size_t need = r->len + META_OP_HEAD + klen + vlen;
	uint8_t *w;

	if (klen > UINT16_MAX || vlen > UINT32_MAX)
		return -EINVAL;
	if (need > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < need)
			cap *= 2;
		w = realloc(r->buf, cap);
		if (!w)
			return -ENOMEM;
		r->buf = w;
		r->cap = cap;
	}
	w = r->buf + r->len;
	put_u8(&w, (uint8_t)table);
	put_u8(&w, (uint8_t)kind);
	put_u16(&w, (uint16_t)klen);
	put_u32(&w, (uint32_t)vlen);
	put_bytes(&w, key, klen);
	if (vlen)
		put_bytes(&w, val, vlen);
	r->len = need;
	return 0;
}

void meta_redo_free(struct meta_redo *r)
{
	free(r->buf);
	*r = (struct meta_redo){ 0 };
}

int meta_redo_next(const uint8_t **p, const uint8_t *end, struct meta_op *op)
{
	const uint8_t *r = *p;

	if (r == end)
		return 0;
	if (end - r < META_OP_HEAD)
		return STOR_ECORRUPT;
	op->table = get_u8(&r);
	op->kind = get_u8(&r);
	op->klen = get_u16(&r);
	op->vlen = get_u32(&r);
	if (op->kind > META_OP_DEL || (size_t)(end - r) < op->klen + op->vlen ||
	    (op->kind == META_OP_DEL && op->vlen))
		return STOR_ECORRUPT;
	op->key = r;
	op->val = r + op->klen;
	*p = r + op->klen + op->vlen;
	return 1;
}

int meta_reserve(struct meta *m, size_t extra)
{
	MDB_envinfo info;
	MDB_stat st;
	size_t need, have = atomic_load(&m->reserved);
	mdb_filehandle_t fd;
	int rc;

	if (mdb_env_info(m->env, &info) || mdb_env_stat(m->env, &st) || mdb_env_get_fd(m->env, &fd))
		return -EIO;
	need = (info.me_last_pgno + 1) * (size_t)st.ms_psize;
	need += need / 8 + META_HEADROOM + extra;
	if (need > m->map_size)
		need = m->map_size;
	if (need <= have)
		return 0;
	rc = posix_fallocate(fd, (off_t)have, (off_t)(need - have));
	if (rc)
		return rc == ENOSPC || rc == EDQUOT ? STOR_EMETAFULL : -rc;
	while (have < need && !atomic_compare_exchange_weak(&m->reserved, &have, need))
		;
	return 0;
}

static int txn_begin(struct meta *m, unsigned flags, struct meta_txn **out)
{
	struct meta_txn *t;
	int rc;

	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->m = m;
	pthread_rwlock_rdlock(&m->resize);
	pthread_mutex_lock(&m->wlock);
	rc = mdb_txn_begin(m->env, NULL, flags, &t->txn);
	if (rc) {
		pthread_mutex_unlock(&m->wlock);
		pthread_rwlock_unlock(&m->resize);
		free(t);
		return lmdb_error(rc);
	}
	/* under LMDB's writer lock: the last used page cannot move meanwhile */
	rc = meta_reserve(m, 0);
	if (rc < 0) {
		mdb_txn_abort(t->txn);
		pthread_mutex_unlock(&m->wlock);
		pthread_rwlock_unlock(&m->resize);
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int meta_txn_begin(struct meta *m, struct meta_txn **out)
{
	return txn_begin(m, 0, out);
}

/*
 * A txg's transaction is durable on the LUNs (metalog.c) before LMDB
 * commits it, so LMDB keeps only its cache's integrity: MDB_NOMETASYNC
 * syncs the data pages but not the meta page that names them, which the
 * next commit's sync (or the kernel) writes. A system crash may undo the
 * last such commit, and the import then replays it from the log; one
 * fdatasync per txg less.
 */
int meta_txn_begin_cached(struct meta *m, struct meta_txn **out)
{
	return txn_begin(m, MDB_NOMETASYNC, out);
}

int meta_sync(struct meta *m)
{
	return lmdb_error(mdb_env_sync(m->env, 1));
}

static int note_full(struct meta *m, int rc)
{
	if (rc == MDB_MAP_FULL) {
		atomic_store(&m->map_full, 1);
		if (m->map_size >= META_MAP_MAX)
			return STOR_EMETAFULL; /* no larger map to grow into */
	}
	return lmdb_error(rc);
}

/* The watcher's end of transaction @t's: committed or not. */
static void watch_end(struct meta *m, int committed)
{
	if (m->watch.end)
		m->watch.end(m->watch.ctx, committed);
}

int meta_txn_commit(struct meta_txn *t)
{
	struct meta *m = t->m;
	size_t before;
	int rc = m->watch.commit ? m->watch.commit(m->watch.ctx, t) : 0;

	if (rc < 0) {
		meta_txn_abort(t);
		return rc;
	}
	pthread_mutex_lock(&m->plock);
	before = m->pending.len;
	if (t->logged) {
		/* taken into a log record on the LUNs: out of the pending log
		 * once LMDB has them too */
	} else if (!t->nolog && t->redo.len) {
		if (m->pending.cap < before + t->redo.len) {
			size_t cap = m->pending.cap ? m->pending.cap : 4096;
			uint8_t *b;

			while (cap < before + t->redo.len)
				cap *= 2;
			b = realloc(m->pending.buf, cap);
			if (b) {
				m->pending.buf = b;
				m->pending.cap = cap;
			} else {
				rc = -ENOMEM;
			}
		}
		if (rc == 0) {
			MDB_val one = { 1, (void *)"1" };

			rc = lmdb_error(mdb_put(t->txn, m->dbi[META_POOL], &unlogged_key, &one, 0));
		}
		if (rc == 0) {
			memcpy(m->pending.buf + before, t->redo.buf, t->redo.len);
			m->pending.len = before + t->redo.len;
		}
	}
	if (rc < 0) {
		mdb_txn_abort(t->txn);
		pthread_mutex_unlock(&m->plock);
		watch_end(m, 0);
		pthread_mutex_unlock(&m->wlock);
		pthread_rwlock_unlock(&m->resize);
		meta_redo_free(&t->redo);
		free(t);
		return rc;
	}
	rc = mdb_txn_commit(t->txn);
	if (rc)
		m->pending.len = before; /* never committed: never logged */
	else if (t->logged)
		m->pending.len = 0;
	atomic_store(&m->npending, m->pending.len);
	pthread_mutex_unlock(&m->plock);
	watch_end(m, rc == 0);
	pthread_mutex_unlock(&m->wlock);
	pthread_rwlock_unlock(&m->resize);
	meta_redo_free(&t->redo);
	free(t);
	return note_full(m, rc);
}

void meta_txn_nolog(struct meta_txn *t)
{
	t->nolog = 1;
}

int meta_txn_log(struct meta_txn *t, uint8_t **buf, size_t *len)
{
	struct meta *m = t->m;
	uint8_t *b;

	/* this transaction holds LMDB's writer lock: no other commit adds to
	 * the pending log before this one commits or aborts */
	pthread_mutex_lock(&m->plock);
	b = malloc(m->pending.len + t->redo.len + 1);
	if (b) {
		int rc = mdb_del(t->txn, m->dbi[META_POOL], &unlogged_key, NULL);

		if (rc && rc != MDB_NOTFOUND) {
			pthread_mutex_unlock(&m->plock);
			free(b);
			*buf = NULL;
			return note_full(m, rc);
		}
		if (m->pending.len)
			memcpy(b, m->pending.buf, m->pending.len);
		if (t->redo.len)
			memcpy(b + m->pending.len, t->redo.buf, t->redo.len);
		*len = m->pending.len + t->redo.len;
		t->logged = 1;
	}
	pthread_mutex_unlock(&m->plock);
	*buf = b;
	return b ? 0 : -ENOMEM;
}

size_t meta_pending(struct meta *m)
{
	return atomic_load(&m->npending);
}

int meta_unlogged(struct meta *m)
{
	struct meta_txn *t;
	const void *v;
	size_t vlen;
	int ret = meta_rtxn_get(m, &t);

	if (ret < 0)
		return ret;
	ret = meta_get(t, META_POOL, unlogged_key.mv_data, unlogged_key.mv_size, &v, &vlen);
	meta_rtxn_put(t);
	return ret == -ENOENT ? 0 : ret < 0 ? ret : 1;
}

int meta_clear(struct meta_txn *t, enum meta_table tab)
{
	struct meta *m = t->m;
	int rc = mdb_drop(t->txn, m->dbi[tab], 0);

	if (rc == 0 && m->watch.cleared && m->watched == tab)
		m->watch.cleared(m->watch.ctx);
	return lmdb_error(rc);
}

void meta_watch(struct meta *m, enum meta_table tab, const struct meta_watch *w)
{
	m->watch = w ? *w : (struct meta_watch){ 0 };
	m->watched = tab;
}

int meta_grow(struct meta *m)
{
	size_t want;
	int rc = 0;

	if (!atomic_load(&m->map_full))
		return 0;
	/* every transaction of this process has ended: LMDB's rule for resizing */
	pthread_rwlock_wrlock(&m->resize);
	want = m->map_size < META_MAP_MAX / 2 ? m->map_size * 2 : META_MAP_MAX;
	if (atomic_load(&m->map_full) && want > m->map_size) {
		rc = mdb_env_set_mapsize(m->env, want);
		if (rc == 0) {
			m->map_size = want;
			atomic_store(&m->map_full, 0);
		}
	}
	pthread_rwlock_unlock(&m->resize);
	return rc ? lmdb_error(rc) : 1;
}

void meta_txn_abort(struct meta_txn *t)
{
	if (!t)
		return;
	if (t->rdonly) {
		meta_rtxn_put(t);
		return;
	}
	mdb_txn_abort(t->txn);
	watch_end(t->m, 0);
	pthread_mutex_unlock(&t->m->wlock);
	pthread_rwlock_unlock(&t->m->resize);
	meta_redo_free(&t->redo);
	free(t);
}

int meta_rtxn_get(struct meta *m, struct meta_txn **out)
{
	struct meta_txn *t = NULL;
	int rc;

	pthread_rwlock_rdlock(&m->resize); /* until meta_rtxn_put */
	pthread_mutex_lock(&m->rlock);
	if (m->nrfree)
		t = m->rfree[--m->nrfree];
	pthread_mutex_unlock(&m->rlock);
	if (t) {
		rc = mdb_txn_renew(t->txn);
		if (rc == 0) {
			*out = t;
			return 0;
		}
		mdb_txn_abort(t->txn);
		free(t);
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		pthread_rwlock_unlock(&m->resize);
		return -ENOMEM;
	}
	t->m = m;
	t->rdonly = 1;
	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &t->txn);
	if (rc) {
		pthread_rwlock_unlock(&m->resize);
		free(t);
		return lmdb_error(rc);
	}
	*out = t;
	return 0;
}

void meta_rtxn_put(struct meta_txn *t)
{
	struct meta *m;

	if (!t)
		return;
	m = t->m;
	mdb_txn_reset(t->txn);
	pthread_mutex_lock(&m->rlock);
	if (m->nrfree < RTXN_CACHE) {
		m->rfree[m->nrfree++] = t;
		t = NULL;
	}
	pthread_mutex_unlock(&m->rlock);
	if (t) {
		mdb_txn_abort(t->txn);
		free(t);
	}
	pthread_rwlock_unlock(&m->resize);
}

int meta_get(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen,
	     const void **val, size_t *vlen)
{
	MDB_val k = { klen, (void *)key }, v;
	int rc = mdb_get(t->txn, t->m->dbi[tab], &k, &v);

	if (rc)
		return lmdb_error(rc);
	*val = v.mv_data;
	*vlen = v.mv_size;
	return 0;
}

/* Ops of @tab go to the redo log: a local table's never do. */
static int captured(const struct meta_txn *t, enum meta_table tab)
{
	return !t->nolog && tab < META_NTABLES;
}

/* The watcher of @tab, or NULL. */
static const struct meta_watch *watcher(const struct meta_txn *t, enum meta_table tab)
{
	return t->m->watch.change && t->m->watched == tab ? &t->m->watch : NULL;
}

/*
 * The row at @k of the watched table @tab, under the transaction's cursor
 * for it (opened at the first use): a put or delete then goes through the
 * cursor, so telling the watcher the old value costs no second lookup.
 * @return 0 with *@old, -ENOENT, or an error
 */
static int watched_row(struct meta_txn *t, enum meta_table tab, MDB_val *k, MDB_val *old)
{
	int rc = t->wcur ? 0 : mdb_cursor_open(t->txn, t->m->dbi[tab], &t->wcur);

	if (rc == 0)
		rc = mdb_cursor_get(t->wcur, k, old, MDB_SET_KEY);
	return lmdb_error(rc);
}

int meta_put(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen,
	     const void *val, size_t vlen)
{
	const struct meta_watch *w = watcher(t, tab);
	MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val }, old;
	int rc, ret;

	if (w) {
		ret = watched_row(t, tab, &k, &old);
		if (ret < 0 && ret != -ENOENT)
			return ret;
		rc = w->change(w->ctx, key, klen, ret ? NULL : old.mv_data, ret ? 0 : old.mv_size,
			       val, vlen);
		if (rc < 0)
			return rc;
		rc = mdb_cursor_put(t->wcur, &k, &v, ret ? 0 : MDB_CURRENT);
	} else {
		rc = mdb_put(t->txn, t->m->dbi[tab], &k, &v, 0);
	}
	if (rc)
		return note_full(t->m, rc);
	return captured(t, tab) ? meta_redo_add(&t->redo, tab, META_OP_PUT, key, klen, val, vlen) : 0;
}

int meta_del(struct meta_txn *t, enum meta_table tab, const void *key, size_t klen)
{
	const struct meta_watch *w = watcher(t, tab);
	MDB_val k = { klen, (void *)key }, old;
	int rc;

	if (w) {
		rc = watched_row(t, tab, &k, &old);
		if (rc < 0)
			return rc;
		rc = w->change(w->ctx, key, klen, old.mv_data, old.mv_size, NULL, 0);
		if (rc < 0)
			return rc;
		rc = mdb_cursor_del(t->wcur, 0);
	} else {
		rc = mdb_del(t->txn, t->m->dbi[tab], &k, NULL);
	}
	if (rc)
		return note_full(t->m, rc);
	return captured(t, tab) ? meta_redo_add(&t->redo, tab, META_OP_DEL, key, klen, NULL, 0) : 0;
}

int meta_iter(struct meta_txn *t, enum meta_table tab, const void *prefix, size_t plen, int del,
	      meta_iter_fn fn, void *ctx)
{
	MDB_cursor *cur = NULL;
	MDB_val k = { plen, (void *)prefix }, v;
	int rc, ret = 0;

	rc = mdb_cursor_open(t->txn, t->m->dbi[tab], &cur);
	if (rc)
		return lmdb_error(rc);
	rc = mdb_cursor_get(cur, &k, &v, plen ? MDB_SET_RANGE : MDB_FIRST);
	while (rc == 0) {
		if (plen && (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0))
			break;
		ret = fn(k.mv_data, k.mv_size, v.mv_data, v.mv_size, ctx);
		if (ret)
			break;
		if (del) {
			const struct meta_watch *w = watcher(t, tab);

			ret = w ? w->change(w->ctx, k.mv_data, k.mv_size, v.mv_data, v.mv_size,
					    NULL, 0)
				: 0;
			if (ret == 0 && captured(t, tab))
				ret = meta_redo_add(&t->redo, tab, META_OP_DEL, k.mv_data,
						    k.mv_size, NULL, 0);
			if (ret)
				break;
			rc = mdb_cursor_del(cur, 0);
			if (rc)
				break;
			/* seek again: the cursor's position after a delete at the
			 * end of the tree is not reliable across LMDB versions */
			k.mv_size = plen;
			k.mv_data = (void *)prefix;
			rc = mdb_cursor_get(cur, &k, &v, plen ? MDB_SET_RANGE : MDB_FIRST);
			continue;
		}
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	if (ret)
		return ret;
	return rc == MDB_NOTFOUND ? 0 : lmdb_error(rc);
}

int meta_iter_from(struct meta_txn *t, enum meta_table tab, const void *from, size_t flen,
		   meta_iter_fn fn, void *ctx)
{
	MDB_cursor *cur = NULL;
	MDB_val k = { flen, (void *)from }, v;
	int rc, ret = 0;

	rc = mdb_cursor_open(t->txn, t->m->dbi[tab], &cur);
	if (rc)
		return lmdb_error(rc);
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && ret == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		ret = fn(k.mv_data, k.mv_size, v.mv_data, v.mv_size, ctx);
	mdb_cursor_close(cur);
	if (ret)
		return ret;
	return rc == MDB_NOTFOUND ? 0 : lmdb_error(rc);
}
