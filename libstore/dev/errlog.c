/* SPDX-License-Identifier: MIT */
/*
 * The pool's list of records with unrecoverable errors, after OpenZFS's
 * errlog (spa_errlog.c), much reduced: a record whose read (or scrub, or
 * resilver) found no sound copy is noted by dataset id and record number,
 * once, up to ERRLOG_MAX of them (past that only counted), so pool status
 * -v names what is lost. The list is a row of the pool table, "pool"/
 * "errlog", written with the next commit after a change (txg.c calls
 * errlog_save), so it survives a restart and reaches the LUNs' log like any
 * pool row. A pool clear, or a scrub that finds no error, empties it.
 *
 * Row: u32 n | u64 more (noted past the bound) | n x (u64 dataset id |
 * u64 record number).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/events.h"
#include "dev/errlog.h"
#include "kv/format.h"
#include "kv/meta.h"
#include "pool_impl.h"

static pthread_mutex_t errlog_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf */

void errlog_note(struct stor_pool *p, uint64_t ds_id, uint64_t recno, const char *name,
		 const char *via)
{
	struct errlog *el = &p->errlog;
	int known = 0;

	pthread_mutex_lock(&errlog_lock);
	for (unsigned i = 0; i < el->n && !known; i++)
		known = el->e[i].ds_id == ds_id && el->e[i].recno == recno;
	if (!known) {
		if (el->n < ERRLOG_MAX)
			el->e[el->n++] = (struct errlog_ent){ ds_id, recno };
		else
			el->more++;
		atomic_store(&el->dirty, 1);
	}
	pthread_mutex_unlock(&errlog_lock);
	/* a record lost is said once, not at every read that fails on it */
	if (!known)
		EVENT(STOR_EV_IO_ERROR, p->name, EV_STR("dataset", name), EV_NUM("dataset_id", ds_id),
		      EV_NUM("record", recno), EV_STR("via", via));
}

void errlog_clear(struct stor_pool *p)
{
	pthread_mutex_lock(&errlog_lock);
	if (p->errlog.n || p->errlog.more)
		atomic_store(&p->errlog.dirty, 1);
	p->errlog.n = 0;
	p->errlog.more = 0;
	pthread_mutex_unlock(&errlog_lock);
}

int errlog_load(struct stor_pool *p, struct meta_txn *t)
{
	struct errlog *el = &p->errlog;
	const uint8_t *r;
	const void *v;
	size_t vlen;
	uint32_t n;
	int ret = meta_get(t, META_POOL, "errlog", 6, &v, &vlen);

	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	r = v;
	if (vlen < 12 || (n = get_u32(&r), n > ERRLOG_MAX || vlen != 12 + 16 * (size_t)n))
		return STOR_ECORRUPT;
	el->more = get_u64(&r);
	for (el->n = 0; el->n < n; el->n++) {
		el->e[el->n].ds_id = get_u64(&r);
		el->e[el->n].recno = get_u64(&r);
	}
	return 0;
}

int errlog_save(struct stor_pool *p, struct meta_txn *t)
{
	uint8_t buf[12 + 16 * ERRLOG_MAX], *w = buf;
	int ret;

	if (!atomic_exchange(&p->errlog.dirty, 0))
		return 0;
	pthread_mutex_lock(&errlog_lock);
	put_u32(&w, p->errlog.n);
	put_u64(&w, p->errlog.more);
	for (unsigned i = 0; i < p->errlog.n; i++) {
		put_u64(&w, p->errlog.e[i].ds_id);
		put_u64(&w, p->errlog.e[i].recno);
	}
	pthread_mutex_unlock(&errlog_lock);
	ret = meta_put(t, META_POOL, "errlog", 6, buf, (size_t)(w - buf));
	if (ret < 0)
		atomic_store(&p->errlog.dirty, 1);
	return ret < 0 ? ret : 1;
}

void errlog_undo(struct stor_pool *p)
{
	atomic_store(&p->errlog.dirty, 1);
}

unsigned errlog_copy(struct stor_pool *p, struct errlog_ent *out, uint64_t *more)
{
	unsigned n;

	pthread_mutex_lock(&errlog_lock);
	n = p->errlog.n;
	memcpy(out, p->errlog.e, n * sizeof(out[0]));
	*more = p->errlog.more;
	pthread_mutex_unlock(&errlog_lock);
	return n;
}
