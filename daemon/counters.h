/* SPDX-License-Identifier: MIT */
/*
 * The daemon's counters for `coffer stats`, bumped with relaxed atomics by
 * whichever layer sees the event (transport: connections and bad frames;
 * dispatcher: calls, I/O and refusals; work.c: batches) and read by the
 * stats handler. A plain header so that no layer includes another's for them.
 */
#ifndef COFFERD_COUNTERS_H
#define COFFERD_COUNTERS_H

#include <stdatomic.h>

struct daemon_stats {
	atomic_ullong reads, writes, flushes, discards, maps;
	atomic_ullong read_bytes, write_bytes;
	atomic_ullong io_errors, admin_calls, eperm, bad_frames;
	atomic_ullong conns_total, batches, batched_ios;
	atomic_ullong ring_reads; /* reads done on the loop's own ring (O_DIRECT pools) */
	atomic_uint conns_open;
	atomic_uint inflight_peak; /* most requests one connection had in flight */
};

/** The one instance, defined in main.c. */
extern struct daemon_stats daemon_stats;

/** Count @n events in @field. */
#define STATS_ADD(field, n) \
	atomic_fetch_add_explicit(&daemon_stats.field, (n), memory_order_relaxed)

#endif
