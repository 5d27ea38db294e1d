/* SPDX-License-Identifier: MIT */
/*
 * The transport of cofferd (rpc.c): the socket files (and a TCP socket whose
 * framing starts TLS, tls.h), accepting, credentials, back-pressure, writing
 * replies, connection limits and timeouts, and an orderly stop. What the bytes of a connection mean is its
 * framing's: the control protocol's (rpc.c, frames of proto.h) or NBD's
 * (nbd.c). Both hand their requests to the dispatcher (dispatch.h), so the
 * limits, the access rules and the I/O batches are the same for both.
 */
#ifndef COFFERD_RPC_H
#define COFFERD_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "conf.h"
#include "dispatch.h"

#define RPC_REPLY_HDR_MAX 32u /* bytes a framing may put before a reply's payload */

struct rpc_conn;
struct tls_ctx;

/* One request from its frame to its written reply. A framing's own request
 * type starts with it (rpc_framing.req_size); rpc_req_new() has the
 * dispatcher make it (dispatch_call_create), with the dispatcher's part behind. */
struct rpc_req {
	struct disp_call dc;  /* first: what the dispatcher sees */
	struct rpc_conn *conn;
	uint8_t hdrbuf[RPC_REPLY_HDR_MAX]; /* written before dc.payload */
	size_t hdr_len;
	size_t charge;        /* bytes counted in the connection's inflight_bytes */
	struct rpc_req *next;
};

/*
 * What a protocol on a socket of the transport supplies. Every callback runs
 * on the loop thread. A connection is in its negotiation until the framing
 * sets dc.hello_done (and ends rpc_conn_handshake()): till then it gets a
 * small read buffer and hello_timeout applies.
 */
struct rpc_framing {
	const char *name;     /* for logs: "control", "nbd" */
	size_t req_size;      /* sizeof its request type, >= sizeof(struct rpc_req) */
	int keep_idle;        /* idle_timeout does not apply (a block device may be idle) */
	/** A connection within the limits was accepted: greet it. @return 0 or -1 to close */
	int (*accepted)(struct rpc_conn *conn);
	/** A connection over a limit (@status, @why): tell it, then it closes. */
	void (*refuse)(struct rpc_conn *conn, int status, const char *why);
	/**
	 * How long the frame at @p is (@avail bytes there, at least 1): 0 and
	 * *need (may exceed @avail), 1 if @avail is too short to tell, -1 if it
	 * was refused (the framing queued a reply or closed the connection).
	 */
	int (*frame)(struct rpc_conn *conn, const uint8_t *p, size_t avail, size_t *need);
	/** Take the complete frame at @p. @return 0, or -1 to stop parsing */
	int (*handle)(struct rpc_conn *conn, const uint8_t *p, size_t len);
	/**
	 * Must the frame at @p be wiped once taken: key material, or data to
	 * write (plaintext of an encrypted dataset, perhaps)? NULL: never
	 */
	int (*wipe)(struct rpc_conn *conn, const uint8_t *p, size_t avail);
	/** The connection is being freed: drop what the framing keeps for it. */
	void (*fini)(struct rpc_conn *conn);
};

/**
 * Is a daemon serving @path? Connects to find out: a live one is left alone
 * (*pid: its pid from SO_PEERCRED, 0 if it was too busy to say), a stale
 * socket (connection refused) is removed.
 * @return 0 (the path is free now), -EADDRINUSE (a daemon answers),
 *         -EEXIST (something other than a socket is there), -errno
 */
int rpc_socket_probe(const char *path, pid_t *pid);
/** Take @cfg's limits; before any loop attaches. */
void rpc_init(const struct config *cfg);
/**
 * Serve connections on @loop too, from its own thread (loops.c): the main
 * loop first, each loop before anything listens. @return 0 or -errno
 */
int rpc_loop_attach(uv_loop_t *loop);
/**
 * Listen on cfg->socket (mode, group) with the control protocol, from the
 * main loop, which accepts for every loop; call rpc_socket_probe() and
 * dispatch_init() first. At shutdown the socket file is removed only if it
 * is still the inode bound here. @return 0 or -errno
 */
int rpc_listen(void);
/** Listen on @path too, with @fr, under the same mode, group and rules. @return 0 or -errno */
int rpc_listen_framing(const char *path, const struct rpc_framing *fr);
/**
 * Listen on TCP at @hostport (nbd_listen's form) with @fr, whose connections
 * must start TLS with @tls (rpc_conn_starttls) before they are anyone: until
 * then their peer is an unknown uid that may open nothing, held in a pool of
 * its own (max_tls_handshakes, tls_handshake_timeout) and in no limit of
 * local users. *@port: the port bound (port 0 lets the kernel choose).
 * @return 0 or -errno
 */
int rpc_listen_tcp(const char *hostport, const struct rpc_framing *fr, struct tls_ctx *tls,
		   unsigned *port);
/**
 * From the main loop: stop accepting, let in-flight requests finish, then
 * call @each on every loop once its connections are gone (on its thread),
 * and @all on the main loop once every loop's are.
 */
void rpc_shutdown(void (*each)(void), void (*all)(void));

/* ---- for framings ---- */

/** The dispatcher's view of @conn: its peer, negotiation state, handles. */
struct disp_client *rpc_conn_client(struct rpc_conn *conn);
/** The framing's own state of @conn (NULL until it sets it). */
void **rpc_conn_priv(struct rpc_conn *conn);
/** Close @conn once every reply owed to it is written; nothing more is read. */
void rpc_conn_close_after(struct rpc_conn *conn);
/**
 * @on: the framing negotiates on after setting dc.hello_done (so that it
 * may dispatch calls): the small read buffer and hello_timeout still apply.
 */
void rpc_conn_handshake(struct rpc_conn *conn, int on);
enum rpc_tls {
	RPC_TLS_NONE,     /* a Unix socket: the kernel vouches for the peer */
	RPC_TLS_REQUIRED, /* TCP, TLS not started yet: the peer is nobody */
	RPC_TLS_ON,       /* TCP in TLS (the peer is known once the handshake is done) */
};
/** Where @conn stands with TLS. */
int rpc_conn_tls(const struct rpc_conn *conn);
/**
 * Start TLS on @conn (RPC_TLS_REQUIRED) after the frame being handled: the
 * replies queued so far go in the clear, the rest in TLS. If the peer sent
 * more after this frame, the connection closes (-EPROTO): those bytes were
 * sent before the peer could have read our answer. @return 0 or -errno
 * (then @conn is closed or closing)
 */
int rpc_conn_starttls(struct rpc_conn *conn);
/** Stop or go on parsing @conn's frames (a framing that waits for a reply). */
void rpc_conn_hold(struct rpc_conn *conn, int hold);
/**
 * A new request on @conn holding @charge bytes, counted in flight (and
 * against the limits) until rpc_req_done(). dc.cl and dc.hdr are set,
 * dc.done is rpc_req_done. @return NULL: no memory (the connection closes)
 */
struct rpc_req *rpc_req_new(struct rpc_conn *conn, const struct proto_hdr *h, size_t charge);
/** Queue @dc's reply (hdrbuf, then dc.payload) and release its counts. */
void rpc_req_done(struct disp_call *dc);

#endif
