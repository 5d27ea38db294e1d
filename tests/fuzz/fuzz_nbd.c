// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the NBD parsers (daemon/nbd_proto.c): the input is
 * a peer's byte stream, cut as nbd.c cuts it (client flags, options with
 * their data, then transmission requests with WRITE data), and every piece
 * goes through the parser nbd.c would give it. The parsers may only return
 * errors; what they point at must lie inside the input.
 *
 * The STARTTLS path: when the first flag byte's bit 1 is set the stream is
 * a TCP peer's, where TLS is required (nbd_opt_gate): options before
 * STARTTLS are refused, and once STARTTLS is taken the rest of the input is
 * what the peer sends next, fed in pieces into a real server session of
 * daemon/tls.c (PSK), as rpc.c feeds it; the session may only fail. Bit 2
 * runs the PSK file parser over the whole input instead.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "nbd_proto.h"
#include "proto.h"
#include "tls.h"

/* One server context for every run: a PSK file made once, then removed. */
static struct tls_ctx *server(void)
{
	static struct tls_ctx *ctx;
	char path[] = "/tmp/fuzz_nbd.psk.XXXXXX", err[512];
	const char *keys = "alice:000102030405060708090a0b0c0d0e0f\nroot:ffee\n";
	struct config cfg = { 0 };
	int fd;

	if (ctx)
		return ctx;
	fd = mkstemp(path);
	if (fd < 0 || write(fd, keys, strlen(keys)) != (ssize_t)strlen(keys))
		abort();
	close(fd);
	cfg.nbd_listen = "127.0.0.1:0";
	cfg.nbd_tls_psk = path;
	if (tls_ctx_new(&cfg, &ctx, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz_nbd: %s\n", err);
		abort();
	}
	unlink(path);
	return ctx;
}

/* What follows STARTTLS: records into a session, in pieces cut by their first byte. */
static void tls_stream(const uint8_t *p, size_t n)
{
	struct tls_conn *t = tls_conn_new(server());
	uint8_t plain[16384], *outb;

	if (!t)
		abort();
	while (n) {
		size_t piece = 1 + p[0] % 64 * 16;
		long got;

		if (piece > n)
			piece = n;
		if (tls_conn_feed(t, p, piece) < 0)
			abort();
		p += piece;
		n -= piece;
		while ((got = tls_conn_read(t, plain, sizeof(plain))) > 0)
			if ((size_t)got > sizeof(plain))
				abort();
		tls_conn_take_out(t, &outb);
		free(outb);
		if (got < 0)
			break; /* failed: rpc.c closes the connection */
	}
	tls_conn_free(t);
}

static void inside(const uint8_t *p, size_t n, const uint8_t *lo, size_t len)
{
	if (n && (p < lo || p + n > lo + len))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0;
	int transmission = 0;

	int tls_required;

	if (size < 4)
		return 0;
	if (data[1] & 4) {
		unsigned line;
		int n = tls_psk_parse(NULL, (const char *)data, size, &line);

		if (n < -1 || (n < 0 && line == 0) || (n > 0 && (size_t)n > size / 4 + 1))
			abort();
		return 0;
	}
	tls_required = data[1] & 2;
	pos = 4; /* the client flags */
	while (!transmission && size - pos >= NBD_OPT_HDR) {
		struct nbd_opt o;
		const uint8_t *d;

		if (nbd_opt_get(data + pos, &o) < 0)
			return 0;
		pos += NBD_OPT_HDR;
		if (o.len > NBD_OPT_MAX || o.len > size - pos)
			return 0;
		d = data + pos;
		switch (nbd_opt_gate(o.opt, tls_required)) {
		case NBD_GATE_PASS:
			break;
		case NBD_GATE_TLS_REQD:
			if (o.opt == NBD_OPT_STARTTLS || o.opt == NBD_OPT_ABORT)
				abort(); /* those two are never refused for want of TLS */
			pos += o.len;
			continue;
		case NBD_GATE_CLOSE:
			if (o.opt != NBD_OPT_EXPORT_NAME)
				abort();
			return 0;
		case NBD_GATE_STARTTLS:
			if (o.opt != NBD_OPT_STARTTLS)
				abort();
			pos += o.len;
			if (o.len == 0) {
				tls_stream(data + pos, size - pos);
				return 0;
			}
			continue; /* refused: STARTTLS takes no data */
		}
		if (o.opt == NBD_OPT_INFO || o.opt == NBD_OPT_GO) {
			struct nbd_export_req r;

			if (nbd_export_req_parse(d, o.len, &r) == 0) {
				inside(r.name, r.namelen, d, o.len);
				if (r.namelen > NBD_NAME_MAX)
					abort();
				transmission = o.opt == NBD_OPT_GO;
			}
		} else if (o.opt == NBD_OPT_SET_META_CONTEXT || o.opt == NBD_OPT_LIST_META_CONTEXT) {
			struct nbd_meta_req m;

			if (nbd_meta_req_parse(d, o.len, &m) == 0) {
				inside(m.name, m.namelen, d, o.len);
				for (uint32_t i = 0; i < m.nqueries && i < NBD_QUERIES_MAX; i++)
					inside(m.query[i], m.querylen[i], d, o.len);
			}
		} else if (o.opt == NBD_OPT_EXPORT_NAME) {
			transmission = 1;
		}
		pos += o.len;
	}
	while (transmission && size - pos >= NBD_REQ_SIZE) {
		struct nbd_request r;
		uint64_t esize = wire_get_u32(data) ? wire_get_u32(data) : 1u << 20;
		uint32_t err;

		if (nbd_request_get(data + pos, &r) < 0)
			return 0;
		pos += NBD_REQ_SIZE;
		err = nbd_request_check(&r, esize, 1u << 16, data[0] & 1);
		if (!err && (r.type == NBD_CMD_READ || r.type == NBD_CMD_WRITE) &&
		    (r.len == 0 || r.len > 1u << 16 || r.off + r.len > esize))
			abort(); /* a request the check let through must be servable */
		if (nbd_request_data(&r) > size - pos)
			return 0;
		pos += nbd_request_data(&r);
	}
	return 0;
}
