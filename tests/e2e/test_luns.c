// SPDX-License-Identifier: MIT
/*
 * E2E: what may become a LUN, through the real daemon. A symbolic link to a
 * root-only file, another pool's metadata, a file with data, a LUN of an
 * imported pool: each refused with a reason, and -f lifts only what it may.
 * Labels a crashed create left are reclaimed by create -f or labelclear.
 * A LUN on a full file system (a small tmpfs) fails writes as out of space,
 * is not faulted, and takes writes again once there is room; pool clear
 * resets its counts. A refused create leaves the state directory as it was.
 * A LUN grows while the pool serves (pool online -e), and keeps its size.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"
#include "store.h"

#define REC 8192u

static struct tdaemon td;
static char out[65536];
static char mnt[4200]; /* a tmpfs this test mounted, or "" */

static void setup(void)
{
	/* nogroup: a non-root admin for the link test; it exists on Debian */
	tdaemon_setup(&td, getgrnam("nogroup") ? "admin_group = nogroup\n" : NULL);
}

static void teardown(void)
{
	if (!td.dir[0])
		return;
	tdaemon_stop_ok(&td);
	if (mnt[0])
		umount2(mnt, MNT_DETACH);
	tdaemon_cleanup(&td);
}

TestSuite(luns, .init = setup, .fini = teardown, .timeout = 240);

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

static const char *at(const char *name)
{
	static char path[8][4200];
	static int n;
	char *p = path[n++ % 8];

	snprintf(p, 4200, "%s/%s", td.dir, name);
	return p;
}

/* A file of @size bytes holding @text at @off (NULL: sparse zeros). */
static void make_file(const char *path, uint64_t size, const char *text, uint64_t off,
		      mode_t mode)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, mode);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	if (text)
		cr_assert_eq(pwrite(fd, text, strlen(text), (off_t)off), (ssize_t)strlen(text));
	close(fd);
}

/* Bytes of @path that are not zero. */
static size_t nonzero(const char *path)
{
	static uint8_t buf[1 << 16];
	size_t n = 0;
	ssize_t r;
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0, "%s", path);
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < r; i++)
			n += buf[i] != 0;
	close(fd);
	return n;
}

/* Nonzero bytes in the front label and the uberblock ring, [0, 1 MiB). */
static size_t nonzero_front(const char *path)
{
	static uint8_t buf[1 << 20];
	size_t n = 0;
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0, "%s", path);
	cr_assert_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		n += buf[i] != 0;
	close(fd);
	return n;
}

static json_t *pool_status(const char *pool)
{
	json_t *j, *p;

	COF_OK("--json-int pool status %s", pool);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	p = json_incref(json_object_get(json_object_get(j, "pools"), pool));
	json_decref(j);
	return p;
}

static json_int_t lun_count(json_t *pool, unsigned i, const char *field)
{
	return json_integer_value(
		json_object_get(tdaemon_status_lun(pool, i), field));
}

#define AS_NOBODY "setpriv --reuid=nobody --regid=nogroup --clear-groups"

Test(luns, a_link_to_a_root_only_file_is_refused_for_an_admin_group_user)
{
	struct passwd *pw = getpwnam("nobody");
	const char *secret = at("secret"), *udir = at("user"), *link = at("user/lun");
	char args[4300];
	struct stat st;

	if (geteuid() != 0 || !pw || !getgrnam("nogroup"))
		tdaemon_skip(&td, "needs root, the user nobody and the group nogroup");
	/* a root-only file of zeros, and a directory the user controls */
	make_file(secret, 64 << 20, NULL, 0, 0600);
	cr_assert_eq(mkdir(udir, 0755), 0);
	cr_assert_eq(chown(udir, pw->pw_uid, pw->pw_gid), 0);
	/* the user is an admin (admin_group), not root: pools of its own are fine */
	snprintf(args, sizeof(args), "pool create -s 64M mine %s/ok", udir);
	cr_assert_eq(tdaemon_coffer(&td, AS_NOBODY, NULL, out, sizeof(out), args), 0, "%s", out);
	snprintf(args, sizeof(args), AS_NOBODY " ln -s %s %s", secret, link);
	cr_assert_eq(system(args), 0);
	snprintf(args, sizeof(args), "pool create evil %s", link);
	cr_assert_eq(tdaemon_coffer(&td, AS_NOBODY, NULL, out, sizeof(out), args), 1,
		     "a link to a root-only file became a LUN: %s", out);
	cr_assert(strstr(out, "symbolic link"), "%s", out);
	cr_assert_eq(nonzero(secret), 0, "the root-only file was written");
	cr_assert_eq(stat(secret, &st), 0);
	cr_assert_eq(st.st_uid, 0);
	/* the path itself, as root, is fine */
	COF_OK("pool create fine %s", secret);
}

Test(luns, another_pools_metadata_is_refused_and_that_pool_serves_on)
{
	char mdb[4300];
	json_t *p;

	COF_OK("pool create -s 64M good %s", at("good-l0"));
	snprintf(mdb, sizeof(mdb), "%s/pools/good.mdb", td.state);
	cr_assert_eq(cof("pool create eater %s", mdb), 1, "%s", out);
	cr_assert_eq(cof("pool create -f eater %s", mdb), 1, "%s", out);
	cr_assert(strstr(out, "state directory"), "%s", out);
	cr_assert_eq(cof("pool add -f good %s", mdb), 1, "%s", out);
	cr_assert_eq(cof("labelclear -f %s", mdb), 1, "%s", out);
	p = pool_status("good");
	cr_assert_str_eq(json_string_value(json_object_get(p, "state")), "ONLINE", "%s",
			 json_dumps(p, 0));
	json_decref(p);
	COF_OK("create -V 1M good/a");
	COF_OK("pool export good");
	COF_OK("pool import good");
}

Test(luns, a_file_with_data_is_refused_unless_forced)
{
	const char *f = at("data");

	make_file(f, 64 << 20, "\x53\xef ext4-ish superblock", 1024 + 56, 0600);
	cr_assert_eq(cof("pool create tank %s", f), 1, "%s", out);
	cr_assert(strstr(out, "not blank"), "%s", out);
	cr_assert_neq(nonzero(f), 0);
	COF_OK("pool create -s 64M tank %s", at("tank-l0"));
	cr_assert_eq(cof("pool add tank %s", f), 1, "%s", out);
	cr_assert(strstr(out, "not blank"), "%s", out);
	COF_OK("pool add -f tank %s", f);
	COF_OK("-j pool status tank");
	cr_assert(strstr(out, "\"nluns\": \"2\""), "%s", out);
}

Test(luns, a_lun_of_an_imported_pool_is_in_use)
{
	COF_OK("pool create -s 64M tank %s", at("tank-l0"));
	cr_assert_eq(cof("pool create -f other %s", at("tank-l0")), 1, "%s", out);
	cr_assert(strstr(out, "in use by pool 'tank'"), "%s", out);
	COF_OK("pool create -s 64M other %s", at("other-l0"));
	cr_assert_eq(cof("pool add -f other %s", at("tank-l0")), 1, "%s", out);
	cr_assert(strstr(out, "in use by pool 'tank'"), "%s", out);
	cr_assert_eq(cof("labelclear -f %s", at("tank-l0")), 1, "%s", out);
	cr_assert(strstr(out, "in use by pool 'tank'"), "%s", out);
	/* exported, the LUN is free of claims but its pool has metadata */
	COF_OK("pool export tank");
	cr_assert_eq(cof("pool create -f other2 %s", at("tank-l0")), 1, "%s", out);
	cr_assert(strstr(out, "already a LUN of pool 'tank'"), "%s", out);
	cr_assert_eq(cof("labelclear %s", at("tank-l0")), 1, "%s", out);
	COF_OK("pool import tank");
}

Test(luns, labels_a_crashed_create_left_are_reclaimed)
{
	char cmd[8400];

	/* the state a crash between labels and metadata leaves: labels only */
	COF_OK("pool create -s 64M crashed %s %s", at("c-l0"), at("c-l1"));
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	snprintf(cmd, sizeof(cmd), "rm -f %s/pools/crashed.* %s/pools.list", td.state, td.state);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_eq(cof("pool create crashed %s %s", at("c-l0"), at("c-l1")), 1, "%s", out);
	cr_assert(strstr(out, "no metadata"), "%s", out);
	/* one by labelclear, the other by create -f */
	COF_OK("labelclear %s", at("c-l1"));
	cr_assert_eq(nonzero_front(at("c-l1")), 0, "labelclear left label or uberblock bytes");
	COF_OK("pool create -f crashed %s", at("c-l0"));
	COF_OK("pool add crashed %s", at("c-l1"));
	/* nothing without a label is ever wiped */
	make_file(at("plain"), 64 << 20, "keep me", 0, 0600);
	cr_assert_eq(cof("labelclear -f %s", at("plain")), 1, "%s", out);
	cr_assert_eq(nonzero(at("plain")), 7);
}

/* Every path under @dir, sorted: what a refused create must leave. */
static void tree(const char *dir, char *buf, size_t cap)
{
	char cmd[4400];
	size_t n;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "cd '%s' && find . -printf '%%p\\n' | sort", dir);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	cr_assert_eq(pclose(f), 0);
}

Test(luns, a_refused_create_leaves_the_state_directory_as_it_was)
{
	static char before[16384], after[16384];

	COF_OK("pool create -s 64M good %s", at("good-l0"));
	tree(td.state, before, sizeof(before));
	/* refused before, at and after its first LUN */
	cr_assert_eq(cof("pool create tank %s", at("no/such/dir/l0")), 1, "%s", out);
	cr_assert_eq(cof("pool create -s 64M tank %s %s", at("t-l0"), at("t-l0")), 1, "%s", out);
	cr_assert_eq(cof("pool create -s 64M tank %s %s", at("t-l1"), at("good-l0")), 1, "%s", out);
	cr_assert(strstr(out, "in use by pool 'good'"), "%s", out);
	cr_assert_eq(cof("pool create -s 64M good %s", at("g-l1")), 1, "%s", out);
	tree(td.state, after, sizeof(after));
	cr_assert_str_eq(after, before, "the state directory changed");
	COF_OK("pool create -s 64M tank %s", at("t-l2"));
}

Test(luns, a_full_file_system_is_out_of_space_and_faults_nothing)
{
	static uint8_t buf[REC];
	struct coffer_conn *c = NULL;
	unsigned nospc = 0, i;
	json_t *p;
	int h, ret = 0;

	snprintf(mnt, sizeof(mnt), "%s/small", td.dir);
	cr_assert_eq(mkdir(mnt, 0700), 0);
	if (mount("coffer-test", mnt, "tmpfs", 0, "size=4m") != 0) {
		mnt[0] = '\0';
		tdaemon_skip(&td, "mount -t tmpfs not permitted here (%s)", strerror(errno));
	}
	/* a sparse LUN bigger than the file system under it */
	COF_OK("pool create -s 64M tank %s/l0", mnt);
	COF_OK("create -V 32M tank/a");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/a", NULL, NULL);
	cr_assert_geq(h, 0);
	for (i = 0; i < 2048 && nospc < 2 * STOR_LUN_FAULT_ERRORS; i++) {
		memset(buf, (int)(i % 251) + 1, sizeof(buf));
		ret = coffer_write(c, h, (uint64_t)i * REC, buf, REC);
		cr_assert(ret == 0 || ret == STOR_ENOSPC, "write %u: %s", i, proto_strerror(ret));
		nospc += ret == STOR_ENOSPC;
	}
	cr_assert_eq(nospc, 2 * STOR_LUN_FAULT_ERRORS, "4 MiB of tmpfs never filled up");
	p = pool_status("tank");
	cr_assert_str_eq(json_string_value(json_object_get(tdaemon_status_lun(p, 0), "state")),
			 "ONLINE", "a full file system faulted the LUN: %s", json_dumps(p, 0));
	cr_assert_eq(lun_count(p, 0, "write_errors"), 0, "%s", json_dumps(p, 0));
	cr_assert_geq(lun_count(p, 0, "nospace_errors"), 2 * STOR_LUN_FAULT_ERRORS);
	json_decref(p);
	COF_OK("pool status tank");
	cr_assert(strstr(out, "file system full"), "%s", out);
	/* room again: the same LUN takes the writes */
	cr_assert_eq(mount(NULL, mnt, NULL, MS_REMOUNT, "size=128m"), 0, "%s", strerror(errno));
	memset(buf, 0xab, sizeof(buf));
	cr_assert_eq(coffer_write(c, h, (uint64_t)i * REC, buf, REC), 0);
	cr_assert_eq(coffer_ds_flush(c, h), 0);
	coffer_close(c);
	COF_OK("pool clear tank 0");
	p = pool_status("tank");
	cr_assert_eq(lun_count(p, 0, "nospace_errors"), 0, "%s", json_dumps(p, 0));
	json_decref(p);
	COF_OK("pool destroy tank");
}

/* The pool's data space, as status gives it. */
static json_int_t pool_size(const char *pool)
{
	json_t *p = pool_status(pool);
	json_int_t n = json_integer_value(json_object_get(p, "size"));

	json_decref(p);
	return n;
}

/* Write record after record of tank/v from @from with a pattern of its
 * number, until the pool is full or @to; the number of the first not written. */
static unsigned fill_until_full(struct coffer_conn *c, int h, unsigned from, unsigned to)
{
	static uint8_t buf[REC];
	unsigned i;

	for (i = from; i < to; i++) {
		int ret;

		memset(buf, (int)(i % 251) + 1, sizeof(buf));
		ret = coffer_write(c, h, (uint64_t)i * REC, buf, REC);
		if (ret == STOR_ENOSPC)
			break;
		cr_assert_eq(ret, 0, "write %u: %s", i, proto_strerror(ret));
	}
	cr_assert_eq(coffer_ds_flush(c, h), 0);
	return i;
}

/*
 * A LUN grows while its pool serves (pool online -e, as zpool online -e):
 * to a size given (-s: the file is extended), or to what its file has now.
 * The pool's space grows by as much, writes refused for want of space go
 * on into it, and after a crash the pool imports at the new size with every
 * record whole and pool check clean. A smaller size is refused and changes
 * nothing.
 */
Test(luns, a_lun_grown_online_serves_its_new_space_and_keeps_it_after_a_crash)
{
	static uint8_t buf[REC];
	struct coffer_conn *c = NULL;
	json_int_t size0, size1, size2;
	unsigned full0, full1, full2;
	int h, st;

	COF_OK("pool create -s 8M tank %s", at("l0"));
	COF_OK("create -s -V 64M tank/v");
	size0 = pool_size("tank");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/v", NULL, NULL);
	cr_assert_geq(h, 0);
	full0 = fill_until_full(c, h, 0, 8192);
	cr_assert_lt(full0, 8192u, "an 8 MiB pool took 64 MiB");

	cr_assert_neq(cof("pool online -e -s 4M tank %s", at("l0")), 0, "%s", out);
	cr_assert(strstr(out, "never shrinks"), "%s", out);
	cr_assert_eq(pool_size("tank"), size0);

	COF_OK("pool online -e -s 16M tank %s", at("l0"));
	size1 = pool_size("tank");
	cr_assert_geq(size1, size0 + (7 << 20), "%lld -> %lld", (long long)size0, (long long)size1);
	full1 = fill_until_full(c, h, full0, 8192);
	cr_assert_geq(full1 - full0, (unsigned)((size1 - size0) / REC / 2),
		      "the new space took %u records", full1 - full0);

	/* the file grown by another hand: online -e takes what it has */
	cr_assert_eq(truncate(at("l0"), 24 << 20), 0);
	COF_OK("pool online -e tank 0");
	size2 = pool_size("tank");
	cr_assert_geq(size2, size1 + (7 << 20), "%lld -> %lld", (long long)size1, (long long)size2);
	full2 = fill_until_full(c, h, full1, 8192);
	cr_assert_gt(full2, full1);
	coffer_close(c);

	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
	tdaemon_start_ok(&td);
	cr_assert_eq(pool_size("tank"), size2);
	COF_OK("pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/v", NULL, NULL);
	cr_assert_geq(h, 0);
	for (unsigned i = 0; i < full2; i++) {
		cr_assert_eq(coffer_read(c, h, (uint64_t)i * REC, buf, REC), 0, "read %u", i);
		cr_assert(buf[0] == (uint8_t)(i % 251 + 1) && buf[REC - 1] == buf[0], "record %u", i);
	}
	coffer_close(c);
}

/* A mirror is as large as its smallest side: it grows when the last has. */
Test(luns, a_mirror_grows_once_its_smallest_side_has)
{
	json_int_t size0;

	COF_OK("pool create -s 8M tank mirror %s %s", at("m0"), at("m1"));
	size0 = pool_size("tank");
	COF_OK("pool online -e -s 16M tank %s", at("m0"));
	cr_assert_eq(pool_size("tank"), size0, "a mirror outgrew its smaller side");
	COF_OK("pool online -e -s 16M tank %s", at("m1"));
	cr_assert_geq(pool_size("tank"), size0 + (7 << 20));
	COF_OK("pool check tank");
	cr_assert(strstr(out, "no errors"), "%s", out);
}
