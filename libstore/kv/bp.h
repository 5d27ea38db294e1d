/* SPDX-License-Identifier: MIT */
/*
 * Block pointers: the in-memory form and its codec to and from the BP_LEN
 * bytes LMDB keeps under (dataset id, record number); format.h has the
 * layout. Shared by the txg (stage, lookup, commit), the pool's space
 * rebuild and verify, none of which owns the format.
 */
#ifndef STOR_BP_H
#define STOR_BP_H

#include <stddef.h>
#include <stdint.h>

#include "kv/format.h"

/** An in-memory block pointer (format.h has the on-disk form). */
struct bp {
	uint16_t lun;
	uint8_t flags;
	uint8_t comp;
	uint32_t psize, lsize, csize;
	uint64_t sector;
	uint64_t birth;
	uint64_t salt; /* data key of an encrypted record */
	uint8_t nonce[12];
	uint8_t mac[16];
	uint64_t cksum; /* XXH3-64 of the stored bytes */
};

/** The BP_LEN bytes of @bp, big-endian fields in format.h order. */
void bp_encode(const struct bp *bp, uint8_t out[BP_LEN]);
/**
 * Decode a stored block pointer and check what every reader relies on:
 * psize a nonzero multiple of STOR_SECTOR, csize within it, lsize within
 * STOR_RECSIZE_MAX, and no staged-discard flag (never on disk).
 * @return 0 or STOR_ECORRUPT
 */
int bp_decode(const uint8_t *in, size_t len, struct bp *bp);
/** The LMDB key of record @recno of dataset @ds_id. */
void bp_key(uint64_t ds_id, uint64_t recno, uint8_t key[BP_KEY_LEN]);

#endif
