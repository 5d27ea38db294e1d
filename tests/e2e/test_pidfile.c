// SPDX-License-Identifier: MIT
/*
 * E2E: cofferd's pid file (pid_file, -P). It names the running daemon, the
 * detached one when cofferd detaches, and goes at a clean stop; a second
 * daemon refuses a pid file a running one holds and leaves it alone; one
 * left by a daemon killed with SIGKILL is replaced; a stopping daemon
 * removes only the file it wrote. With two daemons on one host, kill $(cat
 * pid_file) stops one and not the other, which `kill $(pidof cofferd)`,
 * the README's advice before, could not.
 */

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

TDAEMON_FIXTURE2
static char out[16384];

TestSuite(pidfile, .init = setup, .fini = teardown, .timeout = 240);

/* The default pid file of @d: cofferd.pid beside its socket. */
static const char *pid_path(struct tdaemon *d)
{
	return tdaemon_path(d, "cofferd.pid");
}

/* The pid in @path, 0 if there is no such file, -1 if it is not "PID\n". */
static long pid_in(const char *path)
{
	char buf[64], *end;
	FILE *f = fopen(path, "r");
	size_t n;
	long v;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	v = strtol(buf, &end, 10);
	return end != buf && strcmp(end, "\n") == 0 && v > 0 ? v : -1;
}

static void assert_ping(struct tdaemon *d)
{
	int st = tdaemon_coffer(d, NULL, NULL, out, sizeof(out), "ping");

	cr_assert_eq(st, 0, "ping: exit %d: %s\ndaemon:\n%s", st, out, tdaemon_log(d));
}

/* A second daemon with its own socket and state, and the config line pid_file = @pid_file. */
static void second(const char *pid_file)
{
	tdaemon_init(&td2, NULL);
	tdaemon_write_conf(&td2, NULL, "log_level = debug\n%s%s%s", pid_file ? "pid_file = " : "",
			   pid_file ? pid_file : "", pid_file ? "\n" : "");
}

/* Is @pid a process that has not exited? (A zombie nobody reaped yet has.) */
static bool running(long pid)
{
	char p[64], buf[512], *rp;
	FILE *f;
	size_t n;

	snprintf(p, sizeof(p), "/proc/%ld/stat", pid);
	f = fopen(p, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static const char *cofferd_bin(void)
{
	return getenv("COFFERD") ? getenv("COFFERD") : "../../daemon/cofferd";
}

Test(pidfile, names_the_daemon_and_goes_at_a_clean_stop)
{
	struct stat st;

	cr_assert_eq(pid_in(pid_path(&td)), td.pid, "%s: want %d", pid_path(&td), (int)td.pid);
	cr_assert_eq(stat(pid_path(&td), &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644, "mode %04o", (unsigned)(st.st_mode & 07777));
	/* the file alone: the temporary name it was written under is gone */
	snprintf(out, sizeof(out), "ls -A '%s' | grep -c 'cofferd\\.pid' | grep -qx 1", td.dir);
	cr_assert_eq(system(out), 0, "a temporary pid file was left in %s", td.dir);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_neq(access(pid_path(&td), F_OK), 0, "the pid file outlived a clean stop");
	tdaemon_start_ok(&td);
}

Test(pidfile, a_second_daemon_refuses_a_pid_file_a_running_one_holds)
{
	struct stat before, after;
	char cmd[8192], want[4300];
	int st;

	cr_assert_eq(stat(pid_path(&td), &before), 0);
	second(pid_path(&td));
	cr_assert_neq(tdaemon_start(&td2), 0, "a second cofferd took a held pid file:\n%s",
		      tdaemon_log(&td2));
	snprintf(want, sizeof(want), "pid_file %s: held by cofferd pid %d, which is running",
		 pid_path(&td), (int)td.pid);
	cr_assert(strstr(tdaemon_log(&td2), want), "want '%s' in:\n%s", want, tdaemon_log(&td2));
	/* exit 1, with a bound in case it runs after all */
	snprintf(cmd, sizeof(cmd), "timeout 30 '%s' -f -c '%s' 2>/dev/null", cofferd_bin(),
		 td2.conf);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "second cofferd: status %d", st);
	/* the first daemon's file is the same file, naming the first daemon */
	cr_assert_eq(stat(pid_path(&td), &after), 0, "the pid file is gone");
	cr_assert(after.st_ino == before.st_ino && after.st_dev == before.st_dev,
		  "the pid file was replaced");
	cr_assert_eq(pid_in(pid_path(&td)), td.pid);
	assert_ping(&td);
}

Test(pidfile, kill_of_the_pid_file_stops_that_daemon_and_no_other)
{
	char cmd[4300];
	int status;

	second(NULL);
	tdaemon_start_ok(&td2);
	cr_assert_eq(pid_in(pid_path(&td2)), td2.pid);
	snprintf(cmd, sizeof(cmd), "kill $(cat '%s')", pid_path(&td2));
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(waitpid(td2.pid, &status, 0), td2.pid);
	td2.pid = -1;
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d:\n%s", status,
		  tdaemon_log(&td2));
	cr_assert_neq(access(pid_path(&td2), F_OK), 0);
	/* the other one runs on, its pid file in place */
	assert_ping(&td);
	cr_assert_eq(pid_in(pid_path(&td)), td.pid);
}

Test(pidfile, one_left_by_a_killed_daemon_is_replaced)
{
	int status;

	kill(td.pid, SIGKILL);
	cr_assert_eq(waitpid(td.pid, &status, 0), td.pid);
	td.pid = -1;
	cr_assert_gt(pid_in(pid_path(&td)), 0, "SIGKILL leaves the file behind");
	tdaemon_start_ok(&td);
	cr_assert_eq(pid_in(pid_path(&td)), td.pid, "the stale pid file was not replaced");
	assert_ping(&td);
}

Test(pidfile, a_stopping_daemon_removes_only_the_file_it_wrote)
{
	FILE *f;

	/* someone else's file now sits at the path */
	cr_assert_eq(unlink(pid_path(&td)), 0);
	f = fopen(pid_path(&td), "w");
	cr_assert_not_null(f);
	fputs("1\n", f);
	fclose(f);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_eq(pid_in(pid_path(&td)), 1, "the stopping daemon removed a file not its own");
	tdaemon_start_ok(&td);
	cr_assert_eq(pid_in(pid_path(&td)), td.pid);
}

Test(pidfile, empty_writes_none_and_dash_p_names_the_detached_daemon)
{
	char cmd[8192], p[4300];
	long pid;
	int st;

	second("");
	tdaemon_start_ok(&td2);
	cr_assert_neq(access(pid_path(&td2), F_OK), 0, "pid_file = (empty) wrote one");
	cr_assert_eq(tdaemon_stop(&td2), 0, "%s", tdaemon_log(&td2));
	/* detached (no -f): the command returns once the daemon serves, and the file
	 * names the daemon, not the process that returned */
	snprintf(p, sizeof(p), "%s/other.pid", td2.dir);
	snprintf(cmd, sizeof(cmd), "'%s' -c '%s' -P '%s' 2>>'%s'", cofferd_bin(), td2.conf, p,
		 td2.log);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "detached start: %d\n%s", st,
		  tdaemon_log(&td2));
	pid = pid_in(p);
	cr_assert_gt(pid, 0, "-P %s: no pid in it", p);
	cr_assert(running(pid), "pid %ld is not running", pid);
	assert_ping(&td2);
	snprintf(cmd, sizeof(cmd), "kill $(cat '%s')", p);
	cr_assert_eq(system(cmd), 0);
	/* not our child: wait for it to be gone, and its file with it */
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     (running(pid) || access(p, F_OK) == 0) && tdaemon_poll(end);)
		;
	cr_assert(!running(pid), "the detached daemon still runs");
	cr_assert_neq(access(p, F_OK), 0, "its pid file outlived it");
}
