// SPDX-License-Identifier: MIT
/*
 * E2E: who owns the socket. A second cofferd finds the first one answering
 * and refuses to start (exit 1, naming the pid), leaving the socket and the
 * pools to it; a socket nobody listens on is replaced; a daemon that stops
 * removes its socket only if the path still names the inode it bound.
 */
#include <config.h> /* the autoconf header: _GNU_SOURCE */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"

static struct tdaemon td, td2;
static char out[16384];

static void setup(void)
{
	tdaemon_init(&td, NULL);
	cr_assert_eq(tdaemon_start(&td), 0, "cofferd did not become ready:\n%s", tdaemon_log(&td));
}

static void teardown(void)
{
	int st;

	if (td2.dir[0])
		tdaemon_cleanup(&td2);
	if (!td.dir[0])
		return;
	st = tdaemon_stop(&td);
	if (st != 0)
		cr_log_error("cofferd exit %d:\n%s", st, tdaemon_log(&td));
	cr_expect_eq(st, 0, "cofferd did not exit 0 on SIGTERM");
	tdaemon_cleanup(&td);
}

TestSuite(socket, .init = setup, .fini = teardown, .timeout = 90);

static void assert_ping(void)
{
	int st = tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "ping");

	cr_assert_eq(st, 0, "ping: exit %d: %s\ndaemon:\n%s", st, out, tdaemon_log(&td));
}

/* A second daemon's config: its own state dir, the first one's socket. */
static void second_on_first_socket(void)
{
	FILE *f;

	tdaemon_init(&td2, NULL);
	f = fopen(td2.conf, "w");
	cr_assert_not_null(f);
	fprintf(f, "[cofferd]\nsocket = %s\nsocket_mode = 0666\nstate_dir = %s\nlog_level = debug\n",
		td.sock, td2.state);
	fclose(f);
}

static void bound_socket(const char *path, int do_listen, int *fd, struct stat *st)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	*fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(*fd, 0);
	cr_assert_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	cr_assert_eq(bind(*fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s: %s", path,
		     strerror(errno));
	if (do_listen)
		cr_assert_eq(listen(*fd, 8), 0);
	cr_assert_eq(lstat(path, st), 0);
}

Test(socket, a_second_daemon_refuses_a_live_socket_and_leaves_it_to_the_first)
{
	struct stat before, after;
	char cmd[8192], want[4300];
	const char *bin = getenv("COFFERD") ? getenv("COFFERD") : "../../daemon/cofferd";
	int st;

	cr_assert_eq(lstat(td.sock, &before), 0);
	second_on_first_socket();
	cr_assert_neq(tdaemon_start(&td2), 0, "a second cofferd started on a live socket:\n%s",
		      tdaemon_log(&td2));
	snprintf(want, sizeof(want), "cofferd already running (pid %d) at %s", (int)td.pid,
		 td.sock);
	cr_assert(strstr(tdaemon_log(&td2), want), "want '%s' in:\n%s", want, tdaemon_log(&td2));
	/* the exit status, with a bound in case it runs after all */
	snprintf(cmd, sizeof(cmd), "timeout 30 '%s' -f -c '%s' 2>/dev/null", bin, td2.conf);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "second cofferd: status %d", st);
	/* the first one still owns the same socket file and answers on it */
	cr_assert_eq(lstat(td.sock, &after), 0, "the socket is gone");
	cr_assert(after.st_ino == before.st_ino && after.st_dev == before.st_dev,
		  "the socket file was replaced");
	assert_ping();
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	/* with the first one gone its socket is stale: the second one may start now */
	cr_assert_eq(tdaemon_start(&td2), 0, "%s", tdaemon_log(&td2));
	cr_assert_eq(tdaemon_stop(&td2), 0, "%s", tdaemon_log(&td2));
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
}

Test(socket, a_stale_socket_is_replaced)
{
	struct stat stale, now;
	int fd;

	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	/* bound, never listened on, closed: connect() to it is refused */
	bound_socket(td.sock, 0, &fd, &stale);
	close(fd);
	cr_assert_eq(tdaemon_start(&td), 0, "stale socket not replaced:\n%s", tdaemon_log(&td));
	cr_assert_eq(lstat(td.sock, &now), 0);
	assert_ping();
}

Test(socket, a_stopping_daemon_removes_only_the_socket_it_bound)
{
	struct stat theirs, now;
	int fd;

	/* someone else's socket now sits at the path */
	cr_assert_eq(unlink(td.sock), 0);
	bound_socket(td.sock, 1, &fd, &theirs);
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_eq(lstat(td.sock, &now), 0, "the stopping daemon removed a socket not its own");
	cr_assert_eq(now.st_ino, theirs.st_ino);
	close(fd);
	/* our own socket goes at a clean stop */
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	assert_ping();
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_neq(lstat(td.sock, &now), 0, "the daemon left its socket behind");
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
}
