// SPDX-License-Identifier: MIT
/*
 * E2E: key material in a live daemon's memory, looked for the way an
 * attacker with a core dump or ptrace access would: every readable mapping
 * of cofferd through /proc/PID/smaps and /proc/PID/mem (tests/memscan.c).
 * Datasets are created and keys loaded with the real coffer CLI, with a raw
 * key file (keyformat=raw, keylocation=file://) and with a passphrase on
 * stdin; data is written and read back. After the replies have arrived:
 *  - the passphrase and the keys' text (hex, as sent) are nowhere;
 *  - the raw key bytes are only in locked, MADV_DONTDUMP pages;
 *  - an encrypted dataset's plaintext is only in the daemon's pool of record
 *    buffers (locked, MADV_DONTDUMP) while its key is loaded, and nowhere
 *    once `unload-key` has replied.
 * The data keys are HKDF'ed from a random master key the test cannot know;
 * tests/unit/test_crypt scans for those and their round keys.
 *
 * Non-dumpable: cofferd calls prctl(PR_SET_DUMPABLE, 0) unless
 * allow_core_dumps = yes. Only the process itself can read that flag, and
 * as root (CI) no outside check tells it apart (/proc/PID files belong to
 * root either way, and root may read /proc/PID/mem regardless), so `coffer
 * stats` reports prctl(PR_GET_DUMPABLE) of the running daemon; when the
 * test runs as another user it also checks what the kernel shows: a
 * non-dumpable process's /proc/PID/mem belongs to root.
 *
 * Reading /proc/PID/mem of a non-dumpable process takes CAP_SYS_PTRACE, so
 * a test that is not root scans a daemon started with allow_core_dumps =
 * yes (what memory holds does not depend on it); where ptrace access is
 * refused even so (Yama, a sandbox) the scans skip with the reason.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"
#include "memscan.h"

static struct tdaemon td;
static char out[65536];

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(memscan, .fini = teardown, .timeout = 240);

#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, in, __VA_ARGS__)

static void start(const char *extra)
{
	tdaemon_init(&td, extra);
	tdaemon_start_ok(&td);
}

static json_t *stats_json(void)
{
	return tdaemon_coffer_json(&td, "--json-int stats");
}

static long long process_stat(const char *name)
{
	json_t *j = stats_json();
	json_t *v = json_object_get(json_object_get(j, "process"), name);
	long long n;

	cr_assert(json_is_integer(v), "stats has no process.%s: %s", name, json_dumps(j, 0));
	n = (long long)json_integer_value(v);
	json_decref(j);
	return n;
}

static void hex(const uint8_t *p, size_t n, char *s)
{
	for (size_t i = 0; i < n; i++)
		sprintf(s + 2 * i, "%02x", p[i]);
}

/* @n bytes of rand(), seeded by the caller: secrets and data the scans look for */
static void rand_fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rand() >> 5);
}

static int mlock_refused; /* the daemon says it could not lock key pages */

/* Leave out the key pages: locked (where the limit allows) and kept out of core dumps. */
static int skip_key_pages(const struct memscan_region *r, void *ctx)
{
	(void)ctx;
	return r->dontdump && (r->locked || mlock_refused);
}

/*
 * Leave out the pages of cofferd's pool of record buffers (daemon/plainbuf.c),
 * where an encrypted dataset's plaintext may stay while its key is loaded:
 * MADV_DONTDUMP, and locked when the daemon runs as root.
 */
static int skip_buffer_pages(const struct memscan_region *r, void *ctx)
{
	(void)ctx;
	return r->dontdump && (r->locked || mlock_refused || geteuid() != 0);
}

static void scan(struct memscan_needle *nd, size_t n, memscan_skip_fn skip, const char *when)
{
	struct memscan_hit hits[8];
	int fd = memscan_open(td.pid), nh;

	if (fd == -EACCES || fd == -EPERM)
		tdaemon_skip(&td, "ptrace access to cofferd (/proc/%d/mem) refused: %s; "
				  "run as root or allow ptrace of child processes",
			     (int)td.pid, strerror(-fd));
	cr_assert_geq(fd, 0, "open /proc/%d/mem: %s", (int)td.pid, strerror(-fd));
	nh = memscan(td.pid, fd, nd, n, skip, NULL, hits, 8);
	close(fd);
	cr_assert_geq(nh, 0, "scan of cofferd: %s", strerror(-nh));
	for (int i = 0; i < nh && i < 8; i++)
		cr_log_error("%s: %s", when, memscan_hit_str(&hits[i]));
	cr_assert_eq(nh, 0, "%s: %d copies in cofferd's memory, first: %s", when, nh,
		     memscan_hit_str(&hits[0]));
}

/* Read @len bytes of @ds with the CLI into @path and check they are @want. */
static void read_back(const char *ds, const char *path, uint8_t *back, const uint8_t *want,
		      size_t len)
{
	FILE *f;

	COF_OK(NULL, "read %s -l %zu > %s", ds, len, path);
	f = fopen(path, "rb");
	cr_assert_not_null(f);
	cr_assert_eq(fread(back, 1, len, f), len);
	fclose(f);
	cr_assert_arr_eq(back, want, len, "data read back from %s differs", ds);
}

Test(memscan, no_passphrase_or_key_text_left_in_the_daemon)
{
	struct vault {
		uint8_t raw[32];
		char rawhex[65];
		char pass[64];
		char passnl[65];
		char passhex[129];
		uint8_t data[64 << 10], back[64 << 10];
	} *v = memscan_vault(sizeof(struct vault));
	struct memscan_needle nowhere[4], unlocked[1];
	char kf[PATH_MAX], pf[PATH_MAX], df[PATH_MAX], rf[PATH_MAX];

	/* a daemon that is not dumpable can only be read with CAP_SYS_PTRACE */
	start(geteuid() == 0 ? NULL : "allow_core_dumps = yes");
	srand((unsigned)getpid());
	rand_fill(v->raw, sizeof(v->raw));
	hex(v->raw, sizeof(v->raw), v->rawhex);
	snprintf(v->pass, sizeof(v->pass), "memscan passphrase %08x%08x", (unsigned)rand(),
		 (unsigned)rand());
	snprintf(v->passnl, sizeof(v->passnl), "%s\n", v->pass);
	hex((const uint8_t *)v->pass, strlen(v->pass), v->passhex);
	for (size_t i = 0; i < sizeof(v->data); i++)
		v->data[i] = (uint8_t)(i * 13 + (i >> 9));
	snprintf(kf, sizeof(kf), "%s", tdaemon_file(&td, "raw.key", v->raw, sizeof(v->raw)));
	snprintf(pf, sizeof(pf), "%s", tdaemon_file(&td, "pass", v->passnl, strlen(v->passnl)));
	snprintf(df, sizeof(df), "%s", tdaemon_file(&td, "data", v->data, sizeof(v->data)));
	snprintf(rf, sizeof(rf), "%s/back", td.dir);

	nowhere[0] = (struct memscan_needle){ "the passphrase", v->pass, strlen(v->pass) };
	nowhere[1] = (struct memscan_needle){ "the passphrase in hex", v->passhex,
					      strlen(v->passhex) };
	nowhere[2] = (struct memscan_needle){ "the raw key in hex", v->rawhex,
					      strlen(v->rawhex) };
	/* 16 bytes of hex: one half of the text is as good as the whole */
	nowhere[3] = (struct memscan_needle){ "half the passphrase in hex", v->passhex + 16, 16 };
	unlocked[0] = (struct memscan_needle){ "the raw key", v->raw, sizeof(v->raw) };

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 4M -o encryption=aes-256-gcm -o keyformat=raw "
		     "-o keylocation=file://%s tank/raw",
	       kf);
	COF_OK(pf, "create -V 4M -o encryption=aes-192-ccm -o keyformat=passphrase "
		   "-o pbkdf2iters=100000 tank/pp");
	scan(nowhere, 4, NULL, "after create");
	mlock_refused = process_stat("key_pages_unlocked") > 0;
	if (mlock_refused)
		cr_log_warn("cofferd could not lock key pages: only MADV_DONTDUMP is checked");
	scan(unlocked, 1, skip_key_pages, "after create");

	COF_OK(df, "write tank/raw");
	COF_OK(df, "write tank/pp");
	COF_OK(NULL, "flush tank/pp");
	COF_OK(NULL, "unload-key tank/pp");
	COF_OK(NULL, "unload-key tank/raw");
	COF_OK(pf, "load-key tank/pp");
	COF_OK(NULL, "load-key tank/raw");
	read_back("tank/pp", rf, v->back, v->data, sizeof(v->data));
	COF_OK(NULL, "read tank/raw -l 64K > /dev/null");
	scan(nowhere, 4, NULL, "after load-key, write and read");
	scan(unlocked, 1, skip_key_pages, "after load-key, write and read");
}

Test(memscan, cofferd_is_not_dumpable_by_default)
{
	char path[64];
	struct stat st;

	start(NULL);
	cr_assert_eq(process_stat("dumpable"), 0, "cofferd can dump core:\n%s", tdaemon_log(&td));
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)td.pid);
	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	/* as root the owner is root anyway; as anyone else it tells the flag */
	if (geteuid() != 0)
		cr_assert_eq(st.st_uid, 0, "%s belongs to uid %u: cofferd is dumpable", path,
			     (unsigned)st.st_uid);
}

Test(memscan, allow_core_dumps_keeps_the_daemon_dumpable)
{
	char path[64];
	struct stat st;

	start("allow_core_dumps = yes");
	cr_assert_eq(process_stat("dumpable"), 1);
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)td.pid);
	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(st.st_uid, geteuid(), "%s belongs to uid %u", path, (unsigned)st.st_uid);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

Test(memscan, refused_mlock_is_counted_and_warned_about_once)
{
	uint8_t raw[32];
	char kf[PATH_MAX];
	struct rlimit rl = { 0, 0 };

	/* without CAP_IPC_LOCK and with no lockable bytes, every mlock fails */
	if (geteuid() == 0 && prctl(PR_CAPBSET_DROP, 14 /* CAP_IPC_LOCK */, 0, 0, 0) < 0)
		cr_skip_test("cannot drop CAP_IPC_LOCK: %s", strerror(errno));
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0, "%s", strerror(errno));
	start(NULL);
	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 29 + 3);
	snprintf(kf, sizeof(kf), "%s", tdaemon_file(&td, "raw.key", raw, sizeof(raw)));
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 4M -o encryption=aes-256-ccm -o keyformat=raw "
		     "-o keylocation=file://%s tank/a",
	       kf);
	COF_OK(NULL, "create -V 4M -o encryption=aes-128-gcm -o keyformat=raw "
		     "-o keylocation=file://%s tank/b",
	       kf);
	COF_OK(NULL, "unload-key tank/a");
	COF_OK(NULL, "load-key tank/a");
	cr_assert_gt(process_stat("key_pages_unlocked"), 0);
	/* the warning is logged before the reply that follows the failure */
	cr_assert_eq(count(tdaemon_log(&td), "could not be locked"), 1,
		     "want one warning:\n%s", tdaemon_log(&td));
}

/*
 * Plaintext of an encrypted dataset, once a write or a read is answered, is
 * nowhere in the daemon: not in the connection's read buffer, not in the
 * call's copy of a WRITE, not in the buffer a READ was answered from, not
 * in the staging of a partial write or of a compressed record. Clear
 * datasets' data is on their LUNs anyway and is not wiped.
 */
Test(memscan, no_plaintext_of_an_encrypted_dataset_left_after_writes_and_reads)
{
	enum { REC = 8192, NREC = 8 };
	struct vault {
		uint8_t raw[32];
		uint8_t data[NREC * REC], zdata[NREC * REC], part[3000], back[NREC * REC];
	} *v = memscan_vault(sizeof(struct vault));
	struct memscan_needle nd[NREC + 2];
	char kf[PATH_MAX], df[PATH_MAX], zf[PATH_MAX], pf[PATH_MAX], rf[PATH_MAX];

	start(geteuid() == 0 ? NULL : "allow_core_dumps = yes");
	srand((unsigned)getpid() * 7u);
	rand_fill(v->raw, sizeof(v->raw));
	rand_fill(v->data, sizeof(v->data));
	/* compressible: one random KiB over and over */
	rand_fill(v->zdata, 1024);
	for (size_t i = 1024; i < sizeof(v->zdata); i++)
		v->zdata[i] = v->zdata[i % 1024];
	rand_fill(v->part, sizeof(v->part));
	snprintf(kf, sizeof(kf), "%s", tdaemon_file(&td, "raw.key", v->raw, sizeof(v->raw)));
	snprintf(df, sizeof(df), "%s", tdaemon_file(&td, "data", v->data, sizeof(v->data)));
	snprintf(zf, sizeof(zf), "%s", tdaemon_file(&td, "zdata", v->zdata, sizeof(v->zdata)));
	snprintf(pf, sizeof(pf), "%s", tdaemon_file(&td, "part", v->part, sizeof(v->part)));
	snprintf(rf, sizeof(rf), "%s/back", td.dir);
	for (int i = 0; i < NREC; i++)
		nd[i] = (struct memscan_needle){ "a record written and read", v->data + i * REC + 4000,
						 32 };
	nd[NREC] = (struct memscan_needle){ "a compressed record", v->zdata + 100, 32 };
	nd[NREC + 1] = (struct memscan_needle){ "a partial write", v->part + 1000, 32 };

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 4M -o encryption=aes-256-ccm -o keyformat=raw "
		     "-o keylocation=file://%s tank/a",
	       kf);
	COF_OK(NULL, "create -V 4M -o encryption=aes-128-gcm -o compression=zstd "
		     "-o keyformat=raw -o keylocation=file://%s tank/z",
	       kf);
	COF_OK(df, "write tank/a");
	COF_OK(zf, "write tank/z");
	COF_OK(pf, "write tank/z -o 70000");
	COF_OK(NULL, "flush tank/a");
	COF_OK(NULL, "flush tank/z");
	scan(nd, NREC + 2, skip_buffer_pages, "after writes");
	read_back("tank/a", rf, v->back, v->data, sizeof(v->data));
	COF_OK(NULL, "read tank/z -l 128K > /dev/null");
	scan(nd, NREC + 2, skip_buffer_pages, "after reads");
	/* the buffers kept for reuse are wiped with the keys, before the reply */
	COF_OK(NULL, "unload-key tank/a");
	COF_OK(NULL, "unload-key tank/z");
	scan(nd, NREC + 2, NULL, "after unload-key");
	unlink(rf);
}

/* The same through the NBD front end (nbdcopy in and out): its read buffer
 * and the replies it builds of a READ's data are wiped too. */
Test(memscan, no_plaintext_left_after_nbd_writes_and_reads)
{
	enum { LEN = 256 << 10 };
	struct vault {
		uint8_t raw[32];
		uint8_t data[LEN];
	} *v = memscan_vault(sizeof(struct vault));
	struct memscan_needle nd[8];
	char kf[PATH_MAX], df[PATH_MAX], cmd[3 * PATH_MAX + 200];

	if (system("command -v nbdcopy >/dev/null 2>&1") != 0)
		cr_skip_test("nbdcopy is missing (Debian package libnbd-bin)");
	start(geteuid() == 0 ? NULL : "allow_core_dumps = yes");
	srand((unsigned)getpid() * 11u);
	rand_fill(v->raw, sizeof(v->raw));
	rand_fill(v->data, sizeof(v->data));
	for (int i = 0; i < 8; i++)
		nd[i] = (struct memscan_needle){ "data written and read over NBD",
						 v->data + i * (LEN / 8) + 777, 32 };
	snprintf(kf, sizeof(kf), "%s", tdaemon_file(&td, "raw.key", v->raw, sizeof(v->raw)));
	snprintf(df, sizeof(df), "%s", tdaemon_file(&td, "data", v->data, sizeof(v->data)));
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -V 256K -o encryption=aes-256-ccm -o keyformat=raw "
		     "-o keylocation=file://%s tank/a",
	       kf);
	snprintf(cmd, sizeof(cmd), "nbdcopy '%s' 'nbd+unix:///tank/a?socket=%s/nbd.sock'", df,
		 td.dir);
	cr_assert_eq(system(cmd), 0, "%s failed:\n%s", cmd, tdaemon_log(&td));
	COF_OK(NULL, "flush tank/a");
	scan(nd, 8, skip_buffer_pages, "after NBD writes");
	snprintf(cmd, sizeof(cmd),
		 "nbdcopy 'nbd+unix:///tank/a?socket=%s/nbd.sock' - | cmp -s - '%s'", td.dir, df);
	cr_assert_eq(system(cmd), 0, "NBD read back differs:\n%s", tdaemon_log(&td));
	scan(nd, 8, skip_buffer_pages, "after NBD reads");
	COF_OK(NULL, "unload-key tank/a");
	scan(nd, 8, NULL, "after unload-key");
}
