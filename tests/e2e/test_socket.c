// SPDX-License-Identifier: MIT
/*
 * E2E: who owns the socket. A second cofferd finds the first one answering
 * and refuses to start (exit 1, naming the pid), leaving the socket and the
 * pools to it; a socket nobody listens on is replaced; a daemon that stops
 * removes its socket only if the path still names the inode it bound.
 *
 * Trust in the socket: the daemon refuses a socket directory another user
 * owns, that group or others may write, or that is a symlink; the client
 * sends nothing, not even HELLO, to a socket another uid serves unless
 * COFFER_SERVER_UID names that uid.
 */

#include <errno.h>
#include <poll.h>
#include <pwd.h>
#include <grp.h>
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

TDAEMON_FIXTURE2
static char out[16384];

TestSuite(socket, .init = setup, .fini = teardown, .timeout = 240);

static void assert_ping(void)
{
	int st = tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "ping");

	cr_assert_eq(st, 0, "ping: exit %d: %s\ndaemon:\n%s", st, out, tdaemon_log(&td));
}

/* A second daemon's config: its own state dir, the first one's socket. */
static void second_on_first_socket(void)
{
	tdaemon_init(&td2, NULL);
	tdaemon_write_conf(&td2, td.sock, "socket_mode = 0666\nlog_level = debug\n");
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
	/* the exit status, with a bound in case it runs after all; logging to a
	 * file, it still says why on the terminal it was started from */
	snprintf(cmd, sizeof(cmd),
		 "{ cat '%s'; echo 'log_target = %s/second.log'; } > '%s.file' && "
		 "timeout 30 '%s' -f -c '%s.file' 2>'%s/second.err'",
		 td2.conf, td2.dir, td2.conf, bin, td2.conf, td2.dir);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "second cofferd: status %d", st);
	snprintf(cmd, sizeof(cmd), "grep -q 'cofferd: .*already running' '%s/second.err'", td2.dir);
	cr_assert_eq(system(cmd), 0, "a cofferd logging to a file said nothing on stderr");
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

/* A second daemon with its socket at @sock; it must refuse to start, saying @why. */
static void assert_refused_dir(const char *sock, const char *why)
{
	tdaemon_init(&td2, NULL);
	tdaemon_write_conf(&td2, sock, "%s", "");
	cr_assert_neq(tdaemon_start(&td2), 0, "cofferd trusted the directory of %s:\n%s", sock,
		      tdaemon_log(&td2));
	cr_assert(strstr(tdaemon_log(&td2), why), "want '%s' in:\n%s", why, tdaemon_log(&td2));
	cr_assert_neq(access(sock, F_OK), 0, "a socket was made at %s", sock);
	tdaemon_cleanup(&td2);
}

/* Directory @name in the temp dir, made and then given to @pw; its path in @d. */
static void their_dir(const struct passwd *pw, const char *name, char *d, size_t len)
{
	snprintf(d, len, "%.1000s/%s", td.dir, name);
	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(chown(d, pw->pw_uid, pw->pw_gid), 0);
}

Test(socket, the_daemon_refuses_a_socket_directory_it_cannot_trust)
{
	static const struct {
		const char *dir, *sock, *why;
		mode_t mode;
	} loose[] = {
		{ "open", "sock", "is writable by group or others", 0777 },
		{ "group", "sock", "is writable by group or others", 0775 },
		{ "loose", "sub/sock", "not sticky", 0777 },
	};
	struct passwd *pw = getpwnam("nobody");
	char d[1200], s[1300], real[1200];

	if (geteuid() != 0 || !pw)
		tdaemon_skip(&td, "needs root and a 'nobody' user");
	/* made by another user, as /tmp/coffer-UID could be */
	their_dir(pw, "theirs", d, sizeof(d));
	snprintf(s, sizeof(s), "%s/sock", d);
	assert_refused_dir(s, "is owned by uid");
	/* ours, but others may write it; a parent others may write without the sticky bit */
	for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
		snprintf(d, sizeof(d), "%.1000s/%s", td.dir, loose[i].dir);
		cr_assert_eq(mkdir(d, 0755), 0);
		cr_assert_eq(chmod(d, loose[i].mode), 0);
		snprintf(s, sizeof(s), "%s/%s", d, loose[i].sock);
		assert_refused_dir(s, loose[i].why);
	}
	/* a symlink to a good directory: the link could be repointed */
	snprintf(real, sizeof(real), "%.1000s/real", td.dir);
	cr_assert_eq(mkdir(real, 0755), 0);
	snprintf(d, sizeof(d), "%.1000s/link", td.dir);
	cr_assert_eq(symlink(real, d), 0);
	snprintf(s, sizeof(s), "%s/sock", d);
	assert_refused_dir(s, "is a symbolic link");
	/* a missing directory is made, as the daemon's own */
	snprintf(s, sizeof(s), "%.1000s/fresh/sock", td.dir);
	second_on_first_socket();
	{
		struct stat st;

		tdaemon_write_conf(&td2, s, "%s", "");
		cr_assert_eq(tdaemon_start(&td2), 0, "%s", tdaemon_log(&td2));
		snprintf(d, sizeof(d), "%.1000s/fresh", td.dir);
		cr_assert_eq(lstat(d, &st), 0);
		cr_assert_eq(st.st_mode & 07777, 0755);
		cr_assert_eq(tdaemon_stop(&td2), 0, "%s", tdaemon_log(&td2));
	}
}

/*
 * A listener run by `nobody` at @path: for each of @n connections it
 * reports on @report how many bytes the client sent before hanging up
 * (or before 10 s passed), then closes it.
 */
static pid_t fake_server(const char *path, struct passwd *pw, int n, int *report)
{
	int fds[2], rfd[2];
	pid_t pid;
	char c;

	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(pipe(rfd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int l;

		close(fds[0]);
		close(rfd[0]);
		if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(3);
		l = socket(AF_UNIX, SOCK_STREAM, 0);
		memcpy(sa.sun_path, path, strlen(path) + 1);
		if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 4))
			_exit(4);
		if (write(fds[1], "r", 1) != 1)
			_exit(5);
		for (int i = 0; i < n; i++) {
			char buf[4096], line[32];
			ssize_t got = 0, r;
			int a;

			if (!tdaemon_wait_readable(l, 60000))
				_exit(6);
			a = accept(l, NULL, NULL);
			if (a < 0)
				_exit(7);
			while (tdaemon_wait_readable(a, 10000) && (r = read(a, buf, sizeof(buf))) > 0) {
				got += r;
				break; /* the first bytes say enough: hang up */
			}
			snprintf(line, sizeof(line), "%zd\n", got);
			if (write(rfd[1], line, strlen(line)) < 0)
				_exit(8);
			close(a);
		}
		_exit(0);
	}
	close(fds[1]);
	close(rfd[1]);
	cr_assert(tdaemon_wait_readable(fds[0], 30000), "the fake server did not start");
	cr_assert_eq(read(fds[0], &c, 1), 1, "the fake server failed");
	close(fds[0]);
	*report = rfd[0];
	return pid;
}

static long report_line(int fd)
{
	char buf[32];
	size_t n = 0;

	while (n < sizeof(buf) - 1 && tdaemon_wait_readable(fd, 30000) && read(fd, buf + n, 1) == 1) {
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	cr_assert_gt(n, 0, "no report from the fake server");
	return strtol(buf, NULL, 10);
}

Test(socket, the_client_sends_nothing_to_a_socket_another_uid_serves)
{
	struct passwd *pw = getpwnam("nobody");
	char d[1200], evil[1300], saved[sizeof(td.sock)], pfx[64], want[1600];
	int report, st, status;
	long got;
	pid_t pid;

	if (geteuid() != 0 || !pw)
		tdaemon_skip(&td, "needs root and a 'nobody' user");
	their_dir(pw, "evil", d, sizeof(d));
	snprintf(evil, sizeof(evil), "%s/sock", d);
	pid = fake_server(evil, pw, 2, &report);
	memcpy(saved, td.sock, sizeof(saved));
	snprintf(td.sock, sizeof(td.sock), "%.1000s", evil);
	/* root with a passphrase for it: not one byte may reach the listener */
	st = tdaemon_coffer(&td, NULL, tdaemon_file(&td, "pass", "captured passphrase\n", 20),
			    out, sizeof(out), "load-key tank/enc");
	got = report_line(report);
	cr_assert_eq(got, 0, "the client sent %ld bytes to a socket uid %u serves", got,
		     (unsigned)pw->pw_uid);
	cr_assert_eq(st, 1, "exit %d: %s", st, out);
	snprintf(want, sizeof(want),
		 "socket %s is served by uid %u, not root or you; set COFFER_SERVER_UID=%u to "
		 "trust it",
		 evil, (unsigned)pw->pw_uid, (unsigned)pw->pw_uid);
	cr_assert(strstr(out, want), "want '%s' in: %s", want, out);
	/* trusted by name: the client talks (and the fake server hangs up on it) */
	snprintf(pfx, sizeof(pfx), "COFFER_SERVER_UID=%u", (unsigned)pw->pw_uid);
	st = tdaemon_coffer(&td, pfx, NULL, out, sizeof(out), "ping");
	got = report_line(report);
	memcpy(td.sock, saved, sizeof(saved));
	cr_assert_gt(got, 0, "COFFER_SERVER_UID did not make the client trust uid %u: %s",
		     (unsigned)pw->pw_uid, out);
	cr_assert_eq(st, 1, "exit %d: %s", st, out);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fake server status %d", status);
	close(report);
	/* the real daemon, root's, is trusted as before */
	assert_ping();
}
