/* SPDX-License-Identifier: MIT */
/*
 * The offline checker: walks the committed block pointers of a pool and
 * reports what must never be, without any key. Two encrypted records of a
 * dataset under one key salt with one nonce are a (key, nonce) pair used
 * twice (crypt.c's nonce scheme says why there are none); a record whose
 * stored bytes do not match the keyless checksum in its pointer is damaged.
 * Pointers are visited in key order, so a dataset's records come together.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lun.h"
#include "meta.h"
#include "store_impl.h"

struct seen_nonce {
	uint64_t salt;
	uint8_t nonce[12];
};

struct walk {
	struct stor_pool *p;
	struct stor_verify_report *rep;
	uint64_t ds_id;
	struct seen_nonce *seen;
	size_t nseen, capseen;
	uint8_t *buf;
	size_t buflen;
};

static int cmp_nonce(const void *a, const void *b)
{
	const struct seen_nonce *x = a, *y = b;

	if (x->salt != y->salt)
		return x->salt < y->salt ? -1 : 1;
	return memcmp(x->nonce, y->nonce, sizeof(x->nonce));
}

/* Count the repeats among the nonces of the dataset just walked. */
static void close_ds(struct walk *w)
{
	if (w->nseen > 1)
		qsort(w->seen, w->nseen, sizeof(*w->seen), cmp_nonce);
	for (size_t i = 1; i < w->nseen; i++)
		if (cmp_nonce(&w->seen[i - 1], &w->seen[i]) == 0)
			w->rep->nonce_repeats++;
	w->nseen = 0;
}

static int check_extent(struct walk *w, const struct bp *bp)
{
	struct lun_io io;

	if (bp->lun >= atomic_load(&w->p->nluns) || !w->p->luns[bp->lun].lun)
		return STOR_ECKSUM;
	if (bp->psize > w->buflen) {
		free(w->buf);
		w->buf = NULL;
		if (posix_memalign((void **)&w->buf, STOR_SECTOR, bp->psize))
			return -ENOMEM;
		w->buflen = bp->psize;
	}
	io = (struct lun_io){ w->p->luns[bp->lun].lun, bp->sector * STOR_SECTOR, w->buf, bp->psize,
			      0 };
	if (lun_read_batch(&io, 1) || io.result < 0)
		return STOR_ECKSUM;
	return XXH3_64bits(w->buf, bp->psize) == bp->cksum ? 0 : STOR_ECKSUM;
}

static int visit(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct walk *w = ctx;
	const uint8_t *r = key;
	uint64_t id;
	struct bp bp;
	int ret;

	if (klen != BP_KEY_LEN)
		return STOR_ECORRUPT;
	id = get_u64(&r);
	if (id != w->ds_id) {
		close_ds(w);
		w->ds_id = id;
	}
	w->rep->records++;
	if (bp_decode(val, vlen, &bp) < 0) {
		w->rep->cksum_errors++;
		return 0;
	}
	if (bp.flags & BP_F_ENCRYPTED) {
		w->rep->encrypted++;
		if (w->nseen == w->capseen) {
			size_t cap = w->capseen ? w->capseen * 2 : 1024;
			struct seen_nonce *s = realloc(w->seen, cap * sizeof(*s));
			if (!s)
				return -ENOMEM;
			w->seen = s;
			w->capseen = cap;
		}
		w->seen[w->nseen].salt = bp.salt;
		memcpy(w->seen[w->nseen].nonce, bp.nonce, sizeof(bp.nonce));
		w->nseen++;
	}
	ret = check_extent(w, &bp);
	if (ret == STOR_ECKSUM)
		w->rep->cksum_errors++;
	else if (ret < 0)
		return ret;
	return 0;
}

int stor_pool_verify(struct stor_pool *p, struct stor_verify_report *rep)
{
	struct walk w = { .p = p, .rep = rep, .ds_id = UINT64_MAX };
	struct meta_txn *t = NULL;
	int ret;

	memset(rep, 0, sizeof(*rep));
	ret = txg_sync(p, 0); /* what was written is on the LUNs and in LMDB */
	if (ret < 0)
		return ret;
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_BP, NULL, 0, 0, visit, &w);
	meta_rtxn_put(t);
	close_ds(&w);
	free(w.seen);
	free(w.buf);
	return ret;
}
