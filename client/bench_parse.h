/* SPDX-License-Identifier: MIT */
/*
 * coffer bench run plans: a vdbench-style parameter file (sd=, wd=, rd=,
 * hd=default) or the one-liner flags become one plan, a flat list of runs
 * with every for* loop and curve point expanded. The plan names datasets by
 * glob; bench.c expands the globs against the daemon's dataset list.
 */
#ifndef COFFER_BENCH_PARSE_H
#define COFFER_BENCH_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_XFER 16 /* entries of one xfersize distribution */

struct bench_xfer {
	uint32_t size; /* bytes */
	double pct;    /* share of I/Os, the entries of a wd add up to 100 */
};

/* Storage definition: which datasets, how many requests outstanding on each. */
struct bench_sd {
	char *name;       /* label that wd sd= refers to */
	char *dataset;    /* dataset name or fnmatch glob (dataset= or lun=; default: name) */
	unsigned threads; /* requests kept outstanding per dataset (queue depth) */
	bool range_set;
	bool range_bytes; /* range in bytes (a size suffix was given) or percent of the volume */
	double range_lo, range_hi;
	uint64_t size;    /* size=: only the first this many bytes are used; 0 = all */
	uint64_t hitarea; /* hitarea= of vdbench's sd: overrides the wd's; 0 = the wd's */
	int line;
};

/* Workload definition: the I/O mix on a set of sds. */
struct bench_wd {
	char *name;
	unsigned *sd_idx; /* indexes into plan->sd */
	unsigned nsd;
	double rdpct;   /* percent of reads */
	double seekpct; /* percent random; the rest continue sequentially */
	bool eof;       /* seekpct=eof: sequential, each dataset stops at its end */
	struct bench_xfer xfer[BENCH_MAX_XFER];
	unsigned nxfer;
	double rhpct;     /* percent of reads sent into the hit area */
	uint64_t hitarea; /* bytes at the start of the range */
	int line;
};

enum bench_rate {
	BENCH_RATE_MAX,   /* closed loop, as fast as it goes */
	BENCH_RATE_FIXED, /* open loop at rate I/O per second */
	BENCH_RATE_CURVE, /* open loop at rate percent of the result of run base */
};

/* One run, after every for* loop and curve point is expanded. */
struct bench_run {
	char *name;  /* rd name, with ".N" when the rd expands to several runs */
	char *label; /* what varies: "threads=4 xfersize=8k iorate=50%" */
	char *rd;    /* the rd= it came from */
	unsigned *wd_idx;
	unsigned nwd;
	enum bench_rate rate_kind;
	double rate;
	int base;           /* CURVE: index of the iorate=max run that defines 100 %; else -1 */
	double elapsed;     /* seconds */
	double interval;    /* seconds between report lines */
	double warmup;      /* seconds excluded from the averages and percentiles */
	unsigned threads;   /* forthreads/threads override of sd threads=, 0 = none */
	uint32_t xfersize;  /* forxfersize override of wd xfersize=, 0 = none */
	double rdpct;       /* forrdpct override of wd rdpct=, < 0 = none */
	int line;
};

struct bench_plan {
	struct bench_sd *sd;
	unsigned nsd;
	struct bench_wd *wd;
	unsigned nwd;
	struct bench_run *run;
	unsigned nrun;
	char **notes; /* warnings for the user, e.g. "hd=default ignored" */
	unsigned nnotes;
};

/* Everything on the command line of coffer bench. */
struct bench_args {
	const char *file;     /* parameter file, or NULL for the one-liner flags */
	const char *datasets; /* --datasets GLOB */
	const char *rw;       /* --rw randread|randwrite|read|write|randrw */
	uint32_t bs;          /* --bs */
	unsigned qd;          /* --qd */
	double time, warmup, interval;
	const char *rate; /* --rate max|N|curve */
	const char *curve; /* --curve 95,90,... */
	double rdpct;      /* --rdpct, < 0 = from --rw */
	const char *json, *csv;
	bool json_int;        /* --json-int: numbers in --json as numbers, else strings */
	bool verify;          /* -v */
	const char *journal;  /* --journal FILE (with -v) or -vr FILE */
	bool recover;         /* -vr: verify the journal's records first */
	const char *socket;   /* --socket PATH */
	int daemon_pid;       /* --daemon-pid, 0 = ask the daemon */
	unsigned nthreads;    /* --threads: OS threads, 0 = min(4, nproc) */
	bool quiet;           /* -q: no progress indicator */
	bool parse_only;      /* -s, --parse-only: check the plan, print it, run nothing */
	bool help;
};

/** Parse the argv of "coffer bench" (argv[0] is "bench"). @return 0 or -EINVAL with @err set */
int bench_args_parse(int argc, char **argv, struct bench_args *a, char *err, size_t errlen);

/** The plan of the one-liner flags in @a. @return 0 or -EINVAL/-ENOMEM with @err set */
int bench_plan_from_args(const struct bench_args *a, struct bench_plan **out, char *err,
			 size_t errlen);

/**
 * Parse the parameter file @text; @fname is only for messages, which read
 * "FILE:LINE: unknown keyword 'foo'". @return 0, -EINVAL or -ENOMEM
 */
int bench_plan_parse_text(const char *fname, const char *text, struct bench_plan **out, char *err,
			  size_t errlen);
/** Read and parse the file @path; -errno if it can't be read. */
int bench_plan_parse_file(const char *path, struct bench_plan **out, char *err, size_t errlen);
void bench_plan_free(struct bench_plan *p);

/* Sizes ("8k", "1m", "4096", "1.5g") are libstore's stor_parse_size(), as everywhere. */
/** "30", "30s", "5m", "1h", "0.5" into seconds. @return 0 or -EINVAL */
int bench_parse_time(const char *s, double *out);
/** "8k" style rendering of @bytes into @buf. */
const char *bench_fmt_size(uint64_t bytes, char *buf, size_t len);

#endif
