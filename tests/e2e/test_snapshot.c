// SPDX-License-Identifier: MIT
/*
 * E2E: snapshots through the daemon and coffer. Write A, snapshot, write
 * B: `coffer read` of the snapshot gives A and of the head B; the snapshot
 * is listed, read-only, kept across a restart and across an import from the
 * LUNs alone (the metadata log carries it); its destroy gives the pool its
 * space back; `pool check` finds nothing leaked; names and requests that
 * make no sense are refused with a text and change nothing.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"

static struct tdaemon td;
static char out[65536];

static void setup(void)
{
	tdaemon_setup_lun_dir(&td);
}

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(snapshot, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static int files_equal(const char *a, const char *b)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* `coffer read NAME` into a file, compared with @want. */
static void reads_as(const char *name, const char *want)
{
	char back[4200], args[9000];

	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(args, sizeof(args), "read %s -l 1M > '%s'", name, back);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, NULL, 0, args), 0, "%s\n%s", args,
		     tdaemon_log(&td));
	cr_assert(files_equal(want, back), "%s does not read back as %s", name, want);
}

static unsigned long long pool_used(void)
{
	unsigned long long size = 0, used = 0;

	/* the pool's data (its metadata log apart), kept extents too */
	COF_OK(NULL, "pool list -H -p tank");
	cr_assert_eq(sscanf(out, "tank\t%llu\t%llu", &size, &used), 2, "%s", out);
	return used;
}

static void checked(void)
{
	COF_OK(NULL, "pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

Test(snapshot, a_snapshot_reads_a_while_the_head_reads_b_across_restart_and_import)
{
	char a[4200], b[4200], cmd[9000];
	unsigned long long before;

	COF_OK(NULL, "pool create -s 16M tank %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	COF_OK(a, "write tank/v");
	before = pool_used();
	COF_OK(NULL, "snapshot tank/v@a");
	COF_OK(b, "write tank/v");
	reads_as("tank/v@a", a);
	reads_as("tank/v", b);
	COF_OK(NULL, "flush tank/v");
	COF_OK(NULL, "get -H -p usedbysnapshots,written,referenced tank/v tank/v@a");
	cr_assert(strstr(out, "tank/v\tusedbysnapshots\t1048576") &&
			  strstr(out, "tank/v\twritten\t1048576") &&
			  strstr(out, "tank/v@a\treferenced\t1048576") &&
			  strstr(out, "tank/v@a\twritten\t1048576"),
		  "%s", out);
	COF_OK(NULL, "list -H -p -t snapshot -o name,type,volsize");
	cr_assert(strstr(out, "tank/v@a\tsnapshot\t1048576"), "%s", out);
	COF_OK(NULL, "list -H -t all -o name");
	cr_assert(strstr(out, "tank/v\n") && strstr(out, "tank/v@a\n"), "%s", out);
	COF_OK(NULL, "list -H -o name");
	cr_assert(!strstr(out, "@"), "volumes only by default: %s", out);
	checked();
	/* read-only: nothing is written, the snapshot still reads A */
	cr_assert_neq(cof(b, "write tank/v@a"), 0);
	cr_assert(strstr(out, "tank/v@a"), "%s", out);
	reads_as("tank/v@a", a);

	/* a restart, then an import of the LUNs into an empty state directory */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	reads_as("tank/v@a", a);
	tdaemon_stop_ok(&td);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s/l tank", td.dir);
	reads_as("tank/v@a", a);
	reads_as("tank/v", b);
	checked();

	/* destroy: the space A held comes back exactly */
	COF_OK(NULL, "destroy tank/v@a");
	COF_OK(NULL, "flush tank/v");
	cr_assert_eq(pool_used(), before, "used %llu after the destroy, %llu before the snapshot",
		     pool_used(), before);
	cr_assert_neq(cof(NULL, "read tank/v@a"), 0);
	COF_OK(NULL, "list -H -t snapshot -o name");
	cr_assert_eq(out[0], '\0', "%s", out);
	checked();
}

Test(snapshot, ranges_recursion_and_bad_requests)
{
	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	COF_OK(NULL, "create -s -V 1M tank/v/c");
	COF_OK(NULL, "snapshot -r tank/v@s1");
	COF_OK(NULL, "snapshot tank/v@s2 tank/v/c@s2");
	COF_OK(NULL, "snapshot tank/v@s3");
	COF_OK(NULL, "list -H -t snapshot -r -o name,createtxg tank/v");
	cr_assert(strstr(out, "tank/v@s1") && strstr(out, "tank/v/c@s1") &&
			  strstr(out, "tank/v/c@s2"),
		  "%s", out);
	/* nonsense: refused, nothing changes */
	cr_assert_eq(cof(NULL, "snapshot tank/v"), 1);
	cr_assert(strstr(out, "DATASET@NAME") || strstr(out, "invalid"), "%s", out);
	cr_assert_eq(cof(NULL, "snapshot tank/v@x%%y"), 1);
	cr_assert_eq(cof(NULL, "snapshot tank/v@s1"), 1, "exists");
	cr_assert_eq(cof(NULL, "snapshot tank/nope@x"), 1);
	cr_assert(strstr(out, "tank/nope"), "%s", out);
	cr_assert_eq(cof(NULL, "snapshot tank/v@x other/v@x"), 1);
	cr_assert(strstr(out, "one pool"), "%s", out);
	cr_assert_eq(cof(NULL, "destroy tank/v@s3%%s1"), 1);
	cr_assert_eq(cof(NULL, "destroy tank/v"), 1);
	cr_assert(strstr(out, "snapshots"), "%s", out);
	cr_assert_eq(cof(NULL, "list -t bogus"), 1);
	COF_OK(NULL, "list -H -t snapshot -o name tank/v");
	cr_assert(strstr(out, "tank/v@s1\ntank/v@s2\ntank/v@s3\n"), "%s", out);
	/* a range, then -r */
	COF_OK(NULL, "destroy tank/v@s2%%");
	COF_OK(NULL, "list -H -t snapshot -o name tank/v");
	cr_assert_str_eq(out, "tank/v@s1\n");
	COF_OK(NULL, "destroy -r tank/v@s1");
	COF_OK(NULL, "list -H -t snapshot -r -o name tank/v");
	cr_assert_str_eq(out, "tank/v/c@s2\n");
	COF_OK(NULL, "destroy -r tank/v");
	COF_OK(NULL, "list -H -t all -o name");
	cr_assert_str_eq(out, "tank\n");
	checked();
}

Test(snapshot, an_encrypted_dataset_is_snapshotted_with_its_key_loaded_only)
{
	static const char pass[] = "correct horse battery\n";
	char a[4200], b[4200], keyfile[4200];

	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", keyfile);
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	COF_OK(a, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@a");
	COF_OK(b, "write tank/e");
	reads_as("tank/e@a", a);
	reads_as("tank/e", b);
	COF_OK(NULL, "unload-key tank/e");
	cr_assert_eq(cof(NULL, "snapshot tank/e@b"), 1);
	cr_assert(strstr(out, "load"), "says what to do: %s", out);
	cr_assert_neq(cof(NULL, "read tank/e@a"), 0, "no key, no plaintext");
	COF_OK(NULL, "get -H keystatus tank/e@a");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	checked(); /* needs no key */
	COF_OK(NULL, "load-key tank/e");
	reads_as("tank/e@a", a);
	COF_OK(NULL, "destroy tank/e@a");
	checked();
}

Test(snapshot, rollback_reads_a_again_and_refuses_past_newer_snapshots_without_r)
{
	char a[4200], b[4200];

	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@a");
	COF_OK(b, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@b");
	cr_assert_eq(cof(NULL, "rollback tank/v@a"), 1);
	cr_assert(strstr(out, "more recent snapshots") && strstr(out, "-r"), "%s", out);
	reads_as("tank/v", b);
	cr_assert_eq(cof(NULL, "rollback tank/v"), 1, "a dataset is no snapshot");
	COF_OK(NULL, "rollback -r tank/v@a");
	reads_as("tank/v", a);
	COF_OK(NULL, "list -H -t snapshot -o name");
	cr_assert_str_eq(out, "tank/v@a\n");
	checked();
}
