// SPDX-License-Identifier: MIT
/*
 * The NBD front end: a framing of the transport (rpc.h) that speaks the
 * Network Block Device protocol (nbd_proto.h) on its own Unix socket, so
 * that qemu, qemu-img, nbdcopy, nbdinfo, nbdfuse, nbd-client and fio's nbd
 * engine use a dataset as a block device. Export name = dataset name.
 *
 * The design decision: an NBD connection is one more client of the
 * dispatcher, not a server of its own. Its options become the control
 * protocol's calls (GO and INFO a DS_OPEN, LIST a DS_LIST of what the
 * peer may open; the handle of INFO, or of a GO refused once open, goes
 * back with a DS_CLOSE), its requests READ/WRITE/FLUSH/DISCARD calls on the
 * handle GO opened, with bodies made by proto_io_put(), and BLOCK_STATUS a
 * MAP call. nbd.c sees no handle table, worker or dataset: what it asks of
 * the store, the command table names. So the peer's
 * credentials (SO_PEERCRED), the admin and owner rules, the per-uid and buffering
 * limits, the handshake timeout and the I/O batches of the workers are the
 * ones the control socket has; there is no thread per connection, and an
 * open export is a handle like any other (unload-key, destroy and export
 * answer EBUSY while it is open).
 *
 * What NBD adds is mapped here:
 *   FUA        the write, then a FLUSH, then the reply
 *   TRIM       DISCARD (whole records freed, partial ones zeroed)
 *   WRITE_ZEROES  DISCARD, or with NO_HOLE writes of zeros in pieces of
 *              the maximum block size
 *   CACHE      a READ whose data is dropped (it fills the data cache)
 *   structured READ  a chunk per run of records: OFFSET_HOLE for the
 *              pieces that read as zeros, OFFSET_DATA for the rest. A hole
 *              reads as zeros (the read path fills a record without a block
 *              pointer with them), so every hole is sent as one; written
 *              zeros are too, which is what OFFSET_HOLE means ("reads as
 *              zeros"). The runs come from the data the read returned, not
 *              from a second lookup of the block pointers: that would cost
 *              every read a trip to the metadata that the read made already.
 *              A read with DF set is one chunk, as the client asked
 *   READ_ONLY  on a snapshot's export (DATASET@SNAP), with no TRIM,
 *              WRITE_ZEROES or FUA; a write is EPERM
 *   CAN_MULTI_CONN  a FLUSH commits the pool's transaction group, so it
 *              covers what every connection had written
 *   BLOCK_STATUS  base:allocation: a MAP call on the handle (the table's
 *              row: the dispatcher reads the block pointers on the
 *              threadpool, counts and logs it), a descriptor per run it
 *              returns; with REQ_ONE it asks for one run
 * Over TCP (nbd_listen) TLS is required, as the spec has it for a TLS-only
 * server: until STARTTLS every option but STARTTLS and ABORT is refused with
 * NBD_REP_ERR_TLS_REQD (EXPORT_NAME, which has no error reply, closes), so
 * nothing is said about an export to a peer nobody knows. The TLS session
 * (tls.c) names the peer, a local user, and from there the rules are the
 * Unix socket's; before, the transport holds it in its pool of unnamed TCP
 * peers (rpc.c), outside every limit of local users. On the Unix socket
 * STARTTLS is not offered.
 * Negotiation runs one option at a time: an option that needs the store
 * holds the connection (rpc_conn_hold) until its call is done, so replies
 * leave in the order of the options. Until GO the peer has the transport's
 * small read buffer and hello_timeout, and an option's data is at most
 * NBD_OPT_MAX bytes; past either the connection closes.
 */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common.h" /* the error map: the status codes of replies */
#include "counters.h"
#include "log.h"
#include "nbd.h"
#include "nbd_proto.h"
#include "rpc.h"

enum phase {
	PH_FLAGS,        /* the client's flags are due */
	PH_OPTIONS,      /* negotiation */
	PH_TRANSMISSION, /* requests on the export */
};

/* What the framing keeps per connection. */
struct nbd_conn {
	struct rpc_conn *conn;
	enum phase phase;
	uint32_t cflags;
	int structured;      /* STRUCTURED_REPLY negotiated */
	int meta_alloc;      /* SET_META_CONTEXT chose base:allocation ... */
	char meta_name[PROTO_NAME_MAX + 1]; /* ... for this export */
	int block_status;    /* ... and GO opened that export */
	/* the export GO opened */
	uint32_t handle;
	uint64_t size;
	uint32_t recordsize;
	char name[PROTO_NAME_MAX + 1];
};

/* Where a request is in its steps. */
enum step {
	ST_OPTION,  /* an option's call */
	ST_IO,      /* the request's call */
	ST_FLUSH,   /* FUA: the flush after it */
};

struct nbd_req {
	struct rpc_req r; /* first */
	struct nbd_conn *nc;
	enum step step;
	/* options */
	uint32_t opt;
	uint16_t info[NBD_INFO_REQ_MAX];
	uint16_t ninfo;
	/* requests */
	struct nbd_request q;
	uint64_t done_len;   /* WRITE_ZEROES with NO_HOLE: bytes written so far */
	uint8_t *zeros;
};

static struct {
	const struct config *cfg;
	uint32_t max_len; /* the largest READ or WRITE: max_frame less the I/O body */
} nbd;

static struct nbd_conn *nbd_of(struct rpc_conn *conn)
{
	return *rpc_conn_priv(conn);
}

/* ---- bytes out ---- */

/* Queue @len bytes (taken over, malloc'd) as a reply of their own. @return 0 or -1 */
static int send_bytes(struct nbd_conn *nc, uint8_t *buf, size_t len)
{
	struct proto_hdr h = { 0 };
	struct rpc_req *r;

	if (!buf) {
		rpc_conn_close_after(nc->conn);
		return -1;
	}
	r = rpc_req_new(nc->conn, &h, 0);
	if (!r) {
		free(buf);
		return -1;
	}
	r->dc.out = buf;
	r->dc.payload = buf;
	r->dc.payload_len = len;
	rpc_req_done(&r->dc);
	return 0;
}

/* A growable buffer of option replies sent as one. */
struct obuf {
	uint8_t *p;
	size_t len, cap;
	int failed;
};

static uint8_t *ob_room(struct obuf *b, size_t n)
{
	if (b->failed)
		return NULL;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		uint8_t *np;

		while (cap < b->len + n)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			b->failed = 1;
			return NULL;
		}
		b->p = np;
		b->cap = cap;
	}
	b->len += n;
	return b->p + b->len - n;
}

/* One option reply of @type with @len bytes of @data (NULL: zeros follow later). */
static uint8_t *ob_reply(struct obuf *b, uint32_t opt, uint32_t type, const void *data,
			 size_t len)
{
	uint8_t *p = ob_room(b, NBD_OPT_REPLY_HDR + len);

	if (!p)
		return NULL;
	wire_put_u64(p, NBD_REP_MAGIC);
	wire_put_u32(p + 8, opt);
	wire_put_u32(p + 12, type);
	wire_put_u32(p + 16, (uint32_t)len);
	if (data)
		memcpy(p + NBD_OPT_REPLY_HDR, data, len);
	return p + NBD_OPT_REPLY_HDR;
}

static int ob_send(struct nbd_conn *nc, struct obuf *b)
{
	if (b->failed) {
		free(b->p);
		rpc_conn_close_after(nc->conn);
		return -1;
	}
	return send_bytes(nc, b->p, b->len);
}

/* An option's error reply with a text a person can act on. */
static int opt_error(struct nbd_conn *nc, uint32_t opt, uint32_t type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int opt_error(struct nbd_conn *nc, uint32_t opt, uint32_t type, const char *fmt, ...)
{
	struct obuf b = { 0 };
	char msg[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	log_info("conn %llu (nbd): option %u refused: %s",
		 (unsigned long long)rpc_conn_client(nc->conn)->id, opt, msg);
	ob_reply(&b, opt, type, msg, (size_t)n);
	return ob_send(nc, &b);
}

static int opt_ack(struct nbd_conn *nc, uint32_t opt)
{
	struct obuf b = { 0 };

	ob_reply(&b, opt, NBD_REP_ACK, NULL, 0);
	return ob_send(nc, &b);
}

/* ---- calls to the dispatcher ---- */

static struct nbd_req *req_new(struct nbd_conn *nc, uint16_t op, size_t charge)
{
	struct proto_hdr h = { .op = op };
	struct nbd_req *q = (struct nbd_req *)rpc_req_new(nc->conn, &h, charge);

	if (q)
		q->nc = nc;
	return q;
}

/* Dispatch a JSON call @op with @args (consumed) on @q; @done gets its outcome. */
static void call_json(struct nbd_req *q, uint16_t op, json_t *args, disp_done_fn done)
{
	char *body = args ? json_dumps(args, JSON_COMPACT) : NULL;

	json_decref(args);
	q->r.dc.hdr.op = op;
	q->r.dc.done = done;
	if (!body) {
		dispatch_refuse(&q->r.dc, -ENOMEM);
		return;
	}
	q->r.dc.hdr.len = (uint32_t)strlen(body);
	q->r.dc.body = (uint8_t *)body;
	dispatch_call(&q->r.dc);
}

/* The reply object of a JSON call, or NULL. */
static json_t *call_reply(const struct disp_call *c)
{
	return c->payload_len ? json_loadb((const char *)c->payload, c->payload_len, 0, NULL)
			      : NULL;
}

/*
 * The option is done: its replies are queued, the next option may be parsed
 * (before the call's own completion, which may free the connection).
 */
static void opt_done(struct nbd_req *q)
{
	rpc_conn_hold(q->nc->conn, 0);
	/* the call's own reply (JSON) is not for the peer */
	q->r.dc.payload = NULL;
	q->r.dc.payload_len = 0;
	q->r.hdr_len = 0;
	rpc_req_done(&q->r.dc);
}

/* ---- negotiation ---- */

static void greet(struct nbd_conn *nc)
{
	uint8_t *g = malloc(NBD_GREETING_SIZE);

	if (!g) {
		rpc_conn_close_after(nc->conn);
		return;
	}
	wire_put_u64(g, NBD_MAGIC);
	wire_put_u64(g + 8, NBD_IHAVEOPT);
	wire_put_u16(g + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	send_bytes(nc, g, NBD_GREETING_SIZE);
}

/* A snapshot (DATASET@SNAP) is exported read-only: no write flag is offered
 * and a write that comes anyway is EPERM (libstore's -EROFS). */
static uint16_t tx_flags(const struct nbd_conn *nc)
{
	if (strchr(nc->name, '@'))
		return NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH |
		       NBD_FLAG_SEND_CACHE | NBD_FLAG_CAN_MULTI_CONN;
	return NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM |
	       NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_CACHE | NBD_FLAG_CAN_MULTI_CONN;
}

/* The refusal of a DS_OPEN as an option error, in words that say what to do. */
static void open_refused(struct nbd_req *q, const char *name)
{
	struct nbd_conn *nc = q->nc;
	json_t *o = call_reply(&q->r.dc);
	const char *why = json_string_value(json_object_get(o, "error"));
	int st = q->r.dc.status;

	if (st == STOR_ENOKEY)
		opt_error(nc, q->opt, NBD_REP_ERR_UNKNOWN,
			  "%s: dataset key is not loaded; run coffer load-key %s", name, name);
	else if (st == -EPERM)
		opt_error(nc, q->opt, NBD_REP_ERR_POLICY, "%s: permission denied", name);
	else if (st == -ENOENT || st == STOR_EBADNAME)
		opt_error(nc, q->opt, NBD_REP_ERR_UNKNOWN, "%s: no such dataset", name);
	else
		opt_error(nc, q->opt, st == -ENOMEM ? NBD_REP_ERR_PLATFORM : NBD_REP_ERR_UNKNOWN,
			  "%s", why ? why : proto_strerror(st));
	json_decref(o);
}

static int wants(const struct nbd_req *q, uint16_t info)
{
	for (unsigned i = 0; i < q->ninfo && i < NBD_INFO_REQ_MAX; i++)
		if (q->info[i] == info)
			return 1;
	return 0;
}

/* What INFO and GO say of the export @nc holds. */
static void export_info(struct obuf *b, const struct nbd_req *q, const struct nbd_conn *nc)
{
	uint8_t *p = ob_reply(b, q->opt, NBD_REP_INFO, NULL, 12);

	if (p) {
		wire_put_u16(p, NBD_INFO_EXPORT);
		wire_put_u64(p + 2, nc->size);
		wire_put_u16(p + 10, tx_flags(nc));
	}
	if (wants(q, NBD_INFO_BLOCK_SIZE)) {
		uint32_t pref = nc->recordsize >= 512 ? nc->recordsize : 512;

		p = ob_reply(b, q->opt, NBD_REP_INFO, NULL, 14);
		if (p) {
			wire_put_u16(p, NBD_INFO_BLOCK_SIZE);
			wire_put_u32(p + 2, 512);
			wire_put_u32(p + 6, pref);
			wire_put_u32(p + 10, nbd.max_len);
		}
	}
	if (wants(q, NBD_INFO_NAME)) {
		size_t n = strlen(nc->name);

		p = ob_reply(b, q->opt, NBD_REP_INFO, NULL, 2 + n);
		if (p) {
			wire_put_u16(p, NBD_INFO_NAME);
			memcpy(p + 2, nc->name, n);
		}
	}
	if (wants(q, NBD_INFO_DESCRIPTION)) {
		char d[PROTO_NAME_MAX + 64];
		int n = snprintf(d, sizeof(d), "coffer dataset %s", nc->name);

		p = ob_reply(b, q->opt, NBD_REP_INFO, NULL, 2 + (size_t)n);
		if (p) {
			wire_put_u16(p, NBD_INFO_DESCRIPTION);
			memcpy(p + 2, d, (size_t)n);
		}
	}
}

/* The DS_CLOSE of close_export() is done, and so is the option. */
static void close_done(struct disp_call *c)
{
	opt_done((struct nbd_req *)c);
}

/*
 * Give back the handle that @q's DS_OPEN gave (INFO, or an export refused
 * after its open), with a DS_CLOSE as any client closes one, so that the
 * registry counts it closed and the close is seen like every other call.
 * The option's replies are queued already; it ends when the close is done.
 */
static void close_export(struct nbd_req *q)
{
	uint32_t h = q->nc->handle;

	q->nc->handle = UINT32_MAX;
	dispatch_call_reset(&q->r.dc);
	call_json(q, PROTO_OP_DS_CLOSE, json_pack("{s:I}", "handle", (json_int_t)h), close_done);
}

/* DS_OPEN for INFO, GO or EXPORT_NAME is done. */
static void open_done(struct disp_call *c)
{
	struct nbd_req *q = (struct nbd_req *)c;
	struct nbd_conn *nc = q->nc;
	struct disp_client *cl = rpc_conn_client(nc->conn);
	const char *ks;
	json_t *o;
	json_int_t h;

	if (cl->closed) {
		opt_done(q);
		return;
	}
	if (c->status < 0) {
		if (q->opt == NBD_OPT_EXPORT_NAME) {
			/* this option has no error reply: the spec's answer is to close */
			log_info("conn %llu (nbd): export %s: %s", (unsigned long long)cl->id,
				 nc->name, proto_strerror(c->status));
			rpc_conn_close_after(nc->conn);
		} else {
			open_refused(q, nc->name);
		}
		opt_done(q);
		return;
	}
	o = call_reply(c);
	h = json_integer_value(json_object_get(o, "handle"));
	nc->size = (uint64_t)json_integer_value(json_object_get(o, "volsize"));
	nc->recordsize = (uint32_t)json_integer_value(json_object_get(o, "recordsize"));
	ks = json_string_value(json_object_get(o, "keystatus"));
	nc->handle = (uint32_t)h;
	if (ks && !strcmp(ks, "unavailable")) {
		/* open, but every read would fail: refuse it here, with what to do */
		json_decref(o);
		c->status = STOR_ENOKEY;
		if (q->opt == NBD_OPT_EXPORT_NAME)
			rpc_conn_close_after(nc->conn);
		else
			open_refused(q, nc->name);
		close_export(q);
		return;
	}
	json_decref(o);
	if (q->opt == NBD_OPT_EXPORT_NAME) {
		size_t n = 10 + ((nc->cflags & NBD_FLAG_C_NO_ZEROES) ? 0 : 124);
		uint8_t *p = calloc(1, n);

		if (p) {
			wire_put_u64(p, nc->size);
			wire_put_u16(p + 8, tx_flags(nc));
		}
		send_bytes(nc, p, n);
	} else {
		struct obuf b = { 0 };

		export_info(&b, q, nc);
		ob_reply(&b, q->opt, NBD_REP_ACK, NULL, 0);
		ob_send(nc, &b);
	}
	if (q->opt == NBD_OPT_INFO) {
		nc->name[0] = '\0';
		close_export(q);
		return;
	}
	nc->phase = PH_TRANSMISSION;
	nc->block_status = nc->meta_alloc && !strcmp(nc->meta_name, nc->name);
	rpc_conn_handshake(nc->conn, 0);
	log_info("conn %llu (nbd, uid %u): serving %s (%llu bytes)", (unsigned long long)cl->id,
		 (unsigned)cl->peer.uid, nc->name, (unsigned long long)nc->size);
	opt_done(q);
}

/* The export named by @name (@len bytes) is opened for INFO, GO or EXPORT_NAME. */
static int open_export(struct nbd_conn *nc, struct nbd_req *q, const uint8_t *name, uint32_t len)
{
	if (len == 0) {
		opt_error(nc, q->opt, NBD_REP_ERR_UNKNOWN,
			  "there is no default export: name the dataset (nbd+unix:///POOL/DATASET?socket=...)");
		return -1;
	}
	if (len > PROTO_NAME_MAX || memchr(name, '\0', len)) {
		opt_error(nc, q->opt, NBD_REP_ERR_UNKNOWN, "%.*s: no such dataset (not a dataset name)",
			  (int)(len > 64 ? 64 : len), (const char *)name);
		return -1;
	}
	memcpy(nc->name, name, len);
	nc->name[len] = '\0';
	rpc_conn_hold(nc->conn, 1);
	call_json(q, PROTO_OP_DS_OPEN, json_pack("{s:s}", "name", nc->name), open_done);
	return 0;
}

/* DS_LIST for LIST is done: one NBD_REP_SERVER per dataset, then the ACK. */
static void list_done(struct disp_call *c)
{
	struct nbd_req *q = (struct nbd_req *)c;
	struct nbd_conn *nc = q->nc;
	struct obuf b = { 0 };
	json_t *o, *a, *e;
	size_t i;

	if (rpc_conn_client(nc->conn)->closed) {
		opt_done(q);
		return;
	}
	o = call_reply(c);
	if (c->status < 0) {
		const char *why = json_string_value(json_object_get(o, "error"));

		opt_error(nc, NBD_OPT_LIST, NBD_REP_ERR_PLATFORM, "%s",
			  why ? why : proto_strerror(c->status));
	} else {
		a = json_object_get(o, "datasets");
		json_array_foreach(a, i, e) {
			const char *name = json_string_value(json_object_get(e, "name"));
			size_t n = name ? strlen(name) : 0;
			uint8_t *p;

			if (!n)
				continue;
			p = ob_reply(&b, NBD_OPT_LIST, NBD_REP_SERVER, NULL, 4 + n);
			if (p) {
				wire_put_u32(p, (uint32_t)n);
				memcpy(p + 4, name, n);
			}
		}
		ob_reply(&b, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
		ob_send(nc, &b);
	}
	json_decref(o);
	opt_done(q);
}

static int query_is(const struct nbd_meta_req *m, uint32_t i, const char *s)
{
	return i < NBD_QUERIES_MAX && m->querylen[i] == strlen(s) &&
	       !memcmp(m->query[i], s, m->querylen[i]);
}

/*
 * LIST_META_CONTEXT and SET_META_CONTEXT: the one context is base:allocation
 * (holes from the block pointers: MAP). SET chooses it for the
 * export GO then opens, if GO names the same one.
 */
static int meta_context(struct nbd_conn *nc, uint32_t opt, const uint8_t *d, uint32_t len)
{
	const char *what = opt == NBD_OPT_SET_META_CONTEXT ? "SET_META_CONTEXT" : "LIST_META_CONTEXT";
	size_t n = strlen(NBD_META_ALLOCATION);
	struct nbd_meta_req m;
	struct obuf b = { 0 };
	int ret = nbd_meta_req_parse(d, len, &m), want;
	uint8_t *p;

	if (ret < 0)
		return opt_error(nc, opt, ret == -ENAMETOOLONG ? NBD_REP_ERR_TOO_BIG : NBD_REP_ERR_INVALID,
				 "malformed %s request", what);
	if (opt == NBD_OPT_SET_META_CONTEXT && !nc->structured)
		return opt_error(nc, opt, NBD_REP_ERR_INVALID,
				 "SET_META_CONTEXT needs STRUCTURED_REPLY first");
	if (m.namelen > PROTO_NAME_MAX)
		return opt_error(nc, opt, NBD_REP_ERR_UNKNOWN, "no such dataset");
	want = opt == NBD_OPT_LIST_META_CONTEXT && m.nqueries == 0;
	for (uint32_t i = 0; i < m.nqueries; i++)
		want |= query_is(&m, i, NBD_META_ALLOCATION) ||
			(opt == NBD_OPT_LIST_META_CONTEXT && query_is(&m, i, "base:"));
	if (opt == NBD_OPT_SET_META_CONTEXT) {
		memcpy(nc->meta_name, m.name, m.namelen);
		nc->meta_name[m.namelen] = '\0';
		nc->meta_alloc = want;
	}
	if (want) {
		p = ob_reply(&b, opt, NBD_REP_META_CONTEXT, NULL, 4 + n);
		if (p) {
			wire_put_u32(p, NBD_META_ALLOCATION_ID);
			memcpy(p + 4, NBD_META_ALLOCATION, n);
		}
	}
	ob_reply(&b, opt, NBD_REP_ACK, NULL, 0);
	return ob_send(nc, &b);
}

/* STARTTLS on a TCP connection: the ACK in the clear, then the TLS handshake. */
static int starttls(struct nbd_conn *nc, uint32_t len)
{
	struct disp_client *cl = rpc_conn_client(nc->conn);

	if (len)
		return opt_error(nc, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID, "STARTTLS takes no data");
	if (opt_ack(nc, NBD_OPT_STARTTLS) < 0 || rpc_conn_starttls(nc->conn) < 0)
		return -1;
	log_debug("conn %llu (nbd): TLS handshake", (unsigned long long)cl->id);
	return 0;
}

/* One option, its header and @len bytes of data at @d. @return 0 or -1 (stop parsing) */
static int handle_option(struct nbd_conn *nc, uint32_t opt, const uint8_t *d, uint32_t len)
{
	struct nbd_req *q;
	int ret, tls = rpc_conn_tls(nc->conn);

	switch (nbd_opt_gate(opt, tls == RPC_TLS_REQUIRED)) {
	case NBD_GATE_STARTTLS:
		return starttls(nc, len);
	case NBD_GATE_TLS_REQD:
		return opt_error(nc, opt, NBD_REP_ERR_TLS_REQD,
				 "TLS is required on this socket: connect with nbds:// and a PSK or "
				 "a client certificate");
	case NBD_GATE_CLOSE:
		log_info("conn %llu (nbd): option %u before TLS: closed",
			 (unsigned long long)rpc_conn_client(nc->conn)->id, opt);
		rpc_conn_close_after(nc->conn);
		return -1;
	case NBD_GATE_PASS:
		break;
	}
	switch (opt) {
	case NBD_OPT_ABORT:
		opt_ack(nc, opt);
		rpc_conn_close_after(nc->conn);
		return -1;
	case NBD_OPT_STRUCTURED_REPLY:
		if (len)
			return opt_error(nc, opt, NBD_REP_ERR_INVALID, "STRUCTURED_REPLY takes no data");
		nc->structured = 1;
		return opt_ack(nc, opt);
	case NBD_OPT_LIST:
		if (len)
			return opt_error(nc, opt, NBD_REP_ERR_INVALID, "LIST takes no data");
		q = req_new(nc, PROTO_OP_DS_LIST, 0);
		if (!q)
			return -1;
		q->opt = opt;
		rpc_conn_hold(nc->conn, 1);
		call_json(q, PROTO_OP_DS_LIST,
			  json_pack("{s:b, s:[s]}", "openable", 1, "props", "volsize"), list_done);
		return 0;
	case NBD_OPT_EXPORT_NAME:
	case NBD_OPT_INFO:
	case NBD_OPT_GO: {
		struct nbd_export_req xr;

		if (opt == NBD_OPT_EXPORT_NAME) {
			xr = (struct nbd_export_req){ .name = d, .namelen = len };
		} else {
			ret = nbd_export_req_parse(d, len, &xr);
			if (ret < 0)
				return opt_error(nc, opt,
						 ret == -ENAMETOOLONG ? NBD_REP_ERR_TOO_BIG
								      : NBD_REP_ERR_INVALID,
						 "malformed %s request", opt == NBD_OPT_GO ? "GO" : "INFO");
		}
		q = req_new(nc, PROTO_OP_DS_OPEN, 0);
		if (!q)
			return -1;
		q->opt = opt;
		q->ninfo = xr.ninfo;
		memcpy(q->info, xr.info, sizeof(q->info));
		if (open_export(nc, q, xr.name, xr.namelen) < 0) {
			if (opt == NBD_OPT_EXPORT_NAME)
				rpc_conn_close_after(nc->conn);
			rpc_req_done(&q->r.dc);
			return opt == NBD_OPT_EXPORT_NAME ? -1 : 0;
		}
		return 0;
	}
	case NBD_OPT_LIST_META_CONTEXT:
	case NBD_OPT_SET_META_CONTEXT:
		return meta_context(nc, opt, d, len);
	case NBD_OPT_STARTTLS:
		if (tls == RPC_TLS_ON)
			return opt_error(nc, opt, NBD_REP_ERR_INVALID, "TLS is on already");
		return opt_error(nc, opt, NBD_REP_ERR_UNSUP,
				 "TLS is not offered on the Unix socket (the kernel vouches for the peer)");
	default:
		return opt_error(nc, opt, NBD_REP_ERR_UNSUP, "option %u is not supported", opt);
	}
}

/* ---- transmission ---- */

static uint32_t nbd_errno(int status)
{
	switch (status) {
	case 0:
		return 0;
	case -EPERM:
	case -EROFS: /* a snapshot's export */
		return NBD_EPERM;
	case -ENOMEM:
		return NBD_ENOMEM;
	case -EINVAL:
	case STOR_ERANGE:
	case -EMSGSIZE:
		return NBD_EINVAL;
	case -ENOSPC:
	case STOR_ENOSPC:
		return NBD_ENOSPC;
	case -ESHUTDOWN:
		return NBD_ESHUTDOWN;
	default:
		return NBD_EIO;
	}
}

static int all_zero(const uint8_t *p, size_t n)
{
	return n && p[0] == 0 && !memcmp(p, p + 1, n - 1);
}

#define HOLE_MIN 512u /* a zero piece shorter than this stays in its data chunk */

/* Where a run of a READ's data ends: the next record boundary at which it turns. */
static uint32_t read_run(const struct nbd_req *q, uint32_t at, int *zero)
{
	uint32_t rs = q->nc->recordsize >= HOLE_MIN ? q->nc->recordsize : HOLE_MIN;
	const uint8_t *d = q->r.dc.out;
	uint32_t pos = at;
	int first = -1;

	while (pos < q->q.len) {
		/* one record's piece of the read (partial at the edges) */
		uint64_t abs = q->q.off + pos;
		uint32_t piece = (uint32_t)(rs - abs % rs);
		int z;

		if (piece > q->q.len - pos)
			piece = q->q.len - pos;
		z = piece >= HOLE_MIN && all_zero(d + pos, piece);
		if (first < 0)
			first = z;
		else if (z != first)
			break;
		pos += piece;
	}
	*zero = first;
	return pos - at;
}

/* The header of a structured reply's chunk of @q at @p; @len bytes follow it. */
static void chunk_hdr(uint8_t *p, const struct nbd_req *q, uint16_t flags, uint16_t type,
		      uint32_t len)
{
	wire_put_u32(p, NBD_STRUCTURED_REPLY_MAGIC);
	wire_put_u16(p + 4, flags);
	wire_put_u16(p + 6, type);
	wire_put_u64(p + 8, q->q.cookie);
	wire_put_u32(p + 16, len);
}

/* @buf (malloc'd, @len bytes) is the whole reply of @q now, in place of the data it had. */
static void reply_take(struct nbd_req *q, uint8_t *buf, size_t len)
{
	struct disp_call *c = &q->r.dc;

	dispatch_out_free(c);
	c->out = buf;
	c->out_len = len;
	c->payload = buf;
	c->payload_len = len;
	q->r.hdr_len = 0;
}

/*
 * A successful structured READ whose data turns from data to zeros and
 * back: one chunk per run, into a buffer of its own. @return 0, or if the
 * read is one run (tx_reply's single chunk) READ_ZEROS or READ_DATA;
 * -ENOMEM
 */
enum { READ_ZEROS = 1, READ_DATA };
static int read_chunks(struct nbd_req *q)
{
	struct disp_call *c = &q->r.dc;
	size_t size = 0;
	uint8_t *buf, *p;
	int zero;

	for (uint32_t at = 0, n; at < q->q.len; at += n) {
		n = read_run(q, at, &zero);
		if (at == 0 && n == q->q.len)
			return zero ? READ_ZEROS : READ_DATA; /* one run */
		if (q->q.flags & NBD_CMD_FLAG_DF)
			return READ_DATA; /* the client asked for one chunk */
		size += NBD_CHUNK_HDR + (zero ? 12 : 8 + (size_t)n);
	}
	buf = malloc(size);
	if (!buf)
		return -ENOMEM;
	p = buf;
	for (uint32_t at = 0, n; at < q->q.len; at += n) {
		n = read_run(q, at, &zero);
		chunk_hdr(p, q, at + n == q->q.len ? NBD_REPLY_FLAG_DONE : 0,
			  zero ? NBD_REPLY_TYPE_OFFSET_HOLE : NBD_REPLY_TYPE_OFFSET_DATA,
			  zero ? 12 : 8 + n);
		wire_put_u64(p + 20, q->q.off + at);
		if (zero) {
			wire_put_u32(p + 28, n);
			p += NBD_CHUNK_HDR + 12;
		} else {
			memcpy(p + 28, c->out + at, n);
			p += NBD_CHUNK_HDR + 8 + n;
		}
	}
	reply_take(q, buf, size);
	return 0;
}

/*
 * A successful BLOCK_STATUS: its MAP's runs (c->out) as the descriptors of
 * one chunk, in a buffer of its own; a run is a descriptor, as both are a
 * u32 length and u32 flags. @return 0 or -ENOMEM
 */
static int status_chunk(struct nbd_req *q)
{
	struct disp_call *c = &q->r.dc;
	size_t n = c->out_len / PROTO_MAP_RUN, len = NBD_CHUNK_HDR + 4 + 8 * n;
	uint8_t *p = malloc(len);

	if (!p)
		return -ENOMEM;
	chunk_hdr(p, q, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, (uint32_t)(4 + 8 * n));
	wire_put_u32(p + 20, NBD_META_ALLOCATION_ID);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *run = c->out + PROTO_MAP_RUN * i;

		wire_put_u32(p + 24 + 8 * i, wire_get_u32(run));
		wire_put_u32(p + 28 + 8 * i, (wire_get_u32(run + 4) & PROTO_MAP_HOLE)
						? NBD_STATE_HOLE | NBD_STATE_ZERO : 0);
	}
	reply_take(q, p, len);
	return 0;
}

/*
 * The reply of request @q with NBD error @err (0: success) into its header
 * and payload. With structured replies a READ is a chunk per run of data
 * and of zeros (read_chunks), or when it is one run, one chunk: OFFSET_HOLE
 * when it read only zeros (a hole, or zeros written), else OFFSET_DATA. A
 * BLOCK_STATUS is one chunk of descriptors (status_chunk).
 */
static void tx_reply(struct nbd_req *q, uint32_t err, const char *msg)
{
	struct disp_call *c = &q->r.dc;
	uint8_t *h = q->r.hdrbuf;

	if ((q->q.type == NBD_CMD_READ || q->q.type == NBD_CMD_BLOCK_STATUS) && q->nc->structured) {
		int runs = err ? READ_DATA
			       : q->q.type == NBD_CMD_READ ? read_chunks(q) : status_chunk(q);

		if (runs == 0)
			return;
		if (runs == -ENOMEM) {
			err = NBD_ENOMEM;
			msg = "out of memory";
		}
		if (!err && runs == READ_ZEROS) {
			/* a hole (or zeros) costs 32 bytes on the wire, not its length */
			chunk_hdr(h, q, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_HOLE, 12);
			wire_put_u64(h + 20, q->q.off);
			wire_put_u32(h + 28, q->q.len);
			q->r.hdr_len = NBD_CHUNK_HDR + 12;
			c->payload = NULL;
			c->payload_len = 0;
			return;
		}
		if (!err) {
			chunk_hdr(h, q, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA,
				  8 + q->q.len);
			wire_put_u64(h + 20, q->q.off);
			q->r.hdr_len = NBD_CHUNK_HDR + 8;
			c->payload = c->out;
			c->payload_len = q->q.len;
			return;
		}
		/* a READ's error says where (its start: the batch fails whole) */
		int at = q->q.type == NBD_CMD_READ;
		size_t n = msg ? strlen(msg) : 0, len = NBD_CHUNK_HDR + 4 + 2 + n + (at ? 8 : 0);
		uint8_t *p = malloc(len);

		reply_take(q, p, p ? len : 0);
		if (!p) {
			rpc_conn_close_after(q->nc->conn);
			return;
		}
		chunk_hdr(p, q, NBD_REPLY_FLAG_DONE,
			  at ? NBD_REPLY_TYPE_ERROR_OFFSET : NBD_REPLY_TYPE_ERROR,
			  (uint32_t)(len - NBD_CHUNK_HDR));
		wire_put_u32(p + 20, err);
		wire_put_u16(p + 24, (uint16_t)n);
		memcpy(p + 26, msg, n);
		if (at)
			wire_put_u64(p + 26 + n, q->q.off);
		return;
	}
	wire_put_u32(h, NBD_SIMPLE_REPLY_MAGIC);
	wire_put_u32(h + 4, err);
	wire_put_u64(h + 8, q->q.cookie);
	q->r.hdr_len = NBD_SIMPLE_REPLY_SIZE;
	/* only a successful simple READ carries data */
	if (q->q.type == NBD_CMD_READ && !err) {
		c->payload = c->out;
		c->payload_len = q->q.len;
	} else {
		c->payload = NULL;
		c->payload_len = 0;
	}
}

static void io_step(struct nbd_req *q);

/* A call of request @q is done: the next step, or the reply. */
static void io_done(struct disp_call *c)
{
	struct nbd_req *q = (struct nbd_req *)c;
	const struct nbd_request *r = &q->q;
	int st = c->status;

	if (st == 0 && !rpc_conn_client(q->nc->conn)->closed) {
		if (q->zeros && q->done_len < r->len) {
			io_step(q);
			return;
		}
		if ((r->flags & NBD_CMD_FLAG_FUA) && q->step == ST_IO) {
			q->step = ST_FLUSH;
			io_step(q);
			return;
		}
	}
	if (st < 0)
		log_debug("conn %llu (nbd): %s: request %u at %llu+%u: %s",
			  (unsigned long long)rpc_conn_client(q->nc->conn)->id, q->nc->name,
			  r->type, (unsigned long long)r->off, r->len, proto_strerror(st));
	tx_reply(q, nbd_errno(st), st < 0 ? proto_strerror(st) : NULL);
	free(q->zeros);
	q->zeros = NULL;
	rpc_req_done(c);
}

/* Dispatch the next call of request @q. */
static void io_step(struct nbd_req *q)
{
	struct disp_call *c = &q->r.dc;
	const struct nbd_request *r = &q->q;
	struct proto_io io = { .handle = q->nc->handle, .off = r->off, .len = r->len };
	uint16_t op;
	uint8_t *body;
	size_t extra = 0; /* what the body carries after its I/O part */

	if (c->cmd)
		dispatch_call_reset(c); /* the call before: its body and outcome */
	if (q->step == ST_FLUSH) {
		op = PROTO_OP_FLUSH;
		io.off = io.len = 0;
	} else if (q->zeros) {
		uint64_t left = r->len - q->done_len;

		op = PROTO_OP_WRITE;
		io.off = r->off + q->done_len;
		io.len = left < nbd.max_len ? (uint32_t)left : nbd.max_len;
		q->done_len += io.len;
		extra = io.len;
	} else {
		switch (r->type) {
		case NBD_CMD_READ:
		case NBD_CMD_CACHE:
			op = PROTO_OP_READ;
			break;
		case NBD_CMD_WRITE:
			op = PROTO_OP_WRITE;
			break;
		case NBD_CMD_FLUSH:
			op = PROTO_OP_FLUSH;
			io.off = io.len = 0;
			break;
		case NBD_CMD_BLOCK_STATUS:
			op = PROTO_OP_MAP;
			extra = PROTO_MAP_BODY - PROTO_IO_BODY;
			break;
		default: /* TRIM, WRITE_ZEROES that may leave holes */
			op = PROTO_OP_DISCARD;
			break;
		}
	}
	/* a WRITE's data is in place already (tx_request) */
	if (!(op == PROTO_OP_WRITE && !q->zeros && c->body)) {
		body = malloc(PROTO_IO_BODY + extra);
		if (!body) {
			c->hdr.op = op;
			c->done = io_done;
			dispatch_refuse(c, -ENOMEM);
			return;
		}
		if (q->zeros)
			memcpy(body + PROTO_IO_BODY, q->zeros, extra);
		c->body = body;
	}
	proto_io_put(c->body, &io);
	/* the runs one reply can say; REQ_ONE: the client wants one */
	if (op == PROTO_OP_MAP)
		wire_put_u32(c->body + PROTO_IO_BODY,
			(r->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : PROTO_MAP_RUNS);
	c->hdr.op = op;
	c->hdr.len = PROTO_IO_BODY + (op == PROTO_OP_WRITE ? io.len : (uint32_t)extra);
	c->done = io_done;
	dispatch_call(c);
}

/* A request whose header (and WRITE data) is at @p. @return 0 or -1 (stop parsing) */
static int tx_request(struct nbd_conn *nc, const uint8_t *p)
{
	struct nbd_request r;
	struct nbd_req *q;
	uint32_t err;
	size_t charge;

	nbd_request_get(p, &r); /* the magic was checked by frame() */
	if (r.type == NBD_CMD_DISC) {
		log_debug("conn %llu (nbd): disconnect", (unsigned long long)rpc_conn_client(nc->conn)->id);
		rpc_conn_close_after(nc->conn);
		return -1;
	}
	charge = NBD_REQ_SIZE + nbd_request_data(&r);
	if (r.type == NBD_CMD_READ || r.type == NBD_CMD_CACHE)
		charge += r.len;
	if (r.type == NBD_CMD_BLOCK_STATUS)
		charge += (size_t)PROTO_MAP_RUN * PROTO_MAP_RUNS;
	err = nbd_request_check(&r, nc->size, nbd.max_len, nc->block_status);
	q = req_new(nc, PROTO_OP_READ, err ? 0 : charge);
	if (!q)
		return -1;
	q->q = r;
	q->step = ST_IO;
	if (err) {
		STATS_ADD(bad_frames, 1);
		tx_reply(q, err, "request refused");
		rpc_req_done(&q->r.dc);
		return 0;
	}
	if (r.type == NBD_CMD_WRITE) {
		/* the data goes in once, behind the I/O body */
		if (!dispatch_body_alloc(&q->r.dc, PROTO_IO_BODY + r.len)) {
			tx_reply(q, NBD_ENOMEM, NULL);
			rpc_req_done(&q->r.dc);
			return 0;
		}
		memcpy(q->r.dc.body + PROTO_IO_BODY, p + NBD_REQ_SIZE, r.len);
	} else if (r.type == NBD_CMD_WRITE_ZEROES && (r.flags & NBD_CMD_FLAG_NO_HOLE)) {
		q->zeros = calloc(1, r.len < nbd.max_len ? r.len : nbd.max_len);
		if (!q->zeros) {
			tx_reply(q, NBD_ENOMEM, NULL);
			rpc_req_done(&q->r.dc);
			return 0;
		}
	}
	io_step(q);
	return 0;
}

/* ---- the framing ---- */

static int nbd_accepted(struct rpc_conn *conn)
{
	struct nbd_conn *nc = calloc(1, sizeof(*nc));

	if (!nc)
		return -1;
	nc->conn = conn;
	nc->handle = UINT32_MAX;
	*rpc_conn_priv(conn) = nc;
	greet(nc);
	return 0;
}

/* A connection over a limit: NBD has no word for it before the options, so it just closes. */
static void nbd_refuse(struct rpc_conn *conn, int status, const char *why)
{
	(void)status;
	(void)why;
	rpc_conn_close_after(conn);
}

static void nbd_fini(struct rpc_conn *conn)
{
	free(*rpc_conn_priv(conn));
	*rpc_conn_priv(conn) = NULL;
}

static int nbd_frame(struct rpc_conn *conn, const uint8_t *p, size_t avail, size_t *need)
{
	struct nbd_conn *nc = nbd_of(conn);
	struct disp_client *cl = rpc_conn_client(conn);
	struct nbd_opt o;
	struct nbd_request r;

	if (!nc)
		return -1;
	switch (nc->phase) {
	case PH_FLAGS:
		*need = 4;
		return 0;
	case PH_OPTIONS:
		if (avail < NBD_OPT_HDR)
			return 1;
		if (nbd_opt_get(p, &o) < 0) {
			log_info("conn %llu (nbd, uid %u): not an option (bad magic): closed",
				 (unsigned long long)cl->id, (unsigned)cl->peer.uid);
			STATS_ADD(bad_frames, 1);
			rpc_conn_close_after(conn);
			return -1;
		}
		if (o.len > NBD_OPT_MAX) {
			/* refused before a byte of it is buffered; the data is never read */
			opt_error(nc, o.opt, NBD_REP_ERR_TOO_BIG,
				  "option data of %u bytes: at most %u are taken", o.len, NBD_OPT_MAX);
			STATS_ADD(bad_frames, 1);
			rpc_conn_close_after(conn);
			return -1;
		}
		*need = NBD_OPT_HDR + (size_t)o.len;
		return 0;
	case PH_TRANSMISSION:
		if (avail < NBD_REQ_SIZE)
			return 1;
		if (nbd_request_get(p, &r) < 0) {
			log_info("conn %llu (nbd): not a request (bad magic): closed",
				 (unsigned long long)cl->id);
			STATS_ADD(bad_frames, 1);
			rpc_conn_close_after(conn);
			return -1;
		}
		if (nbd_request_data(&r) > nbd.max_len) {
			/* its data would not be read: say why, then close */
			struct nbd_req *q = req_new(nc, PROTO_OP_WRITE, 0);

			log_info("conn %llu (nbd): %u-byte write over the maximum of %u: closed",
				 (unsigned long long)cl->id, r.len, nbd.max_len);
			STATS_ADD(bad_frames, 1);
			rpc_conn_close_after(conn);
			if (q) {
				q->q = r;
				tx_reply(q, NBD_EOVERFLOW, NULL);
				rpc_req_done(&q->r.dc);
			}
			return -1;
		}
		*need = NBD_REQ_SIZE + (size_t)nbd_request_data(&r);
		return 0;
	}
	return -1;
}

static int nbd_handle(struct rpc_conn *conn, const uint8_t *p, size_t len)
{
	struct nbd_conn *nc = nbd_of(conn);
	struct disp_client *cl = rpc_conn_client(conn);
	struct nbd_opt o;

	switch (nc->phase) {
	case PH_FLAGS:
		nc->cflags = wire_get_u32(p);
		if (!(nc->cflags & NBD_FLAG_C_FIXED_NEWSTYLE) ||
		    (nc->cflags & ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))) {
			log_info("conn %llu (nbd, uid %u): client flags %#x: only fixed newstyle is "
				 "spoken: closed",
				 (unsigned long long)cl->id, (unsigned)cl->peer.uid, nc->cflags);
			rpc_conn_close_after(conn);
			return -1;
		}
		/* the options become calls of the dispatcher; the handshake limits stay */
		cl->hello_done = 1;
		rpc_conn_handshake(conn, 1);
		nc->phase = PH_OPTIONS;
		return 0;
	case PH_OPTIONS:
		nbd_opt_get(p, &o);
		return handle_option(nc, o.opt, p + NBD_OPT_HDR, (uint32_t)(len - NBD_OPT_HDR));
	case PH_TRANSMISSION:
		return tx_request(nc, p);
	}
	return -1;
}

/* A WRITE's data, if its export is encrypted, is not left in the read buffer. */
static int nbd_wipe(struct rpc_conn *conn, const uint8_t *p, size_t avail)
{
	struct nbd_conn *nc = nbd_of(conn);
	struct nbd_request r;

	return nc && nc->phase == PH_TRANSMISSION && avail >= NBD_REQ_SIZE &&
	       nbd_request_get(p, &r) == 0 && r.type == NBD_CMD_WRITE &&
	       dispatch_write_wiped(rpc_conn_client(conn), nc->handle);
}

static const struct rpc_framing nbd_framing = {
	.name = "nbd",
	.req_size = sizeof(struct nbd_req),
	.keep_idle = 1,
	.accepted = nbd_accepted,
	.refuse = nbd_refuse,
	.frame = nbd_frame,
	.handle = nbd_handle,
	.wipe = nbd_wipe,
	.fini = nbd_fini,
};

static void nbd_init(const struct config *cfg)
{
	nbd.cfg = cfg;
	/* a multiple of the minimum block size, as the spec asks */
	nbd.max_len = (cfg->max_frame - PROTO_IO_BODY) & ~511u;
}

int nbd_listen(const struct config *cfg, const char *path)
{
	nbd_init(cfg);
	return rpc_listen_framing(path, &nbd_framing);
}

int nbd_listen_tcp(const struct config *cfg, struct tls_ctx *tls, unsigned *port)
{
	nbd_init(cfg);
	return rpc_listen_tcp(cfg->nbd_listen, &nbd_framing, tls, port);
}
