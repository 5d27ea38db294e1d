/* SPDX-License-Identifier: MIT */
/*
 * The NBD front end (nbd.c): datasets as block devices for qemu, nbdcopy,
 * nbdinfo, nbd-client and fio, on a Unix socket of the transport (rpc.h)
 * through the same dispatcher, rules and I/O batches as the control socket.
 */
#ifndef COFFERD_NBD_H
#define COFFERD_NBD_H

#include <uv.h>

#include "conf.h"

/**
 * Serve NBD on @path (config_nbd_socket()), with the socket mode and group
 * of @cfg; call after rpc_listen(). @return 0 or -errno
 */
int nbd_listen(uv_loop_t *loop, const struct config *cfg, const char *path);

#endif
