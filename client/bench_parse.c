/* SPDX-License-Identifier: MIT */
/*
 * bench_parse.c owns the input side of coffer bench: the vdbench-style
 * parameter file and the one-liner flags, both turned into a struct
 * bench_plan (the flags are rendered as a small parameter file, so both go
 * through the same checks). The file is read as logical lines: a trailing
 * '\' joins the next physical line, and a line whose first keyword is not
 * sd/wd/rd/hd continues the definition above it, as vdbench allows; only the
 * first keyword of a line can start a definition, so "wd=w,sd=s" refers to
 * sd s. '*' or '#' first on a line, and anything after '#', are comments.
 * Every token keeps the physical line it came from, so each error names
 * FILE:LINE. Nothing here talks to the daemon: dataset globs stay globs.
 */

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_parse.h"
#include "store.h"

#define MAX_LIST 64 /* items of one (a,b,...) list */

static const double default_curve[] = { 10, 50, 70, 80, 90, 100 }; /* vdbench's */

struct tok {
	char *key;
	char *val;
	int line;
};

struct stmt {
	struct tok *t;
	unsigned n, cap;
};

/* An rd= before expansion. */
struct rd_def {
	char *name;
	char *wd; /* raw list, resolved at the end */
	enum bench_rate kind;
	double rates[MAX_LIST];
	unsigned nrates;
	double curve[MAX_LIST];
	unsigned ncurve;
	bool curve_set;
	double elapsed, interval, warmup;
	double forthreads[MAX_LIST];
	unsigned nforthreads;
	double forxfer[MAX_LIST];
	unsigned nforxfer;
	double forrdpct[MAX_LIST];
	unsigned nforrdpct;
	int line;
};

/* A wd= before its sd list is resolved. */
struct wd_raw {
	char *sd;
	int sd_line;
};

struct parser {
	const char *fname;
	char *err;
	size_t errlen;
	struct bench_plan *plan;
	struct wd_raw *wraw; /* parallel to plan->wd */
	struct rd_def *rd;
	unsigned nrd;
	struct bench_sd sd_def;
	struct bench_wd wd_def;
	struct wd_raw wraw_def;
	struct rd_def rd_def;
};

__attribute__((format(printf, 3, 4))) static int perr(struct parser *p, int line,
						       const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (line > 0)
		n = snprintf(p->err, p->errlen, "%s:%d: ", p->fname, line);
	else if (p->fname)
		n = snprintf(p->err, p->errlen, "%s: ", p->fname);
	if (n < 0 || (size_t)n >= p->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ---- values ---- */

int bench_parse_time(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	if (*end == 's')
		end++;
	else if (*end == 'm')
		v *= 60, end++;
	else if (*end == 'h')
		v *= 3600, end++;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

const char *bench_fmt_size(uint64_t b, char *buf, size_t len)
{
	if (b && b % (1ull << 30) == 0)
		snprintf(buf, len, "%llug", (unsigned long long)(b >> 30));
	else if (b && b % (1ull << 20) == 0)
		snprintf(buf, len, "%llum", (unsigned long long)(b >> 20));
	else if (b && b % 1024 == 0)
		snprintf(buf, len, "%lluk", (unsigned long long)(b >> 10));
	else
		snprintf(buf, len, "%llu", (unsigned long long)b);
	return buf;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	double v;

	if (parse_num(s, lo, hi, &v) < 0 || v != floor(v))
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/*
 * Split "(a,b,c)" or "a" into items, in place. Blanks around items go.
 * @return the number of items or -EINVAL (empty item, too many, stray paren)
 */
static int split_list(char *s, char **items, int max)
{
	size_t len = strlen(s);
	int n = 0;
	char *p;

	if (s[0] == '(') {
		if (len < 2 || s[len - 1] != ')')
			return -EINVAL;
		s[len - 1] = '\0';
		s++;
	}
	p = s;
	for (;;) {
		char *comma = strchr(p, ','), *e;

		if (comma)
			*comma = '\0';
		while (isspace((unsigned char)*p))
			p++;
		e = p + strlen(p);
		while (e > p && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (!*p || strpbrk(p, "()") || n == max)
			return -EINVAL;
		items[n++] = p;
		if (!comma)
			break;
		p = comma + 1;
	}
	return n;
}

/*
 * A for* list: numbers, or vdbench's ranges "(1-64,d)" (doubling) and
 * "(1-10,3)" (step). @size: items are sizes (forxfersize).
 */
static int parse_for_list(struct parser *p, const struct tok *t, bool size, double lo, double hi,
			  double *out, unsigned *nout)
{
	char buf[512], *items[MAX_LIST];
	int n;
	unsigned k = 0;

	if (strlen(t->val) >= sizeof(buf))
		return perr(p, t->line, "bad value '%s' for '%s'", t->val, t->key);
	strcpy(buf, t->val);
	n = split_list(buf, items, MAX_LIST);
	if (n < 0)
		return perr(p, t->line, "bad value '%s' for '%s'", t->val, t->key);
	if (n == 2 && !size && strchr(items[0] + 1, '-')) {
		char *dash = strchr(items[0] + 1, '-');
		double a, b, step = 0;
		bool dbl = !strcmp(items[1], "d");

		*dash = '\0';
		if (parse_num(items[0], lo, hi, &a) < 0 || parse_num(dash + 1, lo, hi, &b) < 0 ||
		    a > b || (!dbl && (parse_num(items[1], 1e-9, hi, &step) < 0)) ||
		    (dbl && a <= 0))
			return perr(p, t->line, "bad range '%s' for '%s'", t->val, t->key);
		for (double v = a; v <= b + 1e-9; v = dbl ? v * 2 : v + step) {
			if (k == MAX_LIST)
				return perr(p, t->line, "'%s' expands to more than %d values",
					    t->key, MAX_LIST);
			out[k++] = v;
		}
		*nout = k;
		return 0;
	}
	for (int i = 0; i < n; i++) {
		uint64_t b;

		if (size) {
			if (stor_parse_size(items[i], &b) < 0 || b == 0 || b > (1u << 30))
				return perr(p, t->line, "bad size '%s' in '%s'", items[i], t->key);
			out[k++] = (double)b;
		} else if (parse_num(items[i], lo, hi, &out[k++]) < 0) {
			return perr(p, t->line, "bad value '%s' in '%s'", items[i], t->key);
		}
	}
	*nout = k;
	return 0;
}

static int parse_pct(struct parser *p, const struct tok *t, double *out)
{
	if (parse_num(t->val, 0, 100, out) < 0)
		return perr(p, t->line, "bad value '%s' for '%s' (0 to 100)", t->val, t->key);
	return 0;
}

static int parse_xfer(struct parser *p, const struct tok *t, struct bench_xfer *x, unsigned *nx)
{
	char buf[512], *items[MAX_LIST];
	int n;
	double sum = 0;
	uint64_t b;

	if (strlen(t->val) >= sizeof(buf))
		return perr(p, t->line, "bad value for 'xfersize'");
	strcpy(buf, t->val);
	n = split_list(buf, items, MAX_LIST);
	if (n < 0 || (n > 1 && n % 2) || n / 2 > BENCH_MAX_XFER)
		return perr(p, t->line, "bad xfersize '%s': a size or (size,pct,size,pct,...)",
			    t->val);
	if (n == 1) {
		if (stor_parse_size(items[0], &b) < 0 || b == 0 || b > (1u << 30))
			return perr(p, t->line, "bad size '%s' for 'xfersize'", items[0]);
		x[0].size = (uint32_t)b;
		x[0].pct = 100;
		*nx = 1;
		return 0;
	}
	for (int i = 0; i < n; i += 2) {
		if (stor_parse_size(items[i], &b) < 0 || b == 0 || b > (1u << 30))
			return perr(p, t->line, "bad size '%s' for 'xfersize'", items[i]);
		x[i / 2].size = (uint32_t)b;
		if (parse_num(items[i + 1], 0, 100, &x[i / 2].pct) < 0)
			return perr(p, t->line, "bad percentage '%s' for 'xfersize'", items[i + 1]);
		sum += x[i / 2].pct;
	}
	if (fabs(sum - 100) > 0.01)
		return perr(p, t->line, "xfersize percentages add up to %g, not 100", sum);
	*nx = (unsigned)n / 2;
	return 0;
}

static int parse_time_tok(struct parser *p, const struct tok *t, double *out)
{
	if (bench_parse_time(t->val, out) < 0)
		return perr(p, t->line, "bad time '%s' for '%s'", t->val, t->key);
	return 0;
}

static int add_note(struct bench_plan *pl, const char *fmt, ...)
{
	va_list ap;
	char **n, *s = NULL;

	n = realloc(pl->notes, (pl->nnotes + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	pl->notes = n;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s)
		return -ENOMEM;
	pl->notes[pl->nnotes++] = s;
	return 0;
}

/* ---- definitions ---- */

static int find_sd(const struct bench_plan *pl, const char *name)
{
	for (unsigned i = 0; i < pl->nsd; i++)
		if (!strcmp(pl->sd[i].name, name))
			return (int)i;
	return -1;
}

static int find_wd(const struct bench_plan *pl, const char *name)
{
	for (unsigned i = 0; i < pl->nwd; i++)
		if (!strcmp(pl->wd[i].name, name))
			return (int)i;
	return -1;
}

static int do_sd(struct parser *p, struct stmt *s)
{
	struct bench_plan *pl = p->plan;
	struct bench_sd sd = p->sd_def, *n;
	bool is_def = !strcmp(s->t[0].val, "default");
	int ret;

	sd.name = NULL;
	sd.dataset = NULL;
	sd.line = s->t[0].line;
	if (!is_def && find_sd(pl, s->t[0].val) >= 0)
		return perr(p, sd.line, "sd=%s defined twice", s->t[0].val);
	for (unsigned i = 1; i < s->n; i++) {
		struct tok *t = &s->t[i];

		if (!strcmp(t->key, "dataset") || !strcmp(t->key, "lun")) {
			if (!*t->val)
				return perr(p, t->line, "empty '%s'", t->key);
			sd.dataset = t->val;
		} else if (!strcmp(t->key, "threads")) {
			if (parse_uint(t->val, 1, 4096, &sd.threads) < 0)
				return perr(p, t->line, "bad value '%s' for 'threads' (1 to 4096)",
					    t->val);
		} else if (!strcmp(t->key, "range")) {
			char buf[128], *items[2];
			uint64_t a, b;

			if (strlen(t->val) >= sizeof(buf))
				return perr(p, t->line, "bad range '%s'", t->val);
			strcpy(buf, t->val);
			ret = split_list(buf, items, 2);
			if (ret != 2)
				return perr(p, t->line, "bad range '%s': (start,end)", t->val);
			sd.range_bytes = strpbrk(items[0], "kKmMgGtT") ||
					 strpbrk(items[1], "kKmMgGtT");
			if (sd.range_bytes) {
				if (stor_parse_size(items[0], &a) < 0 ||
				    stor_parse_size(items[1], &b) < 0 || a >= b)
					return perr(p, t->line, "bad range '%s'", t->val);
				sd.range_lo = (double)a;
				sd.range_hi = (double)b;
			} else if (parse_num(items[0], 0, 100, &sd.range_lo) < 0 ||
				   parse_num(items[1], 0, 100, &sd.range_hi) < 0 ||
				   sd.range_lo >= sd.range_hi) {
				return perr(p, t->line, "bad range '%s': percentages, start < end",
					    t->val);
			}
			sd.range_set = true;
		} else if (!strcmp(t->key, "size")) {
			/* vdbench's size of a LUN: here the part of the volume used */
			if (stor_parse_size(t->val, &sd.size) < 0 || !sd.size)
				return perr(p, t->line, "bad size '%s' for 'size'", t->val);
		} else if (!strcmp(t->key, "hitarea")) {
			if (stor_parse_size(t->val, &sd.hitarea) < 0 || !sd.hitarea)
				return perr(p, t->line, "bad size '%s' for 'hitarea'", t->val);
		} else {
			return perr(p, t->line, "unknown keyword '%s'", t->key);
		}
	}
	if (is_def) {
		p->sd_def = sd;
		return 0;
	}
	sd.name = strdup(s->t[0].val);
	sd.dataset = strdup(sd.dataset ? sd.dataset : s->t[0].val);
	n = realloc(pl->sd, (pl->nsd + 1) * sizeof(*n));
	if (!sd.name || !sd.dataset || !n) {
		free(sd.name);
		free(sd.dataset);
		if (n)
			pl->sd = n;
		return -ENOMEM;
	}
	pl->sd = n;
	pl->sd[pl->nsd++] = sd;
	return 0;
}

static int do_wd(struct parser *p, struct stmt *s)
{
	struct bench_plan *pl = p->plan;
	struct bench_wd wd = p->wd_def, *n;
	struct wd_raw raw = p->wraw_def, *nr;
	bool is_def = !strcmp(s->t[0].val, "default");
	int ret;

	wd.line = s->t[0].line;
	if (!is_def && find_wd(pl, s->t[0].val) >= 0)
		return perr(p, wd.line, "wd=%s defined twice", s->t[0].val);
	for (unsigned i = 1; i < s->n; i++) {
		struct tok *t = &s->t[i];

		if (!strcmp(t->key, "sd")) {
			raw.sd = t->val;
			raw.sd_line = t->line;
		} else if (!strcmp(t->key, "rdpct") || !strcmp(t->key, "readpct")) {
			if ((ret = parse_pct(p, t, &wd.rdpct)) < 0)
				return ret;
		} else if (!strcmp(t->key, "seekpct")) {
			wd.eof = false;
			if (!strcmp(t->val, "random")) {
				wd.seekpct = 100;
			} else if (!strcmp(t->val, "sequential") || !strcmp(t->val, "seq")) {
				wd.seekpct = 0;
			} else if (!strcmp(t->val, "eof")) {
				wd.seekpct = 0;
				wd.eof = true;
			} else if (parse_num(t->val, 0, 100, &wd.seekpct) < 0) {
				return perr(p, t->line,
					    "bad value '%s' for 'seekpct' (0 to 100, random, "
					    "sequential or eof)",
					    t->val);
			}
		} else if (!strcmp(t->key, "xfersize")) {
			if ((ret = parse_xfer(p, t, wd.xfer, &wd.nxfer)) < 0)
				return ret;
		} else if (!strcmp(t->key, "rhpct")) {
			if ((ret = parse_pct(p, t, &wd.rhpct)) < 0)
				return ret;
		} else if (!strcmp(t->key, "hitarea")) {
			if (stor_parse_size(t->val, &wd.hitarea) < 0 || !wd.hitarea)
				return perr(p, t->line, "bad size '%s' for 'hitarea'", t->val);
		} else {
			return perr(p, t->line, "unknown keyword '%s'", t->key);
		}
	}
	if (is_def) {
		p->wd_def = wd;
		p->wraw_def = raw;
		return 0;
	}
	if (!raw.sd)
		return perr(p, wd.line, "wd=%s has no sd=", s->t[0].val);
	wd.name = strdup(s->t[0].val);
	n = realloc(pl->wd, (pl->nwd + 1) * sizeof(*n));
	if (n)
		pl->wd = n;
	nr = realloc(p->wraw, (pl->nwd + 1) * sizeof(*nr));
	if (nr)
		p->wraw = nr;
	if (!wd.name || !n || !nr) {
		free(wd.name);
		return -ENOMEM;
	}
	wd.sd_idx = NULL;
	wd.nsd = 0;
	p->wraw[pl->nwd] = raw;
	pl->wd[pl->nwd++] = wd;
	return 0;
}

static int do_rd(struct parser *p, struct stmt *s)
{
	struct rd_def rd = p->rd_def, *n;
	bool is_def = !strcmp(s->t[0].val, "default");
	int ret;

	rd.line = s->t[0].line;
	for (unsigned i = 0; i < p->nrd; i++)
		if (!is_def && !strcmp(p->rd[i].name, s->t[0].val))
			return perr(p, rd.line, "rd=%s defined twice", s->t[0].val);
	for (unsigned i = 1; i < s->n; i++) {
		struct tok *t = &s->t[i];

		if (!strcmp(t->key, "wd")) {
			rd.wd = t->val;
		} else if (!strcmp(t->key, "iorate")) {
			if (!strcmp(t->val, "max")) {
				rd.kind = BENCH_RATE_MAX;
			} else if (!strcmp(t->val, "curve")) {
				rd.kind = BENCH_RATE_CURVE;
			} else {
				ret = parse_for_list(p, t, false, 1e-3, 1e9, rd.rates, &rd.nrates);
				if (ret < 0)
					return perr(p, t->line,
						    "bad value '%s' for 'iorate' (max, curve, a "
						    "rate or a list of rates)",
						    t->val);
				rd.kind = BENCH_RATE_FIXED;
			}
		} else if (!strcmp(t->key, "curve")) {
			ret = parse_for_list(p, t, false, 1e-3, 1000, rd.curve, &rd.ncurve);
			if (ret < 0)
				return ret;
			rd.curve_set = true;
		} else if (!strcmp(t->key, "elapsed")) {
			if ((ret = parse_time_tok(p, t, &rd.elapsed)) < 0)
				return ret;
			if (rd.elapsed <= 0)
				return perr(p, t->line, "elapsed must be more than 0");
		} else if (!strcmp(t->key, "interval")) {
			if ((ret = parse_time_tok(p, t, &rd.interval)) < 0)
				return ret;
			if (rd.interval < 0.01)
				return perr(p, t->line, "interval must be at least 0.01 s");
		} else if (!strcmp(t->key, "warmup")) {
			if ((ret = parse_time_tok(p, t, &rd.warmup)) < 0)
				return ret;
		} else if (!strcmp(t->key, "forthreads") || !strcmp(t->key, "threads")) {
			ret = parse_for_list(p, t, false, 1, 4096, rd.forthreads, &rd.nforthreads);
			if (ret < 0)
				return ret;
			for (unsigned k = 0; k < rd.nforthreads; k++)
				if (rd.forthreads[k] != floor(rd.forthreads[k]))
					return perr(p, t->line, "bad value '%s' for '%s'", t->val,
						    t->key);
		} else if (!strcmp(t->key, "forxfersize")) {
			ret = parse_for_list(p, t, true, 0, 0, rd.forxfer, &rd.nforxfer);
			if (ret < 0)
				return ret;
		} else if (!strcmp(t->key, "forrdpct")) {
			ret = parse_for_list(p, t, false, 0, 100, rd.forrdpct, &rd.nforrdpct);
			if (ret < 0)
				return ret;
		} else {
			return perr(p, t->line, "unknown keyword '%s'", t->key);
		}
	}
	if (rd.curve_set && rd.kind != BENCH_RATE_CURVE)
		return perr(p, rd.line, "rd=%s: curve= needs iorate=curve", s->t[0].val);
	if (is_def) {
		p->rd_def = rd;
		return 0;
	}
	if (rd.warmup >= rd.elapsed)
		return perr(p, rd.line, "rd=%s: warmup (%gs) must be shorter than elapsed (%gs)",
			    s->t[0].val, rd.warmup, rd.elapsed);
	if (rd.kind == BENCH_RATE_CURVE && !rd.curve_set) {
		memcpy(rd.curve, default_curve, sizeof(default_curve));
		rd.ncurve = sizeof(default_curve) / sizeof(default_curve[0]);
	}
	rd.name = s->t[0].val;
	n = realloc(p->rd, (p->nrd + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	p->rd = n;
	p->rd[p->nrd++] = rd;
	return 0;
}

static int do_stmt(struct parser *p, struct stmt *s)
{
	const char *k = s->t[0].key;

	if (!*s->t[0].val)
		return perr(p, s->t[0].line, "%s= needs a name", k);
	if (!strcmp(k, "sd"))
		return do_sd(p, s);
	if (!strcmp(k, "wd"))
		return do_wd(p, s);
	if (!strcmp(k, "rd"))
		return do_rd(p, s);
	/* hd: host definitions describe remote slaves; coffer bench has none */
	if (strcmp(s->t[0].val, "default"))
		return perr(p, s->t[0].line, "hd=%s: host definitions are not supported, only "
			    "hd=default", s->t[0].val);
	/* jvms=: vdbench's count of Java processes; here worker threads do that */
	for (unsigned i = 1; i < s->n; i++)
		if (!strcmp(s->t[i].key, "jvms"))
			return add_note(p->plan,
					"%s:%d: hd=default ignored (coffer bench runs on this host), "
					"and jvms=%s (one process, --threads worker threads)",
					p->fname, s->t[0].line, s->t[i].val);
	return add_note(p->plan, "%s:%d: hd=default ignored (coffer bench runs on this host)",
			p->fname, s->t[0].line);
}

/* ---- resolution and expansion ---- */

/* Resolve a list of names or globs of @kind against @names; duplicates go. */
static int resolve_refs(struct parser *p, const char *kind, const char *list, int line,
			char *const *names, unsigned nnames, unsigned **out, unsigned *nout)
{
	char buf[1024], *items[MAX_LIST];
	unsigned *idx;
	unsigned k = 0;
	int n;

	if (strlen(list) >= sizeof(buf))
		return perr(p, line, "%s list too long", kind);
	strcpy(buf, list);
	n = split_list(buf, items, MAX_LIST);
	if (n < 0)
		return perr(p, line, "bad %s list '%s'", kind, list);
	idx = calloc(nnames ? nnames : 1, sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		bool hit = false;

		for (unsigned j = 0; j < nnames; j++) {
			bool dup = false;

			if (fnmatch(items[i], names[j], 0))
				continue;
			hit = true;
			for (unsigned m = 0; m < k; m++)
				dup |= idx[m] == j;
			if (!dup)
				idx[k++] = j;
		}
		if (!hit) {
			free(idx);
			return perr(p, line, "unknown %s '%s'", kind, items[i]);
		}
	}
	*out = idx;
	*nout = k;
	return 0;
}

static int resolve(struct parser *p)
{
	struct bench_plan *pl = p->plan;
	char **names = NULL;
	int ret = 0;

	names = calloc(pl->nsd + pl->nwd + 1, sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (unsigned i = 0; i < pl->nsd; i++)
		names[i] = pl->sd[i].name;
	for (unsigned i = 0; i < pl->nwd && ret == 0; i++)
		ret = resolve_refs(p, "sd", p->wraw[i].sd, p->wraw[i].sd_line, names, pl->nsd,
				   &pl->wd[i].sd_idx, &pl->wd[i].nsd);
	free(names);
	return ret;
}

static int push_run(struct bench_plan *pl, const struct bench_run *r)
{
	struct bench_run *n = realloc(pl->run, (pl->nrun + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	pl->run = n;
	pl->run[pl->nrun++] = *r;
	return 0;
}

/* Expand @rd into runs: forxfersize x forrdpct x forthreads x rates. */
static int expand_rd(struct parser *p, const struct rd_def *rd)
{
	struct bench_plan *pl = p->plan;
	double one_neg = -1, one_zero = 0;
	const double *xs = rd->nforxfer ? rd->forxfer : &one_zero;
	const double *rs = rd->nforrdpct ? rd->forrdpct : &one_neg;
	const double *ts = rd->nforthreads ? rd->forthreads : &one_zero;
	unsigned nx = rd->nforxfer ? rd->nforxfer : 1, nr = rd->nforrdpct ? rd->nforrdpct : 1;
	unsigned nt = rd->nforthreads ? rd->nforthreads : 1;
	unsigned nrate = rd->kind == BENCH_RATE_FIXED ? rd->nrates :
			 rd->kind == BENCH_RATE_CURVE ? rd->ncurve + 1 : 1;
	unsigned total = nx * nr * nt * nrate, seq = 0;
	char **wdnames = NULL;
	unsigned *widx = NULL, nw = 0;
	int ret;

	wdnames = calloc(pl->nwd + 1, sizeof(*wdnames));
	if (!wdnames)
		return -ENOMEM;
	for (unsigned i = 0; i < pl->nwd; i++)
		wdnames[i] = pl->wd[i].name;
	ret = resolve_refs(p, "wd", rd->wd ? rd->wd : "*", rd->line, wdnames, pl->nwd, &widx, &nw);
	free(wdnames);
	if (ret < 0)
		return ret;
	if (!nw) {
		free(widx);
		return perr(p, rd->line, "rd=%s: no wd= defined", rd->name);
	}
	for (unsigned ix = 0; ix < nx; ix++)
		for (unsigned ir = 0; ir < nr; ir++)
			for (unsigned it = 0; it < nt; it++) {
				int base = -1;

				for (unsigned q = 0; q < nrate; q++) {
					struct bench_run r = { 0 };
					char lbl[256], xb[32];
					int len = 0;

					r.wd_idx = malloc(nw * sizeof(*r.wd_idx));
					if (!r.wd_idx) {
						ret = -ENOMEM;
						goto out;
					}
					memcpy(r.wd_idx, widx, nw * sizeof(*widx));
					r.nwd = nw;
					r.elapsed = rd->elapsed;
					r.interval = rd->interval;
					r.warmup = rd->warmup;
					r.xfersize = (uint32_t)xs[ix];
					r.rdpct = rs[ir];
					r.threads = (unsigned)ts[it];
					r.line = rd->line;
					r.base = -1;
					if (rd->kind == BENCH_RATE_FIXED) {
						r.rate_kind = BENCH_RATE_FIXED;
						r.rate = rd->rates[q];
					} else if (rd->kind == BENCH_RATE_CURVE && q > 0) {
						r.rate_kind = BENCH_RATE_CURVE;
						r.rate = rd->curve[q - 1];
						r.base = base;
					} else {
						r.rate_kind = BENCH_RATE_MAX;
						base = (int)pl->nrun;
					}
					lbl[0] = '\0';
					if (r.xfersize)
						len += snprintf(lbl + len, sizeof(lbl) - len,
								"xfersize=%s ",
								bench_fmt_size(r.xfersize, xb,
									       sizeof(xb)));
					if (r.rdpct >= 0)
						len += snprintf(lbl + len, sizeof(lbl) - len,
								"rdpct=%g ", r.rdpct);
					if (r.threads)
						len += snprintf(lbl + len, sizeof(lbl) - len,
								"threads=%u ", r.threads);
					if (r.rate_kind == BENCH_RATE_MAX)
						snprintf(lbl + len, sizeof(lbl) - len, "iorate=max");
					else if (r.rate_kind == BENCH_RATE_FIXED)
						snprintf(lbl + len, sizeof(lbl) - len, "iorate=%g",
							 r.rate);
					else
						snprintf(lbl + len, sizeof(lbl) - len,
							 "iorate=curve %g%%", r.rate);
					seq++;
					r.rd = strdup(rd->name);
					r.label = strdup(lbl);
					if (total == 1)
						r.name = strdup(rd->name);
					else if (asprintf(&r.name, "%s.%u", rd->name, seq) < 0)
						r.name = NULL;
					if (!r.rd || !r.label || !r.name ||
					    push_run(pl, &r) < 0) {
						free(r.rd);
						free(r.label);
						free(r.name);
						free(r.wd_idx);
						ret = -ENOMEM;
						goto out;
					}
				}
			}
out:
	free(widx);
	return ret;
}

/* ---- reading ---- */

static int stmt_push(struct stmt *s, char *key, char *val, int line)
{
	if (s->n == s->cap) {
		unsigned cap = s->cap ? s->cap * 2 : 16;
		struct tok *t = realloc(s->t, cap * sizeof(*t));

		if (!t)
			return -ENOMEM;
		s->t = t;
		s->cap = cap;
	}
	s->t[s->n++] = (struct tok){ key, val, line };
	return 0;
}

static bool is_def_key(const char *k)
{
	return !strcmp(k, "sd") || !strcmp(k, "wd") || !strcmp(k, "rd") || !strcmp(k, "hd");
}

/*
 * Tokenize the logical line @buf (with @lines giving the physical line of
 * each byte) into key=value tokens, separated by commas or blanks outside
 * parentheses. Keys are folded to lower case. Tokens point into @buf.
 */
static int tokenize(struct parser *p, char *buf, const int *lines, struct stmt *cur, bool *have)
{
	size_t i = 0, len = strlen(buf);
	bool first = true;
	int ret;

	for (; i < len; first = false) {
		size_t start, j;
		int depth = 0;
		char *eq;

		while (i < len && (buf[i] == ',' || isspace((unsigned char)buf[i])))
			i++;
		if (i >= len)
			break;
		start = i;
		for (j = i; j < len; j++) {
			if (buf[j] == '(')
				depth++;
			else if (buf[j] == ')' && --depth < 0)
				break;
			else if (!depth && (buf[j] == ',' || isspace((unsigned char)buf[j])))
				break;
		}
		if (depth)
			return perr(p, lines[start], "unbalanced parentheses");
		buf[j] = '\0';
		i = j + 1;
		eq = strchr(buf + start, '=');
		if (!eq || eq == buf + start)
			return perr(p, lines[start], "expected keyword=value, got '%s'", buf + start);
		*eq = '\0';
		for (char *c = buf + start; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		/* sd= inside a wd, wd= inside an rd are references, not new definitions */
		if (first && is_def_key(buf + start)) {
			if (*have) {
				ret = do_stmt(p, cur);
				if (ret < 0)
					return ret;
			}
			cur->n = 0;
			*have = true;
		} else if (!*have) {
			return perr(p, lines[start], "unknown keyword '%s'", buf + start);
		}
		ret = stmt_push(cur, buf + start, eq + 1, lines[start]);
		if (ret < 0)
			return ret;
	}
	return 0;
}

void bench_plan_free(struct bench_plan *pl)
{
	if (!pl)
		return;
	for (unsigned i = 0; i < pl->nsd; i++) {
		free(pl->sd[i].name);
		free(pl->sd[i].dataset);
	}
	for (unsigned i = 0; i < pl->nwd; i++) {
		free(pl->wd[i].name);
		free(pl->wd[i].sd_idx);
	}
	for (unsigned i = 0; i < pl->nrun; i++) {
		free(pl->run[i].name);
		free(pl->run[i].label);
		free(pl->run[i].rd);
		free(pl->run[i].wd_idx);
	}
	for (unsigned i = 0; i < pl->nnotes; i++)
		free(pl->notes[i]);
	free(pl->sd);
	free(pl->wd);
	free(pl->run);
	free(pl->notes);
	free(pl);
}

static void parser_defaults(struct parser *p)
{
	p->sd_def.threads = 1;
	p->wd_def.rdpct = 100;
	p->wd_def.seekpct = 100;
	p->wd_def.xfer[0] = (struct bench_xfer){ 4096, 100 };
	p->wd_def.nxfer = 1;
	p->wd_def.hitarea = 1 << 20;
	p->rd_def.kind = BENCH_RATE_MAX;
	p->rd_def.elapsed = 30;
	p->rd_def.interval = 1;
}

int bench_plan_parse_text(const char *fname, const char *text, struct bench_plan **out, char *err,
			  size_t errlen)
{
	struct parser p = { .fname = fname ? fname : "-", .err = err, .errlen = errlen };
	size_t tlen = strlen(text), used = 0, lstart = 0;
	char *arena = NULL;
	int *lines = NULL;
	struct stmt cur = { 0 };
	bool have = false;
	int ret = 0, lineno = 0;
	const char *s = text;

	*out = NULL;
	if (errlen)
		err[0] = '\0';
	parser_defaults(&p);
	p.plan = calloc(1, sizeof(*p.plan));
	/*
	 * Logical lines are laid one after the other in arena and never moved:
	 * tokens, and the rd/wd references kept until the end, point into it.
	 * Each physical line adds at most its bytes plus a blank and a NUL.
	 */
	arena = malloc(2 * tlen + 2);
	lines = malloc((2 * tlen + 2) * sizeof(*lines));
	if (!p.plan || !arena || !lines) {
		ret = -ENOMEM;
		goto out;
	}
	while (*s) {
		const char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s) : strlen(s);
		const char *b = s, *hash;
		bool cont = false;

		lineno++;
		s += n + (nl ? 1 : 0);
		while (n && isspace((unsigned char)*b))
			b++, n--;
		if (n && (*b == '*' || *b == '#'))
			n = 0;
		hash = memchr(b, '#', n);
		if (hash)
			n = (size_t)(hash - b);
		while (n && isspace((unsigned char)b[n - 1]))
			n--;
		if (n && b[n - 1] == '\\') {
			cont = true;
			n--;
		}
		memcpy(arena + used, b, n);
		for (size_t k = 0; k < n; k++)
			lines[used + k] = lineno;
		used += n;
		arena[used] = ' ';
		lines[used++] = lineno;
		if (cont && *s)
			continue;
		arena[used] = '\0';
		lines[used++] = lineno;
		ret = tokenize(&p, arena + lstart, lines + lstart, &cur, &have);
		if (ret < 0)
			goto out;
		lstart = used;
	}
	if (have) {
		ret = do_stmt(&p, &cur);
		if (ret < 0)
			goto out;
	}
	ret = resolve(&p);
	if (ret < 0)
		goto out;
	for (unsigned i = 0; i < p.nrd && ret == 0; i++)
		ret = expand_rd(&p, &p.rd[i]);
	if (ret < 0)
		goto out;
	if (!p.plan->nrun)
		ret = perr(&p, 0, "no run definition (rd=)");
out:
	if (ret == -ENOMEM && errlen)
		snprintf(err, errlen, "%s: out of memory", p.fname);
	free(cur.t);
	free(arena);
	free(lines);
	free(p.wraw);
	free(p.rd);
	if (ret < 0)
		bench_plan_free(p.plan);
	else
		*out = p.plan;
	return ret;
}

int bench_plan_parse_file(const char *path, struct bench_plan **out, char *err, size_t errlen)
{
	FILE *f = NULL;
	char *text = NULL;
	size_t cap = 0, len = 0, n;
	int ret;

	*out = NULL;
	f = fopen(path, "r");
	if (!f) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return ret;
	}
	do {
		if (len + 4096 + 1 > cap) {
			char *t = realloc(text, cap = cap * 2 + 8192);

			if (!t) {
				ret = -ENOMEM;
				snprintf(err, errlen, "%s: out of memory", path);
				goto out;
			}
			text = t;
		}
		n = fread(text + len, 1, 4096, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		ret = -EIO;
		snprintf(err, errlen, "%s: read error", path);
		goto out;
	}
	text[len] = '\0';
	if (strlen(text) != len) {
		ret = -EINVAL;
		snprintf(err, errlen, "%s: not a text file", path);
		goto out;
	}
	ret = bench_plan_parse_text(path, text, out, err, errlen);
out:
	free(text);
	fclose(f);
	return ret;
}

/* ---- command line ---- */

enum {
	OPT_DATASETS = 256, OPT_RW, OPT_BS, OPT_QD, OPT_TIME, OPT_RATE, OPT_CURVE, OPT_WARMUP,
	OPT_RDPCT, OPT_INTERVAL, OPT_JSON, OPT_CSV, OPT_JOURNAL, OPT_RECOVER, OPT_SOCKET,
	OPT_DAEMON_PID, OPT_THREADS, OPT_JSON_INT,
};

static const struct option long_opts[] = {
	{ "datasets", required_argument, NULL, OPT_DATASETS },
	{ "rw", required_argument, NULL, OPT_RW },
	{ "bs", required_argument, NULL, OPT_BS },
	{ "qd", required_argument, NULL, OPT_QD },
	{ "time", required_argument, NULL, OPT_TIME },
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "curve", required_argument, NULL, OPT_CURVE },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "rdpct", required_argument, NULL, OPT_RDPCT },
	{ "interval", required_argument, NULL, OPT_INTERVAL },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "json-int", no_argument, NULL, OPT_JSON_INT },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "verify", no_argument, NULL, 'v' },
	{ "journal", required_argument, NULL, OPT_JOURNAL },
	{ "recover", required_argument, NULL, OPT_RECOVER },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "daemon-pid", required_argument, NULL, OPT_DAEMON_PID },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "quiet", no_argument, NULL, 'q' },
	{ "parse-only", no_argument, NULL, 's' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

int bench_args_parse(int argc, char **argv, struct bench_args *a, char *err, size_t errlen)
{
	char **av = NULL;
	int c, ret = 0;
	uint64_t sz;
	double d;
	unsigned u;

	memset(a, 0, sizeof(*a));
	a->rdpct = -1;
	a->interval = 1;
	a->time = 30;
	/* "-vr FILE" is vdbench's spelling; getopt would read it as -v -r */
	av = calloc((size_t)argc + 1, sizeof(*av));
	if (!av)
		return -ENOMEM;
	for (int i = 0; i < argc; i++)
		av[i] = strcmp(argv[i], "-vr") ? argv[i] : (char *)"--recover";
	/* no '+': options may follow the parameter file, as GNU users write them */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, av, "vqhs", long_opts, NULL)) != -1) {
		const char *o = optarg;

		switch (c) {
		case OPT_DATASETS: a->datasets = o; break;
		case OPT_RW:
			if (strcmp(o, "randread") && strcmp(o, "randwrite") && strcmp(o, "read") &&
			    strcmp(o, "write") && strcmp(o, "randrw")) {
				snprintf(err, errlen, "--rw: '%s' is not one of randread, randwrite, "
					 "read, write, randrw", o);
				ret = -EINVAL;
				goto out;
			}
			a->rw = o;
			break;
		case OPT_BS:
			if (stor_parse_size(o, &sz) < 0 || !sz || sz > (1u << 30)) {
				snprintf(err, errlen, "--bs: bad size '%s'", o);
				ret = -EINVAL;
				goto out;
			}
			a->bs = (uint32_t)sz;
			break;
		case OPT_QD:
		case OPT_THREADS:
			if (parse_uint(o, 1, 4096, &u) < 0) {
				snprintf(err, errlen, "--%s: bad number '%s'",
					 c == OPT_QD ? "qd" : "threads", o);
				ret = -EINVAL;
				goto out;
			}
			if (c == OPT_QD)
				a->qd = u;
			else
				a->nthreads = u;
			break;
		case OPT_TIME:
		case OPT_WARMUP:
		case OPT_INTERVAL:
			if (bench_parse_time(o, &d) < 0 || (c != OPT_WARMUP && d <= 0)) {
				snprintf(err, errlen, "--%s: bad time '%s'",
					 c == OPT_TIME ? "time" : c == OPT_WARMUP ? "warmup" : "interval",
					 o);
				ret = -EINVAL;
				goto out;
			}
			if (c == OPT_TIME)
				a->time = d;
			else if (c == OPT_WARMUP)
				a->warmup = d;
			else
				a->interval = d;
			break;
		case OPT_RATE:
			if (strcmp(o, "max") && strcmp(o, "curve") && parse_num(o, 1e-3, 1e9, &d) < 0) {
				snprintf(err, errlen, "--rate: '%s' is not max, curve or a rate", o);
				ret = -EINVAL;
				goto out;
			}
			a->rate = o;
			break;
		case OPT_CURVE: a->curve = o; break;
		case OPT_RDPCT:
			if (parse_num(o, 0, 100, &a->rdpct) < 0) {
				snprintf(err, errlen, "--rdpct: bad percentage '%s'", o);
				ret = -EINVAL;
				goto out;
			}
			break;
		case OPT_JSON: a->json = o; break;
		case OPT_JSON_INT: a->json_int = true; break;
		case OPT_CSV: a->csv = o; break;
		case 'v': a->verify = true; break;
		case OPT_JOURNAL: a->journal = o; break;
		case OPT_RECOVER:
			a->verify = true;
			a->recover = true;
			a->journal = o;
			break;
		case OPT_SOCKET: a->socket = o; break;
		case OPT_DAEMON_PID:
			if (parse_uint(o, 1, 1u << 30, &u) < 0) {
				snprintf(err, errlen, "--daemon-pid: bad pid '%s'", o);
				ret = -EINVAL;
				goto out;
			}
			a->daemon_pid = (int)u;
			break;
		case 'q': a->quiet = true; break;
		case 's': a->parse_only = true; break;
		case 'h': a->help = true; break;
		default:
			if (optopt >= OPT_DATASETS)
				snprintf(err, errlen, "%s needs a value", av[optind - 1]);
			else
				snprintf(err, errlen, "unknown option '%s'", av[optind - 1]);
			ret = -EINVAL;
			goto out;
		}
	}
	/* getopt moved the operands of av behind the options */
	if (optind < argc)
		a->file = av[optind++];
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", av[optind]);
		ret = -EINVAL;
		goto out;
	}
	if (a->help)
		goto out;
	if (a->file && (a->datasets || a->rw || a->bs || a->qd || a->rate || a->rdpct >= 0)) {
		snprintf(err, errlen, "give either a parameter file or --datasets and its flags");
		ret = -EINVAL;
		goto out;
	}
	if (!a->file && !a->datasets && !a->recover) {
		snprintf(err, errlen, "nothing to run: give a parameter file or --datasets GLOB");
		ret = -EINVAL;
		goto out;
	}
	if (!a->file && a->datasets && a->warmup >= a->time) {
		snprintf(err, errlen, "--warmup must be shorter than --time");
		ret = -EINVAL;
		goto out;
	}
out:
	free(av);
	return ret;
}

int bench_plan_from_args(const struct bench_args *a, struct bench_plan **out, char *err,
			 size_t errlen)
{
	const char *rw = a->rw ? a->rw : "randread";
	char text[1024], rate[600];
	double rdpct = 100, seek = 100;

	*out = NULL;
	if (!a->datasets) {
		snprintf(err, errlen, "--datasets is missing");
		return -EINVAL;
	}
	/* globs of dataset names never hold blanks, commas or parentheses */
	if (!*a->datasets || strpbrk(a->datasets, " \t\n,()=#\\")) {
		snprintf(err, errlen, "--datasets: bad glob '%s'", a->datasets);
		return -EINVAL;
	}
	if (!strcmp(rw, "randwrite") || !strcmp(rw, "write"))
		rdpct = 0;
	else if (!strcmp(rw, "randrw"))
		rdpct = 50;
	if (!strcmp(rw, "read") || !strcmp(rw, "write"))
		seek = 0;
	if (a->rdpct >= 0)
		rdpct = a->rdpct;
	if (a->curve && (!a->rate || strcmp(a->rate, "curve"))) {
		snprintf(err, errlen, "--curve needs --rate curve");
		return -EINVAL;
	}
	if (a->curve && (strlen(a->curve) > 500 || strpbrk(a->curve, " ()=#\\"))) {
		snprintf(err, errlen, "--curve: bad list '%s'", a->curve);
		return -EINVAL;
	}
	if (a->curve)
		snprintf(rate, sizeof(rate), "curve,curve=(%s)", a->curve);
	else
		snprintf(rate, sizeof(rate), "%s", a->rate ? a->rate : "max");
	/* the flags become a parameter file, so both share every check */
	snprintf(text, sizeof(text),
		 "sd=sd1,dataset=%s,threads=%u\n"
		 "wd=wd1,sd=sd1,rdpct=%g,seekpct=%g,xfersize=%u\n"
		 "rd=run1,wd=wd1,iorate=%s,elapsed=%g,interval=%g,warmup=%g\n",
		 a->datasets, a->qd ? a->qd : 1, rdpct, seek, a->bs ? a->bs : 8192, rate, a->time,
		 a->interval, a->warmup);
	return bench_plan_parse_text("command line", text, out, err, errlen);
}
