/* SPDX-License-Identifier: MIT */
/*
 * The reports of coffer pool iostat, as zpool iostat prints them: a row a
 * pool (with -v a row a vdev, a mirror's sides indented under it) of
 * capacity, operations and bandwidth per second, with -l the average waits
 * and with -q what is in flight; -w prints latency histograms instead.
 *
 * The daemon hands over each LUN's raw counters since its open, with the
 * time they were read (pool_iostat); everything here is arithmetic on two
 * such replies: the first report divides by the time since each LUN
 * opened, a later one by the time between its reply and the one before.
 * A row above a LUN (a mirror, the pool) sums its LUNs: a mirror's write
 * counts on every side it reached, as zpool's physical I/O does. Rates sum
 * per LUN, each over its own span; the waits average over the extents that
 * completed in the span. A faulted pool (no LUNs open) is a row of "-".
 * This file only reads replies and prints; the verb (coffer.c) asks, waits
 * and repeats.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "iostat.h"
#include "store.h"

#define NB STOR_LUN_HIST_BUCKETS

/* What a row adds up over its LUNs. */
struct acc {
	double ops[2], bytes[2];            /* per second */
	uint64_t n[2], wait[2], disk[2];    /* in the span: extents, their summed waits (ns) */
	uint64_t inflight[2];               /* now */
	uint64_t hist[2][NB], dhist[2][NB]; /* in the span */
	int space;                          /* has alloc and free */
	uint64_t alloc, free;
};

static uint64_t at(json_t *a, size_t i)
{
	return (uint64_t)json_integer_value(json_array_get(a, i));
}

static uint64_t num(json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

/* The counter @k[@w] of @io less that of @pio (NULL: 0); a counter never
 * goes back while its LUN stays open, so a smaller one is a new start. */
static uint64_t delta(json_t *io, json_t *pio, const char *k, size_t w)
{
	uint64_t c = at(json_object_get(io, k), w), p = pio ? at(json_object_get(pio, k), w) : 0;

	return c >= p ? c - p : c;
}

static uint64_t hdelta(json_t *io, json_t *pio, const char *k, size_t w, size_t b)
{
	uint64_t c = at(json_array_get(json_object_get(io, k), w), b);
	uint64_t p = pio ? at(json_array_get(json_object_get(pio, k), w), b) : 0;

	return c >= p ? c - p : c;
}

/* Add LUN @l over the span: since its open, or since @pl, its entry in the
 * reply before when that is the same open of the same LUN. */
static void lun_add(json_t *l, json_t *pl, struct acc *a)
{
	json_t *io = json_object_get(l, "io"), *pio = pl ? json_object_get(pl, "io") : NULL;
	uint64_t now = num(io, "now_ns"), start = num(io, "since_ns");
	double secs;

	if (!io)
		return;
	if (pio && num(pio, "since_ns") == start &&
	    json_equal(json_object_get(l, "path"), json_object_get(pl, "path")) &&
	    num(pio, "now_ns") <= now)
		start = num(pio, "now_ns");
	else
		pio = NULL;
	secs = now > start ? (double)(now - start) / 1e9 : 0;
	for (size_t w = 0; w < 2; w++) {
		uint64_t n = delta(io, pio, "ops", w);

		a->n[w] += n;
		a->ops[w] += secs > 0 ? (double)n / secs : 0;
		a->bytes[w] += secs > 0 ? (double)delta(io, pio, "bytes", w) / secs : 0;
		a->wait[w] += delta(io, pio, "wait_ns", w);
		a->disk[w] += delta(io, pio, "disk_ns", w);
		a->inflight[w] += at(json_object_get(io, "inflight"), w);
		for (size_t b = 0; b < NB; b++) {
			a->hist[w][b] += hdelta(io, pio, "hist", w, b);
			a->dhist[w][b] += hdelta(io, pio, "disk_hist", w, b);
		}
	}
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "-";
}

/* The pool named as @p in reply @r, or NULL. */
static json_t *pool_in(json_t *r, json_t *p)
{
	json_t *q;
	size_t i;

	json_array_foreach(json_object_get(r, "pools"), i, q)
		if (json_equal(json_object_get(q, "name"), json_object_get(p, "name")))
			return q;
	return NULL;
}

/* ---- rows ---- */

struct row {
	const char *name; /* in the reply */
	int indent;
	struct acc a;
};

/* The rows of pool @p (@pp: it in the reply before, or NULL): the pool,
 * and with @verbose each vdev and each side of a mirror. @return how many,
 * at most @max */
static size_t pool_rows(json_t *p, json_t *pp, int verbose, struct row *rows, size_t max)
{
	json_t *luns = json_object_get(p, "luns"), *pluns = json_object_get(pp, "luns"), *v, *k;
	struct row *pool = &rows[0];
	size_t n = 1, i, x;

	memset(pool, 0, sizeof(*pool));
	pool->name = str(p, "name");
	pool->a.space = 1;
	pool->a.free = num(p, "free");
	pool->a.alloc = num(p, "size") - pool->a.free;
	json_array_foreach(json_object_get(p, "vdevs"), i, v) {
		const char *mname = json_string_value(json_object_get(v, "name"));
		struct row *mirror = NULL;

		if (verbose && mname && n < max) {
			mirror = &rows[n++];
			memset(mirror, 0, sizeof(*mirror));
			mirror->name = mname;
			mirror->indent = 2;
		}
		json_array_foreach(json_object_get(v, "luns"), x, k) {
			size_t idx = (size_t)json_integer_value(k);
			json_t *l = json_array_get(luns, idx), *pl = json_array_get(pluns, idx);
			struct row *r = NULL;

			if (!l)
				continue;
			lun_add(l, pl, &pool->a);
			if (mirror) {
				lun_add(l, pl, &mirror->a);
				if (x == 0) {
					/* each side holds all of it: the mirror's space is one side's */
					mirror->a.space = 1;
					mirror->a.alloc = num(l, "used");
					mirror->a.free = num(l, "size") - num(l, "used");
				}
			}
			if (!verbose || n >= max)
				continue;
			r = &rows[n++];
			memset(r, 0, sizeof(*r));
			r->name = str(l, "path");
			r->indent = mname ? 4 : 2;
			lun_add(l, pl, &r->a);
			if (!mname) {
				r->a.space = 1;
				r->a.alloc = num(l, "used");
				r->a.free = num(l, "size") - num(l, "used");
			}
		}
	}
	return n;
}

/* ---- fields ---- */

static void fmt_count(const struct iostat_opts *o, double v, char *buf, size_t len)
{
	uint64_t u = v > 0 ? (uint64_t)llround(v) : 0;

	if (o->parsable)
		snprintf(buf, len, "%" PRIu64, u);
	else
		stor_format_size(u, buf, len);
}

/* A time in ns as zpool prints one, in five characters: "350us", "17ms",
 * "2.5ms"; exact ns with -p. */
static void fmt_time(const struct iostat_opts *o, double ns, char *buf, size_t len)
{
	static const char *const unit[] = { "ns", "us", "ms", "s" };
	int u = 0;

	if (o->parsable) {
		snprintf(buf, len, "%.0f", ns);
		return;
	}
	while (ns >= 1000 && u < 3) {
		ns /= 1000;
		u++;
	}
	if (u == 0 || ns >= 10 || ns == floor(ns))
		snprintf(buf, len, "%.0f%s", ns, unit[u]);
	else
		snprintf(buf, len, "%.1f%s", ns, unit[u]);
}

/* The average wait of @n extents that waited @sum ns in all; "-" for none. */
static void fmt_avg(const struct iostat_opts *o, uint64_t sum, uint64_t n, char *buf, size_t len)
{
	if (!n)
		snprintf(buf, len, "-");
	else
		fmt_time(o, (double)sum / (double)n, buf, len);
}

static int width(const struct iostat_opts *o)
{
	return o->parsable ? 12 : 5;
}

static void field(const struct iostat_opts *o, const char *s)
{
	if (o->scripted)
		printf("\t%s", s);
	else
		printf("  %*s", width(o), s);
}

/* The group titles over pairs of columns, centred (zpool's header). */
static void group_titles(const struct iostat_opts *o, int namew, const char *const *g, size_t n)
{
	int gw = 2 * width(o) + 2;

	printf("%*s", namew > 0 ? namew : 0, "");
	for (size_t i = 0; i < n; i++) {
		int len = (int)strlen(g[i]), left = (gw - len) / 2;

		if (len > gw)
			left = 0;
		printf("  %*s%s", left, "", g[i]);
		if (i + 1 < n)
			printf("%*s", gw - len - left > 0 ? gw - len - left : 0, "");
	}
	printf("\n");
}

static void dashes(const struct iostat_opts *o, int namew, size_t ncols)
{
	for (int i = 0; i < namew; i++)
		putchar('-');
	for (size_t c = 0; c < ncols; c++) {
		printf("  ");
		for (int i = 0; i < width(o); i++)
			putchar('-');
	}
	putchar('\n');
}

static const char *const rate_groups[] = { "capacity", "operations", "bandwidth", "total_wait",
					   "disk_wait", "inflight" };
static const char *const rate_cols[] = { "alloc", "free", "read", "write", "read", "write",
					 "read", "write", "read", "write", "read", "write" };

/* The groups a row has: capacity, operations, bandwidth, then -l's two and -q's. */
static size_t groups(const struct iostat_opts *o, const char **g)
{
	size_t n = 0;

	for (size_t i = 0; i < 3; i++)
		g[n++] = rate_groups[i];
	if (o->latency) {
		g[n++] = rate_groups[3];
		g[n++] = rate_groups[4];
	}
	if (o->queue)
		g[n++] = rate_groups[5];
	return n;
}

static void rate_header(const struct iostat_opts *o, int namew)
{
	const char *g[6];
	size_t n = groups(o, g);

	group_titles(o, namew, g, n);
	printf("%-*s", namew, "pool");
	for (size_t c = 0; c < 2 * n; c++)
		printf("  %*s", width(o), rate_cols[c]);
	printf("\n");
	dashes(o, namew, 2 * n);
}

static void rate_row(const struct iostat_opts *o, int namew, const struct row *r)
{
	const struct acc *a = &r->a;
	char buf[64];

	if (o->scripted)
		printf("%s", r->name);
	else
		printf("%*s%-*s", r->indent, "", namew - r->indent, r->name);
	if (a->space) {
		fmt_count(o, (double)a->alloc, buf, sizeof(buf));
		field(o, buf);
		fmt_count(o, (double)a->free, buf, sizeof(buf));
		field(o, buf);
	} else {
		field(o, "-");
		field(o, "-");
	}
	for (int w = 0; w < 2; w++) {
		fmt_count(o, a->ops[w], buf, sizeof(buf));
		field(o, buf);
	}
	for (int w = 0; w < 2; w++) {
		fmt_count(o, a->bytes[w], buf, sizeof(buf));
		field(o, buf);
	}
	if (o->latency) {
		for (int w = 0; w < 2; w++) {
			fmt_avg(o, a->wait[w], a->n[w], buf, sizeof(buf));
			field(o, buf);
		}
		for (int w = 0; w < 2; w++) {
			fmt_avg(o, a->disk[w], a->n[w], buf, sizeof(buf));
			field(o, buf);
		}
	}
	if (o->queue)
		for (int w = 0; w < 2; w++) {
			fmt_count(o, (double)a->inflight[w], buf, sizeof(buf));
			field(o, buf);
		}
	printf("\n");
}

/* -w: row @r's histograms, a line a bucket named by its upper bound (zpool -w). */
static void hist_table(const struct iostat_opts *o, int namew, const struct row *r)
{
	static const char *const g[] = { "total_wait", "disk_wait" };
	static const char *const cols[] = { "read", "write", "read", "write" };
	char buf[64];

	if (!o->scripted) {
		printf("%s", r->name);
		group_titles(o, namew - (int)strlen(r->name), g, 2);
		printf("%-*s", namew, "latency");
		for (size_t c = 0; c < 4; c++)
			printf("  %*s", width(o), cols[c]);
		printf("\n");
		dashes(o, namew, 4);
	}
	for (unsigned b = 0; b < NB; b++) {
		/* the bucket's upper bound, as zpool names it: 1ns, 3ns ... 137s */
		uint64_t ub = ((uint64_t)2 << b) - 1, v = ub;
		int u = 0;
		static const char *const unit[] = { "ns", "us", "ms", "s" };

		if (o->parsable)
			snprintf(buf, sizeof(buf), "%" PRIu64, ub);
		else {
			while (v >= 1000 && u < 3) {
				v /= 1000;
				u++;
			}
			snprintf(buf, sizeof(buf), "%" PRIu64 "%s", v, unit[u]);
		}
		if (o->scripted)
			printf("%s\t%s", r->name, buf);
		else
			printf("%-*s", namew, buf);
		for (int d = 0; d < 2; d++)
			for (int w = 0; w < 2; w++) {
				fmt_count(o, (double)(d ? r->a.dhist[w][b] : r->a.hist[w][b]), buf,
					  sizeof(buf));
				field(o, buf);
			}
		printf("\n");
	}
	if (!o->scripted)
		dashes(o, namew, 4);
}

/* ---- the report ---- */

int iostat_report(const struct iostat_opts *o, json_t *cur, json_t *prev)
{
	static int header_done;
	struct row *rows;
	int namew = 10, npools = 0;
	size_t i, max = 1;
	json_t *p;

	/* a row for the pool, and at most two a LUN (a mirror's and its own) */
	json_array_foreach(json_object_get(cur, "pools"), i, p)
		if (1 + 2 * json_array_size(json_object_get(p, "luns")) > max)
			max = 1 + 2 * json_array_size(json_object_get(p, "luns"));
	rows = calloc(max, sizeof(*rows));
	if (!rows) {
		fprintf(stderr, "coffer: out of memory\n");
		return -1;
	}
	/* the name column fits the longest name of any row (zpool) */
	json_array_foreach(json_object_get(cur, "pools"), i, p) {
		size_t n;

		if (!json_is_array(json_object_get(p, "luns"))) {
			if ((int)strlen(str(p, "name")) > namew)
				namew = (int)strlen(str(p, "name"));
			continue;
		}
		n = pool_rows(p, NULL, o->verbose, rows, max);
		for (size_t r = 0; r < n; r++)
			if (rows[r].name && (int)strlen(rows[r].name) + rows[r].indent > namew)
				namew = (int)strlen(rows[r].name) + rows[r].indent;
	}
	if (!o->scripted && !o->hist && (o->verbose || !header_done))
		rate_header(o, namew);
	header_done = 1;
	json_array_foreach(json_object_get(cur, "pools"), i, p) {
		size_t n;

		npools++;
		/* a faulted pool has no LUNs open: nothing to count, a row of "-" */
		if (!json_is_array(json_object_get(p, "luns"))) {
			size_t ncols = 2 * groups(o, (const char *[6]){ 0 });

			if (o->hist)
				continue;
			if (o->scripted)
				printf("%s", str(p, "name"));
			else
				printf("%-*s", namew, str(p, "name"));
			for (size_t k = 0; k < ncols; k++)
				field(o, "-");
			printf("\n");
			continue;
		}
		n = pool_rows(p, prev ? pool_in(prev, p) : NULL, o->verbose, rows, max);
		for (size_t r = 0; r < n; r++) {
			if (o->hist)
				hist_table(o, namew, &rows[r]);
			else
				rate_row(o, namew, &rows[r]);
		}
		if (o->verbose && !o->hist && !o->scripted)
			dashes(o, namew, 2 * groups(o, (const char *[6]){ 0 }));
	}
	if (!npools)
		printf("no pools available\n");
	if ((o->verbose || o->hist) && !o->scripted)
		printf("\n");
	free(rows);
	fflush(stdout);
	return npools;
}
