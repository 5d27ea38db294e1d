/* SPDX-License-Identifier: MIT */
/*
 * The NBD front end (nbd.c): datasets as block devices for qemu, nbdcopy,
 * nbdinfo, nbd-client and fio, on a Unix socket of the transport (rpc.h)
 * and, TLS required, on TCP,
 * through the same dispatcher, rules and I/O batches as the control socket.
 */
#ifndef COFFERD_NBD_H
#define COFFERD_NBD_H

#include "conf.h"

struct tls_ctx;

/**
 * Serve NBD on @path (config_nbd_socket()), with the socket mode and group
 * of @cfg; call after rpc_listen(). @return 0 or -errno
 */
int nbd_listen(const struct config *cfg, const char *path);
/**
 * Serve NBD on TCP at cfg->nbd_listen, TLS required with @tls (tls.h);
 * *@port: the port bound. @return 0 or -errno
 */
int nbd_listen_tcp(const struct config *cfg, struct tls_ctx *tls, unsigned *port);

#endif
