/* SPDX-License-Identifier: MIT */
/*
 * bench.c owns "coffer bench": it expands the plan's dataset globs against
 * the daemon's list, then for each run starts a few worker threads (one
 * connection each, min(4, CPUs) by default) that own disjoint sets of
 * datasets and keep each dataset's queue depth of requests outstanding
 * through the asynchronous client library. iorate=max is a closed loop;
 * iorate=N and curve points are an open loop: each stream has scheduled
 * issue times and latency counts from the scheduled time, so a stalled
 * daemon shows as latency instead of quietly lowering the offered load.
 * The main thread only samples counters once per interval and prints.
 * Validation state of a dataset (generations, busy units) is touched by the
 * one worker that owns the dataset in the current run, so it takes no lock.
 */
#include "config.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_parse.h"
#include "bench_verify.h"
#include "client.h"
#include "hist.h"
#include "store.h" /* the STOR_E* codes a reply status may carry */

#define MAX_WORKERS_DEFAULT 4
#define REAP_BATCH 64
#define DRAIN_NS (30ull * 1000000000ull) /* wait for stragglers after a run */
#define MAX_REPORTED 20                  /* error lines on stderr per run */
#define MAX_JSON_ERRORS 1000
#define NS 1000000000ull

/* One dataset, for the whole invocation. */
struct bds {
	char *name;
	uint64_t volsize;
	uint32_t recordsize;
	uint8_t guid[16];
	struct verify_ds *v; /* -v: last acknowledged generation of each record */
	uint32_t next_gen;   /* generations only grow, so stale data is always older */
	int worker;          /* owner in the current run */
	int handle;          /* on the owner's connection */
};

/* One (workload, dataset) pair of a run. */
struct stream {
	struct bds *ds;
	unsigned qd, inflight;
	unsigned slot0; /* its slots are slot0 .. slot0 + qd - 1 of its worker */
	uint64_t lo, hi;
	double rdpct, seekpct, rhpct;
	bool eof, done;
	struct bench_xfer xfer[BENCH_MAX_XFER];
	unsigned nxfer;
	uint64_t hitarea;
	uint64_t cursor;
	uint64_t period_ns, next_ns; /* open loop schedule */
};

struct slot {
	struct stream *st;
	uint8_t *buf;
	enum coffer_op op;
	uint64_t off;
	uint32_t len;
	uint64_t t_sched;
	bool busy;
	uint32_t gen;
};

struct acc {
	uint64_t reads, writes, rbytes, wbytes, errors, verrors;
	double rsum, wsum, sumsq; /* ns */
	uint64_t max;
};

struct engine;

struct worker {
	struct engine *e;
	pthread_t tid;
	unsigned idx;
	struct coffer_conn *conn;
	struct stream **st;
	unsigned nst;
	struct slot *slots;
	unsigned nslots, inflight;
	uint64_t rng;
	struct hist *h, *hr, *hw;
	pthread_mutex_t lock;
	struct acc acc; /* under lock: read and cleared by the main thread */
	atomic_bool finished;
	int err;
	char errmsg[300];
};

struct engine {
	const struct bench_args *a;
	const char *sock;
	struct bds *ds;
	unsigned nds;
	bool verify;
	/* the run in progress */
	const struct bench_run *run;
	double rate; /* total I/O per second for open loop, 0 = closed loop */
	uint64_t t0, end_ns, warm_ns;
	pthread_mutex_t go_lock;
	pthread_cond_t go_cond;
	unsigned ready; /* workers done with their setup */
	int go;         /* 1: start, -1: give up */
	atomic_bool stop;
	struct worker *w;
	unsigned nw;
	struct stream *streams;
	unsigned nstreams;
	pthread_mutex_t rep_lock; /* error reports */
	unsigned reported;
	json_t *jerrors;
	/* across runs */
	int daemon_pid;
	FILE *csv;
	json_t *jruns;
	uint64_t total_errors, total_verrors;
};

static atomic_bool interrupted;

static uint64_t now_ns(void)
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

static const char *errstr(int status, char *buf, size_t len)
{
	/* libstore's texts; a code neither errno nor the store knows keeps its number */
	if (status <= -4096 && !strcmp(stor_errname(status), "EUNKNOWN")) {
		snprintf(buf, len, "error %d", status);
		return buf;
	}
	return stor_strerror(status);
}

static void on_sigint(int sig)
{
	(void)sig;
	atomic_store(&interrupted, true);
}

/* ---- error reports ---- */

__attribute__((format(printf, 4, 5))) static void report(struct engine *e, const struct bds *ds,
							  uint64_t off, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&e->rep_lock);
	if (e->reported++ < MAX_REPORTED)
		fprintf(stderr, "\rcoffer bench: %s offset %" PRIu64 ": %s\n", ds->name, off, msg);
	else if (e->reported == MAX_REPORTED + 1)
		fprintf(stderr, "coffer bench: more errors; see the JSON output\n");
	if (e->jerrors && json_array_size(e->jerrors) < MAX_JSON_ERRORS)
		json_array_append_new(e->jerrors, json_pack("{s:s, s:I, s:s}", "dataset", ds->name,
							    "offset", (json_int_t)off, "error",
							    msg));
	pthread_mutex_unlock(&e->rep_lock);
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
static int issue(struct worker *w, struct stream *st, uint64_t t_sched)
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

static void complete(struct worker *w, struct slot *sl, int status, uint64_t now,
		     struct acc *a)
{
	struct engine *e = w->e;
	struct stream *st = sl->st;
	struct bds *ds = st->ds;
	uint64_t lat = now > sl->t_sched ? now - sl->t_sched : 0;
	bool read = sl->op == COFFER_READ;
	char eb[64];

	sl->busy = false;
	st->inflight--;
	w->inflight--;
	if (status < 0) {
		a->errors++;
		report(e, ds, sl->off, "%s of %u bytes failed: %s", read ? "read" : "write",
		       sl->len, errstr(status, eb, sizeof(eb)));
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
			report(e, ds, sl->off + k, "validation: %s (expected generation %u, found %u)",
			       verify_status_str(vs), ds->v->gen[u], got);
		}
	}
	if (e->verify)
		units_mark(ds, sl->off, sl->len, 0);
	if (status < 0 || now > e->end_ns)
		return;
	if (read) {
		a->reads++;
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

static void acc_add(struct acc *d, const struct acc *s)
{
	d->reads += s->reads;
	d->writes += s->writes;
	d->rbytes += s->rbytes;
	d->wbytes += s->wbytes;
	d->errors += s->errors;
	d->verrors += s->verrors;
	d->rsum += s->rsum;
	d->wsum += s->wsum;
	d->sumsq += s->sumsq;
	if (s->max > d->max)
		d->max = s->max;
}

static int reap_some(struct worker *w, int timeout_ms)
{
	struct coffer_completion c[REAP_BATCH];
	struct acc a = { 0 };
	uint64_t now;
	int n;

	n = coffer_reap(w->conn, c, REAP_BATCH, timeout_ms);
	if (n <= 0) {
		if (n < 0)
			snprintf(w->errmsg, sizeof(w->errmsg), "connection: %s", strerror(-n));
		return n;
	}
	now = now_ns();
	for (int i = 0; i < n; i++) {
		if (c[i].id >= w->nslots || !w->slots[c[i].id].busy) {
			snprintf(w->errmsg, sizeof(w->errmsg), "completion of unknown request %u",
				 c[i].id);
			return -EPROTO;
		}
		complete(w, &w->slots[c[i].id], c[i].status, now, &a);
	}
	pthread_mutex_lock(&w->lock);
	acc_add(&w->acc, &a);
	pthread_mutex_unlock(&w->lock);
	return n;
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
				 errstr(ret, eb, sizeof(eb)));
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

static void worker_loop(struct worker *w)
{
	struct engine *e = w->e;
	bool open_loop = e->rate > 0;
	int ret = 0;

	while (!atomic_load_explicit(&e->stop, memory_order_relaxed)) {
		uint64_t now = now_ns(), wake = e->end_ns;
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
					t = st->next_ns;
				}
				ret = issue(w, st, t);
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
		now = now_ns();
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
		uint64_t deadline = now_ns() + DRAIN_NS;

		while (ret == 0 && w->inflight && now_ns() < deadline) {
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
						 e->ds[i].name, errstr(ret, eb, sizeof(eb)));
			}
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
		now = now_ns();
		if (now < e->t0) {
			struct timespec ts = { 0, (long)(e->t0 - now) };

			nanosleep(&ts, NULL);
		}
		worker_loop(w);
	}
	atomic_store(&w->finished, true);
	return NULL;
}

/* ---- CPU ---- */

static double client_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

/* utime + stime of @pid in seconds, < 0 when unknown */
static double daemon_cpu_s(int pid)
{
	char path[64], line[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = '\0';
	/* the command name may hold blanks and parentheses: fields follow the last ')' */
	p = strrchr(line, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- output ---- */

struct line {
	double dur;
	struct acc a;
	double ccpu, dcpu; /* percent of one CPU; dcpu < 0 unknown */
};

struct figures {
	double iops, mbps, bpio, rdpct, resp, rresp, wresp, maxr, sdev, qd;
};

static void figures_of(const struct line *l, struct figures *f)
{
	uint64_t n = l->a.reads + l->a.writes;
	double mean;

	memset(f, 0, sizeof(*f));
	if (l->dur <= 0)
		return;
	f->iops = (double)n / l->dur;
	f->mbps = (double)(l->a.rbytes + l->a.wbytes) / l->dur / (1024.0 * 1024.0);
	if (!n)
		return;
	f->bpio = (double)(l->a.rbytes + l->a.wbytes) / (double)n;
	f->rdpct = 100.0 * (double)l->a.reads / (double)n;
	mean = (l->a.rsum + l->a.wsum) / (double)n;
	f->resp = mean / 1e6;
	f->rresp = l->a.reads ? l->a.rsum / (double)l->a.reads / 1e6 : 0;
	f->wresp = l->a.writes ? l->a.wsum / (double)l->a.writes / 1e6 : 0;
	f->maxr = (double)l->a.max / 1e6;
	f->sdev = sqrt(fmax(0, l->a.sumsq / (double)n - mean * mean)) / 1e6;
	/* Little's law: the mean number of I/Os in the system */
	f->qd = f->iops * mean / 1e9;
}

static void wall_clock(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts.tv_nsec / 1000000);
}

static void print_header(void)
{
	char date[64];
	time_t t = time(NULL);
	struct tm tm;

	localtime_r(&t, &tm);
	strftime(date, sizeof(date), "%b %d, %Y", &tm);
	printf("%-12s %9s %10s %8s %7s %6s %8s %8s %8s %8s %8s %6s %5s %7s\n", date, "interval",
	       "i/o", "MB/sec", "bytes", "read", "resp", "read", "write", "resp", "resp", "queue",
	       "cpu%", "cpu%");
	printf("%-12s %9s %10s %8s %7s %6s %8s %8s %8s %8s %8s %6s %5s %7s\n", "", "", "rate",
	       "1024**2", "i/o", "pct", "time", "resp", "resp", "max", "stddev", "depth", "clnt",
	       "cofferd");
}

static void print_line(const char *when, const char *label, const struct line *l)
{
	struct figures f;
	char dc[16];

	figures_of(l, &f);
	if (l->dcpu < 0)
		snprintf(dc, sizeof(dc), "-");
	else
		snprintf(dc, sizeof(dc), "%.1f", l->dcpu);
	printf("%-12s %9s %10.1f %8.2f %7.0f %6.2f %8.3f %8.3f %8.3f %8.3f %8.3f %6.1f %5.1f %7s\n",
	       when, label, f.iops, f.mbps, f.bpio, f.rdpct, f.resp, f.rresp, f.wresp, f.maxr,
	       f.sdev, f.qd, l->ccpu, dc);
}

static json_t *line_json(const struct line *l)
{
	struct figures f;

	figures_of(l, &f);
	return json_pack("{s:f, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
			 "s:f, s:o}",
			 "seconds", l->dur, "reads", (json_int_t)l->a.reads, "writes",
			 (json_int_t)l->a.writes, "errors", (json_int_t)l->a.errors, "iops", f.iops,
			 "mbps", f.mbps, "bytes_per_io", f.bpio, "read_pct", f.rdpct, "resp_ms",
			 f.resp, "read_resp_ms", f.rresp, "write_resp_ms", f.wresp, "max_resp_ms",
			 f.maxr, "resp_stddev_ms", f.sdev, "queue_depth", f.qd, "client_cpu_pct",
			 l->ccpu, "daemon_cpu_pct", l->dcpu < 0 ? json_null() : json_real(l->dcpu));
}

static void csv_line(struct engine *e, const char *when, const char *label, const struct line *l,
		     const struct hist *h)
{
	struct figures f;

	if (!e->csv)
		return;
	figures_of(l, &f);
	fprintf(e->csv, "%s,%s,%s,%s,%.3f,%.1f,%.3f,%.0f,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,%.1f,",
		e->run->name, e->run->label, when, label, l->dur, f.iops, f.mbps, f.bpio, f.rdpct,
		f.resp, f.rresp, f.wresp, f.maxr, f.sdev, f.qd, l->ccpu);
	if (l->dcpu >= 0)
		fprintf(e->csv, "%.1f", l->dcpu);
	if (h && h->count)
		fprintf(e->csv, ",%.4f,%.4f,%.4f,%.4f,%.4f\n", hist_percentile(h, 50) / 1e6,
			hist_percentile(h, 90) / 1e6, hist_percentile(h, 99) / 1e6,
			hist_percentile(h, 99.9) / 1e6, hist_percentile(h, 100) / 1e6);
	else
		fprintf(e->csv, ",,,,,\n");
}

static json_t *pct_json(const struct hist *h)
{
	return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "count", (json_int_t)h->count,
			 "mean_ms", hist_mean(h) / 1e6, "p50_ms", hist_percentile(h, 50) / 1e6,
			 "p90_ms", hist_percentile(h, 90) / 1e6, "p99_ms",
			 hist_percentile(h, 99) / 1e6, "p99.9_ms", hist_percentile(h, 99.9) / 1e6,
			 "max_ms", hist_percentile(h, 100) / 1e6);
}

/* ---- one run ---- */

static bool progress_on(const struct engine *e)
{
	return !e->a->quiet && isatty(STDOUT_FILENO);
}

static void collect(struct engine *e, struct acc *a)
{
	memset(a, 0, sizeof(*a));
	for (unsigned i = 0; i < e->nw; i++) {
		pthread_mutex_lock(&e->w[i].lock);
		acc_add(a, &e->w[i].acc);
		memset(&e->w[i].acc, 0, sizeof(e->w[i].acc));
		pthread_mutex_unlock(&e->w[i].lock);
	}
}

static bool all_finished(const struct engine *e)
{
	for (unsigned i = 0; i < e->nw; i++)
		if (!atomic_load(&e->w[i].finished))
			return false;
	return true;
}

/* Datasets of @plan's sd @sdi that matched its glob, as indexes into e->ds. */
struct sdmatch {
	unsigned *idx;
	unsigned n;
};

static int build_streams(struct engine *e, const struct bench_plan *pl, const struct bench_run *r,
			 const struct sdmatch *m, char *err, size_t errlen)
{
	unsigned n = 0;

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
	if (!e->streams)
		return -ENOMEM;
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
				st->qd = r->threads ? r->threads : sd->threads;
				st->rdpct = r->rdpct >= 0 ? r->rdpct : wd->rdpct;
				st->seekpct = wd->seekpct;
				st->eof = wd->eof;
				st->rhpct = wd->rhpct;
				st->hitarea = wd->hitarea;
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

static int run_one(struct engine *e, const struct bench_plan *pl, unsigned ri,
		   const struct sdmatch *m, double *base_iops, json_t **jrun_out)
{
	const struct bench_run *r = &pl->run[ri];
	struct line tot = { 0 }, l;
	struct acc all = { 0 }; /* every completion, warmup included: for the error counts */
	struct hist *h = NULL, *hr = NULL, *hw = NULL;
	json_t *jrun = NULL, *jint = NULL;
	unsigned nworkers, started = 0, k = 1;
	double cpu0, dcpu0, cpu1, dcpu1;
	uint64_t prev, ival = (uint64_t)(r->interval * 1e9);
	char err[300] = "", when[32], lbl[32];
	int ret = 0;

	e->run = r;
	e->rate = 0;
	if (r->rate_kind == BENCH_RATE_FIXED)
		e->rate = r->rate;
	else if (r->rate_kind == BENCH_RATE_CURVE)
		e->rate = base_iops[r->base] * r->rate / 100.0;
	if (r->rate_kind == BENCH_RATE_CURVE && e->rate <= 0) {
		fprintf(stderr, "coffer bench: run %s: the max run gave no rate to scale\n", r->name);
		return -EINVAL;
	}
	ret = build_streams(e, pl, r, m, err, sizeof(err));
	if (ret < 0)
		goto out;
	/* datasets go round robin to min(--threads, 4, CPUs) workers */
	nworkers = e->a->nthreads;
	if (!nworkers) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		nworkers = cpus > 0 && cpus < MAX_WORKERS_DEFAULT ? (unsigned)cpus :
								   MAX_WORKERS_DEFAULT;
	}
	for (unsigned i = 0; i < e->nds; i++)
		e->ds[i].worker = -1;
	{
		unsigned next = 0;

		for (unsigned i = 0; i < e->nstreams; i++)
			if (e->streams[i].ds->worker < 0)
				e->streams[i].ds->worker = (int)(next++ % nworkers);
		if (next < nworkers)
			nworkers = next;
	}
	e->w = calloc(nworkers, sizeof(*e->w));
	h = malloc(sizeof(*h));
	hr = malloc(sizeof(*hr));
	hw = malloc(sizeof(*hw));
	if (!e->w || !h || !hr || !hw) {
		ret = -ENOMEM;
		goto out;
	}
	hist_init(h);
	hist_init(hr);
	hist_init(hw);
	e->nw = nworkers;
	for (unsigned i = 0; i < nworkers; i++) {
		struct worker *w = &e->w[i];

		w->e = e;
		w->idx = i;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1) ^ (uint64_t)now_ns();
		pthread_mutex_init(&w->lock, NULL);
		w->st = calloc(e->nstreams, sizeof(*w->st));
		w->h = malloc(sizeof(*w->h));
		w->hr = malloc(sizeof(*w->hr));
		w->hw = malloc(sizeof(*w->hw));
		if (!w->st || !w->h || !w->hr || !w->hw) {
			ret = -ENOMEM;
			goto out;
		}
		hist_init(w->h);
		hist_init(w->hr);
		hist_init(w->hw);
	}
	for (unsigned i = 0; i < e->nstreams; i++) {
		struct worker *w = &e->w[e->streams[i].ds->worker];

		w->st[w->nst++] = &e->streams[i];
	}
	printf("\nStarting RD=%s; I/O rate: ", r->name);
	if (e->rate > 0)
		printf("%.0f", e->rate);
	else
		printf("Uncontrolled MAX");
	printf("; elapsed=%g; warmup=%g. %s; %u datasets, %u streams, %u connections\n", r->elapsed,
	       r->warmup, r->label, e->nds, e->nstreams, nworkers);
	print_header();
	fflush(stdout);

	pthread_mutex_init(&e->go_lock, NULL);
	pthread_cond_init(&e->go_cond, NULL);
	e->ready = 0;
	e->go = 0;
	atomic_store(&e->stop, false);
	e->t0 = UINT64_MAX;
	e->end_ns = UINT64_MAX;
	e->warm_ns = (uint64_t)(r->warmup * 1e9);
	for (; started < nworkers; started++)
		if (pthread_create(&e->w[started].tid, NULL, worker_main, &e->w[started])) {
			snprintf(err, sizeof(err), "cannot start a worker thread");
			ret = -EAGAIN;
			break;
		}
	/* every worker connects and opens its datasets before the clock starts */
	pthread_mutex_lock(&e->go_lock);
	while (e->ready < started)
		pthread_cond_wait(&e->go_cond, &e->go_lock);
	for (unsigned i = 0; i < started && ret == 0; i++)
		if (e->w[i].err < 0) {
			snprintf(err, sizeof(err), "%s", e->w[i].errmsg);
			ret = e->w[i].err;
		}
	e->t0 = now_ns() + NS / 100;
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
	if (ret < 0)
		goto join;
	jrun = json_object();
	jint = json_array();
	cpu0 = client_cpu_s();
	dcpu0 = daemon_cpu_s(e->daemon_pid);
	prev = e->t0;
	while (ret == 0) {
		uint64_t target = e->t0 + k * ival, now;
		bool done = false;

		if (target > e->end_ns)
			target = e->end_ns;
		for (;;) {
			now = now_ns();
			if (now >= target || (done = all_finished(e)) || atomic_load(&interrupted))
				break;
			if (progress_on(e))
				printf("\r  %s (%u of %u): %.0f of %gs\033[K\r", r->name, ri + 1,
				       pl->nrun, now > e->t0 ? (double)(now - e->t0) / 1e9 : 0.0,
				       r->elapsed), fflush(stdout);
			{
				uint64_t d = target - now > NS / 4 ? NS / 4 : target - now;
				struct timespec ts = { 0, (long)d };

				nanosleep(&ts, NULL);
			}
		}
		if (atomic_load(&interrupted))
			atomic_store(&e->stop, true), done = true;
		collect(e, &l.a);
		acc_add(&all, &l.a);
		cpu1 = client_cpu_s();
		dcpu1 = daemon_cpu_s(e->daemon_pid);
		l.dur = (double)(now - prev) / 1e9;
		l.ccpu = l.dur > 0 ? 100.0 * (cpu1 - cpu0) / l.dur : 0;
		l.dcpu = dcpu0 >= 0 && dcpu1 >= 0 && l.dur > 0 ? 100.0 * (dcpu1 - dcpu0) / l.dur : -1;
		cpu0 = cpu1;
		dcpu0 = dcpu1;
		if (l.dur > 0.001 || l.a.reads + l.a.writes) {
			wall_clock(when, sizeof(when));
			snprintf(lbl, sizeof(lbl), "%u", k);
			if (progress_on(e))
				printf("\r\033[K");
			print_line(when, lbl, &l);
			fflush(stdout);
			csv_line(e, when, lbl, &l, NULL);
			{
				json_t *o = line_json(&l);

				json_object_set_new(o, "interval", json_integer(k));
				json_object_set_new(o, "time", json_string(when));
				json_array_append_new(jint, o);
			}
			/* an interval that began at or after the warmup counts in the average */
			if (prev >= e->t0 + e->warm_ns - ival / 1000) {
				acc_add(&tot.a, &l.a);
				tot.dur += l.dur;
				tot.ccpu += l.ccpu * l.dur;
				tot.dcpu = l.dcpu < 0 || tot.dcpu < 0 ? -1 : tot.dcpu + l.dcpu * l.dur;
			}
		}
		prev = now;
		k++;
		if (done || now >= e->end_ns)
			break;
	}
	atomic_store(&e->stop, true);
join:
	for (unsigned i = 0; i < started; i++)
		pthread_join(e->w[i].tid, NULL);
	pthread_cond_destroy(&e->go_cond);
	pthread_mutex_destroy(&e->go_lock);
	{
		struct acc late;

		/* completions inside the run that arrived after the last sample */
		collect(e, &late);
		acc_add(&tot.a, &late);
		acc_add(&all, &late);
	}
	for (unsigned i = 0; i < nworkers; i++) {
		hist_merge(h, e->w[i].h);
		hist_merge(hr, e->w[i].hr);
		hist_merge(hw, e->w[i].hw);
		if (e->w[i].err < 0 && !err[0]) {
			snprintf(err, sizeof(err), "%s", e->w[i].errmsg);
			ret = e->w[i].err;
		}
	}
	e->total_errors += all.errors;
	e->total_verrors += all.verrors;
	if (tot.dur > 0) {
		char avg[48];
		struct figures f;

		tot.ccpu /= tot.dur;
		tot.dcpu = tot.dcpu < 0 ? -1 : tot.dcpu / tot.dur;
		snprintf(avg, sizeof(avg), "avg_%u-%u",
			 (unsigned)(r->warmup / r->interval + 1e-9) + 1, k > 1 ? k - 1 : 1);
		wall_clock(when, sizeof(when));
		print_line(when, avg, &tot);
		csv_line(e, when, avg, &tot, h);
		figures_of(&tot, &f);
		base_iops[ri] = f.iops;
		printf("%-12s %9s p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms "
		       "(%" PRIu64 " I/Os)\n",
		       when, "resp", hist_percentile(h, 50) / 1e6, hist_percentile(h, 90) / 1e6,
		       hist_percentile(h, 99) / 1e6, hist_percentile(h, 99.9) / 1e6,
		       hist_percentile(h, 100) / 1e6, h->count);
		if (all.errors || all.verrors)
			printf("%-12s %9s %" PRIu64 " I/O errors, %" PRIu64 " validation errors\n",
			       when, "errors", all.errors, all.verrors);
		fflush(stdout);
	}
	if (jrun) {
		json_t *ds = json_array();

		for (unsigned i = 0; i < e->nds; i++)
			if (e->ds[i].worker >= 0)
				json_array_append_new(ds, json_string(e->ds[i].name));
		json_object_set_new(jrun, "name", json_string(r->name));
		json_object_set_new(jrun, "rd", json_string(r->rd));
		json_object_set_new(jrun, "label", json_string(r->label));
		json_object_set_new(jrun, "iorate",
				    r->rate_kind == BENCH_RATE_MAX ? json_string("max") :
				    json_real(e->rate));
		json_object_set_new(jrun, "curve_pct", r->rate_kind == BENCH_RATE_CURVE ?
							       json_real(r->rate) : json_null());
		json_object_set_new(jrun, "elapsed", json_real(r->elapsed));
		json_object_set_new(jrun, "interval", json_real(r->interval));
		json_object_set_new(jrun, "warmup", json_real(r->warmup));
		json_object_set_new(jrun, "threads", json_integer(r->threads));
		json_object_set_new(jrun, "xfersize", json_integer(r->xfersize));
		json_object_set_new(jrun, "rdpct", r->rdpct >= 0 ? json_real(r->rdpct) : json_null());
		json_object_set_new(jrun, "connections", json_integer(nworkers));
		json_object_set_new(jrun, "streams", json_integer(e->nstreams));
		json_object_set_new(jrun, "datasets", ds);
		json_object_set_new(jrun, "intervals", jint);
		jint = NULL;
		json_object_set_new(jrun, "average", line_json(&tot));
		json_object_set_new(jrun, "latency", pct_json(h));
		json_object_set_new(jrun, "read_latency", pct_json(hr));
		json_object_set_new(jrun, "write_latency", pct_json(hw));
		json_object_set_new(jrun, "io_errors", json_integer((json_int_t)all.errors));
		json_object_set_new(jrun, "validation_errors",
				    json_integer((json_int_t)all.verrors));
		json_object_set_new(jrun, "error", err[0] ? json_string(err) : json_null());
	}
out:
	if (err[0])
		fprintf(stderr, "coffer bench: run %s: %s\n", r->name, err);
	for (unsigned i = 0; e->w && i < e->nw; i++) {
		struct worker *w = &e->w[i];

		for (unsigned s = 0; w->slots && s < w->nslots; s++)
			free(w->slots[s].buf);
		free(w->slots);
		free(w->st);
		free(w->h);
		free(w->hr);
		free(w->hw);
		coffer_close(w->conn);
		pthread_mutex_destroy(&w->lock);
	}
	free(e->w);
	e->w = NULL;
	e->nw = 0;
	free(e->streams);
	e->streams = NULL;
	free(h);
	free(hr);
	free(hw);
	json_decref(jint);
	*jrun_out = jrun;
	return ret;
}

/* ---- setup ---- */

static int add_dataset(struct engine *e, struct coffer_conn *c, const char *name,
		       const char *guid)
{
	struct bds *n, *ds;
	uint64_t volsize = 0;
	uint32_t rs = 0;
	int h;

	for (unsigned i = 0; i < e->nds; i++)
		if (!strcmp(e->ds[i].name, name))
			return (int)i;
	h = coffer_ds_open(c, name, &volsize, &rs);
	if (h < 0) {
		char eb[64];

		fprintf(stderr, "coffer bench: open %s: %s\n", name, errstr(h, eb, sizeof(eb)));
		return h;
	}
	coffer_ds_close(c, h);
	n = realloc(e->ds, (e->nds + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	e->ds = n;
	ds = &e->ds[e->nds];
	memset(ds, 0, sizeof(*ds));
	ds->name = strdup(name);
	if (!ds->name)
		return -ENOMEM;
	ds->volsize = volsize;
	ds->recordsize = rs ? rs : 8192;
	verify_guid(name, guid, ds->guid);
	if (e->verify) {
		int ret = verify_ds_new(name, ds->guid, ds->recordsize, volsize / ds->recordsize,
					&ds->v);
		if (ret < 0) {
			free(ds->name);
			fprintf(stderr, "coffer bench: %s: cannot validate (recordsize %u, "
				"volsize %" PRIu64 ")\n", name, ds->recordsize, volsize);
			return ret;
		}
	}
	return (int)e->nds++;
}

/* Expand every sd glob against the daemon's dataset list. */
static int match_sds(struct engine *e, struct coffer_conn *c, const struct bench_plan *pl,
		     struct sdmatch *m)
{
	json_t *reply = NULL, *arr;
	char err[256];
	size_t i;
	json_t *it;
	int ret;
	json_t *args = json_pack("{s:[s,s]}", "props", "volsize", "guid");

	ret = coffer_call(c, "ds_list", args, &reply, err, sizeof(err));
	json_decref(args);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: ds_list: %s\n", err[0] ? err : strerror(-ret));
		return ret;
	}
	arr = json_object_get(reply, "datasets");
	for (unsigned s = 0; s < pl->nsd; s++) {
		m[s].idx = calloc(json_array_size(arr) + 1, sizeof(unsigned));
		if (!m[s].idx) {
			ret = -ENOMEM;
			goto out;
		}
		json_array_foreach(arr, i, it) {
			const char *name = json_string_value(json_object_get(it, "name"));
			json_t *props = json_object_get(it, "props");
			const char *guid = json_string_value(json_object_get(it, "guid"));

			if (!guid)
				guid = json_string_value(json_object_get(props, "guid"));
			if (!name || fnmatch(pl->sd[s].dataset, name, 0))
				continue;
			/* a pool's root dataset has no volume to load */
			if (!strcmp(json_string_value(json_object_get(props, "volsize")) ?: "", "0"))
				continue;
			ret = add_dataset(e, c, name, guid);
			if (ret < 0)
				goto out;
			m[s].idx[m[s].n++] = (unsigned)ret;
		}
		if (!m[s].n) {
			fprintf(stderr, "coffer bench: sd=%s: no dataset matches '%s'\n",
				pl->sd[s].name, pl->sd[s].dataset);
			ret = -ENOENT;
			goto out;
		}
	}
	ret = 0;
out:
	json_decref(reply);
	return ret;
}

static int find_daemon_pid(struct coffer_conn *c)
{
	static const char *const cmds[] = { "version", "stats" };
	struct ucred cred;
	socklen_t len = sizeof(cred);

	for (unsigned i = 0; i < 2; i++) {
		json_t *reply = NULL;
		json_int_t pid;

		if (coffer_call(c, cmds[i], NULL, &reply, NULL, 0) < 0)
			continue;
		pid = json_integer_value(json_object_get(reply, "pid"));
		json_decref(reply);
		if (pid > 0)
			return (int)pid;
	}
	/* the peer of a Unix socket is the daemon itself */
	if (getsockopt(coffer_fd(c), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
		return cred.pid;
	return 0;
}

/*
 * -vr: the journal's datasets come first, then a pass that reads every
 * record the journal knows and checks it. Returns a plan for that pass.
 */
static int recover_plan(struct engine *e, struct coffer_conn *c, const char *journal,
			struct bench_plan **out, struct sdmatch **mout)
{
	struct verify_ds **j = NULL;
	unsigned nj = 0;
	char *text = NULL, err[300];
	size_t len = 0;
	FILE *f = NULL;
	struct sdmatch *m = NULL;
	int ret;

	*out = NULL;
	ret = verify_journal_load(journal, &j, &nj);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: journal %s: %s\n", journal,
			ret == -EBADMSG ? "not a journal or damaged" : strerror(-ret));
		return ret;
	}
	f = open_memstream(&text, &len);
	if (!f) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < nj; i++) {
		int idx = add_dataset(e, c, j[i]->name, NULL);
		struct bds *ds;

		if (idx < 0) {
			ret = idx;
			goto out;
		}
		ds = &e->ds[idx];
		if (ds->v->unit != j[i]->unit || ds->v->nunits != j[i]->nunits) {
			fprintf(stderr, "coffer bench: %s: recordsize or volsize differs from the "
				"journal\n", ds->name);
			ret = -EINVAL;
			goto out;
		}
		memcpy(ds->guid, j[i]->guid, 16);
		memcpy(ds->v->guid, j[i]->guid, 16);
		memcpy(ds->v->gen, j[i]->gen, j[i]->nunits * sizeof(uint32_t));
		for (uint64_t u = 0; u < j[i]->nunits; u++)
			if (j[i]->gen[u] != VERIFY_GEN_UNKNOWN && j[i]->gen[u] > ds->next_gen)
				ds->next_gen = j[i]->gen[u];
		fprintf(f, "sd=j%u,dataset=%s,threads=8\nwd=jw%u,sd=j%u,rdpct=100,seekpct=eof,"
			"xfersize=%u\n", i, ds->name, i, i, ds->recordsize);
	}
	fprintf(f, "rd=verify,wd=jw*,iorate=max,elapsed=100h,interval=1\n");
	fclose(f);
	f = NULL;
	ret = bench_plan_parse_text(journal, text, out, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		goto out;
	}
	m = calloc((*out)->nsd, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned s = 0; s < (*out)->nsd; s++) {
		m[s].idx = calloc(1, sizeof(unsigned));
		if (!m[s].idx) {
			ret = -ENOMEM;
			goto out;
		}
		for (unsigned d = 0; d < e->nds; d++)
			if (!strcmp(e->ds[d].name, (*out)->sd[s].dataset))
				m[s].idx[m[s].n++] = d;
	}
	*mout = m;
	m = NULL;
out:
	if (f)
		fclose(f);
	free(text);
	for (unsigned i = 0; i < nj; i++)
		verify_ds_free(j[i]);
	free(j);
	if (m) {
		for (unsigned s = 0; s < (*out)->nsd; s++)
			free(m[s].idx);
		free(m);
	}
	if (ret < 0) {
		bench_plan_free(*out);
		*out = NULL;
	}
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: coffer bench [options] PARAMFILE\n"
		"       coffer bench --datasets GLOB [--rw randread|randwrite|read|write|randrw]\n"
		"                    [--bs 8k] [--qd N] [--time 30s] [--rate max|N|curve]\n"
		"                    [--curve 95,90,...] [--warmup 5s] [--rdpct N] [--interval 1]\n"
		"options: --json FILE  --csv FILE  -v [--journal FILE]  -vr JOURNAL\n"
		"         --socket PATH  --daemon-pid PID  --threads N  -q\n"
		"See coffer-bench(8).\n");
}

static int run_plan(struct engine *e, const struct bench_plan *pl, const struct sdmatch *m)
{
	double *base = calloc(pl->nrun, sizeof(*base));
	int ret = 0;

	if (!base)
		return -ENOMEM;
	for (unsigned i = 0; i < pl->nrun && !atomic_load(&interrupted); i++) {
		json_t *jr = NULL;

		ret = run_one(e, pl, i, m, base, &jr);
		if (jr)
			json_array_append_new(e->jruns, jr);
		if (ret < 0)
			break;
	}
	free(base);
	return ret;
}

int bench_main(int argc, char **argv)
{
	struct bench_args a;
	struct bench_plan *plan = NULL, *rplan = NULL;
	struct sdmatch *m = NULL, *rm = NULL;
	struct engine e = { 0 };
	struct coffer_conn *admin = NULL;
	struct sigaction sa = { 0 };
	char err[512];
	json_t *doc = NULL;
	int ret, status = 1;

	pthread_mutex_init(&e.rep_lock, NULL);
	ret = bench_args_parse(argc, argv, &a, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		usage(stderr);
		return 2;
	}
	if (a.help) {
		usage(stdout);
		return 0;
	}
	if (a.file)
		ret = bench_plan_parse_file(a.file, &plan, err, sizeof(err));
	else if (a.datasets)
		ret = bench_plan_from_args(&a, &plan, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		return 2;
	}
	for (unsigned i = 0; plan && i < plan->nnotes; i++)
		fprintf(stderr, "coffer bench: note: %s\n", plan->notes[i]);
	e.a = &a;
	e.verify = a.verify;
	e.sock = coffer_socket_path(a.socket);
	e.jruns = json_array();
	e.jerrors = json_array();
	if (!e.jruns || !e.jerrors) {
		ret = -ENOMEM;
		goto out;
	}
	if (a.csv) {
		e.csv = fopen(a.csv, "w");
		if (!e.csv) {
			fprintf(stderr, "coffer bench: %s: %s\n", a.csv, strerror(errno));
			goto out;
		}
		fprintf(e.csv, "run,label,time,interval,seconds,iops,mbps,bytes_per_io,read_pct,"
			"resp_ms,read_resp_ms,write_resp_ms,max_resp_ms,resp_stddev_ms,queue_depth,"
			"client_cpu_pct,daemon_cpu_pct,p50_ms,p90_ms,p99_ms,p99.9_ms,max_ms\n");
	}
	ret = coffer_connect(e.sock, &admin);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: connect %s: %s (is cofferd running?)\n", e.sock,
			strerror(-ret));
		goto out;
	}
	e.daemon_pid = a.daemon_pid ? a.daemon_pid : find_daemon_pid(admin);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (a.recover) {
		ret = recover_plan(&e, admin, a.journal, &rplan, &rm);
		if (ret < 0)
			goto out;
	}
	if (plan) {
		m = calloc(plan->nsd, sizeof(*m));
		if (!m) {
			ret = -ENOMEM;
			goto out;
		}
		ret = match_sds(&e, admin, plan, m);
		if (ret < 0)
			goto out;
	}
	if (rplan) {
		printf("Validating every record of journal %s\n", a.journal);
		ret = run_plan(&e, rplan, rm);
		if (ret < 0)
			goto out;
	}
	if (plan)
		ret = run_plan(&e, plan, m);
out:
	if (e.verify && e.nds && (plan || rplan)) {
		struct verify_ds **v = calloc(e.nds, sizeof(*v));
		const char *jpath = a.journal ? a.journal : "coffer-bench.journal";
		int jr;

		for (unsigned i = 0; v && i < e.nds; i++)
			v[i] = e.ds[i].v;
		jr = v ? verify_journal_save(jpath, v, e.nds) : -ENOMEM;
		if (jr < 0) {
			fprintf(stderr, "coffer bench: journal %s: %s\n", jpath, strerror(-jr));
			ret = ret < 0 ? ret : jr;
		}
		free(v);
	}
	if (e.verify && e.nds)
		printf("validation: %" PRIu64 " errors\n", e.total_verrors);
	if (a.json && e.jruns) {
		char host[256] = "";

		gethostname(host, sizeof(host) - 1);
		doc = json_pack("{s:i, s:s, s:s, s:i, s:b, s:O, s:O, s:I, s:I}", "version", 1,
				"host", host, "socket", e.sock ? e.sock : "", "daemon_pid",
				e.daemon_pid, "verify", e.verify, "runs", e.jruns, "errors",
				e.jerrors, "io_errors", (json_int_t)e.total_errors,
				"validation_errors", (json_int_t)e.total_verrors);
		if (!doc || json_dump_file(doc, a.json, JSON_INDENT(1) | JSON_REAL_PRECISION(6))) {
			fprintf(stderr, "coffer bench: %s: cannot write\n", a.json);
			ret = ret < 0 ? ret : -EIO;
		}
	}
	if (ret == 0 && !e.total_errors && !e.total_verrors && !atomic_load(&interrupted))
		status = 0;
	json_decref(doc);
	json_decref(e.jruns);
	json_decref(e.jerrors);
	if (e.csv)
		fclose(e.csv);
	coffer_close(admin);
	for (unsigned s = 0; m && s < plan->nsd; s++)
		free(m[s].idx);
	for (unsigned s = 0; rm && s < rplan->nsd; s++)
		free(rm[s].idx);
	free(m);
	free(rm);
	for (unsigned i = 0; i < e.nds; i++) {
		free(e.ds[i].name);
		verify_ds_free(e.ds[i].v);
	}
	free(e.ds);
	bench_plan_free(plan);
	bench_plan_free(rplan);
	pthread_mutex_destroy(&e.rep_lock);
	return status;
}
