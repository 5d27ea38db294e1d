// SPDX-License-Identifier: MIT
/*
 * The client library of client.h: one blocking Unix-socket connection to
 * cofferd, HELLO, synchronous JSON admin calls and pipelined record I/O.
 *
 * Requests are framed into an output buffer and sent with coffer_flush_out();
 * while sending, the socket is also read, so a client with many requests in
 * flight never deadlocks against a daemon that stops reading it until its
 * replies are taken (the daemon's back-pressure). Replies are matched to
 * requests by opcode and id: record I/O replies through a small hash table
 * of pending requests, an admin reply by the id coffer_call() chose. Record
 * I/O completions that arrive during an admin call are kept for coffer_reap().
 *
 * Nothing is sent before the server's uid (SO_PEERCRED) is known to be root,
 * ours or the one COFFER_SERVER_UID names: key text goes over this socket.
 */

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "proto.h"
#include "sockpath.h"

#define OUT_FLUSH (1u << 20) /* send when this much is queued */
#define IN_CHUNK (256u << 10)

struct pend {
	uint32_t id;
	uint16_t op; /* 0: empty slot */
	uint32_t len;
	void *buf;
};

struct coffer_conn {
	int fd;
	uint8_t *obuf;
	size_t olen, ocap;
	uint8_t *ibuf;
	size_t ipos, ilen, icap;
	struct pend *tab; /* open addressing, power-of-two size */
	size_t tcap, tcount;
	struct coffer_completion *done;
	size_t dhead, dlen, dcap; /* FIFO ring of completions not yet reaped */
	uint32_t admin_id;
	uint32_t max_frame; /* from HELLO */
	int broken;
};

const char *coffer_socket_path(const char *path)
{
	const char *env;

	if (path && path[0])
		return path;
	env = getenv("COFFER_SOCKET");
	if (env && env[0])
		return env;
	return sockpath_default();
}

int coffer_fd(const struct coffer_conn *c)
{
	return c->fd;
}

uint32_t coffer_max_io(const struct coffer_conn *c)
{
	return c->max_frame > PROTO_IO_BODY ? c->max_frame - PROTO_IO_BODY : 0;
}

/* ---- pending table ---- */

static size_t slot_of(uint32_t id, size_t cap)
{
	return (id * 2654435761u) & (cap - 1);
}

static struct pend *pend_find(struct coffer_conn *c, uint32_t id)
{
	if (!c->tcap)
		return NULL;
	for (size_t i = slot_of(id, c->tcap);; i = (i + 1) & (c->tcap - 1)) {
		if (!c->tab[i].op)
			return NULL;
		if (c->tab[i].id == id)
			return &c->tab[i];
	}
}

static int pend_grow(struct coffer_conn *c)
{
	size_t ncap = c->tcap ? c->tcap * 2 : 64;
	struct pend *nt = calloc(ncap, sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	for (size_t i = 0; i < c->tcap; i++) {
		if (!c->tab[i].op)
			continue;
		size_t j = slot_of(c->tab[i].id, ncap);

		while (nt[j].op)
			j = (j + 1) & (ncap - 1);
		nt[j] = c->tab[i];
	}
	free(c->tab);
	c->tab = nt;
	c->tcap = ncap;
	return 0;
}

static int pend_add(struct coffer_conn *c, uint32_t id, uint16_t op, uint32_t len, void *buf)
{
	size_t i;

	if (pend_find(c, id))
		return -EEXIST;
	if ((c->tcount + 1) * 2 > c->tcap && pend_grow(c) < 0)
		return -ENOMEM;
	i = slot_of(id, c->tcap);
	while (c->tab[i].op)
		i = (i + 1) & (c->tcap - 1);
	c->tab[i] = (struct pend){ .id = id, .op = op, .len = len, .buf = buf };
	c->tcount++;
	return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void pend_del(struct coffer_conn *c, struct pend *p)
{
	size_t i = (size_t)(p - c->tab), j = i;

	c->tab[i].op = 0;
	c->tcount--;
	for (;;) {
		size_t k;

		j = (j + 1) & (c->tcap - 1);
		if (!c->tab[j].op)
			return;
		k = slot_of(c->tab[j].id, c->tcap);
		/* move j back to i unless its home k lies cyclically in (i, j] */
		if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		c->tab[i] = c->tab[j];
		c->tab[j].op = 0;
		i = j;
	}
}

static int done_push(struct coffer_conn *c, uint32_t id, int status)
{
	if (c->dlen == c->dcap) {
		size_t ncap = c->dcap ? c->dcap * 2 : 64;
		struct coffer_completion *nd = malloc(ncap * sizeof(*nd));

		if (!nd)
			return -ENOMEM;
		for (size_t i = 0; i < c->dlen; i++)
			nd[i] = c->done[(c->dhead + i) % c->dcap];
		free(c->done);
		c->done = nd;
		c->dcap = ncap;
		c->dhead = 0;
	}
	c->done[(c->dhead + c->dlen) % c->dcap] = (struct coffer_completion){ id, status };
	c->dlen++;
	return 0;
}

/* ---- buffers and the socket ---- */

static int out_reserve(struct coffer_conn *c, size_t n)
{
	if (c->olen + n <= c->ocap)
		return 0;
	size_t ncap = c->ocap ? c->ocap : 64 << 10;

	while (ncap < c->olen + n)
		ncap *= 2;
	uint8_t *nb = realloc(c->obuf, ncap);

	if (!nb)
		return -ENOMEM;
	c->obuf = nb;
	c->ocap = ncap;
	return 0;
}

/* Read what the socket has into the input buffer. @return bytes, 0 on EAGAIN, -errno */
static int in_read(struct coffer_conn *c)
{
	ssize_t n;

	if (c->ipos && c->ipos == c->ilen)
		c->ipos = c->ilen = 0;
	if (c->icap - c->ilen < IN_CHUNK / 4) {
		if (c->ipos) {
			memmove(c->ibuf, c->ibuf + c->ipos, c->ilen - c->ipos);
			c->ilen -= c->ipos;
			c->ipos = 0;
		}
		if (c->icap - c->ilen < IN_CHUNK / 4) {
			uint8_t *nb = realloc(c->ibuf, c->icap + IN_CHUNK);

			if (!nb)
				return -ENOMEM;
			c->ibuf = nb;
			c->icap += IN_CHUNK;
		}
	}
	n = recv(c->fd, c->ibuf + c->ilen, c->icap - c->ilen, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	c->ilen += (size_t)n;
	return (int)n;
}

/* Wait for input (and output room if @want_out) up to @timeout_ms. */
static int wait_io(struct coffer_conn *c, int want_out, int timeout_ms, int *in, int *out)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | (want_out ? POLLOUT : 0) };
	int ret;

	do
		ret = poll(&p, 1, timeout_ms);
	while (ret < 0 && errno == EINTR);
	if (ret < 0)
		return -errno;
	*in = !!(p.revents & (POLLIN | POLLHUP | POLLERR));
	*out = !!(p.revents & POLLOUT);
	return ret;
}

int coffer_flush_out(struct coffer_conn *c)
{
	size_t off = 0;
	int ret = 0;

	if (c->broken)
		return -ECONNRESET;
	while (off < c->olen) {
		ssize_t n = send(c->fd, c->obuf + off, c->olen - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		int in, out;

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			ret = -errno;
			break;
		}
		/* the socket is full: take replies meanwhile so the daemon can go on */
		ret = wait_io(c, 1, -1, &in, &out);
		if (ret < 0)
			break;
		ret = 0;
		if (in) {
			ret = in_read(c);
			if (ret < 0)
				break;
			ret = 0;
		}
	}
	if (ret < 0) {
		c->broken = 1;
		return ret;
	}
	c->olen = 0;
	return 0;
}

static int frame_queue(struct coffer_conn *c, uint16_t op, uint32_t id, const void *body,
		       size_t blen, const void *data, size_t dlen)
{
	struct proto_hdr h = { .len = (uint32_t)(blen + dlen), .op = op, .req_id = id };
	int ret;

	if (c->olen && c->olen + PROTO_HDR_SIZE + blen + dlen > OUT_FLUSH) {
		ret = coffer_flush_out(c);
		if (ret < 0)
			return ret;
	}
	ret = out_reserve(c, PROTO_HDR_SIZE + blen + dlen);
	if (ret < 0)
		return ret;
	proto_hdr_put(c->obuf + c->olen, &h);
	c->olen += PROTO_HDR_SIZE;
	if (blen)
		memcpy(c->obuf + c->olen, body, blen);
	c->olen += blen;
	if (dlen)
		memcpy(c->obuf + c->olen, data, dlen);
	c->olen += dlen;
	return 0;
}

/*
 * Take the next complete frame out of the input buffer. Record I/O replies are
 * consumed here (data copied, completion queued) and 1 is returned with
 * h->op set; other replies are left to the caller via @payload.
 * @return 1 (a frame), 0 (need more input), -EPROTO
 */
static int frame_next(struct coffer_conn *c, struct proto_hdr *h, const uint8_t **payload)
{
	const struct proto_cmd *cmd;
	struct pend *p;

	if (c->ilen - c->ipos < PROTO_HDR_SIZE)
		return 0;
	proto_hdr_get(c->ibuf + c->ipos, h);
	if (h->len > (256u << 20))
		return -EPROTO;
	if (c->ilen - c->ipos < PROTO_HDR_SIZE + (size_t)h->len)
		return 0;
	*payload = c->ibuf + c->ipos + PROTO_HDR_SIZE;
	c->ipos += PROTO_HDR_SIZE + h->len;
	cmd = proto_cmd_by_op(h->op);
	if (!cmd || !(cmd->flags & CMD_IO))
		return 1;
	p = pend_find(c, h->req_id);
	if (!p || p->op != h->op)
		return 1; /* not ours: ignored by the callers */
	if (h->op == PROTO_OP_READ && h->status == 0) {
		if (h->len != p->len)
			h->status = -EPROTO;
		else
			memcpy(p->buf, *payload, h->len);
	}
	pend_del(c, p);
	if (done_push(c, h->req_id, h->status) < 0)
		return -ENOMEM;
	return 1;
}

/* Wait for the reply to (@op, @id), keeping I/O completions met on the way. */
static int wait_reply(struct coffer_conn *c, uint16_t op, uint32_t id, struct proto_hdr *h,
		      const uint8_t **payload)
{
	for (;;) {
		int ret = frame_next(c, h, payload);

		if (ret < 0)
			return ret;
		if (ret == 1) {
			if (h->op == op && h->req_id == id)
				return 0;
			if (h->op == 0 || !proto_cmd_by_op(h->op))
				return -EPROTO; /* the daemon refused our frame */
			continue;
		}
		int in, out;

		ret = wait_io(c, 0, -1, &in, &out);
		if (ret < 0)
			return ret;
		ret = in_read(c);
		if (ret < 0)
			return ret;
	}
}

static int hello(struct coffer_conn *c)
{
	uint8_t body[PROTO_HELLO_BODY];
	const uint8_t *payload;
	struct proto_hdr h;
	int ret, sent;

	wire_put_u32(body, PROTO_MAGIC);
	wire_put_u16(body + 4, PROTO_VERSION_MIN);
	wire_put_u16(body + 6, PROTO_VERSION);
	ret = frame_queue(c, PROTO_OP_HELLO, 0, body, sizeof(body), NULL, 0);
	if (ret < 0)
		return ret;
	ret = coffer_flush_out(c);
	/* a daemon refusing us may answer and close before our HELLO is out: read anyway */
	if (ret < 0 && ret != -EPIPE && ret != -ECONNRESET)
		return ret;
	sent = ret;
	ret = wait_reply(c, PROTO_OP_HELLO, 0, &h, &payload);
	if (ret < 0)
		return sent < 0 ? sent : ret;
	if (h.status < 0)
		return h.status;
	if (h.len < PROTO_HELLO_REPLY || wire_get_u32(payload) != PROTO_MAGIC)
		return -EPROTO;
	c->max_frame = wire_get_u32(payload + 6);
	return 0;
}

/*
 * Whoever serves the socket gets key text from us: before a byte is sent,
 * the peer must be root, our own uid, or the uid named by COFFER_SERVER_UID.
 * A socket in a directory others can write may have been swapped.
 */
static int check_server(int fd, const char *path, char *err, size_t errlen)
{
	const char *env = getenv("COFFER_SERVER_UID");
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	unsigned long trusted;
	char *end;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		int ret = -errno;

		if (err && errlen)
			snprintf(err, errlen, "socket %s: peer credentials: %s", path,
				 strerror(-ret));
		return ret;
	}
	if (cred.uid == 0 || cred.uid == geteuid() || cred.uid == getuid())
		return 0;
	if (env && env[0]) {
		errno = 0;
		trusted = strtoul(env, &end, 10);
		if (errno || *end || env[0] < '0' || env[0] > '9' || trusted > UINT32_MAX) {
			if (err && errlen)
				snprintf(err, errlen, "COFFER_SERVER_UID=%s is not a uid", env);
			return -EINVAL;
		}
		if ((uid_t)trusted == cred.uid)
			return 0;
	}
	if (err && errlen)
		snprintf(err, errlen,
			 "socket %s is served by uid %u, not root or you; set COFFER_SERVER_UID=%u "
			 "to trust it",
			 path, (unsigned)cred.uid, (unsigned)cred.uid);
	return -EPERM;
}

int coffer_connect(const char *path, struct coffer_conn **out)
{
	return coffer_connect_err(path, out, NULL, 0);
}

int coffer_connect_err(const char *path, struct coffer_conn **out, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct coffer_conn *c;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	path = coffer_socket_path(path);
	if (!path || strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		ret = -errno;
		goto out;
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		goto out;
	}
	ret = check_server(c->fd, path, err, errlen);
	if (ret < 0)
		goto out;
	ret = hello(c);
out:
	if (ret < 0)
		coffer_close(c);
	else
		*out = c;
	return ret;
}

void coffer_close(struct coffer_conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->obuf);
	free(c->ibuf);
	free(c->tab);
	free(c->done);
	free(c);
}

int coffer_call(struct coffer_conn *c, const char *cmd, json_t *args, json_t **reply, char *err,
		size_t errlen)
{
	return coffer_call_data(c, cmd, args, NULL, 0, reply, NULL, NULL, err, errlen);
}

int coffer_call_data(struct coffer_conn *c, const char *cmd, json_t *args, const void *data,
		     size_t dlen, json_t **reply, const uint8_t **out, size_t *outlen, char *err,
		     size_t errlen)
{
	const struct proto_cmd *pc = proto_cmd_by_name(cmd);
	const uint8_t *payload;
	struct proto_hdr h;
	json_t *empty = NULL, *res = NULL;
	json_error_t jerr;
	char *body = NULL;
	uint32_t id;
	int ret;

	size_t jlen;

	if (reply)
		*reply = NULL;
	if (out) {
		*out = NULL;
		*outlen = 0;
	}
	if (err && errlen)
		err[0] = '\0';
	if (!pc || !(pc->flags & CMD_JSON) || ((data || out) && !(pc->flags & CMD_DATA))) {
		if (err)
			snprintf(err, errlen, "%s: unknown command", cmd);
		return -EINVAL;
	}
	if (!args)
		args = empty = json_object();
	body = json_dumps(args, JSON_COMPACT);
	json_decref(empty);
	if (!body)
		return -ENOMEM;
	/* admin ids count down from the top, apart from the usual I/O ids */
	id = UINT32_MAX - c->admin_id++;
	/* CMD_DATA: the object's NUL, then the bytes */
	ret = frame_queue(c, pc->op, id, body, strlen(body) + (data ? 1 : 0), data, data ? dlen : 0);
	if (pc->flags & CMD_SECRET)
		explicit_bzero(body, strlen(body));
	free(body);
	if (ret == 0)
		ret = coffer_flush_out(c);
	if (ret == 0)
		ret = wait_reply(c, pc->op, id, &h, &payload);
	if (ret < 0) {
		if (err)
			snprintf(err, errlen, "connection to cofferd: %s", proto_strerror(ret));
		c->broken = 1;
		return ret;
	}
	jlen = h.len;
	if (pc->flags & CMD_DATA) {
		const uint8_t *nul = h.len ? memchr(payload, 0, h.len) : NULL;

		if (nul) {
			jlen = (size_t)(nul - payload);
			if (out) {
				*out = nul + 1;
				*outlen = h.len - jlen - 1;
			}
		}
	}
	if (jlen) {
		res = json_loadb((const char *)payload, jlen, 0, &jerr);
		if (!json_is_object(res)) {
			json_decref(res);
			if (err)
				snprintf(err, errlen, "%s: bad reply from cofferd", cmd);
			return -EPROTO;
		}
	}
	if (h.status < 0) {
		const char *m = json_string_value(json_object_get(res, "error"));

		if (err)
			snprintf(err, errlen, "%s", m ? m : proto_strerror(h.status));
		json_decref(res);
		return h.status;
	}
	if (!res)
		res = json_object();
	if (reply)
		*reply = res;
	else
		json_decref(res);
	return 0;
}

int coffer_ds_open(struct coffer_conn *c, const char *name, uint64_t *volsize,
		   uint32_t *recordsize)
{
	json_t *args = json_pack("{s:s}", "name", name), *reply = NULL;
	char err[256];
	int ret;

	if (!args)
		return -ENOMEM;
	ret = coffer_call(c, "ds_open", args, &reply, err, sizeof(err));
	json_decref(args);
	if (ret < 0)
		return ret;
	if (volsize)
		*volsize = (uint64_t)json_integer_value(json_object_get(reply, "volsize"));
	if (recordsize)
		*recordsize = (uint32_t)json_integer_value(json_object_get(reply, "recordsize"));
	ret = (int)json_integer_value(json_object_get(reply, "handle"));
	json_decref(reply);
	return ret;
}

int coffer_ds_close(struct coffer_conn *c, int handle)
{
	json_t *args = json_pack("{s:i}", "handle", handle);
	int ret;

	if (!args)
		return -ENOMEM;
	ret = coffer_call(c, "ds_close", args, NULL, NULL, 0);
	json_decref(args);
	return ret;
}

int coffer_submit(struct coffer_conn *c, uint32_t id, enum coffer_op op, int handle,
		  uint64_t off, uint32_t len, void *buf)
{
	static const uint16_t ops[] = {
		[COFFER_READ] = PROTO_OP_READ,
		[COFFER_WRITE] = PROTO_OP_WRITE,
		[COFFER_FLUSH] = PROTO_OP_FLUSH,
		[COFFER_DISCARD] = PROTO_OP_DISCARD,
	};
	uint8_t body[PROTO_IO_BODY];
	struct proto_io io = { .handle = (uint32_t)handle, .off = off, .len = len };
	int ret;

	if (op < COFFER_READ || op > COFFER_DISCARD || handle < 0)
		return -EINVAL;
	if (c->broken)
		return -ECONNRESET;
	ret = pend_add(c, id, ops[op], len, buf);
	if (ret < 0)
		return ret;
	proto_io_put(body, &io);
	ret = frame_queue(c, ops[op], id, body, sizeof(body), op == COFFER_WRITE ? buf : NULL,
			  op == COFFER_WRITE ? len : 0);
	if (ret < 0)
		pend_del(c, pend_find(c, id));
	return ret;
}

int coffer_reap(struct coffer_conn *c, struct coffer_completion *out, int max, int timeout_ms)
{
	int n = 0;

	for (;;) {
		struct proto_hdr h;
		const uint8_t *payload;
		int ret, in, wo;

		/* parse everything buffered, then hand out what is done */
		while ((ret = frame_next(c, &h, &payload)) == 1)
			;
		if (ret < 0)
			return ret;
		while (n < max && c->dlen) {
			out[n++] = c->done[c->dhead];
			c->dhead = (c->dhead + 1) % c->dcap;
			c->dlen--;
		}
		if (n > 0 || max <= 0)
			return n;
		if (c->olen) {
			ret = coffer_flush_out(c);
			if (ret < 0)
				return ret;
			continue;
		}
		if (c->tcount == 0)
			return 0; /* nothing in flight: nothing will come */
		ret = wait_io(c, 0, timeout_ms, &in, &wo);
		if (ret < 0)
			return ret;
		if (ret == 0)
			return 0;
		ret = in_read(c);
		if (ret < 0) {
			c->broken = 1;
			return ret;
		}
	}
}

/* Submit one request and wait for exactly its completion. */
static int sync_io(struct coffer_conn *c, enum coffer_op op, int handle, uint64_t off, void *buf,
		   uint32_t len)
{
	static const uint32_t base = 0x80000000u;
	struct coffer_completion cc;
	uint32_t id = base;
	int ret;

	/* an id no asynchronous request uses right now */
	while (pend_find(c, id))
		id++;
	ret = coffer_submit(c, id, op, handle, off, len, buf);
	if (ret == 0)
		ret = coffer_flush_out(c);
	if (ret < 0)
		return ret;
	for (;;) {
		struct proto_hdr h;
		const uint8_t *payload;
		int in, wo;

		/* look among finished completions first, leave others queued */
		for (size_t i = 0; i < c->dlen; i++) {
			size_t k = (c->dhead + i) % c->dcap;

			if (c->done[k].id != id)
				continue;
			cc = c->done[k];
			for (size_t j = i; j + 1 < c->dlen; j++)
				c->done[(c->dhead + j) % c->dcap] =
					c->done[(c->dhead + j + 1) % c->dcap];
			c->dlen--;
			return cc.status;
		}
		ret = frame_next(c, &h, &payload);
		if (ret < 0)
			return ret;
		if (ret == 1)
			continue;
		ret = wait_io(c, 0, -1, &in, &wo);
		if (ret < 0)
			return ret;
		ret = in_read(c);
		if (ret < 0) {
			c->broken = 1;
			return ret;
		}
	}
}

int coffer_read(struct coffer_conn *c, int handle, uint64_t off, void *buf, uint32_t len)
{
	return sync_io(c, COFFER_READ, handle, off, buf, len);
}

int coffer_write(struct coffer_conn *c, int handle, uint64_t off, const void *buf, uint32_t len)
{
	return sync_io(c, COFFER_WRITE, handle, off, (void *)buf, len);
}

int coffer_ds_flush(struct coffer_conn *c, int handle)
{
	return sync_io(c, COFFER_FLUSH, handle, 0, NULL, 0);
}

int coffer_discard(struct coffer_conn *c, int handle, uint64_t off, uint32_t len)
{
	return sync_io(c, COFFER_DISCARD, handle, off, NULL, len);
}

int coffer_send_raw(struct coffer_conn *c, const void *buf, size_t len)
{
	int ret = out_reserve(c, len);

	if (ret < 0)
		return ret;
	memcpy(c->obuf + c->olen, buf, len);
	c->olen += len;
	return coffer_flush_out(c);
}

int coffer_recv_raw(struct coffer_conn *c, struct proto_hdr *h, void *payload, size_t cap,
		    int timeout_ms)
{
	for (;;) {
		int in, wo, ret;

		if (c->ilen - c->ipos >= PROTO_HDR_SIZE) {
			proto_hdr_get(c->ibuf + c->ipos, h);
			if (c->ilen - c->ipos >= PROTO_HDR_SIZE + (size_t)h->len) {
				size_t n = h->len < cap ? h->len : cap;

				if (n)
					memcpy(payload, c->ibuf + c->ipos + PROTO_HDR_SIZE, n);
				c->ipos += PROTO_HDR_SIZE + h->len;
				return 1;
			}
		}
		ret = wait_io(c, 0, timeout_ms, &in, &wo);
		if (ret <= 0)
			return ret;
		ret = in_read(c);
		if (ret < 0)
			return ret;
	}
}
