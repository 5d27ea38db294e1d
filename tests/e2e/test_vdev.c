// SPDX-License-Identifier: MIT
/*
 * E2E: a mirror vdev through any order of detach, attach and replace, and
 * back from every way a pool comes back. A vdev is named by its first LUN's
 * index, which a detach may leave to a stand-in; what must hold is that the
 * sides the pool had when it stopped are the sides it has after: a restart
 * (SIGTERM), a kill -9, an export and a scan import (import -d, which lists
 * a detached index as detached, not missing), and a scan import with the
 * state directory gone. Each time the pool is ONLINE with every side, the
 * data written before reads back and pool check is clean. The two
 * sequences of issue 33 run through each of these, and a seeded random walk
 * of attach, detach and replace restarts after each step (seed:
 * COFFER_TEST_SEED, printed). A side attached to a vdev other than the
 * last is listed in status under that vdev, not the last one.
 */

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"

#define LUN_SIZE (24u << 20)
#define VOL (1u << 20)
#define CHUNK (64u << 10)
#define MAX_SIDES 3

TDAEMON_FIXTURE(NULL)
TestSuite(vdev, .init = setup, .fini = teardown, .timeout = 600);

static char out[1 << 17];
#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* What the pool must be: its sides' file names, and the volume's bytes. */
static struct {
	char side[MAX_SIDES][32];
	unsigned nsides;
	char freed[64][32]; /* files detached or replaced: blank, to be taken again */
	unsigned nfreed;
	unsigned char vol[VOL];
	unsigned next; /* the next new LUN file: n<next> */
} m;

static const char *lun(const char *name)
{
	return tdaemon_path(&td, "%s", name);
}

static int side_of(const char *name)
{
	for (unsigned i = 0; i < m.nsides; i++)
		if (!strcmp(m.side[i], name))
			return (int)i;
	return -1;
}

static void model_add(const char *name)
{
	cr_assert_lt(m.nsides, MAX_SIDES);
	snprintf(m.side[m.nsides++], sizeof(m.side[0]), "%s", name);
}

static void model_drop(const char *name)
{
	int i = side_of(name);

	cr_assert_geq(i, 0, "%s is no side", name);
	m.side[i][0] = '\0';
	memmove(m.side[i], m.side[i + 1], (m.nsides - (unsigned)i - 1) * sizeof(m.side[0]));
	m.nsides--;
}

static json_t *status(void)
{
	json_t *j = tdaemon_coffer_json(&td, "--json-int pool status rd");
	json_t *p = json_object_get(json_object_get(j, "pools"), "rd");

	cr_assert_not_null(p, "no pool rd:\n%s", tdaemon_log(&td));
	json_incref(p);
	json_decref(j);
	return p;
}

/* Is the pool ONLINE with exactly the model's sides, each ONLINE? A side
 * resilvering is not yet. */
static int settled(json_t *p, char *why, size_t len)
{
	json_t *v = tdaemon_status_vdev(p, 0), *side;
	const char *k, *state = json_string_value(json_object_get(p, "state"));
	unsigned n = 0;

	if (!state || strcmp(state, "ONLINE")) {
		snprintf(why, len, "pool %s", state ? state : "(none)");
		return 0;
	}
	if (tdaemon_status_nvdevs(p) != 1 || !v) {
		snprintf(why, len, "%zu vdevs", tdaemon_status_nvdevs(p));
		return 0;
	}
	if (m.nsides == 1) {
		const char *path = json_string_value(json_object_get(v, "path"));

		if (json_object_get(v, "vdevs") || !path || strcmp(path, lun(m.side[0]))) {
			snprintf(why, len, "the vdev is not %s alone", m.side[0]);
			return 0;
		}
		return 1;
	}
	json_object_foreach(json_object_get(v, "vdevs"), k, side) {
		const char *path = json_string_value(json_object_get(side, "path"));
		const char *st = json_string_value(json_object_get(side, "state"));
		const char *base = path ? strrchr(path, '/') : NULL;

		if (!base || side_of(base + 1) < 0 || !st || strcmp(st, "ONLINE")) {
			snprintf(why, len, "side %s is %s", path ? path : "?", st ? st : "?");
			return 0;
		}
		n++;
	}
	if (n != m.nsides) {
		snprintf(why, len, "%u sides, not %u", n, m.nsides);
		return 0;
	}
	return 1;
}

/* Wait (bounded) until the pool is settled as the model says. */
static void await_settled(const char *when)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	char why[512];

	for (;;) {
		json_t *p = status();
		int ok = settled(p, why, sizeof(why));

		json_decref(p);
		if (ok)
			return;
		if (!tdaemon_poll(end)) {
			cof(NULL, "pool status rd");
			cr_assert_fail("%s: not ONLINE with its %u sides (%s):\n%s\ndaemon:\n%s",
				       when, m.nsides, why, out, tdaemon_log(&td));
		}
	}
}

/* @len bytes at @off of the volume, random, written, and in the model. */
static void write_chunk(uint64_t off, size_t len)
{
	char name[64], path[4096];

	snprintf(name, sizeof(name), "chunk.%llu", (unsigned long long)off);
	for (size_t i = 0; i < len; i++)
		m.vol[off + i] = (unsigned char)rand();
	snprintf(path, sizeof(path), "%s", tdaemon_file(&td, name, m.vol + off, len));
	COF_OK(path, "write -o %llu rd/v", (unsigned long long)off);
	COF_OK(NULL, "flush rd/v");
	unlink(path);
}

/* The volume reads back as the model has it, and pool check is clean. */
static void check_data(const char *when)
{
	char back[4096], args[8192];
	unsigned char *b = malloc(VOL);
	FILE *f;

	cr_assert_not_null(b);
	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(args, sizeof(args), "read -l %u rd/v > '%s'", VOL, back);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args), 0, "%s: read: %s",
		     when, out);
	f = fopen(back, "rb");
	cr_assert_not_null(f);
	cr_assert_eq(fread(b, 1, VOL, f), VOL, "%s: short read", when);
	fclose(f);
	unlink(back);
	cr_assert(!memcmp(b, m.vol, VOL), "%s: the volume does not read back", when);
	free(b);
	COF_OK(NULL, "pool check rd");
	cr_assert(strstr(out, "no errors"), "%s: pool check: %s", when, out);
}

static void create_pool(void)
{
	memset(&m, 0, sizeof(m));
	COF_OK(NULL, "pool create -s %u rd mirror %s %s", LUN_SIZE, lun("a"), lun("b"));
	model_add("a");
	model_add("b");
	COF_OK(NULL, "create -V %u rd/v", VOL);
	write_chunk(0, VOL);
}

static void detach(const char *name)
{
	COF_OK(NULL, "pool detach rd %s", lun(name));
	model_drop(name);
	await_settled("after a detach");
}

static void attach(const char *to, const char *name)
{
	COF_OK(NULL, "pool attach rd %s %s", lun(to), lun(name));
	model_add(name);
	await_settled("after an attach");
}

static void replace(const char *old, const char *name)
{
	COF_OK(NULL, "pool replace rd %s %s", lun(old), lun(name));
	snprintf(m.side[side_of(old)], sizeof(m.side[0]), "%s", name);
	await_settled("after a replace");
}

/* Issue 33: the first side detached, another attached to the second. */
static void sequence_detach_first(void)
{
	create_pool();
	detach("a");
	write_chunk(3 * CHUNK, CHUNK); /* born with one side */
	attach("b", "c");
}

/* Issue 33: replace and attach mixed, the first side detached between. */
static void sequence_mixed(void)
{
	create_pool();
	replace("a", "n1");
	attach("b", "n2");
	detach("n1");
	write_chunk(5 * CHUNK, CHUNK);
	replace("b", "n3");
	attach("n2", "n4");
}

static void killed(void)
{
	kill(td.pid, SIGKILL);
	waitpid(td.pid, NULL, 0);
	td.pid = -1;
}

enum back { RESTART, KILL9, EXPORT_SCAN, STATE_LOST };

/* The scan's listing says each of @n detached indexes so, and none missing. */
static void listing_ok(unsigned detached)
{
	unsigned n = 0;

	COF_OK(NULL, "pool import -d %s", td.dir);
	for (const char *s = out; (s = strstr(s, "  detached")); s++)
		n++;
	cr_assert(!strstr(out, "missing") && !strstr(out, "cannot import"),
		  "a detached LUN is not missing: %s", out);
	cr_assert_eq(n, detached, "%u LUNs listed detached, not %u: %s", n, detached, out);
}

/* The pool back by way @how; then it is what the model says. */
static void come_back(enum back how, unsigned detached, const char *when)
{
	char cmd[8192];

	switch (how) {
	case RESTART:
		tdaemon_stop_ok(&td);
		tdaemon_start_ok(&td);
		break;
	case KILL9:
		killed();
		tdaemon_start_ok(&td);
		break;
	case EXPORT_SCAN:
		COF_OK(NULL, "pool export rd");
		listing_ok(detached);
		COF_OK(NULL, "pool import -d %s rd", td.dir);
		break;
	case STATE_LOST:
		killed();
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'/pools", td.state);
		cr_assert_eq(system(cmd), 0);
		tdaemon_start_ok(&td);
		listing_ok(detached);
		COF_OK(NULL, "pool import -d %s rd", td.dir);
		break;
	}
	await_settled(when);
	check_data(when);
}

Test(vdev, first_side_detached_then_attached_survives_a_restart)
{
	sequence_detach_first();
	come_back(RESTART, 1, "restart");
	come_back(RESTART, 1, "second restart");
}

Test(vdev, first_side_detached_then_attached_survives_a_kill)
{
	sequence_detach_first();
	come_back(KILL9, 1, "kill -9");
}

Test(vdev, first_side_detached_then_attached_survives_export_and_scan_import)
{
	sequence_detach_first();
	come_back(EXPORT_SCAN, 1, "export, import -d");
	come_back(RESTART, 1, "restart after import -d");
}

Test(vdev, first_side_detached_then_attached_survives_the_state_directory_lost)
{
	sequence_detach_first();
	come_back(STATE_LOST, 1, "state directory lost, import -d");
}

Test(vdev, replace_attach_detach_mixed_survives_a_restart)
{
	sequence_mixed();
	come_back(RESTART, 1, "restart");
	come_back(RESTART, 1, "second restart");
}

Test(vdev, replace_attach_detach_mixed_survives_a_kill)
{
	sequence_mixed();
	come_back(KILL9, 1, "kill -9");
}

Test(vdev, replace_attach_detach_mixed_survives_export_and_scan_import)
{
	sequence_mixed();
	come_back(EXPORT_SCAN, 1, "export, import -d");
	come_back(RESTART, 1, "restart after import -d");
}

Test(vdev, replace_attach_detach_mixed_survives_the_state_directory_lost)
{
	sequence_mixed();
	come_back(STATE_LOST, 1, "state directory lost, import -d");
}

/*
 * A seeded walk: each step attaches (fewer than 3 sides), detaches (more
 * than one) or replaces (more than one: a replace needs another sound
 * side) a side at random, writes a chunk, and brings the pool back by a
 * restart, a kill -9, or now and then a scan import; after each the pool
 * is ONLINE with its sides and the volume reads back. A new side is now
 * and then a file the pool detached or replaced before, so one path is
 * in the pool record twice.
 */
Test(vdev, a_random_walk_of_attach_detach_and_replace_survives_every_restart)
{
	const char *env = getenv("COFFER_TEST_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)time(NULL);
	unsigned detached = 0;
	char when[128];

	cr_log_info("seed %u (COFFER_TEST_SEED=%u replays it)", seed, seed);
	fprintf(stderr, "test_vdev: random walk, seed %u\n", seed);
	srand(seed);
	create_pool();
	for (unsigned step = 0; step < 20; step++) {
		unsigned op = (unsigned)rand() % 3, s = (unsigned)rand() % m.nsides;
		char name[32], old[32];

		if (m.nsides == 1)
			op = 0;
		else if (m.nsides == MAX_SIDES && op == 0)
			op = 1 + (unsigned)rand() % 2;
		name[0] = '\0';
		if (op == 1) {
			/* a detach takes no new side */
		} else if (m.nfreed && rand() % 3 == 0) {
			unsigned f = (unsigned)rand() % m.nfreed;

			snprintf(name, sizeof(name), "%s", m.freed[f]);
			memmove(m.freed[f], m.freed[f + 1], (--m.nfreed - f) * sizeof(m.freed[0]));
		} else {
			snprintf(name, sizeof(name), "n%u", ++m.next);
		}
		snprintf(old, sizeof(old), "%s", m.side[s]);
		snprintf(when, sizeof(when), "seed %u step %u (%s %s%s%s)", seed, step,
			 op == 0 ? "attach" : op == 1 ? "detach" : "replace", old,
			 op == 1 ? "" : " ", op == 1 ? "" : name);
		cr_log_info("%s", when);
		if (op == 0) {
			attach(old, name);
		} else if (op == 1) {
			detach(old);
			detached++;
		} else {
			replace(old, name);
		}
		if (op != 0)
			snprintf(m.freed[m.nfreed++], sizeof(m.freed[0]), "%s", old);
		write_chunk((uint64_t)((unsigned)rand() % (VOL / CHUNK)) * CHUNK, CHUNK);
		come_back(step % 7 == 6 ? EXPORT_SCAN : rand() % 2 ? KILL9 : RESTART, detached,
			  when);
	}
}

/*
 * The vdevs of pool rd as "side,side vdev ...": each vdev in the order of
 * its first LUN, its sides in index order, by file name; *online is 0
 * while a side is not ONLINE (resilvering).
 */
static void layout_add(json_t *side, char *buf, size_t len, size_t *at, int *online)
{
	const char *path = json_string_value(json_object_get(side, "path"));
	const char *st = json_string_value(json_object_get(side, "state"));

	*online &= st && !strcmp(st, "ONLINE");
	*at += (size_t)snprintf(buf + *at, len - *at, "%s%s",
				*at && buf[*at - 1] != ' ' ? "," : "",
				path && strrchr(path, '/') ? strrchr(path, '/') + 1 : "?");
}

static void layout(char *buf, size_t len, int *online)
{
	json_t *p = status(), *v, *side;
	const char *k, *k2;
	size_t at = 0;

	*online = 1;
	buf[0] = '\0';
	json_object_foreach(json_object_get(json_object_get(json_object_get(p, "vdevs"), "rd"),
					    "vdevs"),
			    k, v) {
		if (json_object_get(v, "vdevs"))
			json_object_foreach(json_object_get(v, "vdevs"), k2, side)
				layout_add(side, buf, len, &at, online);
		else
			layout_add(v, buf, len, &at, online);
		at += (size_t)snprintf(buf + at, len - at, " ");
	}
	if (at)
		buf[at - 1] = '\0';
	json_decref(p);
}

/* Wait (bounded) until the vdevs are @want, every side ONLINE. */
static void await_layout(const char *want, const char *when)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	char have[1024];
	int online;

	for (;;) {
		layout(have, sizeof(have), &online);
		if (online && !strcmp(have, want))
			return;
		if (!tdaemon_poll(end)) {
			cof(NULL, "pool status rd");
			cr_assert_fail("%s: vdevs '%s'%s, not '%s':\n%s\ndaemon:\n%s", when, have,
				       online ? "" : " (not all ONLINE)", want, out,
				       tdaemon_log(&td));
		}
	}
}

/*
 * A side attached to a vdev that is not the last: its index comes after
 * the other vdev's sides, and it must still be a side of the vdev it was
 * attached to, in status as in the pool, right after the attach and after
 * a kill -9 and a restart (the soak's seed 20261205: a LUN of its own and
 * a 3-way mirror added after it, a side attached to the first).
 */
Test(vdev, a_side_attached_to_an_earlier_vdev_stays_in_it)
{
	COF_OK(NULL, "pool create -s %u rd %s", LUN_SIZE, lun("s"));
	COF_OK(NULL, "pool add -s %u rd mirror %s %s", LUN_SIZE, lun("a"), lun("b"));
	COF_OK(NULL, "pool attach rd %s %s", lun("b"), lun("c"));
	await_layout("s a,b,c", "after attach b c");
	COF_OK(NULL, "pool attach rd %s %s", lun("s"), lun("d"));
	await_layout("s,d a,b,c", "after attach s d");
	killed();
	tdaemon_start_ok(&td);
	await_layout("s,d a,b,c", "after a kill -9");
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	await_layout("s,d a,b,c", "after a restart");
}

/*
 * A detached index is no side out of service: a raw receive, which waits
 * while any side lacks extents, goes in at once after a detach, and after
 * a restart that brings the stand-in back. Found by the soak (seed
 * 20261207): every raw receive into such a pool was refused as busy.
 */
Test(vdev, a_detached_index_keeps_no_raw_receive_waiting)
{
	char stream[4300];

	create_pool();
	COF_OK(NULL, "snapshot rd/v@s");
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send -w rd/v@s > '%s'", stream);
	detach("a");
	COF_OK(stream, "receive rd/r1");
	come_back(RESTART, 1, "restart");
	COF_OK(stream, "receive rd/r2");
	come_back(STATE_LOST, 1, "state directory lost, import -d");
	COF_OK(stream, "receive rd/r3");
}
