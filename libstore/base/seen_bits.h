/* SPDX-License-Identifier: MIT */
/*
 * A sparse bitmap, set and tested by many threads without a lock: its
 * directory and chunks are made on demand and swapped in with a
 * compare-and-swap, so a bit once set stays set until the whole map is
 * freed. The MAC groups a key has verified since it was loaded
 * (txg/bpmac.c) are kept in one, as are each snapshot's: one never read
 * costs a pointer, not its directory (8 KiB, times 100,000 snapshots).
 */
#ifndef STOR_SEEN_BITS_H
#define STOR_SEEN_BITS_H

#include <stdatomic.h>
#include <stdint.h>

#define SEEN_BITS_CHUNKS 1024u
#define SEEN_BITS_CHUNK_BYTES 4096u
struct seen_bits {
	_Atomic(_Atomic(uint8_t *) *) dir; /* SEEN_BITS_CHUNKS chunks, or NULL */
};
void seen_bits_free(struct seen_bits *s);

/** The byte of bit @g and its mask in @bit; NULL when @g is past the map's
 *  end, or its chunk is not there and @make is 0 (or it could not be made). */
_Atomic uint8_t *seen_bits_at(struct seen_bits *s, uint64_t g, int make, uint8_t *bit);

#endif
