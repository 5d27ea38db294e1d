// SPDX-License-Identifier: MIT
/*
 * E2E: limits a local user cannot push the daemon past. Idle connections
 * of one uid stop at max_connections_per_uid, non-admins leave the
 * admin_connections slots alone, and root's ping still answers; a frame
 * before HELLO larger than a HELLO closes the connection without its body
 * being kept (VmRSS of the daemon); connections without HELLO or without
 * traffic are closed after hello_timeout and idle_timeout; one uid has at
 * most max_requests_per_uid requests in flight; requests over
 * max_buffered wait instead of failing or hanging; and a burst of
 * connections while the loop is busy waits in the listen backlog.
 *
 * Every wait is for an event (a reply, a hang-up, a report on a pipe) with
 * a generous deadline; nothing sleeps for a fixed time.
 */

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"

static struct tdaemon td;
static char out[65536];

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(limits, .fini = teardown, .timeout = 240);

static void start(const char *extra)
{
	tdaemon_init(&td, extra);
	tdaemon_start_ok(&td);
}

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memcpy(sa.sun_path, td.sock, strlen(td.sock) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Read one reply header within @ms. @return 1, 0 (EOF or nothing in time) */
static int read_hdr(int fd, struct proto_hdr *h, int ms)
{
	uint8_t b[PROTO_HDR_SIZE];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t r;

		if (!tdaemon_wait_readable(fd, ms))
			return 0;
		r = read(fd, b + got, sizeof(b) - got);
		if (r <= 0)
			return 0;
		got += (size_t)r;
	}
	proto_hdr_get(b, h);
	return 1;
}

/* Until EOF within @ms (replies on the way are skipped). @return 1 if closed */
static int wait_closed(int fd, int ms)
{
	char buf[4096];

	for (;;) {
		ssize_t r;

		if (!tdaemon_wait_readable(fd, ms))
			return 0;
		r = read(fd, buf, sizeof(buf));
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return 1;
		if (r < 0)
			return 0;
	}
}

static void assert_root_ping(void)
{
	/* a generous bound, so that a daemon that never answers fails the test */
	int st = tdaemon_coffer(&td, "timeout 10", NULL, out, sizeof(out), "ping");

	cr_assert_eq(st, 0, "root's ping: exit %d: %s\ndaemon:\n%s", st, out, tdaemon_log(&td));
}

/*
 * A child run as `nobody`: it goes on while the parent holds @hold open and
 * tells the parent how it went in one line on @verdict.
 */
struct nobody {
	pid_t pid;
	int hold;    /* the parent's write end (close to let the child go), the child's read end */
	int verdict; /* the parent's read end, the child's write end */
};

/* Fork @nb; @return true in the child, which runs as nobody from here on. */
static bool nobody_fork(struct nobody *nb)
{
	struct passwd *pw = getpwnam("nobody");
	int h[2], v[2];

	cr_assert_not_null(pw);
	cr_assert_eq(pipe(h), 0);
	cr_assert_eq(pipe(v), 0);
	nb->pid = fork();
	cr_assert_geq(nb->pid, 0);
	if (nb->pid == 0) {
		close(h[1]);
		close(v[0]);
		nb->hold = h[0];
		nb->verdict = v[1];
		if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(3);
		return true;
	}
	close(h[0]);
	close(v[1]);
	nb->hold = h[1];
	nb->verdict = v[0];
	return false;
}

/* Let @nb's child go and expect it to exit 0. */
static void nobody_done(struct nobody *nb, const char *who)
{
	int st;

	close(nb->hold);
	close(nb->verdict);
	cr_assert_eq(waitpid(nb->pid, &st, 0), nb->pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s status %d", who, st);
}

/*
 * As `nobody`: open @n_ok connections that never say HELLO, each accepted
 * (no reply), then one more that must be refused with EUSERS. The child
 * holds them until the parent lets it go; its verdict is on nb->verdict.
 */
static void nobody_fills(int n_ok, struct nobody *nb)
{
	if (nobody_fork(nb)) {
		int *fds = calloc((size_t)n_ok + 1, sizeof(int)), extra, bad = 0;
		FILE *f = fdopen(nb->verdict, "w");
		struct proto_hdr hd;
		char c;

		if (!fds || !f)
			_exit(3);
		for (int i = 0; i < n_ok; i++) {
			fds[i] = raw_connect();
			if (fds[i] < 0) {
				fprintf(f, "connect %d: %s\n", i, strerror(errno));
				fclose(f);
				_exit(4);
			}
		}
		extra = raw_connect();
		if (extra < 0 || !read_hdr(extra, &hd, 10000)) {
			fprintf(f, "connection %d was not refused\n", n_ok + 1);
			fclose(f);
			_exit(5);
		}
		/* accepts are handled in order: the ones before were all taken in */
		for (int i = 0; i < n_ok; i++)
			bad += tdaemon_wait_readable(fds[i], 0);
		fprintf(f, "refused %d, %d of %d earlier ones answered\n", hd.status, bad, n_ok);
		fclose(f);
		/* hold them until the parent is done */
		if (read(nb->hold, &c, 1) < 0)
			_exit(6);
		_exit(0);
	}
}

static void read_verdict(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n < cap - 1 && tdaemon_wait_readable(fd, 60000)) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);

		if (r <= 0)
			break;
		n += (size_t)r;
		if (buf[n - 1] == '\n')
			break;
	}
	buf[n] = '\0';
}

static void fill_and_ping(int n_ok)
{
	char verdict[256], want[64];
	struct nobody nb;

	nobody_fills(n_ok, &nb);
	read_verdict(nb.verdict, verdict, sizeof(verdict));
	snprintf(want, sizeof(want), "refused %d, 0 of %d", -EUSERS, n_ok);
	cr_assert(strstr(verdict, want), "nobody: '%s' (want '%s')\ndaemon:\n%s", verdict, want,
		  tdaemon_log(&td));
	/* the non-admin holds what it may: root still gets in and is answered */
	assert_root_ping();
	nobody_done(&nb, "child");
}

Test(limits, idle_connections_of_one_uid_stop_at_its_limit_and_root_still_gets_in)
{
	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root and a 'nobody' user");
	start("max_connections = 64\nmax_connections_per_uid = 40\nhello_timeout = 300\n");
	fill_and_ping(40);
	cr_assert(strstr(tdaemon_log(&td), "40 connections per uid is the limit"), "%s",
		  tdaemon_log(&td));
}

Test(limits, a_non_admin_flood_leaves_the_admin_slots_free)
{
	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root and a 'nobody' user");
	start("max_connections = 32\nadmin_connections = 8\nmax_connections_per_uid = 64\n"
	      "hello_timeout = 300\n");
	fill_and_ping(24);
	cr_assert(strstr(tdaemon_log(&td), "the last 8 of 32 connections are kept for administrators"),
		  "%s", tdaemon_log(&td));
}

/* The kernel's cap on a listen backlog (net.core.somaxconn), or -1. */
static long somaxconn(void)
{
	FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/*
 * A burst of clients while the loop cannot accept (the daemon stopped)
 * waits in the listen backlog, none refused with EAGAIN: fio opens one NBD
 * connection per job, 192 at once in the reference benchmark, and a backlog
 * of 128 refused the rest. Then the daemon goes on and answers.
 */
Test(limits, a_burst_of_connections_while_the_loop_is_busy_waits_in_the_backlog)
{
	enum { BURST = 300 };
	int fds[BURST], refused = 0, first_errno = 0, st, nfd = 0;

	if (somaxconn() < BURST + 1)
		cr_skip_test("net.core.somaxconn is %ld, below %d", somaxconn(), BURST + 1);
	start("max_connections = 1024\nmax_connections_per_uid = 1024\nhello_timeout = 300\n");
	cr_assert_eq(kill(td.pid, SIGSTOP), 0);
	cr_assert_eq(waitpid(td.pid, &st, WUNTRACED), td.pid);
	cr_assert(WIFSTOPPED(st));
	/* no assertion while it is stopped: a stopped daemon would hang the teardown */
	for (; nfd < BURST; nfd++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		fds[nfd] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fds[nfd] < 0)
			break;
		memcpy(sa.sun_path, td.sock, strlen(td.sock) + 1);
		if (connect(fds[nfd], (struct sockaddr *)&sa, sizeof(sa)) < 0 && !refused++)
			first_errno = errno;
	}
	cr_assert_eq(kill(td.pid, SIGCONT), 0);
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
	cr_assert_eq(nfd, BURST, "socket %d: %s", nfd, strerror(errno));
	cr_assert_eq(refused, 0, "%d of %d connections refused, the first with %s", refused, BURST,
		     strerror(first_errno));
	assert_root_ping();
}

static long vmrss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	cr_assert_geq(kib, 0);
	return kib;
}

/* Connect and start a 16 MiB WRITE before HELLO: header, then body until refused. */
static int big_frame_before_hello(void)
{
	static uint8_t chunk[1 << 16];
	const uint32_t len = 16u << 20;
	struct proto_hdr h = { .len = len, .op = PROTO_OP_WRITE, .req_id = 77 };
	uint8_t hdr[PROTO_HDR_SIZE];
	size_t left = len - 1; /* one byte short: a daemon that buffers keeps it all */
	int fd = raw_connect();

	cr_assert_geq(fd, 0, "connect: %s", strerror(errno));
	proto_hdr_put(hdr, &h);
	cr_assert_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
	while (left) {
		ssize_t n = send(fd, chunk, left < sizeof(chunk) ? left : sizeof(chunk),
				 MSG_NOSIGNAL);

		if (n <= 0)
			break; /* EPIPE or ECONNRESET: the daemon hung up, as it should */
		left -= (size_t)n;
	}
	return fd;
}

static void assert_refused_and_closed(int fd)
{
	struct proto_hdr h;

	cr_assert(read_hdr(fd, &h, 10000), "no reply to a 16 MiB frame before hello");
	cr_assert_eq(h.status, -EPROTO);
	cr_assert_eq(h.req_id, 77u);
	cr_assert(wait_closed(fd, 10000), "connection not closed");
	close(fd);
}

Test(limits, a_big_frame_before_hello_is_refused_unread_and_costs_no_memory)
{
	enum { N = 24 };
	int fds[N];
	long before, after;

	start(NULL);
	/* warm up the paths once, so that their first allocations are not counted */
	for (int i = 0; i < 2; i++)
		close(big_frame_before_hello());
	before = vmrss_kib(td.pid);
	for (int i = 0; i < N; i++)
		fds[i] = big_frame_before_hello();
	after = vmrss_kib(td.pid);
	cr_log_info("VmRSS %ld kB before, %ld kB with %d connections", before, after, N);
	cr_assert_lt(after - before, 8 << 10, "VmRSS grew by %ld kB over %d frames before hello",
		     after - before, N);
	for (int i = 0; i < N; i++)
		assert_refused_and_closed(fds[i]);
	assert_root_ping();
}

Test(limits, connections_without_hello_or_traffic_are_closed_after_their_timeouts)
{
	struct coffer_conn *c = NULL;
	int raw, ret;

	start("hello_timeout = 1\nidle_timeout = 2\n");
	raw = raw_connect();
	cr_assert_geq(raw, 0);
	ret = coffer_connect(td.sock, &c);
	cr_assert_eq(ret, 0, "connect: %s", strerror(-ret));
	/* generous deadlines: the timeouts are 1 s and 2 s, checked every second */
	cr_assert(wait_closed(raw, 30000), "a connection without hello stayed open");
	cr_assert(wait_closed(coffer_fd(c), 30000), "an idle connection stayed open");
	coffer_close(c);
	close(raw);
	cr_assert(strstr(tdaemon_log(&td), "no hello within 1 s: closed"), "%s", tdaemon_log(&td));
	cr_assert(strstr(tdaemon_log(&td), "idle for 2 s: closed"), "%s", tdaemon_log(&td));
	/* a busy connection is not idle: this one is answered after the sweep */
	assert_root_ping();
}

Test(limits, one_uid_has_at_most_max_requests_per_uid_in_flight)
{
	enum { N = 100 };
	uint8_t *frames = calloc(N, PROTO_HDR_SIZE + 2);
	struct coffer_conn *c = NULL;
	json_t *stats;
	json_int_t peak;
	int ret;

	start("max_requests_per_uid = 4\n");
	ret = coffer_connect(td.sock, &c);
	cr_assert_eq(ret, 0, "connect: %s", strerror(-ret));
	/* 100 stats calls (run off the loop) in one burst on one connection */
	for (int i = 0; i < N; i++) {
		struct proto_hdr h = { .len = 2, .op = PROTO_OP_STATS, .req_id = (uint32_t)i + 1 };
		uint8_t *p = frames + (size_t)i * (PROTO_HDR_SIZE + 2);

		proto_hdr_put(p, &h);
		memcpy(p + PROTO_HDR_SIZE, "{}", 2);
	}
	cr_assert_eq(coffer_send_raw(c, frames, (size_t)N * (PROTO_HDR_SIZE + 2)), 0);
	for (int i = 0; i < N; i++) {
		struct proto_hdr h;

		cr_assert_eq(coffer_recv_raw(c, &h, out, sizeof(out), 30000), 1,
			     "reply %d of %d missing\n%s", i, N, tdaemon_log(&td));
		cr_assert_eq(h.status, 0);
	}
	coffer_close(c);
	free(frames);
	TDAEMON_COF_OK(&td, out, NULL, "--json-int stats");
	stats = json_loads(out, 0, NULL);
	cr_assert_not_null(stats, "%s", out);
	peak = json_integer_value(json_object_get(json_object_get(stats, "io"), "inflight_peak"));
	json_decref(stats);
	cr_assert_leq(peak, 4, "%lld requests of one uid were in flight", (long long)peak);
	cr_assert_geq(peak, 1);
}

Test(limits, requests_over_max_buffered_wait_and_all_complete)
{
	enum { N = 64, LEN = 256 << 10 };
	struct coffer_completion cc[N];
	struct coffer_conn *c = NULL;
	uint8_t *buf = malloc(LEN);
	int h, ret, done = 0;

	start("max_buffered = 1M\nmax_frame = 1M\n");
	TDAEMON_COF_OK(&td, out, NULL, "pool create -s 64M tank %s/l0", td.dir);
	TDAEMON_COF_OK(&td, out, NULL, "create -V 16M tank/v");
	ret = coffer_connect(td.sock, &c);
	cr_assert_eq(ret, 0, "connect: %s", strerror(-ret));
	h = coffer_ds_open(c, "tank/v", NULL, NULL);
	cr_assert_geq(h, 0, "ds_open: %s", strerror(-h));
	memset(buf, 0x5a, LEN);
	/* 16 MiB of writes at once against a 1 MiB cap */
	for (int i = 0; i < N; i++)
		cr_assert_eq(coffer_submit(c, (uint32_t)i, COFFER_WRITE, h, (uint64_t)i * LEN, LEN,
					   buf),
			     0);
	cr_assert_eq(coffer_flush_out(c), 0);
	while (done < N) {
		int n = coffer_reap(c, cc, N, 30000);

		cr_assert_gt(n, 0, "%d of %d writes answered\n%s", done, N, tdaemon_log(&td));
		for (int i = 0; i < n; i++)
			cr_assert_eq(cc[i].status, 0, "write %u: %d", cc[i].id, cc[i].status);
		done += n;
	}
	coffer_close(c);
	free(buf);
	cr_assert(strstr(tdaemon_log(&td), "reached max_buffered"), "no pause:\n%s",
		  tdaemon_log(&td));
	assert_root_ping();
}

/* As `nobody`: @n connections that pipeline PINGs as fast as the daemon takes
 * them, reading the replies, until the pipe closes; "flooding" once going. */
static void nobody_floods(int n, struct nobody *nb)
{
	if (nobody_fork(nb)) {
		static uint8_t batch[256 * PROTO_HDR_SIZE], junk[65536];
		struct pollfd pf[33];
		uint64_t replies = 0;
		int told = 0;

		if (n > 32)
			_exit(3);
		for (int i = 0; i < 256; i++) {
			struct proto_hdr hd = { .len = 0, .op = PROTO_OP_PING, .req_id = (uint32_t)i };
			proto_hdr_put(batch + i * PROTO_HDR_SIZE, &hd);
		}
		for (int i = 0; i < n; i++) {
			uint8_t hello[PROTO_HDR_SIZE + PROTO_HELLO_BODY], *b = hello + PROTO_HDR_SIZE;
			struct proto_hdr hd = { .len = PROTO_HELLO_BODY, .op = PROTO_OP_HELLO };

			pf[i].fd = raw_connect();
			if (pf[i].fd < 0)
				_exit(4);
			proto_hdr_put(hello, &hd);
			for (int k = 0; k < 4; k++)
				b[k] = (uint8_t)(PROTO_MAGIC >> (24 - 8 * k));
			b[4] = 0, b[5] = 1, b[6] = 0, b[7] = (uint8_t)PROTO_VERSION;
			if (write(pf[i].fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello))
				_exit(5);
			pf[i].events = POLLIN | POLLOUT;
		}
		pf[n] = (struct pollfd){ .fd = nb->hold, .events = POLLIN };
		for (;;) {
			if (poll(pf, (nfds_t)n + 1, 60000) <= 0 || pf[n].revents)
				_exit(0); /* the parent is done */
			for (int i = 0; i < n; i++) {
				if (pf[i].revents & POLLIN) {
					ssize_t r = read(pf[i].fd, junk, sizeof(junk));
					if (r <= 0)
						_exit(6);
					replies += (uint64_t)r / PROTO_HDR_SIZE;
				}
				if ((pf[i].revents & POLLOUT) &&
				    write(pf[i].fd, batch, sizeof(batch)) < 0 && errno != EAGAIN)
					_exit(7);
			}
			if (!told && replies > 10000) {
				if (write(nb->verdict, "flooding\n", 9) != 9)
					_exit(8);
				told = 1;
			}
		}
	}
}

/* A flood of cheap calls on other connections must not keep root waiting. */
Test(limits, a_flood_of_pipelined_calls_does_not_hold_up_roots_ping)
{
	char verdict[64];
	struct nobody nb;

	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root and a 'nobody' user");
	start(NULL);
	nobody_floods(8, &nb);
	read_verdict(nb.verdict, verdict, sizeof(verdict));
	cr_assert(strstr(verdict, "flooding"), "the flood did not start: '%s'\n%s", verdict,
		  tdaemon_log(&td));
	for (int i = 0; i < 5; i++)
		assert_root_ping(); /* each within its generous bound, while the flood goes on */
	nobody_done(&nb, "flooder");
}
