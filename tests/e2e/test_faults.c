// SPDX-License-Identifier: MIT
/*
 * E2E: cofferd with tests/fault/faultinj.so preloaded, so the LUN files
 * fail on command (EIO and short reads, EIO and ENOSPC on writes, failed
 * fsync), and LUN and metadata files damaged on disk. What must hold: a
 * read returns the data last acknowledged or an error, never other bytes;
 * a LUN with repeated errors shows FAULTED in pool status until pool clear;
 * a full file system is out of space and faults nothing; a failed flush
 * is not acknowledged and every acknowledged one survives a restart; a
 * damaged pool refuses import while the others go on serving, and one
 * damaged label copy is repaired from the other.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"
#include "store.h"

#define REC 8192u
#define NREC 64u
#define DATA_OFF (1u << 20) /* LUN_DATA_OFF of libstore/kv/format.h */

static struct tdaemon td;
static char out[65536];
static char ctl[4096], flog[4096];

/* Start cofferd with the shim preloaded; the client processes run without it. */
static void start(void)
{
	const char *so = getenv("COFFER_FAULTINJ");
	char env_asan[256];

	if (!so || access(so, R_OK) != 0)
		cr_skip_test("COFFER_FAULTINJ (tests/fault/faultinj.so) not built");
	snprintf(env_asan, sizeof(env_asan),
		 "verify_asan_link_order=0:detect_leaks=1:abort_on_error=0:exitcode=23");
	setenv("LD_PRELOAD", so, 1);
	setenv("ASAN_OPTIONS", env_asan, 1);
	setenv("COFFER_FAULT_CTL", ctl, 1);
	setenv("COFFER_FAULT_LOG", flog, 1);
	tdaemon_start_ok(&td);
	unsetenv("LD_PRELOAD");
	unsetenv("COFFER_FAULT_CTL");
	unsetenv("COFFER_FAULT_LOG");
}

static struct timespec armed; /* the control file's mtime at the last arm */

/* Arm the rules in @rules ('|' or newline separated); "" disarms. */
static void arm(const char *rules)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", ctl);
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fprintf(f, "%s\n", rules);
	fclose(f);
	cr_assert_eq(rename(tmp, ctl), 0);
	/* the shim rereads the file when its mtime changes, and file times move
	 * in clock ticks: touch it until its mtime differs from the last arm's */
	for (;;) {
		struct stat st;

		cr_assert_eq(stat(ctl, &st), 0);
		if (st.st_mtim.tv_sec != armed.tv_sec || st.st_mtim.tv_nsec != armed.tv_nsec) {
			armed = st.st_mtim;
			break;
		}
		poll(NULL, 0, 1);
		cr_assert_eq(utimensat(AT_FDCWD, ctl, NULL, 0), 0);
	}
}

/* Faults the shim reported so far. */
static int injected(void)
{
	FILE *f = fopen(flog, "r");
	int n = 0, ch;

	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

/* The daemon's dir and config, and the shim's control and log files in it. */
static void init_dir(void)
{
	/* every LUN read must be a pread the shim can fail, also when TMPDIR is
	 * tmpfs; and no timer commit: a test decides which commit a fault hits
	 * (its flush's, a destroy's) and which retries it, and on a loaded
	 * machine the timer's can come between the writes and the arm, leave the
	 * flush nothing to commit, or retry a destroy before the test does */
	tdaemon_init(&td, "lun_mmap = no\ntxg_timeout = 300\n");
	snprintf(ctl, sizeof(ctl), "%s/faults", td.dir);
	snprintf(flog, sizeof(flog), "%s/faults.log", td.dir);
}

static void setup(void)
{
	init_dir();
	arm("");
	start();
}

static void teardown(void)
{
	arm("");
	tdaemon_stop_ok(&td);
	tdaemon_cleanup(&td);
}

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 240);

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

static void make_pool(const char *name)
{
	COF_OK("pool create -s 64M %s %s/%s-l0 %s/%s-l1", name, td.dir, name, td.dir, name);
}

/* The content generation @gen of record @i: unique per (record, generation). */
static void fill(uint8_t *buf, unsigned i, unsigned gen)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (uint64_t)gen << 40;

	for (unsigned k = 0; k < REC; k += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + k, &x, 8);
	}
}

static struct coffer_conn *open_ds(const char *name, int *h)
{
	struct coffer_conn *c = NULL;

	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	*h = coffer_ds_open(c, name, NULL, NULL);
	cr_assert_geq(*h, 0, "open %s: %d\n%s", name, *h, tdaemon_log(&td));
	return c;
}

static void write_gen(struct coffer_conn *c, int h, unsigned gen)
{
	static uint8_t buf[REC];

	for (unsigned i = 0; i < NREC; i++) {
		fill(buf, i, gen);
		cr_assert_eq(coffer_write(c, h, (uint64_t)i * REC, buf, REC), 0, "write %u", i);
	}
}

/* write_gen(), then a flush that must be acknowledged. */
static void write_gen_flushed(struct coffer_conn *c, int h, unsigned gen)
{
	write_gen(c, h, gen);
	cr_assert_eq(coffer_ds_flush(c, h), 0);
}

/* Dataset @name opened, generation 1 written and flushed. */
static struct coffer_conn *seeded(const char *name, int *h)
{
	struct coffer_conn *c = open_ds(name, h);

	write_gen_flushed(c, *h, 1);
	return c;
}

/* Pool tank with dataset tank/a, seeded(). */
static struct coffer_conn *seeded_tank(int *h)
{
	make_pool("tank");
	COF_OK("create -V 4M tank/a");
	return seeded("tank/a", h);
}

/*
 * Read every record: each must hold generation @gen or fail. Returns the
 * number that failed; wrong bytes fail the test at once.
 */
static unsigned check_gen(struct coffer_conn *c, int h, unsigned gen, int *last_err)
{
	static uint8_t buf[REC], want[REC];
	unsigned failed = 0;

	for (unsigned i = 0; i < NREC; i++) {
		int ret;

		memset(buf, 0x5a, sizeof(buf));
		ret = coffer_read(c, h, (uint64_t)i * REC, buf, REC);
		if (ret < 0) {
			failed++;
			if (last_err)
				*last_err = ret;
			continue;
		}
		fill(want, i, gen);
		cr_assert_arr_eq(buf, want, REC, "record %u: a read returned wrong data", i);
	}
	return failed;
}

/*
 * Arm @rule and read back generation 1 of @h: @return the reads that
 * failed, the last error in *err and the faults the shim injected in *n.
 */
static unsigned read_fault(struct coffer_conn *c, int h, const char *rule, int *err, int *n)
{
	int before = injected();
	unsigned failed;

	arm(rule);
	failed = check_gen(c, h, 1, err);
	*n = injected() - before;
	cr_log_info("%s: %d faults injected, %u of %u reads failed (%s)", rule, *n, failed, NREC,
		    proto_strerror(*err));
	return failed;
}

/* pool_status of @pool as JSON (caller decrefs). */
static json_t *pool_status(const char *pool)
{
	struct coffer_conn *c = NULL;
	json_t *reply = NULL, *p;
	char err[512];
	int ret;

	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	ret = coffer_call(c, "pool_status", json_pack("{s:s}", "name", pool), &reply, err,
			  sizeof(err));
	coffer_close(c);
	cr_assert_eq(ret, 0, "pool_status %s: %d %s", pool, ret, err);
	p = json_incref(json_array_get(json_object_get(reply, "pools"), 0));
	json_decref(reply);
	cr_assert_not_null(p);
	return p;
}

/* Pool @pool is SUSPENDED, and says a metadata commit failed. */
static void assert_suspended_by_metadata(const char *pool)
{
	json_t *p = pool_status(pool);
	const char *err;

	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "SUSPENDED");
	err = json_string_value(json_object_get(p, "error"));
	cr_assert(err && strstr(err, "metadata commit failed"), "pool status says: %s",
		  err ? err : "(nothing)");
	cr_assert_str_eq(json_string_value(json_object_get(p, "suspended")), "metadata");
	json_decref(p);
	/* and the operator is told what lifts it */
	COF_OK("pool status -x %s", pool);
	cr_assert(strstr(out, "status: Writes to the pool are suspended") &&
			  strstr(out, "action: Free space where the daemon keeps its state"),
		  "%s", out);
}

static const char *lun_state(json_t *pool, unsigned i)
{
	json_t *l = json_array_get(json_object_get(pool, "luns"), i);
	json_t *st = json_object_get(l, "state");

	if (json_is_string(st))
		return json_string_value(st);
	/* a boolean "faulted" would do as well */
	return json_is_true(json_object_get(l, "faulted")) ? "FAULTED" : "ONLINE";
}

Test(faults, eio_on_lun_reads_is_an_error_never_wrong_data)
{
	struct coffer_conn *c;
	int h, err = 0, n;
	unsigned failed;

	c = seeded_tank(&h);
	failed = read_fault(c, h, "path=tank-l0;op=read;err=EIO|path=tank-l1;op=read;err=EIO", &err,
			    &n);
	cr_assert_eq(failed, NREC, "reads succeeded while every LUN read failed");
	cr_assert_eq(err, -EIO, "got %s", proto_strerror(err));
	/* the CLI says so in words and exits 1, and writes no data to stdout */
	cr_assert_eq(cof("read -l 65536 tank/a > /dev/null"), 1, "%s", out);
	cr_assert(strcasestr(out, "input/output error") || strcasestr(out, "I/O error"), "%s", out);
	cr_log_info("coffer read under EIO: %s", out);
	arm("");
	cr_assert_eq(check_gen(c, h, 1, NULL), 0, "data unreadable after the fault cleared");
	coffer_close(c);
}

Test(faults, repeated_read_errors_fault_the_lun_and_new_data_avoids_it)
{
	struct coffer_conn *c;
	json_t *p;
	int h;

	c = seeded_tank(&h);
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 0), "ONLINE");
	json_decref(p);
	arm("path=tank-l0;op=read;err=EIO");
	cr_assert_gt(check_gen(c, h, 1, NULL), STOR_LUN_FAULT_ERRORS - 1);
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 0), "FAULTED", "%s", json_dumps(p, 0));
	cr_assert_str_eq(lun_state(p, 1), "ONLINE", "%s", json_dumps(p, 0));
	cr_assert_geq(json_integer_value(json_object_get(
			      json_array_get(json_object_get(p, "luns"), 0), "read_errors")),
		      STOR_LUN_FAULT_ERRORS);
	json_decref(p);
	/* new data goes to the healthy LUN only, so it reads back with l0 still failing */
	write_gen_flushed(c, h, 2);
	cr_assert_eq(check_gen(c, h, 2, NULL), 0, "new records were placed on the faulted LUN");
	coffer_close(c);
}

/*
 * Write generation @gen of every record while writes are armed to fail:
 * @return how many failed; *nospc (if not NULL) counts the out-of-space ones.
 */
static unsigned write_gen_failing(struct coffer_conn *c, int h, unsigned gen, unsigned *nospc)
{
	static uint8_t buf[REC];
	unsigned failed = 0;

	for (unsigned i = 0; i < NREC; i++) {
		int ret;

		fill(buf, i, gen);
		ret = coffer_write(c, h, (uint64_t)i * REC, buf, REC);
		failed += ret < 0;
		if (nospc)
			*nospc += ret == STOR_ENOSPC;
	}
	return failed;
}

static void write_fault(const char *rule)
{
	static uint8_t buf[REC];
	struct coffer_conn *c;
	unsigned failed = 0;
	int h, before;
	json_t *p;

	c = seeded_tank(&h);
	before = injected();
	arm(rule);
	failed = write_gen_failing(c, h, 2, NULL);
	cr_log_info("%s: %d faults injected, %u of %u writes failed", rule, injected() - before,
		    failed, NREC);
	cr_assert_eq(failed, NREC, "writes acknowledged while every LUN write failed");
	arm("");
	/* the failed writes changed nothing: generation 1 is whole */
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	cr_assert_eq(coffer_ds_flush(c, h), 0);
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	/* every LUN saw enough errors to be faulted: no new data goes anywhere */
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 0), "FAULTED");
	cr_assert_str_eq(lun_state(p, 1), "FAULTED");
	json_decref(p);
	fill(buf, 0, 3);
	cr_assert_lt(coffer_write(c, h, 0, buf, REC), 0, "a write placed on a faulted LUN");
	coffer_close(c);
	/* export and import clear the fault; the pool takes writes again */
	COF_OK("pool export tank");
	COF_OK("pool import tank");
	c = open_ds("tank/a", &h);
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	write_gen_flushed(c, h, 3);
	cr_assert_eq(check_gen(c, h, 3, NULL), 0);
	coffer_close(c);
}

Test(faults, eio_on_lun_writes_fails_the_write_and_keeps_earlier_data)
{
	write_fault("path=tank-l0;op=write;err=EIO|path=tank-l1;op=write;err=EIO");
}

static json_int_t lun_count(json_t *pool, unsigned i, const char *field)
{
	return json_integer_value(
		json_object_get(json_array_get(json_object_get(pool, "luns"), i), field));
}

/*
 * A full file system is not a failing disk: the writes fail as out of
 * space, are counted apart, and the LUNs stay ONLINE, so once there is
 * space again the pool takes writes without an export.
 */
Test(faults, enospc_on_lun_writes_is_out_of_space_and_never_faults)
{
	struct coffer_conn *c;
	unsigned nospc = 0;
	int h;
	json_t *p;

	c = seeded_tank(&h);
	arm("path=tank-l0;op=write;err=ENOSPC|path=tank-l1;op=write;err=ENOSPC");
	cr_assert_eq(write_gen_failing(c, h, 2, &nospc), NREC,
		     "writes acknowledged while every LUN write failed");
	arm("");
	cr_assert_eq(nospc, NREC, "only %u of %u failed writes said out of space", nospc, NREC);
	p = pool_status("tank");
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_str_eq(lun_state(p, i), "ONLINE", "%s", json_dumps(p, 0));
		cr_assert_eq(lun_count(p, i, "write_errors"), 0, "%s", json_dumps(p, 0));
	}
	cr_assert_geq(lun_count(p, 0, "nospace_errors") + lun_count(p, 1, "nospace_errors"),
		      STOR_LUN_FAULT_ERRORS, "%s", json_dumps(p, 0));
	json_decref(p);
	COF_OK("pool status tank");
	cr_assert(strstr(out, "file system full"), "%s", out);
	/* space again: writes go through without an export */
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	write_gen_flushed(c, h, 3);
	cr_assert_eq(check_gen(c, h, 3, NULL), 0);
	coffer_close(c);
	COF_OK("pool clear tank");
	p = pool_status("tank");
	cr_assert_eq(lun_count(p, 0, "nospace_errors") + lun_count(p, 1, "nospace_errors"), 0);
	json_decref(p);
}

Test(faults, pool_clear_lifts_a_fault_without_an_export)
{
	static uint8_t buf[REC];
	struct coffer_conn *c;
	int h;
	json_t *p;

	c = seeded_tank(&h);
	arm("path=tank-l0;op=write;err=EIO|path=tank-l1;op=write;err=EIO");
	cr_assert_eq(write_gen_failing(c, h, 2, NULL), NREC,
		     "writes acknowledged while every LUN write failed");
	arm("");
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 0), "FAULTED", "%s", json_dumps(p, 0));
	cr_assert_str_eq(lun_state(p, 1), "FAULTED", "%s", json_dumps(p, 0));
	json_decref(p);
	cr_assert_lt(coffer_write(c, h, 0, buf, REC), 0, "a write placed on a faulted LUN");
	/* one LUN by its path, as pool status shows it */
	COF_OK("pool clear tank %s/tank-l0", td.dir);
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 0), "ONLINE", "%s", json_dumps(p, 0));
	cr_assert_eq(lun_count(p, 0, "write_errors"), 0, "%s", json_dumps(p, 0));
	cr_assert_str_eq(lun_state(p, 1), "FAULTED", "%s", json_dumps(p, 0));
	json_decref(p);
	cr_assert_eq(cof("pool clear tank %s/nosuch", td.dir), 1, "%s", out);
	cr_assert(strstr(out, "nosuch"), "%s", out);
	COF_OK("pool clear tank");
	p = pool_status("tank");
	cr_assert_str_eq(lun_state(p, 1), "ONLINE", "%s", json_dumps(p, 0));
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE");
	json_decref(p);
	write_gen_flushed(c, h, 3);
	cr_assert_eq(check_gen(c, h, 3, NULL), 0);
	coffer_close(c);
}

Test(faults, failed_fsync_is_not_acknowledged_and_acknowledged_flushes_survive)
{
	struct coffer_conn *c;
	uint8_t buf[REC];
	json_t *p;
	int h, ret;

	c = seeded_tank(&h);
	/* records 0..NREC/2 get generation 2 and an acknowledged flush */
	for (unsigned i = 0; i < NREC / 2; i++) {
		fill(buf, i, 2);
		cr_assert_eq(coffer_write(c, h, (uint64_t)i * REC, buf, REC), 0);
	}
	cr_assert_eq(coffer_ds_flush(c, h), 0);
	/* generation 3 on the other half; its flush's fsync fails */
	for (unsigned i = NREC / 2; i < NREC; i++) {
		fill(buf, i, 3);
		cr_assert_eq(coffer_write(c, h, (uint64_t)i * REC, buf, REC), 0);
	}
	arm("path=tank-l0;op=fsync;err=EIO|path=tank-l1;op=fsync;err=EIO");
	ret = coffer_ds_flush(c, h);
	cr_assert_lt(ret, 0, "a flush whose fsync failed was acknowledged");
	cr_log_info("fsync EIO: flush returned %s", proto_strerror(ret));
	arm("");
	/* the pool is suspended: later writes and flushes fail too */
	fill(buf, 0, 9);
	ret = coffer_write(c, h, 0, buf, REC);
	cr_assert_lt(ret, 0, "a write was accepted by a suspended pool");
	cr_assert_lt(coffer_ds_flush(c, h), 0, "a suspended pool acknowledged a flush");
	p = pool_status("tank");
	cr_log_info("pool state after the failed flush: %s",
		    json_string_value(json_object_get(p, "state")));
	json_decref(p);
	coffer_close(c);
	/* a crash now, a restart without faults: every acknowledged flush is there */
	kill(td.pid, SIGKILL);
	waitpid(td.pid, NULL, 0);
	td.pid = -1;
	start();
	c = open_ds("tank/a", &h);
	for (unsigned i = 0; i < NREC; i++) {
		uint8_t want[REC], want3[REC];

		cr_assert_eq(coffer_read(c, h, (uint64_t)i * REC, buf, REC), 0, "record %u", i);
		fill(want, i, i < NREC / 2 ? 2 : 1);
		fill(want3, i, 3);
		/* the unacknowledged half may hold either generation, nothing else */
		cr_assert(!memcmp(buf, want, REC) || (i >= NREC / 2 && !memcmp(buf, want3, REC)),
			  "record %u: lost an acknowledged flush or holds other data", i);
	}
	coffer_close(c);
}

/*
 * A metadata commit that fails (msync of the pool's LMDB map here) must not
 * leave writes being acknowledged into a stage that may never commit: the
 * pool refuses writes and says why, export keeps it imported, and the first
 * commit that succeeds lifts it.
 */
Test(faults, failed_metadata_commit_suspends_writes_until_a_commit_succeeds)
{
	struct coffer_conn *c;
	uint8_t buf[REC];
	json_t *p;
	int h, ret;

	c = seeded_tank(&h);
	write_gen(c, h, 2);
	arm("path=tank.mdb;op=msync;err=EIO");
	ret = coffer_ds_flush(c, h);
	cr_assert_lt(ret, 0, "a flush whose metadata commit failed was acknowledged");
	cr_assert_gt(injected(), 0, "the shim failed no msync");
	fill(buf, 0, 9);
	ret = coffer_write(c, h, 0, buf, REC);
	cr_assert_lt(ret, 0, "a write was acknowledged while commits fail");
	assert_suspended_by_metadata("tank");
	coffer_close(c);
	/* export would drop the uncommitted writes: it refuses and the pool stays */
	cr_assert_neq(cof("pool export tank"), 0, "export of a pool that cannot commit: %s", out);
	cr_assert(strstr(out, "final commit failed"), "export says: %s", out);
	COF_OK("pool list -H");
	cr_assert(strstr(out, "tank"), "the pool left: %s", out);
	/* the fault clears: the next flush commits everything and lifts the suspension */
	arm("");
	c = open_ds("tank/a", &h);
	cr_assert_eq(coffer_ds_flush(c, h), 0, "flush after the fault cleared");
	p = pool_status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE");
	json_decref(p);
	cr_assert_eq(check_gen(c, h, 2, NULL), 0);
	coffer_close(c);
	COF_OK("pool export tank");
	COF_OK("pool import tank");
	c = open_ds("tank/a", &h);
	cr_assert_eq(check_gen(c, h, 2, NULL), 0, "generation 2 was acknowledged by a flush");
	coffer_close(c);
}

/*
 * A destroy whose commit fails, then a new dataset of the same name: the
 * retried commit must delete the old dataset only, or the pool no longer
 * imports ("block pointer of unknown dataset").
 */
Test(faults, failed_destroy_commit_never_deletes_a_new_dataset_of_that_name)
{
	struct coffer_conn *c;
	json_t *p;
	int h;

	make_pool("tank");
	COF_OK("create -V 4M tank/x");
	COF_OK("create -V 4M tank/y");
	c = seeded("tank/x", &h);
	coffer_close(c);
	arm("path=tank.mdb;op=msync;err=EIO;count=1");
	cof("destroy tank/x"); /* its commit fails; the dataset is gone from the table */
	cr_assert_eq(injected(), 1, "the destroy's commit was not the one failed");
	arm("");
	/* until the destroy is committed the name is a tombstone */
	cr_assert_neq(cof("create -V 4M tank/x"), 0, "create over an uncommitted destroy");
	cr_assert(strstr(out, "being destroyed"), "create says: %s", out);
	c = open_ds("tank/y", &h);
	cr_assert_eq(coffer_ds_flush(c, h), 0, "the retried commit");
	coffer_close(c);
	COF_OK("create -V 4M tank/x");
	c = open_ds("tank/x", &h);
	write_gen_flushed(c, h, 5);
	coffer_close(c);
	cr_assert_eq(tdaemon_stop(&td), 0, "cofferd exit:\n%s", tdaemon_log(&td));
	start();
	p = pool_status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE", "%s",
			 tdaemon_log(&td));
	json_decref(p);
	c = open_ds("tank/x", &h);
	cr_assert_eq(check_gen(c, h, 5, NULL), 0, "the new tank/x lost its data");
	coffer_close(c);
}

/*
 * A promote whose commit fails (EIO) is staged, and the commit retried
 * later applies it: the error must say so, not that the promote failed.
 */
Test(faults, a_promote_whose_commit_fails_says_the_retried_commit_applies_it)
{
	struct coffer_conn *c;
	int h;

	make_pool("tank");
	COF_OK("create -V 4M tank/a");
	COF_OK("snapshot tank/a@s");
	COF_OK("clone tank/a@s tank/c");
	c = open_ds("tank/c", &h);
	cr_assert_eq(coffer_ds_flush(c, h), 0, "everything committed before the fault");
	coffer_close(c);
	arm("path=tank.mdb;op=msync;err=EIO;count=1");
	cr_assert_neq(cof("promote tank/c"), 0, "a promote whose commit failed succeeded");
	cr_assert_eq(injected(), 1, "the promote's commit was not the one failed");
	cr_assert(strstr(out, "applied with the next commit"), "promote says: %s", out);
	arm("");
	c = open_ds("tank/a", &h);
	cr_assert_eq(coffer_ds_flush(c, h), 0, "the retried commit");
	coffer_close(c);
	COF_OK("get -H origin tank/a");
	cr_assert(strstr(out, "tank/c@s"), "the promote was not applied: origin %s", out);
}

Test(faults, short_reads_are_an_error_never_wrong_data)
{
	struct coffer_conn *c;
	int h, err = 0, n;
	unsigned failed;

	c = seeded_tank(&h);
	failed = read_fault(c, h, "path=tank-l0;op=short_read|path=tank-l1;op=short_read", &err, &n);
	cr_assert_gt(n, 0, "no short read was injected");
	cr_assert_eq(failed, NREC);
	arm("");
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	coffer_close(c);
}

/* Flip @n random bits in the first @span bytes of the data area of LUN file @path. */
static void flip_bits(const char *path, uint64_t span, unsigned n)
{
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0, "%s", path);
	for (unsigned k = 0; k < n; k++) {
		off_t off = DATA_OFF + (off_t)((uint64_t)rand() * 7919u % span);
		uint8_t b;

		cr_assert_eq(pread(fd, &b, 1, off), 1);
		b ^= (uint8_t)(1u << (rand() % 8));
		cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	}
	close(fd);
}

static uint64_t pool_io_stat(const char *pool, const char *field)
{
	struct coffer_conn *c = NULL;
	json_t *reply = NULL, *pa;
	uint64_t v = 0;
	char err[256];
	size_t i;
	json_t *p;

	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	cr_assert_eq(coffer_call(c, "stats", NULL, &reply, err, sizeof(err)), 0, "%s", err);
	coffer_close(c);
	pa = json_object_get(reply, "pools");
	json_array_foreach(pa, i, p)
	{
		if (!strcmp(json_string_value(json_object_get(p, "name")), pool))
			v = (uint64_t)json_integer_value(
				json_object_get(json_object_get(p, "io"), field));
	}
	json_decref(reply);
	return v;
}

static void bit_flips(const char *create_args, const char *counter, int want_err)
{
	char path[4096];
	struct coffer_conn *c;
	unsigned failed = 0;
	int h, err = 0;
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();

	srand(seed);
	cr_log_info("bit flip seed %u", seed);
	make_pool("tank");
	COF_OK("create -V 4M %s tank/a", create_args);
	c = seeded("tank/a", &h);
	/* both LUNs hold NREC/2 records of 8 KiB at most in their first NREC * 8 KiB */
	for (int l = 0; l < 2; l++) {
		snprintf(path, sizeof(path), "%s/tank-l%d", td.dir, l);
		flip_bits(path, NREC * REC / 2, 40);
	}
	failed = check_gen(c, h, 1, &err);
	cr_log_info("bit flips (%s): %u of %u reads failed, last %s, %s=%llu", create_args,
		    failed, NREC, proto_strerror(err), counter,
		    (unsigned long long)pool_io_stat("tank", counter));
	cr_assert_gt(failed, 0, "80 flipped bits and every read succeeded");
	cr_assert_eq(err, want_err, "got %s", proto_strerror(err));
	cr_assert_geq(pool_io_stat("tank", counter), failed, "stats do not count the failures");
	coffer_close(c);
}

Test(faults, bit_flips_in_clear_data_fail_the_checksum_never_wrong_data)
{
	bit_flips("", "cksum_errors", STOR_ECKSUM);
}

Test(faults, bit_flips_in_encrypted_data_fail_authentication_never_wrong_data)
{
	char args[4600];

	snprintf(args, sizeof(args),
		 "-o encryption=aes-256-ccm -o keyformat=passphrase -o pbkdf2iters=100000 "
		 "-o keylocation=file://%s",
		 tdaemon_file(&td, "key", "flip passphrase\n", 16));
	bit_flips(args, "auth_errors", STOR_EAUTH);
}

/* Overwrite @len bytes at @off of @path with a pattern. */
static void clobber(const char *path, off_t off, size_t len)
{
	uint8_t *junk = malloc(len);
	int fd = open(path, O_RDWR);

	cr_assert_not_null(junk);
	cr_assert_geq(fd, 0, "%s", path);
	for (size_t i = 0; i < len; i++)
		junk[i] = (uint8_t)(i * 31 + 7);
	cr_assert_eq(pwrite(fd, junk, len, off), (ssize_t)len);
	close(fd);
	free(junk);
}

static void damaged_pool(int lmdb)
{
	char path[4096];
	struct coffer_conn *c;
	uint8_t buf[REC];
	json_t *p;
	int h;

	make_pool("good");
	make_pool("bad");
	COF_OK("create -V 4M good/a");
	COF_OK("create -V 4M bad/a");
	c = seeded("good/a", &h);
	coffer_close(c);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	if (lmdb) {
		/* both meta pages of the LMDB file */
		snprintf(path, sizeof(path), "%s/pools/bad.mdb", td.state);
		clobber(path, 0, 8192);
	} else {
		/* both copies: the front one and the one in the last 4 KiB */
		snprintf(path, sizeof(path), "%s/bad-l1", td.dir);
		clobber(path, 16, 64);
		clobber(path, (64 << 20) - 4096 + 16, 64);
	}
	start();
	p = pool_status("bad");
	if (lmdb) {
		/* LMDB is a cache of the LUNs: a damaged one is rebuilt from them */
		cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE", "%s",
				 json_dumps(p, 0));
		cr_assert(strstr(json_string_value(json_object_get(p, "metadata")),
				 "rebuilt from the LUNs"),
			  "%s", json_dumps(p, 0));
		json_decref(p);
		COF_OK("list bad/a");
		c = open_ds("good/a", &h);
		cr_assert_eq(check_gen(c, h, 1, NULL), 0);
		coffer_close(c);
		return;
	}
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "FAULTED", "%s",
			 json_dumps(p, 0));
	cr_assert(json_string_length(json_object_get(p, "error")) > 0, "no reason given");
	cr_log_info("damaged %s: %s", lmdb ? "LMDB" : "label",
		    json_string_value(json_object_get(p, "error")));
	if (!lmdb)
		cr_assert(strstr(json_string_value(json_object_get(p, "error")), "bad-l1") &&
				  strstr(json_string_value(json_object_get(p, "error")), "both"),
			  "the error names neither the LUN nor its copies: %s",
			  json_string_value(json_object_get(p, "error")));
	json_decref(p);
	cr_assert_eq(cof("create -V 1M bad/x"), 1, "%s", out);
	cr_assert_eq(cof("pool import bad"), 1, "a damaged pool imported: %s", out);
	/* the other pool serves on */
	c = open_ds("good/a", &h);
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	fill(buf, 0, 2);
	cr_assert_eq(coffer_write(c, h, 0, buf, REC), 0);
	cr_assert_eq(coffer_ds_flush(c, h), 0);
	coffer_close(c);
}

Test(faults, damaged_lmdb_file_is_rebuilt_from_the_luns_and_other_pools_serve)
{
	damaged_pool(1);
}

Test(faults, damaged_lun_label_refuses_import_and_other_pools_serve)
{
	damaged_pool(0);
}

Test(faults, one_damaged_label_copy_is_repaired_at_import_and_reported)
{
	char path[4096];
	struct coffer_conn *c;
	json_t *p, *l;
	int h;

	c = seeded_tank(&h);
	coffer_close(c);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	snprintf(path, sizeof(path), "%s/tank-l1", td.dir);
	clobber(path, 16, 64);
	start();
	p = pool_status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE", "%s",
			 json_dumps(p, 0));
	l = json_array_get(json_object_get(p, "luns"), 1);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(l, "label_repaired"), 0)),
			 "front", "%s", json_dumps(p, 0));
	json_decref(p);
	COF_OK("pool status tank");
	cr_assert(strstr(out, "front copy damaged at import; rewritten"), "%s", out);
	c = open_ds("tank/a", &h);
	cr_assert_eq(check_gen(c, h, 1, NULL), 0);
	coffer_close(c);
	/* rewritten on disk: the next import finds nothing to repair */
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	start();
	p = pool_status("tank");
	cr_assert_null(json_object_get(json_array_get(json_object_get(p, "luns"), 1),
				       "label_damaged"),
		       "%s", json_dumps(p, 0));
	json_decref(p);
}

/* ---- a state directory that fills up ---- */

static int state_mounted;

static void setup_small_state(void)
{
	char cmd[8400];

	init_dir();
	mkdir(td.state, 0700);
	snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=6m coffer-test '%s' 2>/dev/null", td.state);
	state_mounted = system(cmd) == 0;
	if (state_mounted)
		start();
}

static void teardown_small_state(void)
{
	char cmd[8400];
	int st = 0;

	if (state_mounted) {
		if (td.pid > 0)
			st = tdaemon_stop(&td);
		snprintf(cmd, sizeof(cmd), "umount '%s'", td.state);
		if (system(cmd) != 0)
			cr_log_error("umount %s failed", td.state);
	}
	tdaemon_cleanup(&td);
	cr_expect_eq(st, 0, "cofferd did not exit 0 on SIGTERM");
}

TestSuite(full_state, .init = setup_small_state, .fini = teardown_small_state, .timeout = 180);

/*
 * LMDB maps its file and the file is sparse: a page first written when the
 * file system is full was a SIGBUS that took every pool down. Now the
 * commit fails with ENOSPC, the pool stops taking writes and says why, and
 * the daemon goes on serving.
 */
Test(full_state, a_full_state_dir_suspends_the_pool_and_the_daemon_lives)
{
	struct coffer_conn *c;
	static uint8_t buf[65536];
	uint64_t off = 0;
	int h, ret = 0;

	if (!state_mounted)
		cr_skip_test("cannot mount a tmpfs for the state directory (not root?)");
	/* room for the volume and the metadata its refreservation counts */
	COF_OK("pool create -s 1300M tank %s/l0", td.dir);
	COF_OK("create -V 1G -o recordsize=4K tank/a");
	c = open_ds("tank/a", &h);
	memset(buf, 0x5c, sizeof(buf));
	/* about 100 bytes of metadata per 4 KiB record: 6 MiB fill within 1 GiB */
	while (ret == 0 && off + sizeof(buf) <= (1ull << 30)) {
		buf[0] = (uint8_t)(off >> 16);
		ret = coffer_write(c, h, off, buf, sizeof(buf));
		off += sizeof(buf);
		if (ret == 0 && off % (4u << 20) == 0)
			ret = coffer_ds_flush(c, h);
	}
	cr_assert_lt(ret, 0, "1 GiB of 4 KiB records fit a 6 MiB state directory");
	cr_log_info("state dir full after %llu MiB: %s", (unsigned long long)(off >> 20),
		    proto_strerror(ret));
	coffer_close(c);
	cr_assert_eq(kill(td.pid, 0), 0, "cofferd died:\n%s", tdaemon_log(&td));
	COF_OK("ping");
	assert_suspended_by_metadata("tank");
	{
		/* the metadata is full, not the pool: its LUNs have room */
		json_t *p = pool_status("tank");
		const char *err = json_string_value(json_object_get(p, "error"));

		cr_assert(err && strstr(err, "pool metadata is full"), "pool status says: %s",
			  err ? err : "(nothing)");
		json_decref(p);
	}
	/* the writes it could not commit are lost at shutdown, and it says so */
	cr_assert_eq(tdaemon_stop(&td), 1, "exit status of a shutdown that lost writes");
	cr_assert(strstr(tdaemon_log(&td), "final commit failed"), "%s", tdaemon_log(&td));
}

static int resilver_running(void)
{
	json_t *p = pool_status("tank"), *scan = json_object_get(p, "scan");
	int on = scan && !strcmp(json_string_value(json_object_get(scan, "function")), "resilver") &&
		 !strcmp(json_string_value(json_object_get(scan, "state")), "scanning");

	json_decref(p);
	return on;
}

/*
 * A side coming back takes new writes but is not read until the resilver
 * is done. A write that only it took, because the sound side failed it,
 * must not be acknowledged: its data would lie where no read looks.
 */
/*
 * An encryption in place switches a dataset to sealing as a txg closes
 * under the write hold (rekey.c's encrypt_hook). A partial write planned
 * while the dataset was still clear, held in the read of its record's old
 * bytes as the switch comes, must be neither sealed without a key nor
 * lost: the daemon crashed there while a write made its plan before it
 * took the hold (record.c).
 */
Test(faults, a_partial_write_held_across_an_encryption_in_place_lands_and_the_daemon_lives)
{
	static uint8_t buf[REC], want[REC];
	struct coffer_completion cc;
	struct coffer_conn *c;
	const char *key;
	int h;

	make_pool("tank");
	COF_OK("create -V 512K -b 8k tank/c");
	c = seeded("tank/c", &h);
	/* the next LUN read waits: the partial write's read of its old bytes */
	arm("path=tank-l0;op=slow_read;ms=500;count=1|path=tank-l1;op=slow_read;ms=500;count=1");
	memset(buf, 0x77, REC / 2);
	cr_assert_eq(coffer_submit(c, 1, COFFER_WRITE, h, REC / 4, REC / 2, buf), 0);
	cr_assert_eq(coffer_flush_out(c), 0);
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S); !injected() && tdaemon_poll(end);)
		;
	cr_assert_gt(injected(), 0, "the write's read of its old bytes was not held");
	key = tdaemon_file(&td, "key", "0123456789abcdef0123456789abcdef", 32);
	COF_OK("set encryption=aes-256-gcm -o keyformat=raw -o keylocation=file://%s tank/c", key);
	cr_assert_eq(coffer_reap(c, &cc, 1, 120000), 1, "no reply to the write\n%s", tdaemon_log(&td));
	cr_assert_eq(cc.status, 0, "the write: %s", proto_strerror(cc.status));
	arm("");
	fill(want, 0, 1);
	memset(want + REC / 4, 0x77, REC / 2);
	cr_assert_eq(coffer_read(c, h, 0, buf, REC), 0);
	cr_assert_arr_eq(buf, want, REC, "record 0 lost the write or its old bytes");
	for (unsigned i = 1; i < NREC; i++) {
		fill(want, i, 1);
		cr_assert_eq(coffer_read(c, h, (uint64_t)i * REC, buf, REC), 0);
		cr_assert_arr_eq(buf, want, REC, "record %u", i);
	}
	COF_OK("get -H -o value encryption tank/c");
	cr_assert_str_eq(out, "aes-256-gcm\n");
	coffer_close(c);
}

Test(faults, a_write_only_a_side_catching_up_took_is_never_acknowledged)
{
	static uint8_t buf[REC];
	struct coffer_conn *c;
	double end;
	int h, ret;

	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL, "lun_mmap = no\nscrub_rate = 4K\n");
	start();
	COF_OK("pool create -s 64M tank mirror %s/m0 %s/m1", td.dir, td.dir);
	COF_OK("create -V 4M tank/a");
	c = seeded("tank/a", &h);
	COF_OK("pool offline tank %s/m1", td.dir);
	/* the side left is not taken too, and the refusal says what to do */
	cr_assert_eq(cof("pool offline tank %s/m0", td.dir), 1, "%s", out);
	cr_assert(strstr(out, "only side of its mirror that holds every write; bring another "
			      "side online") &&
			  !strstr(out, "-f"),
		  "%s", out);
	write_gen_flushed(c, h, 2); /* m1 misses these: the resilver has work */
	COF_OK("pool online tank %s/m1", td.dir);
	end = tdaemon_deadline(60);
	while (!resilver_running())
		cr_assert(tdaemon_poll(end), "no resilver started");

	arm("path=m0;op=write;err=EIO");
	fill(buf, 0, 3);
	/* the write itself fails, as on a LUN of its own: it was not written where reads go */
	ret = coffer_write(c, h, 0, buf, REC);
	arm("");
	cr_assert_neq(ret, 0, "a write only the side catching up took was acknowledged");
	/* and what is read is never that write: generation 2, or an error */
	memset(buf, 0, sizeof(buf));
	ret = coffer_read(c, h, 0, buf, REC);
	if (ret == 0) {
		static uint8_t want[REC];

		fill(want, 0, 2);
		cr_assert_arr_eq(buf, want, REC, "record 0 reads a write that was refused");
	}
	coffer_close(c);
}

/* Side @i of pool tank is in service again and nothing resilvers. */
static void wait_side_online(unsigned i)
{
	double end = tdaemon_deadline(120);

	for (;;) {
		json_t *p = pool_status("tank");
		int online = !strcmp(lun_state(p, i), "ONLINE");

		json_decref(p);
		if (online && !resilver_running())
			return;
		cr_assert(tdaemon_poll(end), "side %u not back in service", i);
	}
}

/*
 * A mirror side that fails one write - of a record, of the log record or
 * of the uberblock, whichever the Nth is - goes out of service, and the
 * write and its flush succeed on the other side, as they would on a LUN
 * of its own: one side's fault never reaches the client.
 */
Test(faults, one_failed_write_on_a_mirror_side_fails_no_flush)
{
	static uint8_t buf[REC], want[REC];
	struct coffer_conn *c;
	char rule[128];
	int h;

	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL, "lun_mmap = no\n");
	start();
	COF_OK("pool create -s 64M tank mirror %s/m0 %s/m1", td.dir, td.dir);
	COF_OK("create -V 4M tank/a");
	c = seeded("tank/a", &h);
	for (unsigned after = 0; after < 6; after++) {
		json_t *p;
		int out_of_service;

		snprintf(rule, sizeof(rule), "path=m1;op=write;err=EIO;after=%u;count=1", after);
		arm(rule);
		fill(buf, 0, 10 + after);
		cr_assert_eq(coffer_write(c, h, 0, buf, REC), 0, "%s: the write failed", rule);
		cr_assert_eq(coffer_ds_flush(c, h), 0, "%s: the flush failed\n%s", rule,
			     tdaemon_log(&td));
		arm("");
		p = pool_status("tank");
		out_of_service = strcmp(lun_state(p, 1), "ONLINE") != 0;
		json_decref(p);
		COF_OK("pool clear tank");
		if (out_of_service)
			COF_OK("pool online tank %s/m1", td.dir);
		wait_side_online(1);
	}
	cr_assert_eq(coffer_read(c, h, 0, buf, REC), 0);
	fill(want, 0, 15);
	cr_assert_arr_eq(buf, want, REC, "record 0 is not the last write");
	coffer_close(c);
}
