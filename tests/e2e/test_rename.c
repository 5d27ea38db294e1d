// SPDX-License-Identifier: MIT
/*
 * E2E: coffer rename, as zfs rename. An encrypted root with a child, a
 * snapshot and a clone moves, and everything reads back its bytes under the
 * new names only, after a restart and after an import from the LUNs alone
 * (load-key checks the MAC trees and the lists of encrypted children); a
 * snapshot renamed, alone and with -r; -p; and every refusal, with its
 * message, leaves every name as it was: the target exists, another pool,
 * the root, below itself, no parent, an inherited key leaving its root, a
 * clear dataset below an encrypted one, a snapshot to another dataset, a
 * list of children whose key is not loaded, an open handle (named), a
 * receive in progress; a send between chunks ends, saying why.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "client.h"
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

TestSuite(rename, .init = setup, .fini = teardown, .timeout = 300);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static const char hexkey[] = "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210";

/* `coffer read NAME` compared with the file @want. */
static void reads_as(const char *name, const char *want)
{
	char cmd[9000];

	COF_OK(NULL, "read %s -l 1M > '%s/back'", name, td.dir);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", want, td.dir);
	cr_assert_eq(system(cmd), 0, "%s does not read back as %s", name, want);
}

static void names_are(const char *want)
{
	COF_OK(NULL, "list -H -t all -o name");
	cr_assert_str_eq(out, want);
}

static void checked(void)
{
	COF_OK(NULL, "pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

/* An encrypted root tank/e (hex key in a file) and its child tank/e/v with
 * @a at snapshot s1 and @b now, and tank/e/k, a clone of tank/e/v@s1. */
static void encrypted_tree(char *a, char *b, size_t cap)
{
	const char *key = tdaemon_file(&td, "key", hexkey, sizeof(hexkey) - 1);

	COF_OK(NULL, "pool create -s 32M tank %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=hex "
		     "-o keylocation=file://%s tank/e", key);
	COF_OK(NULL, "create -s -V 1M tank/e/v");
	tdaemon_random_file(&td, "a", 1 << 20, a, cap);
	tdaemon_random_file(&td, "b", 1 << 20, b, cap);
	COF_OK(a, "write tank/e/v");
	COF_OK(NULL, "snapshot tank/e/v@s1");
	COF_OK(b, "write tank/e/v");
	COF_OK(NULL, "flush tank/e/v");
	COF_OK(NULL, "clone tank/e/v@s1 tank/e/k");
}

Test(rename, an_encrypted_tree_moves_and_reads_back_after_restart_and_import)
{
	char a[4200], b[4200], cmd[4400];

	encrypted_tree(a, b, sizeof(a));
	COF_OK(NULL, "rename tank/e tank/f");
	names_are("tank\ntank/f\ntank/f/k\ntank/f/v\ntank/f/v@s1\n");
	reads_as("tank/f/v", b);
	reads_as("tank/f/v@s1", a);
	reads_as("tank/f/k", a);
	COF_OK(NULL, "get -H -o value encryptionroot,keystatus,origin tank/f/k");
	cr_assert_str_eq(out, "tank/f\navailable\ntank/f/v@s1\n");
	cr_assert_neq(cof(NULL, "read tank/e/v"), 0, "the old name is gone");
	/* an inherited key moves below its own root */
	COF_OK(NULL, "rename tank/f/v tank/f/k/w");
	reads_as("tank/f/k/w", b);
	reads_as("tank/f/k/w@s1", a);
	COF_OK(NULL, "get -H -o value origin tank/f/k");
	cr_assert_str_eq(out, "tank/f/k/w@s1\n");
	/* the change is an event, with the new name */
	COF_OK(NULL, "pool events -v tank");
	cr_assert(strstr(out, "admin.ds_rename") && strstr(out, "renamed to tank/f/k/w"), "%s", out);
	checked();

	/* the key's checks pass: MAC trees, and each encrypted parent's list */
	COF_OK(NULL, "unload-key tank/f");
	COF_OK(NULL, "load-key tank/f");
	reads_as("tank/f/k/w", b);

	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	names_are("tank\ntank/f\ntank/f/k\ntank/f/k/w\ntank/f/k/w@s1\n");
	COF_OK(NULL, "load-key tank/f");
	reads_as("tank/f/k/w", b);
	reads_as("tank/f/k/w@s1", a);
	reads_as("tank/f/k", a);

	/* the LUNs alone carry the new names */
	tdaemon_stop_ok(&td);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s/l tank", td.dir);
	names_are("tank\ntank/f\ntank/f/k\ntank/f/k/w\ntank/f/k/w@s1\n");
	COF_OK(NULL, "load-key tank/f");
	reads_as("tank/f/k/w", b);
	reads_as("tank/f/k/w@s1", a);
	reads_as("tank/f/k", a);
	checked();
}

/* Acknowledged means on the LUNs: kill -9 at once, lose the state directory,
 * and an import from the LUNs alone has the new names and the data. */
Test(rename, an_acknowledged_rename_survives_a_crash_and_the_loss_of_the_state_directory)
{
	char a[4200], cmd[4400];
	int st;

	COF_OK(NULL, "pool create -s 32M tank %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M tank/a");
	COF_OK(NULL, "create -s -V 1M tank/a/c");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	COF_OK(a, "write tank/a/c");
	COF_OK(NULL, "snapshot -r tank/a@s1");
	COF_OK(NULL, "flush tank/a/c");
	COF_OK(NULL, "rename tank/a tank/b");
	COF_OK(NULL, "rename -r tank/b@s1 @s2");
	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool import -d %s/l tank", td.dir);
	names_are("tank\ntank/b\ntank/b/c\ntank/b@s2\ntank/b/c@s2\n");
	reads_as("tank/b/c", a);
	reads_as("tank/b/c@s2", a);
	checked();
}

Test(rename, a_snapshot_is_renamed_alone_and_with_r)
{
	char a[4200], b[4200];

	COF_OK(NULL, "pool create -s 32M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	COF_OK(NULL, "create -s -V 1M tank/v/x");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 1 << 20, b, sizeof(b));
	COF_OK(a, "write tank/v");
	COF_OK(b, "write tank/v/x");
	COF_OK(NULL, "snapshot -r tank/v@s1");
	COF_OK(b, "write tank/v");
	COF_OK(NULL, "rename tank/v@s1 s2");
	names_are("tank\ntank/v\ntank/v/x\ntank/v@s2\ntank/v/x@s1\n");
	reads_as("tank/v@s2", a);
	COF_OK(NULL, "rename tank/v@s2 tank/v@s1");
	COF_OK(NULL, "rename -r tank/v@s1 @s3");
	names_are("tank\ntank/v\ntank/v/x\ntank/v@s3\ntank/v/x@s3\n");
	reads_as("tank/v@s3", a);
	reads_as("tank/v/x@s3", b);
	COF_OK(NULL, "snapshot tank@r");
	COF_OK(NULL, "rename tank@r tank@q");
	names_are("tank\ntank/v\ntank/v/x\ntank@q\ntank/v@s3\ntank/v/x@s3\n");

	/* refused, nothing changed */
	cr_assert_eq(cof(NULL, "rename tank/v@s3 tank/v/x@s4"), 1);
	cr_assert(strstr(out, "stays with its dataset"), "%s", out);
	COF_OK(NULL, "snapshot tank/v@s5");
	cr_assert_eq(cof(NULL, "rename tank/v@s3 s5"), 1);
	cr_assert(strstr(out, "tank/v@s5 exists"), "%s", out);
	cr_assert_eq(cof(NULL, "rename tank/v@nosuch s6"), 1);
	cr_assert(strstr(out, "no such snapshot"), "%s", out);
	names_are("tank\ntank/v\ntank/v/x\ntank@q\ntank/v@s3\ntank/v@s5\ntank/v/x@s3\n");

	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	names_are("tank\ntank/v\ntank/v/x\ntank@q\ntank/v@s3\ntank/v@s5\ntank/v/x@s3\n");
	reads_as("tank/v@s3", a);
	reads_as("tank/v/x@s3", b);
	checked();
}

Test(rename, p_makes_the_missing_parents)
{
	COF_OK(NULL, "pool create -s 32M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/a");
	cr_assert_eq(cof(NULL, "rename tank/a tank/x/y/a"), 1);
	cr_assert(strstr(out, "parent tank/x/y of tank/x/y/a does not exist") && strstr(out, "-p"),
		  "%s", out);
	names_are("tank\ntank/a\n");
	COF_OK(NULL, "rename -p tank/a tank/x/y/a");
	names_are("tank\ntank/x\ntank/x/y\ntank/x/y/a\n");
}

/* Each refusal says why and leaves every name as it was. */
static void refused(const char *args, const char *says, const char *names)
{
	int st = cof(NULL, "%s", args);

	cr_assert_neq(st, 0, "%s was not refused: %s", args, out);
	cr_assert(strstr(out, says), "%s: %s", args, out);
	names_are(names);
}

Test(rename, refusals_say_why_and_change_nothing)
{
	static const char names[] = "tank\ntank/a\ntank/a/c\ntank/b\ntank/e\ntank/e/k\n"
				    "tank/e/v\ntank/r\ntank/e/v@s1\ntank2\n";
	char a[4200], b[4200];
	const char *key2;
	struct coffer_conn *c = NULL;
	int h;

	encrypted_tree(a, b, sizeof(a));
	COF_OK(NULL, "create -s -V 1M tank/a");
	COF_OK(NULL, "create -s -V 1M tank/a/c");
	COF_OK(NULL, "create -s -V 1M tank/b");
	key2 = tdaemon_file(&td, "key2", hexkey, sizeof(hexkey) - 1);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-128-ccm -o keyformat=hex "
		     "-o keylocation=file://%s tank/r", key2);
	COF_OK(NULL, "pool create -s 16M tank2 %s/l/9", td.dir);

	refused("rename tank/a tank/b", "tank/b exists", names);
	refused("rename tank/a tank2/a", "stays in its pool", names);
	refused("rename tank tank/z", "root dataset", names);
	refused("rename tank/a tank/a/c/d", "below itself", names);
	refused("rename tank/a tank/no/a", "parent tank/no of tank/no/a does not exist", names);
	refused("rename tank/e/v tank/v", "inherits its key from its encryption root tank/e", names);
	refused("rename tank/e/k tank/b/k", "may not leave it", names);
	refused("rename tank/a tank/e/a", "a clear dataset may not go below an encrypted one", names);
	refused("rename tank/e/v@s1 tank/e/k@s1", "stays with its dataset", names);
	refused("rename -r tank/a tank/z", "-r renames snapshots", names);
	/* a root joins an encrypted parent's list: that parent's key is needed */
	COF_OK(NULL, "unload-key tank/e");
	refused("rename tank/r tank/e/r", "the key of tank/e is not loaded", names);
	COF_OK(NULL, "load-key tank/e");

	/* an open handle: the refusal names it; closed, the rename goes */
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/a/c", NULL, NULL);
	cr_assert_geq(h, 0, "open: %d", h);
	refused("rename tank/a tank/z", "tank/a/c is open (1 handle on 1 connection)", names);
	cr_assert_eq(coffer_ds_close(c, h), 0);
	h = coffer_ds_open(c, "tank/e/v@s1", NULL, NULL);
	cr_assert_geq(h, 0, "open: %d", h);
	refused("rename tank/e tank/z", "tank/e/v@s1 is open", names);
	refused("rename tank/e/v@s1 s2", "tank/e/v@s1 is open", names);
	coffer_close(c);

	/* allowed: an encryption root below an encrypted parent, with its key */
	COF_OK(NULL, "rename tank/r tank/e/r");
	COF_OK(NULL, "get -H -o value encryptionroot,encryption tank/e/r");
	cr_assert_str_eq(out, "tank/e/r\naes-128-ccm\n");
	COF_OK(NULL, "rename tank/a tank/z");
	names_are("tank\ntank/b\ntank/e\ntank/e/k\ntank/e/r\ntank/e/v\ntank/z\ntank/z/c\n"
		  "tank/e/v@s1\ntank2\n");
	COF_OK(NULL, "unload-key -a");
	COF_OK(NULL, "load-key -a");
	checked();

	/* -f closes the handles on what moves; the handle then says so */
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/z/c", NULL, NULL);
	cr_assert_geq(h, 0, "open: %d", h);
	COF_OK(NULL, "rename -f tank/z tank/y");
	cr_assert_eq(coffer_read(c, h, 0, a, 512), -ESTALE);
	coffer_close(c);
	names_are("tank\ntank/b\ntank/e\ntank/e/k\ntank/e/r\ntank/e/v\ntank/y\ntank/y/c\n"
		  "tank/e/v@s1\ntank2\n");
}

Test(rename, a_moved_dataset_inherits_from_its_new_parent_and_survives_export)
{
	char a[4200];

	COF_OK(NULL, "pool create -s 32M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/a");
	COF_OK(NULL, "create -s -V 1M -o compression=zstd tank/b");
	COF_OK(NULL, "set test:tag=kept tank/b");
	COF_OK(NULL, "set test:mine=here tank/a");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	COF_OK(a, "write tank/a");
	COF_OK(NULL, "rename tank/a tank/b/a");
	COF_OK(NULL, "get -H -o value compression,test:tag,test:mine tank/b/a");
	cr_assert_str_eq(out, "zstd\nkept\nhere\n");
	COF_OK(NULL, "pool export tank");
	COF_OK(NULL, "pool import tank");
	names_are("tank\ntank/b\ntank/b/a\n");
	COF_OK(NULL, "get -H -o value compression,test:mine tank/b/a");
	cr_assert_str_eq(out, "zstd\nhere\n");
	reads_as("tank/b/a", a);
}

/* encryption_roots (cofferd.conf): a listed root keeps its listed name, and a
 * clear dataset does not move where a listed root covers it. */
Test(rename, the_listed_encryption_roots_hold_their_names)
{
	static const char list[] = "tank/e\ntank/gone\n";
	char key[4200], roots[4200];

	snprintf(key, sizeof(key), "%s", tdaemon_file(&td, "key", hexkey, sizeof(hexkey) - 1));
	snprintf(roots, sizeof(roots), "%s", tdaemon_file(&td, "roots", list, sizeof(list) - 1));

	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL, "log_target = stderr\nlun_search = %s/l\nencryption_roots = %s\n",
			   td.dir, roots);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool create -s 32M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=on -o keyformat=hex -o keylocation=file://%s "
		     "tank/e", key);
	COF_OK(NULL, "create -s -V 1M tank/c");
	refused("rename tank/e tank/f", "tank/e is listed as an encryption root", "tank\ntank/c\ntank/e\n");
	refused("rename tank/c tank/gone", "tank/c is not encrypted", "tank\ntank/c\ntank/e\n");
	COF_OK(NULL, "rename tank/c tank/d");
	names_are("tank\ntank/d\ntank/e\n");
}

/* A send holds nothing between its chunks (send.c): a snapshot renamed
 * between two ends it, saying so, and a send under the new name works. */
Test(rename, a_send_between_chunks_ends_with_the_reason_when_its_snapshot_is_renamed)
{
	char a[4200], err[1024];
	struct coffer_conn *c = NULL;
	json_t *args, *reply = NULL, *cursor;
	const uint8_t *data;
	size_t len;
	int ret;

	COF_OK(NULL, "pool create -s 64M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 16M tank/v");
	tdaemon_random_file(&td, "a", 16 << 20, a, sizeof(a));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@s1");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	args = json_pack("{s:s, s:b}", "name", "tank/v@s1", "raw", 0);
	ret = coffer_call_data(c, "send", args, NULL, 0, &reply, &data, &len, err, sizeof(err));
	json_decref(args);
	cr_assert_eq(ret, 0, "%s", err);
	cursor = json_incref(json_object_get(reply, "cursor"));
	json_decref(reply);
	cr_assert_neq(json_integer_value(json_object_get(cursor, "state")), 2, "one chunk only");
	COF_OK(NULL, "rename tank/v@s1 s2");
	args = json_pack("{s:s, s:b, s:o}", "name", "tank/v@s1", "raw", 0, "cursor", cursor);
	ret = coffer_call_data(c, "send", args, NULL, 0, &reply, &data, &len, err, sizeof(err));
	json_decref(args);
	cr_assert_eq(ret, -ENOENT, "%d: %s", ret, err);
	cr_assert(strstr(err, "renamed during the send"), "%s", err);
	coffer_close(c);
	COF_OK(NULL, "send tank/v@s2 > '%s/stream'", td.dir);
}

/* A receive in progress holds the dataset it fills, and so what is above it. */
Test(rename, a_dataset_being_received_is_not_renamed)
{
	char a[4200], stream[4400], err[1024];
	static uint8_t buf[64 << 10];
	struct coffer_conn *c = NULL;
	json_t *args, *reply = NULL;
	FILE *f;
	size_t n;
	int ret;

	COF_OK(NULL, "pool create -s 64M tank %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/v");
	COF_OK(NULL, "create -s -V 1M tank/p");
	tdaemon_random_file(&td, "a", 1 << 20, a, sizeof(a));
	COF_OK(a, "write tank/v");
	COF_OK(NULL, "snapshot tank/v@s1");
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send tank/v@s1 > '%s'", stream);
	f = fopen(stream, "rb");
	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	cr_assert_eq(n, sizeof(buf));
	/* the first part of the stream: the receive has begun, and not ended */
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	args = json_pack("{s:s}", "name", "tank/p/r");
	ret = coffer_call_data(c, "receive", args, buf, n, &reply, NULL, NULL, err, sizeof(err));
	json_decref(args);
	json_decref(reply);
	cr_assert_eq(ret, 0, "%s", err);
	refused("rename tank/p/r tank/r", "tank/p/r is being received", "tank\ntank/p\ntank/p/r\n"
		"tank/v\ntank/v@s1\n");
	refused("rename tank/p tank/q", "tank/p/r is being received", "tank\ntank/p\ntank/p/r\n"
		"tank/v\ntank/v@s1\n");
	coffer_close(c);
	/* the receive cut short is undone as its connection goes */
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     cof(NULL, "list -H -o name tank/p/r") == 0 && tdaemon_poll(end);)
		;
	COF_OK(NULL, "receive tank/p/r < '%s'", stream);
	COF_OK(NULL, "rename tank/p tank/q");
	reads_as("tank/q/r@s1", a);
}
