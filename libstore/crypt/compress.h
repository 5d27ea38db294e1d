/* SPDX-License-Identifier: MIT */
/* Record compression (zstd), before encryption; the only user of <zstd.h>. */
#ifndef STOR_COMPRESS_H
#define STOR_COMPRESS_H

#include <stddef.h>

/**
 * Compress @len bytes of @in at zstd @level into @out (@cap bytes).
 * @return the compressed size, or 0 when the record would not save at least
 * one sector of @sector bytes: such a record is stored raw.
 */
size_t compress_record(int level, const void *in, size_t len, void *out, size_t cap,
		       size_t sector);

/** Decompress @clen bytes into exactly @len bytes. @return 0 or STOR_ECORRUPT */
int decompress_record(const void *in, size_t clen, void *out, size_t len);

/**
 * Wipe what this thread's contexts keep of the records they worked on since
 * the last call: once per batch that compressed or decompressed plaintext
 * of an encrypted dataset.
 */
void compress_wipe(void);

#endif
