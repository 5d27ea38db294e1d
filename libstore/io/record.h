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

/**
 * Seal records @recnos of @ds again under its current master key (rekey.c):
 * each one still sealed under the other generation when its stripe is
 * taken is read, opened, sealed with a fresh nonce, written to a new
 * extent and staged in the open txg, as a write of none of its bytes
 * would be; one written since, or gone, is left alone. All or nothing,
 * like one request. *@done gets how many were sealed again.
 */
int record_reseal(struct stor_ds *ds, size_t n, const uint64_t *recnos, size_t *done);

#endif
