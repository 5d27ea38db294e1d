/* SPDX-License-Identifier: MIT */
/*
 * nbd_floor: the least an NBD server can do, to measure what is left of the
 * machine for any server under a given client. It serves every export name
 * as a read-only export of zeros, on a thread per CPU, each with its own
 * epoll and the connections it accepted; the replies of a turn leave as one
 * send a connection, every connection's in one io_uring submission, as
 * cofferd's loops send theirs (daemon/sendring.c). It stores nothing, checks
 * nothing and encrypts nothing, so the rate fio reaches against it, and the
 * CPU it and fio spend per I/O, bound what cofferd or nbdkit can reach with
 * the same client on the same cores (encryption.sh's nbd pass runs it).
 *
 * Handshake: fixed newstyle, NO_ZEROES; NBD_OPT_GO, NBD_OPT_INFO and
 * NBD_OPT_EXPORT_NAME are answered, and STRUCTURED_REPLY, as cofferd and
 * nbdkit take it, so the client does for each read what it does with them;
 * then a read is one OFFSET_DATA chunk. ABORT ends, every other option is
 * refused with NBD_REP_ERR_UNSUP. Commands: READ, and DISC; the rest get
 * EINVAL.
 *
 * Usage: nbd_floor SOCKET-PATH [export-size-bytes (default 1 GiB) [threads (default: CPUs)]]
 * Runs until killed; it prints "ready" on stdout once it listens.
 */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "nbd_proto.h" /* the protocol's numbers, as cofferd has them */
#include "proto.h"     /* wire_put_u32 and the others: big-endian fields */

#define TX_FLAGS (NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_CAN_MULTI_CONN)
#define MAX_READ (32u << 20)
#define RBUF (64u << 10)
#define MAX_IOV 64

struct conn {
	int fd;
	int transmission; /* past the handshake */
	int structured;   /* structured replies negotiated */
	int no_zeroes;    /* the client's NBD_FLAG_C_NO_ZEROES */
	int niov;         /* replies built this turn, sent at its end */
	struct iovec iov[MAX_IOV];
	uint8_t hdrs[MAX_IOV / 2][32];
	size_t rlen;
	uint8_t rbuf[RBUF];
};

static uint64_t export_size = 1ull << 30;
static uint8_t zeros[MAX_READ];

/*
 * Write @iov (@n of them) whole past its first @done bytes, waiting for room
 * as a server with nothing else to do may: the handshake's few bytes, and
 * the rest of replies a turn's send left.
 */
static int writev_all(int fd, struct iovec *iov, int n, size_t done)
{
	for (ssize_t w = (ssize_t)done;;) {
		int i = 0;

		while (i < n && (size_t)w >= iov[i].iov_len)
			w -= (ssize_t)iov[i++].iov_len;
		if (i < n) {
			iov[i].iov_base = (uint8_t *)iov[i].iov_base + w;
			iov[i].iov_len -= (size_t)w;
		}
		iov += i;
		n -= i;
		if (!n)
			return 0;
		do {
			w = writev(fd, iov, n);
			if (w < 0 && errno == EAGAIN)
				usleep(10);
		} while (w < 0 && (errno == EINTR || errno == EAGAIN));
		if (w < 0)
			return -1;
	}
}

static int send_all(int fd, const void *buf, size_t n)
{
	struct iovec v = { (void *)buf, n };

	return writev_all(fd, &v, 1, 0);
}

static int opt_reply(int fd, uint32_t opt, uint32_t type, const void *data, uint32_t len)
{
	uint8_t h[20];

	wire_put_u64(h, NBD_REP_MAGIC);
	wire_put_u32(h + 8, opt);
	wire_put_u32(h + 12, type);
	wire_put_u32(h + 16, len);
	if (send_all(fd, h, sizeof(h)) < 0)
		return -1;
	return len ? send_all(fd, data, len) : 0;
}

/* One option from the front of the buffer. @return bytes used, 0 for more, -1 to close. */
static long handshake_step(struct conn *c)
{
	uint8_t info[12];
	uint32_t opt, len;

	if (c->rlen < 16)
		return 0;
	if (wire_get_u64(c->rbuf) != NBD_IHAVEOPT)
		return -1;
	opt = wire_get_u32(c->rbuf + 8);
	len = wire_get_u32(c->rbuf + 12);
	if (len > RBUF - 16)
		return -1;
	if (c->rlen < 16 + (size_t)len)
		return 0;
	/* NBD_INFO_EXPORT: size and transmission flags */
	info[0] = 0;
	info[1] = 0;
	wire_put_u64(info + 2, export_size);
	info[10] = (uint8_t)(TX_FLAGS >> 8);
	info[11] = (uint8_t)TX_FLAGS;
	switch (opt) {
	case NBD_OPT_EXPORT_NAME: {
		uint8_t r[10 + 124] = { 0 };

		wire_put_u64(r, export_size);
		r[8] = info[10];
		r[9] = info[11];
		/* the 124 zero bytes, unless the client said NO_ZEROES */
		if (send_all(c->fd, r, c->no_zeroes ? 10 : sizeof(r)) < 0)
			return -1;
		c->transmission = 1;
		break;
	}
	case NBD_OPT_GO:
	case NBD_OPT_INFO:
		if (opt_reply(c->fd, opt, NBD_REP_INFO, info, sizeof(info)) < 0 ||
		    opt_reply(c->fd, opt, NBD_REP_ACK, NULL, 0) < 0)
			return -1;
		c->transmission = opt == NBD_OPT_GO;
		break;
	case NBD_OPT_STRUCTURED_REPLY:
		if (opt_reply(c->fd, opt, NBD_REP_ACK, NULL, 0) < 0)
			return -1;
		c->structured = 1;
		break;
	case NBD_OPT_ABORT:
		opt_reply(c->fd, opt, NBD_REP_ACK, NULL, 0);
		return -1;
	default:
		if (opt_reply(c->fd, opt, NBD_REP_ERR_UNSUP, NULL, 0) < 0)
			return -1;
	}
	return 16 + (long)len;
}

/* The replies to the whole requests in the buffer, up to MAX_IOV / 2 of them,
 * into @c's iovecs for the turn's send. */
static int serve(struct conn *c, size_t *used)
{
	uint8_t (*hdrs)[32] = c->hdrs;
	struct iovec *iov = c->iov;
	size_t off = 0;
	int n = 0, nh = 0;

	while (c->rlen - off >= NBD_REQ_SIZE) {
		const uint8_t *q = c->rbuf + off;
		uint16_t type = (uint16_t)(q[6] << 8 | q[7]);
		uint64_t from = wire_get_u64(q + 16);
		uint32_t len = wire_get_u32(q + 24), err = 0;

		if (wire_get_u32(q) != NBD_REQUEST_MAGIC)
			return -1;
		if (type == NBD_CMD_DISC)
			return -1;
		off += NBD_REQ_SIZE;
		if (type != NBD_CMD_READ) {
			err = EINVAL;
			if (type == NBD_CMD_WRITE) {
				if (c->rlen - off < len)
					return -1; /* read-only: a writer is not served */
				off += len;
			}
		} else if (len > MAX_READ || from > export_size || len > export_size - from) {
			err = EINVAL;
		}
		if (!c->structured) {
			wire_put_u32(hdrs[nh], NBD_SIMPLE_REPLY_MAGIC);
			wire_put_u32(hdrs[nh] + 4, err);
			memcpy(hdrs[nh] + 8, q + 8, 8);
			iov[n++] = (struct iovec){ hdrs[nh++], 16 };
		} else {
			uint8_t *h = hdrs[nh++];
			int data = !err && type == NBD_CMD_READ;

			wire_put_u32(h, NBD_STRUCTURED_REPLY_MAGIC);
			h[4] = 0;
			h[5] = NBD_REPLY_FLAG_DONE;
			h[6] = (uint8_t)((data ? NBD_REPLY_TYPE_OFFSET_DATA : NBD_REPLY_TYPE_ERROR) >> 8);
			h[7] = (uint8_t)(data ? NBD_REPLY_TYPE_OFFSET_DATA : NBD_REPLY_TYPE_ERROR);
			memcpy(h + 8, q + 8, 8);
			if (data) {
				wire_put_u32(h + 16, 8 + len);
				wire_put_u64(h + 20, from);
				iov[n++] = (struct iovec){ h, 28 };
			} else {
				wire_put_u32(h + 16, 6);
				wire_put_u32(h + 20, err);
				h[24] = h[25] = 0; /* no message */
				iov[n++] = (struct iovec){ h, 26 };
			}
		}
		if (!err && type == NBD_CMD_READ && len)
			iov[n++] = (struct iovec){ zeros, len };
		if (n + 2 > MAX_IOV)
			break;
	}
	*used = off;
	c->niov = n;
	return 0;
}

/* Write what is left of @c's replies past the @done bytes a send took. */
static int send_rest(struct conn *c, size_t done)
{
	int n = c->niov;

	c->niov = 0;
	return writev_all(c->fd, c->iov, n, done);
}

static void conn_free(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

/* @return 1 when @c has replies for the turn's send, 0 when not (or it is gone) */
static int on_readable(int ep, struct conn *c)
{
	for (;;) {
		ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
		size_t used = 0;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return c->niov > 0;
		if (r <= 0) {
			conn_free(ep, c);
			return 0;
		}
		c->rlen += (size_t)r;
		while (!c->transmission) {
			long n = handshake_step(c);

			if (n < 0) {
				conn_free(ep, c);
				return 0;
			}
			if (n == 0)
				break;
			memmove(c->rbuf, c->rbuf + n, c->rlen - (size_t)n);
			c->rlen -= (size_t)n;
		}
		while (c->transmission && c->rlen >= NBD_REQ_SIZE) {
			/* more than one writev's worth: the earlier replies go now */
			if ((c->niov && send_rest(c, 0) < 0) || serve(c, &used) < 0) {
				conn_free(ep, c);
				return 0;
			}
			memmove(c->rbuf, c->rbuf + used, c->rlen - used);
			c->rlen -= used;
			if (!used)
				break;
		}
		if (c->rlen == RBUF) {
			conn_free(ep, c); /* a request larger than the buffer: not this server's */
			return 0;
		}
		if ((size_t)r < RBUF)
			return c->niov > 0;
	}
}

static void on_accept(int ep, int lfd)
{
	uint8_t greet[18], cflags[4];
	struct epoll_event ev;
	struct conn *c;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	wire_put_u64(greet, NBD_MAGIC);
	wire_put_u64(greet + 8, NBD_IHAVEOPT);
	greet[16] = 0;
	greet[17] = 3; /* FIXED_NEWSTYLE | NO_ZEROES */
	/* the greeting and the client's flags blocking, then the rest through epoll */
	if (send_all(fd, greet, sizeof(greet)) < 0 || recv(fd, cflags, 4, MSG_WAITALL) != 4 ||
	    fcntl(fd, F_SETFL, O_NONBLOCK) < 0 || !(c = calloc(1, sizeof(*c)))) {
		close(fd);
		return;
	}
	c->fd = fd;
	c->no_zeroes = cflags[3] & 2;
	ev.events = EPOLLIN;
	ev.data.ptr = c;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		conn_free(ep, c);
}

/* A send of the turn: the message and its connection. */
struct pending {
	struct msghdr m;
	struct conn *c;
};

/* A non-blocking send of @c's replies, into @p. */
static void send_add(struct io_uring *ring, struct pending *p, struct conn *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	memset(&p->m, 0, sizeof(p->m));
	p->m.msg_iov = c->iov;
	p->m.msg_iovlen = (size_t)c->niov;
	p->c = c;
	io_uring_prep_sendmsg(sqe, c->fd, &p->m, MSG_DONTWAIT | MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, p);
}

/* One thread: its own epoll, the listener shared (EPOLLEXCLUSIVE wakes one). */
static void *loop(void *arg)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE }, evs[256];
	int lfd = (int)(intptr_t)arg, ep = epoll_create1(EPOLL_CLOEXEC);
	static _Thread_local struct pending pend[256];
	struct io_uring ring;

	ev.data.ptr = NULL; /* the listener */
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
		perror("nbd_floor: epoll");
		exit(1);
	}
	if (io_uring_queue_init(256, &ring, 0) < 0) {
		fprintf(stderr, "nbd_floor: no io_uring\n");
		exit(1);
	}
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1), np = 0;

		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr)
				on_accept(ep, lfd);
			else if (on_readable(ep, evs[i].data.ptr))
				send_add(&ring, &pend[np++], evs[i].data.ptr);
		}
		/* the turn's replies, every connection's, in one system call */
		if (np)
			io_uring_submit(&ring);
		for (int i = 0; i < np; i++) {
			struct io_uring_cqe *cqe;
			struct conn *c;

			if (io_uring_wait_cqe(&ring, &cqe) < 0)
				exit(1);
			c = ((struct pending *)io_uring_cqe_get_data(cqe))->c;
			if ((cqe->res < 0 && cqe->res != -EAGAIN) ||
			    send_rest(c, cqe->res < 0 ? 0 : (size_t)cqe->res) < 0)
				conn_free(ep, c);
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long threads = sysconf(_SC_NPROCESSORS_ONLN);
	int lfd;

	if (argc < 2 || argc > 4 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: nbd_floor SOCKET-PATH [export-size-bytes [threads]]\n");
		return 2;
	}
	if (argc >= 3)
		export_size = strtoull(argv[2], NULL, 0);
	if (argc == 4)
		threads = strtol(argv[3], NULL, 0);
	if (threads < 1)
		threads = 1;
	signal(SIGPIPE, SIG_IGN);
	strcpy(sa.sun_path, argv[1]);
	unlink(sa.sun_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1024) < 0) {
		perror("nbd_floor: listen");
		return 1;
	}
	for (long t = 1; t < threads; t++) {
		pthread_t th;

		if (pthread_create(&th, NULL, loop, (void *)(intptr_t)lfd) != 0) {
			fprintf(stderr, "nbd_floor: cannot start a thread\n");
			return 1;
		}
	}
	printf("ready: %ld threads\n", threads);
	fflush(stdout);
	loop((void *)(intptr_t)lfd);
	return 0;
}
