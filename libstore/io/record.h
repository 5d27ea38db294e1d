/* SPDX-License-Identifier: MIT */
/* record.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_RECORD_H
#define STOR_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct bp;

int record_write_stored(struct stor_ds *ds, size_t n, const uint64_t *recnos,
			const struct bp *bps, uint8_t *const *bufs);

#endif
