// SPDX-License-Identifier: MIT
/*
 * E2E: mirror vdevs through the real cofferd and coffer, on real LUN files.
 * What must hold: every extent is on every side; junk over random 64 KiB
 * ranges of one side's data region never reaches a reader, the bad copies
 * are rewritten and counted per LUN, and the other side damaged at the same
 * places afterwards still reads back; a 3-way mirror with two sides damaged
 * at different places reads back; a record damaged on both sides fails
 * (ECKSUM) and nothing else does; status shows the tree and clear resets
 * the counts; a malformed vdev list changes nothing. Degraded import: a
 * mirror whose first side's file is gone after a kill -9 imports DEGRADED,
 * the side UNAVAIL, and serves reads and writes. Resilver: a side's file
 * deleted while the pool reads and writes costs no client an error, the
 * mirror goes DEGRADED, pool replace onto a new file resilvers it, a kill -9
 * mid-resilver and a restart finish it, the mirror is ONLINE and a scrub
 * finds nothing; offline and online through coffer copy only what the side
 * missed; attach and detach.
 */

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"

#define DATA_OFF (1u << 20) /* LUN_DATA_OFF of libstore/kv/format.h */
#define LUN_SIZE (24u << 20)
#define VOL (2u << 20)
#define JUNK (64u << 10)

#ifndef TEST_DIRECT_IO
#define TEST_DIRECT_IO 0
#endif
/* built twice: test_mirror_direct heals reads done on the loop's ring */
TDAEMON_FIXTURE(TEST_DIRECT_IO ? "direct_io = yes" : NULL)
TestSuite(mirror, .init = setup, .fini = teardown, .timeout = 240);

static char out[1 << 17];
#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static const char *lun(const char *name)
{
	return tdaemon_path(&td, "%s", name);
}

static int files_equal(const char *a, const char *b)
{
	char cmd[2 * 4096 + 32];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* Read dataset @ds whole into a file; does it equal @want? */
static int reads_back(const char *ds, const char *want)
{
	char back[4096], args[8192];

	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(args, sizeof(args), "read -l %u %s > '%s'", VOL, ds, back);
	if (tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args) != 0)
		return 0;
	return files_equal(want, back);
}

/* Junk over @len bytes at @off of file @path. */
static void junk(const char *path, uint64_t off, size_t len, unsigned seed)
{
	char *b = malloc(len);
	int fd = open(path, O_WRONLY);

	cr_assert(b && fd >= 0, "%s", path);
	srand(seed);
	for (size_t i = 0; i < len; i++)
		b[i] = (char)rand();
	cr_assert_eq(pwrite(fd, b, len, (off_t)off), (ssize_t)len);
	close(fd);
	free(b);
}

/* The LUNs of pool @pool as -j pool status lists them (the caller decrefs). */
static json_t *status(const char *pool)
{
	char args[256];
	json_t *j, *p;

	snprintf(args, sizeof(args), "--json-int pool status %s", pool);
	j = tdaemon_coffer_json(&td, args);
	p = json_object_get(json_object_get(j, "pools"), pool);
	cr_assert_not_null(p);
	json_incref(p);
	json_decref(j);
	return p;
}

static long long lun_count(json_t *p, size_t i, const char *key)
{
	return (long long)json_integer_value(
		json_object_get(tdaemon_status_lun(p, i), key));
}

/* A clear and an encrypted dataset of random bytes, written and flushed. */
static void fill(char clear[4096], char enc[4096])
{
	const char *pf = tdaemon_file(&td, "pass", "correct horse battery", 21);

	COF_OK(NULL, "create -V %u tank/c", VOL);
	COF_OK(NULL,
	       "create -V %u -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e",
	       VOL, pf);
	tdaemon_random_file(&td, "c.in", VOL, clear, 4096);
	tdaemon_random_file(&td, "e.in", VOL, enc, 4096);
	COF_OK(clear, "write tank/c");
	COF_OK(enc, "write tank/e");
	COF_OK(NULL, "flush tank/c");
	COF_OK(NULL, "flush tank/e");
}

/* Random 64 KiB ranges over the first @span bytes of the data region. */
#define NRANGES 24
static uint64_t ranges[NRANGES];

static void pick_ranges(uint64_t span, unsigned seed)
{
	srand(seed);
	for (int i = 0; i < NRANGES; i++)
		ranges[i] = DATA_OFF + (uint64_t)(rand() % (int)(span / JUNK)) * JUNK;
}

static json_t *scrub_done(void);
static long long scan_count(json_t *scan, const char *key);

Test(mirror, junk_on_one_side_then_the_other_never_reaches_a_reader)
{
	char clear[4096], enc[4096];
	long long repaired, cksum;
	json_t *p, *scan;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill(clear, enc);
	p = status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(tdaemon_status_vdev(p, 0), "vdev_type")),
			 "mirror");
	cr_assert_eq(tdaemon_status_nvdevs(p), 1);
	json_decref(p);

	/* both datasets sit in the first 2 x 2 MiB and the log: damage those */
	pick_ranges(6u << 20, 17);
	for (int i = 0; i < NRANGES; i++)
		junk(lun("l0"), ranges[i], JUNK, (unsigned)i);
	cr_assert(reads_back("tank/c", clear), "clear dataset: %s\n%s", out, tdaemon_log(&td));
	cr_assert(reads_back("tank/e", enc), "encrypted dataset: %s\n%s", out, tdaemon_log(&td));
	p = status("tank");
	repaired = lun_count(p, 0, "repaired");
	cksum = lun_count(p, 0, "checksum_errors");
	cr_assert_gt(repaired, 0, "repairs are counted on the damaged side");
	cr_assert_eq(repaired, cksum, "every bad copy found was rewritten");
	cr_assert_eq(lun_count(p, 1, "checksum_errors"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE");
	json_decref(p);
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "mirror-0") && strstr(out, "rewritten from another side"), "%s",
		  out);
	/* the operator is told, and what to do (zpool status -x) */
	COF_OK(NULL, "pool status -x");
	cr_assert(strstr(out, "  pool: tank") && strstr(out, "status: A LUN had errors") &&
			  strstr(out, "action: ") && strstr(out, "'coffer pool clear tank'"),
		  "%s", out);

	/* reads turn over the sides, so some bad copies were never read: a
	 * scrub, keys unloaded, mends the rest and a second one finds nothing */
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "pool scrub tank");
	scan = scrub_done();
	cr_assert_eq(scan_count(scan, "errors"), 0);
	json_decref(scan);
	COF_OK(NULL, "pool scrub tank");
	scan = scrub_done();
	cr_assert_eq(scan_count(scan, "repaired"), 0, "a second scrub finds nothing");
	json_decref(scan);
	COF_OK(NULL, "load-key tank/e");

	/* every copy on l0 is sound now: the other side may go bad */
	for (int i = 0; i < NRANGES; i++)
		junk(lun("l1"), ranges[i], JUNK, 100u + (unsigned)i);
	cr_assert(reads_back("tank/c", clear), "clear, other side: %s", out);
	cr_assert(reads_back("tank/e", enc), "encrypted, other side: %s", out);
	p = status("tank");
	cr_assert_gt(lun_count(p, 1, "repaired"), 0);
	json_decref(p);

	/* clear resets the counts, and the pool is healthy again */
	COF_OK(NULL, "pool clear tank");
	p = status("tank");
	cr_assert_eq(lun_count(p, 0, "repaired") + lun_count(p, 1, "repaired") +
			     lun_count(p, 0, "checksum_errors") + lun_count(p, 1, "checksum_errors"),
		     0);
	json_decref(p);
	COF_OK(NULL, "pool status -x");
	cr_assert(strstr(out, "all pools are healthy") && !strstr(out, "tank"), "%s", out);
	COF_OK(NULL, "pool status tank");
	cr_assert(!strstr(out, "status:") && !strstr(out, "action:"), "%s", out);

	/* and the pool imports from its mirror's labels */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "load-key tank/e");
	cr_assert(reads_back("tank/c", clear), "after restart: %s", out);
	cr_assert(reads_back("tank/e", enc), "after restart: %s", out);
}

Test(mirror, three_sides_two_damaged_at_different_places)
{
	char clear[4096], enc[4096];

	COF_OK(NULL, "pool create -s %u tank mirror %s %s %s", LUN_SIZE, lun("l0"), lun("l1"),
	       lun("l2"));
	fill(clear, enc);
	pick_ranges(6u << 20, 5);
	for (int i = 0; i < NRANGES; i++)
		junk(lun(i % 2 ? "l0" : "l1"), ranges[i], JUNK, (unsigned)i);
	/* ranges of l0 and l1 may overlap: l2 still has every copy */
	cr_assert(reads_back("tank/c", clear), "%s", out);
	cr_assert(reads_back("tank/e", enc), "%s", out);
}

/* Where the first 64 bytes of @file's record @rec are in LUN file @path. */
static uint64_t find_record(const char *path, const char *file, unsigned rec)
{
	char want[64];
	struct stat st;
	char *buf;
	char *hit;
	int fd = open(file, O_RDONLY);
	uint64_t off;

	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, want, sizeof(want), (off_t)rec * 8192), (ssize_t)sizeof(want));
	close(fd);
	fd = open(path, O_RDONLY);
	cr_assert(fd >= 0 && fstat(fd, &st) == 0);
	buf = malloc((size_t)st.st_size);
	cr_assert_not_null(buf);
	cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	hit = memmem(buf, (size_t)st.st_size, want, sizeof(want));
	cr_assert_not_null(hit, "record %u of %s is on %s", rec, file, path);
	off = (uint64_t)(hit - buf);
	free(buf);
	return off;
}

Test(mirror, both_sides_damaged_fail_that_record_only)
{
	char clear[4096], enc[4096], args[256];
	uint64_t off;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill(clear, enc);
	off = find_record(lun("l0"), clear, 9);
	cr_assert_eq(off, find_record(lun("l1"), clear, 9), "one sector on every side");
	junk(lun("l0"), off, 512, 1);
	junk(lun("l1"), off + 1024, 512, 2);
	cr_assert_eq(cof(NULL, "read -o %u -l 8192 tank/c", 9 * 8192), 1);
	cr_assert(strstr(out, "checksum"), "%s", out);
	/* every other record reads: the ones before it, then the ones after
	 * (one read each, not a coffer per record: a loaded machine ran out
	 * of the suite's time) */
	snprintf(args, sizeof(args), "read -o 0 -l %u tank/c > /dev/null", 9 * 8192);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args), 0,
		     "records 0-8: %s", out);
	snprintf(args, sizeof(args), "read -o %u -l %u tank/c > /dev/null", 10 * 8192,
		 (unsigned)VOL - 10 * 8192);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args), 0,
		     "records 10-: %s", out);
	cr_assert(reads_back("tank/e", enc), "the other dataset: %s", out);

	/* status -v names that record, and only it, across a restart too */
	for (int round = 0; round < 2; round++) {
		json_t *p = status("tank"), *e;

		cr_assert_eq(json_integer_value(json_object_get(p, "data_errors")), 1);
		e = json_array_get(json_object_get(p, "error_records"), 0);
		cr_assert_str_eq(json_string_value(json_object_get(e, "dataset")), "tank/c");
		cr_assert_eq(json_integer_value(json_object_get(e, "record")), 9);
		json_decref(p);
		COF_OK(NULL, "pool status -v tank");
		cr_assert(strstr(out, "Permanent errors") && strstr(out, "tank/c record 9 "), "%s",
			  out);
		tdaemon_stop_ok(&td);
		tdaemon_start_ok(&td);
	}
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "1 records with unrecoverable errors"), "%s", out);
	COF_OK(NULL, "pool clear tank");
	COF_OK(NULL, "pool status -v tank");
	cr_assert(strstr(out, "No known data errors"), "cleared: %s", out);
}

Test(mirror, add_a_mirror_and_refuse_malformed_vdevs)
{
	json_t *p, *v;

	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	COF_OK(NULL, "pool add -s %u tank mirror %s %s", LUN_SIZE, lun("m0"), lun("m1"));
	p = status("tank");
	cr_assert_eq(tdaemon_status_nvdevs(p), 2);
	v = tdaemon_status_vdev(p, 0);
	cr_assert_str_eq(json_string_value(json_object_get(v, "vdev_type")), "file");
	v = tdaemon_status_vdev(p, 1);
	cr_assert_str_eq(json_string_value(json_object_get(v, "name")), "mirror-0");
	/* LUN 2 is the second side of mirror-0 */
	cr_assert_eq(json_object_get(json_object_get(v, "vdevs"), lun("m1")),
		     tdaemon_status_lun(p, 2));
	json_decref(p);

	/* one side, four sides, sides of two sizes: refused, nothing made */
	cr_assert_neq(cof(NULL, "pool create -s %u t2 mirror %s", LUN_SIZE, lun("x0")), 0);
	cr_assert(strstr(out, "mirror: give 2 to 3 LUNs"), "%s", out);
	cr_assert_neq(cof(NULL, "pool create -s %u t2 mirror %s %s %s %s", LUN_SIZE, lun("x0"),
			  lun("x1"), lun("x2"), lun("x3")),
		      0);
	cr_assert_neq(cof(NULL, "pool add -s %u tank mirror %s", LUN_SIZE, lun("x0")), 0);
	{
		int fd = open(lun("big"), O_CREAT | O_WRONLY, 0600);

		cr_assert(fd >= 0);
		cr_assert_eq(ftruncate(fd, 2 * (off_t)LUN_SIZE), 0);
		close(fd);
	}
	cr_assert_eq(cof(NULL, "pool create -s %u t2 mirror %s %s", LUN_SIZE, lun("x0"),
			 lun("big")),
		     1);
	cr_assert(strstr(out, "of one size"), "%s", out);
	cr_assert_eq(cof(NULL, "pool status t2"), 1, "no pool t2: %s", out);
}

/* -j pool status's scan, once the scrub is no longer running (bounded). */
static json_t *scrub_done(void)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	for (;;) {
		json_t *p = status("tank"), *scan = json_object_get(p, "scan");
		const char *state = json_string_value(json_object_get(scan, "state"));

		cr_assert_not_null(state);
		if (strcmp(state, "scanning")) {
			json_incref(scan);
			json_decref(p);
			return scan;
		}
		json_decref(p);
		cr_assert(tdaemon_poll(end), "scrub still running");
	}
}

static long long scan_count(json_t *scan, const char *key)
{
	return (long long)json_integer_value(json_object_get(scan, key));
}

Test(mirror, scrub_with_keys_unloaded_repairs_then_finds_nothing)
{
	char clear[4096], enc[4096];
	json_t *scan;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill(clear, enc);
	pick_ranges(6u << 20, 29);
	for (int i = 0; i < NRANGES; i++)
		junk(lun("l0"), ranges[i], JUNK, (unsigned)i);
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "pool scrub tank");
	scan = scrub_done();
	cr_assert_str_eq(json_string_value(json_object_get(scan, "state")), "finished");
	cr_assert_gt(scan_count(scan, "repaired"), 0);
	cr_assert_eq(scan_count(scan, "errors"), 0);
	cr_assert_geq(scan_count(scan, "examined"), 2 * VOL);
	json_decref(scan);
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "scan: scrub finished"), "%s", out);

	COF_OK(NULL, "pool scrub tank");
	scan = scrub_done();
	cr_assert_eq(scan_count(scan, "repaired"), 0, "a second scrub finds nothing");
	cr_assert_eq(scan_count(scan, "errors"), 0);
	json_decref(scan);
	cr_assert_neq(cof(NULL, "pool scrub -p tank"), 0, "nothing to pause: %s", out);

	/* l0 holds everything again: l1 may go bad at the same places */
	for (int i = 0; i < NRANGES; i++)
		junk(lun("l1"), ranges[i], JUNK, 50u + (unsigned)i);
	COF_OK(NULL, "load-key tank/e");
	cr_assert(reads_back("tank/c", clear), "%s", out);
	cr_assert(reads_back("tank/e", enc), "%s", out);
}

static const char *lun_state(json_t *p, size_t i)
{
	return json_string_value(
		json_object_get(tdaemon_status_lun(p, i), "state"));
}

Test(mirror, a_mirror_whose_first_side_is_gone_imports_degraded_and_serves)
{
	char clear[4096], enc[4096], more[4096];
	json_t *p;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill(clear, enc);
	/* the daemon dies, and the first side's file with it */
	kill(td.pid, SIGKILL);
	waitpid(td.pid, NULL, 0);
	td.pid = -1;
	cr_assert_eq(unlink(lun("l0")), 0);
	tdaemon_start_ok(&td);
	p = status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "DEGRADED", "%s",
			 tdaemon_log(&td));
	cr_assert_str_eq(lun_state(p, 0), "UNAVAIL");
	cr_assert_str_eq(lun_state(p, 1), "ONLINE");
	cr_assert_str_eq(json_string_value(json_object_get(tdaemon_status_vdev(p, 0), "state")),
			 "DEGRADED");
	json_decref(p);
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "UNAVAIL") && strstr(out, "cannot open"), "%s", out);
	COF_OK(NULL, "load-key tank/e");
	cr_assert(reads_back("tank/c", clear), "clear, degraded: %s", out);
	cr_assert(reads_back("tank/e", enc), "encrypted, degraded: %s", out);
	tdaemon_random_file(&td, "more.in", VOL, more, sizeof(more));
	COF_OK(more, "write tank/c");
	COF_OK(NULL, "flush tank/c");
	cr_assert(reads_back("tank/c", more), "written degraded: %s", out);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	cr_assert(reads_back("tank/c", more), "after a restart: %s", out);

	/* exported, its state directory lost: a scan finds one side, imports */
	COF_OK(NULL, "pool export tank");
	tdaemon_stop_ok(&td);
	{
		char cmd[8192];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'/pools", td.state);
		cr_assert_eq(system(cmd), 0);
	}
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s", td.dir);
	cr_assert(strstr(out, "imports DEGRADED"), "the listing says so: %s", out);
	COF_OK(NULL, "pool import -d %s tank", td.dir);
	p = status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "DEGRADED", "%s",
			 tdaemon_log(&td));
	cr_assert_str_eq(lun_state(p, 0), "UNAVAIL");
	json_decref(p);
	cr_assert(reads_back("tank/c", more), "imported by a scan: %s", out);
}

/* The pool's status once @done(p) holds (bounded); the caller decrefs. */
static json_t *status_when(int (*done)(json_t *p), const char *what)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	for (;;) {
		json_t *p = status("tank");

		if (done(p))
			return p;
		json_decref(p);
		cr_assert(tdaemon_poll(end), "no %s in time:\n%s", what, tdaemon_log(&td));
	}
}

static int degraded(json_t *p)
{
	return !strcmp(json_string_value(json_object_get(p, "state")), "DEGRADED");
}

static const char *scan_str(json_t *p, const char *key)
{
	return json_string_value(json_object_get(json_object_get(p, "scan"), key));
}

static int resilvering(json_t *p)
{
	return !strcmp(scan_str(p, "function"), "resilver") &&
	       !strcmp(scan_str(p, "state"), "scanning") &&
	       scan_count(json_object_get(p, "scan"), "examined") > 0;
}

static int resilvered(json_t *p)
{
	return !strcmp(scan_str(p, "function"), "resilver") &&
	       !strcmp(scan_str(p, "state"), "finished") &&
	       !strcmp(json_string_value(json_object_get(p, "state")), "ONLINE");
}

/* The daemon again, its scrub and resilver slow enough to be caught midway. */
static void slow_scans(void)
{
	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nlog_level = debug\nlog_target = stderr\n"
			   "workers = 2\ntxg_timeout = 1\nscrub_rate = 512K\n");
	tdaemon_start_ok(&td);
}

Test(mirror, a_side_deleted_under_load_is_replaced_and_resilvered_across_a_kill)
{
	char clear[4096], enc[4096], more[4096];
	json_t *p, *scan;

	slow_scans();
	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill(clear, enc);
	/* the file goes while the pool reads and writes: no client sees it */
	cr_assert_eq(unlink(lun("l1")), 0);
	tdaemon_random_file(&td, "more.in", VOL, more, sizeof(more));
	COF_OK(more, "write tank/c");
	cr_assert(reads_back("tank/e", enc), "read after the delete: %s", out);
	COF_OK(NULL, "flush tank/c");
	cr_assert(reads_back("tank/c", more), "written after the delete: %s", out);
	p = status_when(degraded, "DEGRADED");
	cr_assert_str_eq(lun_state(p, 1), "FAULTED");
	json_decref(p);
	cr_assert_eq(cof(NULL, "pool online tank %s", lun("l1")), 1, "its file is gone: %s", out);
	cr_assert(strstr(out, "No such file"), "and online says so: %s", out);

	/* a new file in its place, resilvered; a kill -9 midway */
	COF_OK(NULL, "pool replace tank %s %s", lun("l1"), lun("l2"));
	p = status_when(resilvering, "resilver under way");
	cr_assert_str_eq(json_string_value(json_object_get(tdaemon_status_lun(p, 1), "path")),
			 lun("l2"));
	cr_assert_str_eq(lun_state(p, 1), "RESILVERING");
	json_decref(p);
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "resilver in progress"), "%s", out);
	kill(td.pid, SIGKILL);
	waitpid(td.pid, NULL, 0);
	td.pid = -1;
	tdaemon_start_ok(&td);
	p = status_when(resilvered, "resilver finished after the restart");
	cr_assert_str_eq(lun_state(p, 0), "ONLINE");
	cr_assert_str_eq(lun_state(p, 1), "ONLINE");
	cr_assert_geq(scan_count(json_object_get(p, "scan"), "repaired"), 2 * VOL,
		      "every record of the vdev was copied");
	json_decref(p);

	/* the new side alone serves everything, and a scrub finds nothing */
	COF_OK(NULL, "pool offline tank %s", lun("l0"));
	COF_OK(NULL, "pool status -x tank");
	cr_assert(strstr(out, "status: LUN ") && strstr(out, "was taken offline") &&
			  strstr(out, "action: Bring it online with 'coffer pool online tank"),
		  "%s", out);
	COF_OK(NULL, "load-key tank/e");
	cr_assert(reads_back("tank/c", more), "from the new side: %s", out);
	cr_assert(reads_back("tank/e", enc), "from the new side: %s", out);
	COF_OK(NULL, "pool online tank %s", lun("l0"));
	json_decref(status_when(resilvered, "online resilvered"));
	COF_OK(NULL, "pool scrub tank");
	scan = scrub_done();
	cr_assert_str_eq(json_string_value(json_object_get(scan, "function")), "scrub");
	cr_assert_eq(scan_count(scan, "errors"), 0);
	cr_assert_eq(scan_count(scan, "repaired"), 0, "a scrub after the resilver finds nothing");
	json_decref(scan);
}

Test(mirror, attach_and_detach_through_coffer)
{
	char clear[4096], enc[4096];
	json_t *p;

	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	fill(clear, enc);
	cr_assert_eq(cof(NULL, "pool detach tank %s", lun("l0")), 1, "a LUN of its own: %s", out);
	cr_assert(strstr(out, "no side of a mirror"), "%s", out);
	COF_OK(NULL, "pool attach tank %s %s", lun("l0"), lun("l1"));
	json_decref(status_when(resilvered, "attach resilvered"));
	p = status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(tdaemon_status_vdev(p, 0), "vdev_type")),
			 "mirror");
	json_decref(p);
	COF_OK(NULL, "pool detach tank %s", lun("l0"));
	cr_assert_eq(cof(NULL, "pool detach tank %s", lun("l1")), 1, "the last side: %s", out);
	cr_assert(reads_back("tank/c", clear), "after detach: %s", out);
	cr_assert(reads_back("tank/e", enc), "after detach: %s", out);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	p = status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE", "%s",
			 tdaemon_log(&td));
	json_decref(p);
	COF_OK(NULL, "pool status tank");
	cr_assert(!strstr(out, lun("l0")), "a detached side is not in the tree: %s", out);
	COF_OK(NULL, "load-key tank/e");
	cr_assert(reads_back("tank/c", clear), "after a restart: %s", out);
}
