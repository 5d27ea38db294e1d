// SPDX-License-Identifier: MIT
/*
 * The dispatcher (dispatch.h): from a complete frame to a reply payload.
 *
 * The command table drives it, as OpenZFS's zfsdev_ioctl_common applies
 * each ioctl's registered name check and pool check and Redis's
 * processCommand applies a command's flags before the small handler runs:
 *
 *   1. HELLO first (CMD_PREHELLO), and the HELLO itself
 *   2. permission (CMD_ADMIN)
 *   3. calls on a handle (CMD_IO): the handle, held till the reply; then
 *      record I/O to the I/O workers, a MAP (CMD_BLOCKING) to the threadpool
 *   4. the JSON body: an object
 *   5. then, where the handler runs (loop or threadpool): the target name
 *      (CMD_POOL, CMD_DS, CMD_CHILD, CMD_NAME_OPT), the registry lock
 *      (CMD_LOCK, CMD_LOCK_WR) and the target's pool looked up under it,
 *      its state (CMD_KNOWN, CMD_ONLINE, CMD_NEW), the owner (CMD_OWNER)
 *   6. the handler; an administrative change committed to the LUNs
 *      (make_durable); the registry lock is released after it
 *   7. on the loop: a handle for a dataset the handler opened, counters, the
 *      text of an error the handler left to us, the reply payload
 *
 * The error texts of the generic checks are made here and nowhere else; a
 * handler's failure without a text of its own reads "NAME: VERB: error:
 * DETAIL" from the error map (proto_strerror). Nothing here knows a socket.
 *
 * The state a call keeps of the registry and the workers (the handle it
 * holds, its work item, its JSON part) is struct disp_own, which only this
 * file defines: dispatch_call_create() allocates it behind the transport's
 * request, so that dispatch.h shows a transport neither layer.
 */

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "dispatch.h"
#include "handlers.h"
#include "log.h"
#include "plainbuf.h"
#include "registry.h"
#include "work.h"

/*
 * A command that takes the registry lock runs off the loop: a revocation
 * holds the lock while it waits for the loop thread (registry.c).
 */
#define XX(num, NAME, str, fn, fl, minb, maxb)                                      \
	_Static_assert(!((fl) & (CMD_LOCK | CMD_LOCK_WR)) || ((fl) & CMD_BLOCKING), \
		       #NAME ": the registry lock only off the loop");
PROTO_CMDS(XX)
#undef XX

static struct {
	const struct config *cfg;
} dsp;

/*
 * A loop keeps the call blocks it frees, for its next requests: a read
 * costs no heap allocation of its own (malloc's share of a tmpfs read fell
 * from 3.3 to 1.7 %; what is left is per batch). One list per transport's
 * block size, linked through each block's first word, up to CALLS_KEPT
 * blocks each (400 and 600 bytes).
 * Not under ASan, which must see a block used after its call was freed.
 */
#define CALLS_KEPT 1024u
#define CALL_SIZES 2u
struct kept_calls {
	size_t size;
	void *head;
	unsigned n;
};

/* Each event loop's own (loops.c): its record I/O not yet handed over, and
 * the call blocks it keeps (from dispatch_loop_attach() to _detach()). */
static _Thread_local struct {
	uv_loop_t *loop;
	struct work_io *io_head, *io_tail;
	int keeping;
	struct kept_calls kept[CALL_SIZES];
} dl;

/*
 * What only a JSON command needs, apart from the call so that record I/O
 * carries no error buffer: the handler's view, the threadpool job, the text.
 */
struct disp_json {
	struct hcall h;
	struct work_job job;    /* blocking commands */
	struct disp_call *call;
	char *out;              /* the reply text */
	int locked;             /* holds the registry lock (CMD_LOCK, CMD_LOCK_WR) */
};

/* A MAP on the threadpool: the runs of [off, off + len) of ds into the call's out. */
struct disp_map {
	struct work_job job;
	struct stor_ds *ds;
	uint64_t off;
	uint32_t len;
	uint32_t max;           /* the most runs wanted */
	uint32_t nruns;         /* runs in out so far */
	int status;
};

/*
 * The dispatcher's part of a call, behind the transport's request in one
 * block (dispatch_call_create): the state it keeps of the registry and the
 * workers, which the transports do not see.
 */
struct disp_own {
	struct disp_call *call;
	struct disp_json *js;       /* JSON commands only */
	union {
		struct work_io wio; /* record I/O */
		struct disp_map map; /* MAP */
	};
	uint32_t handle;            /* the handle a call on one holds, UINT32_MAX: none */
	int plain;                  /* record I/O of an encrypted dataset: body and out
				     * hold its plaintext, wiped when freed */
	size_t body_cap;            /* body from the loop's plainbuf pool: its size, else 0 */
	size_t out_cap;             /* the same for out */
	unsigned body_epoch, out_epoch; /* plainbuf_get()'s */
	uint8_t hello[PROTO_HELLO_REPLY];
	size_t block; /* the bytes of the call's block, its transport's part too */
};

static int is_json(const struct disp_call *c)
{
	return c->cmd && (c->cmd->flags & CMD_JSON);
}

/* The JSON part of @c, made on first use. NULL: no memory */
static struct disp_json *js_get(struct disp_call *c)
{
	if (!c->own->js && is_json(c)) {
		c->own->js = calloc(1, sizeof(*c->own->js));
		if (c->own->js) {
			c->own->js->call = c;
			c->own->js->h.cmd = c->cmd;
			c->own->js->h.peer = &c->cl->peer;
			c->own->js->h.client = c->cl->handles;
		}
	}
	return c->own->js;
}

/* A refusal's own text, for a JSON command (the rest get a bare status). */
#define SAY(c, ...)                                                               \
	do {                                                                      \
		if (js_get(c))                                                    \
			snprintf((c)->own->js->h.err, sizeof((c)->own->js->h.err), __VA_ARGS__); \
	} while (0)

void dispatch_init(const struct config *cfg)
{
	dsp.cfg = cfg;
}

void dispatch_loop_attach(uv_loop_t *loop)
{
	dl.loop = loop;
#ifndef __SANITIZE_ADDRESS__
	dl.keeping = 1;
#endif
}

void dispatch_loop_detach(void)
{
	dl.keeping = 0;
	for (unsigned i = 0; i < CALL_SIZES; i++)
		while (dl.kept[i].head) {
			void *b = dl.kept[i].head;

			dl.kept[i].head = *(void **)b;
			free(b);
		}
	memset(dl.kept, 0, sizeof(dl.kept));
}

int dispatch_peer_admin(const struct peer *p)
{
	return reg_is_admin(p);
}

int dispatch_client_init(struct disp_client *cl)
{
	cl->peer.admin = reg_is_admin(&cl->peer);
	cl->handles = reg_client_new(&cl->peer, cl->id, cl->front);
	return cl->handles ? 0 : -ENOMEM;
}

void dispatch_client_closed(struct disp_client *cl)
{
	cl->closed = 1;
	reg_client_closed(cl->handles);
}

void dispatch_client_fini(struct disp_client *cl)
{
	reg_client_free(cl->handles);
	cl->handles = NULL;
}

/* ---- completion (loop thread) ---- */

/*
 * libstore cannot print: when it could not mlock key pages (RLIMIT_MEMLOCK,
 * no CAP_IPC_LOCK), say so once, before the reply to the call that made
 * them, so an operator sees why keys may reach swap.
 */
static void check_key_locks(void)
{
	static int warned;
	uint64_t n;

	if (warned)
		return;
	n = stor_key_pages_unlocked();
	if (n == 0)
		return;
	warned = 1;
	log_warn("keys: %llu key pages could not be locked in memory (mlock): keys may be "
		 "swapped out; raise RLIMIT_MEMLOCK (LimitMEMLOCK= in the unit)",
		 (unsigned long long)n);
}

/* The first refusal of a client is logged, every one counted. */
static void log_eperm(struct disp_client *cl, const char *what)
{
	STATS_ADD(eperm, 1);
	if (cl->eperm_logged)
		return;
	cl->eperm_logged = 1;
	log_warn("conn %llu (uid %u pid %d): %s%s", (unsigned long long)cl->id,
		 (unsigned)cl->peer.uid, (int)cl->peer.pid, what,
		 strstr(what, "permission denied") ? "" : ": permission denied");
}

/* The error text of a failed JSON call: the handler's, else from the error map. */
static const char *error_text(struct disp_call *c)
{
	struct hcall *h = c->own->js ? &c->own->js->h : NULL;
	const char *why;

	if (!h)
		return proto_strerror(c->status);
	if (h->err[0])
		return h->err;
	why = c->status == -ENOENT && c->cmd && (c->cmd->flags & CMD_DS) && h->name
		      ? strchr(h->name, '@') ? "snapshot does not exist" : "dataset does not exist"
		      : proto_strerror(c->status);
	if (!h->name && !h->verb && !h->detail[0])
		return why;
	/* a reason says more than "Invalid argument" or "does not exist" (it
	 * names what is missing), and one that begins with the code's own
	 * text says it whole: each takes that one's place */
	if (h->detail[0] && (c->status == -EINVAL || c->status == STOR_EBADPROP ||
			     c->status == -ENOENT || !strncmp(h->detail, why, strlen(why)))) {
		snprintf(h->err, sizeof(h->err), "%s: %s%s%s", h->name ? h->name : c->cmd->name,
			 h->verb ? h->verb : "", h->verb ? ": " : "", h->detail);
		return h->err;
	}
	snprintf(h->err, sizeof(h->err), "%s: %s%s%s%s%s", h->name ? h->name : c->cmd->name,
		 h->verb ? h->verb : "", h->verb ? ": " : "", why, h->detail[0] ? ": " : "",
		 h->detail);
	return h->err;
}

/* The counters of a call on a handle, by its command. */
static void count_io(const struct disp_call *c)
{
	const struct stor_io *io = &c->own->wio.io;

	switch (c->hdr.op) {
	case PROTO_OP_READ:
		STATS_ADD(reads, 1);
		if (c->status == 0)
			STATS_ADD(read_bytes, io->len);
		break;
	case PROTO_OP_WRITE:
		STATS_ADD(writes, 1);
		if (c->status == 0)
			STATS_ADD(write_bytes, io->len);
		break;
	case PROTO_OP_FLUSH:
		STATS_ADD(flushes, 1);
		break;
	case PROTO_OP_DISCARD:
		STATS_ADD(discards, 1);
		break;
	case PROTO_OP_MAP:
		STATS_ADD(maps, 1);
		break;
	}
}

/* A dataset the handler opened gets the client's first free handle number. */
static void install_handle(struct disp_call *c)
{
	int n;

	struct hcall *h = c->own->js ? &c->own->js->h : NULL;

	if (!h || !h->opened || c->status < 0 || c->cl->closed)
		return; /* dispatch_call_reset() closes it */
	n = reg_handle_install(c->cl->handles, h->opened, h->opened_pe);
	if (n < 0) {
		c->status = n;
		return;
	}
	h->opened = NULL;
	h->opened_pe = NULL;
	json_object_set_new(h->reply, "handle", json_integer(n));
}

/* The reply payload of @c into c->payload. */
static void build_reply(struct disp_call *c)
{
	c->payload = NULL;
	c->payload_len = 0;
	if (is_json(c) && js_get(c)) {
		struct disp_json *js = c->own->js;
		json_t *o = js->h.reply;

		if (c->status < 0) {
			json_decref(js->h.reply);
			o = js->h.reply = json_pack("{s:s}", "error", error_text(c));
		}
		if (o)
			js->out = json_dumps(o, JSON_COMPACT);
		if (js->out) {
			c->payload = (const uint8_t *)js->out;
			c->payload_len = strlen(js->out);
		}
		/* CMD_DATA: the object, its NUL, the bytes */
		if (js->out && js->h.out_data && c->status == 0) {
			size_t n = strlen(js->out);
			uint8_t *b = malloc(n + 1 + js->h.out_len);

			if (b) {
				memcpy(b, js->out, n + 1);
				memcpy(b + n + 1, js->h.out_data, js->h.out_len);
				if (js->h.out_plain)
					explicit_bzero(js->h.out_data, js->h.out_len);
				free(js->h.out_data);
				js->h.out_data = b;
				js->h.out_len += n + 1;
				c->payload = b;
				c->payload_len = js->h.out_len;
			}
		}
	} else if (c->hdr.op == PROTO_OP_READ && c->status == 0) {
		c->payload = c->out;
		c->payload_len = c->own->wio.io.len;
	} else if (c->hdr.op == PROTO_OP_MAP && c->status == 0) {
		c->payload = c->out;
		c->payload_len = c->out_len;
	} else if (c->hdr.op == PROTO_OP_HELLO && c->status == 0) {
		wire_put_u32(c->own->hello, PROTO_MAGIC);
		wire_put_u16(c->own->hello + 4, PROTO_VERSION);
		wire_put_u32(c->own->hello + 6, dsp.cfg->max_frame);
		c->payload = c->own->hello;
		c->payload_len = PROTO_HELLO_REPLY;
	}
}

/* Every call ends here, on the loop thread. */
/*
 * Key material of a CMD_SECRET call: the raw body and the parsed key_hex.
 * Wiped as soon as the handler is done, before the reply can reach the
 * client, and again when the call is freed, whatever path it took.
 */
static void wipe_secret(struct disp_call *c)
{
	const char *k;

	if (!c->cmd || !(c->cmd->flags & CMD_SECRET))
		return;
	if (c->body)
		explicit_bzero(c->body, c->hdr.len);
	k = c->own->js ? json_string_value(json_object_get(c->own->js->h.args, "key_hex")) : NULL;
	if (k)
		explicit_bzero((char *)k, strlen(k));
}

static void complete(struct disp_call *c)
{
	wipe_secret(c);
	check_key_locks();
	if (c->own->handle != UINT32_MAX) {
		reg_handle_put(c->cl->handles, c->own->handle);
		c->own->handle = UINT32_MAX;
	}
	if (c->cmd && (c->cmd->flags & CMD_IO) && c->status < 0)
		STATS_ADD(io_errors, 1);
	install_handle(c);
	if (c->status == -EPERM && c->cmd)
		log_eperm(c->cl, c->cmd->flags & CMD_JSON ? error_text(c) : c->cmd->name);
	build_reply(c);
	c->done(c);
}

static void fail_now(struct disp_call *c, int status)
{
	c->status = status;
	complete(c);
}

/* ---- the generic checks ---- */

#define REFUSE(c, code, ...)              \
	do {                              \
		SAY((c), __VA_ARGS__);    \
		return (code);            \
	} while (0)

/*
 * Step 5: the target name, the registry lock and the target's pool, its
 * state, the owner. The lock, once taken, is held until after the handler
 * (js->locked), whatever this returns.
 */
static int resolve(struct disp_call *c)
{
	unsigned fl = c->cmd->flags;
	struct hcall *h = &c->own->js->h;
	const char *s = NULL;
	int plen;

	if (fl & (CMD_POOL | CMD_DS)) {
		s = json_string_value(json_object_get(h->args, "name"));
		if (!s && !(fl & CMD_NAME_OPT))
			REFUSE(c, -EINVAL, "%s: missing 'name'", c->cmd->name);
		if (s && (fl & CMD_SNAP) && strchr(s, '@')) {
			if (stor_name_check(s, STOR_NAME_SNAPSHOT) < 0)
				REFUSE(c, STOR_EBADNAME, "'%.*s': invalid snapshot name", 64, s);
		} else if (s && !proto_name_valid(s, (fl & CMD_POOL) != 0)) {
			REFUSE(c, STOR_EBADNAME, "'%.*s': invalid %s name", 64, s,
			       (fl & CMD_POOL) ? "pool" : "dataset");
		}
		if (s && (fl & CMD_CHILD) && !strchr(s, '/'))
			REFUSE(c, -EINVAL, "%s: a dataset name is POOL/NAME", s);
		h->name = s;
	}
	if (fl & (CMD_LOCK | CMD_LOCK_WR)) {
		reg_lock((fl & CMD_LOCK_WR) != 0);
		c->own->js->locked = 1;
		h->pe = s ? reg_pool_of(s) : NULL;
	}
	if (!s)
		return 0;
	plen = (int)strcspn(s, "/@");
	if ((fl & CMD_NEW) && h->pe)
		REFUSE(c, -EEXIST, "%s: pool already exists", s);
	if ((fl & (CMD_KNOWN | CMD_ONLINE)) && !h->pe)
		REFUSE(c, -ENOENT, "%.*s: no such pool", plen, s);
	if (fl & CMD_ONLINE) {
		if (!h->pe->pool)
			REFUSE(c, STOR_EFAULTED, "%.*s: pool is faulted: %.200s", plen, s,
			       h->pe->error);
		h->pool = h->pe->pool;
	}
	if ((fl & CMD_OWNER) && !reg_may_open(h->peer, h->pool, s))
		REFUSE(c, -EPERM,
		       "%s: permission denied (uid %u is neither an administrator nor the owner)",
		       s, (unsigned)h->peer->uid);
	return 0;
}

/*
 * Step 6's end: an administrative change is acknowledged only once it is on
 * the LUNs. libstore commits such changes to LMDB at once and to the LUNs
 * with the next txg (meta.h's pending log), so a crash in between would
 * lose them wherever the pool is imported from its LUNs alone. A command
 * that changed nothing costs nothing.
 */
static int make_durable(struct disp_call *c)
{
	struct hcall *h = &c->own->js->h;
	int ret;

	if (!(c->cmd->flags & CMD_ADMIN) || !h->pool)
		return 0;
	ret = stor_pool_sync_admin(h->pool);
	if (ret < 0)
		SAY(c, "%s: %s done, but its commit to the LUNs failed: %s; every commit retries it",
		    h->name ? h->name : "pool", c->cmd->name, stor_strerror(ret));
	return ret;
}

/* Steps 5 and 6, on whichever thread the table says. */
static void run_json(struct disp_call *c)
{
	unsigned drops = plainbuf_epoch();
	int ret = resolve(c);

	if (ret == 0)
		ret = handlers_run(&c->own->js->h);
	if (ret == 0)
		ret = make_durable(c);
	if (c->own->js->locked) {
		c->own->js->locked = 0;
		reg_unlock();
	}
	/* a key it dropped takes the plaintext kept for reuse with it, before the reply */
	if (plainbuf_epoch() != drops)
		plainbuf_sync();
	c->status = ret;
}

/* The call whose threadpool job @j is. */
static struct disp_call *call_of_job(struct work_job *j)
{
	return ((struct disp_json *)((char *)j - offsetof(struct disp_json, job)))->call;
}

static void job_run(struct work_job *j)
{
	run_json(call_of_job(j));
}

static void job_done(struct work_job *j, int status)
{
	struct disp_call *c = call_of_job(j);

	if (status < 0 && c->status == 0)
		c->status = status;
	complete(c);
}

static void io_done(struct work_io *w)
{
	struct disp_own *o = (struct disp_own *)((char *)w - offsetof(struct disp_own, wio));
	struct disp_call *c = o->call;

	c->status = w->io.result;
	count_io(c);
	complete(c);
}

/* The call whose MAP job @j is. */
static struct disp_call *call_of_map(struct work_job *j)
{
	return ((struct disp_own *)((char *)j - offsetof(struct disp_own, map.job)))->call;
}

/* A run of the map into the reply: its length fits a u32, as the range's does. */
static int map_run(uint64_t off, uint64_t len, int allocated, void *arg)
{
	struct disp_call *c = arg;
	struct disp_map *m = &c->own->map;
	uint8_t *p = c->out + (size_t)PROTO_MAP_RUN * m->nruns;

	(void)off;
	wire_put_u32(p, (uint32_t)len);
	wire_put_u32(p + 4, allocated ? 0 : PROTO_MAP_HOLE);
	return ++m->nruns == m->max; /* a full reply: the client asks again from its end */
}

/* On the threadpool: the block pointers of the range (blocking metadata reads). */
static void map_job(struct work_job *j)
{
	struct disp_call *c = call_of_map(j);
	struct disp_map *m = &c->own->map;
	int ret = stor_ds_map(m->ds, m->off, m->len, map_run, c);

	m->status = ret == 1 ? 0 : ret;
}

static void map_done(struct work_job *j, int status)
{
	struct disp_call *c = call_of_map(j);
	struct disp_map *m = &c->own->map;

	c->status = status < 0 ? status : m->status;
	if (c->status == 0 && m->nruns == 0 && m->len)
		c->status = -EIO; /* cannot be: a range of a byte or more has a run */
	c->out_len = (size_t)PROTO_MAP_RUN * m->nruns;
	count_io(c);
	complete(c);
}

/*
 * Step 3 for a MAP: not record I/O, so not for the I/O workers' batches;
 * the handle is held while the threadpool reads the block pointers.
 */
static void start_map(struct disp_call *c, struct stor_ds *ds, const struct proto_io *pio)
{
	struct disp_map *m = &c->own->map;
	uint32_t max = wire_get_u32(c->body + PROTO_IO_BODY);

	log_debug("conn %llu: %s handle %u at %llu+%u, at most %u runs",
		  (unsigned long long)c->cl->id, c->cmd->name, pio->handle,
		  (unsigned long long)pio->off, pio->len, max);
	if (max == 0) {
		fail_now(c, -EINVAL);
		return;
	}
	*m = (struct disp_map){ .ds = ds, .off = pio->off, .len = pio->len };
	m->max = max < PROTO_MAP_RUNS ? max : PROTO_MAP_RUNS;
	c->out = malloc((size_t)PROTO_MAP_RUN * m->max);
	if (!c->out) {
		fail_now(c, -ENOMEM);
		return;
	}
	m->job.run = map_job;
	m->job.done = map_done;
	if (work_submit_job(dl.loop, &m->job) < 0)
		fail_now(c, -ENOMEM);
}

/* Step 3: a call on a handle of the client; record I/O goes to the workers. */
static void start_io(struct disp_call *c)
{
	struct stor_io *io = &c->own->wio.io;
	struct proto_io pio;
	struct stor_ds *ds;
	int ret;

	proto_io_get(c->body, &pio);
	ret = reg_handle_get(c->cl->handles, pio.handle, &ds);
	if (ret < 0) {
		fail_now(c, ret);
		return;
	}
	c->own->handle = pio.handle;
	if (c->hdr.op == PROTO_OP_MAP) {
		start_map(c, ds, &pio);
		return;
	}
	c->own->plain = stor_ds_encrypted(ds);
	*io = (struct stor_io){ .ds = ds, .off = pio.off, .len = pio.len };
	switch (c->hdr.op) {
	case PROTO_OP_READ:
		if (pio.len > dsp.cfg->max_frame) {
			fail_now(c, -EMSGSIZE);
			return;
		}
		if (plainbuf_takes(pio.len)) {
			c->out = plainbuf_get(pio.len, &c->own->out_epoch);
			c->own->out_cap = c->out ? pio.len : 0;
		} else {
			c->out = stor_ds_read_buf(ds, pio.len);
		}
		if (!c->out) {
			fail_now(c, -ENOMEM);
			return;
		}
		c->out_len = pio.len;
		io->op = STOR_IO_READ;
		io->buf = c->out;
		break;
	case PROTO_OP_WRITE:
		if ((uint64_t)c->hdr.len != PROTO_IO_BODY + (uint64_t)pio.len) {
			fail_now(c, -EPROTO);
			return;
		}
		io->op = STOR_IO_WRITE;
		io->buf = c->body + PROTO_IO_BODY;
		break;
	case PROTO_OP_FLUSH:
		io->op = STOR_IO_FLUSH;
		io->off = 0;
		io->len = 0;
		break;
	case PROTO_OP_DISCARD:
		io->op = STOR_IO_DISCARD;
		break;
	}
	/* in arrival order, for the workers at the end of this loop turn */
	c->own->wio.done = io_done;
	c->own->wio.next = NULL;
	if (dl.io_tail)
		dl.io_tail->next = &c->own->wio;
	else
		dl.io_head = &c->own->wio;
	dl.io_tail = &c->own->wio;
}

void dispatch_flush(void)
{
	struct work_io *list = dl.io_head;

	dl.io_head = dl.io_tail = NULL;
	work_submit_io(list);
}

/* Step 1: the HELLO; a bad one closes the client after its reply. */
static void hello(struct disp_call *c)
{
	uint32_t magic = wire_get_u32(c->body);
	unsigned vmin = wire_get_u16(c->body + 4), vmax = wire_get_u16(c->body + 6);

	if (magic != PROTO_MAGIC) {
		c->status = -EPROTO;
		c->close_after = 1;
	} else if (vmin > PROTO_VERSION || vmax < PROTO_VERSION_MIN) {
		c->status = -EPROTONOSUPPORT;
		c->close_after = 1;
	} else {
		c->cl->hello_done = 1;
	}
	complete(c);
}

/* Step 4: the body of a JSON command is an object (an empty body is {}). */
static int parse_json(struct disp_call *c)
{
	struct hcall *h = &c->own->js->h;
	json_error_t jerr;

	if (!c->hdr.len) {
		h->args = json_object();
		return h->args ? 0 : -ENOMEM;
	}
	if (c->cmd->flags & CMD_DATA) {
		const uint8_t *nul = memchr(c->body, 0, c->hdr.len);

		if (nul) {
			h->data = nul + 1;
			h->data_len = c->hdr.len - (size_t)(nul + 1 - c->body);
		}
		h->args = json_loadb((const char *)c->body,
				     nul ? (size_t)(nul - c->body) : c->hdr.len,
				     JSON_REJECT_DUPLICATES, &jerr);
	} else
		h->args = json_loadb((const char *)c->body, c->hdr.len, JSON_REJECT_DUPLICATES,
				     &jerr);
	if (!h->args || !json_is_object(h->args))
		REFUSE(c, -EPROTO, "%s: invalid JSON request: %s", c->cmd->name,
		       h->args ? "not an object" : jerr.text);
	return 0;
}

struct disp_call *dispatch_call_create(size_t size)
{
	/* the transport's request first: its type starts the block */
	size_t at = (size + _Alignof(struct disp_own) - 1) & ~(_Alignof(struct disp_own) - 1);
	size_t block = at + sizeof(struct disp_own);
	struct disp_call *c = NULL;

	for (unsigned i = 0; i < CALL_SIZES; i++)
		if (dl.kept[i].size == block && dl.kept[i].head) {
			c = dl.kept[i].head;
			dl.kept[i].head = *(void **)c;
			dl.kept[i].n--;
			memset(c, 0, block);
			break;
		}
	if (!c && !(c = calloc(1, block)))
		return NULL;
	c->own = (struct disp_own *)((char *)c + at);
	c->own->call = c;
	c->own->handle = UINT32_MAX;
	c->own->block = block;
	return c;
}

void dispatch_call(struct disp_call *c)
{
	struct disp_client *cl = c->cl;
	const struct proto_cmd *cmd = proto_cmd_by_op(c->hdr.op);
	int ret;

	c->cmd = cmd;
	c->own->handle = UINT32_MAX;
	if (!cl->hello_done && !(cmd->flags & CMD_PREHELLO)) {
		log_info("conn %llu: %s before hello", (unsigned long long)cl->id, cmd->name);
		SAY(c, "hello required first");
		c->close_after = 1;
		fail_now(c, -EPROTO);
		return;
	}
	if (cmd->flags & CMD_PREHELLO) {
		hello(c);
		return;
	}
	if ((cmd->flags & CMD_ADMIN) && !cl->peer.admin) {
		SAY(c, "%s: permission denied (uid %u is not an administrator)", cmd->name,
		    (unsigned)cl->peer.uid);
		fail_now(c, -EPERM);
		return;
	}
	if (cmd->flags & CMD_IO) {
		start_io(c);
		return;
	}
	STATS_ADD(admin_calls, 1);
	ret = js_get(c) ? parse_json(c) : -ENOMEM;
	if (ret < 0) {
		fail_now(c, ret);
		return;
	}
	if (!(cmd->flags & CMD_SECRET))
		log_debug("conn %llu: %s %.*s", (unsigned long long)cl->id, cmd->name,
			  (int)(c->hdr.len > 200 ? 200 : c->hdr.len), (const char *)c->body);
	if (cmd->flags & CMD_BLOCKING) {
		c->own->js->job.run = job_run;
		c->own->js->job.done = job_done;
		if (work_submit_job(dl.loop, &c->own->js->job) < 0)
			fail_now(c, -ENOMEM);
		return;
	}
	run_json(c);
	complete(c);
}

void dispatch_refuse(struct disp_call *c, int status)
{
	/* an unknown opcode gets a bare header; known JSON ones an error object */
	c->cmd = proto_cmd_by_op(c->hdr.op);
	if (c->cmd && !(c->cmd->flags & CMD_JSON))
		c->cmd = NULL;
	c->own->handle = UINT32_MAX;
	fail_now(c, status);
}

void dispatch_reply_hdr(const struct disp_call *c, uint8_t *buf)
{
	struct proto_hdr h = {
		.len = (uint32_t)c->payload_len,
		.op = c->hdr.op,
		.flags = PROTO_F_REPLY,
		.req_id = c->hdr.req_id,
		.status = c->status,
	};

	proto_hdr_put(buf, &h);
}

/* The JSON part of a call (its key material wiped by wipe_secret). */
static void js_free(struct disp_json *js)
{
	if (!js)
		return;
	json_decref(js->h.args);
	json_decref(js->h.reply);
	free(js->out);
	if (js->h.out_data && js->h.out_plain)
		explicit_bzero(js->h.out_data, js->h.out_len);
	free(js->h.out_data);
	if (js->h.opened) {
		stor_ds_close(js->h.opened);
		reg_pool_unref(js->h.opened_pe);
	}
	free(js);
}

int dispatch_write_wiped(const struct disp_client *cl, uint32_t handle)
{
	return reg_handle_encrypted(cl->handles, handle);
}

uint8_t *dispatch_body_alloc(struct disp_call *c, size_t len)
{
	if (!plainbuf_takes(len))
		return c->body = malloc(len ? len : 1);
	c->body = plainbuf_get(len, &c->own->body_epoch);
	c->own->body_cap = c->body ? len : 0;
	return c->body;
}

void dispatch_out_free(struct disp_call *c)
{
	if (c->own->out_cap) {
		plainbuf_put(c->out, c->own->out_cap, c->own->out_epoch);
		c->own->out_cap = 0;
	} else {
		if (c->out && c->own->plain)
			explicit_bzero(c->out, c->out_len);
		free(c->out);
	}
	c->out = NULL;
}

void dispatch_call_reset(struct disp_call *c)
{
	wipe_secret(c);
	if (c->own->body_cap) {
		plainbuf_put(c->body, c->own->body_cap, c->own->body_epoch);
		c->own->body_cap = 0;
	} else {
		if (c->body && c->own->plain)
			explicit_bzero(c->body, c->hdr.len);
		free(c->body);
	}
	js_free(c->own->js);
	dispatch_out_free(c);
	c->body = NULL;
	c->own->js = NULL;
	c->own->plain = 0;
	c->status = 0;
	c->close_after = 0;
	c->payload = NULL;
	c->payload_len = 0;
	c->cmd = NULL;
}

void dispatch_call_destroy(struct disp_call *c)
{
	if (!c)
		return;
	dispatch_call_reset(c);
	for (unsigned i = 0; dl.keeping && i < CALL_SIZES; i++) {
		struct kept_calls *k = &dl.kept[i];

		if (!k->size)
			k->size = c->own->block;
		if (k->size != c->own->block)
			continue;
		if (k->n == CALLS_KEPT)
			break;
		*(void **)c = k->head;
		k->head = c;
		k->n++;
		return;
	}
	free(c);
}
