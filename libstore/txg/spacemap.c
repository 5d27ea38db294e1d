/* SPDX-License-Identifier: MIT */
/*
 * The persisted free map, after ZFS's space maps and log space maps. The
 * block pointers are the one record of what is allocated (alloc.h), and an
 * import used to find it by walking all of them: 2^31 pointers in a 16 TiB
 * pool of 8 KiB records. Here LMDB keeps what they hold beside them, in
 * its local "space" table (never in the log on the LUNs: it is derived,
 * and an LMDB rebuilt from the LUNs starts without it):
 *   "h"                       -> u32 version | u64 next seq | u64 bytes of
 *                                "d" rows since the last fold
 *   "m" u16 lun | u32 chunk   -> SM_CHUNK sectors of the LUN as bits
 *                                (u64 words, bit i%64 of word i/64 is
 *                                sector i; all-clear chunks are left out)
 *   "d" u64 seq               -> one committed transaction's changes:
 *                                u8 SM_ADD or SM_DEL | u16 lun | u32
 *                                sectors | u64 first sector, ...
 *   "o" u64 table id          -> struct sm_sum less the id: u64 psize |
 *                                u64 lsize | u64 pointers sealed
 * The watcher sees every change to "bp" (meta.h), whoever makes it - a
 * txg's commit, a snapshot's destroy, a replay of the log - with the value
 * it replaces, and at the commit puts a "d" row of the net change (a
 * pointer moved into a snapshot's table cancels out) and the tables' new
 * sums; the cost is a lookup per pointer put and a few bytes per extent.
 * When the "d" rows pass spacemap_fold_bytes, that commit folds them into the
 * chunks they touch, chunk by chunk, so an import reads the chunks
 * (1 bit a sector, a sequential read) and at most that many bytes of
 * changes, whatever the number of pointers.
 *
 * A change that does not add up (an extent added twice, one removed that
 * was not there), an emptied "bp" (a full replay) or no memory to keep the
 * changes in drops the rows in the same commit (never fails it); the next
 * import walks the pointers and writes them anew (spacemap_write_base), as
 * it does for a pool that never had them. pool check compares the rows
 * with its own walk (verify.c).
 *
 * The rows are trusted as the pointers beside them are: a hand on the LMDB
 * file that frees a live extent in them gets that record overwritten by
 * later writes (its checksum or MAC then fails at its read), as deleting
 * the pointer would lose it; pool check names the difference.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/bytes.h"
#include "dev/alloc.h"
#include "kv/bp.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/metalog.h"
#include "txg/spacemap.h"

#define SM_VERSION 1u
#define SM_CHUNK ((uint64_t)1 << 16) /* sectors a chunk row covers: 8 KiB of bits */
#define SM_WORDS (SM_CHUNK / 64)
#define SM_ADD 0u
#define SM_DEL 1u
#define SM_ENTRY 15 /* bytes of a "d" row's entry */

uint64_t spacemap_fold_bytes = (uint64_t)8 << 20;

struct change {
	uint64_t sector;
	uint32_t n;
	uint16_t lun;
	int8_t sign; /* +1 held from now on, -1 no longer */
	uint64_t ord; /* the order changes happened in */
};

struct sum_slot {
	uint64_t id, psize, lsize, nenc; /* deltas, modulo 2^64 */
	int used;
};

struct spacemap {
	struct stor_pool *p;
	struct meta *m;
	int on;   /* the rows say what the committed pointers hold */
	int drop; /* this transaction's changes do not add up, or emptied "bp" */
	uint64_t seq, logged; /* the header's, as last committed */
	uint64_t next_seq, next_logged; /* the transaction's, until it ends */
	int next_on;
	struct change *c;
	size_t nc, capc;
	struct sum_slot *s; /* open addressing by id */
	size_t ns, caps;
};

/* ---- rows ---- */

static void header_encode(uint8_t out[20], uint64_t seq, uint64_t logged)
{
	uint8_t *w = out;

	put_u32(&w, SM_VERSION);
	put_u64(&w, seq);
	put_u64(&w, logged);
}

/* @return 0 with *seq and *logged, -ENOENT (no rows), STOR_ECORRUPT, or an error */
static int header_get(struct meta_txn *t, uint64_t *seq, uint64_t *logged)
{
	const void *v;
	const uint8_t *r;
	size_t vlen;
	int ret = meta_get(t, META_SPACE, "h", 1, &v, &vlen);

	if (ret < 0)
		return ret;
	r = v;
	if (vlen != 20 || get_u32(&r) != SM_VERSION)
		return STOR_ECORRUPT;
	*seq = get_u64(&r);
	*logged = get_u64(&r);
	return 0;
}

static void chunk_key(uint8_t k[7], unsigned lun, uint64_t chunk)
{
	uint8_t *w = k;

	put_u8(&w, 'm');
	put_u16(&w, (uint16_t)lun);
	put_u32(&w, (uint32_t)chunk);
}

static void id_key(uint8_t k[9], uint8_t tag, uint64_t id)
{
	uint8_t *w = k;

	put_u8(&w, tag);
	put_u64(&w, id);
}

/*
 * Extent (@sector, @n) of a LUN, as bits @words from sector @first on
 * (@nbits of them), held from now on (@sign > 0) or no longer: each of its
 * sectors must have been free, or held, before. @return 0 or STOR_ECORRUPT
 */
static int apply(uint64_t *words, uint64_t first, uint64_t nbits, uint64_t sector, uint32_t n,
		 int sign)
{
	if (sector < first || sector - first + n > nbits || sector + n < sector)
		return STOR_ECORRUPT;
	for (uint64_t i = sector - first, end = i + n; i < end; i++) {
		uint64_t bit = 1ull << (i % 64);

		if (!(words[i / 64] & bit) != (sign > 0))
			return STOR_ECORRUPT;
		words[i / 64] ^= bit;
	}
	return 0;
}

/* ---- the watcher ---- */

static int add_change(struct spacemap *sm, const struct bp *bp, int sign)
{
	struct change *c = array_grow(sm->c, sm->nc, &sm->capc, sizeof(*c), 256);

	if (!c)
		return -ENOMEM;
	sm->c = c;
	sm->c[sm->nc] = (struct change){ bp->sector, bp->psize / STOR_SECTOR, bp->lun, (int8_t)sign,
					 sm->nc };
	sm->nc++;
	return 0;
}

static struct sum_slot *sum_slot(struct spacemap *sm, uint64_t id)
{
	size_t i;

	if (sm->ns * 2 >= sm->caps) {
		size_t cap = sm->caps ? sm->caps * 2 : 64;
		struct sum_slot *s = calloc(cap, sizeof(*s));

		if (!s)
			return NULL;
		for (size_t j = 0; j < sm->caps; j++) {
			if (!sm->s[j].used)
				continue;
			for (i = (sm->s[j].id * 0x9E3779B97F4A7C15ull) & (cap - 1); s[i].used;
			     i = (i + 1) & (cap - 1))
				;
			s[i] = sm->s[j];
		}
		free(sm->s);
		sm->s = s;
		sm->caps = cap;
	}
	for (i = (id * 0x9E3779B97F4A7C15ull) & (sm->caps - 1); sm->s[i].used;
	     i = (i + 1) & (sm->caps - 1))
		if (sm->s[i].id == id)
			return &sm->s[i];
	sm->s[i] = (struct sum_slot){ .id = id, .used = 1 };
	sm->ns++;
	return &sm->s[i];
}

static int count(struct spacemap *sm, uint64_t id, const void *val, size_t vlen, int sign)
{
	struct sum_slot *s;
	struct bp bp;

	if (!val)
		return 0;
	if (bp_decode(val, vlen, &bp) < 0) {
		sm->drop = 1; /* no extent to count: walk at the next import */
		return 0;
	}
	s = sum_slot(sm, id);
	if (!s || add_change(sm, &bp, sign) < 0)
		return -ENOMEM;
	s->psize += (uint64_t)(int64_t)sign * bp.psize;
	s->lsize += (uint64_t)(int64_t)sign * bp.lsize;
	s->nenc += (uint64_t)(int64_t)sign * !!(bp.flags & BP_F_ENCRYPTED);
	return 0;
}

static int on_change(void *ctx, const void *key, size_t klen, const void *old, size_t olen,
		     const void *val, size_t vlen)
{
	struct spacemap *sm = ctx;
	const uint8_t *k = key;
	uint64_t id;
	int ret;

	if (!sm->on || sm->drop)
		return 0;
	if (klen != BP_KEY_LEN) {
		sm->drop = 1;
		return 0;
	}
	id = get_u64(&k);
	ret = count(sm, id, old, olen, -1);
	if (ret == 0)
		ret = count(sm, id, val, vlen, +1);
	if (ret < 0)
		sm->drop = 1; /* out of memory: the rows go, never the commit */
	return 0;
}

static void on_cleared(void *ctx)
{
	((struct spacemap *)ctx)->drop = 1;
}

static int by_extent(const void *a, const void *b)
{
	const struct change *x = a, *y = b;

	if (x->lun != y->lun)
		return x->lun < y->lun ? -1 : 1;
	if (x->sector != y->sector)
		return x->sector < y->sector ? -1 : 1;
	if (x->n != y->n)
		return x->n < y->n ? -1 : 1;
	return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* The transaction's changes netted per extent into a "d" row's entries
 * (*@row, *@len bytes). @return 0, -ENOMEM, STOR_ECORRUPT */
static int net_row(struct spacemap *sm, uint8_t **row, size_t *len)
{
	uint8_t *w;
	size_t i, j;

	*row = NULL;
	*len = 0;
	qsort(sm->c, sm->nc, sizeof(*sm->c), by_extent);
	w = *row = malloc(sm->nc * SM_ENTRY + 1);
	if (!w)
		return -ENOMEM;
	for (i = 0; i < sm->nc; i = j) {
		int net = 0;

		for (j = i; j < sm->nc && sm->c[j].lun == sm->c[i].lun &&
			    sm->c[j].sector == sm->c[i].sector && sm->c[j].n == sm->c[i].n;
		     j++)
			net += sm->c[j].sign;
		if (net < -1 || net > 1)
			return STOR_ECORRUPT;
		if (net == 0)
			continue;
		put_u8(&w, net > 0 ? SM_ADD : SM_DEL);
		put_u16(&w, sm->c[i].lun);
		put_u32(&w, sm->c[i].n);
		put_u64(&w, sm->c[i].sector);
	}
	*len = (size_t)(w - *row);
	return 0;
}

static int put_sums(struct spacemap *sm, struct meta_txn *t)
{
	int ret = 0;

	for (size_t i = 0; i < sm->caps && ret == 0; i++) {
		struct sum_slot *s = &sm->s[i];
		uint64_t have[3] = { 0 };
		uint8_t k[9], v[24], *w = v;
		const uint8_t *r;
		const void *old;
		size_t olen;

		if (!s->used || (!s->psize && !s->lsize && !s->nenc))
			continue;
		id_key(k, 'o', s->id);
		ret = meta_get(t, META_SPACE, k, sizeof(k), &old, &olen);
		if (ret == 0 && olen == sizeof(v)) {
			r = old;
			for (int f = 0; f < 3; f++)
				have[f] = get_u64(&r);
		} else if (ret == 0 || ret != -ENOENT) {
			return ret < 0 ? ret : STOR_ECORRUPT;
		}
		have[0] += s->psize;
		have[1] += s->lsize;
		have[2] += s->nenc;
		if (!have[0] && !have[1] && !have[2]) {
			ret = meta_del(t, META_SPACE, k, sizeof(k));
			continue;
		}
		for (int f = 0; f < 3; f++)
			put_u64(&w, have[f]);
		ret = meta_put(t, META_SPACE, k, sizeof(k), v, sizeof(v));
	}
	return ret;
}

/* An entry of a "d" row at @r (SM_ENTRY bytes) as a change. */
static struct change entry_at(const uint8_t *r, uint64_t ord)
{
	struct change c;

	c.sign = get_u8(&r) == SM_ADD ? +1 : -1;
	c.lun = get_u16(&r);
	c.n = get_u32(&r);
	c.sector = get_u64(&r);
	c.ord = ord;
	return c;
}

struct gather {
	struct change *c;
	size_t n, cap;
	uint64_t ord;
};

/* Each entry of a "d" row, split where it crosses into the next chunk;
 * a row's removals rank before its additions. */
static int gather_row(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct gather *g = ctx;

	(void)key, (void)klen;
	if (vlen % SM_ENTRY)
		return STOR_ECORRUPT;
	for (int pass = -1; pass <= 1; pass += 2) {
		for (size_t off = 0; off < vlen; off += SM_ENTRY) {
			struct change c = entry_at((const uint8_t *)val + off, g->ord);

			if (c.sign != pass)
				continue;
			while (c.n) {
				uint64_t room = SM_CHUNK - c.sector % SM_CHUNK;
				struct change *v = array_grow(g->c, g->n, &g->cap, sizeof(*v), 1024);

				if (!v)
					return -ENOMEM;
				g->c = v;
				g->c[g->n] = c;
				if (c.n > room)
					g->c[g->n].n = (uint32_t)room;
				c.sector += g->c[g->n].n;
				c.n -= g->c[g->n].n;
				g->n++;
			}
			g->ord++;
		}
	}
	return 0;
}

static int by_chunk(const void *a, const void *b)
{
	const struct change *x = a, *y = b;

	if (x->lun != y->lun)
		return x->lun < y->lun ? -1 : 1;
	if (x->sector / SM_CHUNK != y->sector / SM_CHUNK)
		return x->sector / SM_CHUNK < y->sector / SM_CHUNK ? -1 : 1;
	return x->ord < y->ord ? -1 : x->ord > y->ord;
}

static int all_clear(const uint64_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (w[i])
			return 0;
	return 1;
}

/* The "d" rows into the chunks they touch, one chunk at a time. */
static int fold(struct meta_txn *t)
{
	struct gather g = { 0 };
	uint64_t *words = malloc(SM_WORDS * sizeof(uint64_t));
	uint8_t buf[SM_WORDS * 8];
	int ret = words ? meta_iter(t, META_SPACE, "d", 1, 1, gather_row, &g) : -ENOMEM;

	if (ret == 0)
		qsort(g.c, g.n, sizeof(*g.c), by_chunk);
	for (size_t i = 0, j; ret == 0 && i < g.n; i = j) {
		uint64_t chunk = g.c[i].sector / SM_CHUNK;
		uint8_t k[7], *w = buf;
		const uint8_t *r;
		const void *v;
		size_t vlen;

		chunk_key(k, g.c[i].lun, chunk);
		ret = meta_get(t, META_SPACE, k, sizeof(k), &v, &vlen);
		memset(words, 0, SM_WORDS * sizeof(uint64_t));
		if (ret == 0 && vlen == sizeof(buf)) {
			r = v;
			for (size_t x = 0; x < SM_WORDS; x++)
				words[x] = get_u64(&r);
		} else if (ret == 0 || ret != -ENOENT) {
			ret = ret < 0 ? ret : STOR_ECORRUPT;
			break;
		}
		ret = 0;
		for (j = i; ret == 0 && j < g.n && g.c[j].lun == g.c[i].lun &&
			    g.c[j].sector / SM_CHUNK == chunk;
		     j++)
			ret = apply(words, chunk * SM_CHUNK, SM_CHUNK, g.c[j].sector, g.c[j].n,
				    g.c[j].sign);
		if (ret < 0)
			break;
		if (all_clear(words, SM_WORDS)) {
			ret = meta_del(t, META_SPACE, k, sizeof(k));
			ret = ret == -ENOENT ? 0 : ret;
			continue;
		}
		for (size_t x = 0; x < SM_WORDS; x++)
			put_u64(&w, words[x]);
		ret = meta_put(t, META_SPACE, k, sizeof(k), buf, sizeof(buf));
	}
	free(g.c);
	free(words);
	return ret;
}

static int drop_rows(struct spacemap *sm, struct meta_txn *t, const char *why)
{
	sm->next_on = 0;
	metalog_notef(sm->p, "free map rows dropped (%s): the next import walks the block "
			     "pointers and writes them anew", why);
	return meta_clear(t, META_SPACE);
}

static int on_commit(void *ctx, struct meta_txn *t)
{
	struct spacemap *sm = ctx;
	uint8_t hdr[20], key[9], *row = NULL;
	size_t len = 0;
	int ret;

	sm->next_on = sm->on;
	sm->next_seq = sm->seq;
	sm->next_logged = sm->logged;
	if (!sm->on)
		return 0;
	if (sm->drop)
		return drop_rows(sm, t, "the block pointers were replaced whole");
	if (!sm->nc && !sm->ns)
		return 0;
	ret = net_row(sm, &row, &len);
	if (ret == STOR_ECORRUPT || ret == -ENOMEM) {
		free(row);
		return drop_rows(sm, t, ret == -ENOMEM ? "out of memory"
							: "a commit's changes do not add up");
	}
	if (ret == 0 && len) {
		id_key(key, 'd', sm->next_seq++);
		ret = meta_put(t, META_SPACE, key, sizeof(key), row, len);
		sm->next_logged += len;
	}
	free(row);
	if (ret == 0)
		ret = put_sums(sm, t);
	if (ret == 0 && sm->next_logged > spacemap_fold_bytes) {
		ret = fold(t);
		sm->next_logged = 0;
		if (ret == STOR_ECORRUPT || ret == -ENOMEM)
			return drop_rows(sm, t, ret == -ENOMEM ? "out of memory"
							    : "the changes do not add up with the chunks");
	}
	if (ret == 0) {
		header_encode(hdr, sm->next_seq, sm->next_logged);
		ret = meta_put(t, META_SPACE, "h", 1, hdr, sizeof(hdr));
	}
	return ret;
}

static void on_end(void *ctx, int committed)
{
	struct spacemap *sm = ctx;

	if (committed) {
		sm->on = sm->next_on;
		sm->seq = sm->next_seq;
		sm->logged = sm->next_logged;
	}
	sm->drop = 0;
	sm->nc = 0;
	if (sm->ns)
		memset(sm->s, 0, sm->caps * sizeof(*sm->s));
	sm->ns = 0;
}

int spacemap_attach(struct stor_pool *p, struct meta *m, struct spacemap **out)
{
	struct spacemap *sm = calloc(1, sizeof(*sm));
	struct meta_txn *t = NULL;
	int ret = sm ? meta_rtxn_get(m, &t) : -ENOMEM;

	*out = NULL;
	if (ret == 0) {
		ret = header_get(t, &sm->seq, &sm->logged);
		meta_rtxn_put(t);
	}
	/* rows of another version, or none: as if none, made anew at import */
	sm->on = ret == 0;
	if (ret < 0 && ret != -ENOENT && ret != STOR_ECORRUPT) {
		free(sm);
		return ret;
	}
	sm->p = p;
	sm->m = m;
	meta_watch(m, META_BP,
		   &(struct meta_watch){ on_change, on_cleared, on_commit, on_end, sm });
	*out = sm;
	return 0;
}

void spacemap_free(struct spacemap *sm)
{
	if (!sm)
		return;
	meta_watch(sm->m, META_BP, NULL);
	free(sm->c);
	free(sm->s);
	free(sm);
}

/* ---- reading the rows ---- */

struct view {
	unsigned nluns;
	uint64_t *const *bits;
	const uint64_t *nsectors;
};

static int view_chunk(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct view *v = ctx;
	const uint8_t *k = key, *r = val;
	unsigned lun;
	uint64_t first;

	if (klen != 7 || vlen != SM_WORDS * 8)
		return STOR_ECORRUPT;
	get_u8(&k);
	lun = get_u16(&k);
	first = (uint64_t)get_u32(&k) * SM_CHUNK;
	if (lun >= v->nluns || first >= v->nsectors[lun])
		return STOR_ECORRUPT;
	for (uint64_t x = 0; x < SM_WORDS; x++) {
		uint64_t word = get_u64(&r), at = first + x * 64;

		if (at >= v->nsectors[lun]) {
			if (word)
				return STOR_ECORRUPT;
			continue;
		}
		/* bits past the LUN's end in its last word */
		if (v->nsectors[lun] - at < 64 && (word >> (v->nsectors[lun] - at)))
			return STOR_ECORRUPT;
		v->bits[lun][at / 64] = word;
	}
	return 0;
}

static int view_row(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct view *v = ctx;

	(void)key, (void)klen;
	if (vlen % SM_ENTRY)
		return STOR_ECORRUPT;
	for (int pass = -1; pass <= 1; pass += 2)
		for (size_t off = 0; off < vlen; off += SM_ENTRY) {
			struct change c = entry_at((const uint8_t *)val + off, 0);
			int ret;

			if (c.sign != pass)
				continue;
			if (c.lun >= v->nluns)
				return STOR_ECORRUPT;
			ret = apply(v->bits[c.lun], 0, v->nsectors[c.lun], c.sector, c.n, c.sign);
			if (ret < 0)
				return ret;
		}
	return 0;
}

int spacemap_view(struct meta_txn *t, unsigned nluns, uint64_t *const bits[],
		  const uint64_t nsectors[])
{
	struct view v = { nluns, bits, nsectors };
	uint64_t seq, logged;
	int ret = header_get(t, &seq, &logged);

	if (ret == 0)
		ret = meta_iter(t, META_SPACE, "m", 1, 0, view_chunk, &v);
	if (ret == 0)
		ret = meta_iter(t, META_SPACE, "d", 1, 0, view_row, &v);
	return ret;
}

struct sums {
	sm_sum_fn fn;
	void *ctx;
};

static int sum_row(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct sums *s = ctx;
	const uint8_t *k = key, *r = val;
	struct sm_sum sum;

	if (klen != 9 || vlen != 24)
		return STOR_ECORRUPT;
	get_u8(&k);
	sum.id = get_u64(&k);
	sum.psize = get_u64(&r);
	sum.lsize = get_u64(&r);
	sum.nenc = get_u64(&r);
	return s->fn(s->ctx, &sum);
}

int spacemap_sums(struct meta_txn *t, sm_sum_fn fn, void *ctx)
{
	struct sums s = { fn, ctx };
	uint64_t seq, logged;
	int ret = header_get(t, &seq, &logged);

	return ret < 0 ? ret : meta_iter(t, META_SPACE, "o", 1, 0, sum_row, &s);
}

static int sum_nothing(void *ctx, const struct sm_sum *s)
{
	(void)ctx, (void)s;
	return 0;
}

int spacemap_load(struct spacemap *sm, struct alloc *a, sm_sum_fn fn, void *ctx)
{
	unsigned n = atomic_load(&sm->p->nluns);
	uint64_t *bits[STOR_LUNS_MAX] = { 0 }, nsectors[STOR_LUNS_MAX] = { 0 };
	struct meta_txn *t = NULL;
	int ret = 0, walk = 0;

	if (!sm->on)
		return 0;
	for (unsigned i = 0; i < n && ret == 0; i++) {
		uint64_t used;

		alloc_usage(a, i, &used, &nsectors[i]);
		bits[i] = calloc((nsectors[i] + 63) / 64 + 1, sizeof(uint64_t));
		if (!bits[i])
			ret = -ENOMEM;
	}
	if (ret == 0)
		ret = meta_rtxn_get(sm->m, &t);
	if (ret == 0) {
		ret = spacemap_view(t, n, bits, nsectors);
		if (ret == 0)
			ret = spacemap_sums(t, sum_nothing, NULL); /* each row well formed */
		if (ret == STOR_ECORRUPT) {
			walk = 1;
			metalog_notef(sm->p, "the free map's rows do not add up: the block "
					     "pointers walked instead, and the rows written anew");
			meta_rtxn_put(t);
			goto out;
		}
		/* cannot fail: nothing else is marked yet, and the view kept
		 * to each LUN's end */
		for (unsigned i = 0; i < n && ret == 0; i++)
			ret = alloc_mark_words(a, i, bits[i], (nsectors[i] + 63) / 64);
		if (ret == 0)
			ret = spacemap_sums(t, fn, ctx);
		meta_rtxn_put(t);
	}
out:
	for (unsigned i = 0; i < n; i++)
		free(bits[i]);
	return walk ? 0 : ret < 0 ? ret : 1;
}

int spacemap_write_base(struct spacemap *sm, struct alloc *a, const struct sm_sum *sums, size_t n)
{
	unsigned nluns = atomic_load(&sm->p->nluns);
	uint64_t words[SM_WORDS], bytes = n * 33 + 64;
	uint8_t buf[SM_WORDS * 8], hdr[20];
	struct meta_txn *t = NULL;
	int ret;

	if (!a)
		nluns = 0; /* nothing held */
	for (unsigned i = 0; i < nluns; i++) {
		uint64_t used, total;

		alloc_usage(a, i, &used, &total);
		bytes += total / 8 + 64;
	}
	ret = meta_reserve(sm->m, bytes * 2);
	if (ret == 0)
		ret = meta_txn_begin(sm->m, &t);
	if (ret < 0)
		return ret;
	ret = meta_clear(t, META_SPACE);
	for (unsigned i = 0; i < nluns && ret == 0; i++) {
		uint64_t used, total;

		alloc_usage(a, i, &used, &total);
		for (uint64_t c = 0; c * SM_CHUNK < total && ret == 0; c++) {
			uint8_t k[7], *w = buf;

			alloc_copy_words(a, i, c * SM_WORDS, words, SM_WORDS);
			if (all_clear(words, SM_WORDS))
				continue;
			for (size_t x = 0; x < SM_WORDS; x++)
				put_u64(&w, words[x]);
			chunk_key(k, i, c);
			ret = meta_put(t, META_SPACE, k, sizeof(k), buf, sizeof(buf));
		}
	}
	for (size_t i = 0; i < n && ret == 0; i++) {
		uint8_t k[9], v[24], *w = v;

		if (!sums[i].psize && !sums[i].lsize && !sums[i].nenc)
			continue;
		id_key(k, 'o', sums[i].id);
		put_u64(&w, sums[i].psize);
		put_u64(&w, sums[i].lsize);
		put_u64(&w, sums[i].nenc);
		ret = meta_put(t, META_SPACE, k, sizeof(k), v, sizeof(v));
	}
	header_encode(hdr, 0, 0);
	if (ret == 0)
		ret = meta_put(t, META_SPACE, "h", 1, hdr, sizeof(hdr));
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	ret = meta_txn_commit(t);
	if (ret == 0) {
		sm->on = 1;
		sm->seq = sm->logged = 0;
	}
	return ret;
}
