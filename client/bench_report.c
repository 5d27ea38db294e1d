/* SPDX-License-Identifier: MIT */
/*
 * bench_report.c owns what "coffer bench" prints and records: the
 * vdbench-style interval lines and averages on stdout, the latency
 * percentiles, the --csv lines, the --json document and the error reports
 * of failed or wrong I/Os (the first few on stderr, up to a thousand in the
 * JSON). Its figures come from the counters the main thread samples from
 * the workers; it keeps no state of its own but the engine's output files.
 * Every format here is read by scripts (contrib/bench, the e2e tests):
 * a column or key changes only with them.
 */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "jsonout.h"

#define MAX_REPORTED 20 /* error lines on stderr per run */
#define MAX_JSON_ERRORS 1000

/* ---- error reports ---- */

void bench_report_error(struct engine *e, const struct bds *ds, uint64_t off, const char *fmt,
			...)
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

/* ---- CPU ---- */

double bench_client_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

double bench_daemon_cpu_s(int pid)
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

/* A CPU percentage as the lines print it: "-" when unknown (< 0). */
static const char *cpu_text(double pct, char *buf, size_t len)
{
	if (pct < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f", pct);
	return buf;
}

static void print_line(const char *when, const char *label, const struct line *l)
{
	struct figures f;
	char cc[16], dc[16];

	figures_of(l, &f);
	printf("%-12s %9s %10.1f %8.2f %7.0f %6.2f %8.3f %8.3f %8.3f %8.3f %8.3f %6.1f %5s %7s\n",
	       when, label, f.iops, f.mbps, f.bpio, f.rdpct, f.resp, f.rresp, f.wresp, f.maxr,
	       f.sdev, f.qd, cpu_text(l->ccpu, cc, sizeof(cc)), cpu_text(l->dcpu, dc, sizeof(dc)));
}

static json_t *line_json(const struct line *l)
{
	struct figures f;

	figures_of(l, &f);
	return json_pack("{s:f, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
			 "s:o, s:o}",
			 "seconds", l->dur, "reads", (json_int_t)l->a.reads, "writes",
			 (json_int_t)l->a.writes, "errors", (json_int_t)l->a.errors, "iops", f.iops,
			 "mbps", f.mbps, "bytes_per_io", f.bpio, "read_pct", f.rdpct, "resp_ms",
			 f.resp, "read_resp_ms", f.rresp, "write_resp_ms", f.wresp, "max_resp_ms",
			 f.maxr, "resp_stddev_ms", f.sdev, "queue_depth", f.qd, "client_cpu_pct",
			 l->ccpu < 0 ? json_null() : json_real(l->ccpu), "daemon_cpu_pct",
			 l->dcpu < 0 ? json_null() : json_real(l->dcpu));
}

static void csv_line(struct engine *e, const char *when, const char *label, const struct line *l,
		     const struct hist *h)
{
	struct figures f;

	if (!e->csv)
		return;
	figures_of(l, &f);
	fprintf(e->csv, "%s,%s,%s,%s,%.3f,%.1f,%.3f,%.0f,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,",
		e->run->name, e->run->label, when, label, l->dur, f.iops, f.mbps, f.bpio, f.rdpct,
		f.resp, f.rresp, f.wresp, f.maxr, f.sdev, f.qd);
	if (l->ccpu >= 0)
		fprintf(e->csv, "%.1f", l->ccpu);
	fputc(',', e->csv);
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

/* ---- a run ---- */

static bool progress_on(const struct engine *e)
{
	return !e->a->quiet && isatty(STDOUT_FILENO);
}

int bench_csv_open(struct engine *e, const char *path)
{
	e->csv = fopen(path, "w");
	if (!e->csv) {
		fprintf(stderr, "coffer bench: %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(e->csv, "run,label,time,interval,seconds,iops,mbps,bytes_per_io,read_pct,"
		"resp_ms,read_resp_ms,write_resp_ms,max_resp_ms,resp_stddev_ms,queue_depth,"
		"client_cpu_pct,daemon_cpu_pct,p50_ms,p90_ms,p99_ms,p99.9_ms,max_ms\n");
	return 0;
}

void bench_report_start(const struct engine *e)
{
	const struct bench_run *r = e->run;

	printf("\nStarting RD=%s; I/O rate: ", r->name);
	if (e->rate > 0)
		printf("%.0f", e->rate);
	else
		printf("Uncontrolled MAX");
	printf("; elapsed=%g; warmup=%g. %s; %u datasets, %u streams, %u connections\n", r->elapsed,
	       r->warmup, r->label, e->nds, e->nstreams, e->nw);
	print_header();
	fflush(stdout);
}

void bench_report_progress(const struct engine *e, const struct bench_plan *pl,
			   const struct tally *t, uint64_t now)
{
	if (progress_on(e))
		printf("\r  %s (%u of %u): %.0f of %gs\033[K\r", t->r->name, t->ri + 1, pl->nrun,
		       now > e->t0 ? (double)(now - e->t0) / 1e9 : 0.0, t->r->elapsed),
			fflush(stdout);
}

void bench_report_interval(struct engine *e, struct tally *t, const struct line *l)
{
	char when[32], lbl[32];
	json_t *o;

	wall_clock(when, sizeof(when));
	snprintf(lbl, sizeof(lbl), "%u", t->k);
	if (progress_on(e))
		printf("\r\033[K");
	print_line(when, lbl, l);
	fflush(stdout);
	csv_line(e, when, lbl, l, NULL);
	o = line_json(l);
	json_object_set_new(o, "interval", json_integer(t->k));
	json_object_set_new(o, "time", json_string(when));
	json_array_append_new(t->jint, o);
}

/* Group @g's average line: its counters over the run's time after the warmup; CPU unknown. */
static void group_line(const struct tally *t, unsigned g, struct line *l)
{
	*l = (struct line){ .dur = t->tot.dur, .a = t->gtot[g], .ccpu = -1, .dcpu = -1 };
}

double bench_report_average(struct engine *e, const struct tally *t)
{
	const struct bench_run *r = t->r;
	const struct hist *h = t->h;
	unsigned k = t->k;
	char avg[48], when[32];
	struct figures f;

	snprintf(avg, sizeof(avg), "avg_%u-%u", (unsigned)(r->warmup / r->interval + 1e-9) + 1,
		 k > 1 ? k - 1 : 1);
	wall_clock(when, sizeof(when));
	print_line(when, avg, &t->tot);
	csv_line(e, when, avg, &t->tot, h);
	figures_of(&t->tot, &f);
	printf("%-12s %9s p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms "
	       "(%" PRIu64 " I/Os)\n",
	       when, "resp", hist_percentile(h, 50) / 1e6, hist_percentile(h, 90) / 1e6,
	       hist_percentile(h, 99) / 1e6, hist_percentile(h, 99.9) / 1e6,
	       hist_percentile(h, 100) / 1e6, h->count);
	if (t->all.errors || t->all.verrors)
		printf("%-12s %9s %" PRIu64 " I/O errors, %" PRIu64 " validation errors\n", when,
		       "errors", t->all.errors, t->all.verrors);
	/* with several groups (sds), each one's average: clear and encrypted side by side */
	for (unsigned g = 0; e->ngroups > 1 && !e->total_only && g < e->ngroups; g++) {
		struct line gl;
		char lbl[160];

		group_line(t, g, &gl);
		snprintf(lbl, sizeof(lbl), "sd=%s", e->groups[g]->name);
		print_line(when, lbl, &gl);
		csv_line(e, when, lbl, &gl, NULL);
	}
	fflush(stdout);
	/* reads of holes cost no LUN read and no decryption: such a run measures little */
	if (t->all.reads >= 16 && t->all.zreads * 2 > t->all.reads)
		fprintf(stderr,
			"coffer bench: run %s: warning: %.0f%% of reads hit unwritten records: fill "
			"the datasets first, e.g. seekpct=eof\n",
			r->name, 100.0 * (double)t->all.zreads / (double)t->all.reads);
	return f.iops;
}

/*
 * What the streams of group @g (-1: of the run) used, set in @o: "threads"
 * (requests kept outstanding per dataset), "xfersize" (bytes) and "rdpct",
 * after the sd, wd and for-loop settings are applied; each is null when the
 * streams differ in it (an xfersize distribution differs from itself).
 */
static void set_used(json_t *o, const struct engine *e, int g)
{
	const struct stream *first = NULL;
	bool qd = true, xfer = true, rd = true;

	for (unsigned i = 0; i < e->nstreams; i++) {
		const struct stream *st = &e->streams[i];

		if (g >= 0 && st->group != (unsigned)g)
			continue;
		xfer &= st->nxfer == 1;
		if (!first) {
			first = st;
			continue;
		}
		qd &= st->qd == first->qd;
		xfer &= st->xfer[0].size == first->xfer[0].size;
		rd &= st->rdpct == first->rdpct;
	}
	json_object_set_new(o, "threads", first && qd ? json_integer(first->qd) : json_null());
	json_object_set_new(o, "xfersize",
			    first && xfer ? json_integer(first->xfer[0].size) : json_null());
	json_object_set_new(o, "rdpct", first && rd ? json_real(first->rdpct) : json_null());
}

/* The run's groups (sds): what each ran on and with, and its average line. */
static json_t *groups_json(const struct engine *e, const struct tally *t)
{
	json_t *arr = json_array();

	for (unsigned g = 0; g < e->ngroups; g++) {
		json_t *o = json_object(), *ds = json_array();
		unsigned nst = 0;
		struct line gl;

		for (unsigned i = 0; i < e->nstreams; i++) {
			const struct stream *st = &e->streams[i];
			bool seen = false;

			if (st->group != g)
				continue;
			nst++;
			/* a dataset two workloads of the group run on is listed once */
			for (unsigned j = 0; j < i && !seen; j++)
				seen = e->streams[j].group == g && e->streams[j].ds == st->ds;
			if (!seen)
				json_array_append_new(ds, json_string(st->ds->name));
		}
		group_line(t, g, &gl);
		json_object_set_new(o, "sd", json_string(e->groups[g]->name));
		json_object_set_new(o, "dataset", json_string(e->groups[g]->dataset));
		json_object_set_new(o, "datasets", ds);
		json_object_set_new(o, "streams", json_integer(nst));
		set_used(o, e, (int)g);
		json_object_set_new(o, "average", line_json(&gl));
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *bench_report_run_json(struct engine *e, struct tally *t)
{
	const struct bench_run *r = t->r;
	json_t *jrun = json_object(), *ds = json_array();

	for (unsigned i = 0; i < e->nds; i++)
		if (e->ds[i].worker >= 0)
			json_array_append_new(ds, json_string(e->ds[i].name));
	json_object_set_new(jrun, "name", json_string(r->name));
	json_object_set_new(jrun, "rd", json_string(r->rd));
	json_object_set_new(jrun, "label", json_string(r->label));
	json_object_set_new(jrun, "iorate",
			    r->rate_kind == BENCH_RATE_MAX ? json_string("max") :
							     json_real(e->rate));
	json_object_set_new(jrun, "curve_pct",
			    r->rate_kind == BENCH_RATE_CURVE ? json_real(r->rate) : json_null());
	json_object_set_new(jrun, "elapsed", json_real(r->elapsed));
	json_object_set_new(jrun, "interval", json_real(r->interval));
	json_object_set_new(jrun, "warmup", json_real(r->warmup));
	set_used(jrun, e, -1);
	json_object_set_new(jrun, "connections", json_integer(e->nw));
	json_object_set_new(jrun, "streams", json_integer(e->nstreams));
	json_object_set_new(jrun, "datasets", ds);
	json_object_set_new(jrun, "groups", groups_json(e, t));
	json_object_set_new(jrun, "intervals", t->jint);
	t->jint = NULL;
	json_object_set_new(jrun, "average", line_json(&t->tot));
	json_object_set_new(jrun, "latency", pct_json(t->h));
	json_object_set_new(jrun, "read_latency", pct_json(t->hr));
	json_object_set_new(jrun, "write_latency", pct_json(t->hw));
	json_object_set_new(jrun, "zero_reads", json_integer((json_int_t)t->all.zreads));
	json_object_set_new(jrun, "io_errors", json_integer((json_int_t)t->all.errors));
	json_object_set_new(jrun, "validation_errors", json_integer((json_int_t)t->all.verrors));
	json_object_set_new(jrun, "error", t->err[0] ? json_string(t->err) : json_null());
	return jrun;
}

int bench_report_json(struct engine *e, const char *path)
{
	char host[256] = "";
	json_t *doc, *body;
	int ret = 0;

	gethostname(host, sizeof(host) - 1);
	/* the shape of coffer -j (jsonout.c): output_version first, numbers as strings unless
	 * --json-int, and every digit a real has (1 MiB/s is 1048576, not 1048580) */
	jout_int = e->a->json_int;
	doc = jout_doc("coffer bench", NULL);
	/* 2: threads, xfersize and rdpct of a run are what it ran with, not the for-loop overrides */
	body = json_pack("{s:i, s:s, s:s, s:i, s:b, s:O, s:O, s:I, s:I}", "version", 2, "host", host,
			 "socket", e->sock ? e->sock : "", "daemon_pid", e->daemon_pid, "verify",
			 e->verify, "runs", e->jruns, "errors", e->jerrors, "io_errors",
			 (json_int_t)e->total_errors, "validation_errors",
			 (json_int_t)e->total_verrors);
	json_object_update(doc, body);
	json_decref(body);
	jout_numbers(doc);
	if (!doc || json_dump_file(doc, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER)) {
		fprintf(stderr, "coffer bench: %s: cannot write\n", path);
		ret = -EIO;
	}
	json_decref(doc);
	return ret;
}
