/* SPDX-License-Identifier: MIT */
/*
 * zstd compression of records. The "did not shrink, store raw" decision
 * lives here: a compressed record must save a whole sector, or the sealed
 * record would cost the same space plus a decompression on every read.
 * Contexts are per thread and reused: no allocation per record.
 *
 * A context keeps pieces of what it last worked on (the literals of the
 * last block, among others) until its next record. For an encrypted
 * dataset that is plaintext, so the contexts live in workspaces of our own
 * (zstd's static contexts) that compress_wipe() clears once per batch:
 * about 1.5 us for an 8 KiB record's compression context, where freeing
 * and making a context again costs 17 us and wiping after each record
 * would add a third to the compression itself.
 */
#define ZSTD_STATIC_LINKING_ONLY /* static contexts: ZSTD_initStaticCCtx */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "crypt/compress.h"
#include "store.h"

struct zws {
	void *mem;
	size_t cap;
	int used; /* since the last wipe */
};

struct zctx {
	struct zws cw, dw;
	int est_level;   /* the compression workspace size last worked out: */
	size_t est_len;  /* for this level and record size (218 ns a record, */
	size_t est_need; /* against 5 us for the compression of 8 KiB) */
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void zws_free(struct zws *w)
{
	if (w->mem)
		explicit_bzero(w->mem, w->cap);
	free(w->mem);
	*w = (struct zws){ 0 };
}

/* A workspace of at least @need bytes (what it held before is wiped). @return 0 or -ENOMEM */
static int zws_reserve(struct zws *w, size_t need)
{
	if (w->cap >= need)
		return 0;
	zws_free(w);
	w->mem = malloc(need);
	if (!w->mem)
		return -ENOMEM;
	w->cap = need;
	return 1;
}

static void zctx_free(void *p)
{
	struct zctx *z = p;

	zws_free(&z->cw);
	zws_free(&z->dw);
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
	if (pthread_setspecific(ctx_key, z) != 0) {
		free(z);
		return NULL;
	}
	return z;
}

size_t compress_record(int level, const void *in, size_t len, void *out, size_t cap,
		       size_t sector)
{
	struct zctx *z = zctx_get();
	size_t n;
	int ret;

	if (!z || level <= 0)
		return 0;
	/* what zstd itself would allocate for this level and size */
	if (level != z->est_level || len != z->est_len) {
		z->est_need = ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, len, 0));
		z->est_level = level;
		z->est_len = len;
	}
	ret = zws_reserve(&z->cw, z->est_need);
	if (ret < 0)
		return 0;
	if (ret > 0 || !z->c)
		z->c = ZSTD_initStaticCCtx(z->cw.mem, z->cw.cap);
	if (!z->c)
		return 0;
	z->cw.used = 1;
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
	int ret;

	if (!z)
		return -ENOMEM;
	ret = zws_reserve(&z->dw, ZSTD_estimateDCtxSize());
	if (ret < 0)
		return ret;
	if (ret > 0 || !z->d)
		z->d = ZSTD_initStaticDCtx(z->dw.mem, z->dw.cap);
	if (!z->d)
		return -ENOMEM;
	z->dw.used = 1;
	n = ZSTD_decompressDCtx(z->d, out, len, in, clen);
	if (ZSTD_isError(n) || n != len)
		return STOR_ECORRUPT;
	return 0;
}

/* A wiped workspace holds a context again (initialising one takes no allocation). */
static void zws_wipe(struct zws *w)
{
	if (!w->used)
		return;
	explicit_bzero(w->mem, w->cap);
	w->used = 0;
}

void compress_wipe(void)
{
	struct zctx *z;

	pthread_once(&ctx_once, ctx_key_init);
	z = pthread_getspecific(ctx_key);
	if (!z)
		return;
	if (z->cw.used) {
		zws_wipe(&z->cw);
		z->c = ZSTD_initStaticCCtx(z->cw.mem, z->cw.cap);
	}
	if (z->dw.used) {
		zws_wipe(&z->dw);
		z->d = ZSTD_initStaticDCtx(z->dw.mem, z->dw.cap);
	}
}
