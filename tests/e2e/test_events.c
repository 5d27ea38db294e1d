// SPDX-License-Identifier: MIT
/*
 * E2E: events through the real cofferd and coffer, from real faults. What
 * must hold: a mirror side's file deleted while the pool is imported is a
 * lun.fault naming the LUN and why, then pool.state DEGRADED, each a line
 * in the daemon's log; a pool whose LUN is gone at start is a pool.fault; a scrub over a damaged side is a scrub.start, a
 * scrub.finish with its counts, and io.repair events cut to a burst whose
 * "suppressed" counts add up, with the named ones, to every copy the LUN
 * says was repaired; a write that finds no room is an io.nospace naming
 * the dataset; unload-key and load-key are key.unload and key.load; an
 * administrative change is admin.<command> with the caller's uid; the list
 * keeps max_events and says what left it; `pool events -f` prints an event
 * that happens after it started; a hook of event_hook_dir runs with the
 * documented environment (and only that), a hook of another class does not.
 */

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "daemon.h"

#define DATA_OFF (1u << 20) /* LUN_DATA_OFF of libstore/kv/format.h */
#define LUN_SIZE (24u << 20)
#define VOL (2u << 20)

TDAEMON_FIXTURE(NULL)
TestSuite(events, .init = setup, .fini = teardown, .timeout = 240);

static char out[1 << 17];
#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

static const char *lun(const char *name)
{
	return tdaemon_path(&td, "%s", name);
}

/* The daemon's events (of @pool, or all when NULL); the caller decrefs. */
static json_t *events(const char *pool)
{
	char args[256];
	json_t *j, *a;

	snprintf(args, sizeof(args), "--json-int pool events -j %s", pool ? pool : "");
	j = tdaemon_coffer_json(&td, args);
	a = json_object_get(j, "events");
	cr_assert(json_is_array(a), "no events array");
	json_incref(a);
	json_decref(j);
	return a;
}

static const char *ev_class(json_t *e)
{
	return json_string_value(json_object_get(e, "class"));
}

static json_t *ev_field(json_t *e, const char *name)
{
	return json_object_get(json_object_get(e, "fields"), name);
}

static const char *ev_str(json_t *e, const char *name)
{
	return json_string_value(ev_field(e, name));
}

static long long ev_num(json_t *e, const char *name)
{
	return (long long)json_integer_value(ev_field(e, name));
}

/* The first event of @cls in @a whose field @key is @val (NULL: any), or NULL. */
static json_t *find(json_t *a, const char *cls, const char *key, const char *val)
{
	size_t i;
	json_t *e;

	json_array_foreach(a, i, e)
		if (!strcmp(ev_class(e), cls) && (!key || (ev_str(e, key) && !strcmp(ev_str(e, key), val))))
			return e;
	return NULL;
}

/*
 * The events of @pool once one of @cls (with @key = @val, if given) is
 * among them, waited for up to TDAEMON_WAIT_S; the caller decrefs.
 */
static json_t *wait_event(const char *pool, const char *cls, const char *key, const char *val)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	for (;;) {
		json_t *a = events(pool);

		if (find(a, cls, key, val))
			return a;
		json_decref(a);
		cr_assert(tdaemon_poll(end), "no %s event in time:\n%s", cls, tdaemon_log(&td));
	}
}

/* A clear dataset of random bytes, written and flushed. */
static void fill(const char *ds, char path[4096])
{
	COF_OK(NULL, "create -V %u %s", VOL, ds);
	tdaemon_random_file(&td, "fill.in", VOL, path, 4096);
	COF_OK(path, "write %s", ds);
	COF_OK(NULL, "flush %s", ds);
}

Test(events, a_side_deleted_while_imported_is_a_fault_a_degraded_pool_and_log_lines)
{
	char in[4096], line[8192];
	json_t *a, *e;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill("tank/c", in);
	cr_assert_eq(unlink(lun("l1")), 0);
	COF_OK(in, "write tank/c"); /* the next commit finds it gone */
	COF_OK(NULL, "flush tank/c");
	a = wait_event("tank", "pool.state", "state", "DEGRADED");
	e = find(a, "lun.fault", "lun", lun("l1"));
	cr_assert_not_null(e, "no lun.fault for l1:\n%s", tdaemon_log(&td));
	cr_assert_str_eq(ev_str(e, "state"), "FAULTED");
	cr_assert_str_eq(ev_str(e, "old_state"), "ONLINE");
	cr_assert_str_eq(ev_str(e, "reason"), "its file was deleted");
	cr_assert_str_eq(json_string_value(json_object_get(e, "pool")), "tank");
	cr_assert(find(a, "admin.pool_create", "name", "tank"), "the create is an event too");
	/* the journal has each, as one line naming the LUN */
	snprintf(line, sizeof(line), "lun.fault: pool=tank lun=%s vdev=0 state=FAULTED", lun("l1"));
	cr_assert(strstr(tdaemon_log(&td), line), "want '%s' in:\n%s", line, tdaemon_log(&td));
	cr_assert(strstr(tdaemon_log(&td), "pool.state: pool=tank state=DEGRADED old_state=ONLINE"),
		  "%s", tdaemon_log(&td));
	json_decref(a);

	/* a restart imports it degraded: said again, the side UNAVAIL */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	a = wait_event("tank", "pool.state", "state", "DEGRADED");
	e = find(a, "lun.fault", "state", "UNAVAIL");
	cr_assert_not_null(e, "%s", tdaemon_log(&td));
	cr_assert_str_eq(ev_str(e, "lun"), lun("l1"));
	json_decref(a);
}

Test(events, a_pool_that_cannot_import_at_start_is_a_pool_fault)
{
	json_t *a, *e;

	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	tdaemon_stop_ok(&td);
	cr_assert_eq(unlink(lun("l0")), 0);
	tdaemon_start_ok(&td);
	a = wait_event("tank", "pool.fault", NULL, NULL);
	e = find(a, "pool.fault", NULL, NULL);
	cr_assert(strstr(ev_str(e, "error"), lun("l0")), "names the LUN: %s", ev_str(e, "error"));
	json_decref(a);
	cr_assert(strstr(tdaemon_log(&td), "err: event 1 pool.fault: pool=tank error="), "%s",
		  tdaemon_log(&td));
}

/* Junk over the data region's first @len bytes of LUN file @path. */
static void junk(const char *path, size_t len)
{
	char *b = malloc(len);
	int fd = open(path, O_WRONLY);

	cr_assert(b && fd >= 0, "%s", path);
	for (size_t i = 0; i < len; i++)
		b[i] = (char)rand();
	cr_assert_eq(pwrite(fd, b, len, DATA_OFF), (ssize_t)len);
	close(fd);
	free(b);
}

/* The LUN @i's repaired count, as pool status -j says it. */
static long long lun_repaired(size_t i)
{
	json_t *j = tdaemon_coffer_json(&td, "--json-int pool status tank");
	json_t *p = json_object_get(json_object_get(j, "pools"), "tank");
	long long n = (long long)json_integer_value(
		json_object_get(tdaemon_status_lun(p, i), "repaired"));

	json_decref(j);
	return n;
}

/* Named io.repair events of LUN @path in @a, and the suppressed counts of all. */
static long long repairs(json_t *a, const char *path, long long *suppressed)
{
	long long named = 0;
	size_t i;
	json_t *e;

	*suppressed = 0;
	json_array_foreach(a, i, e) {
		if (strcmp(ev_class(e), "io.repair"))
			continue;
		if (ev_field(e, "suppressed"))
			*suppressed += ev_num(e, "suppressed");
		else if (!strcmp(ev_str(e, "lun"), path))
			named++;
	}
	return named;
}

Test(events, a_scrub_that_repairs_is_a_burst_of_repairs_the_rest_counted_and_a_finish)
{
	char in[4096];
	long long named = 0, suppressed = 0, fixed;
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	json_t *a, *e;

	COF_OK(NULL, "pool create -s %u tank mirror %s %s", LUN_SIZE, lun("l0"), lun("l1"));
	fill("tank/c", in);
	junk(lun("l0"), VOL); /* every record's copy on l0 */
	COF_OK(NULL, "pool scrub tank");
	a = wait_event("tank", "scrub.finish", NULL, NULL);
	cr_assert(find(a, "scrub.start", NULL, NULL), "no scrub.start");
	e = find(a, "scrub.finish", NULL, NULL);
	cr_assert_gt(ev_num(e, "repaired"), 0);
	cr_assert_eq(ev_num(e, "errors"), 0);
	cr_assert_geq(ev_num(e, "examined"), VOL);
	json_decref(a);
	/* each copy repaired is named or counted, the count once a second */
	fixed = lun_repaired(0);
	cr_assert_gt(fixed, 100, "a record per 8 KiB of the 2 MiB: %lld", fixed);
	for (;;) {
		a = events("tank");
		named = repairs(a, lun("l0"), &suppressed);
		json_decref(a);
		if (named + suppressed >= fixed)
			break;
		cr_assert(tdaemon_poll(end), "%lld named and %lld suppressed of %lld repairs",
			  named, suppressed, fixed);
	}
	cr_assert_eq(named + suppressed, fixed);
	cr_assert_gt(suppressed, 0, "a flood is cut");
	/* the burst, then 10 a second: a scrub of this size lasts a few seconds */
	cr_assert_lt(named, fixed / 2, "%lld of %lld repairs named", named, fixed);
	cr_assert(strstr(tdaemon_log(&td), "io.repair: pool=tank suppressed="), "%s",
		  tdaemon_log(&td));
}

Test(events, a_write_with_no_room_is_an_io_nospace_naming_the_dataset)
{
	char in[4096];
	json_t *a;

	COF_OK(NULL, "pool create -s 8M tank %s", lun("l0"));
	COF_OK(NULL, "create -s -V 32M tank/big");
	tdaemon_random_file(&td, "big.in", 32u << 20, in, sizeof(in));
	cr_assert_eq(cof(in, "write tank/big"), 1, "a write past the pool's room: %s", out);
	cr_assert(strstr(out, "out of space"), "%s", out);
	a = wait_event("tank", "io.nospace", "dataset", "tank/big");
	cr_assert_gt(ev_num(find(a, "io.nospace", NULL, NULL), "requests"), 0);
	json_decref(a);
	cr_assert(strstr(tdaemon_log(&td), "io.nospace: pool=tank dataset=tank/big"), "%s",
		  tdaemon_log(&td));
}

Test(events, key_unload_and_load_are_events_and_admin_changes_carry_the_uid)
{
	const char *pf = tdaemon_file(&td, "pass", "correct horse battery", 21);
	json_t *a, *e;

	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	COF_OK(NULL,
	       "create -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e",
	       pf);
	COF_OK(NULL, "create -V 1M tank/e/child");
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "load-key tank/e");
	COF_OK(NULL, "set compression=zstd tank/e");
	a = wait_event("tank", "key.load", "dataset", "tank/e");
	e = find(a, "key.unload", "dataset", "tank/e");
	cr_assert_not_null(e);
	cr_assert_eq(ev_num(e, "datasets"), 2, "the root and its child");
	cr_assert_eq(ev_num(find(a, "key.load", NULL, NULL), "datasets"), 2);
	e = find(a, "admin.ds_set", "name", "tank/e");
	cr_assert_not_null(e);
	cr_assert_eq(ev_num(e, "uid"), (long long)geteuid());
	cr_assert(strstr(ev_str(e, "msg"), "compression set to zstd"), "%s", ev_str(e, "msg"));
	/* eids are in order, one apart */
	for (size_t i = 1; i < json_array_size(a); i++)
		cr_assert_eq(json_integer_value(json_object_get(json_array_get(a, i), "eid")),
			     json_integer_value(json_object_get(json_array_get(a, i - 1), "eid")) + 1);
	json_decref(a);
}

Test(events, the_list_keeps_max_events_and_says_what_left_it)
{
	json_t *j, *a;

	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nlog_level = debug\nlog_target = stderr\n"
			   "workers = 2\ntxg_timeout = 1\nmax_events = 8\n");
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	for (int i = 0; i < 12; i++)
		COF_OK(NULL, "create -V 1M tank/d%d", i);
	a = wait_event("tank", "admin.ds_create", "name", "tank/d11");
	cr_assert_eq(json_array_size(a), 8, "%s", tdaemon_log(&td));
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(a, 0), "eid")), 6,
		     "13 events, the last 8 kept");
	cr_assert_null(find(a, "admin.pool_create", NULL, NULL), "the oldest left");
	json_decref(a);
	cr_assert_eq(cof(NULL, "--json-int pool events -j nosuch"), 0, "%s", out);
	j = json_loads(out, 0, NULL);
	cr_assert_eq(json_array_size(json_object_get(j, "events")), 0, "%s", out);
	json_decref(j);
	/* every creation was logged all the same */
	cr_assert(strstr(tdaemon_log(&td), "event 1 admin.pool_create: pool=tank"), "%s",
		  tdaemon_log(&td));
}

/* A file's whole text into @buf (NUL-terminated); 0 if it is not there. */
static int slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0)
		return 0;
	n = read(fd, buf, cap - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return 1;
}

Test(events, follow_prints_an_event_that_happens_after_it_started)
{
	const char *bin = getenv("COFFER") ? getenv("COFFER") : "../../client/coffer";
	const char *path = lun("follow.out");
	char text[1 << 16];
	double end;
	pid_t pid;

	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(fd, 1);
		dup2(fd, 2);
		execl(bin, "coffer", "-S", td.sock, "--json-int", "pool", "events", "-f", "-j", "tank",
		      (char *)NULL);
		_exit(127);
	}
	/* what was there when it started, then what came after */
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!(slurp(path, text, sizeof(text)) && strstr(text, "admin.pool_create")))
		cr_assert(tdaemon_poll(end), "follow printed: %s", text);
	cr_assert_null(strstr(text, "tank/later"));
	COF_OK(NULL, "create -V 1M tank/later");
	while (!(slurp(path, text, sizeof(text)) && strstr(text, "tank/later")))
		cr_assert(tdaemon_poll(end), "follow printed: %s", text);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	/* one event a line, each a JSON object */
	for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
		json_t *e = json_loads(l, 0, NULL);

		cr_assert_not_null(e, "not JSON: %s", l);
		cr_assert(json_is_integer(json_object_get(e, "eid")), "%s", l);
		json_decref(e);
	}
}

/* A hook script @name in @dir that writes its environment to @dir/NAME.EID. */
static void hook(const char *dir, const char *name)
{
	char path[4096], text[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(text, sizeof(text), "#!/bin/sh\nenv > '%s/%s.'$COFFER_EVENT_EID.tmp && "
		 "mv '%s/%s.'$COFFER_EVENT_EID.tmp '%s/%s.'$COFFER_EVENT_EID\n",
		 dir, name, dir, name, dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Does the environment @env have the line @want? */
static int has_line(const char *env, const char *want)
{
	size_t n = strlen(want);

	for (const char *l = env; *l;) {
		const char *nl = strchr(l, '\n');

		if (!strncmp(l, want, n) && (l[n] == '\n' || l[n] == '\0'))
			return 1;
		if (!nl)
			break;
		l = nl + 1;
	}
	return 0;
}

Test(events, a_hook_runs_with_the_documented_environment_and_only_for_its_classes)
{
	char dir[2048], env[8192], file[4096], want[4096];
	double end;
	json_t *a, *e;
	long long eid;

	snprintf(dir, sizeof(dir), "%s", lun("hooks"));
	cr_assert_eq(mkdir(dir, 0755), 0);
	hook(dir, "admin-env.sh");   /* a prefix up to a dot: admin.* */
	hook(dir, "key.load-env.sh"); /* another class: never for these */
	hook(dir, ".hidden-env.sh");
	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nlog_level = debug\nlog_target = stderr\n"
			   "workers = 2\ntxg_timeout = 1\nevent_hook_dir = %s\n",
			   dir);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool create -s %u tank %s", LUN_SIZE, lun("l0"));
	a = wait_event("tank", "admin.pool_create", NULL, NULL);
	e = find(a, "admin.pool_create", NULL, NULL);
	eid = (long long)json_integer_value(json_object_get(e, "eid"));
	snprintf(file, sizeof(file), "%s/admin-env.sh.%lld", dir, eid);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!slurp(file, env, sizeof(env)))
		cr_assert(tdaemon_poll(end), "the hook did not run:\n%s", tdaemon_log(&td));
	snprintf(want, sizeof(want), "COFFER_EVENT_EID=%lld", eid);
	cr_assert(has_line(env, want), "%s", env);
	cr_assert(has_line(env, "COFFER_EVENT_CLASS=admin.pool_create"), "%s", env);
	cr_assert(has_line(env, "COFFER_EVENT_POOL=tank"), "%s", env);
	cr_assert(has_line(env, "COFFER_EVENT_NAME=tank"), "%s", env);
	snprintf(want, sizeof(want), "COFFER_EVENT_UID=%u", (unsigned)geteuid());
	cr_assert(has_line(env, want), "%s", env);
	cr_assert(has_line(env, "COFFER_EVENT_MSG=pool tank: created with 1 LUNs"), "%s", env);
	snprintf(want, sizeof(want), "COFFER_EVENT_TIME=%lld",
		 (long long)json_integer_value(json_object_get(e, "time")));
	cr_assert(has_line(env, want), "%s", env);
	cr_assert(strstr(env, "COFFER_EVENT_TIME_NS="), "%s", env);
	cr_assert(strstr(env, "COFFER_EVENT_TIME_STRING=20"), "%s", env);
	snprintf(want, sizeof(want), "COFFER_SOCKET=%s", td.sock);
	cr_assert(has_line(env, want), "%s", env);
	cr_assert(strstr(env, "PATH=/usr/local/sbin:"), "%s", env);
	/* nothing of the daemon's own environment */
	cr_assert_null(strstr(env, "NOTIFY_SOCKET"), "%s", env);
	cr_assert_null(strstr(env, "HOME="), "%s", env);
	json_decref(a);

	/* the hook of another class, and a hidden file, never ran */
	snprintf(file, sizeof(file), "%s/key.load-env.sh.%lld", dir, eid);
	cr_assert_neq(access(file, F_OK), 0, "key.load-env.sh ran for admin.pool_create");
	snprintf(file, sizeof(file), "%s/.hidden-env.sh.%lld", dir, eid);
	cr_assert_neq(access(file, F_OK), 0, "a hidden file ran");
}
