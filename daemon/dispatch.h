/* SPDX-License-Identifier: MIT */
/*
 * The dispatcher: the one place that turns a complete request frame into a
 * call. It does the generic work once, in the order of the command table's
 * flags (proto.h): HELLO state, permission, the JSON body, the check of the
 * target name, the registry lock and the lookup and state of the target's
 * pool, the owner check, the dataset handle of a call on one (CMD_IO). Then
 * it routes the call: inline on the loop, to the libuv threadpool
 * (CMD_BLOCKING) or to the I/O workers (record I/O), and builds the reply
 * payload; it counts the calls, and logs the JSON ones and MAP at debug
 * level (record I/O is too many to log one by one).
 *
 * A transport (the Unix socket of rpc.c; another front end likewise) owns
 * the bytes: it frames a request, fills a struct disp_call made by
 * dispatch_call_create() and passes it to dispatch_call() with its own
 * completion callback. The callback runs on the loop thread, possibly
 * before dispatch_call() returns; the transport then writes the header
 * (dispatch_reply_hdr) and c->payload, and frees the call with
 * dispatch_call_destroy() once written or dropped. Everything here runs on
 * the loop thread except the handlers of blocking commands.
 *
 * A transport with a handshake of its own (a block-device front end) sets
 * hello_done of its clients itself and speaks the table's opcodes: DS_OPEN
 * for a handle and DS_CLOSE to give it back, READ/WRITE/FLUSH/DISCARD and
 * MAP with a body made by proto_io_put(). It calls dispatch_flush() once
 * per loop turn, as rpc.c's check handle does.
 *
 * This header is all a transport sees of the layers below: the registry
 * (handles, pools, access rules) and the workers are the dispatcher's, so
 * the part of a call that holds their state is allocated with the call
 * (dispatch_call_create) and defined in dispatch.c alone. A transport that
 * reached past the dispatcher would have calls that no counter, log or
 * generic check of the table sees.
 */
#ifndef COFFERD_DISPATCH_H
#define COFFERD_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf.h"
#include "peer.h"
#include "proto.h"

struct reg_client;

/** What the dispatcher keeps per client (connection) of a transport. */
struct disp_client {
	struct peer peer;           /* set by the transport before dispatch_client_init() */
	uint64_t id;                /* for logs: "conn ID" */
	const char *front;          /* its framing's name ("control", "nbd"): who is busy */
	int hello_done;
	int closed;                 /* dispatch_client_closed(): replies go nowhere */
	int eperm_logged;           /* the first refusal is logged, the rest counted */
	struct reg_client *handles; /* its dataset handles (the registry's, opaque here) */
};

struct disp_call;
struct disp_own;
/** Completion of a call, on the loop thread: reply (or drop) and free it. */
typedef void (*disp_done_fn)(struct disp_call *c);

/** One request from dispatch_call() to dispatch_call_destroy(). */
struct disp_call {
	/* filled by the transport */
	struct disp_client *cl;
	struct proto_hdr hdr;       /* checked by proto_hdr_check() */
	uint8_t *body;              /* hdr.len bytes (dispatch_body_alloc(), or malloc'd: the
				     * call owns it), NULL if empty */
	disp_done_fn done;
	/* the outcome, for the transport */
	int status;                 /* the reply's status */
	int close_after;            /* close the client once this reply is written */
	const uint8_t *payload;     /* the reply payload (owned by the call) */
	size_t payload_len;
	uint8_t *out;               /* READ: the data (or a framing's reply made of it), owned
				     * by the call: free it with dispatch_out_free() */
	size_t out_len;             /* its length */
	const struct proto_cmd *cmd; /* the command dispatched; NULL until then */
	struct disp_own *own;       /* the dispatcher's part (dispatch.c), made with the call */
};

/** Take the limits of @cfg (max_frame). */
void dispatch_init(const struct config *cfg);
/** Dispatch on @loop, from its own thread: each loop, the main one too (loops.c). */
void dispatch_loop_attach(uv_loop_t *loop);
/** The loop is done: free the call blocks it kept, keep none from now on. */
void dispatch_loop_detach(void);
/** Whether @p is an administrator (admin_group, root), as dispatch_client_init() decides. */
int dispatch_peer_admin(const struct peer *p);
/** Start serving @cl (cl->peer and cl->id set): decides cl->peer.admin. @return 0 or -ENOMEM */
int dispatch_client_init(struct disp_client *cl);
/** The client's connection is gone; its calls in flight still complete. */
void dispatch_client_closed(struct disp_client *cl);
/** Free what @cl holds (its handles) once none of its calls is in flight. */
void dispatch_client_fini(struct disp_client *cl);

/**
 * A zeroed call in a block of @size bytes (>= sizeof(struct disp_call)):
 * a transport's request type, which starts with its struct disp_call; the
 * dispatcher's own part is allocated behind it. @return NULL: no memory
 */
struct disp_call *dispatch_call_create(size_t size);
/**
 * The body of @c, @len bytes: record I/O's from the loop's pool (plainbuf.h),
 * so give them to @c at once; freed with the call. @return c->body, NULL: no memory
 */
uint8_t *dispatch_body_alloc(struct disp_call *c, size_t len);
/**
 * Dispatch @c (transport fields filled). @c->done is called exactly once,
 * maybe before this returns.
 */
void dispatch_call(struct disp_call *c);
/**
 * Complete a frame that never became a call (bad header, a limit) with
 * @status: the same reply shape as a call of its opcode would get.
 */
void dispatch_refuse(struct disp_call *c, int status);
/** The reply header of completed @c into @buf (PROTO_HDR_SIZE bytes). */
void dispatch_reply_hdr(const struct disp_call *c, uint8_t *buf);
/**
 * Free what completed @c holds (key material and plaintext wiped) and
 * clear its outcome, so that @c may carry a next call: a framing's request
 * of several steps.
 */
void dispatch_call_reset(struct disp_call *c);
/** dispatch_call_reset(), then free @c itself. NULL is a no-op. */
void dispatch_call_destroy(struct disp_call *c);
/**
 * Must the data of a WRITE on @handle of @cl be wiped from a transport's
 * buffers: its dataset is encrypted (or @handle names none open)?
 */
int dispatch_write_wiped(const struct disp_client *cl, uint32_t handle);
/** Free a READ's data (wiped first if it is an encrypted dataset's): c->out is NULL after. */
void dispatch_out_free(struct disp_call *c);
/**
 * Hand the record I/O dispatched since the last call to the workers in one
 * batch. A transport calls it once per loop turn, before writing replies.
 */
void dispatch_flush(void);

#endif
