// SPDX-License-Identifier: MIT
/*
 * E2E: hostile peers. A peer without admin rights (uid and gid of
 * `nobody`, no groups) calls every command the table in proto.h marks
 * CMD_ADMIN, with arguments that would change the store if the call got
 * through; each must get -EPERM, the EPERM counter must count them, and
 * pools, datasets, properties and keys must be exactly as before. The
 * list of commands comes from the table itself, so a new admin command is
 * covered the day it is added.
 *
 * Key bytes at rest: after change-key, the pool's LMDB file must hold
 * neither the old wrapped master keys nor any user key material, and the
 * daemon's log no passphrase or key in any encoding.
 *
 * Loose input: owner ids with signs, spaces or past 32 bits, sizes of zero
 * or below zero, and the group part of an owner matched against the peer's
 * supplementary groups (setpriv --groups), not only its primary group.
 *
 * Handles in the way: unload-key of a dataset in use is EBUSY unless -f,
 * and -f of an admin closes a non-admin's handles (with requests in flight)
 * for pool export and destroy; their requests then get ESTALE.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>
#include <lmdb.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

/* the key scans take ~20 s under ASan on a quiet machine; CI may be loaded */
TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 180);

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

/* Everything an admin can see of the store, as one text. */
static __attribute__((unused)) char *snapshot(void)
{
	static const char *const views[] = { "-j pool status", "-j list -r",
					     "-j get all tank/a tank/enc" };
	size_t cap = 3 * sizeof(out), len = 0;
	char *s = malloc(cap);

	cr_assert_not_null(s);
	for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
		COF_OK("%s", views[i]);
		len += (size_t)snprintf(s + len, cap - len, "%s\n", out);
	}
	return s;
}

/* Arguments that would change the store, whatever the command. */
static __attribute__((unused)) json_t *hostile_args(const struct proto_cmd *cmd)
{
	char lun[4200], l0[4200];
	int pool_cmd = !strncmp(cmd->name, "pool_", 5);

	snprintf(lun, sizeof(lun), "%s/hostile-lun", td.dir);
	snprintf(l0, sizeof(l0), "%s/l0", td.dir); /* tank's LUN: labelclear, pool clear */
	return json_pack("{s:s, s:[s], s:s, s:b, s:I, s:[s,s], s:s, s:s, s:b, s:s, s:I}", "name",
			 !strcmp(cmd->name, "pool_create") ? "evil"
			 : pool_cmd			   ? "tank"
			 : !strncmp(cmd->name, "key_", 4)  ? "tank/enc"
							   : "tank/a",
			 "luns", lun, "lun", l0, "force", 1, "lun_size", (json_int_t)(64 << 20), "props",
			 "compression=zstd", "keyformat=raw", "prop", "compression", "value",
			 "zstd", "recursive", 1, "key_hex",
			 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100", "volsize",
			 (json_int_t)(1 << 20));
}

Test(hostile, every_admin_command_of_the_table_gets_eperm_and_changes_nothing)
{
	struct passwd *pw = getpwnam("nobody");
	int fds[2], st, nadmin = 0;
	char *before, *after, buf[8192];
	json_int_t eperm;
	json_t *stats;
	ssize_t n;
	pid_t pid;

	if (geteuid() != 0 || !pw)
		cr_skip_test("needs root and a 'nobody' user to drop to");
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M tank/a");
	COF_OK("create -V 4M -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o pbkdf2iters=100000 -o keylocation=file://%s tank/enc",
	       tdaemon_file(&td, "pass", "hostile passphrase\n", 19));
	/* committed now: a later timer commit would change pool status's metadata counts */
	COF_OK("flush tank/a");
	before = snapshot();
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* the child: nobody, no groups; one line per admin command */
		struct coffer_conn *c = NULL;
		FILE *f = fdopen(fds[1], "w");

		close(fds[0]);
		if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(3);
		if (coffer_connect(td.sock, &c) < 0)
			_exit(4);
		for (unsigned op = 1; op < 65536; op++) {
			const struct proto_cmd *cmd = proto_cmd_by_op(op);
			json_t *reply = NULL;
			char err[512] = "";
			int ret;

			if (!cmd || !(cmd->flags & CMD_ADMIN))
				continue;
			ret = coffer_call(c, cmd->name, hostile_args(cmd), &reply, err,
					  sizeof(err));
			json_decref(reply);
			fprintf(f, "%s %d %s\n", cmd->name, ret, err);
		}
		/* what a non-admin may do still works on the same connection */
		fprintf(f, "ping %d\n", coffer_call(c, "ping", NULL, NULL, NULL, 0));
		coffer_close(c);
		fclose(f);
		_exit(0);
	}
	close(fds[1]);
	n = 0;
	for (ssize_t r; (r = read(fds[0], buf + n, sizeof(buf) - 1 - (size_t)n)) > 0;)
		n += r;
	buf[n] = '\0';
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	cr_log_info("non-admin peer:\n%s", buf);
	for (unsigned op = 1; op < 65536; op++) {
		const struct proto_cmd *cmd = proto_cmd_by_op(op);
		char want[64];

		if (!cmd || !(cmd->flags & CMD_ADMIN))
			continue;
		nadmin++;
		snprintf(want, sizeof(want), "\n%s %d ", cmd->name, -EPERM);
		cr_expect(strstr(buf, want + 1) == buf || strstr(buf, want),
			  "%s by a non-admin did not get EPERM:\n%s", cmd->name, buf);
	}
	cr_assert_gt(nadmin, 10, "the table has too few admin commands to be the real one");
	cr_assert(strstr(buf, "\nping 0"), "ping failed for the non-admin:\n%s", buf);
	after = snapshot();
	cr_assert_str_eq(after, before, "the store changed under a non-admin peer");
	free(before);
	free(after);
	snprintf(buf, sizeof(buf), "%s/hostile-lun", td.dir);
	cr_assert_neq(access(buf, F_OK), 0, "a non-admin made the daemon create %s", buf);
	COF_OK("--json-int stats");
	stats = json_loads(out, 0, NULL);
	eperm = json_integer_value(json_object_get(json_object_get(stats, "io"), "eperm"));
	json_decref(stats);
	cr_assert_geq(eperm, nadmin, "stats count %lld refusals of %d", (long long)eperm, nadmin);
}

#define WRAPPED_LEN 60 /* KEYS_WRAPPED_LEN: nonce, master key, tag */

static uint64_t rd_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static uint8_t *slurp(const char *path, size_t *len);

/*
 * The wrapped master key of dataset @name as stored in its "ds" record:
 * u32 version, u64 id, u64 guid, u64 volsize, u32 recordsize, u64 txg,
 * u16 nprops x (u16 len, name, u16 len, value), then the crypto section:
 * u8 suite, u64 root id, u8 keyformat, u32 iterations, salt[16], wrapped.
 */
/*
 * The wrapped master key of dataset @name: its GUID from the LMDB record
 * (u32 version | u64 id | u64 guid ...), then its entry in the pool's key
 * file beside the LMDB file (libstore/ds/keyfile.c has the layout).
 */
static void wrapped_key(const char *mdb, const char *name, uint8_t dst[WRAPPED_LEN])
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_dbi dbi;
	MDB_val k = { strlen(name), (void *)name }, v;
	char keys[PATH_MAX];
	uint8_t *kf;
	uint64_t guid;
	size_t len, n;
	int rc;

	rc = mdb_env_create(&env);
	cr_assert_eq(rc, 0);
	mdb_env_set_maxdbs(env, 8);
	mdb_env_set_mapsize(env, (size_t)4 << 30);
	rc = mdb_env_open(env, mdb, MDB_NOSUBDIR | MDB_RDONLY, 0600);
	cr_assert_eq(rc, 0, "open %s: %s", mdb, mdb_strerror(rc));
	cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "ds", 0, &dbi), 0);
	rc = mdb_get(txn, dbi, &k, &v);
	cr_assert_eq(rc, 0, "ds record %s: %s", name, mdb_strerror(rc));
	cr_assert_geq(v.mv_size, 20);
	guid = rd_be((const uint8_t *)v.mv_data + 12, 8);
	mdb_txn_abort(txn);
	mdb_env_close(env);

	snprintf(keys, sizeof(keys), "%.*s.keys", (int)strlen(mdb) - 4, mdb);
	kf = slurp(keys, &len);
	cr_assert_geq(len, 24, "%s too short", keys);
	n = rd_be(kf + 20, 4);
	/* after magic, version, generation and count; entries end in u8 key flags,
	 * u8 suite (a rekey's previous suite and wrapped key after them when 0x2
	 * is set), u16 length + keylocation */
	cr_assert_eq(rd_be(kf + 8, 4), 5, "key file version");
	for (size_t i = 0, off = 24; i < n; i++) {
		const uint8_t *e = kf + off;

		cr_assert(e + 37 + WRAPPED_LEN + 2 + 2 <= kf + len);
		if (rd_be(e, 8) == guid) {
			memcpy(dst, e + 37, WRAPPED_LEN);
			free(kf);
			return;
		}
		off += 37 + WRAPPED_LEN;
		off += 2 + ((kf[off] & 0x2) ? 1 + WRAPPED_LEN : 0);
		off += 2 + rd_be(kf + off, 2);
	}
	cr_assert_fail("no key of %s in %s", name, keys);
}

/* The first @max bytes of @path (all of it, if shorter), NUL-terminated. */
static uint8_t *slurp_prefix(const char *path, size_t max, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	size_t want;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(fstat(fd, &st), 0);
	want = (size_t)st.st_size < max ? (size_t)st.st_size : max;
	buf = malloc(want + 1);
	cr_assert_not_null(buf);
	*len = 0;
	for (ssize_t r; (r = read(fd, buf + *len, want - *len)) > 0;)
		*len += (size_t)r;
	buf[*len] = '\0';
	close(fd);
	return buf;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	return slurp_prefix(path, SIZE_MAX, len);
}

/*
 * The bytes of LMDB file @mdb that LMDB ever wrote: its pages up to the last
 * one used. The file is sized to the map (MDB_WRITEMAP, sparse, 4 GiB), and
 * what lies past the last page was never written; reading all of it costs
 * minutes on a loaded machine and finds only zeros.
 */
static size_t mdb_used(const char *mdb)
{
	MDB_env *env = NULL;
	MDB_envinfo info;
	MDB_stat st;

	cr_assert_eq(mdb_env_create(&env), 0);
	mdb_env_set_mapsize(env, (size_t)4 << 30);
	cr_assert_eq(mdb_env_open(env, mdb, MDB_NOSUBDIR | MDB_RDONLY, 0600), 0, "%s", mdb);
	cr_assert_eq(mdb_env_info(env, &info), 0);
	cr_assert_eq(mdb_env_stat(env, &st), 0);
	mdb_env_close(env);
	return (info.me_last_pgno + 1) * (size_t)st.ms_psize;
}

/* Mappings of at most 64 KiB that the daemon marked MADV_DONTDUMP ("dd" in smaps). */
static int small_dontdump_maps(pid_t pid)
{
	char path[64], line[512];
	unsigned long lo = 0, hi = 0;
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
			lo = a;
			hi = b;
		} else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " dd") &&
			   hi - lo <= 65536) {
			n++;
		}
	}
	fclose(f);
	return n;
}

struct needle {
	const char *what;
	const void *bytes;
	size_t len;
};

static void hex(const uint8_t *b, size_t n, char *dst)
{
	for (size_t i = 0; i < n; i++)
		sprintf(dst + 2 * i, "%02x", b[i]);
}

/*
 * The scenario: raw-key root with a child, a passphrase root, change-key
 * of the raw root, more commits, a clean stop. @wrapped: look for the old
 * wrapped master keys in the LMDB file; else for user key material in the
 * LMDB file and the log.
 */
static void key_scan(int wrapped)
{
	static const char pass[] = "hostile-scan-passphrase-0451";
	uint8_t k1[32], k2[32], w_enc[WRAPPED_LEN], w_child[WRAPPED_LEN], w_new[WRAPPED_LEN];
	char kf1[4200], kf2[4200], pf[4200], mdb[4200], hx[200];
	struct needle needles[8];
	size_t nn = 0, len;
	int dd_before, dd_after;
	uint8_t *img;
	char *log;

	for (int i = 0; i < 32; i++) {
		k1[i] = (uint8_t)(rand() ^ 0x5a ^ i);
		k2[i] = (uint8_t)(rand() ^ 0xa5 ^ i * 7);
	}
	snprintf(kf1, sizeof(kf1), "%s", tdaemon_file(&td, "k1", k1, sizeof(k1)));
	snprintf(kf2, sizeof(kf2), "%s", tdaemon_file(&td, "k2", k2, sizeof(k2)));
	snprintf(pf, sizeof(pf), "%s", tdaemon_file(&td, "pass", pass, strlen(pass)));
	snprintf(mdb, sizeof(mdb), "%s/pools/tank.mdb", td.state);
	dd_before = small_dontdump_maps(td.pid);
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M -o encryption=aes-256-ccm -o keyformat=raw -o keylocation=file://%s "
	       "tank/enc",
	       kf1);
	COF_OK("create -V 4M tank/enc/child");
	COF_OK("create -V 4M -o encryption=aes-128-gcm -o keyformat=passphrase "
	       "-o pbkdf2iters=100000 -o keylocation=file://%s tank/pp",
	       pf);
	COF_OK("flush tank/enc");
	/* the daemon runs: read its committed state as another LMDB reader would */
	wrapped_key(mdb, "tank/enc", w_enc);
	wrapped_key(mdb, "tank/enc/child", w_child);
	COF_OK("change-key -o keylocation=file://%s tank/enc", kf2);
	/* a few more commits, so that freed pages get their chance to be reused */
	for (int i = 0; i < 3; i++) {
		COF_OK("set compression=zstd-%d tank/enc/child", i + 1);
		COF_OK("flush tank/enc/child");
	}
	wrapped_key(mdb, "tank/enc", w_new);
	cr_assert(memcmp(w_new, w_enc, WRAPPED_LEN), "change-key did not rewrap");
	COF_OK("unload-key tank/enc");
	COF_OK("load-key tank/enc");
	/* loaded keys live in pages kept out of core dumps */
	dd_after = small_dontdump_maps(td.pid);
	cr_log_info("small MADV_DONTDUMP mappings: %d before keys, %d with keys", dd_before,
		    dd_after);
	cr_expect_gt(dd_after, dd_before, "no key page is marked MADV_DONTDUMP (%d before, %d after)",
		     dd_before, dd_after);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));

	if (wrapped) {
		needles[nn++] = (struct needle){ "old wrapped key of tank/enc", w_enc,
						 WRAPPED_LEN };
		needles[nn++] = (struct needle){ "old wrapped key of tank/enc/child", w_child,
						 WRAPPED_LEN };
	} else {
		needles[nn++] = (struct needle){ "the old raw key", k1, sizeof(k1) };
		needles[nn++] = (struct needle){ "the new raw key", k2, sizeof(k2) };
		needles[nn++] = (struct needle){ "the passphrase", pass, strlen(pass) };
	}
	for (int f = 0; f < 3; f++) {
		char keys[PATH_MAX];
		const char *file = mdb;

		if (f > 0) {
			snprintf(keys, sizeof(keys), "%.*s.keys%s", (int)strlen(mdb) - 4, mdb,
				 f == 2 ? ".1" : "");
			file = keys;
		}
		img = f ? slurp(file, &len) : slurp_prefix(file, mdb_used(mdb), &len);
		for (size_t i = 0; i < nn; i++)
			cr_expect_null(memmem(img, len, needles[i].bytes, needles[i].len),
				       "%s is in %s at byte %td", needles[i].what, file,
				       (uint8_t *)memmem(img, len, needles[i].bytes,
							 needles[i].len) - img);
		free(img);
	}
	if (wrapped) {
		cr_assert_eq(tdaemon_start(&td), 0);
		return;
	}
	/* nor in the log, in any encoding the daemon could use */
	log = (char *)slurp(td.log, &len);
	cr_expect_null(strstr(log, pass), "the passphrase is in the daemon log");
	hex(k1, sizeof(k1), hx);
	cr_expect_null(strcasestr(log, hx), "the old key (hex) is in the daemon log");
	hex(k2, sizeof(k2), hx);
	cr_expect_null(strcasestr(log, hx), "the new key (hex) is in the daemon log");
	hex((const uint8_t *)pass, strlen(pass), hx);
	cr_expect_null(strcasestr(log, hx), "the passphrase (hex) is in the daemon log");
	cr_expect_null(memmem(log, len, k1, 16), "raw key bytes are in the daemon log");
	free(log);
	cr_assert_eq(tdaemon_start(&td), 0);
}

/*
 * LMDB leaves old record bytes in page gaps and free pages, which is why
 * wrapped keys live in a key file of their own that change-key replaces
 * whole: neither file may hold an old wrapped key afterwards.
 */
Test(hostile, change_key_leaves_no_old_wrapped_key_in_lmdb)
{
	key_scan(1);
}

Test(hostile, change_key_leaves_no_key_material_in_lmdb_or_log)
{
	key_scan(0);
}

/*
 * A careless admin's owner values: strtoul took "-5" (as 2^64 - 5),
 * "+5", " 5" and ids past 32 bits; each must be refused, saying what an
 * owner looks like, and leave the property as it was.
 */
Test(hostile, loose_owner_values_are_refused_with_the_expected_form)
{
	static const char *const bad[] = { "-5",	 "+5",	"4294967296", "4294967295",
					   "5:-1",	 "5:+1", "5:",	       ":5",
					   "' 5'",	 "5x",	"5:4294967296", "" };

	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M tank/a");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(cof("set owner=%s tank/a", bad[i]), 1, "owner=%s accepted: %s", bad[i],
			     out);
		cr_assert(strstr(out, "UID or UID:GID, each a decimal"), "owner=%s: %s", bad[i], out);
		cr_assert_eq(cof("create -V 4M -o owner=%s tank/b%zu", bad[i], i), 1,
			     "create -o owner=%s accepted: %s", bad[i], out);
		cr_assert(strstr(out, "owner is UID or UID:GID"), "create owner=%s: %s", bad[i],
			  out);
	}
	COF_OK("get -H owner tank/a");
	cr_assert(strstr(out, "owner\t-\t"), "%s", out);
	/* the largest ids are fine, and leading zeros go */
	COF_OK("set owner=4294967294:0007 tank/a");
	COF_OK("get -H owner tank/a");
	cr_assert(strstr(out, "owner\t4294967294:7\t"), "%s", out);
}

/* coffer_call() that owns @args: @return its status, the error text in @err */
static int call(struct coffer_conn *c, const char *cmd, json_t *args, char *err, size_t len)
{
	int ret = coffer_call(c, cmd, args, NULL, err, len);

	json_decref(args);
	return ret;
}

/* "create -V 0" made a 1 GiB volume: a size given must be one record at least. */
Test(hostile, zero_or_negative_sizes_are_refused_not_defaulted)
{
	struct coffer_conn *c = NULL;
	char err[512];

	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	cr_assert_eq(cof("create -V 0 tank/z"), 1, "created: %s", out);
	cr_assert(strstr(out, "volsize must be at least one record"), "%s", out);
	cr_assert_eq(cof("create -V 4K tank/z"), 1, "created: %s", out);
	cr_assert(strstr(out, "volsize must be at least one record"), "%s", out);
	cr_assert_eq(cof("create -o volsize=0 tank/z"), 1, "created: %s", out);
	cr_assert_eq(cof("create -V ' -5' tank/z"), 2, "%s", out);
	cr_assert_eq(cof("create -V +5M tank/z"), 2, "%s", out);
	cr_assert_eq(cof("create -V 9000000T tank/z"), 2, "%s", out);
	cr_assert_eq(cof("list tank/z"), 1, "a dataset was made: %s", out);
	/* the same over the socket, where no client checked first */
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	cr_assert_neq(call(c, "ds_create", json_pack("{s:s, s:I}", "name", "tank/z",
							    "volsize", (json_int_t)0),
				  err, sizeof(err)),
		      0);
	cr_assert(strstr(err, "volsize must be at least one record"), "%s", err);
	cr_assert_neq(call(c, "ds_create", json_pack("{s:s, s:I, s:I}", "name", "tank/z",
							    "volsize", (json_int_t)(1 << 20),
							    "recordsize", (json_int_t)-8192),
				  err, sizeof(err)),
		      0);
	cr_assert(strstr(err, "'recordsize' must be an integer"), "%s", err);
	cr_assert_neq(call(c, "pool_add", json_pack("{s:s, s:s, s:I}", "name", "tank",
							   "lun", "/nonexistent/l", "size",
							   (json_int_t)-1),
				  err, sizeof(err)),
		      0);
	cr_assert(strstr(err, "'size' must be an integer"), "%s", err);
	coffer_close(c);
	COF_OK("create -V 8K tank/z");
	COF_OK("get -H -p volsize tank/z");
	cr_assert(strstr(out, "volsize\t8192\t"), "%s", out);
}

/*
 * owner=UID:GID matched the peer's primary gid only: a process that has GID
 * as a supplementary group (as a login into that group gives it) was denied.
 */
Test(hostile, owner_group_matches_supplementary_groups_of_the_peer)
{
	const char *in_group = "setpriv --reuid=nobody --regid=nogroup --groups=4242";
	const char *outside = "setpriv --reuid=nobody --regid=nogroup --groups=4243";
	char o[8192];

	if (geteuid() != 0 || !getpwnam("nobody") || !getgrnam("nogroup") ||
	    system("command -v setpriv >/dev/null") != 0)
		cr_skip_test("needs root, nobody:nogroup and setpriv");
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 1M tank/g");
	COF_OK("set owner=0:4242 tank/g");
	cr_assert_eq(tdaemon_coffer(&td, in_group, NULL, o, sizeof(o),
				    "read -l 4096 tank/g > /dev/null"),
		     0, "a member of group 4242 was denied: %s", o);
	cr_assert_eq(tdaemon_coffer(&td, outside, NULL, o, sizeof(o), "read -l 4096 tank/g"), 1,
		     "%s", o);
	cr_assert(strstr(o, "permission denied"), "%s", o);
	/* a group is still no admin right */
	cr_assert_eq(tdaemon_coffer(&td, in_group, NULL, o, sizeof(o), "set owner=65534 tank/g"),
		     1, "%s", o);
}

/*
 * unload-key of a dataset in use used to succeed, and every request of the
 * running load then failed with "key is not loaded". Now it is EBUSY unless
 * -f, which closes the handles: their requests get ESTALE, not ENOKEY.
 */
Test(hostile, unload_key_of_an_open_dataset_is_ebusy_unless_forced)
{
	static uint8_t buf[8192];
	struct coffer_conn *c = NULL;
	int h;

	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o pbkdf2iters=100000 -o keylocation=file://%s tank/enc",
	       tdaemon_file(&td, "pass", "unload passphrase\n", 18));
	COF_OK("create -V 4M tank/enc/child");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/enc/child", NULL, NULL);
	cr_assert_geq(h, 0, "open: %s", proto_strerror(h));
	memset(buf, 0x5a, sizeof(buf));
	cr_assert_eq(coffer_write(c, h, 0, buf, sizeof(buf)), 0);

	cr_assert_eq(cof("unload-key tank/enc"), 1, "unloaded under an open handle: %s", out);
	cr_assert(strstr(out, "dataset is open (1 handles)"), "%s", out);
	COF_OK("get -H keystatus tank/enc/child");
	cr_assert(strstr(out, "available"), "%s", out);
	cr_assert_eq(coffer_read(c, h, 0, buf, sizeof(buf)), 0, "the refused unload broke I/O");

	COF_OK("unload-key -f tank/enc");
	COF_OK("get -H keystatus tank/enc/child");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	cr_assert_eq(coffer_read(c, h, 0, buf, sizeof(buf)), -ESTALE);
	cr_assert_eq(coffer_write(c, h, 0, buf, sizeof(buf)), -ESTALE);
	cr_assert_eq(coffer_ds_close(c, h), 0, "closing a revoked handle");
	cr_assert_eq(coffer_read(c, h, 0, buf, sizeof(buf)), -EBADF);
	coffer_close(c);
	cr_assert(strstr(tdaemon_log(&td), "revoked"), "%s", tdaemon_log(&td));
}

/* Read one line from @fd into @buf (at most @cap - 1 bytes); blocks until it comes. */
static void read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		cr_assert_eq(r, 1, "the child went away after '%.*s'", (int)n, buf);
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
}

/*
 * A non-admin's open handle blocked pool export and destroy, and admins had
 * no way to take it back. The child, as nobody, owns tank/a, opens it and
 * keeps 64 writes in flight without reading their replies; export -f must
 * still get the pool, and the child's requests must then fail with ESTALE.
 */
Test(hostile, force_closes_a_non_admins_handles_for_export_and_destroy)
{
	static uint8_t wbuf[64][8192];
	struct passwd *pw = getpwnam("nobody");
	int up[2], down[2], st;
	char line[256];
	pid_t pid;

	if (geteuid() != 0 || !pw)
		cr_skip_test("needs root and a 'nobody' user to drop to");
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M tank/a");
	COF_OK("set owner=%u tank/a", (unsigned)pw->pw_uid);
	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct coffer_completion comp[64];
		struct coffer_conn *c = NULL;
		FILE *f = fdopen(up[1], "w");
		int h, r, n = 0, ok = 0, stale = 0, other = 0;
		char go;

		/* only the parent's ends: its death must end our reads */
		close(up[0]);
		close(down[1]);
		setvbuf(f, NULL, _IONBF, 0);
		if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(3);
		if (coffer_connect(td.sock, &c) < 0)
			_exit(4);
		h = coffer_ds_open(c, "tank/a", NULL, NULL);
		fprintf(f, "open %d\n", h);
		if (h < 0)
			_exit(5);
		/* second handle: a destroy -f takes both */
		fprintf(f, "open2 %d\n", coffer_ds_open(c, "tank/a", NULL, NULL));
		if (read(down[0], &go, 1) != 1)
			_exit(6);
		for (int i = 0; i < 64; i++)
			coffer_submit(c, (uint32_t)i, COFFER_WRITE, h, (uint64_t)i * 8192, 8192,
				      wbuf[i]);
		coffer_flush_out(c);
		fprintf(f, "inflight\n");
		if (read(down[0], &go, 1) != 1)
			_exit(7);
		while (n < 64) {
			r = coffer_reap(c, comp, 64, 60000);
			if (r <= 0)
				break;
			for (int i = 0; i < r; i++) {
				ok += comp[i].status == 0;
				stale += comp[i].status == -ESTALE;
				other += comp[i].status != 0 && comp[i].status != -ESTALE;
			}
			n += r;
		}
		fprintf(f, "replies %d ok %d stale %d other %d\n", n, ok, stale, other);
		r = coffer_read(c, h, 0, wbuf[0], 8192);
		fprintf(f, "after %d %d\n", r, coffer_ds_close(c, h));
		coffer_close(c);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	read_line(up[0], line, sizeof(line));
	cr_assert_str_eq(line, "open 0", "nobody could not open its dataset: %s", line);
	read_line(up[0], line, sizeof(line));
	cr_assert_str_eq(line, "open2 1", "%s", line);

	/* without -f the non-admin's handles win, as before */
	cr_assert_eq(cof("pool export tank"), 1, "%s", out);
	cr_assert(strstr(out, "pool tank is busy: tank/a is open"), "%s", out);
	cr_assert_eq(cof("destroy tank/a"), 1, "%s", out);
	cr_assert(strstr(out, "dataset is open (2 handles)"), "%s", out);

	/* -f with the child's writes in flight and their replies unread */
	cr_assert_eq(write(down[1], "g", 1), 1);
	read_line(up[0], line, sizeof(line));
	cr_assert_str_eq(line, "inflight");
	COF_OK("pool export -f tank");
	cr_assert_eq(write(down[1], "g", 1), 1);
	read_line(up[0], line, sizeof(line));
	{
		int n, ok, stale, other;

		cr_assert_eq(sscanf(line, "replies %d ok %d stale %d other %d", &n, &ok, &stale,
				    &other),
			     4, "%s", line);
		cr_assert_eq(n, 64, "%s", line);
		cr_assert_eq(other, 0, "requests failed otherwise than ESTALE: %s", line);
	}
	read_line(up[0], line, sizeof(line));
	cr_assert_str_eq(line, "after -116 0", "I/O after the revoke, then close: %s", line);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	close(up[0]);
	close(down[1]);

	/* the pool came back whole; destroy -f of a dataset nobody holds now works too */
	COF_OK("pool import tank");
	COF_OK("destroy -f tank/a");
	cr_assert_eq(cof("list tank/a"), 1, "%s", out);
}
