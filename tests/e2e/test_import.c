// SPDX-License-Identifier: MIT
/*
 * E2E: import by searching, through the real daemon and real LUN files. A
 * pool exported, its LUN files renamed into another directory, is listed
 * by `pool import` (lun_search) and imported with -d from there, data and
 * state_dir intact and pool status naming the new paths. A pool another
 * host id left active is refused without -f (the daemon run as that host
 * through COFFER_HOSTID); a missing LUN is named; without its metadata in
 * state_dir an import is refused and changes nothing; a pool imported under
 * a new name keeps it in its datasets, state files and labels.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"

static struct tdaemon td;
static char out[65536];

/* A daemon that scans td.dir/b, started as host @hostid (NULL: this host). */
static void start_as(const char *hostid)
{
	if (hostid)
		cr_assert_eq(setenv("COFFER_HOSTID", hostid, 1), 0);
	else
		unsetenv("COFFER_HOSTID");
	tdaemon_write_conf(&td, NULL, "lun_search = %s/b\n", td.dir);
	tdaemon_start_ok(&td);
}

static void setup(void)
{
	char path[4200];

	tdaemon_init(&td, NULL);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%c", td.dir, "ab"[i]);
		cr_assert_eq(mkdir(path, 0700), 0);
	}
	start_as(NULL);
}

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(import, .init = setup, .fini = teardown, .timeout = 240);

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* td.dir/NAME, NAME made by @fmt; eight at a time stay valid. */
static const char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *at(const char *fmt, ...)
{
	static char path[8][4200];
	static int n;
	char *p = path[n++ % 8], name[64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	snprintf(p, 4200, "%s/%s", td.dir, name);
	return p;
}

/* Pool tank on a/l0..l2 with tank/v holding @data (random), flushed. */
static void make_pool(char *data, size_t cap)
{
	uint8_t buf[100000];

	COF_OK(NULL, "pool create -s 16M tank %s %s %s", at("a/l%d", 0), at("a/l%d", 1),
	       at("a/l%d", 2));
	COF_OK(NULL, "create -V 4M tank/v");
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(rand() >> 7);
	snprintf(data, cap, "%s", tdaemon_file(&td, "data", buf, sizeof(buf)));
	COF_OK(data, "write tank/v -o 4096");
	COF_OK(NULL, "flush tank/v");
}

/* Rename a/l<i> to b/disk-<letter>, in another order than the indexes. */
static void move_luns(void)
{
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rename(at("a/l%d", i), at("b/disk-%c", 'z' - i)), 0, "%s",
			     strerror(errno));
}

static void read_ds(const char *ds, const char *data)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "read %s -o 4096 -l 100000 > '%s/back'", ds, td.dir);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, NULL, 0, cmd), 0, "%s", tdaemon_log(&td));
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", data, td.dir);
	cr_assert_eq(system(cmd), 0, "read back differs");
}

static void read_back(const char *data)
{
	read_ds("tank/v", data);
}

Test(import, moved_luns_are_listed_and_imported_from_where_they_are)
{
	char data[4200], mdb[4200];
	struct stat st;

	make_pool(data, sizeof(data));
	COF_OK(NULL, "pool export tank");
	move_luns();
	COF_OK(NULL, "pool import");
	cr_assert(strstr(out, "pool: tank") && strstr(out, "3 of 3 found") &&
			  strstr(out, "EXPORTED") && strstr(out, at("b/disk-%c", 'x')),
		  "%s", out);
	/* the recorded paths are gone: only the scan finds the LUNs */
	COF_OK(NULL, "pool import -d %s/b tank", td.dir);
	snprintf(mdb, sizeof(mdb), "%s/pools/tank.mdb", td.state);
	cr_assert_eq(stat(mdb, &st), 0, "state_dir lost %s", mdb);
	read_back(data);
	COF_OK(NULL, "pool status tank");
	for (int i = 0; i < 3; i++)
		cr_assert(strstr(out, at("b/disk-%c", 'z' - i)), "no LUN %d path in: %s", i, out);
	cr_assert(!strstr(out, at("a/l%d", 0)), "%s", out);
	/* imported: listed no more; a second import says so */
	COF_OK(NULL, "pool import");
	cr_assert(!strstr(out, "pool: tank"), "%s", out);
	cr_assert_neq(cof("pool import -d %s/b tank", td.dir), 0);
	cr_assert(strstr(out, "already imported"), "%s", out);
	/* the record holds the new paths: a restart imports it from pools.list */
	tdaemon_stop_ok(&td);
	start_as(NULL);
	read_back(data);
}

Test(import, a_pool_another_host_left_active_needs_force)
{
	char data[4200];

	tdaemon_stop_ok(&td);
	start_as("0000beef");
	make_pool(data, sizeof(data));
	/* host beef stops without exporting: the labels stay active under it */
	tdaemon_stop_ok(&td);
	start_as("0000cafe");
	/* at start the pool of pools.list is refused too, and shows as faulted */
	COF_OK(NULL, "pool list");
	cr_assert(strstr(out, "FAULTED"), "%s", out);
	COF_OK(NULL, "pool import -d %s/a", td.dir);
	cr_assert(strstr(out, "ACTIVE on host 0000beef"), "%s", out);
	cr_assert_neq(cof("pool import -d %s/a tank", td.dir), 0);
	cr_assert(strstr(out, "pool was last used by host 0000beef") && strstr(out, "use -f"),
		  "%s", out);
	COF_OK(NULL, "pool import -d %s/a -f tank", td.dir);
	read_back(data);
	/* exported by cafe, host beef takes it back without -f */
	COF_OK(NULL, "pool export tank");
	tdaemon_stop_ok(&td);
	start_as("0000beef");
	COF_OK(NULL, "pool import -d %s/a tank", td.dir);
	read_back(data);
}

Test(import, a_missing_lun_is_named_and_a_guid_imports)
{
	char data[4200], guid[32];
	json_t *j, *p;

	make_pool(data, sizeof(data));
	COF_OK(NULL, "pool export tank");
	move_luns();
	cr_assert_eq(rename(at("b/disk-%c", 'y'), at("a/away%d", 1)), 0);
	COF_OK(NULL, "pool import");
	cr_assert(strstr(out, "2 of 3 found") && strstr(out, "1  missing"), "%s", out);
	cr_assert_neq(cof("pool import -d %s/b tank", td.dir), 0);
	cr_assert(strstr(out, "LUN 1 of 3 not found"), "%s", out);
	/* found again, in a second directory; imported by the GUID listed */
	j = tdaemon_coffer_json(&td, "-j pool import");
	p = json_object_get(json_object_get(j, "pools"), "tank");
	cr_assert_not_null(p, "%s", json_dumps(j, 0));
	snprintf(guid, sizeof(guid), "%s", json_string_value(json_object_get(p, "pool_guid")));
	json_decref(j);
	COF_OK(NULL, "pool import -d %s/b -d %s/a %s", td.dir, td.dir, guid);
	cr_assert(strstr(out, "as tank"), "%s", out);
	read_back(data);
}

/*
 * The state directory lost every file of the pool and its LUNs moved: the
 * scan finds them, and the import rebuilds the metadata from the LUNs.
 */
Test(import, without_metadata_in_state_dir_the_luns_alone_import_it)
{
	static const char *const gone[] = { ".mdb", ".mdb-lock", ".luns", ".keys", ".keys.1" };
	char data[4200], path[4200];

	make_pool(data, sizeof(data));
	COF_OK(NULL, "pool export tank");
	move_luns();
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		snprintf(path, sizeof(path), "%s/pools/tank%s", td.state, gone[i]);
		cr_assert(unlink(path) == 0 || errno == ENOENT, "%s: %s", path, strerror(errno));
	}
	COF_OK(NULL, "pool import -d %s/b", td.dir);
	cr_assert(strstr(out, "EXPORTED"), "%s", out);
	COF_OK(NULL, "pool import -d %s/b tank", td.dir);
	read_back(data);
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "rebuilt"), "%s", out);
	snprintf(path, sizeof(path), "%s/pools/tank.mdb", td.state);
	cr_assert_eq(access(path, F_OK), 0, "no rebuilt %s", path);
}

/*
 * The case whole: the daemon stopped, its state directory deleted
 * (not only the pool's files), the LUNs moved; a fresh daemon on an empty
 * state directory imports the pool from the LUNs alone, the clear and the
 * encrypted dataset read back, the key loads with the same passphrase and
 * the metadata MACs verify (pool check). The daemon made the state
 * directory again, but without pools/, and the import failed with ENOENT.
 */
Test(import, a_fresh_daemon_on_an_empty_state_dir_imports_moved_luns)
{
	static const char pass[] = "correct horse battery\n";
	char data[4200], keyfile[4200], cmd[8400];

	make_pool(data, sizeof(data));
	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "create -V 1M -o encryption=aes-256-gcm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", keyfile);
	COF_OK(data, "write tank/e -o 4096");
	COF_OK(NULL, "flush tank/e");
	tdaemon_stop_ok(&td);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", td.state);
	cr_assert_eq(system(cmd), 0);
	move_luns();
	start_as(NULL);
	COF_OK(NULL, "pool import -d %s/b tank", td.dir);
	read_back(data);
	COF_OK(NULL, "load-key tank/e");
	read_ds("tank/e", data);
	COF_OK(NULL, "pool check tank");
	COF_OK(NULL, "pool status tank");
	cr_assert(strstr(out, "rebuilt"), "%s", out);
}

Test(import, a_pool_imported_under_a_new_name_keeps_it)
{
	char data[4200], path[4200];
	struct stat st;

	make_pool(data, sizeof(data));
	COF_OK(NULL, "create -V 1M tank/v/w");
	COF_OK(NULL, "pool export tank");
	move_luns();
	/* a name taken by an imported pool is refused, and nothing changes */
	COF_OK(NULL, "pool create -s 16M other %s", at("a/o%d", 0));
	cr_assert_neq(cof("pool import -d %s/b tank other", td.dir), 0);
	cr_assert(strstr(out, "already exists"), "%s", out);
	COF_OK(NULL, "pool import -d %s/b tank pond", td.dir);
	cr_assert(strstr(out, "imported tank as pond"), "%s", out);
	COF_OK(NULL, "list -H -o name");
	cr_assert(strstr(out, "pond\n") && strstr(out, "pond/v\n") && strstr(out, "pond/v/w\n") &&
			  !strstr(out, "tank"),
		  "%s", out);
	read_ds("pond/v", data);
	snprintf(path, sizeof(path), "%s/pools/pond.mdb", td.state);
	cr_assert_eq(stat(path, &st), 0);
	snprintf(path, sizeof(path), "%s/pools/tank.mdb", td.state);
	cr_assert_neq(stat(path, &st), 0);
	/* the labels say pond: a scan lists it so once exported */
	COF_OK(NULL, "pool export pond");
	COF_OK(NULL, "pool import -d %s/b", td.dir);
	cr_assert(strstr(out, "pool: pond") && !strstr(out, "pool: tank"), "%s", out);
	COF_OK(NULL, "pool import pond");
	tdaemon_stop_ok(&td);
	start_as(NULL);
	read_ds("pond/v", data);
}
