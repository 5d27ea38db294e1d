/* SPDX-License-Identifier: MIT */
/*
 * coffer bench: the load generator behind "coffer bench". See coffer-bench(8).
 *
 * coffer.c needs only bench_main(). The rest is shared by the three files
 * of the bench: bench.c (the command: datasets, the plan, the run of each
 * rd), bench_run.c (the engine: worker threads that issue, complete and
 * verify I/Os) and bench_report.c (interval lines, averages, percentiles,
 * CSV and JSON). The engine's workers write their counters under a lock the
 * main thread samples; nothing of the engine prints but error reports.
 */
#ifndef COFFER_BENCH_H
#define COFFER_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_parse.h"
#include "bench_verify.h"
#include "client.h"
#include "hist.h"

/**
 * Run "coffer bench" with its own argv (argv[0] is "bench").
 * @return the process exit status: 0 all runs done without errors, 1 I/O or
 * validation errors or a failure to run, 2 a usage error
 */
int bench_main(int argc, char **argv);

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
	unsigned group; /* index in engine.groups: the sd that brought the dataset in */
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
	uint64_t t_sched; /* when the schedule wanted it sent (rate control; warmup) */
	uint64_t t_sent;  /* when it was sent: response time counts from here, as in vdbench */
	bool busy;
	uint32_t gen;
};

/* Counters of completions; latencies in ns. */
struct acc {
	uint64_t reads, writes, rbytes, wbytes, errors, verrors;
	uint64_t zreads; /* reads that returned only zeros: records never written, mostly */
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
	struct acc *gacc; /* under lock, one per group: read and cleared by the main thread */
	struct acc *gpend; /* the worker's own: a batch of completions, per group */
	bool *gdirty;      /* which gpend entries the batch touched */
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
	/* the dataset groups of the run: its sds, in the plan's order; counted
	 * apart, so that one run compares them (clear against encrypted) */
	const struct bench_sd **groups;
	unsigned ngroups;
	bool total_only; /* no line per group: the -vr pass, whose sds are the journal's datasets */
	pthread_mutex_t rep_lock; /* error reports */
	unsigned reported;
	json_t *jerrors;
	/* across runs */
	int daemon_pid;
	FILE *csv;
	json_t *jruns;
	uint64_t total_errors, total_verrors;
};

/* Datasets of @plan's sd @sdi that matched its glob, as indexes into e->ds. */
struct sdmatch {
	unsigned *idx;
	unsigned n;
};

/* One line of figures: an interval or a run's average. */
struct line {
	double dur;
	struct acc a;
	double ccpu, dcpu; /* percent of one CPU; dcpu < 0 unknown */
};

/* What the main thread gathers over one run, for its report. */
struct tally {
	const struct bench_run *r;
	unsigned ri;              /* index of r in its plan */
	struct line tot;          /* the intervals after the warmup */
	struct acc *gtot;         /* the same counters per group (engine.groups) */
	struct acc *gint;         /* one interval's per group, before it counts or not */
	struct acc all;           /* every completion, warmup included: for the error counts */
	struct hist *h, *hr, *hw; /* all, read and write latencies after the warmup */
	json_t *jint;             /* the interval lines */
	unsigned k;               /* the next interval's number */
	char err[300];            /* why the run failed, "" if it did not */
};

/* ---- bench_run.c: the engine ---- */

/** CLOCK_MONOTONIC in ns. */
uint64_t bench_now_ns(void);

/** The text of reply status @status; @buf holds it when it is no STOR_E* code. */
const char *bench_errstr(int status, char *buf, size_t len);

/** Add the counters of @s to @d. */
void bench_acc_add(struct acc *d, const struct acc *s);

/**
 * Take (and clear) the counters the workers gathered since the last call:
 * the run's into @a, each group's into @g (e->ngroups entries) unless NULL.
 */
void bench_collect(struct engine *e, struct acc *a, struct acc *g);

/** True once every worker of the run has left its loop. */
bool bench_all_finished(const struct engine *e);

/**
 * Set up run @ri of @pl: its rate, its streams, the workers (not started) and
 * which worker owns each dataset. @return 0, or < 0 with @err set unless it
 * is -ENOMEM; bench_engine_free() cleans up either way.
 */
int bench_engine_setup(struct engine *e, const struct bench_plan *pl, unsigned ri,
		       const struct sdmatch *m, const double *base_iops, char *err,
		       size_t errlen);

/**
 * Start the workers, wait until each has connected and opened its datasets,
 * then start the clock. @param[out] started  the threads to join
 * @return 0, or < 0 with @err set: the workers started give up at once
 */
int bench_engine_start(struct engine *e, unsigned *started, char *err, size_t errlen);

/**
 * Join the @started workers and merge their latencies into @t's histograms.
 * @return the first worker's error when @t has none yet (then t->err says it), else 0
 */
int bench_engine_join(struct engine *e, unsigned started, struct tally *t);

/** Free the run's workers and streams; the datasets stay. */
void bench_engine_free(struct engine *e);

/* ---- bench_report.c: what a run prints and records ---- */

/** An error of an I/O on @ds at @off: to stderr (the first few) and to the JSON. */
__attribute__((format(printf, 4, 5))) void bench_report_error(struct engine *e,
							      const struct bds *ds, uint64_t off,
							      const char *fmt, ...);

/** CPU time of this process in seconds. */
double bench_client_cpu_s(void);

/** utime + stime of @pid in seconds, < 0 when unknown. */
double bench_daemon_cpu_s(int pid);

/** Open --csv @path and write its header. @return 0, or -1 (said on stderr) */
int bench_csv_open(struct engine *e, const char *path);

/** The line that names a run and the column header of its interval lines. */
void bench_report_start(const struct engine *e);

/** The progress line of a terminal, if stdout is one and -q is off. */
void bench_report_progress(const struct engine *e, const struct bench_plan *pl,
			   const struct tally *t, uint64_t now);

/** Interval @t->k: a text line, a CSV line and a JSON object in @t->jint. */
void bench_report_interval(struct engine *e, struct tally *t, const struct line *l);

/** The average, the percentiles and the error counts of a run. @return its I/O rate */
double bench_report_average(struct engine *e, const struct tally *t);

/** The JSON object of a run; takes @t->jint. */
json_t *bench_report_run_json(struct engine *e, struct tally *t);

/** Write --json @path: every run and error. @return 0 or -EIO (said on stderr) */
int bench_report_json(struct engine *e, const char *path);

#endif
