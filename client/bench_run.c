/* SPDX-License-Identifier: MIT */
/*
 * bench_run.c is the engine of "coffer bench": for each run it starts a few
 * worker threads (one connection each, min(4, CPUs) by default) that own
 * disjoint sets of datasets and keep each dataset's queue depth of requests
 * outstanding through the asynchronous client library. iorate=max is a
 * closed loop; iorate=N and curve points are an open loop: each stream has
 * scheduled issue times, and as in vdbench at most its threads (queue
 * depth) of them outstanding, and latency counts from the send; an issue
 * time up to 10 ms late (LATE_NS) is sent at once, a later one dropped.
 * So a daemon (or a client starved of CPU) that falls behind shows as a
 * lower achieved rate, never above the rate asked, and not as a backlog's
 * wait counted as response time. Completions are counted under the worker's lock for the main thread
 * to sample, and checked against the validation state when -v is on. That
 * state of a dataset (generations, busy units) is touched by the one worker
 * that owns the dataset in the current run, so it takes no lock. The engine
 * prints nothing itself: failed I/Os go to bench_report_error().
 */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "store.h" /* the STOR_E* codes a reply status may carry */

#define MAX_WORKERS_DEFAULT 4
#define REAP_BATCH 64
#define DRAIN_NS (30ull * 1000000000ull) /* wait for stragglers after a run */

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64*: cheap, per worker, good enough to pick offsets */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static double rnd_pct(uint64_t *s)
{
	return (double)(rnd(s) >> 11) / (double)(1ull << 53) * 100.0;
}

const char *bench_errstr(int status, char *buf, size_t len)
{
	/* libstore's texts; a code neither errno nor the store knows keeps its number */
	if (status <= -4096 && !strcmp(stor_errname(status), "EUNKNOWN")) {
		snprintf(buf, len, "error %d", status);
		return buf;
	}
	return stor_strerror(status);
}

/* ---- the worker ---- */

static bool units_busy(const struct bds *ds, uint64_t off, uint32_t len)
{
	for (uint64_t u = off / ds->v->unit; u < (off + len) / ds->v->unit; u++)
		if (ds->v->busy[u])
			return true;
	return false;
}

static void units_mark(struct bds *ds, uint64_t off, uint32_t len, uint8_t busy)
{
	for (uint64_t u = off / ds->v->unit; u < (off + len) / ds->v->unit; u++)
		ds->v->busy[u] = busy;
}

static uint64_t pick_random(struct worker *w, struct stream *st, uint32_t size, bool read)
{
	uint64_t lo = st->lo, hi = st->hi;

	/* rhpct: that share of reads goes to the hit area, the others avoid it */
	if (read && st->rhpct > 0 && hi - lo > st->hitarea + size) {
		if (rnd_pct(&w->rng) < st->rhpct)
			hi = lo + (st->hitarea > size ? st->hitarea : size);
		else
			lo += st->hitarea;
	}
	return lo + rnd(&w->rng) % ((hi - lo) / size) * size;
}

/* @return 0 issued, 1 the stream has nothing to issue now, < 0 failure */
static int issue(struct worker *w, struct stream *st, uint64_t t_sched, uint64_t now)
{
	struct engine *e = w->e;
	struct bds *ds = st->ds;
	const struct bench_run *run = e->run;
	struct slot *sl = NULL;
	uint32_t size;
	uint64_t off;
	bool read, random;
	int ret;

	if (run->xfersize) {
		size = run->xfersize;
	} else {
		double r = rnd_pct(&w->rng), acc = 0;

		size = st->xfer[st->nxfer - 1].size;
		for (unsigned i = 0; i < st->nxfer; i++) {
			acc += st->xfer[i].pct;
			if (r < acc) {
				size = st->xfer[i].size;
				break;
			}
		}
	}
	read = rnd_pct(&w->rng) < st->rdpct;
	random = !st->eof && rnd_pct(&w->rng) < st->seekpct;
	if (random) {
		off = pick_random(w, st, size, read);
		/* validation: never two I/Os on one record at once */
		for (int tries = 0; e->verify && units_busy(ds, off, size); tries++) {
			if (tries == 16)
				return 1;
			off = pick_random(w, st, size, read);
		}
	} else {
		if (st->cursor + size > st->hi) {
			if (st->eof) {
				st->done = true;
				return 1;
			}
			st->cursor = st->lo;
		}
		off = st->cursor;
		if (e->verify && units_busy(ds, off, size))
			return 1;
		st->cursor += size;
	}
	for (unsigned i = st->slot0; i < st->slot0 + st->qd; i++)
		if (!w->slots[i].busy) {
			sl = &w->slots[i];
			break;
		}
	if (!sl)
		return 1;
	sl->op = read ? COFFER_READ : COFFER_WRITE;
	sl->off = off;
	sl->len = size;
	sl->t_sched = t_sched;
	sl->t_sent = now;
	sl->gen = 0;
	if (e->verify) {
		units_mark(ds, off, size, 1);
		if (!read) {
			sl->gen = ++ds->next_gen;
			for (uint32_t k = 0; k < size; k += ds->v->unit)
				verify_fill(sl->buf + k, ds->v->unit, ds->guid, (off + k) / ds->v->unit,
					    sl->gen);
		}
	}
	ret = coffer_submit(w->conn, (uint32_t)(sl - w->slots), sl->op, ds->handle, off, size,
			    sl->buf);
	if (ret < 0) {
		if (e->verify)
			units_mark(ds, off, size, 0);
		snprintf(w->errmsg, sizeof(w->errmsg), "submit to %s: %s", ds->name,
			 strerror(-ret));
		return ret;
	}
	sl->busy = true;
	st->inflight++;
	w->inflight++;
	return 0;
}

/* Only zeros in @p: what a record never written reads as. */
static bool all_zero(const uint8_t *p, uint32_t n)
{
	uint64_t v;

	/* random payloads and validation headers end this at the first word */
	for (uint32_t i = 0; i + 8 <= n; i += 8) {
		memcpy(&v, p + i, 8);
		if (v)
			return false;
	}
	return true;
}

static void complete(struct worker *w, struct slot *sl, int status, uint64_t now,
		     struct acc *a)
{
	struct engine *e = w->e;
	struct stream *st = sl->st;
	struct bds *ds = st->ds;
	/* vdbench's basis: from the moment the request went out, not from its scheduled time;
	 * a daemon that falls behind an open-loop rate shows as a lower achieved i/o rate */
	uint64_t lat = now > sl->t_sent ? now - sl->t_sent : 0;
	bool read = sl->op == COFFER_READ;
	char eb[64];

	sl->busy = false;
	st->inflight--;
	w->inflight--;
	if (status < 0) {
		a->errors++;
		bench_report_error(e, ds, sl->off, "%s of %u bytes failed: %s",
				   read ? "read" : "write", sl->len,
				   bench_errstr(status, eb, sizeof(eb)));
		if (e->verify) {
			a->verrors += read;
			/* a failed write may or may not have landed */
			for (uint64_t u = sl->off / ds->v->unit; u < (sl->off + sl->len) / ds->v->unit;
			     u++)
				if (!read)
					ds->v->gen[u] = VERIFY_GEN_UNKNOWN;
		}
	} else if (e->verify) {
		for (uint32_t k = 0; k < sl->len; k += ds->v->unit) {
			uint64_t u = (sl->off + k) / ds->v->unit;
			enum verify_status vs;
			uint32_t got;

			if (!read) {
				ds->v->gen[u] = sl->gen;
				continue;
			}
			vs = verify_check(sl->buf + k, ds->v->unit, ds->guid, u, ds->v->gen[u], &got);
			if (vs == VERIFY_OK || vs == VERIFY_UNCHECKED)
				continue;
			a->verrors++;
			bench_report_error(e, ds, sl->off + k,
					   "validation: %s (expected generation %u, found %u)",
					   verify_status_str(vs), ds->v->gen[u], got);
		}
	}
	if (e->verify)
		units_mark(ds, sl->off, sl->len, 0);
	if (status < 0 || now > e->end_ns)
		return;
	if (read) {
		a->reads++;
		a->zreads += all_zero(sl->buf, sl->len);
		a->rbytes += sl->len;
		a->rsum += (double)lat;
	} else {
		a->writes++;
		a->wbytes += sl->len;
		a->wsum += (double)lat;
	}
	a->sumsq += (double)lat * (double)lat;
	if (lat > a->max)
		a->max = lat;
	/* warmup I/Os show in the interval lines but not in the percentiles */
	if (sl->t_sched >= e->t0 + e->warm_ns) {
		hist_add(w->h, lat);
		hist_add(read ? w->hr : w->hw, lat);
	}
}

void bench_acc_add(struct acc *d, const struct acc *s)
{
	d->reads += s->reads;
	d->writes += s->writes;
	d->rbytes += s->rbytes;
	d->wbytes += s->wbytes;
	d->errors += s->errors;
	d->verrors += s->verrors;
	d->zreads += s->zreads;
	d->rsum += s->rsum;
	d->wsum += s->wsum;
	d->sumsq += s->sumsq;
	if (s->max > d->max)
		d->max = s->max;
}

/*
 * Take up to a batch of completions. Each is counted in its group's pending
 * counters, and the groups the batch touched go to the shared ones under
 * one lock, so the main thread's sample costs the workers one lock a batch.
 */
static int reap_some(struct worker *w, int timeout_ms)
{
	struct coffer_completion c[REAP_BATCH];
	unsigned touched[REAP_BATCH], nt = 0;
	uint64_t now;
	int n, ret;

	n = coffer_reap(w->conn, c, REAP_BATCH, timeout_ms);
	if (n <= 0) {
		if (n < 0)
			snprintf(w->errmsg, sizeof(w->errmsg), "connection: %s", strerror(-n));
		return n;
	}
	now = bench_now_ns();
	ret = n;
	for (int i = 0; i < n; i++) {
		struct slot *sl;

		if (c[i].id >= w->nslots || !w->slots[c[i].id].busy) {
			snprintf(w->errmsg, sizeof(w->errmsg), "completion of unknown request %u",
				 c[i].id);
			ret = -EPROTO;
			break;
		}
		sl = &w->slots[c[i].id];
		if (!w->gdirty[sl->st->group]) {
			w->gdirty[sl->st->group] = true;
			touched[nt++] = sl->st->group;
		}
		complete(w, sl, c[i].status, now, &w->gpend[sl->st->group]);
	}
	pthread_mutex_lock(&w->lock);
	for (unsigned k = 0; k < nt; k++) {
		bench_acc_add(&w->gacc[touched[k]], &w->gpend[touched[k]]);
		memset(&w->gpend[touched[k]], 0, sizeof(w->gpend[touched[k]]));
		w->gdirty[touched[k]] = false;
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

static int worker_setup(struct worker *w)
{
	struct engine *e = w->e;
	uint32_t maxlen = 0;
	unsigned n = 0;
	int ret;

	ret = coffer_connect(e->sock, &w->conn);
	if (ret < 0) {
		snprintf(w->errmsg, sizeof(w->errmsg), "connect %s: %s", e->sock, strerror(-ret));
		return ret;
	}
	for (unsigned i = 0; i < e->nds; i++) {
		struct bds *ds = &e->ds[i];

		if (ds->worker != (int)w->idx)
			continue;
		ret = coffer_ds_open(w->conn, ds->name, NULL, NULL);
		if (ret < 0) {
			char eb[64];

			snprintf(w->errmsg, sizeof(w->errmsg), "open %s: %s", ds->name,
				 bench_errstr(ret, eb, sizeof(eb)));
			return ret;
		}
		ds->handle = ret;
	}
	for (unsigned i = 0; i < w->nst; i++) {
		w->nslots += w->st[i]->qd;
		for (unsigned k = 0; k < w->st[i]->nxfer; k++)
			if (w->st[i]->xfer[k].size > maxlen)
				maxlen = w->st[i]->xfer[k].size;
	}
	if (e->run->xfersize)
		maxlen = e->run->xfersize;
	w->slots = calloc(w->nslots ? w->nslots : 1, sizeof(*w->slots));
	if (!w->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < w->nst; i++) {
		w->st[i]->slot0 = n;
		for (unsigned k = 0; k < w->st[i]->qd; k++, n++) {
			struct slot *sl = &w->slots[n];

			sl->st = w->st[i];
			if (posix_memalign((void **)&sl->buf, 4096, maxlen))
				return -ENOMEM;
			/* incompressible payload unless validation writes its own */
			for (uint32_t b = 0; b + 8 <= maxlen; b += 8) {
				uint64_t r = rnd(&w->rng);

				memcpy(sl->buf + b, &r, 8);
			}
		}
	}
	return 0;
}

/*
 * How late an issue time may be sent before it is dropped: a period, or
 * LATE_NS when that is longer. On a machine the daemon shares, a worker
 * thread waits for a core for milliseconds at a time; dropping what was
 * more than one period late (tens of microseconds at a few hundred
 * thousand I/O per second) measured those waits, not the daemon: clear
 * held 0.70-0.82 of 60 % of its maximum, and 0.99-1.00 with this window.
 * A daemon that falls behind still shows, since the queue depth bounds
 * what is outstanding; the window can overstate the rate held by at most
 * LATE_NS over the run's length (0.2 % of a 5 s point).
 */
#define LATE_NS (10000000ull)

static uint64_t late_ns(const struct stream *st)
{
	return st->period_ns > LATE_NS ? st->period_ns : LATE_NS;
}

static void worker_loop(struct worker *w)
{
	struct engine *e = w->e;
	bool open_loop = e->rate > 0;
	int ret = 0;

	while (!atomic_load_explicit(&e->stop, memory_order_relaxed)) {
		uint64_t now = bench_now_ns(), wake = e->end_ns;
		bool any = false;

		if (now >= e->end_ns)
			break;
		for (unsigned i = 0; i < w->nst; i++) {
			struct stream *st = w->st[i];

			while (!st->done && st->inflight < st->qd) {
				uint64_t t = now;

				if (open_loop) {
					if (st->next_ns > now)
						break;
					if (now - st->next_ns > late_ns(st))
						st->next_ns = now;
					t = st->next_ns;
				}
				ret = issue(w, st, t, now);
				if (ret < 0)
					goto out;
				if (ret > 0)
					break;
				if (open_loop)
					st->next_ns += st->period_ns;
			}
			any |= !st->done;
			if (open_loop && !st->done && st->inflight < st->qd && st->next_ns < wake)
				wake = st->next_ns;
		}
		if (!any && !w->inflight)
			break; /* every stream reached its end (seekpct=eof) */
		ret = coffer_flush_out(w->conn);
		if (ret < 0) {
			snprintf(w->errmsg, sizeof(w->errmsg), "send: %s", strerror(-ret));
			goto out;
		}
		ret = reap_some(w, 0);
		if (ret < 0)
			goto out;
		if (ret > 0)
			continue;
		now = bench_now_ns();
		if (!open_loop && now + NS / 10 < wake)
			wake = now + NS / 10;
		if (wake <= now)
			continue;
		if (w->inflight) {
			struct pollfd pfd = { .fd = coffer_fd(w->conn), .events = POLLIN };
			struct timespec ts = { (time_t)((wake - now) / NS), (long)((wake - now) % NS) };

			ppoll(&pfd, 1, &ts, NULL);
		} else {
			struct timespec ts = { (time_t)((wake - now) / NS), (long)((wake - now) % NS) };

			nanosleep(&ts, NULL);
		}
	}
	ret = 0;
out:
	/* drain what is in flight: validation needs every answer */
	{
		uint64_t deadline = bench_now_ns() + DRAIN_NS;

		while (ret == 0 && w->inflight && bench_now_ns() < deadline) {
			int n = reap_some(w, 100);

			if (n < 0)
				ret = n;
		}
		if (ret == 0 && w->inflight) {
			snprintf(w->errmsg, sizeof(w->errmsg), "%u requests still in flight after %llu s",
				 w->inflight, DRAIN_NS / NS);
			ret = -ETIMEDOUT;
		}
	}
	if (ret == 0 && e->verify) {
		/* the journal must only claim generations the daemon made durable */
		for (unsigned i = 0; i < e->nds && ret == 0; i++)
			if (e->ds[i].worker == (int)w->idx) {
				char eb[64];

				ret = coffer_ds_flush(w->conn, e->ds[i].handle);
				if (ret < 0)
					snprintf(w->errmsg, sizeof(w->errmsg), "flush %s: %s",
						 e->ds[i].name, bench_errstr(ret, eb, sizeof(eb)));
			}
	}
	/* closed before the run ends, so the datasets are free when bench exits */
	for (unsigned i = 0; i < e->nds && ret == 0; i++)
		if (e->ds[i].worker == (int)w->idx && e->ds[i].handle >= 0) {
			char eb[64];

			ret = coffer_ds_close(w->conn, e->ds[i].handle);
			if (ret < 0)
				snprintf(w->errmsg, sizeof(w->errmsg), "close %s: %s", e->ds[i].name,
					 bench_errstr(ret, eb, sizeof(eb)));
			e->ds[i].handle = -1;
		}
	if (ret < 0 && e->verify) {
		/* anything still in flight may or may not have landed */
		for (unsigned i = 0; i < w->nslots; i++) {
			struct slot *sl = &w->slots[i];
			struct verify_ds *v = sl->st->ds->v;

			if (!sl->busy)
				continue;
			for (uint64_t u = sl->off / v->unit; u < (sl->off + sl->len) / v->unit; u++) {
				if (sl->op == COFFER_WRITE)
					v->gen[u] = VERIFY_GEN_UNKNOWN;
				v->busy[u] = 0;
			}
		}
	}
	w->err = ret;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct engine *e = w->e;
	uint64_t now;

	int go;

	w->err = worker_setup(w);
	pthread_mutex_lock(&e->go_lock);
	e->ready++;
	pthread_cond_broadcast(&e->go_cond);
	while (!e->go)
		pthread_cond_wait(&e->go_cond, &e->go_lock);
	go = e->go;
	pthread_mutex_unlock(&e->go_lock);
	if (w->err == 0 && go > 0) {
		now = bench_now_ns();
		if (now < e->t0) {
			struct timespec ts = { 0, (long)(e->t0 - now) };

			nanosleep(&ts, NULL);
		}
		worker_loop(w);
	}
	atomic_store(&w->finished, true);
	return NULL;
}

/* ---- a run's workers ---- */

void bench_collect(struct engine *e, struct acc *a, struct acc *g)
{
	memset(a, 0, sizeof(*a));
	if (g)
		memset(g, 0, e->ngroups * sizeof(*g));
	for (unsigned i = 0; i < e->nw; i++) {
		struct worker *w = &e->w[i];

		pthread_mutex_lock(&w->lock);
		for (unsigned k = 0; k < e->ngroups; k++) {
			/* the run's counters are its groups' together */
			bench_acc_add(a, &w->gacc[k]);
			if (g)
				bench_acc_add(&g[k], &w->gacc[k]);
		}
		memset(w->gacc, 0, e->ngroups * sizeof(*w->gacc));
		pthread_mutex_unlock(&w->lock);
	}
}

bool bench_all_finished(const struct engine *e)
{
	for (unsigned i = 0; i < e->nw; i++)
		if (!atomic_load(&e->w[i].finished))
			return false;
	return true;
}

/*
 * The run's groups: the sds its workloads name, in the plan's order (not
 * the workloads'), so that the lines of a plan's runs come in one order.
 * @param[out] gmap  for each sd of the plan its group, or -1
 */
static int build_groups(struct engine *e, const struct bench_plan *pl, const struct bench_run *r,
			int *gmap)
{
	enum { UNUSED = -1, NAMED = -2 }; /* before an sd gets its number */

	for (unsigned s = 0; s < pl->nsd; s++)
		gmap[s] = UNUSED;
	for (unsigned i = 0; i < r->nwd; i++) {
		const struct bench_wd *wd = &pl->wd[r->wd_idx[i]];

		for (unsigned j = 0; j < wd->nsd; j++)
			gmap[wd->sd_idx[j]] = NAMED;
	}
	e->groups = calloc(pl->nsd, sizeof(*e->groups));
	if (!e->groups)
		return -ENOMEM;
	e->ngroups = 0;
	for (unsigned s = 0; s < pl->nsd; s++)
		if (gmap[s] == NAMED) {
			gmap[s] = (int)e->ngroups;
			e->groups[e->ngroups++] = &pl->sd[s];
		}
	return 0;
}

/* The streams of run @r, each with its sd's group from @gmap. @return 0 or -EINVAL */
static int fill_streams(struct engine *e, const struct bench_plan *pl, const struct bench_run *r,
			const struct sdmatch *m, const int *gmap, char *err, size_t errlen)
{
	e->nstreams = 0;
	for (unsigned i = 0; i < r->nwd; i++) {
		const struct bench_wd *wd = &pl->wd[r->wd_idx[i]];

		for (unsigned j = 0; j < wd->nsd; j++) {
			const struct bench_sd *sd = &pl->sd[wd->sd_idx[j]];

			for (unsigned k = 0; k < m[wd->sd_idx[j]].n; k++) {
				struct stream *st = &e->streams[e->nstreams++];
				struct bds *ds = &e->ds[m[wd->sd_idx[j]].idx[k]];
				uint64_t align = ds->recordsize ? ds->recordsize : 4096;
				uint32_t maxx = 0;

				st->ds = ds;
				st->group = (unsigned)gmap[wd->sd_idx[j]];
				st->qd = r->threads ? r->threads : sd->threads;
				st->rdpct = r->rdpct >= 0 ? r->rdpct : wd->rdpct;
				st->seekpct = wd->seekpct;
				st->eof = wd->eof;
				st->rhpct = wd->rhpct;
				st->hitarea = sd->hitarea ? sd->hitarea : wd->hitarea;
				memcpy(st->xfer, wd->xfer, sizeof(st->xfer));
				st->nxfer = wd->nxfer;
				if (r->xfersize) {
					st->xfer[0] = (struct bench_xfer){ r->xfersize, 100 };
					st->nxfer = 1;
				}
				st->lo = 0;
				st->hi = ds->volsize;
				if (sd->range_set && sd->range_bytes) {
					st->lo = (uint64_t)sd->range_lo;
					st->hi = (uint64_t)sd->range_hi;
				} else if (sd->range_set) {
					st->lo = (uint64_t)(sd->range_lo / 100 * (double)ds->volsize);
					st->hi = (uint64_t)(sd->range_hi / 100 * (double)ds->volsize);
				}
				if (st->hi > ds->volsize)
					st->hi = ds->volsize;
				/* size=: the first so many bytes of the range, as a LUN of that size */
				if (sd->size && st->hi > st->lo && st->hi - st->lo > sd->size)
					st->hi = st->lo + sd->size;
				st->lo = (st->lo + align - 1) / align * align;
				st->hi = st->hi / align * align;
				for (unsigned x = 0; x < st->nxfer; x++) {
					if (st->xfer[x].size > maxx)
						maxx = st->xfer[x].size;
					if (e->verify && (st->xfer[x].size % ds->recordsize)) {
						snprintf(err, errlen,
							 "%s: validation needs transfer sizes that "
							 "are multiples of the recordsize (%u)",
							 ds->name, ds->recordsize);
						return -EINVAL;
					}
				}
				if (st->hi <= st->lo || st->hi - st->lo < maxx) {
					snprintf(err, errlen, "%s: range smaller than the transfer size",
						 ds->name);
					return -EINVAL;
				}
				st->cursor = st->lo;
			}
		}
	}
	return 0;
}

static int build_streams(struct engine *e, const struct bench_plan *pl, const struct bench_run *r,
			 const struct sdmatch *m, char *err, size_t errlen)
{
	unsigned n = 0;
	int *gmap = NULL, ret;

	for (unsigned i = 0; i < r->nwd; i++) {
		const struct bench_wd *wd = &pl->wd[r->wd_idx[i]];

		for (unsigned j = 0; j < wd->nsd; j++)
			n += m[wd->sd_idx[j]].n;
	}
	if (!n) {
		snprintf(err, errlen, "run %s: no dataset to run on", r->name);
		return -ENOENT;
	}
	e->streams = calloc(n, sizeof(*e->streams));
	gmap = calloc(pl->nsd, sizeof(*gmap));
	ret = !e->streams || !gmap ? -ENOMEM : build_groups(e, pl, r, gmap);
	if (ret == 0)
		ret = fill_streams(e, pl, r, m, gmap, err, errlen);
	free(gmap);
	return ret;
}

int bench_engine_setup(struct engine *e, const struct bench_plan *pl, unsigned ri,
		       const struct sdmatch *m, const double *base_iops, char *err, size_t errlen)
{
	const struct bench_run *r = &pl->run[ri];
	unsigned nworkers, next = 0;
	int ret;

	e->run = r;
	e->rate = 0;
	if (r->rate_kind == BENCH_RATE_FIXED)
		e->rate = r->rate;
	else if (r->rate_kind == BENCH_RATE_CURVE)
		e->rate = base_iops[r->base] * r->rate / 100.0;
	if (r->rate_kind == BENCH_RATE_CURVE && e->rate <= 0) {
		snprintf(err, errlen, "the max run gave no rate to scale");
		return -EINVAL;
	}
	ret = build_streams(e, pl, r, m, err, errlen);
	if (ret < 0)
		return ret;
	/* datasets go round robin to min(--threads, 4, CPUs) workers */
	nworkers = e->a->nthreads;
	if (!nworkers) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		nworkers = cpus > 0 && cpus < MAX_WORKERS_DEFAULT ? (unsigned)cpus :
								   MAX_WORKERS_DEFAULT;
	}
	for (unsigned i = 0; i < e->nds; i++)
		e->ds[i].worker = -1;
	for (unsigned i = 0; i < e->nstreams; i++)
		if (e->streams[i].ds->worker < 0)
			e->streams[i].ds->worker = (int)(next++ % nworkers);
	if (next < nworkers)
		nworkers = next;
	e->w = calloc(nworkers, sizeof(*e->w));
	if (!e->w)
		return -ENOMEM;
	e->nw = nworkers;
	for (unsigned i = 0; i < nworkers; i++) {
		struct worker *w = &e->w[i];

		w->e = e;
		w->idx = i;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1) ^ (uint64_t)bench_now_ns();
		pthread_mutex_init(&w->lock, NULL);
		w->st = calloc(e->nstreams, sizeof(*w->st));
		w->h = malloc(sizeof(*w->h));
		w->hr = malloc(sizeof(*w->hr));
		w->hw = malloc(sizeof(*w->hw));
		w->gacc = calloc(e->ngroups, sizeof(*w->gacc));
		w->gpend = calloc(e->ngroups, sizeof(*w->gpend));
		w->gdirty = calloc(e->ngroups, sizeof(*w->gdirty));
		if (!w->st || !w->h || !w->hr || !w->hw || !w->gacc || !w->gpend || !w->gdirty)
			return -ENOMEM;
		hist_init(w->h);
		hist_init(w->hr);
		hist_init(w->hw);
	}
	for (unsigned i = 0; i < e->nstreams; i++) {
		struct worker *w = &e->w[e->streams[i].ds->worker];

		w->st[w->nst++] = &e->streams[i];
	}
	return 0;
}

int bench_engine_start(struct engine *e, unsigned *started, char *err, size_t errlen)
{
	const struct bench_run *r = e->run;
	int ret = 0;

	pthread_mutex_init(&e->go_lock, NULL);
	pthread_cond_init(&e->go_cond, NULL);
	e->ready = 0;
	e->go = 0;
	atomic_store(&e->stop, false);
	e->t0 = UINT64_MAX;
	e->end_ns = UINT64_MAX;
	e->warm_ns = (uint64_t)(r->warmup * 1e9);
	for (*started = 0; *started < e->nw; (*started)++)
		if (pthread_create(&e->w[*started].tid, NULL, worker_main, &e->w[*started])) {
			snprintf(err, errlen, "cannot start a worker thread");
			ret = -EAGAIN;
			break;
		}
	/* every worker connects and opens its datasets before the clock starts */
	pthread_mutex_lock(&e->go_lock);
	while (e->ready < *started)
		pthread_cond_wait(&e->go_cond, &e->go_lock);
	for (unsigned i = 0; i < *started && ret == 0; i++)
		if (e->w[i].err < 0) {
			snprintf(err, errlen, "%s", e->w[i].errmsg);
			ret = e->w[i].err;
		}
	e->t0 = bench_now_ns() + NS / 100;
	e->end_ns = e->t0 + (uint64_t)(r->elapsed * 1e9);
	if (e->rate > 0) {
		double per = e->rate / e->nstreams;

		for (unsigned i = 0; i < e->nstreams; i++) {
			struct stream *st = &e->streams[i];

			st->period_ns = (uint64_t)(1e9 / per);
			if (!st->period_ns)
				st->period_ns = 1;
			/* spread the streams' first issue over one period */
			st->next_ns = e->t0 + st->period_ns * i / e->nstreams;
		}
	}
	e->go = ret == 0 ? 1 : -1;
	pthread_cond_broadcast(&e->go_cond);
	pthread_mutex_unlock(&e->go_lock);
	return ret;
}

int bench_engine_join(struct engine *e, unsigned started, struct tally *t)
{
	int ret = 0;

	atomic_store(&e->stop, true);
	for (unsigned i = 0; i < started; i++)
		pthread_join(e->w[i].tid, NULL);
	pthread_cond_destroy(&e->go_cond);
	pthread_mutex_destroy(&e->go_lock);
	for (unsigned i = 0; i < e->nw; i++) {
		hist_merge(t->h, e->w[i].h);
		hist_merge(t->hr, e->w[i].hr);
		hist_merge(t->hw, e->w[i].hw);
		if (e->w[i].err < 0 && !t->err[0]) {
			snprintf(t->err, sizeof(t->err), "%s", e->w[i].errmsg);
			ret = e->w[i].err;
		}
	}
	return ret;
}

void bench_engine_free(struct engine *e)
{
	for (unsigned i = 0; e->w && i < e->nw; i++) {
		struct worker *w = &e->w[i];

		for (unsigned s = 0; w->slots && s < w->nslots; s++)
			free(w->slots[s].buf);
		free(w->slots);
		free(w->st);
		free(w->h);
		free(w->hr);
		free(w->hw);
		free(w->gacc);
		free(w->gpend);
		free(w->gdirty);
		coffer_close(w->conn);
		pthread_mutex_destroy(&w->lock);
	}
	free(e->w);
	e->w = NULL;
	e->nw = 0;
	free(e->streams);
	e->streams = NULL;
	free(e->groups);
	e->groups = NULL;
	e->ngroups = 0;
}
