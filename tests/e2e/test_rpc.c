// SPDX-License-Identifier: MIT
/*
 * E2E: the daemon's side of the protocol, through client.h and raw frames:
 * READY on NOTIFY_SOCKET, HELLO, malformed frames of every kind answered or
 * closed while another connection carries on, permissions of a non-admin
 * uid, connection limits and a clean SIGTERM.
 */

#include <errno.h>
#include <grp.h>
#include <sys/types.h>
#include <pwd.h>
#include <signal.h>
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
#include "proto.h"
#include "store.h"

TDAEMON_FIXTURE("max_connections = 8\nmax_frame = 1M\n")

TestSuite(rpc, .init = setup, .fini = teardown, .timeout = 240);

static struct coffer_conn *conn(void)
{
	struct coffer_conn *c = NULL;
	int ret = coffer_connect(td.sock, &c);

	cr_assert_eq(ret, 0, "connect: %s", strerror(-ret));
	return c;
}

/* A connection that has only said HELLO, for raw frames. */
static void frame(uint8_t *buf, uint32_t len, uint16_t op, uint32_t id)
{
	struct proto_hdr h = { .len = len, .op = op, .req_id = id };

	proto_hdr_put(buf, &h);
}

static void assert_alive(void)
{
	struct coffer_conn *c = conn();
	json_t *r = NULL;
	char err[256];

	cr_assert_eq(coffer_call(c, "ping", NULL, &r, err, sizeof(err)), 0, "ping: %s", err);
	cr_assert(json_is_true(json_object_get(r, "pong")));
	json_decref(r);
	coffer_close(c);
}

Test(rpc, daemon_reports_ready_on_notify_socket_like_systemd)
{
	cr_assert(strstr(td.ready_msg, "READY=1"), "got '%s'", td.ready_msg);
	cr_assert(strstr(td.ready_msg, "MAINPID="), "got '%s'", td.ready_msg);
}

Test(rpc, ping_and_version_answer)
{
	struct coffer_conn *c = conn();
	json_t *r = NULL;
	char err[256];

	cr_assert_eq(coffer_call(c, "version", NULL, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(json_string_value(json_object_get(r, "version")), PACKAGE_VERSION);
	cr_assert_eq(json_integer_value(json_object_get(r, "protocol")), PROTO_VERSION);
	json_decref(r);
	coffer_close(c);
	assert_alive();
}

/* A bare socket, no HELLO. */
static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", td.sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static ssize_t read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);

		if (r <= 0)
			return r;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

Test(rpc, request_before_hello_is_refused_and_closed)
{
	uint8_t buf[PROTO_HDR_SIZE + 64];
	struct proto_hdr h;
	int fd = raw_connect();

	frame(buf, 2, PROTO_OP_PING, 9);
	memcpy(buf + PROTO_HDR_SIZE, "{}", 2);
	cr_assert_eq(write(fd, buf, PROTO_HDR_SIZE + 2), PROTO_HDR_SIZE + 2);
	cr_assert_eq(read_full(fd, buf, PROTO_HDR_SIZE), PROTO_HDR_SIZE);
	proto_hdr_get(buf, &h);
	cr_assert_eq(h.status, -EPROTO);
	cr_assert_eq(h.req_id, 9u);
	cr_assert(h.flags & PROTO_F_REPLY);
	cr_assert_leq(h.len, 64);
	read_full(fd, buf, h.len);
	cr_assert_eq(read(fd, buf, 1), 0, "connection not closed");
	close(fd);
	assert_alive();
}

/* HELLO with @magic, versions @lo..@hi on a new raw connection; reply in @h. @return the fd */
static int bad_hello(uint32_t id, uint32_t magic, uint16_t lo, uint16_t hi, struct proto_hdr *h)
{
	uint8_t buf[PROTO_HDR_SIZE + PROTO_HELLO_BODY];
	int fd = raw_connect();

	frame(buf, PROTO_HELLO_BODY, PROTO_OP_HELLO, id);
	wire_put_u32(buf + PROTO_HDR_SIZE, magic);
	wire_put_u16(buf + PROTO_HDR_SIZE + 4, lo);
	wire_put_u16(buf + PROTO_HDR_SIZE + 6, hi);
	cr_assert_eq(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	cr_assert_eq(read_full(fd, buf, PROTO_HDR_SIZE), PROTO_HDR_SIZE);
	proto_hdr_get(buf, h);
	return fd;
}

Test(rpc, hello_with_a_wrong_magic_or_version_is_refused)
{
	struct proto_hdr h;
	uint8_t c;
	int fd;

	fd = bad_hello(7, 0xdeadbeef, 1, 1, &h);
	cr_assert_eq(h.status, -EPROTO);
	cr_assert_eq(read(fd, &c, 1), 0, "connection not closed");
	close(fd);
	fd = bad_hello(8, PROTO_MAGIC, 50, 60, &h);
	cr_assert_eq(h.status, -EPROTONOSUPPORT);
	close(fd);
	assert_alive();
}

Test(rpc, unknown_opcode_gets_eproto_and_close_while_others_work)
{
	struct coffer_conn *c = conn(), *other = conn();
	uint8_t buf[PROTO_HDR_SIZE];
	struct proto_hdr h;
	char payload[256];
	json_t *r = NULL;

	frame(buf, 0, 999, 42);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 1);
	cr_assert_eq(h.status, -EPROTO);
	cr_assert_eq(h.req_id, 42u);
	cr_assert_eq(h.op, 999);
	cr_assert_lt(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 0);
	cr_assert_eq(coffer_call(other, "ping", NULL, &r, NULL, 0), 0);
	json_decref(r);
	coffer_close(c);
	coffer_close(other);
}

Test(rpc, oversize_length_is_rejected_before_allocation)
{
	struct coffer_conn *c = conn();
	uint8_t buf[PROTO_HDR_SIZE];
	struct proto_hdr h;
	char payload[256];

	frame(buf, 0xfffffff0u, PROTO_OP_PING, 5);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 1);
	cr_assert_eq(h.status, -EMSGSIZE);
	cr_assert_lt(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 0);
	coffer_close(c);
	/* just over max_frame (1M) too */
	c = conn();
	frame(buf, (1u << 20) + 1, PROTO_OP_WRITE, 6);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 1);
	cr_assert_eq(h.status, -EMSGSIZE);
	coffer_close(c);
	assert_alive();
}

Test(rpc, truncated_frame_then_hangup_leaves_daemon_running)
{
	struct coffer_conn *c = conn();
	uint8_t buf[PROTO_HDR_SIZE + 4];

	/* a header promising 100 bytes, 4 sent, then the peer goes away */
	frame(buf, 100, PROTO_OP_PING, 1);
	memcpy(buf + PROTO_HDR_SIZE, "{\"a\"", 4);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	coffer_close(c);
	/* half a header */
	c = conn();
	cr_assert_eq(coffer_send_raw(c, buf, 7), 0);
	coffer_close(c);
	assert_alive();
}

Test(rpc, bad_json_is_answered_and_the_connection_stays)
{
	struct coffer_conn *c = conn();
	const char *bodies[] = { "{not json", "[1,2,3]", "\"str\"", "{\"a\":1,\"a\":2}",
				 "{\"name\":\"tank/\xff\xfe\"}" };
	uint8_t buf[256];
	struct proto_hdr h;
	char payload[512];
	json_t *r = NULL;

	for (unsigned i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		size_t n = strlen(bodies[i]);

		frame(buf, (uint32_t)n, PROTO_OP_DS_LIST, 100 + i);
		memcpy(buf + PROTO_HDR_SIZE, bodies[i], n);
		cr_assert_eq(coffer_send_raw(c, buf, PROTO_HDR_SIZE + n), 0);
		cr_assert_eq(coffer_recv_raw(c, &h, payload, sizeof(payload) - 1, 5000), 1);
		payload[h.len < sizeof(payload) ? h.len : sizeof(payload) - 1] = '\0';
		cr_assert_eq(h.status, -EPROTO, "%s: status %d", bodies[i], h.status);
		cr_assert_eq(h.req_id, 100 + i);
		cr_assert(strstr(payload, "invalid JSON"), "%s", payload);
	}
	cr_assert_eq(coffer_call(c, "ping", NULL, &r, NULL, 0), 0, "connection was dropped");
	json_decref(r);
	coffer_close(c);
}

Test(rpc, invalid_names_are_refused_with_ebadname)
{
	const char *names[] = { "", "/tank", "tank//a", "tank/../etc", "tank/a b", "1tank",
				"tank/" };
	struct coffer_conn *c = conn();
	char err[256], longname[400];

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		json_t *a = json_pack("{s:s}", "name", names[i]);
		int ret = coffer_call(c, "ds_get", a, NULL, err, sizeof(err));

		cr_assert_eq(ret, STOR_EBADNAME, "'%s': %d %s", names[i], ret, err);
		json_decref(a);
	}
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	json_t *a = json_pack("{s:s, s:[s]}", "name", longname, "luns", "/tmp/x");

	cr_assert_eq(coffer_call(c, "pool_create", a, NULL, err, sizeof(err)), STOR_EBADNAME);
	json_decref(a);
	/* missing name and a wrong type */
	a = json_pack("{s:i}", "name", 3);
	cr_assert_eq(coffer_call(c, "ds_destroy", a, NULL, err, sizeof(err)), -EINVAL);
	json_decref(a);
	coffer_close(c);
	assert_alive();
}

Test(rpc, io_on_a_handle_never_opened_is_ebadf)
{
	struct coffer_conn *c = conn();
	uint8_t buf[4096];

	cr_assert_eq(coffer_read(c, 3, 0, buf, sizeof(buf)), -EBADF);
	cr_assert_eq(coffer_write(c, 0, 0, buf, sizeof(buf)), -EBADF);
	cr_assert_eq(coffer_ds_flush(c, 9), -EBADF);
	coffer_close(c);
}

Test(rpc, write_frame_whose_length_disagrees_is_eproto)
{
	struct coffer_conn *c = conn();
	uint8_t buf[PROTO_HDR_SIZE + PROTO_IO_BODY + 8];
	struct proto_io io = { .handle = 0, .off = 0, .len = 4096 };
	struct proto_hdr h;
	char payload[64];

	frame(buf, PROTO_IO_BODY + 8, PROTO_OP_WRITE, 77);
	proto_io_put(buf + PROTO_HDR_SIZE, &io);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_recv_raw(c, &h, payload, sizeof(payload), 5000), 1);
	cr_assert_eq(h.req_id, 77u);
	cr_assert(h.status == -EBADF || h.status == -EPROTO, "status %d", h.status);
	coffer_close(c);
	assert_alive();
}

Test(rpc, connections_over_the_limit_are_refused_and_others_stay)
{
	struct coffer_conn *cs[8];
	struct coffer_conn *extra = NULL;

	/* max_connections = 8 */
	for (int i = 0; i < 8; i++)
		cs[i] = conn();
	cr_assert_eq(coffer_connect(td.sock, &extra), -EUSERS, "ninth connection accepted");
	for (int i = 0; i < 8; i++) {
		json_t *r = NULL;

		cr_assert_eq(coffer_call(cs[i], "ping", NULL, &r, NULL, 0), 0);
		json_decref(r);
		coffer_close(cs[i]);
	}
	/* the closed connections' places come free once the daemon has seen them go */
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     coffer_connect(td.sock, &extra) == -EUSERS && tdaemon_poll(end);)
		;
	cr_assert_not_null(extra, "the closed connections' places never came free");
	coffer_close(extra);
	assert_alive();
}

Test(rpc, admin_calls_by_a_non_admin_uid_get_eperm)
{
	char out[4096];
	int st;

	if (geteuid() != 0 || !getpwnam("nobody") || system("command -v setpriv >/dev/null") != 0)
		tdaemon_skip(&td, "needs root, a 'nobody' user and setpriv");
	st = tdaemon_coffer(&td, "setpriv --reuid=nobody --regid=nogroup --clear-groups", NULL, out,
			    sizeof(out), "pool create -s 16M tank /tmp/never-created-lun");
	cr_assert_eq(st, 1, "exit %d: %s", st, out);
	cr_assert(strstr(out, "permission denied"), "%s", out);
	st = tdaemon_coffer(&td, "setpriv --reuid=nobody --regid=nogroup --clear-groups", NULL, out,
			    sizeof(out), "ping");
	cr_assert_eq(st, 0, "a non-admin may still ping: %s", out);
	/* logged once per connection */
	cr_assert(strstr(tdaemon_log(&td), "permission denied"));
}

Test(rpc, cli_usage_errors_exit_2)
{
	char out[4096];

	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "create"), 2, "%s", out);
	cr_assert(strstr(out, "usage: coffer create"), "%s", out);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "no-such-verb"), 2);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "pool create -s 12Q p /x"),
		     2, "%s", out);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "help"), 0);
	cr_assert(strstr(out, "load-key"), "%s", out);
	cr_assert(strstr(out, "pool create"), "%s", out);
}

Test(rpc, cli_without_daemon_says_what_to_do)
{
	char out[4096], saved[sizeof(td.sock)];
	int st;

	memcpy(saved, td.sock, sizeof(saved));
	snprintf(td.sock, sizeof(td.sock), "%.900s/nosuch.sock", td.dir);
	st = tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), "pool list");
	memcpy(td.sock, saved, sizeof(saved));
	cr_assert_eq(st, 1);
	cr_assert(strstr(out, "cofferd is not running"), "%s", out);
}

/* Pool @pool on a 64 MiB LUN in the test's dir, and in it the volume @pool/v of @size bytes. */
static void make_volume(struct coffer_conn *adm, const char *pool, uint64_t size)
{
	char err[256], lun[600], ds[64];
	json_t *a;

	snprintf(lun, sizeof(lun), "%.500s/%.20s-l0", td.dir, pool);
	snprintf(ds, sizeof(ds), "%.20s/v", pool);
	a = json_pack("{s:s, s:[s], s:I}", "name", pool, "luns", lun, "lun_size",
		      (json_int_t)(64 << 20));
	cr_assert_eq(coffer_call(adm, "pool_create", a, NULL, err, sizeof(err)), 0, "%s", err);
	json_decref(a);
	a = json_pack("{s:s, s:I}", "name", ds, "volsize", (json_int_t)size);
	cr_assert_eq(coffer_call(adm, "ds_create", a, NULL, err, sizeof(err)), 0, "%s", err);
	json_decref(a);
}

Test(rpc, a_client_that_does_not_read_is_throttled_not_buffered)
{
	enum { N = 20000, LEN = 8 << 10 };
	struct coffer_conn *c = conn(), *adm = conn();
	uint8_t frame_buf[PROTO_HDR_SIZE + PROTO_IO_BODY];
	size_t sent = 0, total = (size_t)N * sizeof(frame_buf);
	uint8_t *all = malloc(total);
	int fd = raw_connect(), blocked = 0, h;

	/* a dataset to read from, opened on the raw connection after a HELLO */
	make_volume(adm, "bp", 8 << 20);
	h = coffer_ds_open(c, "bp/v", NULL, NULL);
	cr_assert_geq(h, 0);
	coffer_close(c);
	close(fd);
	/* the raw socket: HELLO and ds_open by hand through a fresh client, then take its fd */
	c = conn();
	h = coffer_ds_open(c, "bp/v", NULL, NULL);
	cr_assert_geq(h, 0);
	fd = coffer_fd(c);
	for (int i = 0; i < N; i++) {
		struct proto_io io = { .handle = (uint32_t)h, .off = (uint64_t)(i % 512) * LEN,
				       .len = LEN };

		frame(frame_buf, PROTO_IO_BODY, PROTO_OP_READ, (uint32_t)i);
		proto_io_put(frame_buf + PROTO_HDR_SIZE, &io);
		memcpy(all + (size_t)i * sizeof(frame_buf), frame_buf, sizeof(frame_buf));
	}
	/* 20000 x 8 KiB = 160 MiB of replies: the daemon must stop reading us */
	while (sent < total) {
		ssize_t n = send(fd, all + sent, total - sent, MSG_DONTWAIT);

		if (n < 0) {
			cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "send: %s",
				  strerror(errno));
			blocked = 1;
			break;
		}
		sent += (size_t)n;
	}
	cr_assert(blocked, "all %zu bytes of requests accepted without reading replies", total);
	/* others are served meanwhile */
	assert_alive();
	/* now read everything: every request is answered */
	{
		size_t want = N, got = 0;
		uint8_t *rb = malloc(PROTO_HDR_SIZE + LEN);
		struct proto_hdr hh;

		while (got < want) {
			if (sent < total) {
				ssize_t n = send(fd, all + sent, total - sent, MSG_DONTWAIT);

				if (n > 0)
					sent += (size_t)n;
			}
			cr_assert_eq(read_full(fd, rb, PROTO_HDR_SIZE), PROTO_HDR_SIZE);
			proto_hdr_get(rb, &hh);
			cr_assert_eq(hh.status, 0);
			cr_assert_eq(hh.len, LEN);
			cr_assert_eq(read_full(fd, rb + PROTO_HDR_SIZE, LEN), LEN);
			got++;
		}
		free(rb);
	}
	free(all);
	coffer_close(c);
	coffer_close(adm);
}

/* MAP @len bytes at @off on handle @h, @runs at most, into @runs_out. @return its status */
static int map(struct coffer_conn *c, int h, uint64_t off, uint32_t len, uint32_t runs,
	       uint8_t *runs_out, size_t cap, uint32_t *out_len)
{
	static uint32_t id = 500;
	uint8_t buf[PROTO_HDR_SIZE + PROTO_MAP_BODY];
	struct proto_io io = { .handle = (uint32_t)h, .off = off, .len = len };
	struct proto_hdr r;

	frame(buf, PROTO_MAP_BODY, PROTO_OP_MAP, ++id);
	proto_io_put(buf + PROTO_HDR_SIZE, &io);
	wire_put_u32(buf + PROTO_HDR_SIZE + PROTO_IO_BODY, runs);
	cr_assert_eq(coffer_send_raw(c, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_recv_raw(c, &r, runs_out, cap, 10000), 1);
	cr_assert_eq(r.op, PROTO_OP_MAP);
	cr_assert_eq(r.req_id, id);
	*out_len = r.len;
	return r.status;
}

/* MAP on the control socket: the runs of a range, as NBD's BLOCK_STATUS uses them. */
Test(rpc, map_lists_the_runs_of_data_and_holes_of_a_range)
{
	struct coffer_conn *c = conn();
	uint8_t runs[PROTO_MAP_RUN * 4], data[8192];
	uint32_t rs, len;
	char err[256];
	int h;

	make_volume(c, "mp", 1 << 20);
	h = coffer_ds_open(c, "mp/v", NULL, &rs);
	cr_assert_geq(h, 0);
	cr_assert_leq(rs, sizeof(data));
	memset(data, 0xa5, sizeof(data));
	cr_assert_eq(coffer_write(c, h, 0, data, rs), 0);
	cr_assert_eq(map(c, h, 0, 1 << 20, PROTO_MAP_RUNS, runs, sizeof(runs), &len), 0);
	cr_assert_eq(len, 2 * PROTO_MAP_RUN, "the record, then the hole: %u bytes", len);
	cr_assert_eq(wire_get_u32(runs), rs);
	cr_assert_eq(wire_get_u32(runs + 4), 0);
	cr_assert_eq(wire_get_u32(runs + 8), (1u << 20) - rs);
	cr_assert_eq(wire_get_u32(runs + 12), PROTO_MAP_HOLE);
	/* the first run only, as asked */
	cr_assert_eq(map(c, h, 0, 1 << 20, 1, runs, sizeof(runs), &len), 0);
	cr_assert_eq(len, PROTO_MAP_RUN);
	cr_assert_eq(wire_get_u32(runs), rs);
	/* what the dispatcher's checks refuse */
	cr_assert_eq(map(c, h, 0, 1 << 20, 0, runs, sizeof(runs), &len), -EINVAL);
	cr_assert_eq(map(c, h + 1, 0, 4096, 1, runs, sizeof(runs), &len), -EBADF);
	cr_assert_eq(map(c, h, 1 << 20, 4096, 1, runs, sizeof(runs), &len), STOR_ERANGE);
	/* a call of the dispatcher, not a verb of the client */
	cr_assert_eq(coffer_call(c, "map", NULL, NULL, err, sizeof(err)), -EINVAL);
	coffer_close(c);
	assert_alive();
}

Test(rpc, sigterm_does_not_wait_forever_for_a_client_that_does_not_read)
{
	enum { N = 20000 };
	struct coffer_conn *c = conn();
	uint8_t *all = malloc((size_t)N * (PROTO_HDR_SIZE + 2));
	size_t sent = 0, total = (size_t)N * (PROTO_HDR_SIZE + 2);
	int fd = coffer_fd(c);

	for (int i = 0; i < N; i++) {
		uint8_t *p = all + (size_t)i * (PROTO_HDR_SIZE + 2);

		frame(p, 2, PROTO_OP_PING, (uint32_t)i);
		memcpy(p + PROTO_HDR_SIZE, "{}", 2);
	}
	while (sent < total) {
		ssize_t n = send(fd, all + sent, total - sent, MSG_DONTWAIT);

		if (n <= 0)
			break;
		sent += (size_t)n;
	}
	cr_assert_eq(tdaemon_stop(&td), 0, "stuck client held up the stop:\n%s", tdaemon_log(&td));
	free(all);
	coffer_close(c);
	/* the fixture's teardown wants a daemon to stop */
	cr_assert_eq(tdaemon_start(&td), 0, "restart:\n%s", tdaemon_log(&td));
}

Test(rpc, check_config_accepts_the_fixture_and_names_file_and_line_of_an_error)
{
	const char *bin = getenv("COFFERD") ? getenv("COFFERD") : "../../daemon/cofferd";
	char cmd[8192], o[4096];
	const char *bad;
	FILE *p;
	size_t n;

	snprintf(cmd, sizeof(cmd), "'%s' --check-config -c '%s' 2>&1", bin, td.conf);
	cr_assert_eq(system(cmd), 0);
	bad = tdaemon_file(&td, "bad.conf", "[cofferd]\nworkers = 2\ncach_size = 1\n", 34);
	snprintf(cmd, sizeof(cmd), "'%s' --check-config -c '%s' 2>&1", bin, bad);
	p = popen(cmd, "r");
	n = fread(o, 1, sizeof(o) - 1, p);
	o[n] = '\0';
	cr_assert_eq(WEXITSTATUS(pclose(p)), 1, "%s", o);
	cr_assert(strstr(o, "bad.conf:3"), "%s", o);
	snprintf(cmd, sizeof(cmd), "'%s' --no-such-flag >/dev/null 2>&1", bin);
	cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
}

Test(rpc, random_frames_never_crash_the_daemon)
{
	struct coffer_conn *keep = conn();
	unsigned seed = 12345;

	/* 300 connections of random headers (valid opcodes half the time) and random bodies */
	for (int i = 0; i < 300; i++) {
		struct coffer_conn *c = conn();
		uint8_t buf[PROTO_HDR_SIZE + 256];
		struct proto_hdr h;
		size_t n;

		for (int k = 0; k < 4; k++) {
			static const uint16_t ops[] = { PROTO_OP_PING,	 PROTO_OP_DS_GET,
							PROTO_OP_READ,	 PROTO_OP_WRITE,
							PROTO_OP_DS_OPEN, PROTO_OP_KEY_LOAD,
							PROTO_OP_POOL_CREATE, PROTO_OP_HELLO };

			n = (size_t)(rand_r(&seed) % 256);
			h = (struct proto_hdr){
				.len = rand_r(&seed) % 4 ? (uint32_t)n : (uint32_t)rand_r(&seed),
				.op = rand_r(&seed) % 2 ? ops[rand_r(&seed) % 8]
							: (uint16_t)rand_r(&seed),
				.flags = rand_r(&seed) % 8 ? 0 : (uint16_t)rand_r(&seed),
				.req_id = (uint32_t)rand_r(&seed),
			};
			proto_hdr_put(buf, &h);
			for (size_t j = 0; j < n; j++)
				buf[PROTO_HDR_SIZE + j] = (uint8_t)rand_r(&seed);
			if (rand_r(&seed) % 3 == 0 && n >= 2) {
				/* a JSON-ish body */
				memcpy(buf + PROTO_HDR_SIZE, "{\"name\":\"tank/", n < 14 ? n : 14);
			}
			if (coffer_send_raw(c, buf, PROTO_HDR_SIZE + n) < 0)
				break;
		}
		coffer_close(c);
	}
	{
		json_t *r = NULL;

		cr_assert_eq(coffer_call(keep, "ping", NULL, &r, NULL, 0), 0,
			     "a connection held through it all was dropped");
		json_decref(r);
	}
	coffer_close(keep);
	assert_alive();
}

Test(rpc, admin_arguments_of_the_wrong_shape_are_errors_not_crashes)
{
	static const char *const cases[][2] = {
		{ "pool_create", "{\"name\":\"p\",\"luns\":\"notarray\"}" },
		{ "pool_create", "{\"name\":\"p\",\"luns\":[1,2]}" },
		{ "pool_create", "{\"name\":\"p\",\"luns\":[\"relative\"]}" },
		{ "pool_create", "{\"name\":\"p\",\"luns\":[]}" },
		{ "pool_create", "{\"name\":\"p\",\"luns\":[\"/x\"],\"props\":\"x\"}" },
		{ "pool_add", "{\"name\":\"nopool\",\"lun\":5}" },
		{ "pool_export", "{\"name\":[]}" },
		{ "pool_import", "{\"name\":\"nopool\"}" },
		{ "pool_destroy", "{\"name\":\"nopool\"}" },
		{ "ds_create", "{\"name\":\"nopool/a\",\"volsize\":-1,\"props\":[null]}" },
		{ "ds_create", "{\"name\":\"nopool\",\"key_hex\":\"abc\"}" },
		{ "ds_create", "{\"name\":\"nopool/a\",\"key_hex\":\"zz\"}" },
		{ "ds_list", "{\"name\":{},\"props\":{}}" },
		{ "ds_list", "{\"props\":[1]}" },
		{ "ds_get", "{\"name\":\"nopool/a\",\"props\":\"all\"}" },
		{ "ds_set", "{\"name\":\"nopool/a\",\"prop\":1,\"value\":2}" },
		{ "ds_inherit", "{\"name\":\"nopool/a\"}" },
		{ "ds_open", "{\"name\":\"nopool/a\"}" },
		{ "ds_close", "{\"handle\":\"x\"}" },
		{ "ds_close", "{\"handle\":99999999999}" },
		{ "key_load", "{\"name\":\"nopool/a\"}" },
		{ "key_load", "{\"name\":\"nopool/a\",\"key_hex\":7}" },
		{ "key_unload", "{\"name\":\"nopool/a\"}" },
		{ "key_change", "{\"name\":\"nopool/a\",\"props\":[\"keyformat=raw\"]}" },
	};
	struct coffer_conn *c = conn();

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_error_t e;
		json_t *a = json_loads(cases[i][1], 0, &e);
		char err[512] = "";
		int ret;

		cr_assert_not_null(a, "%s", cases[i][1]);
		ret = coffer_call(c, cases[i][0], a, NULL, err, sizeof(err));
		json_decref(a);
		cr_assert_lt(ret, 0, "%s %s accepted", cases[i][0], cases[i][1]);
		cr_assert(err[0], "%s %s: no message", cases[i][0], cases[i][1]);
		cr_assert_neq(ret, -EPROTO, "%s %s: %s", cases[i][0], cases[i][1], err);
	}
	coffer_close(c);
	assert_alive();
}

Test(rpc, sighup_reopens_a_log_file_moved_away)
{
	char logf[1200], moved[1300];
	struct stat st;

	cr_assert_eq(tdaemon_stop(&td), 0);
	snprintf(logf, sizeof(logf), "%.1000s/file.log", td.dir);
	snprintf(moved, sizeof(moved), "%s.1", logf);
	tdaemon_write_conf(&td, NULL, "socket_mode = 0666\nlog_level = info\nlog_target = %s\n",
			   logf);
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_eq(stat(logf, &st), 0, "no log file");
	cr_assert_eq(rename(logf, moved), 0);
	kill(td.pid, SIGHUP);
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     stat(logf, &st) != 0 && tdaemon_poll(end);)
		;
	cr_assert_eq(stat(logf, &st), 0, "SIGHUP did not reopen %s", logf);
	assert_alive();
}

Test(rpc, admin_group_membership_by_gid_or_supplementary_group)
{
	const char *base = "setpriv --reuid=nobody --regid=nogroup";
	char pfx[256], o[4096], args[1200];
	int st;

	if (geteuid() != 0 || !getpwnam("nobody") || !getgrnam("users") || !getgrnam("nogroup") ||
	    system("command -v setpriv >/dev/null") != 0)
		tdaemon_skip(&td, "needs root, nobody, groups users and nogroup, and setpriv");
	cr_assert_eq(tdaemon_stop(&td), 0);
	tdaemon_write_conf(&td, NULL, "socket_mode = 0666\nlog_level = debug\nadmin_group = users\n");
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	snprintf(args, sizeof(args), "pool create -s 16M g1 %.1000s/g1", td.dir);
	snprintf(pfx, sizeof(pfx), "%s --clear-groups", base);
	st = tdaemon_coffer(&td, pfx, NULL, o, sizeof(o), args);
	cr_assert_eq(st, 1, "not in admin_group yet allowed: %s", o);
	cr_assert(strstr(o, "permission denied"), "%s", o);
	/* a supplementary group of the client process (SO_PEERGROUPS) */
	snprintf(pfx, sizeof(pfx), "%s --groups=users", base);
	st = tdaemon_coffer(&td, pfx, NULL, o, sizeof(o), args);
	cr_assert_eq(st, 0, "supplementary admin_group refused: %s\n%s", o, tdaemon_log(&td));
	/* the primary gid */
	snprintf(args, sizeof(args), "pool create -s 16M g2 %.1000s/g2", td.dir);
	st = tdaemon_coffer(&td, "setpriv --reuid=nobody --regid=users --clear-groups", NULL, o,
			    sizeof(o), args);
	cr_assert_eq(st, 0, "primary admin_group refused: %s", o);
}

Test(rpc, socket_mode_and_group_come_from_the_config)
{
	struct group *gr = getgrnam("users");
	struct stat st;
	char o[4096];

	if (geteuid() != 0 || !gr || system("command -v setpriv >/dev/null") != 0)
		tdaemon_skip(&td, "needs root, group users and setpriv");
	cr_assert_eq(tdaemon_stop(&td), 0);
	tdaemon_write_conf(&td, NULL, "socket_mode = 0660\nsocket_group = users\n");
	cr_assert_eq(tdaemon_start(&td), 0, "%s", tdaemon_log(&td));
	cr_assert_eq(stat(td.sock, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0660);
	cr_assert_eq(st.st_gid, gr->gr_gid);
	/* outside the group: no connection at all */
	cr_assert_eq(tdaemon_coffer(&td, "setpriv --reuid=nobody --regid=nogroup --clear-groups",
				    NULL, o, sizeof(o), "ping"),
		     1, "%s", o);
	cr_assert(strstr(o, "permission denied"), "%s", o);
	cr_assert_eq(tdaemon_coffer(&td, "setpriv --reuid=nobody --regid=nogroup --groups=users",
				    NULL, o, sizeof(o), "ping"),
		     0, "%s", o);
}

Test(rpc, eperm_is_answered_every_time_and_logged_once_per_connection)
{
	struct passwd *pw = getpwnam("nobody");
	const char *log;
	int status, n = 0;
	pid_t pid;

	if (geteuid() != 0 || !pw)
		tdaemon_skip(&td, "needs root and a 'nobody' user");
	{
		struct coffer_conn *c = conn();
		char lun[1200], err[256];
		json_t *a;

		snprintf(lun, sizeof(lun), "%.1000s/ep-l0", td.dir);
		a = json_pack("{s:s, s:[s], s:I}", "name", "tank", "luns", lun, "lun_size",
			      (json_int_t)(16 << 20));
		cr_assert_eq(coffer_call(c, "pool_create", a, NULL, err, sizeof(err)), 0, "%s",
			     err);
		json_decref(a);
		coffer_close(c);
	}
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct coffer_conn *c = NULL;
		json_t *a = json_pack("{s:s}", "name", "tank");
		char err[256];
		int fails = 0;

		if (setgroups(0, NULL) < 0 || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0 ||
		    setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
			_exit(3);
		if (coffer_connect(td.sock, &c) < 0)
			_exit(4);
		for (int i = 0; i < 3; i++)
			fails += coffer_call(c, "pool_destroy", a, NULL, err, sizeof(err)) == -EPERM;
		fails += coffer_call(c, "ds_open", a, NULL, err, sizeof(err)) == -EPERM;
		coffer_close(c);
		_exit(fails == 4 ? 0 : 5);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	/* the daemon logs a refusal before it replies, and the child had every
	 * reply: the line is there unless the log is slow to show it */
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     !strstr(tdaemon_log(&td), "permission denied") && tdaemon_poll(end);)
		;
	log = tdaemon_log(&td);
	for (const char *p = log; (p = strstr(p, "permission denied")); p++)
		n++;
	cr_assert_eq(n, 1, "%d log lines for one connection:\n%s", n, log);
}
