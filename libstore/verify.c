/* SPDX-License-Identifier: MIT */
/*
 * The offline checker: walks the committed block pointers of a pool and
 * reports what must never be, without any key. Two encrypted records of a
 * dataset under one key salt with one nonce are a (key, nonce) pair used
 * twice (crypt.c's nonce scheme says why there are none); a record whose
 * stored bytes do not match the keyless checksum in its pointer is damaged.
 * Space: every extent is referenced by one pointer, of a head or of a
 * snapshot's table (snapshot.c), (or by the metadata log
 * on the LUNs, metalog.c) only, each LUN's allocator counts exactly the
 * sectors the pointers and the log reference, and each
 * dataset's used space is the sum of its pointers, its usedbysnapshots the
 * sum of its snapshots' tables.
 * Pointers are visited in key order, so a dataset's records come together.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "array.h"
#include "hash.h"
#include "lun.h"
#include "meta.h"
#include "metalog.h"
#include "snapshot.h"
#include "store_impl.h"

struct seen_nonce {
	uint64_t salt;
	uint8_t nonce[12];
};

struct walk {
	struct stor_pool *p;
	struct stor_verify_report *rep;
	uint64_t *refs[STOR_LUNS_MAX]; /* a bit per referenced sector */
	uint64_t nref[STOR_LUNS_MAX];
	uint64_t ds_id, ds_used;
	struct stor_ds *ds; /* of ds_id (a snapshot's: its dataset), NULL if none */
	int kept;           /* ds_id is a snapshot's table */
	uint64_t nkept;
	uint64_t *kept_by;  /* bytes of the tables of p->ds[i]: its usedbysnapshots */
	size_t kept_i;      /* which, for the table being walked */
	uint64_t recno;
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

/* Count the repeats among the nonces of the dataset just walked, and check its space. */
static void close_ds(struct walk *w)
{
	if (w->ds_id != UINT64_MAX) {
		struct stor_ds *ds;

		ds = ds_find_id_locked(w->p, w->ds_id); /* the caller holds the admin lock */
		if (w->kept)
			w->rep->kept += w->nkept; /* its bytes went to kept_by[] */
		else if (!ds || (uint64_t)atomic_load(&ds->used) != w->ds_used)
			w->rep->space_errors++;
	}
	w->ds_used = 0;
	w->nkept = 0;
	if (w->nseen > 1)
		qsort(w->seen, w->nseen, sizeof(*w->seen), cmp_nonce);
	for (size_t i = 1; i < w->nseen; i++)
		if (cmp_nonce(&w->seen[i - 1], &w->seen[i]) == 0)
			w->rep->nonce_repeats++;
	w->nseen = 0;
}

/* Mark the sectors of @bp referenced; @return 0, or 1 if any was already */
static int reference(struct walk *w, const struct bp *bp)
{
	uint64_t *b = w->refs[bp->lun], n = bp->psize / STOR_SECTOR;
	int twice = 0;

	for (uint64_t s = bp->sector; s < bp->sector + n; s++) {
		twice |= (int)((b[s / 64] >> (s % 64)) & 1);
		b[s / 64] |= 1ull << (s % 64);
	}
	w->nref[bp->lun] += n;
	return twice;
}

/* An extent of the metadata log: referenced like a record's. */
static int log_extent(unsigned lun, uint64_t sector, uint32_t n, void *ctx)
{
	struct walk *w = ctx;
	struct bp bp = { .lun = (uint16_t)lun, .sector = sector, .psize = n * STOR_SECTOR };

	if (lun >= atomic_load(&w->p->nluns) ||
	    sector + n > lun_data_size(w->p->luns[lun].lun) / STOR_SECTOR || reference(w, &bp))
		w->rep->extent_errors++;
	return 0;
}

static int check_extent(struct walk *w, const struct bp *bp)
{
	struct lun_io io;

	/* written so that no sector number from the metadata can wrap past the bound */
	if (bp->lun >= atomic_load(&w->p->nluns) || !w->p->luns[bp->lun].lun ||
	    bp->sector >= lun_data_size(w->p->luns[bp->lun].lun) / STOR_SECTOR ||
	    bp->psize / STOR_SECTOR >
		    lun_data_size(w->p->luns[bp->lun].lun) / STOR_SECTOR - bp->sector) {
		w->rep->extent_errors++;
		return STOR_ECKSUM;
	}
	if (reference(w, bp))
		w->rep->extent_errors++;
	if (bp->psize > w->buflen) {
		free(w->buf);
		w->buf = NULL;
		if (posix_memalign((void **)&w->buf, STOR_SECTOR, bp->psize))
			return -ENOMEM;
		w->buflen = bp->psize;
	}
	/* a mirror's copy from a side that holds every write: its first LUN
	 * may be out of service, absent or detached */
	io = (struct lun_io){ w->p->luns[mirror_read_side(w->p, bp->lun)].lun,
			      bp->sector * STOR_SECTOR, w->buf, bp->psize, 0 };
	if (lun_read_batch(&io, 1) || io.result < 0)
		return STOR_ECKSUM;
	if (bp->flags & BP_F_ENCRYPTED)
		return hash64(w->buf, bp->psize) == bp->cksum ? 0 : STOR_ECKSUM;
	/* a clear record: its place-seeded checksum, unless it was written with checksum=off */
	if (memcmp(bp->mac, (uint8_t[16]){ 0 }, 16) && w->ds) {
		uint8_t mac[16];

		record_checksum(ds_sealer(w->ds, bp->birth), w->recno, bp->birth, w->buf, bp->csize,
				mac);
		return memcmp(mac, bp->mac, sizeof(mac)) ? STOR_ECKSUM : 0;
	}
	return 0;
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
		w->ds = ds_find_id_locked(w->p, id);
		w->kept = 0;
		if (!w->ds) {
			struct snap *s = snap_find_id_locked(w->p, id);

			w->ds = s ? s->ds : NULL; /* its records' checksums are seeded with it */
			w->kept = s != NULL;
			w->kept_i = 0;
			for (size_t i = 0; s && i < w->p->nds; i++)
				if (w->p->ds[i] == s->ds)
					w->kept_i = i;
		}
	}
	w->nkept++;
	w->recno = get_u64(&r);
	w->rep->records++;
	if (bp_decode(val, vlen, &bp) < 0) {
		w->rep->cksum_errors++;
		return 0;
	}
	w->ds_used += bp.psize;
	if (w->kept)
		w->kept_by[w->kept_i] += bp.psize;
	if (bp.flags & BP_F_ENCRYPTED) {
		struct seen_nonce *s = array_grow(w->seen, w->nseen, &w->capseen, sizeof(*s), 1024);

		w->rep->encrypted++;
		if (!s)
			return -ENOMEM;
		w->seen = s;
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

/*
 * Commit what is open and keep writers out (they hold p->hold shared while
 * they stage), so the pointers, the allocator and the datasets' counters
 * describe one state. Retries while writes slip in between.
 */
static int hold_quiet(struct stor_pool *p)
{
	for (;;) {
		int ret = txg_sync(p, 0), quiet;

		if (ret < 0)
			return ret;
		pthread_rwlock_wrlock(&p->hold);
		pthread_mutex_lock(&p->stage_lock);
		quiet = txg_stage_idle(p);
		pthread_mutex_unlock(&p->stage_lock);
		if (quiet)
			return 0;
		pthread_rwlock_unlock(&p->hold);
	}
}

int stor_pool_verify(struct stor_pool *p, struct stor_verify_report *rep)
{
	struct walk w = { .p = p, .rep = rep, .ds_id = UINT64_MAX };
	struct meta_txn *t = NULL;
	int ret;

	memset(rep, 0, sizeof(*rep));
	/* the admin lock first, as a destroy takes it before the hold */
	pthread_mutex_lock(&p->admin);
	ret = hold_quiet(p);
	if (ret < 0) {
		pthread_mutex_unlock(&p->admin);
		return ret;
	}
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		uint64_t sectors = lun_data_size(p->luns[i].lun) / STOR_SECTOR;
		if (!(w.refs[i] = calloc((sectors + 63) / 64 + 1, sizeof(uint64_t)))) {
			ret = -ENOMEM;
			goto out;
		}
	}
	if (!(w.kept_by = calloc(p->nds + 1, sizeof(*w.kept_by)))) {
		ret = -ENOMEM;
		goto out;
	}
	metalog_extents(p, log_extent, &w);
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		goto out;
	ret = meta_iter(t, META_BP, NULL, 0, 0, visit, &w);
	meta_rtxn_put(t);
	close_ds(&w);
	for (unsigned i = 0; ret == 0 && i < atomic_load(&p->nluns); i++) {
		uint64_t used, total;

		alloc_usage(p->alloc, i, &used, &total);
		if (used != w.nref[i])
			rep->space_errors++;
	}
	rep->bad_frees = alloc_bad_frees(p->alloc);
	for (size_t i = 0; ret == 0 && i < p->nds; i++)
		if ((uint64_t)atomic_load(&p->ds[i]->snap_used) != w.kept_by[i])
			rep->space_errors++;
out:
	pthread_rwlock_unlock(&p->hold);
	pthread_mutex_unlock(&p->admin);
	for (unsigned i = 0; i < STOR_LUNS_MAX; i++)
		free(w.refs[i]);
	free(w.seen);
	free(w.buf);
	free(w.kept_by);
	return ret;
}
