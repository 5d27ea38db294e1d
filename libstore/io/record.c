/* SPDX-License-Identifier: MIT */
/*
 * The record I/O pipeline, batch-first. Each stage is a function named here
 * and runs once over all records of a batch, so the crypto backend sees
 * bursts and the LUNs see one batch of extents:
 *   read  = serve_cached -> lookup (block pointers) -> read_extents ->
 *           verify_or_open (checksum, or decrypt and authenticate) ->
 *           heal (a mirror's other sides, for a copy that failed) ->
 *           decompress -> fill_cache; then the caller copies out
 *   write = plan_nonces -> read_old (partial records) -> merge_new ->
 *           compress -> seal (or checksum) -> allocate -> write_extents
 *           (every side of a mirror) -> stage (block pointers in the open txg)
 * A request either happens whole or fails whole: nothing is staged for a
 * request any of whose records failed, so a full pool never leaves a write
 * half done. The stages are static in this one file: they are the per-record
 * path, and each batch has one scratch allocation per side, no more. Reads
 * also run as flights on a thread's own ring (stor_reader, at the end): the
 * same stages, with read_extents split at the device so that each request
 * goes on as its own extents arrive.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cache.h"
#include "base/events.h"
#include "crypt/compress.h"
#include "crypt/crypt.h"
#include "crypt/hash.h"
#include "dev/alloc.h"
#include "dev/errlog.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "ds/clone.h"
#include "ds/dskeys.h"
#include "ds/props.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "io/record.h"
#include "io/stats.h"
#include "pool_impl.h"

enum rec_kind { REC_READ, REC_WRITE, REC_ZERO, REC_HOLE };

struct rec {
	struct stor_io *io;
	struct stor_ds *ds;
	uint64_t recno;
	uint32_t roff, rlen; /* the part of the record the request covers */
	uint8_t *ubuf;       /* the request's bytes for that part */
	enum rec_kind kind;
	struct bp bp;
	int found;
	uint8_t *buf; /* sector-aligned, bp.psize (read) or recordsize rounded up (write);
			 a read of a whole raw record may use ubuf itself */
	const uint8_t *src; /* read: the stored bytes, in buf or in place on a mapped LUN;
			       write: the plaintext a whole record is sealed from (merge_new) */
	uint32_t csize; /* write: compressed payload bytes, 0 if stored raw */
	int cached;     /* read: served by the data cache */
	uint64_t gen;   /* read: cache generation taken before the lookup */
	unsigned side;  /* read: the LUN the stored bytes came from (a mirror's side) */
	int retry;      /* read: the error of that copy, for another side to mend */
	uint64_t guid;  /* of the dataset that sealed it: a clone's origin's, or its own */
	int status;
};

#define AAD_LEN (8 + 8 + 8 + 1 + 4 + 4)

/* The record's place and how to read it back: a ciphertext moved, or its
 * pointer's compression or sizes changed, fails to open. */
static void make_aad(uint64_t guid, uint64_t recno, const struct bp *bp, uint8_t aad[AAD_LEN])
{
	uint8_t *w = aad;

	put_u64(&w, guid);
	put_u64(&w, recno);
	put_u64(&w, bp->birth);
	put_u8(&w, bp->comp);
	put_u32(&w, bp->lsize);
	put_u32(&w, bp->csize);
}

/* The crypto op of record @r: its payload @in (sealed or opened into
 * r->buf), nonce and tag in its pointer, AAD into @aad from its place. */
static void crypt_op_of(struct crypt_op *op, uint8_t aad[AAD_LEN], const struct crypt_key *key,
			struct rec *r, const uint8_t *in)
{
	make_aad(r->guid, r->recno, &r->bp, aad);
	*op = (struct crypt_op){ .key = key, .nonce = r->bp.nonce, .aad = aad,
				 .aad_len = AAD_LEN, .in = in, .out = r->buf,
				 .len = r->bp.csize, .tag = r->bp.mac };
}

static size_t round_sector(size_t n)
{
	return (n + STOR_SECTOR - 1) / STOR_SECTOR * STOR_SECTOR;
}

/* Sector-aligned (O_DIRECT), left uninitialised: callers fill or zero it. */
static uint8_t *aligned_alloc_raw(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, STOR_SECTOR, n ? n : STOR_SECTOR))
		return NULL;
	return p;
}

static void fail_io(struct rec *r, int err)
{
	/* no sound copy: pool status -v names the record (errlog.c) */
	if (err == STOR_ECKSUM || err == STOR_EAUTH)
		errlog_note(r->ds->pool, r->ds->id, r->recno, r->ds->name, "read");
	r->status = err;
	if (r->io->result == 0)
		r->io->result = err;
}

/*
 * A read of a whole record stored raw can land in the request's own bytes:
 * no buffer of ours and no copy after. O_DIRECT needs them sector-aligned.
 */
static int reads_into_ubuf(const struct rec *r, const struct lun *lun)
{
	return r->found && r->roff == 0 && r->rlen == r->ds->recsize &&
	       r->bp.comp == BP_COMP_OFF && r->bp.psize == r->rlen &&
	       (r->src || !lun_is_direct(lun) || (uintptr_t)r->ubuf % STOR_SECTOR == 0);
}

static void auth_failed(struct stor_pool *p, struct rec *r)
{
	if (r->found && r->bp.lun < atomic_load(&p->nluns))
		atomic_fetch_add(&p->luns[r->side].cksum_errors, 1);
	STATS_ADD(r->ds, auth_errors, 1);
}

/*
 * The copy of a record failed with @err: on a mirror another side may mend
 * it (heal), so only mark it; else the record fails.
 */
static void copy_failed(struct stor_pool *p, struct rec *r, int err)
{
	if (mirror_is_side(p, r->side))
		r->retry = err;
	else
		fail_io(r, err);
}

/*
 * Every record of an encrypted dataset, written or not, is read through its
 * authenticated group of block pointers (bpmac.c); a pointer that claims
 * clear there is forged. Nothing of a dataset whose key is not loaded is
 * served, not even its holes.
 */
static int check_pointer(struct stor_pool *p, struct rec *r)
{
	struct ds_keys *k;
	int ret;

	if (!r->ds->suite)
		return r->found && (r->bp.flags & BP_F_ENCRYPTED) ? STOR_ECORRUPT : 0;
	k = atomic_load(&ds_head(r->ds)->keys);
	if (!k)
		return STOR_ENOKEY;
	/* a snapshot's pointer had its group checked where snap_resolve found it */
	ret = r->ds->snap ? 0 : bpmac_check_group(p->meta, r->ds->id, k->mac, &k->seen, r->recno);
	/* clear beside sealed only while it is encrypted in place (rekey.c) */
	if (ret == 0 && r->found && !(r->bp.flags & BP_F_ENCRYPTED) &&
	    !atomic_load(&ds_head(r->ds)->encrypting))
		ret = STOR_EAUTH;
	if (ret == STOR_EAUTH)
		auth_failed(p, r);
	return ret;
}

/*
 * The scratch of one read batch: per-record arrays in one allocation, the
 * 8-byte aligned ones first so each starts aligned. @m records were looked
 * up (idx[k] is the k-th one's place in the batch); @nops are to be opened.
 */
struct read_batch {
	struct cache *dc; /* the data cache, NULL while it is off */
	size_t m, nops;
	uint64_t *ids, *recnos;
	size_t *idx;
	struct bp *bps;
	struct lun_io *ios;
	struct crypt_op *ops;
	struct crypt_key **owned;
	int *found;
	uint8_t (*aads)[AAD_LEN];
};

static void *read_batch_init(struct read_batch *b, size_t n)
{
	char *scratch = malloc(n * (2 * sizeof(*b->ids) + sizeof(*b->idx) + sizeof(*b->bps) +
				    sizeof(*b->ios) + sizeof(*b->ops) + sizeof(*b->owned) +
				    sizeof(*b->found) + AAD_LEN));

	*b = (struct read_batch){ .dc = cache_data_on() };
	if (!scratch)
		return NULL;
	b->ids = (uint64_t *)scratch;
	b->recnos = b->ids + n;
	b->idx = (size_t *)(b->recnos + n);
	b->bps = (struct bp *)(b->idx + n);
	b->ios = (struct lun_io *)(b->bps + n);
	b->ops = (struct crypt_op *)(b->ios + n);
	b->owned = (struct crypt_key **)(b->ops + n);
	b->found = (int *)(b->owned + n);
	b->aads = (uint8_t(*)[AAD_LEN])(b->found + n);
	return scratch;
}

/*
 * Serve what the data cache holds; the others go to the lookup list. A
 * dataset whose key is gone has no plaintext to serve.
 */
static void serve_cached(struct read_batch *b, struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];

		if (r->status)
			continue;
		if (b->dc && atomic_load(&r->ds->cache_all) &&
		    (!r->ds->suite || atomic_load(&r->ds->keys))) {
			r->gen = cache_gen(b->dc, r->ds->guid, r->recno);
			r->buf = aligned_alloc_raw(round_sector(r->ds->recsize));
			if (r->buf &&
			    cache_get(b->dc, r->ds->guid, r->recno, r->buf, r->ds->recsize) == 0) {
				r->cached = 1;
				STATS_ADD(r->ds, cache_hits, 1);
				continue;
			}
			free(r->buf);
			r->buf = NULL;
			STATS_ADD(r->ds, cache_misses, 1);
		}
		b->idx[b->m] = i;
		b->ids[b->m] = r->ds->id;
		b->recnos[b->m] = r->recno;
		b->m++;
	}
}

/* Does a pointer describe a record of this dataset we can read back? */
static int pointer_sane(const struct stor_pool *p, const struct rec *r)
{
	return r->bp.lsize == r->ds->recsize && r->bp.lun < atomic_load(&p->nluns) &&
	       r->bp.comp <= BP_COMP_ZSTD &&
	       (r->bp.comp != BP_COMP_OFF || r->bp.csize == r->bp.lsize);
}

/*
 * Look up the block pointers of the listed records, staged ones first, and
 * check each (MAC group of an encrypted dataset, sizes, LUN).
 * @return 0, or the lookup's error (every listed record failed with it)
 */
static int lookup(struct stor_pool *p, struct read_batch *b, struct rec *recs)
{
	int ret = b->m ? txg_lookup(p, b->m, b->ids, b->recnos, b->bps, b->found) : 0;

	if (ret < 0) {
		for (size_t k = 0; k < b->m; k++)
			fail_io(&recs[b->idx[k]], ret);
		return ret;
	}
	for (size_t k = 0; k < b->m; k++) {
		struct rec *r = &recs[b->idx[k]];

		r->found = b->found[k];
		r->bp = b->bps[k];
		r->guid = r->ds->guid;
		ret = r->ds->snap ? snap_resolve(p, r->ds, r->recno, &r->bp, &r->found, &r->guid)
		      : !r->found && r->ds->origin
			  ? clone_resolve(p, r->ds->origin, r->recno, &r->bp, &r->found, &r->guid)
			  : 0;
		if (!r->ds->snap && r->found && r->guid == r->ds->guid)
			r->guid = ds_sealer(r->ds, r->bp.birth); /* a promoted clone's */
		if (ret == 0)
			ret = check_pointer(p, r);
		if (ret == 0 && r->found && !pointer_sane(p, r))
			ret = STOR_ECORRUPT;
		if (ret < 0)
			fail_io(r, ret);
	}
	return 0;
}

/* Does @bp reach past the end of a LUN cut short (pool_lun.cut)? */
static int past_cut(const struct stor_pool *p, const struct bp *bp)
{
	const struct pool_lun *pl = &p->luns[bp->lun];

	return pl->cut && bp->sector * STOR_SECTOR + bp->psize > lun_data_size(pl->lun);
}

/*
 * Where record @r's stored bytes come from: in place on a mapped LUN, else
 * read into a buffer of ours or the request's own (@io is filled, return
 * 1); a record never written reads as zeros.
 * @return 1 when @io is to be read, else 0
 */
static int extent_of(struct stor_pool *p, struct rec *r, struct lun_io *io)
{
	struct lun *lun;
	size_t sz;

	if (r->status)
		return 0;
	sz = r->found ? r->bp.psize : 0;
	if (sz < r->ds->recsize)
		sz = round_sector(r->ds->recsize);
	r->side = r->found ? mirror_read_side(p, r->bp.lun) : 0;
	lun = r->found ? p->luns[r->side].lun : NULL;
	r->src = lun ? lun_mapped(lun, r->bp.sector * STOR_SECTOR, r->bp.psize) : NULL;
	if (reads_into_ubuf(r, lun))
		r->buf = r->ubuf;
	else if (!(r->buf = aligned_alloc_raw(sz))) {
		fail_io(r, -ENOMEM);
		return 0;
	}
	if (!r->found) {
		memset(r->buf, 0, sz); /* never written: zeros */
		return 0;
	}
	if (past_cut(p, &r->bp)) {
		/* its LUN's file was truncated through it: lost, and no I/O error of the LUN */
		errlog_note(p, r->ds->id, r->recno, r->ds->name, "read");
		fail_io(r, -EIO);
		return 0;
	}
	if (r->src)
		return 0;
	*io = (struct lun_io){ lun, r->bp.sector * STOR_SECTOR, r->buf, r->bp.psize, 0, 0, 0 };
	return 1;
}

/* The extent of @r has been read into r->buf, or failed. */
static void extent_done(struct stor_pool *p, struct rec *r, const struct lun_io *io)
{
	if (io->result < 0) {
		lunset_failed(p, io->lun);
		copy_failed(p, r, -EIO);
	} else {
		r->src = r->buf;
	}
}

/* Give every looked-up record its stored bytes (r->src), all extents in one batch. */
static void read_extents(struct stor_pool *p, struct read_batch *b, struct rec *recs)
{
	size_t nio = 0;

	for (size_t k = 0; k < b->m; k++)
		nio += extent_of(p, &recs[b->idx[k]], &b->ios[nio]);
	if (nio)
		lun_read_batch(b->ios, nio);
	nio = 0;
	for (size_t k = 0; k < b->m; k++) {
		struct rec *r = &recs[b->idx[k]];

		if (!r->status && r->found && !r->src)
			extent_done(p, r, &b->ios[nio++]);
	}
}

/* A clear record: its place-seeded checksum (if it has one), then its bytes
 * into our buffer if they were read in place. Whether it has one is the
 * pointer's to say, as in ZFS, not the reader's checksum property: a record
 * written under checksum=off has none, also when the property is on again
 * or a clone of it reads it. (A clear record's checksum guards against
 * damage, not an attacker, who can compute it; an encrypted dataset refuses
 * a clear pointer in check_pointer.) */
static void verify(struct rec *r)
{
	struct stor_pool *p = r->ds->pool;

	if (memcmp(r->bp.mac, (uint8_t[16]){ 0 }, 16)) {
		uint8_t mac[16];

		record_checksum(r->guid, r->recno, r->bp.birth, r->src, r->bp.csize, mac);
		if (memcmp(mac, r->bp.mac, sizeof(mac)) != 0) {
			atomic_fetch_add(&p->luns[r->side].cksum_errors, 1);
			if (mirror_is_side(p, r->side)) {
				r->retry = STOR_ECKSUM;
				return;
			}
			STATS_ADD(r->ds, cksum_errors, 1);
			fail_io(r, STOR_ECKSUM);
			return;
		}
	}
	if (r->src != r->buf)
		memcpy(r->buf, r->src, r->bp.csize);
}

/* An encrypted record joins the batch to open: key of its salt, AAD, tag. */
static void queue_open(struct read_batch *b, struct rec *r)
{
	struct ds_keys *k = atomic_load(&ds_head(r->ds)->keys);
	unsigned gen = dskeys_gen_of(&r->bp);
	const struct crypt_key *key =
		k ? dskeys_data_key(k, gen, r->guid, r->bp.salt, &b->owned[b->nops])
		  : NULL;

	if (!key) {
		/* a generation whose master key is gone opens nothing (rekey.c) */
		fail_io(r, !k ? STOR_ENOKEY : dskeys_has_gen(k, gen) ? -ENOMEM : STOR_EAUTH);
		return;
	}
	crypt_op_of(&b->ops[b->nops], b->aads[b->nops], key, r, r->src);
	b->nops++;
}

/* Decrypt and authenticate the queued records in one burst. */
static void open_sealed(struct read_batch *b, struct rec *recs, size_t n)
{
	uint64_t t0, share;
	size_t j = 0;

	if (!b->nops)
		return;
	t0 = stats_now_ns();
	crypt_open(b->ops, b->nops);
	share = (stats_now_ns() - t0) / b->nops;
	for (size_t i = 0; i < b->nops; i++)
		crypt_key_free(b->owned[i]);
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		struct stor_pool *p = r->ds->pool;

		if (r->status || r->retry || !r->found || !(r->bp.flags & BP_F_ENCRYPTED))
			continue;
		STATS_ADD(r->ds, opened, 1);
		STATS_ADD(r->ds, open_ns, share);
		if (b->ops[j].status == STOR_EAUTH && mirror_is_side(p, r->side)) {
			atomic_fetch_add(&p->luns[r->side].cksum_errors, 1);
			r->retry = STOR_EAUTH;
		} else if (b->ops[j].status) {
			if (b->ops[j].status == STOR_EAUTH)
				auth_failed(p, r);
			fail_io(r, b->ops[j].status);
		}
		j++;
	}
}

/* Verify each clear record, open the encrypted ones in one batch. */
static void verify_or_open(struct read_batch *b, struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];

		if (r->status || r->retry || !r->found)
			continue;
		if (r->bp.flags & BP_F_ENCRYPTED)
			queue_open(b, r);
		else
			verify(r);
	}
	open_sealed(b, recs, n);
}

/*
 * A copy that failed (read error, checksum, tag) on a mirror: a sound copy
 * from another side (mirror_recover, which rewrites the bad ones) is checked
 * or opened again, one record at a time; this is the rare path. Without a
 * sound copy the record fails as it would have on a LUN of its own.
 */
static void heal(struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		struct stor_pool *p = r->ds->pool;
		struct mirror_ext e = { &r->bp, r->guid, r->recno };
		int err = r->retry;

		if (!err || r->status)
			continue;
		r->retry = 0;
		if (mirror_recover(p, &e, r->side, err, r->buf) < 0) {
			if (err == STOR_EAUTH)
				STATS_ADD(r->ds, auth_errors, 1);
			else if (err == STOR_ECKSUM)
				STATS_ADD(r->ds, cksum_errors, 1);
			fail_io(r, err);
			continue;
		}
		r->src = r->buf;
		if (r->bp.flags & BP_F_ENCRYPTED) {
			struct read_batch one = { .ops = &(struct crypt_op){ 0 },
						  .owned = &(struct crypt_key *){ NULL },
						  .aads = &(uint8_t[AAD_LEN]){ 0 } };

			queue_open(&one, r);
			if (!one.nops)
				continue;
			crypt_open(one.ops, 1);
			crypt_key_free(one.owned[0]);
			STATS_ADD(r->ds, opened, 1);
			if (one.ops[0].status) {
				if (one.ops[0].status == STOR_EAUTH)
					STATS_ADD(r->ds, auth_errors, 1);
				fail_io(r, one.ops[0].status);
			}
		} else {
			verify(r);
			if (r->retry) { /* sound by the checksum mirror_recover read: cannot be */
				r->retry = 0;
				STATS_ADD(r->ds, cksum_errors, 1);
				fail_io(r, STOR_ECKSUM);
			}
		}
	}
}

/* Compressed records expand into a buffer of their logical size. */
static void decompress(struct rec *recs, size_t n)
{
	int plain_seen = 0;

	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		uint8_t *plain;
		int err;

		if (r->status || !r->found || r->bp.comp != BP_COMP_ZSTD)
			continue;
		plain = aligned_alloc_raw(round_sector(r->ds->recsize));
		if (!plain) {
			fail_io(r, -ENOMEM);
			continue;
		}
		err = decompress_record(r->buf, r->bp.csize, plain, r->ds->recsize);
		plain_seen |= r->ds->suite != CRYPT_OFF;
		explicit_bzero(r->buf, r->bp.psize);
		free(r->buf);
		r->buf = plain;
		if (err < 0) {
			explicit_bzero(plain, r->ds->recsize);
			fail_io(r, err);
		}
	}
	if (plain_seen)
		compress_wipe();
}

/* What was read from the LUNs goes into the cache, under its generation. */
static void fill_cache(struct cache *dc, struct rec *recs, size_t n)
{
	for (size_t i = 0; dc && i < n; i++) {
		struct rec *r = &recs[i];

		if (!r->status && r->found && atomic_load(&r->ds->cache_all))
			cache_put(dc, r->ds->guid, r->recno, r->buf, r->ds->recsize, r->gen);
	}
}

/* The stages after the stored bytes are in; the records may be of several pools. */
static void read_finish(struct read_batch *b, struct rec *recs, size_t n)
{
	verify_or_open(b, recs, n);
	heal(recs, n);
	decompress(recs, n);
	fill_cache(b->dc, recs, n);
}

/*
 * Read the records of @recs into their buffers (allocated here, recordsize
 * bytes, zeros for records never written). The caller is in a reader section.
 */
static void read_recs(struct stor_pool *p, struct rec *recs, size_t n)
{
	struct read_batch b;
	void *scratch = read_batch_init(&b, n);

	if (!scratch) {
		for (size_t i = 0; i < n; i++)
			fail_io(&recs[i], -ENOMEM);
		return;
	}
	serve_cached(&b, recs, n);
	if (lookup(p, &b, recs) == 0) {
		read_extents(p, &b, recs);
		read_finish(&b, recs, n);
	}
	free(scratch);
}

static unsigned stripe_of(const struct rec *r)
{
	return pool_stripe(r->ds->id, r->recno);
}

static void lock_held(struct stor_pool *p, const uint8_t *held)
{
	for (unsigned s = 0; s < STRIPES; s++) /* in index order: no deadlock */
		if (held[s])
			pthread_mutex_lock(&p->stripes[s]);
}

static void lock_stripes(struct stor_pool *p, const struct rec *recs, size_t n, uint8_t *held)
{
	memset(held, 0, STRIPES);
	for (size_t i = 0; i < n; i++)
		held[stripe_of(&recs[i])] = 1;
	lock_held(p, held);
}

static void unlock_stripes(struct stor_pool *p, const uint8_t *held)
{
	for (unsigned s = STRIPES; s-- > 0;)
		if (held[s])
			pthread_mutex_unlock(&p->stripes[s]);
}

/* The key state and nonce of each record of an encrypted dataset. */
struct nonce_plan {
	struct ds_keys *k;
	uint64_t salt, ctr;
	uint32_t prefix;
	int planned;
};

/*
 * Every change of an encrypted dataset needs its key, discards included
 * (the commit updates the dataset's MACs). Every record to be sealed gets
 * a nonce of its own: a dataset's records in the batch draw one run from
 * its nonce block and take consecutive numbers of it, whatever holes or
 * failed records sit between them. Runs in the reader section.
 */
static void plan_nonces(struct rec *recs, size_t n, struct nonce_plan *plan)
{
	for (size_t i = 0; i < n; i++) {
		if (recs[i].status || !recs[i].ds->suite)
			continue;
		plan[i].k = atomic_load(&recs[i].ds->keys);
		if (!plan[i].k)
			fail_io(&recs[i], STOR_ENOKEY);
	}
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		uint64_t salt, next;
		uint32_t prefix;
		size_t cnt = 0;

		if (r->status || !plan[i].k || r->kind == REC_HOLE || plan[i].planned)
			continue;
		for (size_t j = i; j < n; j++)
			cnt += !recs[j].status && recs[j].kind != REC_HOLE && plan[j].k == plan[i].k;
		dskeys_nonces(plan[i].k, cnt, &salt, &prefix, &next);
		for (size_t j = i; j < n; j++) {
			if (recs[j].status || recs[j].kind == REC_HOLE || plan[j].k != plan[i].k)
				continue;
			plan[j].salt = salt;
			plan[j].prefix = prefix;
			plan[j].ctr = next++;
			plan[j].planned = 1;
		}
	}
}

/*
 * The scratch of one write batch, per record: its nonce plan, seal op, AAD,
 * extents (one per side of a mirror) and owned key, and a list of records
 * one stage works on.
 */
struct write_batch {
	struct nonce_plan *plan;
	struct crypt_op *ops;
	uint8_t (*aads)[AAD_LEN];
	struct lun_io *ios; /* STOR_MIRROR_MAX per record */
	struct rec **list;  /* read_old: records needing old bytes; write_extents: the record
			       of each extent written */
	unsigned *side;     /* write_extents: the LUN of each extent written */
	struct crypt_key **owned;
	size_t nops;
};

/* One zeroed allocation for all arrays, the 8-byte aligned ones first. */
static void *write_batch_init(struct write_batch *b, size_t n)
{
	const size_t m = STOR_MIRROR_MAX;
	char *scratch = calloc(n, sizeof(*b->plan) + sizeof(*b->ops) + m * sizeof(*b->ios) +
					 m * sizeof(*b->list) + sizeof(*b->owned) +
					 m * sizeof(*b->side) + AAD_LEN);

	*b = (struct write_batch){ 0 };
	if (!scratch)
		return NULL;
	b->plan = (struct nonce_plan *)scratch;
	b->ops = (struct crypt_op *)(b->plan + n);
	b->ios = (struct lun_io *)(b->ops + n);
	b->list = (struct rec **)(b->ios + m * n);
	b->owned = (struct crypt_key **)(b->list + m * n);
	b->side = (unsigned *)(b->owned + n);
	b->aads = (uint8_t(*)[AAD_LEN])(b->side + m * n);
	return scratch;
}

/* Old contents of the records a request covers only in part (or zeroes). */
static void read_old(struct stor_pool *p, struct write_batch *b, struct rec *recs, size_t n)
{
	size_t nrmw = 0;
	struct rec *tmp;

	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		if (r->status || r->kind == REC_HOLE)
			continue;
		/* a whole record of zeros (a clone's discard) needs nothing old */
		if (r->roff || r->rlen != r->ds->recsize)
			b->list[nrmw++] = r;
	}
	if (!nrmw)
		return;
	tmp = calloc(nrmw, sizeof(*tmp));
	if (!tmp) {
		for (size_t i = 0; i < nrmw; i++)
			fail_io(b->list[i], -ENOMEM);
		return;
	}
	for (size_t i = 0; i < nrmw; i++) {
		tmp[i] = *b->list[i];
		tmp[i].kind = REC_READ;
		tmp[i].status = 0;
	}
	read_recs(p, tmp, nrmw);
	for (size_t i = 0; i < nrmw; i++) {
		if (tmp[i].status) {
			if (tmp[i].buf)
				explicit_bzero(tmp[i].buf, round_sector(tmp[i].ds->recsize));
			free(tmp[i].buf);
			fail_io(b->list[i], tmp[i].status);
			continue;
		}
		b->list[i]->buf = tmp[i].buf;
	}
	free(tmp);
}

/* The new plaintext of every record: the request's bytes over the old. */
static void merge_new(struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		if (r->status || r->kind == REC_HOLE)
			continue;
		if (!r->buf) {
			size_t sz = round_sector(r->ds->recsize);

			r->buf = aligned_alloc_raw(sz);
			if (!r->buf) {
				fail_io(r, -ENOMEM);
				continue;
			}
			/* a whole-record write fills [0, recsize); the sector's tail is padding */
			memset(r->buf + r->ds->recsize, 0, sz - r->ds->recsize);
		}
		if (r->kind == REC_ZERO)
			memset(r->buf + r->roff, 0, r->rlen);
		else if (r->ds->suite && r->kind == REC_WRITE && !r->roff &&
			 r->rlen == r->ds->recsize && atomic_load(&r->ds->comp_level) <= 0)
			r->src = r->ubuf; /* sealed from there into buf: no copy */
		else
			memcpy(r->buf + r->roff, r->ubuf, r->rlen);
	}
}

/* Compress before sealing; a record that saves no sector stays raw. */
static void compress(struct rec *recs, size_t n)
{
	int plain_seen = 0;

	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		int level = atomic_load(&r->ds->comp_level);
		size_t cap = round_sector(r->ds->recsize);
		uint8_t *z;

		if (r->status || r->kind == REC_HOLE || level <= 0 || r->src)
			continue;
		z = aligned_alloc_raw(cap);
		if (!z)
			continue; /* stored raw */
		r->csize = (uint32_t)compress_record(level, r->buf, r->ds->recsize, z, cap, STOR_SECTOR);
		plain_seen |= r->ds->suite != CRYPT_OFF;
		if (!r->csize) {
			explicit_bzero(z, cap);
			free(z);
			continue;
		}
		memset(z + r->csize, 0, round_sector(r->csize) - r->csize);
		explicit_bzero(r->buf, cap);
		free(r->buf);
		r->buf = z;
	}
	if (plain_seen)
		compress_wipe();
}

/* A failed record fails its whole request: drop its siblings now. */
static void fail_siblings(struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (recs[i].io->result && !recs[i].status)
			recs[i].status = recs[i].io->result;
}

/*
 * The block pointer of each record born in txg @birth; a clear one gets its
 * checksum, an encrypted one joins the batch to seal with its planned nonce.
 */
static void queue_seal(struct write_batch *b, struct rec *r, size_t i, uint64_t birth)
{
	const struct crypt_key *key;
	unsigned gen;

	r->bp = (struct bp){ .lsize = r->ds->recsize, .csize = r->ds->recsize,
			     .psize = (uint32_t)round_sector(r->ds->recsize), .birth = birth };
	if (r->csize) {
		r->bp.comp = BP_COMP_ZSTD;
		r->bp.csize = r->csize;
		r->bp.psize = (uint32_t)round_sector(r->csize);
	}
	if (!r->ds->suite) {
		if (atomic_load(&r->ds->checksum_on))
			record_checksum(r->ds->guid, r->recno, birth, r->buf, r->bp.csize, r->bp.mac);
		return;
	}
	/* the current generation: the key state cannot change it while the
	 * caller holds the open txg (rekey.c switches under the write hold) */
	gen = b->plan[i].k->gen;
	key = dskeys_data_key(b->plan[i].k, gen, r->ds->guid, b->plan[i].salt, &b->owned[b->nops]);
	if (!key) {
		fail_io(r, -ENOMEM);
		return;
	}
	r->bp.flags |= BP_F_ENCRYPTED | (gen ? BP_F_KEYGEN : 0);
	r->bp.salt = b->plan[i].salt;
	crypt_nonce(b->plan[i].prefix, b->plan[i].ctr, r->bp.nonce);
	crypt_op_of(&b->ops[b->nops], b->aads[b->nops], key, r, r->src ? r->src : r->buf);
	b->nops++;
}

/*
 * Seal (encrypt and authenticate, in place) every queued record in one
 * burst, then give each encrypted record the keyless checksum of its stored
 * bytes, for scrub; a clear record's own checksum needs no key already.
 */
static void seal(struct write_batch *b, struct rec *recs, size_t n, uint64_t birth)
{
	for (size_t i = 0; i < n; i++)
		if (!recs[i].status && recs[i].kind != REC_HOLE)
			queue_seal(b, &recs[i], i, birth);
	if (b->nops) {
		uint64_t t0 = stats_now_ns(), share;
		size_t j = 0;
		int failed = crypt_seal(b->ops, b->nops);

		for (size_t i = 0; i < b->nops; i++)
			crypt_key_free(b->owned[i]);
		share = (stats_now_ns() - t0) / b->nops;
		for (size_t i = 0; i < n; i++) {
			struct rec *r = &recs[i];
			if (r->status || !(r->bp.flags & BP_F_ENCRYPTED))
				continue;
			STATS_ADD(r->ds, sealed, 1);
			STATS_ADD(r->ds, seal_ns, share);
			if (failed && b->ops[j].status)
				fail_io(r, b->ops[j].status);
			j++;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];

		if (!r->status && !r->io->result && r->kind != REC_HOLE && r->ds->suite)
			r->bp.cksum = hash64(r->buf, r->bp.psize);
	}
}

/*
 * May @r keep the extent it was just given (space.c's rules)? New data may
 * not use the slop or others' reservations; an overwrite no larger than
 * the record's old extent may use the slop. The old pointer is looked up
 * only when that is the question: a pool far from full never asks.
 */
static int admit(struct stor_pool *p, struct rec *r)
{
	struct bp old;
	int found = 0;

	if (space_admit(p, r->ds, r->bp.psize, 0) == 0)
		return 0;
	if (txg_lookup(p, 1, &r->ds->id, &r->recno, &old, &found) < 0 || !found)
		return STOR_ENOSPC;
	/* an extent a snapshot keeps is not freed by the overwrite (the open
	 * txg is held, so the snapshot stays) */
	if (r->ds->keep && old.birth <= r->ds->keep->txg)
		return STOR_ENOSPC;
	return space_admit(p, r->ds, r->bp.psize, old.psize);
}

/* Give back the extent of a record that will not be staged. */
static void unallocate(struct stor_pool *p, struct rec *r)
{
	atomic_fetch_sub(&r->ds->used, r->bp.psize);
	alloc_put(p->alloc, r->bp.lun, r->bp.sector, r->bp.psize / STOR_SECTOR);
}

/* An extent for @r, charged to its dataset. @return 0 or -errno */
static int take_extent(struct stor_pool *p, struct rec *r)
{
	unsigned lun;
	int ret = alloc_get(p->alloc, r->bp.psize / STOR_SECTOR, &lun, &r->bp.sector);

	if (ret < 0)
		return ret;
	r->bp.lun = (uint16_t)lun;
	atomic_fetch_add(&r->ds->used, r->bp.psize);
	r->found = 1; /* owns an extent */
	return 0;
}

static int takes_extent(const struct rec *r)
{
	return !r->status && !r->io->result && r->kind != REC_HOLE;
}

/*
 * An extent for every record of a request still whole, charged to its
 * dataset. All are taken first and checked at once, as new data: the
 * strictest check (the most taken, the slop kept), so if it admits the
 * batch it admits every record of it. On a pool far from its promises the
 * check is one compare; near them (or with many frees still waiting for
 * their commit) it is U over every dataset (space.c), which per record was
 * a third of a write's CPU with 66 datasets. When it refuses, or the
 * allocator runs short, the extents go back and each record is taken and
 * checked on its own, charged before its check so that what it draws from
 * its own reservation is seen by the next record's, and a record refused
 * leaves its room to the next.
 */
static void allocate(struct stor_pool *p, struct rec *recs, size_t n)
{
	uint64_t bytes = 0;
	int short_of_room = 0;

	for (size_t i = 0; i < n && !short_of_room; i++)
		if (takes_extent(&recs[i])) {
			short_of_room = take_extent(p, &recs[i]) < 0;
			bytes += recs[i].bp.psize;
		}
	if (!short_of_room && (!bytes || space_admit(p, NULL, bytes, 0) == 0))
		return;
	for (size_t i = 0; i < n; i++)
		if (recs[i].found) {
			unallocate(p, &recs[i]);
			recs[i].found = 0;
		}
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		int ret;

		if (!takes_extent(r))
			continue;
		ret = take_extent(p, r);
		if (ret == 0 && (ret = admit(p, r)) < 0) {
			unallocate(p, r);
			r->found = 0;
		}
		if (ret < 0)
			fail_io(r, ret);
	}
}

/*
 * Only extents of requests still whole are written, in one batch, to every
 * side in service of a mirror. A record fails when no side took it, which
 * fails its request, whose later records then count as failed too: the
 * results are matched to the records written, not to those still whole. A
 * side that missed a write another side took goes out of service.
 */
static void write_extents(struct stor_pool *p, struct write_batch *b, struct rec *recs, size_t n)
{
	unsigned sides[STOR_MIRROR_MAX];
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		unsigned ns;

		if (r->status || r->kind == REC_HOLE || !r->found || r->io->result)
			continue;
		ns = mirror_sides(p, r->bp.lun, sides);
		if (!ns)
			fail_io(r, -EIO);
		for (unsigned s = 0; s < ns; s++) {
			b->list[k] = r;
			b->side[k] = sides[s];
			b->ios[k++] = (struct lun_io){ p->luns[sides[s]].lun,
						       r->bp.sector * STOR_SECTOR, r->buf,
						       r->bp.psize, 0, 0, 0 };
		}
	}
	if (!k || !lun_write_batch(b->ios, k))
		return;
	for (size_t i = 0, j; i < k; i = j) {
		int ok = 0, res = 0;

		for (j = i; j < k && b->list[j] == b->list[i]; j++) {
			if (b->ios[j].result < 0)
				res = b->ios[j].result;
			else if (mirror_side_counts(p, b->side[j]))
				ok++;
		}
		for (size_t x = i; x < j; x++)
			if (b->ios[x].result < 0 && !(ok && mirror_side_failed(p, b->side[x], 1)))
				lunset_failed(p, b->ios[x].lun);
		/* a full file system under the LUN is out of space, not a bad disk */
		if (!ok)
			fail_io(b->list[i], res == -ENOSPC || res == -EDQUOT ? STOR_ENOSPC : -EIO);
	}
}

/*
 * Stage the block pointers of whole requests in the open txg, and return
 * the extents of the others. Room for every record first: a request is
 * staged whole or not at all.
 */
static void stage(struct stor_pool *p, struct write_batch *b, struct rec *recs, size_t n)
{
	struct cache *dc = cache_data();
	size_t nstage = 0;

	for (size_t i = 0; i < n; i++)
		nstage += !recs[i].io->result;
	if (nstage && txg_reserve(p, nstage) < 0) {
		for (size_t i = 0; i < n; i++)
			fail_io(&recs[i], -ENOMEM);
		nstage = 0;
	}
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		struct bp old, hole = { .flags = BP_F_HOLE };
		int had_old, ret;

		if (r->io->result) {
			if (r->found && r->kind != REC_HOLE)
				unallocate(p, r);
			continue;
		}
		ret = txg_stage(p, r->ds, r->recno, r->kind == REC_HOLE ? &hole : &r->bp,
				b->plan[i].k ? b->plan[i].k->mac : NULL, &old, &had_old);
		nstage--;
		if (ret < 0) {
			/* the metadata could not be read: this record keeps its old data */
			if (r->kind != REC_HOLE)
				unallocate(p, r);
			fail_io(r, ret);
			continue;
		}
		/* after the stage: a reader that saw the old pointer cannot put it back */
		cache_drop(dc, r->ds->guid, r->recno);
		if (r->kind != REC_HOLE)
			atomic_fetch_add(&r->ds->logical_used, r->bp.lsize); /* used: at allocation */
		if (had_old) {
			atomic_fetch_sub(&r->ds->used, old.psize);
			atomic_fetch_sub(&r->ds->logical_used, old.lsize);
		} else if (r->ds->origin) {
			/* a clone's first write of a record: it no longer reads the
			 * origin's (referenced, clone.c) */
			atomic_fetch_sub(&r->ds->shared_ref,
					 (int64_t)clone_shared_psize(p, r->ds, r->recno));
		}
	}
	if (nstage)
		txg_unreserve(p, nstage);
}

/* The write pipeline of @recs, whose stripes the caller holds, in a reader section. */
static void write_held(struct stor_pool *p, struct write_batch *b, struct rec *recs, size_t n)
{
	/*
	 * Held from the plan on: an encryption in place switches a dataset to
	 * sealing under the write hold (rekey.c's encrypt_hook), so a record
	 * planned clear is not then sealed without a key, nor one planned
	 * under a key written clear.
	 */
	uint64_t birth = txg_hold(p);

	plan_nonces(recs, n, b->plan);
	read_old(p, b, recs, n);
	merge_new(recs, n);
	compress(recs, n);
	fail_siblings(recs, n);
	seal(b, recs, n, birth);
	allocate(p, recs, n);
	write_extents(p, b, recs, n);
	stage(p, b, recs, n);
	txg_rele(p);
}

/*
 * Write the records of @recs: each record's stripe is held from its read
 * of old bytes to its stage, so two batches never interleave on a record.
 */
static void write_recs(struct stor_pool *p, struct rec *recs, size_t n)
{
	struct write_batch b;
	uint8_t held[STRIPES];
	unsigned slot;
	void *scratch;
	int ret;

	scratch = write_batch_init(&b, n);
	ret = !scratch ? -ENOMEM : atomic_load(&p->suspended) ? STOR_ESUSPENDED : 0;
	if (ret < 0) {
		for (size_t i = 0; i < n; i++)
			fail_io(&recs[i], ret);
		free(scratch);
		return;
	}
	lock_stripes(p, recs, n, held);
	slot = txg_read_enter(p);
	write_held(p, &b, recs, n);
	txg_read_exit(p, slot);
	unlock_stripes(p, held);
	free(scratch);
}

/*
 * Records received as they were stored elsewhere (recv.c: a raw stream):
 * each @bps[i] opens @bufs[i] (psize bytes, sector-aligned) as it is, so
 * the pipeline starts at allocate; nothing is compressed or sealed, and no
 * key is needed. All or nothing, like one request.
 */
int record_write_stored(struct stor_ds *ds, size_t n, const uint64_t *recnos,
			const struct bp *bps, uint8_t *const *bufs)
{
	struct stor_pool *p = ds->pool;
	struct stor_io io = { .ds = ds, .op = STOR_IO_WRITE };
	struct write_batch b;
	struct rec *recs = calloc(n ? n : 1, sizeof(*recs));
	void *scratch = write_batch_init(&b, n ? n : 1);
	uint8_t held[STRIPES];
	unsigned slot;
	int ret;

	if (!recs || !scratch) {
		free(recs);
		free(scratch);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		recs[i] = (struct rec){ .io = &io, .ds = ds, .recno = recnos[i],
					.kind = bufs[i] ? REC_WRITE : REC_HOLE,
					.bp = bps[i], .buf = bufs[i], .rlen = ds->recsize };
	lock_stripes(p, recs, n, held);
	slot = txg_read_enter(p);
	txg_hold(p);
	allocate(p, recs, n);
	write_extents(p, &b, recs, n);
	stage(p, &b, recs, n);
	txg_rele(p);
	txg_read_exit(p, slot);
	unlock_stripes(p, held);
	ret = io.result;
	free(scratch);
	free(recs);
	return ret;
}

/*
 * Seal each opened record of @recs again where it is: its pointer as it
 * was (birth, sizes, compression, so the same AAD) but for a new salt,
 * nonce and tag under the current generation, the stored payload as it
 * was (so the same psize: nothing to charge). The caller holds the open txg.
 */
static void reseal_in_place(struct write_batch *b, struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		const struct crypt_key *key;

		if (r->status)
			continue;
		/* the tail of the last sector: zeros, as a write leaves it */
		memset(r->buf + r->bp.csize, 0, r->bp.psize - r->bp.csize);
		key = dskeys_data_key(b->plan[i].k, b->plan[i].k->gen, r->guid, b->plan[i].salt,
				      &b->owned[b->nops]);
		if (!key) {
			fail_io(r, -ENOMEM);
			continue;
		}
		r->bp.flags = (uint8_t)(BP_F_ENCRYPTED | (b->plan[i].k->gen ? BP_F_KEYGEN : 0));
		r->bp.salt = b->plan[i].salt;
		crypt_nonce(b->plan[i].prefix, b->plan[i].ctr, r->bp.nonce);
		crypt_op_of(&b->ops[b->nops], b->aads[b->nops], key, r, r->buf);
		b->nops++;
	}
	if (b->nops && crypt_seal(b->ops, b->nops))
		for (size_t i = 0, j = 0; i < n; i++) {
			if (recs[i].status)
				continue;
			if (b->ops[j].status)
				fail_io(&recs[i], b->ops[j].status);
			j++;
		}
	for (size_t i = 0; i < b->nops; i++)
		crypt_key_free(b->owned[i]);
	for (size_t i = 0; i < n; i++)
		if (!recs[i].status)
			recs[i].bp.cksum = hash64(recs[i].buf, recs[i].bp.psize);
}

/* A new extent of the same size for each record (its old one is freed at
 * the commit); no dataset is charged: its space does not change. */
static void allocate_again(struct stor_pool *p, struct rec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		unsigned lun;
		int ret;

		r->found = 0; /* from here: owns a new extent */
		if (r->io->result)
			continue;
		ret = alloc_get(p->alloc, r->bp.psize / STOR_SECTOR, &lun, &r->bp.sector);
		if (ret < 0) {
			fail_io(r, ret);
			continue;
		}
		r->bp.lun = (uint16_t)lun;
		r->found = 1;
	}
}

int record_reseal(struct stor_ds *ds, const struct reseal_table *tb, size_t n,
		  const uint64_t *recnos, size_t *done)
{
	struct stor_pool *p = ds->pool;
	struct stor_io io = { .ds = ds, .op = STOR_IO_WRITE };
	struct ds_keys *k = atomic_load(&ds->keys);
	struct read_batch rb;
	struct write_batch wb;
	struct rec *recs = calloc(n ? n : 1, sizeof(*recs));
	uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
	struct bp *bps = calloc(n ? n : 1, sizeof(*bps));
	int *found = calloc(n ? n : 1, sizeof(*found));
	void *rscratch = NULL, *wscratch = NULL;
	uint8_t held[STRIPES] = { 0 };
	unsigned slot;
	size_t m = 0;
	int ret = 0;

	*done = 0;
	if (!k)
		ret = STOR_ENOKEY;
	else if (!recs || !ids || !bps || !found)
		ret = -ENOMEM;
	else if (atomic_load(&p->suspended))
		ret = STOR_ESUSPENDED; /* as any write */
	if (ret < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		ids[i] = tb->id;
		held[pool_stripe(tb->id, recnos[i])] = 1;
	}
	lock_held(p, held);
	slot = txg_read_enter(p);
	/* what each record is now, under its stripe: a client's write since the
	 * caller looked is under the new key already, and must stay; a pointer
	 * is used only once its group verifies (a resume trusts no cursor) */
	ret = txg_lookup(p, n, ids, recnos, bps, found);
	for (size_t i = 0; i < n && ret == 0; i++) {
		int clear = found[i] && !(bps[i].flags & BP_F_ENCRYPTED);

		if (!found[i] || (!clear && dskeys_gen_of(&bps[i]) == k->gen))
			continue;
		ret = bpmac_check_group(p->meta, tb->id, tb->mk, tb->seen, recnos[i]);
		/* a clear record is sealed only by an encryption in place */
		if (ret == 0 && clear && !atomic_load(&ds->encrypting))
			ret = STOR_EAUTH;
		recs[m++] = (struct rec){ .io = &io, .ds = ds, .recno = recnos[i], .kind = REC_WRITE,
					  .bp = bps[i], .found = 1,
					  .guid = ds_sealer(ds, bps[i].birth) };
	}
	if (ret == 0 && m &&
	    (!(rscratch = read_batch_init(&rb, m)) || !(wscratch = write_batch_init(&wb, m))))
		ret = -ENOMEM;
	if (ret == 0 && m) {
		rb.m = m;
		for (size_t i = 0; i < m; i++)
			rb.idx[i] = i;
		read_extents(p, &rb, recs);
		verify_or_open(&rb, recs, m);
		heal(recs, m);
		fail_siblings(recs, m);
		txg_hold(p); /* the generation stays while it is held (rekey.c) */
		plan_nonces(recs, m, wb.plan);
		reseal_in_place(&wb, recs, m);
		allocate_again(p, recs, m);
		write_extents(p, &wb, recs, m);
		ret = io.result ? io.result : txg_reserve(p, m);
		for (size_t i = 0, left = ret == 0 ? m : 0; i < m; i++) {
			struct rec *r = &recs[i];
			struct bp old;
			int had_old;

			if (ret == 0) {
				ret = txg_stage_at(p, ds, tb->id, r->recno, &r->bp, tb->mk, &old,
						   &had_old);
				left--;
				if (ret == 0)
					continue;
				txg_unreserve(p, left);
			}
			if (r->found) /* not staged: its new extent goes back */
				alloc_put(p->alloc, r->bp.lun, r->bp.sector, r->bp.psize / STOR_SECTOR);
		}
		txg_rele(p);
		for (size_t i = 0; i < m; i++) {
			if (recs[i].buf)
				explicit_bzero(recs[i].buf, recs[i].bp.psize);
			free(recs[i].buf);
		}
	}
	txg_read_exit(p, slot);
	unlock_stripes(p, held);
	if (ret == 0)
		*done = m;
out:
	free(rscratch);
	free(wscratch);
	free(recs);
	free(ids);
	free(bps);
	free(found);
	return ret;
}

/* ---- batches of requests ---- */

static int io_check(struct stor_io *io)
{
	if (!io->ds || !io->ds->pool)
		return -EINVAL;
	if (io->op == STOR_IO_FLUSH)
		return 0;
	if (io->op != STOR_IO_READ && io->op != STOR_IO_WRITE && io->op != STOR_IO_DISCARD)
		return -EINVAL;
	if (io->len && !io->buf && io->op != STOR_IO_DISCARD)
		return -EINVAL;
	if (io->ds->snap && io->op != STOR_IO_READ)
		return -EROFS; /* a snapshot is read-only */
	if (io->off > atomic_load(&io->ds->volsize) ||
	    io->len > atomic_load(&io->ds->volsize) - io->off)
		return STOR_ERANGE;
	return 0;
}

static size_t count_recs(const struct stor_io *io)
{
	uint64_t rs = io->ds->recsize;

	if (io->len == 0 || io->op == STOR_IO_FLUSH)
		return 0;
	return (size_t)((io->off + io->len - 1) / rs - io->off / rs + 1);
}

static int overlaps(const struct stor_io *a, const struct stor_io *b)
{
	uint64_t rs = a->ds->recsize;

	if (a->ds != b->ds || !a->len || !b->len)
		return 0;
	/* record granularity: two writes into one record must not share a batch */
	return a->off / rs <= (b->off + b->len - 1) / rs && b->off / rs <= (a->off + a->len - 1) / rs;
}

/* The records of request @io into @recs. @return how many */
static size_t expand_io(struct stor_io *io, struct rec *recs, int write)
{
	uint64_t rs = io->ds->recsize, off = io->off, end = io->off + io->len;
	size_t k = 0;

	while (off < end) {
		struct rec *r = &recs[k++];
		uint64_t recno = off / rs, roff = off % rs;
		uint64_t rlen = end - off < rs - roff ? end - off : rs - roff;

		r->io = io;
		r->ds = io->ds;
		r->guid = io->ds->guid;
		r->recno = recno;
		r->roff = (uint32_t)roff;
		r->rlen = (uint32_t)rlen;
		r->ubuf = io->buf ? (uint8_t *)io->buf + (off - io->off) : NULL;
		if (!write)
			r->kind = REC_READ;
		else if (io->op == STOR_IO_WRITE)
			r->kind = REC_WRITE;
		else /* a clone's hole would uncover its origin's record (clone.c) */
			r->kind = rlen == rs && !io->ds->origin ? REC_HOLE : REC_ZERO;
		off += rlen;
	}
	return k;
}

/* Read records into the requests' bytes; a failed read leaves no partial
 * plaintext behind. */
static void copy_out(struct rec *recs, size_t n)
{
	for (size_t x = 0; x < n; x++) {
		struct rec *r = &recs[x];

		if (!r->status && !r->io->result && r->buf != r->ubuf)
			memcpy(r->ubuf, r->buf + r->roff, r->rlen);
	}
	for (size_t x = 0; x < n; x++)
		if (recs[x].io->result)
			memset(recs[x].ubuf, 0, recs[x].rlen);
}

static void free_bufs(struct rec *recs, size_t n, int write)
{
	for (size_t x = 0; x < n; x++) {
		struct rec *r = &recs[x];

		if (!r->buf || r->buf == r->ubuf)
			continue;
		/* plaintext of an encrypted dataset (decrypted, decompressed, merged
		 * for a partial write, or not sealed after a failure) goes nowhere;
		 * a buffer sealed in place holds only ciphertext */
		if (r->ds->suite && !(write && !r->status && (r->bp.flags & BP_F_ENCRYPTED)))
			explicit_bzero(r->buf, round_sector(r->ds->recsize));
		free(r->buf);
	}
}

/* Expand requests [i, j) into records and run them as one batch. */
static void run_group(struct stor_pool *p, struct stor_io *ios, size_t i, size_t j, int write)
{
	size_t n = 0, k = 0;
	struct rec *recs;

	for (size_t x = i; x < j; x++)
		if (!ios[x].result)
			n += count_recs(&ios[x]);
	if (!n)
		return;
	recs = calloc(n, sizeof(*recs));
	if (!recs) {
		for (size_t x = i; x < j; x++)
			if (!ios[x].result)
				ios[x].result = -ENOMEM;
		return;
	}
	for (size_t x = i; x < j; x++)
		if (!ios[x].result && ios[x].len)
			k += expand_io(&ios[x], &recs[k], write);
	if (write) {
		write_recs(p, recs, n);
	} else {
		unsigned slot = txg_read_enter(p);
		read_recs(p, recs, n);
		txg_read_exit(p, slot);
		copy_out(recs, n);
	}
	free_bufs(recs, n, write);
	free(recs);
}

/* Does @io complete only after a commit: a flush (no-op under sync=disabled),
 * or any write of a sync=always dataset? */
static int waits_for_commit(const struct stor_io *io)
{
	int mode = atomic_load(&io->ds->sync_mode);

	if (io->op == STOR_IO_FLUSH)
		return mode != PROP_SYNC_DISABLED;
	return mode == PROP_SYNC_ALWAYS;
}

static void sync_after(struct stor_pool *p, struct stor_io *ios, size_t i, size_t j)
{
	for (size_t x = i; x < j; x++) {
		int ret;

		if (ios[x].result || !waits_for_commit(&ios[x]))
			continue;
		ret = txg_sync(p, 0);
		for (size_t y = i; y < j; y++) /* one commit covers them all */
			if (!ios[y].result && (ios[y].op == STOR_IO_FLUSH ||
					       atomic_load(&ios[y].ds->sync_mode) == PROP_SYNC_ALWAYS))
				ios[y].result = ret;
		return;
	}
}

/* How many requests of [i, j) found no room. */
static size_t count_enospc(const struct stor_io *ios, size_t i, size_t j)
{
	size_t n = 0;

	for (size_t x = i; x < j; x++)
		n += ios[x].result == STOR_ENOSPC;
	return n;
}

/* Rounds in a row in which commits gave space back and no request got it
 * (other writers took it first, or a request needs more than came back). */
#define SPACE_STALLS_MAX 4

/*
 * Run the writes [i, j) and throttle those that find no room instead of
 * failing them. Copy-on-write needs free space before it frees any: what
 * an overwrite replaces comes back only when its txg commits, and on a
 * full pool so does the room for the next overwrites. So while a commit
 * gives space back, commit and run the requests that found none again
 * (the others are fenced off meanwhile); a request is refused only after
 * SPACE_STALLS_MAX rounds that gave it nothing: rounds in which space came
 * back and went to others, or no txg held frees (then it waits 20, 40 and
 * 80 ms for the frees of batches still writing: a full pool's new data is
 * refused 140 ms later than it could be). Each round before that either completes a
 * request or counts as a stall, so the loop is bounded. No lock is held
 * here: the commits need the holds and stripes the batch took.
 */
static void run_writes(struct stor_pool *p, struct stor_io *ios, size_t i, size_t j)
{
	uint64_t mark = txg_freed(p);
	size_t left, was;
	unsigned stalls = 0;

	run_group(p, ios, i, j, 1);
	for (left = count_enospc(ios, i, j); left && stalls < SPACE_STALLS_MAX;) {
		int ret = txg_sync_for_space(p, &mark);

		if (ret < 0)
			break;
		if (ret == 0) {
			/* no txg holds frees yet, but another batch may have taken
			 * the last room for overwrites whose frees it stages only
			 * once its extents are written: give it that long */
			if (++stalls < SPACE_STALLS_MAX) {
				struct timespec ts = { 0, 10000000L << stalls };

				nanosleep(&ts, NULL);
			}
			continue;
		}
		for (size_t x = i; x < j; x++)
			ios[x].result = ios[x].result == STOR_ENOSPC ? 0 : ios[x].result ? ios[x].result : 1;
		run_group(p, ios, i, j, 1);
		for (size_t x = i; x < j; x++)
			if (ios[x].result == 1)
				ios[x].result = 0;
		was = left;
		left = count_enospc(ios, i, j);
		stalls = left < was ? 0 : stalls + 1;
	}
	for (size_t x = i; left && x < j; x++)
		if (ios[x].result == STOR_ENOSPC) {
			/* one event a batch, naming its first dataset refused */
			EVENT(STOR_EV_IO_NOSPACE, p->name, EV_STR("dataset", ios[x].ds->name),
			      EV_NUM("requests", left));
			break;
		}
}

/* A batch of clients' requests, for a rekey that yields to them (rekey.c). */
static void note_client_io(struct stor_pool *p)
{
	if (atomic_load_explicit(&p->client_io_watchers, memory_order_relaxed))
		atomic_fetch_add_explicit(&p->client_io, 1, memory_order_relaxed);
}

static int submit_pool(struct stor_pool *p, struct stor_io *ios, size_t n)
{
	size_t i = 0;

	note_client_io(p);
	while (i < n) {
		int write = ios[i].op != STOR_IO_READ;
		size_t j = i + 1;

		if (ios[i].op == STOR_IO_FLUSH) {
			while (j < n && ios[j].op == STOR_IO_FLUSH)
				j++;
			sync_after(p, ios, i, j);
			i = j;
			continue;
		}
		for (; j < n; j++) {
			int w = ios[j].op != STOR_IO_READ;
			int clash = 0;
			if (ios[j].op == STOR_IO_FLUSH || w != write)
				break;
			for (size_t x = i; write && x < j && !clash; x++)
				clash = overlaps(&ios[x], &ios[j]);
			if (clash)
				break;
		}
		if (write) {
			run_writes(p, ios, i, j);
			sync_after(p, ios, i, j);
		} else {
			run_group(p, ios, i, j, write);
		}
		i = j;
	}
	return 0;
}

int stor_io_submit(struct stor_io *ios, size_t n)
{
	struct stor_io **byp = NULL;
	uint64_t t0 = stats_now_ns(), ns;
	int failed = 0;
	size_t i;

	for (i = 0; i < n; i++)
		ios[i].result = io_check(&ios[i]);
	/* the common case: one pool */
	for (i = 1; i < n; i++)
		if (ios[i].ds && ios[0].ds && ios[i].ds->pool != ios[0].ds->pool)
			break;
	if (i >= n) {
		if (n && ios[0].ds)
			submit_pool(ios[0].ds->pool, ios, n);
	} else {
		/* several pools: run each pool's requests in their order */
		byp = calloc(n, sizeof(*byp));
		struct stor_io *tmp = calloc(n, sizeof(*tmp));
		if (!byp || !tmp) {
			for (i = 0; i < n; i++)
				if (!ios[i].result)
					ios[i].result = -ENOMEM;
		} else {
			for (i = 0; i < n; i++) {
				struct stor_pool *p;
				size_t m = 0;
				if (ios[i].result || !ios[i].ds || byp[i])
					continue;
				p = ios[i].ds->pool;
				for (size_t x = i; x < n; x++)
					if (!ios[x].result && ios[x].ds && ios[x].ds->pool == p) {
						byp[x] = &ios[x];
						tmp[m++] = ios[x];
					}
				submit_pool(p, tmp, m);
				m = 0;
				for (size_t x = i; x < n; x++)
					if (byp[x] == &ios[x] && ios[x].ds->pool == p &&
					    !ios[x].result)
						ios[x].result = tmp[m++].result;
			}
		}
		free(tmp);
		free(byp);
	}
	ns = stats_now_ns() - t0;
	for (i = 0; i < n; i++) {
		if (ios[i].result)
			failed++;
		if (ios[i].ds)
			stats_request(ios[i].ds, ios[i].op, ios[i].len, ios[i].result, ns);
	}
	return failed;
}

/*
 * ---- reads that complete one by one ----
 *
 * On O_DIRECT LUNs a batch that answers when its slowest extent is back
 * holds every request of it to that extent, and a thread waiting for it
 * sends nothing new: the disk sees fewer reads in flight than the clients
 * asked for. A reader instead sends each extent at once on a ring of its
 * thread's own (lun_ring), and a request is finished (checked or opened,
 * copied out) in the turn its last extent arrives; the requests finished in
 * one turn are opened as one burst. The reads started together (a flight,
 * one pool) stay in one reader section until the last of them is done, so
 * no extent they read is freed and reused under them. Records that need no
 * I/O of the ring (cached, never written, on a LUN it does not take) are
 * done at the start.
 */
struct stor_reader {
	struct lun_ring *ring;
	void (*done)(struct stor_io *io);
	size_t inflight; /* requests started, not yet done */
};

struct flight;

struct flight_ext {
	struct lun_io io; /* first: the ring hands back &io */
	struct flight *f;
	size_t rec;
};

struct flight {
	struct stor_pool *p;
	unsigned slot;
	uint64_t t0;
	size_t reqs_left;
	struct rec *recs;
	struct flight_ext *ext; /* per record */
	size_t *reqof;          /* per record: its request */
	struct stor_io **reqs;  /* per request */
	size_t *first, *left;   /* per request: its first record, records still to come */
};

struct ready {
	struct flight *f;
	size_t k; /* the request */
};

struct stor_reader *stor_reader_new(int efd, void (*done)(struct stor_io *io))
{
	struct stor_reader *rd = calloc(1, sizeof(*rd));

	if (!rd)
		return NULL;
	/* twice the default queue depth of the published run's 192 datasets */
	rd->ring = lun_ring_new(512, efd);
	if (!rd->ring) {
		free(rd);
		return NULL;
	}
	rd->done = done;
	return rd;
}

void stor_reader_free(struct stor_reader *rd)
{
	if (!rd)
		return;
	lun_ring_free(rd->ring);
	free(rd);
}

size_t stor_reader_inflight(const struct stor_reader *rd)
{
	return rd->inflight;
}

int stor_ds_reads_async(const struct stor_ds *ds)
{
	const struct stor_pool *p = ds->pool;
	unsigned n = atomic_load(&p->nluns);

	for (unsigned i = 0; i < n; i++)
		if (!p->luns[i].lun || !lun_ring_takes(p->luns[i].lun))
			return 0;
	return n > 0;
}

void *stor_ds_read_buf(const struct stor_ds *ds, size_t len)
{
	/* the pool's option that opens its file LUNs O_DIRECT (lunset.c), not a
	 * walk of its LUNs per request; RADOS LUNs ignore it, and lose nothing */
	return ds->pool->opts.direct_io ? aligned_alloc_raw(len) : malloc(len ? len : 1);
}

static void complete(struct stor_reader *rd, struct stor_io *io, uint64_t t0)
{
	stats_request(io->ds, STOR_IO_READ, io->len, io->result, stats_now_ns() - t0);
	rd->inflight--;
	rd->done(io);
}

/* Finish the requests of @ready: the stages after the stored bytes as one
 * batch over all their records (one burst of opens), then their completions. */
static void finish_ready(struct stor_reader *rd, struct ready *ready, size_t n)
{
	struct read_batch b;
	struct rec *tmp;
	void *scratch = NULL;
	size_t m = 0, at = 0;

	if (!n)
		return;
	for (size_t j = 0; j < n; j++)
		m += count_recs(ready[j].f->reqs[ready[j].k]);
	tmp = malloc(m * sizeof(*tmp));
	if (tmp && !(scratch = read_batch_init(&b, m))) {
		free(tmp);
		tmp = NULL;
	}
	for (size_t j = 0; j < n; j++) {
		struct flight *f = ready[j].f;
		struct rec *r = &f->recs[f->first[ready[j].k]];
		size_t cnt = count_recs(f->reqs[ready[j].k]);

		if (tmp) {
			memcpy(&tmp[at], r, cnt * sizeof(*r));
			at += cnt;
			continue;
		}
		for (size_t x = 0; x < cnt; x++)
			fail_io(&r[x], -ENOMEM);
		copy_out(r, cnt);
		free_bufs(r, cnt, 0);
	}
	if (tmp) {
		read_finish(&b, tmp, m);
		copy_out(tmp, m);
		free_bufs(tmp, m, 0);
		free(scratch);
		free(tmp);
	}
	for (size_t j = 0; j < n; j++) {
		struct flight *f = ready[j].f;

		complete(rd, f->reqs[ready[j].k], f->t0);
		if (--f->reqs_left == 0) {
			txg_read_exit(f->p, f->slot);
			free(f);
		}
	}
}

/* One allocation for a flight of @nreq requests and @nrec records. */
static struct flight *flight_new(size_t nreq, size_t nrec)
{
	struct flight *f = calloc(1, sizeof(*f) + nrec * (sizeof(*f->recs) + sizeof(*f->ext) +
							  sizeof(*f->reqof)) +
					     nreq * (sizeof(*f->reqs) + 2 * sizeof(*f->first)));

	if (!f)
		return NULL;
	f->recs = (struct rec *)(f + 1);
	f->ext = (struct flight_ext *)(f->recs + nrec);
	f->reqof = (size_t *)(f->ext + nrec);
	f->reqs = (struct stor_io **)(f->reqof + nrec);
	f->first = (size_t *)(f->reqs + nreq);
	f->left = f->first + nreq;
	f->reqs_left = nreq;
	return f;
}

/*
 * Start the @n requests of @reqs (reads of pool @p, checked): look up their
 * pointers, send their extents to the ring, finish those that need none.
 */
static void start_flight(struct stor_reader *rd, struct stor_pool *p, struct stor_io **reqs,
			 size_t n, struct ready *ready)
{
	size_t nrec = 0, nready = 0;
	struct read_batch b;
	struct flight *f;
	void *scratch;

	note_client_io(p);
	for (size_t k = 0; k < n; k++)
		nrec += count_recs(reqs[k]);
	f = flight_new(n, nrec);
	scratch = f ? read_batch_init(&b, nrec) : NULL;
	if (!scratch) {
		uint64_t t0 = stats_now_ns();

		free(f);
		for (size_t k = 0; k < n; k++) {
			reqs[k]->result = -ENOMEM;
			memset(reqs[k]->buf, 0, reqs[k]->len);
			complete(rd, reqs[k], t0);
		}
		return;
	}
	f->p = p;
	f->t0 = stats_now_ns();
	for (size_t k = 0, at = 0; k < n; k++) {
		size_t cnt = expand_io(reqs[k], &f->recs[at], 0);

		f->reqs[k] = reqs[k];
		f->first[k] = at;
		f->left[k] = cnt;
		for (size_t x = 0; x < cnt; x++)
			f->reqof[at + x] = k;
		at += cnt;
	}
	f->slot = txg_read_enter(p);
	serve_cached(&b, f->recs, nrec);
	if (lookup(p, &b, f->recs) == 0) {
		for (size_t x = 0; x < b.m; x++) {
			size_t i = b.idx[x];
			struct flight_ext *e = &f->ext[i];

			if (!extent_of(p, &f->recs[i], &e->io))
				continue;
			e->f = f;
			e->rec = i;
			if (lun_ring_takes(e->io.lun) && lun_ring_read(rd->ring, &e->io) == 0)
				continue;
			lun_read_batch(&e->io, 1); /* a LUN or a moment the ring cannot take */
			extent_done(p, &f->recs[i], &e->io);
			e->f = NULL;
		}
	}
	free(scratch);
	lun_ring_submit(rd->ring);
	for (size_t i = 0; i < nrec; i++)
		if (!f->ext[i].f && --f->left[f->reqof[i]] == 0)
			ready[nready++] = (struct ready){ f, f->reqof[i] };
	finish_ready(rd, ready, nready);
}

void stor_read_start(struct stor_reader *rd, struct stor_io **ios, size_t n)
{
	struct ready *ready = malloc(n * sizeof(*ready));
	struct stor_io **group = malloc(n * sizeof(*group));
	uint64_t t0 = stats_now_ns();

	for (size_t i = 0; i < n; i++) {
		struct stor_io *io = ios[i];

		rd->inflight++;
		io->result = io->op != STOR_IO_READ ? -EINVAL : io_check(io);
		if (!io->result && io->len && ready && group)
			continue;
		if (!io->result && io->len)
			io->result = -ENOMEM;
		if (io->result && io->buf)
			memset(io->buf, 0, io->len);
		ios[i] = NULL;
		complete(rd, io, t0);
	}
	/* one flight per pool, its requests in their order */
	for (size_t i = 0; i < n; i++) {
		struct stor_pool *p;
		size_t m = 0;

		if (!ios[i])
			continue;
		p = ios[i]->ds->pool;
		for (size_t j = i; j < n; j++)
			if (ios[j] && ios[j]->ds->pool == p) {
				group[m++] = ios[j];
				ios[j] = NULL;
			}
		start_flight(rd, p, group, m, ready);
	}
	free(group);
	free(ready);
}

void stor_reader_reap(struct stor_reader *rd)
{
	struct lun_io *done[64];
	struct ready ready[64];
	unsigned n;

	while ((n = lun_ring_reap(rd->ring, done, 64)) > 0) {
		size_t nready = 0;

		for (unsigned i = 0; i < n; i++) {
			struct flight_ext *e = (struct flight_ext *)done[i];
			struct flight *f = e->f;

			extent_done(f->p, &f->recs[e->rec], &e->io);
			if (--f->left[f->reqof[e->rec]] == 0)
				ready[nready++] = (struct ready){ f, f->reqof[e->rec] };
		}
		finish_ready(rd, ready, nready);
	}
}

static int one(struct stor_ds *ds, enum stor_io_op op, uint64_t off, void *buf, uint64_t len)
{
	struct stor_io io = { .ds = ds, .op = op, .off = off, .len = len, .buf = buf };

	stor_io_submit(&io, 1);
	return io.result;
}

int stor_ds_read(struct stor_ds *ds, uint64_t off, void *buf, size_t len)
{
	return one(ds, STOR_IO_READ, off, buf, len);
}

int stor_ds_write(struct stor_ds *ds, uint64_t off, const void *buf, size_t len)
{
	return one(ds, STOR_IO_WRITE, off, (void *)buf, len);
}

int stor_ds_discard(struct stor_ds *ds, uint64_t off, uint64_t len)
{
	return one(ds, STOR_IO_DISCARD, off, NULL, len);
}

int stor_ds_flush(struct stor_ds *ds)
{
	return one(ds, STOR_IO_FLUSH, 0, NULL, 0);
}
