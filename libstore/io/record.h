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
 * Seal records @recnos of table @tb of @ds (its head's or a snapshot's)
 * again under its current master key, each keeping its version (rekey.c):
 * one still sealed under the other generation (or clear, while @ds is
 * encrypted in place) when its stripe is taken,
 * and whose MAC group verifies, is read, opened, sealed with a fresh nonce
 * and written to a new extent; the pointer staged in the open txg is the
 * old one but for its place, salt, nonce, tag and generation, and the old
 * extent is freed at the commit. One written since, or gone, is left
 * alone. All or nothing, like one request. *@done gets how many were
 * sealed again.
 */
int record_reseal(struct stor_ds *ds, const struct reseal_table *tb, size_t n,
		  const uint64_t *recnos, size_t *done);

#endif
