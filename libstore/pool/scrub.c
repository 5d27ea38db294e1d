/* SPDX-License-Identifier: MIT */
/*
 * Scrub, after OpenZFS's dsl_scan.c, much reduced: one thread per pool
 * walks the block pointers in key order, SCRUB_BATCH at a time inside a
 * reader section (txg.c: no extent it reads is freed and reused meanwhile),
 * and hands each extent to mirror_check_extent(), which reads every side,
 * checks the keyless checksum of the stored bytes and rewrites the bad
 * copies from a sound one. No key is ever needed. Once the block pointers
 * are done, the metadata log is walked too (metalog_scrub): every copy of
 * every record on every sound side, a bad one rewritten from a sound one.
 *
 * Where it is and what it found is a row of the pool table, "pool"/"scrub",
 * written at every change of state and about once a second while it runs,
 * so an import resumes a scrub that was running where it last wrote (it
 * examines at most a second of extents twice). A row costs one small LMDB
 * transaction, which reaches the LUNs with the next txg like any other.
 *
 * Pacing: after each batch the thread sleeps until the bytes examined since
 * it (re)started are within opts.scrub_rate per second, so foreground I/O
 * keeps the LUNs; a command wakes it. And it runs at nice 19: on LUNs in
 * memory a scrub is CPU, not I/O, and the rate alone let it take 15% of
 * the foreground's IOPS (encryption.sh's mirror-scrub rows); niced, it
 * gets what the foreground leaves, yet still moves when the CPUs are busy,
 * which SCHED_IDLE would not promise.
 *
 * A resilver (resilver.c says when) is the same walk with another action
 * per extent: mirror_resilver_extent() copies it from a sound side to the
 * sides catching up that lack it, by birth txg; at the end resilver_done()
 * puts them in service. One scan at a time, as in ZFS: a resilver takes the
 * place of a scrub, starts over when another side begins catching up, and
 * is neither paused nor stopped (the sides would stay unread).
 *
 * Row: u32 state | u8[16] next key | u64 total | u64 examined |
 *      u64 repaired | u64 errors | u64 start | u64 end | u32 function
 *      (STOR_SCAN_*; a row without it, from before resilvers, is a scrub).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SCRUB_NICE 19

#include "base/events.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "dev/errlog.h"
#include "dev/mirror.h"
#include "ds/snapshot.h"
#include "kv/meta.h"
#include "pool/resilver.h"
#include "pool/scrub.h"
#include "pool_impl.h"
#include "txg/metalog.h"

#define SCRUB_BATCH 16
#define ROW_LEN_SCRUB (4 + BP_KEY_LEN + 6 * 8)
#define ROW_LEN (ROW_LEN_SCRUB + 4)

struct scrub {
	pthread_mutex_t cmd; /* one command (or the close) at a time */
	pthread_mutex_t lock; /* st, next, stop */
	pthread_cond_t wake;
	pthread_t thread;
	int have_thread, stop;
	struct stor_scrub_stat st;
	uint8_t next[BP_KEY_LEN]; /* the walk goes on at this key */
	double t0;                /* pacing: since when, and the bytes examined then */
	uint64_t ex0;
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t wall(void)
{
	return (uint64_t)time(NULL);
}

/* Write the row from a copy taken under the lock. */
static int save_row(struct stor_pool *p, const struct stor_scrub_stat *st,
		    const uint8_t next[BP_KEY_LEN])
{
	uint8_t row[ROW_LEN], *w = row;
	struct meta_txn *t = NULL;
	int ret;

	put_u32(&w, (uint32_t)st->state);
	put_bytes(&w, next, BP_KEY_LEN);
	put_u64(&w, st->total);
	put_u64(&w, st->examined);
	put_u64(&w, st->repaired);
	put_u64(&w, st->errors);
	put_u64(&w, st->start);
	put_u64(&w, st->end);
	put_u32(&w, (uint32_t)st->function);
	ret = meta_txn_begin(p->meta, &t);
	if (ret == 0)
		ret = meta_put(t, META_POOL, "scrub", 5, row, sizeof(row));
	if (ret == 0) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	meta_txn_abort(t);
	return ret;
}

static int save(struct stor_pool *p)
{
	struct scrub *s = p->scrub;
	struct stor_scrub_stat st;
	uint8_t next[BP_KEY_LEN];

	pthread_mutex_lock(&s->lock);
	st = s->st;
	memcpy(next, s->next, sizeof(next));
	pthread_mutex_unlock(&s->lock);
	return save_row(p, &st, next);
}

struct batch {
	uint8_t key[SCRUB_BATCH][BP_KEY_LEN];
	struct bp bp[SCRUB_BATCH];
	size_t n;
};

static int collect(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct batch *b = ctx;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &b->bp[b->n]) < 0)
		return 0; /* not ours to judge: pool check says what is wrong */
	memcpy(b->key[b->n], key, BP_KEY_LEN);
	return ++b->n == SCRUB_BATCH;
}

/* The key after @key: 16 bytes, big-endian. */
static void key_next(uint8_t key[BP_KEY_LEN])
{
	for (int i = BP_KEY_LEN - 1; i >= 0 && ++key[i] == 0; i--)
		;
}

/* The dataset GUID of id @id (a clear record's checksum is seeded with it),
 * 0 for a dataset gone meanwhile. From space.c's copy of the dataset table:
 * its lock is a leaf, which a reader section may take (the admin lock is
 * held by some who wait for readers). */
static uint64_t guid_of(struct stor_pool *p, uint64_t id)
{
	uint64_t guid = 0;

	pthread_mutex_lock(&p->space_lock);
	for (size_t i = 0; i < p->sp_n && !guid; i++)
		if (p->sp_ds[i]->id == id)
			guid = p->sp_ds[i]->guid;
	pthread_mutex_unlock(&p->space_lock);
	return guid;
}

/* Examine the extents from @from on. @return how many, or an error */
static int walk(struct stor_pool *p, int resilver, const uint8_t from[BP_KEY_LEN],
		uint8_t next[BP_KEY_LEN], uint64_t *examined, uint64_t *fixed, uint64_t *errors)
{
	struct batch *b = calloc(1, sizeof(*b));
	uint64_t id = 0, guid = 0;
	int ranged = 0;
	struct meta_txn *t = NULL;
	unsigned slot;
	int ret;

	if (!b)
		return -ENOMEM;
	slot = txg_read_enter(p);
	ret = meta_rtxn_get(p->meta, &t);
	if (ret == 0)
		ret = meta_iter_from(t, META_BP, from, BP_KEY_LEN, collect, b);
	meta_rtxn_put(t);
	for (size_t i = 0; ret >= 0 && i < b->n; i++) {
		const uint8_t *k = b->key[i];
		uint64_t ds_id = get_u64(&k), recno = get_u64(&k);
		struct mirror_ext e = { &b->bp[i], 0, recno };

		if (ds_id != id || !guid) {
			id = ds_id;
			guid = guid_of(p, id);
			if (!guid) /* a pointer a snapshot keeps: its dataset's */
				guid = snap_guid_of(p, id);
			if (guid)
				snap_sealer_of(p, id, 0, &ranged);
		}
		/* a promoted clone's older records are its old origin's */
		e.guid = ranged ? snap_sealer_of(p, id, b->bp[i].birth, &ranged) : guid;
		if (!guid || b->bp[i].lun >= atomic_load(&p->nluns))
			continue;
		ret = resilver ? mirror_resilver_extent(p, &e, fixed)
			       : mirror_check_extent(p, &e, fixed);
		if (ret == -ENOMEM)
			break;
		*errors += ret < 0;
		if (ret < 0)
			errlog_note(p, ds_id, recno, NULL, resilver ? "resilver" : "scrub");
		*examined += b->bp[i].psize;
		ret = 0;
	}
	txg_read_exit(p, slot);
	if (ret >= 0 && b->n) {
		memcpy(next, b->key[b->n - 1], BP_KEY_LEN);
		key_next(next);
	}
	ret = ret < 0 ? ret : (int)b->n;
	free(b);
	return ret;
}

/* A scan's end (or a scrub's stop or pause), with its counts. */
static void scan_event(struct stor_pool *p, const struct stor_scrub_stat *st)
{
	const char *cls = st->function == STOR_SCAN_RESILVER ? STOR_EV_RESILVER_FINISH
			  : st->state == STOR_SCRUB_FINISHED  ? STOR_EV_SCRUB_FINISH
			  : st->state == STOR_SCRUB_PAUSED    ? STOR_EV_SCRUB_PAUSE
							      : STOR_EV_SCRUB_ABORT;

	EVENT(cls, p->name, EV_NUM("examined", st->examined), EV_NUM("repaired", st->repaired),
	      EV_NUM("errors", st->errors), EV_NUM("total", st->total));
}

static void *scrub_main(void *arg)
{
	struct stor_pool *p = arg;
	struct scrub *s = p->scrub;
	double last_save = mono();
	char name[16];

	snprintf(name, sizeof(name), "scrub:%s", p->name);
	(void)pthread_setname_np(pthread_self(), name);
	/* this thread only (Linux nice is per thread); a failure costs only speed */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), SCRUB_NICE);

	pthread_mutex_lock(&s->lock);
	while (!s->stop && s->st.state == STOR_SCRUB_RUNNING) {
		uint8_t from[BP_KEY_LEN], next[BP_KEY_LEN];
		uint64_t ex = 0, fixed = 0, errors = 0;
		int n;

		int resilver = s->st.function == STOR_SCAN_RESILVER;

		memcpy(from, s->next, sizeof(from));
		pthread_mutex_unlock(&s->lock);
		n = walk(p, resilver, from, next, &ex, &fixed, &errors);
		pthread_mutex_lock(&s->lock);
		if (n < 0) {
			/* the metadata could not be read: try again in a moment */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&s->wake, &s->lock, &ts);
			continue;
		}
		s->st.examined += ex;
		s->st.repaired += fixed;
		s->st.errors += errors;
		if (n > 0)
			memcpy(s->next, next, sizeof(next));
		if (n < SCRUB_BATCH && s->st.state == STOR_SCRUB_RUNNING) {
			/* a side that began catching up meanwhile: scan_resilver
			 * starts the walk over, and the sides go in service after it */
			struct metalog_scrub ms = { 0 };

			pthread_mutex_unlock(&s->lock);
			if (resilver && !atomic_load(&p->resilver_asked))
				resilver_done(p);
			else if (!resilver)
				metalog_scrub(p, &ms); /* and the metadata log, last */
			pthread_mutex_lock(&s->lock);
			s->st.examined += ms.examined;
			s->st.repaired += ms.repaired;
			s->st.errors += ms.errors;
			s->st.state = STOR_SCRUB_FINISHED;
			s->st.end = wall();
			/* every copy checked and none lost: nothing is damaged now */
			if (!resilver && !s->st.errors)
				errlog_clear(p);
		}
		if (s->st.state != STOR_SCRUB_RUNNING || mono() - last_save >= 1.0) {
			struct stor_scrub_stat st = s->st;

			pthread_mutex_unlock(&s->lock);
			save(p);
			if (st.state == STOR_SCRUB_FINISHED)
				scan_event(p, &st);
			last_save = mono();
			pthread_mutex_lock(&s->lock);
		}
		/* pace: sleep off what ran ahead of scrub_rate */
		while (!s->stop && s->st.state == STOR_SCRUB_RUNNING && p->opts.scrub_rate) {
			double ahead = (double)(s->st.examined - s->ex0) / (double)p->opts.scrub_rate -
				       (mono() - s->t0);
			struct timespec ts;

			if (ahead <= 0)
				break;
			clock_gettime(CLOCK_REALTIME, &ts);
			ahead += ts.tv_nsec / 1e9;
			ts.tv_sec += (time_t)ahead;
			ts.tv_nsec = (long)((ahead - (double)(time_t)ahead) * 1e9);
			pthread_cond_timedwait(&s->wake, &s->lock, &ts);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Start the thread from where s->next says; cmd lock held. */
static int start_thread(struct stor_pool *p)
{
	struct scrub *s = p->scrub;
	int ret;

	STOR_ASSERT_HELD(&s->cmd);

	s->stop = 0;
	s->t0 = mono();
	s->ex0 = s->st.examined;
	ret = -pthread_create(&s->thread, NULL, scrub_main, p);
	s->have_thread = ret == 0;
	return ret;
}

/* Wake the thread and wait for it to end; cmd lock held. */
static void join_thread(struct scrub *s)
{
	STOR_ASSERT_HELD(&s->cmd);

	if (!s->have_thread)
		return;
	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	s->have_thread = 0;
}

int scrub_init(struct stor_pool *p)
{
	struct scrub *s = calloc(1, sizeof(*s));
	struct meta_txn *t = NULL;
	const void *v;
	size_t vlen;
	int ret;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->cmd, NULL);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	p->scrub = s;
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = meta_get(t, META_POOL, "scrub", 5, &v, &vlen);
	if (ret == 0 && (vlen == ROW_LEN || vlen == ROW_LEN_SCRUB)) {
		const uint8_t *r = v;

		s->st.state = (int)get_u32(&r);
		get_bytes(&r, s->next, BP_KEY_LEN);
		s->st.total = get_u64(&r);
		s->st.examined = get_u64(&r);
		s->st.repaired = get_u64(&r);
		s->st.errors = get_u64(&r);
		s->st.start = get_u64(&r);
		s->st.end = get_u64(&r);
		s->st.function = vlen == ROW_LEN ? (int)get_u32(&r) : STOR_SCAN_SCRUB;
		if (s->st.state < STOR_SCRUB_NONE || s->st.state > STOR_SCRUB_CANCELED)
			s->st.state = STOR_SCRUB_NONE;
		if (s->st.function != STOR_SCAN_RESILVER)
			s->st.function = STOR_SCAN_SCRUB;
	}
	meta_rtxn_put(t);
	ret = ret == -ENOENT || ret == 0 ? 0 : ret;
	if (ret < 0)
		return ret;
	/* sides catching up with no resilver running for them (a crash after
	 * they began, before the walk's row said so): one starts */
	if (resilver_wanted(p) &&
	    !(s->st.state == STOR_SCRUB_RUNNING && s->st.function == STOR_SCAN_RESILVER))
		return scan_resilver(p);
	if (s->st.state == STOR_SCRUB_RUNNING) {
		pthread_mutex_lock(&s->cmd);
		ret = start_thread(p);
		pthread_mutex_unlock(&s->cmd);
	}
	return ret;
}

int scan_resilver(struct stor_pool *p)
{
	struct scrub *s = p->scrub;
	uint64_t used, total;
	int ret;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->cmd);
	pthread_mutex_lock(&s->lock);
	s->stop = 1; /* a walk running, scrub or resilver, ends where it is */
	pthread_mutex_unlock(&s->lock);
	join_thread(s);
	atomic_store(&p->resilver_asked, 0);
	alloc_totals(p->alloc, &used, &total);
	pthread_mutex_lock(&s->lock);
	memset(s->next, 0, sizeof(s->next));
	s->st = (struct stor_scrub_stat){ .state = STOR_SCRUB_RUNNING,
					  .function = STOR_SCAN_RESILVER,
					  .total = used * STOR_SECTOR,
					  .start = wall() };
	pthread_mutex_unlock(&s->lock);
	ret = save(p);
	if (ret == 0)
		ret = start_thread(p);
	pthread_mutex_unlock(&s->cmd);
	if (ret == 0)
		EVENT(STOR_EV_RESILVER_START, p->name, EV_NUM("total", used * STOR_SECTOR));
	return ret;
}

void scrub_fini(struct stor_pool *p)
{
	struct scrub *s = p ? p->scrub : NULL;

	if (!s)
		return;
	pthread_mutex_lock(&s->cmd);
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_mutex_unlock(&s->lock);
	join_thread(s);
	pthread_mutex_unlock(&s->cmd);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->cmd);
	free(s);
	p->scrub = NULL;
}

int stor_pool_scrub(struct stor_pool *p, int what)
{
	struct scrub *s = p->scrub;
	struct stor_scrub_stat st;
	int ret = 0, resumed = 0;

	if (!s || what < STOR_SCRUB_START || what > STOR_SCRUB_STOP)
		return -EINVAL;
	/* commands are one at a time: only the thread changes the state
	 * meanwhile, and only from running to finished */
	pthread_mutex_lock(&s->cmd);
	pthread_mutex_lock(&s->lock);
	if (s->st.function == STOR_SCAN_RESILVER && s->st.state == STOR_SCRUB_RUNNING) {
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_unlock(&s->cmd);
		pool_set_error("pool %s: a resilver is running; a scrub may start once it is done",
			       p->name);
		return -EBUSY;
	}
	pthread_mutex_unlock(&s->lock);
	if (what == STOR_SCRUB_START) {
		pthread_mutex_lock(&s->lock);
		ret = s->st.state == STOR_SCRUB_RUNNING ? -EBUSY : 0;
		pthread_mutex_unlock(&s->lock);
		if (ret == 0)
			join_thread(s); /* one that finished */
		pthread_mutex_lock(&s->lock);
		resumed = s->st.state == STOR_SCRUB_PAUSED && s->st.function == STOR_SCAN_SCRUB;
		if (ret == 0 && !resumed) {
			uint64_t used, total;

			alloc_totals(p->alloc, &used, &total);
			memset(s->next, 0, sizeof(s->next));
			s->st = (struct stor_scrub_stat){ .total = used * STOR_SECTOR,
							  .start = wall() };
		}
		if (ret == 0)
			s->st.state = STOR_SCRUB_RUNNING;
		pthread_mutex_unlock(&s->lock);
	} else {
		pthread_mutex_lock(&s->lock);
		if ((s->st.state != STOR_SCRUB_RUNNING &&
		     (what == STOR_SCRUB_PAUSE || s->st.state != STOR_SCRUB_PAUSED)) ||
		    s->st.function != STOR_SCAN_SCRUB) {
			ret = -ENOENT;
		} else {
			s->st.state = what == STOR_SCRUB_PAUSE ? STOR_SCRUB_PAUSED
							       : STOR_SCRUB_CANCELED;
			if (what == STOR_SCRUB_STOP)
				s->st.end = wall();
		}
		pthread_mutex_unlock(&s->lock);
		if (ret == 0)
			join_thread(s); /* it sees the state and ends */
	}
	pthread_mutex_lock(&s->lock);
	st = s->st;
	pthread_mutex_unlock(&s->lock);
	if (ret == 0)
		ret = save(p);
	if (ret == 0 && what == STOR_SCRUB_START)
		ret = start_thread(p);
	pthread_mutex_unlock(&s->cmd);
	if (ret == 0 && what == STOR_SCRUB_START)
		EVENT(STOR_EV_SCRUB_START, p->name, EV_NUM("total", st.total),
		      EV_NUM("resumed", resumed));
	else if (ret == 0)
		scan_event(p, &st);
	return ret;
}

int stor_pool_scrub_stat(struct stor_pool *p, struct stor_scrub_stat *st)
{
	struct scrub *s = p->scrub;
	double secs;

	memset(st, 0, sizeof(*st));
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	secs = mono() - s->t0;
	if (st->state == STOR_SCRUB_RUNNING && secs > 0)
		st->rate = (uint64_t)((double)(st->examined - s->ex0) / secs);
	pthread_mutex_unlock(&s->lock);
	return 0;
}
