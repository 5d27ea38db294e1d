/* SPDX-License-Identifier: MIT */
/*
 * The coffer client library: a connection to cofferd over its Unix socket.
 * Admin calls are synchronous and carry JSON; record I/O is asynchronous:
 * submit many requests, each with its own id, and collect completions in
 * any order. One connection is not thread-safe; use one per thread.
 */
#ifndef COFFER_CLIENT_H
#define COFFER_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

struct coffer_conn;

/** Socket path: @path if not NULL, else $COFFER_SOCKET, else the default of the user. */
const char *coffer_socket_path(const char *path);

/**
 * Connect and negotiate the protocol version (HELLO). Before anything is
 * sent, the server's uid (SO_PEERCRED) must be 0, the caller's, or the one
 * in $COFFER_SERVER_UID.
 * @return 0 or -errno (-ENOENT/-ECONNREFUSED: no daemon; -EPERM: served by
 *         another uid; -EINVAL: COFFER_SERVER_UID is not a number), -EPROTO
 */
int coffer_connect(const char *path, struct coffer_conn **out);
/** coffer_connect() that also explains a refusal of the server in @err (may be NULL). */
int coffer_connect_err(const char *path, struct coffer_conn **out, char *err, size_t errlen);
void coffer_close(struct coffer_conn *c);
int coffer_fd(const struct coffer_conn *c);

/**
 * Admin call @cmd (a command name of the table in common/proto.h, e.g.
 * "ds_create") with arguments @args (borrowed; NULL = {}). On success
 * *reply is a new JSON object (caller decrefs). On failure the return is the
 * daemon's status (negative) and @err holds its message.
 */
int coffer_call(struct coffer_conn *c, const char *cmd, json_t *args, json_t **reply, char *err,
		size_t errlen);
/**
 * coffer_call() of a command that carries bytes (CMD_DATA: send, receive):
 * @data (@dlen bytes, may be NULL) go after the object; the reply's bytes
 * are in *@out (*@outlen), valid until the next call on @c (@out may be NULL).
 */
int coffer_call_data(struct coffer_conn *c, const char *cmd, json_t *args, const void *data,
		     size_t dlen, json_t **reply, const uint8_t **out, size_t *outlen, char *err,
		     size_t errlen);

/**
 * Write the send stream of snapshot @snap (DATASET@NAME; @raw: zfs send -w)
 * to @fd, chunk by chunk; with @from (DATASET@FROM, else NULL) the
 * incremental from it (zfs send -i). @return 0, or a negative status with @err
 */
int coffer_send_stream(struct coffer_conn *c, const char *snap, const char *from, int raw, int fd,
		       char *err, size_t errlen);
/**
 * zfs send -I: the incremental streams from @from over every snapshot of
 * the dataset between, to @snap, one after another. @return as above
 */
int coffer_send_package(struct coffer_conn *c, const char *snap, const char *from, int raw, int fd,
			char *err, size_t errlen);
/** One step of a send -I package: the incremental from @from to @snap. */
typedef int (*coffer_send_step_fn)(struct coffer_conn *c, const char *snap, const char *from,
				   void *ctx, char *err, size_t errlen);
/**
 * The steps of a send -I package (the snapshots of the dataset between
 * @from and @snap, in txg order), @fn called for each. @return 0, what @fn
 * returned, or a negative status with @err
 */
int coffer_send_steps(struct coffer_conn *c, const char *snap, const char *from,
		      coffer_send_step_fn fn, void *ctx, char *err, size_t errlen);
/**
 * send -n: the size in bytes of the stream coffer_send_stream() would write
 * with the same arguments, as the daemon reckons it from the block pointers
 * (nothing is sent). @return 0, or a negative status with @err
 */
int coffer_send_estimate(struct coffer_conn *c, const char *snap, const char *from, int raw,
			 uint64_t *bytes, char *err, size_t errlen);
/**
 * Receive the send stream read from @fd into dataset @name (@force: -F,
 * replace it), chunk by chunk; a stream that fails leaves nothing.
 * @return 0, or a negative status with @err
 */
int coffer_receive_stream(struct coffer_conn *c, const char *name, int force, int fd, char *err,
			  size_t errlen);
#define COFFER_RECV_FORCE 0x1u     /* -F */
#define COFFER_RECV_RESUMABLE 0x2u /* -s: a stream cut short keeps what came (zfs receive -s) */
/** coffer_receive_stream() with COFFER_RECV_* @flags. */
int coffer_receive_flags(struct coffer_conn *c, const char *name, unsigned flags, int fd,
			 char *err, size_t errlen);
/** zfs receive -A: drop the partial state a receive -s left in @name. @return as above */
int coffer_receive_abandon(struct coffer_conn *c, const char *name, char *err, size_t errlen);
/**
 * zfs send -t: the rest of the stream that @token (a receive_resume_token)
 * was made for, to @fd. The snapshot (and an incremental's FROM) is found
 * by its GUID among the daemon's snapshots; the daemon checks the token
 * again. @return as above; -EINVAL a token refused, -ENOENT no snapshot
 */
int coffer_send_resume(struct coffer_conn *c, const char *token, int fd, char *err,
		       size_t errlen);
/** Up to @cap bytes from @fd, fewer only at end of file. @return the count, or -errno */
ssize_t coffer_read_full(int fd, void *buf, size_t cap);

/**
 * Open a dataset for record I/O on this connection.
 * @return a handle (>= 0) for coffer_submit, or a negative status
 */
int coffer_ds_open(struct coffer_conn *c, const char *name, uint64_t *volsize,
		   uint32_t *recordsize);

enum coffer_op { COFFER_READ = 1, COFFER_WRITE, COFFER_FLUSH, COFFER_DISCARD };

/**
 * Queue one request; it goes out with the next coffer_flush_out() or when
 * the output buffer fills. @buf must stay valid until its completion: READ
 * fills it, WRITE sends it. @return 0 or -errno
 */
int coffer_submit(struct coffer_conn *c, uint32_t id, enum coffer_op op, int handle,
		  uint64_t off, uint32_t len, void *buf);
/** Send everything queued. @return 0 or -errno */
int coffer_flush_out(struct coffer_conn *c);

struct coffer_completion {
	uint32_t id;
	int status; /* 0 or negative */
};

/**
 * Wait up to @timeout_ms (-1 = forever) for completions; store at most @max
 * of them. @return the number stored (0 on timeout) or -errno
 */
int coffer_reap(struct coffer_conn *c, struct coffer_completion *out, int max, int timeout_ms);

/** Synchronous helpers over submit/reap. */
int coffer_read(struct coffer_conn *c, int handle, uint64_t off, void *buf, uint32_t len);
int coffer_write(struct coffer_conn *c, int handle, uint64_t off, const void *buf, uint32_t len);
int coffer_ds_flush(struct coffer_conn *c, int handle);
/** Discard @len bytes at @off (they read back as zeros; whole records are freed). */
int coffer_discard(struct coffer_conn *c, int handle, uint64_t off, uint32_t len);

/* ---- additions ---- */

/** Largest READ/WRITE length the daemon accepts (from HELLO). */
uint32_t coffer_max_io(const struct coffer_conn *c);

/** Close a handle of coffer_ds_open(); requests still in flight on it finish first. */
int coffer_ds_close(struct coffer_conn *c, int handle);

struct proto_hdr;

/**
 * Test hooks: send @len raw bytes as they are (malformed frames included),
 * and take the next raw reply frame, copying at most @cap payload bytes.
 * @return coffer_send_raw: 0 or -errno; coffer_recv_raw: 1 (a frame),
 *         0 (timeout), -errno (-ECONNRESET: the daemon closed the connection)
 */
int coffer_send_raw(struct coffer_conn *c, const void *buf, size_t len);
int coffer_recv_raw(struct coffer_conn *c, struct proto_hdr *h, void *payload, size_t cap,
		    int timeout_ms);

#endif
