// SPDX-License-Identifier: MIT
/*
 * E2E: a raw NBD peer for the tests that send what no well-behaved client
 * sends (nbdraw.h), on the Unix socket or over TCP.
 */

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"
#include "nbd_proto.h"
#include "nbdraw.h"
#include "proto.h"

int raw_connect_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect %s: %s",
		     sa.sun_path, strerror(errno));
	return fd;
}

int raw_connect_tcp(unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect 127.0.0.1:%u: %s",
		     port, strerror(errno));
	return fd;
}

/* Read exactly @n bytes within the test's wait. @return 0, or -1 at EOF */
int read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r;

		cr_assert(tdaemon_wait_readable(fd, TDAEMON_WAIT_S * 1000), "no reply");
		r = read(fd, (char *)buf + got, n - got);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return -1;
		cr_assert_gt(r, 0, "read: %s", strerror(errno));
		got += (size_t)r;
	}
	return 0;
}

void write_full(int fd, const void *buf, size_t n)
{
	cr_assert_eq(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n, "send: %s", strerror(errno));
}

/* The daemon closes @fd (reading and dropping what it still sends). */
void expect_closed(int fd)
{
	char buf[4096];
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	for (;;) {
		ssize_t r;

		cr_assert(tdaemon_wait_readable(fd, 1000) || tdaemon_poll(end),
			  "the connection stayed open");
		r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			break;
	}
	close(fd);
}

void greeting(int fd)
{
	uint8_t g[NBD_GREETING_SIZE];

	cr_assert_eq(read_full(fd, g, sizeof(g)), 0, "no greeting");
	cr_assert_eq(wire_get_u64(g), NBD_MAGIC);
	cr_assert_eq(wire_get_u64(g + 8), NBD_IHAVEOPT);
	cr_assert_eq(wire_get_u16(g + 16), NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
}

void send_flags(int fd)
{
	uint8_t f[4];

	wire_put_u32(f, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
	write_full(fd, f, 4);
}

void send_opt(int fd, uint32_t opt, const void *data, uint32_t len)
{
	uint8_t h[NBD_OPT_HDR];

	wire_put_u64(h, NBD_IHAVEOPT);
	wire_put_u32(h + 8, opt);
	wire_put_u32(h + 12, len);
	write_full(fd, h, sizeof(h));
	if (len)
		write_full(fd, data, len);
}

/* One option reply: its type; its data into @data (up to @cap bytes, the rest dropped). */
uint32_t read_opt_reply(int fd, uint32_t opt, void *data, size_t cap, uint32_t *len)
{
	uint8_t h[NBD_OPT_REPLY_HDR], skip[512];
	uint32_t n, type;

	cr_assert_eq(read_full(fd, h, sizeof(h)), 0, "no option reply");
	cr_assert_eq(wire_get_u64(h), NBD_REP_MAGIC);
	cr_assert_eq(wire_get_u32(h + 8), opt);
	type = wire_get_u32(h + 12);
	n = wire_get_u32(h + 16);
	*len = n;
	for (uint32_t got = 0; got < n;) {
		uint32_t k = n - got;
		uint8_t *dst = got < cap ? (uint8_t *)data + got : skip;

		if (got < cap && k > cap - got)
			k = (uint32_t)(cap - got);
		if (got >= cap && k > sizeof(skip))
			k = sizeof(skip);
		cr_assert_eq(read_full(fd, dst, k), 0);
		got += k;
	}
	return type;
}

