// SPDX-License-Identifier: MIT
/*
 * One system call for the replies of a turn of a loop (rpc.c's flush of
 * every connection with replies), where a writev each costs a system call
 * and, worse, a switch: the write wakes the peer, which takes the core at
 * the write's return to user space, and the loop waits for it before the
 * next connection's write. With the sends of a turn submitted together to
 * an io_uring of the loop's own, the peers are woken one after the other in
 * the kernel and the loop is switched out once a turn, not once a reply.
 *
 * Each send is a SENDMSG with MSG_DONTWAIT: io_uring then runs it at once
 * during the submission and, on a full socket, completes it with -EAGAIN
 * rather than waiting for room, so every completion is there when the
 * submission returns and the loop never blocks. The caller hands what was
 * not written to libuv, as after a short writev.
 */

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sendring.h"

#define SENDRING_ENTRIES 64u

struct sendring {
	struct io_uring ring;
	unsigned n; /* added since the last run */
	int broken; /* the ring failed once: the caller writes alone from then on */
	struct msghdr msg[SENDRING_ENTRIES];
	void *tag[SENDRING_ENTRIES];
	unsigned char reported[SENDRING_ENTRIES];
};

int sendring_init(struct sendring **out)
{
	struct sendring *r = calloc(1, sizeof(*r));
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	ret = io_uring_queue_init(SENDRING_ENTRIES, &r->ring, 0);
	if (ret < 0) {
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void sendring_free(struct sendring *r)
{
	if (!r)
		return;
	io_uring_queue_exit(&r->ring);
	free(r);
}

int sendring_room(const struct sendring *r)
{
	return !r->broken && r->n < SENDRING_ENTRIES;
}

void sendring_add(struct sendring *r, int fd, const struct iovec *iov, unsigned niov, void *tag)
{
	unsigned i = r->n++;
	struct msghdr *m = &r->msg[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	/* n < SENDRING_ENTRIES and every run empties the ring: there is an entry */
	memset(m, 0, sizeof(*m));
	m->msg_iov = (struct iovec *)iov;
	m->msg_iovlen = niov;
	r->tag[i] = tag;
	r->reported[i] = 0;
	io_uring_prep_sendmsg(sqe, fd, m, MSG_DONTWAIT | MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &r->tag[i]);
}

void sendring_run(struct sendring *r, void (*done)(void *tag, int res))
{
	unsigned want = r->n, sent = 0, got = 0;
	int ret;

	if (!want)
		return;
	r->n = 0;
	/* the kernel may take fewer than asked (short of memory): ask again */
	while (sent < want) {
		ret = io_uring_submit(&r->ring);
		if (ret == -EINTR)
			continue;
		if (ret <= 0)
			break;
		sent += (unsigned)ret;
	}
	/* they are taken in the order added: sends [0, sent) went to the kernel */
	while (got < sent) {
		struct io_uring_cqe *cqe;
		unsigned i;

		/*
		 * Non-blocking sends complete within the submission; the wait is
		 * for a kernel that queued one anyway, and ends with its send.
		 */
		ret = io_uring_wait_cqe(&r->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0)
			break;
		i = (unsigned)((void **)io_uring_cqe_get_data(cqe) - r->tag);
		if (i < sent && !r->reported[i]) {
			r->reported[i] = 1;
			done(r->tag[i], cqe->res);
			got++;
		}
		io_uring_cqe_seen(&r->ring, cqe);
	}
	if (got == want)
		return;
	/*
	 * The ring failed, and is not used again. A send it never took wrote
	 * nothing: the caller writes it itself (-EAGAIN, as for a full socket).
	 * One it took and did not report may have written any part of itself,
	 * so its connection's stream is lost (-EIO).
	 */
	r->broken = 1;
	for (unsigned i = 0; i < want; i++)
		if (!r->reported[i])
			done(r->tag[i], i < sent ? -EIO : -EAGAIN);
}
