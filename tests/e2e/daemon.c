// SPDX-License-Identifier: MIT
/*
 * E2E fixture: spawn cofferd on a temp socket with a temp config, wait for
 * READY=1 on a NOTIFY_SOCKET datagram socket bound here (the path systemd's
 * Type=notify takes), stop it with SIGTERM and check the exit status, and
 * run the coffer binary against it. Everything lives under
 * ${TMPDIR:-/tmp}/coffer-e2e.XXXXXX and is removed afterwards.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

static const char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v && v[0] ? v : def;
}

/*
 * @line of the config every test gets, unless the test's own lines
 * (@extra) set @key: the daemon refuses an option set twice.
 */
static const char *unless_set(const char *extra, const char *key, const char *line)
{
	return extra && strstr(extra, key) ? "" : line;
}

/*
 * The loops line of a test's config: COFFER_TEST_LOOPS (make check runs
 * the e2e suites with 4 loops on 2 cores, so that connections of one test
 * land on different loops; 1 runs them as a single loop), unless the test
 * sets loops itself.
 */
static const char *test_loops(const char *extra)
{
	static char line[32];

	snprintf(line, sizeof(line), "loops = %.8s\n", env_or("COFFER_TEST_LOOPS", "4"));
	return unless_set(extra, "loops", line);
}

void tdaemon_init(struct tdaemon *d, const char *extra)
{
	FILE *f;

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	snprintf(d->dir, sizeof(d->dir), "%s/coffer-e2e.XXXXXX", env_or("TMPDIR", "/tmp"));
	cr_assert_not_null(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
	/* others (the `nobody` client) must reach the socket */
	chmod(d->dir, 0755);
	snprintf(d->sock, sizeof(d->sock), "%.1000s/sock", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%.1000s/cofferd.conf", d->dir);
	snprintf(d->state, sizeof(d->state), "%.1000s/state", d->dir);
	snprintf(d->log, sizeof(d->log), "%.1000s/cofferd.log", d->dir);
	snprintf(d->notify, sizeof(d->notify), "%.1000s/notify", d->dir);
	f = fopen(d->conf, "w");
	cr_assert_not_null(f);
	fprintf(f,
		"[cofferd]\n"
		"socket = %s\n"
		"socket_mode = 0666\n"
		"state_dir = %s\n"
		"log_level = debug\n"
		"log_target = stderr\n"
		"workers = 2\n"
		"%s%s%s%s",
		d->sock, d->state, unless_set(extra, "txg_timeout", "txg_timeout = 1\n"),
		test_loops(extra),
		/* the host's block devices are no test's business */
		unless_set(extra, "lun_search", "lun_search =\n"), extra ? extra : "");
	fclose(f);
}

const char *tdaemon_log(struct tdaemon *d)
{
	static char buf[16384];
	int fd = open(d->log, O_RDONLY);
	ssize_t n = 0;
	off_t size;

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	/* the tail is what explains a failure */
	size = lseek(fd, 0, SEEK_END);
	lseek(fd, size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

int tdaemon_start(struct tdaemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *bin = env_or("COFFERD", "../../daemon/cofferd");
	struct pollfd p;
	int nfd, ret = -1;
	ssize_t n;

	unlink(d->notify);
	nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(nfd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", d->notify);
	cr_assert_eq(bind(nfd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s: %s", d->notify,
		     strerror(errno));
	d->pid = fork();
	cr_assert_geq(d->pid, 0);
	if (d->pid == 0) {
		int lfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		dup2(lfd, 2);
		dup2(lfd, 1);
		setenv("NOTIFY_SOCKET", d->notify, 1);
		/* leaks show at exit; the test reads them from the log */
		setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23", 0);
		execl(bin, "cofferd", "-f", "-c", d->conf, (char *)NULL);
		_exit(127);
	}
	p = (struct pollfd){ .fd = nfd, .events = POLLIN };
	/* generous: a loaded machine under sanitizers starts slowly */
	for (int waited = 0; waited < 120000; waited += 100) {
		if (poll(&p, 1, 100) > 0) {
			n = recv(nfd, d->ready_msg, sizeof(d->ready_msg) - 1, 0);
			if (n > 0) {
				d->ready_msg[n] = '\0';
				if (strstr(d->ready_msg, "READY=1")) {
					ret = 0;
					break;
				}
			}
		}
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = -1;
			break;
		}
	}
	close(nfd);
	return ret;
}

int tdaemon_stop(struct tdaemon *d)
{
	int status;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	for (double end = tdaemon_deadline(60);;) {
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = -1;
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		}
		if (!tdaemon_poll(end))
			break;
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &status, 0);
	d->pid = -1;
	return -1;
}

void tdaemon_write_conf(struct tdaemon *d, const char *sock, const char *fmt, ...)
{
	FILE *f = fopen(d->conf, "w");
	va_list ap;

	cr_assert_not_null(f, "%s: %s", d->conf, strerror(errno));
	fprintf(f, "[cofferd]\nsocket = %s\nstate_dir = %s\n%s%s", sock ? sock : d->sock, d->state,
		unless_set(fmt, "lun_search", "lun_search =\n"), test_loops(fmt));
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

void tdaemon_start_ok(struct tdaemon *d)
{
	cr_assert_eq(tdaemon_start(d), 0, "cofferd did not become ready:\n%s", tdaemon_log(d));
}

void tdaemon_setup(struct tdaemon *d, const char *extra)
{
	tdaemon_init(d, extra);
	tdaemon_start_ok(d);
}

void tdaemon_setup_lun_dir(struct tdaemon *d)
{
	char path[PATH_MAX / 4 + 8];

	tdaemon_init(d, NULL);
	snprintf(path, sizeof(path), "%s/l", d->dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	tdaemon_write_conf(d, NULL, "lun_search = %s/l\n", d->dir);
	tdaemon_start_ok(d);
}

void tdaemon_stop_ok(struct tdaemon *d)
{
	int st;

	if (d->pid <= 0)
		return; /* the test stopped it and checked the exit itself */
	st = tdaemon_stop(d);
	if (st != 0)
		cr_log_error("cofferd exit %d:\n%s", st, tdaemon_log(d));
	cr_expect_eq(st, 0, "cofferd did not exit 0 on SIGTERM");
}

void tdaemon_teardown(struct tdaemon *d)
{
	if (!d->dir[0])
		return; /* the test cleaned up already (tdaemon_skip) */
	tdaemon_stop_ok(d);
	tdaemon_cleanup(d);
}

void tdaemon_cleanup(struct tdaemon *d)
{
	char cmd[PATH_MAX];

	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = -1;
	}
	if (d->dir[0] && !getenv("COFFER_E2E_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cleanup of %s failed\n", d->dir);
	}
	d->dir[0] = '\0'; /* cleaned up: a later teardown has nothing to do */
}

int tdaemon_coffer(struct tdaemon *d, const char *prefix, const char *in_file, char *out,
		   size_t cap, const char *args)
{
	const char *bin = env_or("COFFER", "../../client/coffer");
	char cmd[8192], outp[PATH_MAX];
	int status, fd;
	ssize_t n;

	snprintf(outp, sizeof(outp), "%s/coffer.out", d->dir);
	/* our redirections first, so that a "> FILE" in @args takes stdout over */
	snprintf(cmd, sizeof(cmd), "%s '%s' -S '%s' < '%s' > '%s' 2>&1 %s", prefix ? prefix : "",
		 bin, d->sock, in_file ? in_file : "/dev/null", outp, args);
	status = system(cmd);
	if (out && cap) {
		out[0] = '\0';
		fd = open(outp, O_RDONLY);
		if (fd >= 0) {
			n = read(fd, out, cap - 1);
			out[n > 0 ? n : 0] = '\0';
			close(fd);
		}
	}
	if (status < 0 || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

const char *tdaemon_file(struct tdaemon *d, const char *name, const void *data, size_t len)
{
	static char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", d->dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
	return path;
}

void tdaemon_random_file(struct tdaemon *d, const char *name, size_t len, char *path, size_t cap)
{
	uint8_t *buf = malloc(len);

	cr_assert_not_null(buf);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(rand() >> 7);
	snprintf(path, cap, "%s", tdaemon_file(d, name, buf, len));
	free(buf);
}

int tdaemon_cofferf(struct tdaemon *d, const char *in_file, char *out, size_t cap,
		    const char *fmt, ...)
{
	char args[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return tdaemon_coffer(d, NULL, in_file, out, cap, args);
}

double tdaemon_deadline(double seconds)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
}

bool tdaemon_poll(double deadline)
{
	if (tdaemon_deadline(0) >= deadline)
		return false;
	poll(NULL, 0, 20);
	return true;
}

int tdaemon_wait_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r > 0;
}

json_t *tdaemon_coffer_json(struct tdaemon *d, const char *args)
{
	static char out[1 << 16];
	json_error_t e;
	json_t *j;
	int st = tdaemon_coffer(d, NULL, NULL, out, sizeof(out), args);

	cr_assert_eq(st, 0, "coffer %s: exit %d: %s\ndaemon:\n%s", args, st, out, tdaemon_log(d));
	j = json_loads(out, 0, &e);
	cr_assert_not_null(j, "coffer %s is not JSON: %s\n%s", args, e.text, out);
	return j;
}

/* The root vdev of a pool entry of pool status -j: the one value of its "vdevs". */
static json_t *status_root(json_t *pool)
{
	void *it = json_object_iter(json_object_get(pool, "vdevs"));

	return it ? json_object_iter_value(it) : NULL;
}

json_t *tdaemon_status_vdev(json_t *pool, size_t n)
{
	const char *k;
	json_t *v;

	json_object_foreach(json_object_get(status_root(pool), "vdevs"), k, v)
		if (n-- == 0)
			return v;
	return NULL;
}

size_t tdaemon_status_nvdevs(json_t *pool)
{
	return json_object_size(json_object_get(status_root(pool), "vdevs"));
}

/* A number of a -j document: an integer with --json-int, else a string of digits. */
static long long doc_number(json_t *v)
{
	return json_is_string(v) ? strtoll(json_string_value(v), NULL, 10)
				 : (long long)json_integer_value(v);
}

json_t *tdaemon_status_lun(json_t *pool, size_t i)
{
	const char *k, *k2;
	json_t *v, *side;

	json_object_foreach(json_object_get(status_root(pool), "vdevs"), k, v) {
		if (!json_object_get(v, "vdevs") &&
		    doc_number(json_object_get(v, "index")) == (long long)i)
			return v;
		json_object_foreach(json_object_get(v, "vdevs"), k2, side)
			if (doc_number(json_object_get(side, "index")) == (long long)i)
				return side;
	}
	return NULL;
}

const char *tdaemon_path(struct tdaemon *d, const char *fmt, ...)
{
	static char path[8][PATH_MAX];
	static int k;
	char *p = path[k++ % 8], name[PATH_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	snprintf(p, PATH_MAX, "%s/%s", d->dir, name);
	return p;
}
