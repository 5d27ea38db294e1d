/* SPDX-License-Identifier: MIT */
/* Counting I/O statistics from inside libstore (see stats.c). */
#ifndef STOR_STATS_H
#define STOR_STATS_H

#include <stdint.h>

#include "pool_impl.h"

uint64_t stats_now_ns(void);
/** Count one finished request of @ds and its latency. */
void stats_request(struct stor_ds *ds, enum stor_io_op op, uint64_t bytes, int result,
		   uint64_t ns);

#define STATS_ADD(ds, field, n) \
	atomic_fetch_add_explicit(&(ds)->stats.field, (n), memory_order_relaxed)

#endif
