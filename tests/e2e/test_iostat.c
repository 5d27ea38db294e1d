// SPDX-License-Identifier: MIT
/*
 * E2E: coffer pool iostat against a real cofferd, on a pool of a two-way
 * mirror and a LUN of its own. What must hold: after a known write and a
 * read back through coffer, the daemon's raw counters (pool_iostat) account
 * for every byte: written on each side of the mirror it went to, read from
 * some LUN; the -p -H -v report has a row for the pool, the mirror, each of
 * its sides (capacity "-") and the lone LUN, with rates that agree (the
 * mirror's writes are its sides'); INTERVAL COUNT prints COUNT reports and
 * exits; -l, -q and -w print their columns and tables; bad input (an
 * unknown pool, interval 0, a word for a number, count 0, -w with -l)
 * exits non-zero with a message that says what to give, and changes
 * nothing.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"

#define LUN_SIZE (24u << 20)
#define VOL (2u << 20)

TDAEMON_FIXTURE(NULL)
TestSuite(iostat, .init = setup, .fini = teardown, .timeout = 240);

static char out[1 << 18];
#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* tank: l2 alone (LUN 0), then mirror-0 of l0 and l1 (LUNs 1 and 2);
 * tank/v written whole with random bytes (no compression shrinks them), flushed, and read back. */
static void pool_with_io(void)
{
	char data[4096];

	COF_OK(NULL, "pool create -s %u tank %s mirror %s %s", LUN_SIZE, tdaemon_path(&td, "l2"),
	       tdaemon_path(&td, "l0"), tdaemon_path(&td, "l1"));
	COF_OK(NULL, "create -V %u tank/v", VOL);
	tdaemon_random_file(&td, "data", VOL, data, sizeof(data));
	COF_OK(data, "write tank/v");
	COF_OK(NULL, "flush tank/v");
	COF_OK(NULL, "read -l %u tank/v > /dev/null", VOL);
}

/* The pool_iostat reply's entry of tank. */
static json_t *raw(void)
{
	struct coffer_conn *c = NULL;
	json_t *reply = NULL, *args = json_pack("{s:s}", "name", "tank"), *p;
	char err[512];
	int ret;

	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	ret = coffer_call(c, "pool_iostat", args, &reply, err, sizeof(err));
	json_decref(args);
	coffer_close(c);
	cr_assert_eq(ret, 0, "pool_iostat: %d %s", ret, err);
	p = json_incref(json_array_get(json_object_get(reply, "pools"), 0));
	json_decref(reply);
	cr_assert_not_null(p);
	return p;
}

static uint64_t io_of(json_t *p, size_t lun, const char *k, size_t w)
{
	json_t *io = json_object_get(json_array_get(json_object_get(p, "luns"), lun), "io");

	cr_assert_not_null(io, "lun %zu has no io", lun);
	return (uint64_t)json_integer_value(json_array_get(json_object_get(io, k), w));
}

/* Do @a and @b count the same I/O on every LUN? */
static int same_io(json_t *a, json_t *b)
{
	static const char *const k[] = { "ops", "bytes", "hist", "inflight" };
	json_t *la = json_object_get(a, "luns"), *lb = json_object_get(b, "luns");

	for (size_t i = 0; i < json_array_size(la); i++)
		for (size_t j = 0; j < sizeof(k) / sizeof(k[0]); j++)
			if (!json_equal(json_object_get(json_object_get(json_array_get(la, i), "io"), k[j]),
					json_object_get(json_object_get(json_array_get(lb, i), "io"), k[j])))
				return 0;
	return json_array_size(la) == json_array_size(lb);
}

/* raw() of an idle pool: two readings that agree, so no commit of the
 * daemon's own was counting between one counter and the next. */
static json_t *settled_raw(void)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	json_t *a = raw(), *b = raw();

	while (!same_io(a, b) && tdaemon_poll(end)) {
		json_decref(a);
		a = b;
		b = raw();
	}
	json_decref(a);
	return b;
}

/* Extents in flight on every LUN of tank now. */
static uint64_t inflight(void)
{
	json_t *p = raw();
	uint64_t n = 0;

	for (size_t i = 0; i < json_array_size(json_object_get(p, "luns")); i++)
		n += io_of(p, i, "inflight", 0) + io_of(p, i, "inflight", 1);
	json_decref(p);
	return n;
}

/* Nothing in flight once the pool is idle: every issue met its completion
 * (a commit of the daemon's own may be under way at one moment, not for long). */
static void settles(void)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	while (inflight() && tdaemon_poll(end))
		;
	cr_assert_eq(inflight(), 0, "extents stay in flight on an idle pool");
}

/* The fields of the line of @text whose first field is @name (tabs), in
 * @f; @return how many, 0 if there is no such line. */
static int row(const char *text, const char *name, char f[][64], int max)
{
	const char *l = text;

	for (; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		size_t n = strlen(name);
		int k = 0;

		if (strncmp(l, name, n) || l[n] != '\t')
			continue;
		for (const char *s = l; k < max;) {
			size_t len = strcspn(s, "\t\n");

			snprintf(f[k++], 64, "%.*s", (int)len, s);
			if (s[len] != '\t')
				break;
			s += len + 1;
		}
		return k;
	}
	return 0;
}

static unsigned long long num(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	cr_assert(*s && !*end, "'%s' is not an exact number", s);
	return v;
}

static int lines(const char *text)
{
	int n = 0;

	for (const char *s = text; *s; s++)
		n += *s == '\n';
	return n;
}

Test(iostat, raw_counters_account_for_what_was_written_and_read)
{
	json_t *p;
	uint64_t w0, w1, w2, rbytes = 0;

	pool_with_io();
	p = settled_raw();
	/* a mirror's write lands on both sides, so their written bytes are
	 * the same; the volume's records went to the mirror or to l2 */
	w0 = io_of(p, 1, "bytes", 1);
	w1 = io_of(p, 2, "bytes", 1);
	w2 = io_of(p, 0, "bytes", 1);
	cr_assert_eq(w0, w1, "mirror sides wrote %llu and %llu bytes", (unsigned long long)w0,
		     (unsigned long long)w1);
	cr_assert_geq(w0 + w2, VOL, "%llu + %llu bytes written for a %u byte volume",
		      (unsigned long long)w0, (unsigned long long)w2, VOL);
	for (size_t i = 0; i < 3; i++)
		rbytes += io_of(p, i, "bytes", 0);
	settles();
	/* no data cache (cache_size 0): the read back came from the LUNs */
	cr_assert_geq(rbytes, VOL, "read %llu bytes from the LUNs for a %u byte volume",
		      (unsigned long long)rbytes, VOL);
	/* every extent counted has its wait in the histogram */
	for (size_t i = 0; i < 3; i++)
		for (size_t w = 0; w < 2; w++) {
			json_t *h = json_array_get(
				json_object_get(json_object_get(json_array_get(json_object_get(p, "luns"), i),
								"io"),
						"hist"),
				w);
			uint64_t sum = 0;

			cr_assert_eq(json_array_size(h), 37);
			for (size_t b = 0; b < 37; b++)
				sum += (uint64_t)json_integer_value(json_array_get(h, b));
			cr_assert_eq(sum, io_of(p, i, "ops", w), "lun %zu: histogram %llu, ops %llu", i,
				     (unsigned long long)sum,
				     (unsigned long long)io_of(p, i, "ops", w));
		}
	json_decref(p);

	/* the counters are since import: an export and an import start them
	 * again, and no volume data has been written since */
	COF_OK(NULL, "pool export tank");
	COF_OK(NULL, "pool import -d %s tank", td.dir);
	p = raw();
	cr_assert_lt(io_of(p, 0, "bytes", 1) + io_of(p, 1, "bytes", 1), VOL);
	json_decref(p);
}

Test(iostat, writes_count_on_both_sides_of_a_mirror)
{
	char data[4096], f[5][16][64];
	const char *name[5] = { "tank", "mirror-0", NULL, NULL, NULL };
	json_t *p;

	COF_OK(NULL, "pool create -s %u tank %s mirror %s %s", LUN_SIZE, tdaemon_path(&td, "l2"),
	       tdaemon_path(&td, "l0"), tdaemon_path(&td, "l1"));
	name[2] = tdaemon_path(&td, "l0");
	name[3] = tdaemon_path(&td, "l1");
	name[4] = tdaemon_path(&td, "l2");
	COF_OK(NULL, "create -V %u tank/v", VOL);
	tdaemon_random_file(&td, "data", VOL, data, sizeof(data));
	COF_OK(data, "write tank/v");
	COF_OK(NULL, "flush tank/v");
	COF_OK(NULL, "read -l %u tank/v > /dev/null", VOL);

	p = settled_raw();
	/* the volume went to the LUNs: at least its bytes in all, each
	 * mirror extent twice; both sides of the mirror wrote the same */
	cr_assert_geq(io_of(p, 0, "bytes", 1) + io_of(p, 1, "bytes", 1), VOL);
	cr_assert_eq(io_of(p, 1, "bytes", 1), io_of(p, 2, "bytes", 1));
	cr_assert_eq(io_of(p, 1, "ops", 1), io_of(p, 2, "ops", 1));
	cr_assert_gt(io_of(p, 1, "ops", 1), 0);
	json_decref(p);

	COF_OK(NULL, "pool iostat -p -H -v tank");
	for (int r = 0; r < 5; r++)
		cr_assert_eq(row(out, name[r], f[r], 16), 7, "no row of 7 fields for %s in:\n%s",
			     name[r], out);
	cr_assert_eq(lines(out), 5, "%s", out);
	/* name, alloc, free, read ops, write ops, read bytes, write bytes */
	cr_assert_str_eq(f[2][1], "-");
	cr_assert_str_eq(f[3][2], "-");
	cr_assert_gt(num(f[4][1]) + num(f[4][2]), 0, "a LUN of its own has its space: %s", out);
	cr_assert_gt(num(f[1][1]), 0, "the mirror holds the volume's records: %s", out);
	cr_assert_gt(num(f[0][1]) + num(f[0][2]), 0);
	for (int r = 0; r < 5; r++)
		cr_assert_gt(num(f[r][4]) + num(f[r][6]), 0, "%s wrote nothing:\n%s", name[r], out);
	cr_assert_gt(num(f[2][6]), 0, "%s", out);
	cr_assert_gt(num(f[3][6]), 0, "%s", out);
	/* the mirror's row sums its sides (each rounded on its own), the pool's all */
	cr_assert_leq(llabs((long long)num(f[1][6]) - (long long)(num(f[2][6]) + num(f[3][6]))), 2,
		      "%s", out);
	cr_assert_leq(llabs((long long)num(f[0][5]) -
			    (long long)(num(f[2][5]) + num(f[3][5]) + num(f[4][5]))),
		      3, "%s", out);
	cr_assert_gt(num(f[0][3]), 0, "no reads: %s", out);

	/* the tree as zpool iostat -v draws it: vdevs under the pool, sides under their mirror */
	COF_OK(NULL, "pool iostat -v tank");
	cr_assert(strstr(out, "\n  mirror-0 "), "%s", out);
	for (int r = 2; r < 5; r++) {
		char want[4200];

		snprintf(want, sizeof(want), "\n%s%s ", r < 4 ? "    " : "  ", name[r]);
		cr_assert(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
	}
}

Test(iostat, interval_and_count_print_that_many_reports)
{
	struct timespec t0, t1;
	double secs;
	int n = 0;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, tdaemon_path(&td, "l0"),
	       tdaemon_path(&td, "l1"));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	COF_OK(NULL, "pool iostat tank 1 2");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	/* a header once (three lines), then a row a report */
	for (const char *s = out; (s = strstr(s, "\ntank ")); s++)
		n++;
	cr_assert_eq(n, 2, "%s", out);
	cr_assert(strstr(out, "capacity") && strstr(out, "operations") && strstr(out, "bandwidth"),
		  "%s", out);
	cr_assert_eq(lines(out), 5, "%s", out);
	/* the second report is due a second after the first */
	cr_assert_geq(secs, 0.9, "two reports in %.2f s", secs);

	/* -v: each report has its header and its tree */
	COF_OK(NULL, "pool iostat -v tank 0.2 3");
	n = 0;
	for (const char *s = out; (s = strstr(s, "mirror-0")); s++)
		n++;
	cr_assert_eq(n, 3, "%s", out);
	/* no pool named: every pool */
	COF_OK(NULL, "pool iostat -H 0.1 2");
	cr_assert_eq(lines(out), 2, "%s", out);
}

Test(iostat, latency_queue_and_histogram_columns)
{
	char data[4096];
	const char *l0;
	unsigned long long sum = 0;
	int n = 0;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, tdaemon_path(&td, "l0"),
	       tdaemon_path(&td, "l1"));
	l0 = tdaemon_path(&td, "l0");
	COF_OK(NULL, "create -V %u tank/v", VOL);
	tdaemon_random_file(&td, "data", VOL, data, sizeof(data));
	COF_OK(data, "write tank/v");
	COF_OK(NULL, "flush tank/v");

	COF_OK(NULL, "pool iostat -l -v tank");
	cr_assert(strstr(out, "total_wait") && strstr(out, "disk_wait"), "%s", out);
	COF_OK(NULL, "pool iostat -l -p -H -v tank");
	/* 7 fields, then total_wait and disk_wait, reads and writes: ns, or - */
	{
		char g[16][64];

		cr_assert_eq(row(out, "tank", g, 16), 11, "%s", out);
		cr_assert_eq(row(out, l0, g, 16), 11, "%s", out);
		cr_assert_gt(num(g[8]), 0, "writes waited no time: %s", out);
		cr_assert_gt(num(g[10]), 0, "%s", out);
	}

	COF_OK(NULL, "pool iostat -q tank");
	cr_assert(strstr(out, "inflight"), "%s", out);
	settles();
	{
		double end = tdaemon_deadline(TDAEMON_WAIT_S);
		char g[16][64];

		/* nothing in flight while the pool is idle */
		do {
			COF_OK(NULL, "pool iostat -q -p -H tank");
			cr_assert_eq(row(out, "tank", g, 16), 9, "%s", out);
		} while (num(g[7]) + num(g[8]) && tdaemon_poll(end));
		cr_assert_eq(num(g[7]), 0, "%s", out);
		cr_assert_eq(num(g[8]), 0, "%s", out);
	}

	COF_OK(NULL, "pool iostat -w tank");
	cr_assert(strstr(out, "total_wait") && strstr(out, "latency") && strstr(out, "\n1ns ") &&
			  strstr(out, "\n137s "),
		  "%s", out);
	/* -H: the row's name, the bucket's bound in ns, four counts, 37 buckets a row */
	COF_OK(NULL, "pool iostat -w -p -H -v tank");
	for (const char *s = out; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
		char g[8][64];

		if (!strncmp(s, l0, strlen(l0)) && s[strlen(l0)] == '\t') {
			cr_assert_eq(row(s, l0, g, 8), 6, "%s", s);
			sum += num(g[3]);
			n++;
		}
	}
	cr_assert_eq(n, 37, "%s", out);
	cr_assert_gt(sum, 0, "no write in l0's histogram:\n%s", out);
}

Test(iostat, bad_input_is_refused_and_changes_nothing)
{
	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, tdaemon_path(&td, "l0"),
	       tdaemon_path(&td, "l1"));

	cr_assert_eq(cof("pool iostat nosuch"), 1, "%s", out);
	cr_assert(strstr(out, "nosuch") && strstr(out, "no such pool"), "%s", out);
	cr_assert_eq(cof("pool iostat tank 0"), 2, "%s", out);
	cr_assert(strstr(out, "interval '0'") && strstr(out, "greater than 0"), "%s", out);
	cr_assert_eq(cof("pool iostat tank abc"), 2, "%s", out);
	cr_assert(strstr(out, "interval 'abc'"), "%s", out);
	cr_assert_eq(cof("pool iostat tank 1x"), 2, "%s", out);
	cr_assert_eq(cof("pool iostat tank 1 0"), 2, "%s", out);
	cr_assert(strstr(out, "count '0'"), "%s", out);
	cr_assert_eq(cof("pool iostat tank 1 two"), 2, "%s", out);
	cr_assert(strstr(out, "count 'two'"), "%s", out);
	cr_assert_eq(cof("pool iostat tank 1 2 3"), 2, "%s", out);
	cr_assert(strstr(out, "usage: coffer pool iostat"), "%s", out);
	cr_assert_eq(cof("pool iostat -w -l tank"), 2, "%s", out);
	cr_assert(strstr(out, "-w"), "%s", out);
	cr_assert_eq(cof("pool iostat -x tank"), 2, "%s", out);
	COF_OK(NULL, "pool status -x");
	cr_assert(strstr(out, "all pools are healthy"), "%s", out);
}
