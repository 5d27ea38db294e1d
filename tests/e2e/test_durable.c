// SPDX-License-Identifier: MIT
/*
 * E2E: an administrative change is on the LUNs once it is acknowledged.
 * Each change is followed at once by a kill -9 of cofferd and the loss of
 * its whole state directory; a fresh daemon imports the pool from its LUN
 * files alone (pool import -d) and must find the change, the data written
 * around it, and a pool that checks clean. Before, such changes waited in
 * memory for the next txg's log record: the import missed them, or refused
 * the pool ("block pointer of unknown dataset").
 */

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

TDAEMON_FIXTURE(NULL)
TestSuite(durable, .init = setup, .fini = teardown, .timeout = 240);

static char out[65536];

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* td.dir/luns/NAME */
static const char *lun(const char *name)
{
	return tdaemon_path(&td, "luns/%s", name);
}

static void make_lun_dir(void)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/luns", td.dir);
	cr_assert_eq(mkdir(path, 0700), 0);
}

/* A crash of cofferd, as kill -9. */
static void crash(void)
{
	int st;

	cr_assert_gt(td.pid, 0);
	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
}

/* A crash, the state directory lost, a fresh daemon importing @pool from its LUNs. */
static void crash_lose_state_import(const char *pool)
{
	char cmd[4300];

	crash();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s/luns %s", td.dir, pool);
}

/* Write @len random bytes at 0 of @ds, flushed; the bytes' file into @data. */
static void write_random(const char *ds, const char *name, size_t len, char *data, size_t cap)
{
	tdaemon_random_file(&td, name, len, data, cap);
	COF_OK(data, "write %s", ds);
	COF_OK(NULL, "flush %s", ds);
}

static void reads_as(const char *ds, const char *data, size_t len)
{
	char cmd[8600];

	COF_OK(NULL, "read %s -l %zu > '%s/back'", ds, len, td.dir);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", data, td.dir);
	cr_assert_eq(system(cmd), 0, "%s reads back other bytes", ds);
}

static void value_is(const char *prop, const char *ds, const char *want)
{
	COF_OK(NULL, "get -H -p -o value %s %s", prop, ds);
	out[strcspn(out, "\n")] = 0;
	cr_assert_str_eq(out, want, "%s of %s", prop, ds);
}

/* The sequence as found: a create acknowledged, a crash, writes
 * on a restart, a crash, the state directory lost. */
Test(durable, a_create_acknowledged_before_a_crash_survives_the_loss_of_the_state_directory)
{
	char a[4200], v[4200];

	make_lun_dir();
	COF_OK(NULL, "pool create -s 64M rp %s", lun("l0"));
	COF_OK(NULL, "create -V 4M rp/a");
	write_random("rp/a", "a1", 65536, a, sizeof(a));
	COF_OK(NULL, "create -V 4M rp/v");
	crash();
	tdaemon_start_ok(&td);
	write_random("rp/v", "v1", 65536, v, sizeof(v));
	write_random("rp/a", "a2", 65536, a, sizeof(a));
	crash_lose_state_import("rp");
	reads_as("rp/v", v, 65536);
	reads_as("rp/a", a, 65536);
	COF_OK(NULL, "pool check rp");
}

/* Every kind of admin change, each followed by the crash and the import. */
Test(durable, every_admin_change_is_on_the_luns_when_acknowledged)
{
	static const char pass[] = "correct horse battery\n", pass2[] = "staple of the horse\n";
	char a[4200], stream[4300], k1[4200], k2[4200];

	make_lun_dir();
	snprintf(k1, sizeof(k1), "%s", tdaemon_file(&td, "k1", pass, sizeof(pass) - 1));
	snprintf(k2, sizeof(k2), "%s", tdaemon_file(&td, "k2", pass2, sizeof(pass2) - 1));
	COF_OK(NULL, "pool create -s 64M rp %s", lun("l0"));
	COF_OK(NULL, "create -V 4M rp/a");
	write_random("rp/a", "a1", 65536, a, sizeof(a));

	COF_OK(NULL, "set volsize=8M rp/a");
	crash_lose_state_import("rp");
	value_is("volsize", "rp/a", "8388608");

	COF_OK(NULL, "snapshot rp/a@s");
	COF_OK(NULL, "clone rp/a@s rp/c");
	crash_lose_state_import("rp");
	value_is("origin", "rp/c", "rp/a@s");
	reads_as("rp/c", a, 65536);

	COF_OK(NULL, "promote rp/c");
	crash_lose_state_import("rp");
	value_is("origin", "rp/a", "rp/c@s");

	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send rp/c@s > '%s'", stream);
	COF_OK(stream, "receive rp/r");
	crash_lose_state_import("rp");
	reads_as("rp/r", a, 65536);

	COF_OK(NULL, "create -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 rp/e", k1);
	crash_lose_state_import("rp");
	COF_OK(NULL, "load-key rp/e");
	COF_OK(NULL, "change-key -o keylocation=file://%s rp/e", k2);
	crash_lose_state_import("rp");
	cr_assert_neq(cof("load-key -L file://%s rp/e", k1), 0, "the old passphrase still opens");
	COF_OK(NULL, "load-key rp/e");

	COF_OK(NULL, "pool add -s 64M rp %s", lun("l1"));
	crash_lose_state_import("rp");
	COF_OK(NULL, "pool status -j rp");
	cr_assert(strstr(out, "l1"), "the added LUN is gone: %s", out);

	COF_OK(NULL, "pool attach rp %s %s", lun("l1"), lun("m1"));
	crash_lose_state_import("rp");
	COF_OK(NULL, "pool status rp");
	cr_assert(strstr(out, "m1"), "the attached side is gone: %s", out);

	reads_as("rp/a", a, 65536);
	COF_OK(NULL, "pool check rp");
}
