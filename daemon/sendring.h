/* SPDX-License-Identifier: MIT */
#ifndef COFFERD_SENDRING_H
#define COFFERD_SENDRING_H

#include <sys/uio.h>

/*
 * The replies of one turn of a loop, to many sockets, in one system call
 * (sendring.c). Each send is non-blocking: it writes what the socket takes
 * and says how much, as a writev on a non-blocking socket would.
 */
struct sendring;

/* @return 0, or a negative errno (no io_uring here: the caller writes alone) */
int sendring_init(struct sendring **out);
void sendring_free(struct sendring *r);
/* Room for one more send before sendring_run()? */
int sendring_room(const struct sendring *r);
/* A send of @iov (which must stay valid until the run) on @fd, for @tag. */
void sendring_add(struct sendring *r, int fd, const struct iovec *iov, unsigned niov, void *tag);
/*
 * Send everything added, in one system call; @done then gets each @tag with
 * the bytes written (the first ones of its iov) or a negative errno
 * (-EAGAIN: nothing written, the socket had no room or the ring failed
 * before the send; -EIO: the ring failed after, what went is unknown).
 */
void sendring_run(struct sendring *r, void (*done)(void *tag, int res));

#endif
