// SPDX-License-Identifier: MIT
/*
 * E2E: clones through the daemon and coffer. Write A, snapshot, clone: the
 * clone reads A; B into the clone leaves the origin (head and snapshot) A;
 * C into the origin leaves the clone B; `origin` names the snapshot; the
 * snapshot and its dataset are not destroyed while the clone is, and
 * destroy -R gives the pool its space back exactly; a restart and an import
 * from the LUNs alone keep the clone; an encrypted clone shares its root's
 * key (keystatus, load-key) and `pool check` finds no nonce used twice.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

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

TestSuite(clone, .init = setup, .fini = teardown, .timeout = 240);

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

	COF_OK(NULL, "pool list -H -p tank");
	cr_assert_eq(sscanf(out, "tank\t%llu\t%llu", &size, &used), 2, "%s", out);
	return used;
}

static void checked(void)
{
	COF_OK(NULL, "pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

Test(clone, a_clone_reads_a_and_writes_apart_from_its_origin_across_restart_and_import)
{
	char a[4200], b[4200], c[4200], cmd[9000];
	unsigned long long before;

	COF_OK(NULL, "pool create -s 16M tank %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	tdaemon_random_file(&td, "c", 1 << 20, c, sizeof(c));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "flush tank/v");
	before = pool_used();
	COF_OK(NULL, "snapshot tank/v@a");
	COF_OK(NULL, "clone tank/v@a tank/k");
	reads_as("tank/k", a);
	COF_OK(NULL, "get -H -o value origin tank/k");
	cr_assert_str_eq(out, "tank/v@a\n");
	COF_OK(NULL, "get -H -o value origin tank/v");
	cr_assert_str_eq(out, "-\n");
	COF_OK(NULL, "list -H -o name,origin");
	cr_assert(strstr(out, "tank/k\ttank/v@a\n") && strstr(out, "tank/v\t-\n"), "%s", out);
	COF_OK(b, "write tank/k");
	reads_as("tank/k", b);
	reads_as("tank/v", a);
	reads_as("tank/v@a", a);
	COF_OK(c, "write tank/v");
	reads_as("tank/v", c);
	reads_as("tank/k", b);
	reads_as("tank/v@a", a);
	COF_OK(NULL, "flush tank/v");
	COF_OK(NULL, "get -H -p -o name,property,value used,referenced,written tank/k");
	cr_assert(strstr(out, "tank/k\tused\t1048576") && strstr(out, "tank/k\treferenced\t1048576") &&
			  strstr(out, "tank/k\twritten\t1048576"),
		  "%s", out);
	checked();

	/* the origin stays while it has a clone; -R takes both */
	cr_assert_eq(cof(NULL, "destroy tank/v@a"), 1);
	cr_assert(strstr(out, "snapshot has dependent clones") && strstr(out, "-R"), "%s", out);
	cr_assert_eq(cof(NULL, "destroy -r tank/v"), 1);
	cr_assert(strstr(out, "dependent clones"), "%s", out);
	reads_as("tank/k", b);
	reads_as("tank/v@a", a);

	/* a restart, then an import of the LUNs into an empty state directory */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	reads_as("tank/k", b);
	tdaemon_stop_ok(&td);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s/l tank", td.dir);
	reads_as("tank/k", b);
	reads_as("tank/v", c);
	reads_as("tank/v@a", a);
	COF_OK(NULL, "get -H -o value origin tank/k");
	cr_assert_str_eq(out, "tank/v@a\n");
	checked();

	/* the space of the clone and of the snapshot comes back exactly */
	COF_OK(NULL, "destroy -R tank/v@a");
	COF_OK(NULL, "flush tank/v");
	COF_OK(NULL, "flush tank/v");
	cr_assert_neq(cof(NULL, "read tank/k"), 0);
	cr_assert_eq(pool_used(), before, "used %llu, %llu before the snapshot", pool_used(),
		     before);
	checked();
}

Test(clone, bad_clones_are_refused_in_words)
{
	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	COF_OK(NULL, "snapshot tank/v@a");
	cr_assert_eq(cof(NULL, "clone tank/v tank/k"), 1);
	cr_assert(strstr(out, "DATASET@SNAP"), "%s", out);
	cr_assert_eq(cof(NULL, "clone tank/v@nope tank/k"), 1);
	cr_assert(strstr(out, "tank/v@nope"), "%s", out);
	cr_assert_eq(cof(NULL, "clone -o volsize=2M tank/v@a tank/k"), 1);
	cr_assert(strstr(out, "volsize"), "%s", out);
	cr_assert_eq(cof(NULL, "clone tank/v@a tank/v"), 1);
	cr_assert_eq(cof(NULL, "clone tank/v@a"), 2, "usage");
	COF_OK(NULL, "list -H -t all -o name");
	cr_assert_str_eq(out, "tank\ntank/v\ntank/v@a\n");
}

Test(clone, an_encrypted_clone_follows_its_roots_key)
{
	static const char pass[] = "correct horse battery\n";
	char a[4200], b[4200], keyfile[4200];

	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-gcm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", keyfile);
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	COF_OK(a, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@a");
	cr_assert_eq(cof(NULL, "clone tank/e@a tank/k"), 1);
	cr_assert(strstr(out, "encryption root"), "%s", out);
	COF_OK(NULL, "clone tank/e@a tank/e/k");
	COF_OK(NULL, "get -H -o value encryptionroot,keystatus,encryption tank/e/k");
	cr_assert_str_eq(out, "tank/e\navailable\naes-256-gcm\n");
	reads_as("tank/e/k", a);
	COF_OK(b, "write tank/e/k");
	COF_OK(b, "write tank/e");
	reads_as("tank/e@a", a);
	checked(); /* no nonce used twice, no extent twice */
	/* a raw stream has one GUID: a clone's records sealed under its origin's
	 * would be lost or fail their tags on the other side, so it is refused */
	COF_OK(NULL, "snapshot tank/e/k@s");
	cr_assert_neq(cof(NULL, "send -w tank/e/k@s > /dev/null"), 0);
	cr_assert(strstr(out, "raw send of a clone"), "%s", out);
	COF_OK(NULL, "send tank/e/k@s > /dev/null");
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "get -H -o value keystatus tank/e/k");
	cr_assert_str_eq(out, "unavailable\n");
	cr_assert_neq(cof(NULL, "read tank/e/k"), 0, "no key, no plaintext");
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "load-key tank/e");
	reads_as("tank/e/k", b);
	reads_as("tank/e@a", a);
	checked();
}

Test(clone, promote_then_destroy_the_old_origin_and_the_clone_keeps_its_data)
{
	char a[4200], b[4200], c[4200];

	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	tdaemon_random_file(&td, "c", 1 << 20, c, sizeof(c));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@a");
	COF_OK(NULL, "clone tank/v@a tank/k");
	COF_OK(b, "write tank/k");
	COF_OK(c, "write tank/v");
	cr_assert_eq(cof(NULL, "promote tank/v"), 1);
	cr_assert(strstr(out, "not a clone"), "%s", out);
	COF_OK(NULL, "promote tank/k");
	COF_OK(NULL, "list -H -t all -o name,origin");
	cr_assert(strstr(out, "tank/k\t-\n") && strstr(out, "tank/k@a\t") &&
			  strstr(out, "tank/v\ttank/k@a\n") && !strstr(out, "tank/v@a"),
		  "%s", out);
	reads_as("tank/k@a", a);
	reads_as("tank/k", b);
	reads_as("tank/v", c);
	COF_OK(NULL, "get -H -p -o value usedbysnapshots tank/k");
	cr_assert_str_eq(out, "1048576\n", "the snapshot's space moved to the clone");
	checked();
	COF_OK(NULL, "destroy tank/v");
	reads_as("tank/k", b);
	reads_as("tank/k@a", a);
	checked();
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	reads_as("tank/k@a", a);
	reads_as("tank/k", b);
}

/*
 * A clone shares its origin's master key under their root, and an import
 * refuses a pool where the two have different roots: a change-key that
 * would split them is refused, and the pool comes back after a restart.
 * Before, the change-key was acknowledged and the next import faulted the
 * pool ("clone ... has another encryption root than its origin").
 */
Test(clone, a_key_change_that_would_part_a_clone_from_its_origin_is_refused)
{
	static const char pass[] = "correct horse battery\n", pass2[] = "staple of the horse\n";
	char a[4200], k1[4200], k2[4200];

	snprintf(k1, sizeof(k1), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	snprintf(k2, sizeof(k2), "%s", tdaemon_file(&td, "pass2", pass2, sizeof(pass2) - 1));
	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", k1);
	COF_OK(NULL, "create -s -V 1M tank/e/a");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	COF_OK(a, "write tank/e/a");
	COF_OK(NULL, "snapshot tank/e/a@s");
	COF_OK(NULL, "clone tank/e/a@s tank/e/k");
	cr_assert_eq(cof(NULL, "change-key -o keylocation=file://%s tank/e/k", k2), 1);
	cr_assert(strstr(out, "another encryption root than its origin"), "%s", out);
	cr_assert_eq(cof(NULL, "change-key -o keylocation=file://%s tank/e/a", k2), 1);
	cr_assert(strstr(out, "another encryption root than its origin"), "%s", out);
	/* the root's own key change moves both: allowed */
	COF_OK(NULL, "change-key -o keylocation=file://%s tank/e", k2);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "load-key tank/e");
	reads_as("tank/e/k", a);
	checked();
}

/*
 * Whether a clear record has a checksum is its pointer's to say: records
 * written under checksum=off read back through a clone (whose checksum is
 * on) and after the property is on again. Found by the soak (seed
 * 20261208): "record checksum mismatch" on every such read.
 */
Test(clone, records_written_without_a_checksum_read_through_a_clone_and_after_it_is_on)
{
	char a[4200];

	COF_OK(NULL, "pool create -s 16M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -V 1M -o checksum=off tank/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@s");
	COF_OK(NULL, "clone tank/v@s tank/k");
	reads_as("tank/k", a);
	COF_OK(NULL, "set checksum=on tank/v");
	reads_as("tank/v", a);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	reads_as("tank/k", a);
	checked();
}
