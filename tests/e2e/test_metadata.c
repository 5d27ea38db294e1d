// SPDX-License-Identifier: MIT
/*
 * E2E: the pool's metadata on its LUNs, through the real daemon. A pool of
 * four LUNs with a clear and an encrypted dataset, written and flushed;
 * the daemon stopped; its LMDB and key files deleted (pools.list kept, so
 * the name is known); a new daemon imports the pool from its LUNs: every
 * byte reads back, the key loads with the same passphrase, pool check is
 * clean and pool status says the metadata was rebuilt. And a LUN whose
 * metadata (uberblock ring, log record copies) is junk: the import repairs
 * it from the other LUNs and says so, with the rebuild's size and time, so
 * that the other LUNs' copies may fail next.
 */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"
#include "store.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(metadata, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static void random_file(const char *name, size_t len, char *path, size_t cap)
{
	tdaemon_random_file(&td, name, len, path, cap);
}

/* Dataset @ds reads back as the file @in. */
static void reads_back(const char *ds, const char *in, size_t len)
{
	char args[8192], back[4096];

	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(args, sizeof(args), "read -l %zu %s > '%s'", len, ds, back);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, NULL, 0, args), 0, "read %s", ds);
	snprintf(args, sizeof(args), "cmp -s '%s' '%s'", in, back);
	cr_assert_eq(system(args), 0, "%s reads back other bytes", ds);
}

Test(metadata, a_pool_whose_lmdb_and_key_files_are_gone_imports_from_its_luns)
{
	char clear[4096], secret[4096], cmd[8192];
	const char *pf = tdaemon_file(&td, "pass", "correct horse battery staple\n", 29);

	COF_OK(NULL, "pool create -s 32M tank %s/l0 %s/l1 %s/l2 %s/l3", td.dir, td.dir, td.dir,
	       td.dir);
	COF_OK(NULL, "create -V 2M tank/clear");
	COF_OK(NULL,
	       "create -V 2M -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 tank/secret",
	       pf);
	random_file("clear.in", 1 << 20, clear, sizeof(clear));
	random_file("secret.in", 1 << 20, secret, sizeof(secret));
	COF_OK(clear, "write tank/clear");
	COF_OK(secret, "write tank/secret");
	COF_OK(NULL, "flush tank/clear");
	COF_OK(NULL, "flush tank/secret");
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	snprintf(cmd, sizeof(cmd), "rm -f %s/pools/tank.mdb %s/pools/tank.mdb-lock %s/pools/tank.keys*",
		 td.state, td.state, td.state);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	/* imported at start from pools.list; an import names it if not */
	if (cof(NULL, "pool status tank") != 0)
		COF_OK(NULL, "pool import tank");
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "rebuilt from the LUNs"), "%s", out);
	reads_back("tank/clear", clear, 1 << 20);
	COF_OK(NULL, "get -H keystatus tank/secret");
	if (strstr(out, "unavailable"))
		COF_OK(NULL, "load-key tank/secret");
	reads_back("tank/secret", secret, 1 << 20);
	COF_OK(NULL, "pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

/* Overwrite LUN file @path's uberblock ring and every log record copy on it with junk. */
static unsigned smash_metadata(const char *path)
{
	uint8_t buf[4096], junk[4096];
	unsigned n = 0;
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0, "%s", path);
	memset(junk, 0x5a, sizeof(junk));
	for (off_t off = 4096; off < 4096 + 128 * 4096; off += 4096)
		cr_assert_eq(pwrite(fd, junk, sizeof(junk), off), (ssize_t)sizeof(junk));
	for (off_t off = 1 << 20; pread(fd, buf, sizeof(buf), off) == (ssize_t)sizeof(buf);
	     off += 4096)
		if (!memcmp(buf, "COFFMLOG", 8)) {
			cr_assert_eq(pwrite(fd, junk, sizeof(junk) - 64, off + 64),
				     (ssize_t)sizeof(junk) - 64);
			n++;
		}
	close(fd);
	return n;
}

static void remove_lmdb(void)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "rm -f %s/pools/tank.mdb %s/pools/tank.mdb-lock", td.state,
		 td.state);
	cr_assert_eq(system(cmd), 0);
}

Test(metadata, a_lun_whose_metadata_is_junk_is_repaired_at_import_and_the_reply_says_so)
{
	char data[4096], lun[4200];

	/* two LUNs: every record has a copy on each */
	COF_OK(NULL, "pool create -s 32M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK(NULL, "create -V 2M tank/vol");
	random_file("vol.in", 1 << 20, data, sizeof(data));
	COF_OK(data, "write tank/vol");
	COF_OK(NULL, "flush tank/vol");
	COF_OK(NULL, "pool export tank");
	remove_lmdb();
	snprintf(lun, sizeof(lun), "%s/l0", td.dir);
	cr_assert_gt(smash_metadata(lun), 0, "no log record on %s", lun);
	COF_OK(NULL, "pool import -d %s tank", td.dir);
	cr_assert(strstr(out, "rebuilt from the LUNs:") && strstr(out, "log records"), "%s", out);
	cr_assert(strstr(out, "lun 0: uberblock") && strstr(out, "repaired"), "%s", out);
	cr_assert(strstr(out, "copy on lun 0") && strstr(out, "repaired from lun"), "%s", out);
	cr_assert(strstr(tdaemon_log(&td), "rebuilding its LMDB file from the LUNs: done"), "%s",
		  tdaemon_log(&td));
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "repaired from lun"), "%s", out);
	reads_back("tank/vol", data, 1 << 20);
	/* now the other LUN's copies are lost: LUN 0's repaired ones carry the pool */
	COF_OK(NULL, "pool export tank");
	remove_lmdb();
	snprintf(lun, sizeof(lun), "%s/l1", td.dir);
	smash_metadata(lun);
	COF_OK(NULL, "pool import -d %s tank", td.dir);
	cr_assert(strstr(out, "copy on lun 1"), "%s", out);
	reads_back("tank/vol", data, 1 << 20);
	COF_OK(NULL, "pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

/*
 * On a terminal, pool import watches the rebuild over a second connection
 * (import_progress) and ends with the summary; the daemon answers
 * import_progress at any time, with nothing running once the import is done.
 */
Test(metadata, an_import_on_a_terminal_watches_the_rebuild_and_sums_it_up)
{
	const char *bin = getenv("COFFER") ? getenv("COFFER") : "../../client/coffer";
	char data[4096], cmd[16384], err[256];
	struct coffer_conn *c;
	json_t *r = NULL, *args;
	int status;

	COF_OK(NULL, "pool create -s 32M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK(NULL, "create -V 2M tank/vol");
	random_file("vol.in", 1 << 20, data, sizeof(data));
	COF_OK(data, "write tank/vol");
	COF_OK(NULL, "flush tank/vol");
	COF_OK(NULL, "pool export tank");
	remove_lmdb();
	/* script(1) gives coffer a terminal; its output lands in out.tty */
	snprintf(cmd, sizeof(cmd),
		 "script -qec \"'%s' -S '%s' pool import -d '%s' tank\" /dev/null "
		 "> '%s/out.tty' 2>&1 < /dev/null",
		 bin, td.sock, td.dir, td.dir);
	status = system(cmd);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: %d", cmd, status);
	snprintf(cmd, sizeof(cmd), "%s/out.tty", td.dir);
	{
		FILE *f = fopen(cmd, "r");
		size_t n;

		cr_assert_not_null(f);
		n = fread(out, 1, sizeof(out) - 1, f);
		out[n] = '\0';
		fclose(f);
	}
	cr_assert(strstr(out, "rebuilt from the LUNs:") && strstr(out, "log records"), "%s", out);
	reads_back("tank/vol", data, 1 << 20);
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	args = json_object();
	cr_assert_eq(coffer_call(c, "import_progress", args, &r, err, sizeof(err)), 0, "%s", err);
	json_decref(args);
	cr_assert(json_is_false(json_object_get(r, "running")), "%s", json_dumps(r, 0));
	json_decref(r);
	coffer_close(c);
}
