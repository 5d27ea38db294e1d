/* SPDX-License-Identifier: MIT */
/*
 * The Unix-socket transport of cofferd (rpc.c): the socket file, accepting,
 * framing, back-pressure, writing replies, connection limits and timeouts,
 * and an orderly stop. What a frame means is the dispatcher's (dispatch.h).
 */
#ifndef COFFERD_RPC_H
#define COFFERD_RPC_H

#include <sys/types.h>

#include <uv.h>

#include "conf.h"

/**
 * Is a daemon serving @path? Connects to find out: a live one is left alone
 * (*pid: its pid from SO_PEERCRED, 0 if it was too busy to say), a stale
 * socket (connection refused) is removed.
 * @return 0 (the path is free now), -EADDRINUSE (a daemon answers),
 *         -EEXIST (something other than a socket is there), -errno
 */
int rpc_socket_probe(const char *path, pid_t *pid);
/**
 * Listen on cfg->socket (mode, group); call rpc_socket_probe() and
 * dispatch_init() first. At shutdown the socket file is removed only if it
 * is still the inode bound here. @return 0 or -errno
 */
int rpc_listen(uv_loop_t *loop, const struct config *cfg);
/** Stop accepting, let in-flight requests finish, then call @done on the loop. */
void rpc_shutdown(void (*done)(void));

#endif
