/* SPDX-License-Identifier: MIT */
/*
 * The one way out of libstore for what happens to a pool without a caller
 * asking: a LUN faulted, a bad copy rewritten, a record lost, a scrub done,
 * writes refused for want of space, a key loaded (store.h lists the
 * classes). libstore never prints; it hands each event to the receiver the
 * program registered with stor_set_event_fn(), as OpenZFS's zfs_ereport and
 * spa_event_notify hand theirs to the zevent queue that ZED reads.
 *
 * Here at the bottom of libstore, depending on nothing, so any layer may
 * report. One receiver for the process: events come from I/O threads,
 * scrub threads and administrative calls of any pool alike, and the daemon
 * has one list of them. The receiver is read with one atomic load per
 * event and nothing is built when there is none; what a receiver does with
 * a flood (a scrub may rewrite thousands of copies) is its choice: the
 * daemon rate-limits per class and pool (daemon/events.c).
 */
#include <stdatomic.h>

#include "base/events.h"

/* Set before pools open (store.h): fn is read atomically, arg after it. */
static _Atomic(stor_event_fn) ev_fn;
static void *ev_arg;

void stor_set_event_fn(stor_event_fn fn, void *arg)
{
	ev_arg = arg;
	atomic_store(&ev_fn, fn);
}

void event_post(const char *cls, const char *pool, const struct stor_event_field *f, size_t n)
{
	stor_event_fn fn = atomic_load(&ev_fn);
	struct stor_event ev = { .cls = cls, .pool = pool ? pool : "", .fields = f, .nfields = n };

	if (fn)
		fn(&ev, ev_arg);
}
