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
 * sum of its snapshots' tables; and LMDB's rows of the free map
 * (txg/spacemap.c), which an import trusts instead of a walk like this
 * one, hold what the walk found.
 * Pointers are visited in key order, so a dataset's records come together.
 * Then the MAC trees (bpmac.c), with keys: every encrypted dataset and
 * snapshot whose key is loaded has each group MAC checked against all its
 * pointers and its root against its groups, so a pointer changed, put back,
 * dropped or added is named (as the records of its group: the group MAC
 * cannot tell which pointer lied) without any record being read; a table
 * whose key is not loaded is named as not verified, never passed in silence.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/stor_assert.h"
#include "crypt/hash.h"
#include "dev/alloc.h"
#include "dev/lun.h"
#include "dev/mirror.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/owners.h"
#include "ds/recv_state.h"
#include "ds/snapshot.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/metalog.h"
#include "txg/spacemap.h"

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
	struct owners *owners; /* whose table each id is */
	struct sm_sum *sums;   /* by owner, in the index's order */
	struct sm_sum *sum;    /* of the table being walked, NULL if no owner */
	uint8_t *summed;       /* by owner: the free map's rows have its sums */
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
	STOR_ASSERT_HELD(&w->p->admin);

	if (w->ds_id != UINT64_MAX) {
		struct stor_ds *ds;

		ds = ds_find_id_locked(w->p, w->ds_id);
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
			      bp->sector * STOR_SECTOR, w->buf, bp->psize, 0, 0, 0 };
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
		const struct owner *o = owners_find(w->owners, id);

		close_ds(w);
		w->ds_id = id;
		/* a snapshot's records' checksums are seeded with its dataset */
		w->ds = !o ? NULL : o->ds ? o->ds : o->snap->ds;
		w->kept = o && o->snap;
		w->kept_i = w->kept ? ds_lower_bound_locked(w->p, o->snap->ds->name) : 0;
		w->sum = o ? &w->sums[o - owners_at(w->owners, 0)] : NULL;
	}
	w->nkept++;
	w->recno = get_u64(&r);
	w->rep->records++;
	if (bp_decode(val, vlen, &bp) < 0) {
		w->rep->cksum_errors++;
		return 0;
	}
	w->ds_used += bp.psize;
	if (w->sum) {
		w->sum->psize += bp.psize;
		w->sum->lsize += bp.lsize;
		w->sum->nenc += !!(bp.flags & BP_F_ENCRYPTED);
	}
	if (w->kept)
		w->kept_by[w->kept_i] += bp.psize;
	if (bp.flags & BP_F_ENCRYPTED) {
		struct seen_nonce *s = array_grow(w->seen, w->nseen, &w->capseen, sizeof(*s), 1024);

		w->rep->encrypted++;
		/* sealed under a generation its dataset's key file no longer has,
		 * past a rekey's end: what an old key might open (rekey.c) */
		if (w->ds && !w->ds->has_old && dskeys_gen_of(&bp) != w->ds->keygen)
			w->rep->old_keys++;
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

/* ---- the free map's rows (txg/spacemap.c) ---- */

static int map_log_extent(unsigned lun, uint64_t sector, uint32_t n, void *ctx)
{
	uint64_t **bits = ctx;

	if (lun < STOR_LUNS_MAX && bits[lun])
		for (uint64_t s = sector; s < sector + n; s++)
			bits[lun][s / 64] |= 1ull << (s % 64);
	return 0;
}

static int map_sum(void *ctx, const struct sm_sum *row)
{
	struct walk *w = ctx;
	const struct owner *o = owners_find(w->owners, row->id);
	const struct sm_sum *sum = o ? &w->sums[o - owners_at(w->owners, 0)] : NULL;

	if (!sum || sum->psize != row->psize || sum->lsize != row->lsize || sum->nenc != row->nenc)
		w->rep->space_errors++;
	if (sum)
		w->summed[o - owners_at(w->owners, 0)] = 1;
	return 0;
}

/*
 * What LMDB's rows of the free map say the pointers hold, against the walk:
 * each LUN's sectors (the log's added, as the walk has them) and each
 * table's sums. A pool without rows (a LUN cut short) has nothing to compare.
 */
static int check_map(struct walk *w, struct meta_txn *t)
{
	struct stor_pool *p = w->p;
	unsigned n = atomic_load(&p->nluns);
	uint64_t *bits[STOR_LUNS_MAX] = { 0 }, nsectors[STOR_LUNS_MAX] = { 0 };
	int ret = 0;

	for (unsigned i = 0; i < n; i++)
		if (p->luns[i].cut)
			return 0;
	for (unsigned i = 0; i < n && ret == 0; i++) {
		uint64_t used;

		alloc_usage(p->alloc, i, &used, &nsectors[i]);
		if (!(bits[i] = calloc((nsectors[i] + 63) / 64 + 1, sizeof(uint64_t))))
			ret = -ENOMEM;
	}
	if (ret == 0 && !(w->summed = calloc(owners_count(w->owners) + 1, 1)))
		ret = -ENOMEM;
	if (ret == 0)
		ret = spacemap_view(t, n, bits, nsectors);
	if (ret == 0)
		ret = spacemap_sums(t, map_sum, w);
	if (ret == STOR_ECORRUPT) {
		w->rep->space_errors++;
		ret = 0;
		goto out;
	}
	if (ret < 0)
		goto out;
	metalog_extents(p, map_log_extent, bits);
	for (unsigned i = 0; i < n; i++) {
		uint64_t nw = (nsectors[i] + 63) / 64, have = (lun_data_size(p->luns[i].lun) /
								STOR_SECTOR + 63) / 64;

		for (uint64_t x = 0; x < nw || x < have; x++)
			if ((x < nw ? bits[i][x] : 0) != (x < have ? w->refs[i][x] : 0)) {
				w->rep->space_errors++;
				break;
			}
	}
	for (size_t i = 0; i < owners_count(w->owners); i++)
		if (!w->summed[i] && (w->sums[i].psize || w->sums[i].lsize || w->sums[i].nenc))
			w->rep->space_errors++;
out:
	for (unsigned i = 0; i < n; i++)
		free(bits[i]);
	return ret == -ENOENT ? 0 : ret;
}

/* ---- MAC trees, for the tables whose key is loaded ---- */

/* Name @what of @table in the report (up to STOR_VERIFY_FINDINGS_MAX). */
static int add_finding(struct stor_verify_report *rep, const char *table,
		       enum stor_verify_kind kind, uint64_t first, uint64_t last)
{
	struct stor_verify_finding *f;

	if (rep->nfindings >= STOR_VERIFY_FINDINGS_MAX)
		return 0;
	if (!rep->findings &&
	    !(rep->findings = calloc(STOR_VERIFY_FINDINGS_MAX, sizeof(*rep->findings))))
		return -ENOMEM;
	f = &rep->findings[rep->nfindings];
	if (!(f->table = strdup(table)))
		return -ENOMEM;
	f->kind = kind;
	f->first = first;
	f->last = last;
	rep->nfindings++;
	return 0;
}

struct mac_table {
	struct stor_verify_report *rep;
	const char *name;
	uint64_t nrec; /* records of its volume: a group's last one is named within it */
	int err;
};

static void bad_group(void *ctx, uint64_t g)
{
	struct mac_table *mt = ctx;
	uint64_t first = g * MAC_GROUP, last = first + MAC_GROUP - 1;
	int ret;

	if (mt->nrec && first < mt->nrec && last >= mt->nrec)
		last = mt->nrec - 1;
	mt->rep->mac_errors++;
	ret = add_finding(mt->rep, mt->name, STOR_VERIFY_MAC_GROUP, first, last);
	if (ret < 0)
		mt->err = ret;
}

/* Check the whole tree of table @id under @mk: root, then every group. */
static int check_table(struct stor_pool *p, struct stor_verify_report *rep, uint64_t id,
		       const struct mac_key *mk, const char *name, uint64_t nrec)
{
	struct mac_table mt = { .rep = rep, .name = name, .nrec = nrec };
	int ret = bpmac_verify_root(p->meta, id, mk);

	if (ret == STOR_EAUTH) {
		rep->mac_errors++;
		ret = add_finding(rep, name, STOR_VERIFY_MAC_ROOT, 0, 0);
	}
	if (ret < 0)
		return ret;
	ret = bpmac_check_table(p->meta, id, mk, bad_group, &mt);
	if (ret == 0)
		ret = mt.err;
	rep->mac_verified++;
	return ret;
}

/* What a table of @ds is not verified for, 0 when it can be. */
static int unverified_kind(struct stor_pool *p, struct stor_ds *ds, struct ds_keys *k)
{
	if (atomic_load(&ds->receiving) || atomic_load(&ds->macs_later) ||
	    recv_macs_pending(p, ds) != 0)
		return STOR_VERIFY_MAC_PENDING;
	return k ? 0 : STOR_VERIFY_NO_KEY;
}

static int unverified(struct stor_verify_report *rep, const char *name, int kind)
{
	rep->mac_unverified++;
	return add_finding(rep, name, (enum stor_verify_kind)kind, 0, 0);
}

static uint64_t nrecords(uint64_t volsize, uint32_t recsize)
{
	return recsize ? (volsize + recsize - 1) / recsize : 0;
}

/* The snapshots of @ds as they are now: their tables outlive no lock of ours. */
struct snap_copy {
	uint64_t id, guid, volsize;
	char *name;
};

static int copy_snaps(struct stor_pool *p, struct stor_ds *ds, struct snap_copy **out, size_t *n)
{
	struct snap_copy *v;
	int ret = 0;

	*n = 0;
	pthread_mutex_lock(&p->snap_lock);
	v = calloc(ds->nsnaps + 1, sizeof(*v));
	for (size_t i = 0; v && i < ds->nsnaps; i++) {
		struct snap *s = ds->snaps[i];

		if (s->dying)
			continue;
		v[*n] = (struct snap_copy){ s->id, s->guid, s->volsize, strdup(s->name) };
		if (!v[(*n)++].name)
			ret = -ENOMEM;
	}
	pthread_mutex_unlock(&p->snap_lock);
	*out = v;
	return v ? ret : -ENOMEM;
}

/*
 * Every encrypted table, heads then their snapshots; the admin lock (held)
 * keeps keys from being loaded or unloaded meanwhile.
 */
static int check_macs(struct stor_pool *p, struct stor_verify_report *rep)
{
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; ret == 0 && i < p->nds; i++) {
		struct stor_ds *ds = p->ds[i];
		struct ds_keys *k = atomic_load(&ds->keys);
		struct snap_copy *sv = NULL;
		size_t nsv = 0;
		int why;

		if (!ds->suite || ds->destroyed)
			continue;
		why = unverified_kind(p, ds, k);
		ret = why ? unverified(rep, ds->name, why)
			  : check_table(p, rep, ds->id, k->mac, ds->name,
					nrecords(atomic_load(&ds->volsize), ds->recsize));
		if (ret == 0)
			ret = copy_snaps(p, ds, &sv, &nsv);
		for (size_t j = 0; ret == 0 && j < nsv; j++) {
			struct mac_key *mk;

			if (why) {
				ret = unverified(rep, sv[j].name, why);
				continue;
			}
			/* derived as snap_mac() does, but kept out of the read path's cache */
			pthread_mutex_lock(&k->lock);
			mk = mac_key_new(k->mac_gen == k->gen ? k->master : k->old, sv[j].guid,
					 (unsigned)ds->suite);
			pthread_mutex_unlock(&k->lock);
			ret = mk ? check_table(p, rep, sv[j].id, mk, sv[j].name,
					       nrecords(sv[j].volsize, ds->recsize))
				 : -ENOMEM;
			mac_key_put(mk);
		}
		for (size_t j = 0; j < nsv; j++)
			free(sv[j].name);
		free(sv);
	}
	return ret;
}

void stor_verify_report_free(struct stor_verify_report *rep)
{
	if (!rep)
		return;
	for (size_t i = 0; i < rep->nfindings; i++)
		free(rep->findings[i].table);
	free(rep->findings);
	rep->findings = NULL;
	rep->nfindings = 0;
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
	ret = owners_index(p, &w.owners);
	if (ret == 0 && !(w.sums = calloc(owners_count(w.owners) + 1, sizeof(*w.sums))))
		ret = -ENOMEM;
	if (ret == 0)
		ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		goto out;
	ret = meta_iter(t, META_BP, NULL, 0, 0, visit, &w);
	close_ds(&w);
	if (ret == 0)
		ret = check_map(&w, t);
	meta_rtxn_put(t);
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
	if (ret == 0)
		ret = check_macs(p, rep);
out:
	pthread_rwlock_unlock(&p->hold);
	pthread_mutex_unlock(&p->admin);
	for (unsigned i = 0; i < STOR_LUNS_MAX; i++)
		free(w.refs[i]);
	free(w.seen);
	free(w.buf);
	free(w.kept_by);
	free(w.sums);
	free(w.summed);
	owners_free(w.owners);
	if (ret < 0)
		stor_verify_report_free(rep);
	return ret;
}
