/* SPDX-License-Identifier: MIT */
/*
 * cofferd internals shared by rpc.c (the libuv server), work.c (threads) and
 * handlers.c (one function per command). Only the loop thread touches a
 * struct rpc_conn; worker threads see a struct rpc_call and nothing else.
 */
#ifndef COFFERD_RPC_H
#define COFFERD_RPC_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <uv.h>

#include "conf.h"
#include "proto.h"
#include "store.h"

struct rpc_conn;
struct pool_ent;

/** One request from receipt to reply. */
struct rpc_call {
	struct rpc_conn *conn;
	struct proto_hdr hdr;
	const struct proto_cmd *cmd;
	uid_t uid;              /* peer credentials, copied for handlers */
	gid_t gid;
	const gid_t *groups;    /* supplementary groups (SO_PEERGROUPS), the connection's */
	int ngroups;            /* -1: the kernel did not say */
	int admin;
	uint8_t *body;          /* request payload (owned), NULL if empty */
	json_t *args;           /* JSON commands: the request object */
	json_t *reply;          /* JSON commands: the reply object */
	char err[512];          /* JSON commands: error text for the reply */
	int status;             /* the reply status */
	/* record I/O */
	struct stor_io io;
	uint32_t handle;
	uint8_t *out;           /* READ: reply frame, data at out + PROTO_HDR_SIZE */
	/* ds_open: filled by the handler, installed by the loop */
	struct stor_ds *opened;
	struct pool_ent *opened_pool;
	uv_work_t work;
	struct rpc_call *next;
	/* the reply frame as written: header + payload */
	uint8_t hdrbuf[PROTO_HDR_SIZE];
	char *json_out;
	size_t payload_len;
	size_t charge;          /* bytes counted in the connection's inflight_bytes */
};

/* Counters for `coffer stats`; updated with relaxed atomics. */
struct rpc_stats {
	atomic_ullong reads, writes, flushes, discards;
	atomic_ullong read_bytes, write_bytes;
	atomic_ullong io_errors, admin_calls, eperm, bad_frames;
	atomic_ullong conns_total, batches, batched_ios;
	atomic_uint conns_open;
	atomic_uint inflight_peak; /* most requests one connection had in flight */
};

extern struct rpc_stats rpc_stats;

/* rpc.c */
/**
 * Is a daemon serving @path? Connects to find out: a live one is left alone
 * (*pid: its pid from SO_PEERCRED, 0 if it was too busy to say), a stale
 * socket (connection refused) is removed.
 * @return 0 (the path is free now), -EADDRINUSE (a daemon answers),
 *         -EEXIST (something other than a socket is there), -errno
 */
int rpc_socket_probe(const char *path, pid_t *pid);
/**
 * Listen on cfg->socket (mode, group); call rpc_socket_probe() first. At
 * shutdown the socket file is removed only if it is still the inode bound
 * here. @return 0 or -errno
 */
int rpc_listen(uv_loop_t *loop, const struct config *cfg);
/** Stop accepting, let in-flight requests finish, then call @done on the loop. */
void rpc_shutdown(void (*done)(void));
/** Complete @c on the loop thread: reply (unless the connection is gone) and free it. */
void rpc_call_done(struct rpc_call *c);
/** Close handle @h of @conn (loop thread). @return 0 or -EBADF */
int rpc_handle_close(struct rpc_conn *conn, uint32_t h);
/** Number of datasets open on connections right now. */
unsigned rpc_open_handles(void);

/** Which handles rpc_revoke() finds: those on pool @pe, of datasets @ds (all if @nds is 0). */
struct rpc_revoke {
	struct pool_ent *pe;
	struct stor_ds *const *ds;
	size_t nds;
	uid_t by; /* the admin asking, for the log */
};
/**
 * From a worker thread: count the handles of every connection that match @r
 * and, with @mark, revoke them (requests on them then get -ESTALE) and wait,
 * up to @timeout_ms, until every one has no request in flight and is closed.
 * @return the number of matching handles, -ETIMEDOUT or -ESHUTDOWN
 */
int rpc_revoke(const struct rpc_revoke *r, int mark, unsigned timeout_ms);

/* work.c */
/** Start @n I/O worker threads. @return 0 or -errno */
int work_start(uv_loop_t *loop, unsigned n, int io_inline);
/** Queue a list of I/O calls (linked by ->next, oldest first) for the workers: one wake-up. */
void work_submit_io(struct rpc_call *list);
/** Run a blocking JSON command on the libuv threadpool. */
int work_submit_admin(uv_loop_t *loop, struct rpc_call *c);
/** Stop and join the I/O workers (the queue must be empty). */
void work_stop(void);

/* handlers.c */
/** Remember @cfg and import every pool listed in the state directory. */
int handlers_init(const struct config *cfg);
/** Close every pool (commits the open txg). */
/** Close every pool; @return how many failed their final commit. */
int handlers_fini(void);
/** Run the handler of c->cmd; sets c->status, c->reply / c->err. */
void handlers_run(struct rpc_call *c);
/** Drop the dataset-handle count of @pe (a handle was closed). */
void handlers_pool_unref(struct pool_ent *pe);
/**
 * Is the peer an administrator: uid 0, our uid, or a member of admin_group by
 * its gid, its supplementary groups (@peer_groups, from SO_PEERGROUPS) or the
 * group database?
 */
int handlers_is_admin(uid_t uid, gid_t gid, const gid_t *peer_groups, int npeer);

#endif
