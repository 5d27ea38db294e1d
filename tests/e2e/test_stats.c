/* SPDX-License-Identifier: MIT */
/*
 * Statistics and the data cache through the real daemon: cache_size from
 * the config sizes the cache, SIGHUP applies a changed cache_size, and
 * `coffer stats` agrees with the I/O that was done, as JSON and as the
 * per-dataset interval table.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

TDAEMON_FIXTURE("cache_size = 4M\n")
static char out[1 << 16];

TestSuite(stats, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static json_t *stats_json(void)
{
	return tdaemon_coffer_json(&td, "stats --json-int");
}

static long long jget(json_t *j, const char *a, const char *b)
{
	return (long long)json_integer_value(json_object_get(json_object_get(j, a), b));
}

Test(stats, counters_and_cache_agree_with_the_io_done)
{
	static char data[64 * 1024];
	const char *in;
	json_t *j;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7);
	in = tdaemon_file(&td, "in", data, sizeof(data));
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 1M tank/a");
	COF_OK(in, "write tank/a");
	for (int i = 0; i < 3; i++)
		COF_OK(NULL, "read -l 64K tank/a > /dev/null");

	j = stats_json();
	cr_assert_eq(jget(j, "cache", "capacity"), 4 << 20, "cache_size not applied");
	cr_assert_geq(jget(j, "cache", "hits"), 16, "repeated reads did not hit the cache");
	json_decref(j);

	COF_OK(NULL, "stats --json-int -d tank/a");
	j = json_loads(out, 0, NULL);
	cr_assert(j);
	cr_assert_eq(jget(j, "dataset", "writes"), 1);
	cr_assert_eq(jget(j, "dataset", "write_bytes"), (long long)sizeof(data));
	cr_assert_eq(jget(j, "dataset", "read_bytes"), 3 * (long long)sizeof(data));
	cr_assert_eq(jget(j, "dataset", "cache_hits") + jget(j, "dataset", "cache_misses"),
		     3 * 8, "every record read is a hit or a miss");
	json_decref(j);

	/* the interval table names every dataset */
	COF_OK(NULL, "stats 1 1");
	cr_assert(strstr(out, "pool/dataset") && strstr(out, "  tank/a"), "table:\n%s", out);
}

Test(stats, sighup_applies_a_new_cache_size)
{
	FILE *f;
	json_t *j;

	/* the same key twice would be refused: change it in place */
	{
		char buf[8192], *p;
		size_t n;

		f = fopen(td.conf, "r");
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		p = strstr(buf, "cache_size = 4M\n");
		cr_assert(p, "fixture config lacks cache_size:\n%s", buf);
		memcpy(p, "cache_size = 1M\n", 16);
		f = fopen(td.conf, "w");
		fwrite(buf, 1, n, f);
		fclose(f);
	}
	kill(td.pid, SIGHUP);
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);;) {
		j = stats_json();
		if (jget(j, "cache", "capacity") == 1 << 20)
			break;
		json_decref(j);
		j = NULL;
		if (!tdaemon_poll(end))
			break;
	}
	cr_assert(j, "SIGHUP did not apply cache_size = 1M:\n%s", tdaemon_log(&td));
	json_decref(j);
}

/* What a bench run did is what the daemon counted, give or take the
 * requests still in flight when the run's clock stopped. */
Test(stats, counters_agree_with_a_bench_run)
{
	char cmd[3 * 1024];
	json_error_t e;
	json_t *b, *avg, *j;
	long long breads, bwrites, dreads, dwrites;
	const int qd = 4;

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 4M tank/a");
	snprintf(cmd, sizeof(cmd),
		 "bench -q --datasets tank/a --rw randrw --rdpct 70 --bs 8k --qd %d --time 2s "
		 "--json %s/b.json",
		 qd, td.dir);
	COF_OK(NULL, "%s", cmd);
	snprintf(cmd, sizeof(cmd), "%s/b.json", td.dir);
	b = json_load_file(cmd, 0, &e);
	cr_assert(b, "bench JSON: %s", e.text);
	/* without --json-int every number is a string, and a real keeps every digit */
	avg = json_object_get(json_array_get(json_object_get(b, "runs"), 0), "average");
	cr_assert_str_eq(json_string_value(json_object_get(avg, "bytes_per_io")), "8192");
	cr_assert_str_eq(json_string_value(json_object_get(b, "version")), "2");
	breads = strtoll(json_string_value(json_object_get(avg, "reads")), NULL, 10);
	bwrites = strtoll(json_string_value(json_object_get(avg, "writes")), NULL, 10);
	cr_assert_gt(breads, 0);
	cr_assert_gt(bwrites, 0);

	COF_OK(NULL, "stats --json-int -d tank/a");
	j = json_loads(out, 0, NULL);
	cr_assert(j);
	dreads = jget(j, "dataset", "reads");
	dwrites = jget(j, "dataset", "writes");
	cr_assert(dreads + dwrites >= breads + bwrites &&
			  dreads + dwrites <= breads + bwrites + qd,
		  "daemon counted %lld reads + %lld writes, bench %lld + %lld", dreads, dwrites,
		  breads, bwrites);
	cr_assert(dreads >= breads && dwrites >= bwrites);
	cr_assert_eq(jget(j, "dataset", "errors"), 0);
	json_decref(j);
	json_decref(b);
}

/* io_inline: record I/O runs on the loop thread; the same data must come back */
static void inline_setup(void)
{
	tdaemon_init(&td, "io_inline = yes\n");
	cr_assert_eq(tdaemon_start(&td), 0, "cofferd did not start:\n%s", tdaemon_log(&td));
}

TestSuite(io_inline, .init = inline_setup, .fini = teardown, .timeout = 240);

Test(io_inline, validating_bench_and_round_trip)
{
	static char data[256 * 1024];
	char in[1024];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 13 + 1);
	/* tdaemon_file() returns a static buffer: keep a copy */
	snprintf(in, sizeof(in), "%s", tdaemon_file(&td, "in", data, sizeof(data)));
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 4M tank/a");
	COF_OK(NULL, "create -V 4M -o encryption=aes-256-gcm -o keyformat=passphrase "
		     "-o pbkdf2iters=100000 -o keylocation=file://%s tank/e",
	       tdaemon_file(&td, "pass", "inline passphrase\n", 18));
	COF_OK(in, "write tank/e");
	COF_OK(NULL, "flush tank/e");
	COF_OK(NULL, "read -l 256K tank/e > %s/out", td.dir);
	{
		/* the seals and opens of tank/e went to the cipher, and the bursts say so */
		json_t *j, *b;
		long long sealed = 0, opened = 0;
		size_t i;

		COF_OK(NULL, "stats --json-int");
		j = json_loads(out, 0, NULL);
		cr_assert(j, "stats: %s", out);
		json_array_foreach(json_object_get(json_object_get(j, "crypto"), "seal_bursts"), i, b)
			sealed += json_integer_value(b);
		json_array_foreach(json_object_get(json_object_get(j, "crypto"), "open_bursts"), i, b)
			opened += json_integer_value(b);
		cr_assert(sealed > 0 && opened > 0, "no crypto bursts counted: %s", out);
		json_decref(j);
	}
	{
		char cmd[3 * 1024];

		snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/out'", in, td.dir);
		cr_assert_eq(system(cmd), 0, "data read back differs");
	}
	COF_OK(NULL, "bench -q -v --journal %s/journal --datasets 'tank/*' --rw randrw --rdpct 50 "
		     "--bs 8k --qd 8 --time 2s",
	       td.dir);
}
