/* SPDX-License-Identifier: MIT */
/*
 * zstd compression of records. The "did not shrink, store raw" decision
 * lives here: a compressed record must save a whole sector, or the sealed
 * record would cost the same space plus a decompression on every read.
 * Contexts are per thread and reused: no allocation per record.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>

#include "compress.h"
#include "store.h"

struct zctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void zctx_free(void *p)
{
	struct zctx *z = p;

	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	free(z);
}

static void ctx_key_init(void)
{
	pthread_key_create(&ctx_key, zctx_free);
}

static struct zctx *zctx_get(void)
{
	struct zctx *z;

	pthread_once(&ctx_once, ctx_key_init);
	z = pthread_getspecific(ctx_key);
	if (z)
		return z;
	z = calloc(1, sizeof(*z));
	if (!z)
		return NULL;
	z->c = ZSTD_createCCtx();
	z->d = ZSTD_createDCtx();
	if (!z->c || !z->d || pthread_setspecific(ctx_key, z) != 0) {
		zctx_free(z);
		return NULL;
	}
	return z;
}

size_t compress_record(int level, const void *in, size_t len, void *out, size_t cap,
		       size_t sector)
{
	struct zctx *z = zctx_get();
	size_t n;

	if (!z || level <= 0)
		return 0;
	n = ZSTD_compressCCtx(z->c, out, cap, in, len, level);
	if (ZSTD_isError(n))
		return 0; /* includes "did not fit in cap" */
	if ((n + sector - 1) / sector >= (len + sector - 1) / sector)
		return 0;
	return n;
}

int decompress_record(const void *in, size_t clen, void *out, size_t len)
{
	struct zctx *z = zctx_get();
	size_t n;

	if (!z)
		return -ENOMEM;
	n = ZSTD_decompressDCtx(z->d, out, len, in, clen);
	if (ZSTD_isError(n) || n != len)
		return STOR_ECORRUPT;
	return 0;
}
