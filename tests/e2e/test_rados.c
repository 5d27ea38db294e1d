// SPDX-License-Identifier: MIT
/*
 * E2E: pools on Ceph RADOS LUNs (rados:POOL/PREFIX), against a real
 * single-node cluster that tests/e2e/ceph_cluster.sh brings up once for the
 * whole program ($COFFER_CEPH_CLUSTER; one mon, one mgr, one memstore OSD).
 * A pool is created on RADOS LUNs, clear and encrypted datasets written,
 * flushed and read back, and imported again by a daemon whose state
 * directory is empty, from the cluster alone (the Ceph pool's index of
 * LUNs, or its objects where it has no index); a LUN grows online and
 * keeps its size; destroy removes the LUNs' objects. A second daemon (another host
 * id) is refused while the first holds the pool's lock, takes the pool
 * over with -f only once a stalled first daemon's lock expired, blocklisting
 * it in the cluster, and the first, woken, lands nothing over it, not even
 * the writes it had queued in librados before it stalled. With the OSD of a cluster of its
 * own stopped, reads and writes fail as I/O errors and never return other
 * bytes.
 *
 * When the cluster cannot start here (Ceph not installed, not root, a
 * daemon that will not come up), or coffer was built --without-rados, the
 * program says why and exits 77, which make check reports as SKIP.
 */

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"

#define CEPH_POOL "coffer"
#define LOCK_S 5 /* ceph_lock_timeout of these daemons, in seconds: short, for the test */

static char out[65536];

/* `ceph_cluster.sh start`: the ceph.conf path into @conf, or the reason. */
static int cluster_start(char *conf, size_t cap, char *why, size_t whycap)
{
	const char *script = getenv("COFFER_CEPH_CLUSTER");
	char cmd[4200], line[4200];
	FILE *p;
	int st;

	conf[0] = why[0] = '\0';
	if (!script) {
		snprintf(why, whycap, "COFFER_CEPH_CLUSTER not set (run through make check)");
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "'%s' start %s 2>&1", script, CEPH_POOL);
	p = popen(cmd, "r");
	if (!p) {
		snprintf(why, whycap, "popen: %s", strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '/')
			snprintf(conf, cap, "%s", line);
		else if (line[0])
			snprintf(why, whycap, "%s", line);
	}
	st = pclose(p);
	if (st != 0 || !conf[0]) {
		if (!why[0])
			snprintf(why, whycap, "%s exited %d", script, st);
		return -1;
	}
	return 0;
}

static void cluster_cmd(const char *verb, const char *conf)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "'%s' %s '%s' >/dev/null 2>&1", getenv("COFFER_CEPH_CLUSTER"),
		 verb, conf);
	if (system(cmd) != 0)
		cr_log_warn("%s %s failed", verb, conf);
}

static const char *shared_conf(void)
{
	const char *c = getenv("COFFER_TEST_CEPH_CONF");

	cr_assert(c && c[0], "no cluster: main() should have skipped the program");
	return c;
}

/* A LUN prefix no other test or run uses: the RADOS pool is shared. */
static const char *prefix(const char *what)
{
	static char buf[8][128];
	static int n;
	char *p = buf[n++ % 8];

	snprintf(p, 128, "%s-%d-%ld", what, (int)getpid(), (long)time(NULL));
	return p;
}

/* A daemon on @conf's cluster as host @hostid (NULL: this host's id),
 * whose locks last @lock_s seconds unrenewed. */
static void daemon_lock_on(struct tdaemon *d, const char *conf, const char *hostid, int lock_s)
{
	if (hostid)
		cr_assert_eq(setenv("COFFER_HOSTID", hostid, 1), 0);
	else
		unsetenv("COFFER_HOSTID");
	tdaemon_write_conf(d, NULL, "ceph_conf = %s\nceph_lock_timeout = %d\ntxg_timeout = 1\n",
			   conf, lock_s);
	tdaemon_start_ok(d);
	unsetenv("COFFER_HOSTID");
}

static void daemon_on(struct tdaemon *d, const char *conf, const char *hostid)
{
	daemon_lock_on(d, conf, hostid, LOCK_S);
}

#define cof(d, ...) tdaemon_cofferf((d), NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(d, in, ...) TDAEMON_COF_OK((d), out, (in), __VA_ARGS__)

/* Read @len bytes of @ds at 4096 through @d and compare them with @data. */
static void read_back(struct tdaemon *d, const char *ds, const char *data, size_t len)
{
	char cmd[8400];

	snprintf(cmd, sizeof(cmd), "read %s -o 4096 -l %zu > '%s/back'", ds, len, d->dir);
	cr_assert_eq(tdaemon_coffer(d, NULL, NULL, NULL, 0, cmd), 0, "read %s (to match %s) failed:\n%s",
		     ds, data, tdaemon_log(d));
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", data, d->dir);
	cr_assert_eq(system(cmd), 0, "%s read back differs", ds);
}

/* Read @len bytes of @ds at 4096 through @d: they are @one's or @other's. */
static void read_back_either(struct tdaemon *d, const char *ds, const char *one,
			     const char *other, size_t len)
{
	char cmd[32768];

	snprintf(cmd, sizeof(cmd), "read %s -o 4096 -l %zu > '%s/back'", ds, len, d->dir);
	cr_assert_eq(tdaemon_coffer(d, NULL, NULL, NULL, 0, cmd), 0, "read %s failed:\n%s", ds,
		     tdaemon_log(d));
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back' || cmp -s '%s' '%s/back'", one, d->dir,
		 other, d->dir);
	cr_assert_eq(system(cmd), 0, "%s reads back as neither %s nor %s", ds, one, other);
}

/* Into a file beside @base named @base.over (its path into @dst): @base's
 * bytes with @top's laid over them from byte @at on (into @dst). */
static void overlay(char *dst, size_t cap, const char *base, const char *top, size_t at)
{
	char cmd[32768];

	snprintf(dst, cap, "%s.over", base);
	snprintf(cmd, sizeof(cmd),
		 "cp '%s' '%s' && dd if='%s' of='%s' bs=%zu seek=1 conv=notrunc status=none && "
		 "truncate -r '%s' '%s'",
		 base, dst, top, dst, at, base, dst);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* Does `rados -c CONF -p coffer ARGS` print a line with @what in it? Its
 * output into out. */
static int rados_says(const char *conf, const char *args, const char *what)
{
	char cmd[8400];
	FILE *p;
	size_t n = 0;
	int st;

	snprintf(cmd, sizeof(cmd), "rados -c '%s' -p " CEPH_POOL " %s 2>&1", conf, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while (n + 1 < sizeof(out) && fgets(out + n, (int)(sizeof(out) - n), p))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(p);
	cr_assert_eq(st, 0, "rados %s: %s", args, out);
	return strstr(out, what) != NULL;
}

/* Pool @pool's data space, as @d's status gives it. */
static json_int_t pool_size(struct tdaemon *d, const char *pool)
{
	json_t *j;
	json_int_t n;

	COF_OK(d, NULL, "--json-int pool status %s", pool);
	j = json_loads(out, 0, NULL);
	cr_assert_not_null(j, "%s", out);
	n = json_integer_value(json_object_get(json_object_get(json_object_get(j, "pools"), pool),
					       "size"));
	json_decref(j);
	return n;
}

TestSuite(rados, .timeout = 240);

Test(rados, a_pool_on_rados_luns_serves_and_imports_from_the_cluster_alone)
{
	static const char pass[] = "correct horse battery\n";
	const char *conf = shared_conf(), *l0 = prefix("a0"), *l1 = prefix("a1");
	char data[4200], keyfile[4200], cmd[8400];
	json_int_t size, grown;
	struct tdaemon d;

	tdaemon_init(&d, NULL);
	daemon_on(&d, conf, NULL);
	COF_OK(&d, NULL, "pool create -s 64M ra rados:" CEPH_POOL "/%s rados:" CEPH_POOL "/%s", l0,
	       l1);
	COF_OK(&d, NULL, "pool status ra");
	cr_assert(strstr(out, "ONLINE") && strstr(out, l0) && strstr(out, l1), "%s", out);
	COF_OK(&d, NULL, "create -V 8M ra/v");
	tdaemon_random_file(&d, "data", 300000, data, sizeof(data));
	COF_OK(&d, data, "write ra/v -o 4096");
	COF_OK(&d, NULL, "flush ra/v");
	read_back(&d, "ra/v", data, 300000);
	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&d, "pass", pass, sizeof(pass) - 1));
	COF_OK(&d, NULL,
	       "create -V 1M -o encryption=aes-256-gcm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 ra/e",
	       keyfile);
	COF_OK(&d, data, "write ra/e -o 4096");
	COF_OK(&d, NULL, "flush ra/e");
	read_back(&d, "ra/e", data, 300000);
	/* the LUNs are objects in the cluster: the label, the log, the data */
	snprintf(cmd, sizeof(cmd), "rados -c '%s' -p " CEPH_POOL " stat %s.lun >/dev/null 2>&1 && "
		 "rados -c '%s' -p " CEPH_POOL " stat %s.0000000000000000 >/dev/null 2>&1",
		 conf, l0, conf, l1);
	cr_assert_eq(system(cmd), 0, "the LUN objects are not in the cluster");

	/* a RADOS LUN grows while the pool serves: its size object is rewritten */
	size = pool_size(&d, "ra");
	COF_OK(&d, NULL, "pool online -e -s 96M ra rados:" CEPH_POOL "/%s", l0);
	grown = pool_size(&d, "ra");
	cr_assert_geq(grown, size + (31 << 20), "%lld -> %lld", (long long)size, (long long)grown);

	/* the Ceph pool's index of LUNs names both */
	cr_assert(rados_says(conf, "listomapkeys coffer.luns", l0) &&
		  rados_says(conf, "listomapkeys coffer.luns", l1), "%s", out);

	/* a daemon with nothing but the cluster: state directory gone */
	tdaemon_stop_ok(&d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d.state);
	cr_assert_eq(system(cmd), 0);
	daemon_on(&d, conf, NULL);
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL);
	cr_assert(strstr(out, "pool: ra") && strstr(out, "2 of 2 found"), "%s\n%s", out, tdaemon_log(&d));
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL " ra");
	read_back(&d, "ra/v", data, 300000);
	COF_OK(&d, NULL, "load-key ra/e");
	read_back(&d, "ra/e", data, 300000);
	cr_assert_eq(pool_size(&d, "ra"), grown);
	COF_OK(&d, NULL, "pool check ra");
	COF_OK(&d, NULL, "pool status ra");
	cr_assert(strstr(out, "rebuilt"), "%s", out);
	/* export and import again: the lock goes with the export */
	COF_OK(&d, NULL, "pool export ra");
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL " ra");
	read_back(&d, "ra/v", data, 300000);
	/* destroy removes the LUNs' objects, saying how far, and their index keys */
	COF_OK(&d, NULL, "pool destroy -f ra");
	cr_assert(!rados_says(conf, "ls", l0) && !rados_says(conf, "ls", l1),
		  "objects left after destroy: %s", out);
	cr_assert(!rados_says(conf, "listomapkeys coffer.luns", l0), "%s", out);
	cr_assert(strstr(tdaemon_log(&d), "lun.remove: pool=ra"), "%s", tdaemon_log(&d));
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL);
	cr_assert(!strstr(out, "pool: ra"), "%s", out);
	tdaemon_teardown(&d);
}

/*
 * A create that cannot take every LUN fails saying which and why, makes
 * no pool, and leaves the LUNs it took blank, as it leaves LUN files: a
 * create that then names them alone takes them. A path that names no
 * prefix is refused.
 */
Test(rados, a_refused_create_names_the_lun_and_leaves_its_luns_blank)
{
	const char *conf = shared_conf(), *l0 = prefix("d0");
	struct tdaemon d;

	tdaemon_init(&d, NULL);
	daemon_on(&d, conf, NULL);
	cr_assert_neq(cof(&d, "pool create -s 64M rd rados:" CEPH_POOL "/%s rados:nosuchpool/x", l0),
		      0, "%s", out);
	cr_assert(strstr(out, "rados:nosuchpool/x") && strstr(out, "no pool 'nosuchpool'"), "%s",
		  out);
	cr_assert_neq(cof(&d, "pool create -s 64M rd rados:" CEPH_POOL), 0, "%s", out);
	cr_assert(strstr(out, "rados:POOL/PREFIX"), "%s", out);
	cr_assert_neq(cof(&d, "pool create rd rados:" CEPH_POOL "/%s-none", l0), 0, "%s", out);
	cr_assert(strstr(out, "no such LUN"), "%s", out);
	COF_OK(&d, NULL, "pool list -H -o name");
	cr_assert(!strstr(out, "rd"), "%s", out);
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL);
	cr_assert(!strstr(out, l0), "a blank LUN listed: %s", out);
	COF_OK(&d, NULL, "pool create -s 64M rd rados:" CEPH_POOL "/%s", l0);
	COF_OK(&d, NULL, "pool destroy -f rd");
	tdaemon_teardown(&d);
}

/* Has @d's import of @pool failed with @what in its message (or succeeded)? */
static int import_says(struct tdaemon *d, const char *flags, const char *pool, const char *what)
{
	int st = cof(d, "pool import %s -d rados:" CEPH_POOL " %s", flags, pool);

	return st == 0 ? -1 : strstr(out, what) != NULL;
}

/* `ceph -c CONF ARGS`, its output into @o; @return its exit status. */
static int ceph(const char *conf, char *o, size_t cap, const char *args)
{
	char cmd[8400];
	FILE *p;
	size_t n = 0;

	snprintf(cmd, sizeof(cmd), "ceph -c '%s' %s 2>&1", conf, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while (n + 1 < cap && fgets(o + n, (int)(cap - n), p))
		n += strlen(o + n);
	o[n] = '\0';
	return pclose(p);
}

/* Writes of pool @pool that @d has issued and not seen complete. */
static uint64_t writes_in_flight(struct tdaemon *d, const char *pool)
{
	json_t *reply = NULL, *args = json_pack("{s:s}", "name", pool), *luns;
	struct coffer_conn *c;
	char err[256];
	uint64_t n = 0;

	cr_assert_eq(coffer_connect(d->sock, &c), 0);
	cr_assert_eq(coffer_call(c, "pool_iostat", args, &reply, err, sizeof(err)), 0, "%s", err);
	json_decref(args);
	coffer_close(c);
	luns = json_object_get(json_array_get(json_object_get(reply, "pools"), 0), "luns");
	for (size_t i = 0; i < json_array_size(luns); i++)
		n += (uint64_t)json_integer_value(json_array_get(
			json_object_get(json_object_get(json_array_get(luns, i), "io"), "inflight"), 1));
	json_decref(reply);
	return n;
}

/* Run `coffer ... write @ds -o 8192` of @file through @d in a child: its pid. */
static pid_t write_in_background(struct tdaemon *d, const char *file, const char *ds)
{
	pid_t pid = fork();

	cr_assert_neq(pid, -1);
	if (pid == 0) {
		char o[4096];

		_exit(tdaemon_cofferf(d, file, o, sizeof(o), "write %s -o 8192", ds) == 0 ? 0 : 1);
	}
	return pid;
}

/* The cluster takes writes again, whatever became of the test that paused it. */
static void unpause(void)
{
	char o[4096];

	ceph(getenv("COFFER_TEST_CEPH_CONF"), o, sizeof(o), "osd unpause");
}

/*
 * Host A has pool rb. Host B's import is refused, -f or not, for as long as
 * A renews its lock (several lock durations). Then A's writes queue in
 * librados (the cluster pauses writes: `ceph osd pause`) and A stalls
 * (SIGSTOP) with them queued; the cluster takes writes again. Once A's lock
 * expired B still needs -f (the labels say A has the pool); B's import
 * blocklists A's client address before it uses the pool, takes it over and
 * writes. A, woken, sends its queued writes: the OSDs refuse them all, so
 * what B wrote reads back whole (and imports again whole), A's address is
 * in `ceph osd blocklist ls`, and A's pool status says it was fenced and
 * by which host. A's lock lasts LOCK_A_S: its renewal waits behind the
 * pause too, and A must not fence itself before its writes are queued.
 */
#define LOCK_A_S 12
Test(rados, a_stalled_host_is_fenced_and_its_queued_writes_never_land, .fini = unpause)
{
	const char *conf = shared_conf(), *l0 = prefix("b0");
	char data[4200], data2[4200], data3[4200], data13[4300], addr[256], o[65536];
	struct tdaemon a, b;
	const char *at;
	double end;
	pid_t w;
	int st, reaped, held;

	tdaemon_init(&a, NULL);
	tdaemon_init(&b, NULL);
	daemon_lock_on(&a, conf, "a0000001", LOCK_A_S);
	daemon_on(&b, conf, "b0000002");
	COF_OK(&a, NULL, "pool create -s 32M rb rados:" CEPH_POOL "/%s", l0);
	COF_OK(&a, NULL, "create -V 4M rb/v");
	tdaemon_random_file(&a, "data", 200000, data, sizeof(data));
	tdaemon_random_file(&b, "data2", 200000, data2, sizeof(data2));
	/* whole records: a partial one would first read the old, and reads
	 * wait behind the pause as writes do */
	tdaemon_random_file(&a, "data3", 24 * 8192, data3, sizeof(data3));
	COF_OK(&a, data, "write rb/v -o 4096");
	COF_OK(&a, NULL, "flush rb/v");

	cr_assert_eq(import_says(&b, "", "rb", "locked by a cofferd"), 1, "%s", out);
	/* renewed, not just fresh: still held after two of its durations */
	end = tdaemon_deadline(2 * LOCK_A_S);
	while (tdaemon_poll(end))
		;
	cr_assert_eq(import_says(&b, "-f", "rb", "locked by a cofferd"), 1, "%s", out);

	/* A's writes queue in librados, and A stalls with them queued: a write
	 * still in flight a second after it was seen is held by the pause. One
	 * that A sent before its librados had the map that pauses goes
	 * through, and is sent again (the same bytes, so A's last commit
	 * holds either data or data overlaid with data3) */
	cr_assert_eq(ceph(conf, o, sizeof(o), "osd pause"), 0, "%s", o);
	w = write_in_background(&a, data3, "rb/v");
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	for (held = 0; !held && tdaemon_poll(end);) {
		if (waitpid(w, &st, WNOHANG) == w)
			w = write_in_background(&a, data3, "rb/v");
		if (writes_in_flight(&a, "rb")) {
			double hold = tdaemon_deadline(1);

			while (tdaemon_poll(hold))
				;
			held = writes_in_flight(&a, "rb") != 0;
		}
	}
	cr_assert(held, "no write of A stayed queued:\n%s", tdaemon_log(&a));
	cr_assert_eq(kill(a.pid, SIGSTOP), 0);
	cr_assert_eq(ceph(conf, o, sizeof(o), "osd unpause"), 0, "%s", o);

	/* its lock expires, and B then needs -f */
	end = tdaemon_deadline(TDAEMON_WAIT_S + 3 * LOCK_A_S);
	while (import_says(&b, "", "rb", "locked by a cofferd") == 1 && tdaemon_poll(end))
		;
	cr_assert_eq(import_says(&b, "", "rb", "use -f"), 1, "%s", out);
	COF_OK(&b, NULL, "pool import -f -d rados:" CEPH_POOL " rb");
	overlay(data13, sizeof(data13), data, data3, 4096);
	read_back_either(&b, "rb/v", data, data13, 200000);
	COF_OK(&b, data2, "write rb/v -o 4096");
	COF_OK(&b, NULL, "flush rb/v");

	/* A wakes and sends what it had queued: none of it lands */
	cr_assert_eq(kill(a.pid, SIGCONT), 0);
	end = tdaemon_deadline(TDAEMON_WAIT_S + 2 * LOCK_S);
	while (!(reaped = waitpid(w, &st, WNOHANG) == w) && tdaemon_poll(end))
		;
	read_back(&b, "rb/v", data2, 200000);
	/* B says whom it blocklisted, and the cluster lists that address */
	at = strstr(tdaemon_log(&b), "blocklisted=");
	cr_assert(at && strstr(at, "a0000001"), "B blocklisted nobody:\n%s", tdaemon_log(&b));
	cr_assert_eq(sscanf(at, "blocklisted=%255s", addr), 1);
	cr_assert_eq(ceph(conf, o, sizeof(o), "osd blocklist ls"), 0, "%s", o);
	cr_assert(strstr(o, addr), "%s is not blocklisted: %s", addr, o);
	end = tdaemon_deadline(TDAEMON_WAIT_S + 2 * LOCK_S);
	while (!(cof(&a, "pool status rb") == 0 && strstr(out, "fenced")) && tdaemon_poll(end))
		;
	cr_assert(strstr(out, "fenced") && strstr(out, "b0000002"), "%s", out);
	cr_log_info("A's pool status: %s", out);
	cr_assert_neq(tdaemon_cofferf(&a, data, out, sizeof(out), "write rb/v -o 4096"), 0,
		      "a fenced host wrote: %s", out);
	read_back(&b, "rb/v", data2, 200000);
	tdaemon_stop(&a); /* its last commit fails: no clean exit to expect */
	tdaemon_cleanup(&a);
	if (!reaped) {
		kill(w, SIGKILL);
		waitpid(w, &st, 0);
	}
	read_back(&b, "rb/v", data2, 200000);
	COF_OK(&b, NULL, "pool export rb");
	COF_OK(&b, NULL, "pool import -d rados:" CEPH_POOL " rb");
	read_back(&b, "rb/v", data2, 200000);
	COF_OK(&b, NULL, "pool check rb");
	COF_OK(&b, NULL, "pool destroy -f rb");
	tdaemon_teardown(&b);
}

/*
 * The cluster's only OSD stops (a cluster of this test's own): reads and
 * writes of the pool fail as I/O errors once librados gives up on it, and
 * no read returns bytes other than those written.
 */
Test(rados, a_stopped_osd_fails_io_as_eio_without_wrong_data)
{
	char conf[4200], why[4200], data[4200], cmd[8400];
	struct tdaemon d;
	int st;

	if (cluster_start(conf, sizeof(conf), why, sizeof(why)) < 0)
		cr_skip_test("RADOS: a second cluster did not start: %s", why);
	tdaemon_init(&d, NULL);
	daemon_on(&d, conf, NULL);
	COF_OK(&d, NULL, "pool create -s 32M rc rados:" CEPH_POOL "/c0");
	COF_OK(&d, NULL, "create -V 4M rc/v");
	tdaemon_random_file(&d, "data", 200000, data, sizeof(data));
	COF_OK(&d, data, "write rc/v -o 4096");
	COF_OK(&d, NULL, "flush rc/v");
	read_back(&d, "rc/v", data, 200000);

	/* a Ceph pool with LUNs made before there was an index (a cluster of
	 * this test's own: the index is shared): they are found object by
	 * object, and indexed again by their next claim */
	COF_OK(&d, NULL, "pool export rc");
	snprintf(cmd, sizeof(cmd), "rados -c '%s' -p " CEPH_POOL " rm coffer.luns", conf);
	cr_assert_eq(system(cmd), 0);
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL);
	cr_assert(strstr(out, "pool: rc"), "%s\n%s", out, tdaemon_log(&d));
	COF_OK(&d, NULL, "pool import -d rados:" CEPH_POOL " rc");
	cr_assert(rados_says(conf, "listomapkeys coffer.luns", "c0"), "not indexed again: %s", out);
	read_back(&d, "rc/v", data, 200000);

	cluster_cmd("stop-osd", conf);
	snprintf(cmd, sizeof(cmd), "read rc/v -o 4096 -l 200000 > '%s/back'", d.dir);
	st = tdaemon_coffer(&d, NULL, NULL, out, sizeof(out), cmd);
	cr_log_info("read with the OSD gone: exit %d: %s", st, out);
	if (st == 0) {
		/* served from memory: then it must be what was written */
		snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", data, d.dir);
		cr_assert_eq(system(cmd), 0, "a read with the OSD gone returned other bytes");
	} else {
		cr_assert(strstr(out, "I/O error") || strstr(out, "Input/output"), "%s", out);
	}
	cr_assert_neq(tdaemon_cofferf(&d, data, out, sizeof(out), "write rc/v -o 4096"), 0,
		      "a write with the OSD gone succeeded: %s", out);
	COF_OK(&d, NULL, "pool status rc");
	cr_assert(strstr(out, "rados:" CEPH_POOL "/c0"), "%s", out);
	tdaemon_stop(&d); /* its last commit fails too */
	tdaemon_cleanup(&d);
	cluster_cmd("stop", conf);
}

/*
 * One cluster for the whole program, up before the first test and down
 * after the last; without one the program is skipped, saying why.
 */
int main(int argc, char *argv[])
{
	struct criterion_test_set *tests = criterion_initialize();
	char conf[4200], why[4200];
	int result = 0;

	if (criterion_handle_args(argc, argv, true)) {
#ifndef HAVE_RADOS
		fprintf(stderr, "test_rados: SKIP: built --without-rados\n");
		criterion_finalize(tests);
		return 77;
#endif
		if (cluster_start(conf, sizeof(conf), why, sizeof(why)) < 0) {
			fprintf(stderr, "test_rados: SKIP: the Ceph test cluster did not start: %s\n",
				why);
			criterion_finalize(tests);
			return 77;
		}
		setenv("COFFER_TEST_CEPH_CONF", conf, 1);
		result = !criterion_run_all_tests(tests);
		cluster_cmd("stop", conf);
	}
	criterion_finalize(tests);
	return result;
}
