/* SPDX-License-Identifier: MIT */
/*
 * The dispatcher: the one place that turns a complete request frame into a
 * call. It does the generic work once, in the order of the command table's
 * flags (proto.h): HELLO state, permission, the JSON body, the check of the
 * target name, the registry lock and the lookup and state of the target's
 * pool, the owner check, the dataset handle of record I/O. Then it routes
 * the call: inline on the loop, to the libuv threadpool (CMD_BLOCKING) or to
 * the I/O workers (CMD_IO), and builds the reply payload.
 *
 * A transport (the Unix socket of rpc.c; another front end likewise) owns
 * the bytes: it frames a request, fills a struct disp_call and passes it to
 * dispatch_call() with its own completion callback. The callback runs on
 * the loop thread, possibly before dispatch_call() returns; the transport
 * then writes the header (dispatch_reply_hdr) and c->payload, and frees the
 * call with dispatch_call_free() once written or dropped. Everything here
 * runs on the loop thread except the handlers of blocking commands.
 *
 * A transport with a handshake of its own (a block-device front end) sets
 * hello_done of its clients itself and speaks the table's opcodes: DS_OPEN
 * for a handle, READ/WRITE/FLUSH/DISCARD with a body made by proto_io_put().
 * It calls dispatch_flush() once per loop turn, as rpc.c's check handle does.
 */
#ifndef COFFERD_DISPATCH_H
#define COFFERD_DISPATCH_H

#include <stdint.h>

#include <uv.h>

#include "conf.h"
#include "handlers.h"
#include "proto.h"
#include "registry.h"
#include "work.h"

/** What the dispatcher keeps per client (connection) of a transport. */
struct disp_client {
	struct peer peer;           /* set by the transport before dispatch_client_init() */
	uint64_t id;                /* for logs: "conn ID" */
	const char *front;          /* its framing's name ("control", "nbd"): who is busy */
	int hello_done;
	int closed;                 /* dispatch_client_closed(): replies go nowhere */
	int eperm_logged;           /* the first refusal is logged, the rest counted */
	struct reg_client *handles; /* its dataset handles */
};

struct disp_call;
struct disp_json;
/** Completion of a call, on the loop thread: reply (or drop) and free it. */
typedef void (*disp_done_fn)(struct disp_call *c);

/** One request from dispatch_call() to dispatch_call_free(). */
struct disp_call {
	/* filled by the transport */
	struct disp_client *cl;
	struct proto_hdr hdr;       /* checked by proto_hdr_check() */
	uint8_t *body;              /* hdr.len bytes (malloc'd; the call owns it), NULL if empty */
	disp_done_fn done;
	/* the outcome, for the transport */
	int status;                 /* the reply's status */
	int close_after;            /* close the client once this reply is written */
	const uint8_t *payload;     /* the reply payload (owned by the call) */
	size_t payload_len;
	/* dispatcher's own */
	const struct proto_cmd *cmd;
	struct disp_json *js;       /* JSON commands only (dispatch.c) */
	struct work_io wio;         /* record I/O */
	uint32_t handle;            /* the handle record I/O holds, UINT32_MAX: none */
	uint8_t *out;               /* READ: the data (or a framing's reply made of it) */
	size_t out_len;             /* its length */
	int plain;                  /* record I/O of an encrypted dataset: body and out
				     * hold its plaintext, wiped when freed */
	uint8_t hello[PROTO_HELLO_REPLY];
};

/** Serve on @loop with the limits of @cfg (max_frame). */
void dispatch_init(uv_loop_t *loop, const struct config *cfg);
/** Start serving @cl (cl->peer and cl->id set): decides cl->peer.admin. @return 0 or -ENOMEM */
int dispatch_client_init(struct disp_client *cl);
/** The client's connection is gone; its calls in flight still complete. */
void dispatch_client_closed(struct disp_client *cl);
/** Free what @cl holds (its handles) once none of its calls is in flight. */
void dispatch_client_fini(struct disp_client *cl);

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
/** Free what @c holds (not @c itself); key material is wiped. */
void dispatch_call_free(struct disp_call *c);
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
