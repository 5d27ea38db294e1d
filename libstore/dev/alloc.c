/* SPDX-License-Identifier: MIT */
/*
 * One bitmap per LUN (a set bit is a used sector), each under its own lock,
 * with a next-fit cursor; successive allocations rotate over the LUNs so
 * records are striped. Owns no persistent state (see alloc.h).
 *
 * Metadata reserve: a txg commit writes its log record (metalog.c) into
 * the data space, so a pool that data filled could not commit the txg
 * that would free space. alloc_get() leaves meta_reserve() sectors of
 * each LUN to alloc_get_on(), which the log uses.
 *
 * The reserve is a count, not a region (the log's extents lie anywhere):
 * data leaves free on each LUN what the log holds less than its reserve,
 * so the log takes no sector data counts on until it outgrows the reserve.
 * What it holds beyond (a checkpoint of a large pool, the record of a txg
 * that filled it) is data's loss: alloc_data_free() counts it as used, so
 * that new data stops short of the slop space (space.c) and overwrites
 * still find it.
 *
 * A LUN cut short (its file truncated below the size the pool record
 * gives, alloc_set_cut) keeps block pointers past its new end: their
 * records are lost, but marking and freeing them must not fail the import
 * or count as bad frees. Such extents touch only the part of the map that
 * remains; the sectors past the end are never handed out.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "store.h"

struct lun_map {
	pthread_mutex_t lock;
	uint64_t *bits;
	uint64_t nsectors;
	uint64_t used;
	uint64_t cursor;
	uint64_t meta; /* of used: the metadata log's */
	uint64_t was; /* sectors before it was cut short (alloc_set_cut), else 0 */
	int faulted;
};

struct alloc {
	struct lun_map *luns[STOR_LUNS_MAX];
	atomic_uint nluns;
	atomic_uint rotor;
	atomic_uint_fast64_t bad_frees; /* refused alloc_put()s */
	/* over every LUN, for space accounting (space.c) without taking each lock:
	 * the space data may take (the reserves left out) and what data holds */
	atomic_uint_fast64_t total, used;
	atomic_uint_fast64_t excess; /* the log's sectors beyond each LUN's reserve */
};

int alloc_create(struct alloc **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void alloc_destroy(struct alloc *a)
{
	if (!a)
		return;
	for (unsigned i = 0; i < atomic_load(&a->nluns); i++) {
		pthread_mutex_destroy(&a->luns[i]->lock);
		free(a->luns[i]->bits);
		free(a->luns[i]);
	}
	free(a);
}

int alloc_lun_new(uint64_t sectors, struct alloc_lun **out)
{
	struct lun_map *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->bits = calloc((sectors + 63) / 64, sizeof(uint64_t));
	if (!m->bits) {
		free(m);
		return -ENOMEM;
	}
	m->nsectors = sectors;
	pthread_mutex_init(&m->lock, NULL);
	*out = (struct alloc_lun *)m;
	return 0;
}

void alloc_lun_free(struct alloc_lun *map)
{
	struct lun_map *m = (struct lun_map *)map;

	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m->bits);
	free(m);
}

/* Sectors of a LUN of @nsectors that only metadata may take: 1/16, at least
 * 8 on a LUN of 128 or more, at most 256 (1 MiB). Room for the log record
 * of a txg that filled a small pool, in two copies. */
static uint64_t meta_reserve(uint64_t nsectors)
{
	uint64_t r = nsectors / 16;

	if (r < 8 && nsectors >= 128)
		r = 8;
	return r > 256 ? 256 : r;
}

/* What of @m's reserve the log does not hold yet: data leaves it free (m->lock held). */
static uint64_t reserve_left(const struct lun_map *m)
{
	uint64_t r = meta_reserve(m->nsectors);

	STOR_ASSERT_HELD(&m->lock);

	return r > m->meta ? r - m->meta : 0;
}

static uint64_t excess_of(const struct lun_map *m)
{
	uint64_t r = meta_reserve(m->nsectors);

	return m->meta > r ? m->meta - r : 0;
}

/* The log of @m holds @n sectors more (@on) or fewer (m->lock held). */
static void meta_count(struct alloc *a, struct lun_map *m, uint32_t n, int on)
{
	uint64_t was, now;

	STOR_ASSERT_HELD(&m->lock);
	was = excess_of(m);
	m->meta = on ? m->meta + n : m->meta - n;
	now = excess_of(m);
	if (now > was)
		atomic_fetch_add(&a->excess, now - was);
	else
		atomic_fetch_sub(&a->excess, was - now);
}

void alloc_publish_lun(struct alloc *a, struct alloc_lun *map)
{
	unsigned n = atomic_load(&a->nluns);

	a->luns[n] = (struct lun_map *)map;
	atomic_fetch_add(&a->used, a->luns[n]->used - a->luns[n]->meta);
	atomic_fetch_add(&a->excess, excess_of(a->luns[n]));
	atomic_fetch_add(&a->total, a->luns[n]->nsectors - meta_reserve(a->luns[n]->nsectors));
	atomic_store(&a->nluns, n + 1); /* publish after the map is complete */
}

int alloc_add_lun(struct alloc *a, uint64_t sectors)
{
	struct alloc_lun *m;
	int ret;

	if (atomic_load(&a->nluns) >= STOR_LUNS_MAX)
		return -E2BIG;
	ret = alloc_lun_new(sectors, &m);
	if (ret == 0)
		alloc_publish_lun(a, m);
	return ret;
}

int alloc_grow(struct alloc *a, unsigned lun, uint64_t sectors)
{
	struct lun_map *m;
	uint64_t *bits, old_words, new_words, was_total, was_excess;

	if (lun >= atomic_load(&a->nluns))
		return -ENOENT;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	if (m->was) {
		/* extents past the cut still name sectors there: never hand them out */
		pthread_mutex_unlock(&m->lock);
		return -EINVAL;
	}
	if (sectors <= m->nsectors) {
		pthread_mutex_unlock(&m->lock);
		return 0;
	}
	old_words = (m->nsectors + 63) / 64;
	new_words = (sectors + 63) / 64;
	bits = realloc(m->bits, new_words * sizeof(*bits));
	if (!bits) {
		pthread_mutex_unlock(&m->lock);
		return -ENOMEM;
	}
	/* the new sectors are free; the last old word's bits past its end were never set */
	for (uint64_t w = old_words; w < new_words; w++)
		bits[w] = 0;
	m->bits = bits;
	was_total = m->nsectors - meta_reserve(m->nsectors);
	was_excess = excess_of(m);
	m->nsectors = sectors;
	atomic_fetch_add(&a->total, m->nsectors - meta_reserve(m->nsectors) - was_total);
	if (excess_of(m) < was_excess) /* a larger LUN has a larger reserve */
		atomic_fetch_sub(&a->excess, was_excess - excess_of(m));
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int test_bit(const uint64_t *b, uint64_t i)
{
	return (b[i / 64] >> (i % 64)) & 1;
}

static void set_range(uint64_t *b, uint64_t s, uint32_t n, int on)
{
	for (uint64_t i = s; i < s + n; i++) {
		if (on)
			b[i / 64] |= 1ull << (i % 64);
		else
			b[i / 64] &= ~(1ull << (i % 64));
	}
}

/* An extent of a LUN cut short that reaches past its end: clipped to the
 * part that remains (possibly none). Under m->lock. */
static void clip(const struct lun_map *m, uint64_t sector, uint32_t *n)
{
	STOR_ASSERT_HELD(&m->lock);

	if (m->was <= m->nsectors || sector + *n > m->was || sector + *n < sector ||
	    sector + *n <= m->nsectors)
		return;
	*n = sector < m->nsectors ? (uint32_t)(m->nsectors - sector) : 0;
}

static int mark(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n, int meta)
{
	struct lun_map *m;
	int ret = 0;

	if (lun >= atomic_load(&a->nluns) || n == 0)
		return STOR_ECORRUPT;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	clip(m, sector, &n);
	if (n == 0)
		goto out;
	if (sector + n > m->nsectors || sector + n < sector) {
		ret = STOR_ECORRUPT;
		goto out;
	}
	for (uint64_t i = sector; i < sector + n; i++)
		if (test_bit(m->bits, i)) {
			ret = STOR_ECORRUPT;
			goto out;
		}
	set_range(m->bits, sector, n, 1);
	m->used += n;
	if (meta)
		meta_count(a, m, n, 1);
	else
		atomic_fetch_add(&a->used, n);
out:
	pthread_mutex_unlock(&m->lock);
	return ret;
}

int alloc_mark(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n)
{
	return mark(a, lun, sector, n, 0);
}

int alloc_mark_meta(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n)
{
	return mark(a, lun, sector, n, 1);
}

int alloc_mark_words(struct alloc *a, unsigned lun, const uint64_t *words, uint64_t nwords)
{
	struct lun_map *m;
	uint64_t n = 0, have;
	int ret = 0;

	if (lun >= atomic_load(&a->nluns))
		return STOR_ECORRUPT;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	have = (m->nsectors + 63) / 64;
	for (uint64_t w = 0; w < nwords && ret == 0; w++) {
		uint64_t past = w + 1 == have && m->nsectors % 64 ? ~0ull << (m->nsectors % 64) : 0;

		if (words[w] && (w >= have || (words[w] & (m->bits[w] | past))))
			ret = STOR_ECORRUPT;
		else if (w < have)
			n += (uint64_t)__builtin_popcountll(words[w]);
	}
	if (ret == 0) {
		for (uint64_t w = 0; w < nwords && w < have; w++)
			m->bits[w] |= words[w];
		m->used += n;
		atomic_fetch_add(&a->used, n);
	}
	pthread_mutex_unlock(&m->lock);
	return ret;
}

void alloc_copy_words(struct alloc *a, unsigned lun, uint64_t first, uint64_t *out, uint64_t n)
{
	struct lun_map *m = a->luns[lun];
	uint64_t have;

	pthread_mutex_lock(&m->lock);
	have = (m->nsectors + 63) / 64;
	for (uint64_t w = 0; w < n; w++)
		out[w] = first + w < have ? m->bits[first + w] : 0;
	pthread_mutex_unlock(&m->lock);
}


/* Next fit: a run of n clear bits from the cursor, wrapping once. */
static int find_run(struct lun_map *m, uint32_t n, uint64_t *out)
{
	uint64_t start = m->cursor, i = start, run = 0, scanned = 0;

	if (m->nsectors - m->used < n)
		return -1;
	while (scanned < m->nsectors + n) {
		if (i >= m->nsectors) {
			i = 0;
			run = 0;
		}
		if ((i % 64) == 0 && run == 0 && m->bits[i / 64] == ~0ull &&
		    i + 64 <= m->nsectors) {
			i += 64;
			scanned += 64;
			continue;
		}
		if (test_bit(m->bits, i)) {
			run = 0;
		} else if (++run == n) {
			*out = i + 1 - n;
			return 0;
		}
		i++;
		scanned++;
	}
	return -1;
}

int alloc_get(struct alloc *a, uint32_t n, unsigned *lun, uint64_t *sector)
{
	unsigned nluns = atomic_load(&a->nluns);
	unsigned first;

	if (nluns == 0)
		return STOR_ENOSPC;
	first = atomic_fetch_add(&a->rotor, 1) % nluns;
	for (unsigned k = 0; k < nluns; k++) {
		unsigned l = (first + k) % nluns;
		struct lun_map *m = a->luns[l];
		uint64_t s;

		pthread_mutex_lock(&m->lock);
		if (!m->faulted && m->nsectors - m->used >= n + reserve_left(m) &&
		    find_run(m, n, &s) == 0) {
			set_range(m->bits, s, n, 1);
			m->used += n;
			m->cursor = s + n;
			pthread_mutex_unlock(&m->lock);
			atomic_fetch_add(&a->used, n);
			*lun = l;
			*sector = s;
			return 0;
		}
		pthread_mutex_unlock(&m->lock);
	}
	return STOR_ENOSPC;
}

int alloc_claim_free(struct alloc *a, unsigned lun, uint64_t from, uint32_t max,
		     uint64_t *sector, uint32_t *n)
{
	struct lun_map *m;
	uint64_t i;
	int ret = -ENOENT;

	if (lun >= atomic_load(&a->nluns) || max == 0)
		return -ENOENT;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	for (i = from; i < m->nsectors && test_bit(m->bits, i); i++)
		if ((i % 64) == 0 && m->bits[i / 64] == ~0ull && i + 64 <= m->nsectors)
			i += 63; /* a word of used sectors at once */
	/* never into what the metadata log may need for a commit meanwhile */
	if (m->nsectors - m->used <= reserve_left(m))
		max = 0;
	else if (max > m->nsectors - m->used - reserve_left(m))
		max = (uint32_t)(m->nsectors - m->used - reserve_left(m));
	if (i < m->nsectors && !m->faulted && !max)
		ret = STOR_ENOSPC;
	if (i < m->nsectors && !m->faulted && max) {
		*sector = i;
		for (*n = 0; *n < max && i + *n < m->nsectors && !test_bit(m->bits, i + *n);)
			(*n)++;
		/* as data: a writer meanwhile sees it used, and alloc_put gives it back */
		set_range(m->bits, i, *n, 1);
		m->used += *n;
		atomic_fetch_add(&a->used, *n);
		ret = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return ret;
}

int alloc_get_on(struct alloc *a, unsigned lun, uint32_t n, uint64_t *sector)
{
	struct lun_map *m;
	int ret = STOR_ENOSPC;

	if (lun >= atomic_load(&a->nluns) || n == 0)
		return STOR_ENOSPC;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	if (!m->faulted && find_run(m, n, sector) == 0) {
		set_range(m->bits, *sector, n, 1);
		m->used += n;
		m->cursor = *sector + n;
		meta_count(a, m, n, 1);
		ret = 0;
	}
	pthread_mutex_unlock(&m->lock);
	return ret;
}

static int set_faulted(struct alloc *a, unsigned lun, int faulted)
{
	int was;

	if (lun >= atomic_load(&a->nluns))
		return faulted;
	pthread_mutex_lock(&a->luns[lun]->lock);
	was = a->luns[lun]->faulted;
	a->luns[lun]->faulted = faulted;
	pthread_mutex_unlock(&a->luns[lun]->lock);
	return was;
}

int alloc_set_faulted(struct alloc *a, unsigned lun)
{
	return !set_faulted(a, lun, 1);
}

void alloc_clear_faulted(struct alloc *a, unsigned lun)
{
	(void)set_faulted(a, lun, 0);
}

static int put(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n, int meta)
{
	struct lun_map *m;
	int ret = 0;

	if (lun >= atomic_load(&a->nluns)) {
		atomic_fetch_add(&a->bad_frees, 1);
		return STOR_ECORRUPT;
	}
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	clip(m, sector, &n);
	if (sector + n > m->nsectors || sector + n < sector)
		ret = STOR_ECORRUPT;
	for (uint64_t i = sector; ret == 0 && i < sector + n; i++)
		if (!test_bit(m->bits, i))
			ret = STOR_ECORRUPT; /* freed twice: another record may own it now */
	if (ret == 0 && n) {
		set_range(m->bits, sector, n, 0);
		m->used -= n;
		if (meta)
			meta_count(a, m, n, 0);
		else
			atomic_fetch_sub(&a->used, n);
	}
	pthread_mutex_unlock(&m->lock);
	if (ret < 0)
		atomic_fetch_add(&a->bad_frees, 1);
	return ret;
}

int alloc_put(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n)
{
	return put(a, lun, sector, n, 0);
}

int alloc_put_meta(struct alloc *a, unsigned lun, uint64_t sector, uint32_t n)
{
	return put(a, lun, sector, n, 1);
}

void alloc_set_cut(struct alloc *a, unsigned lun, uint64_t was)
{
	if (lun < atomic_load(&a->nluns))
		a->luns[lun]->was = was;
}

uint64_t alloc_bad_frees(struct alloc *a)
{
	return atomic_load(&a->bad_frees);
}

void alloc_usage(struct alloc *a, unsigned lun, uint64_t *used, uint64_t *total)
{
	struct lun_map *m;

	*used = *total = 0;
	if (lun >= atomic_load(&a->nluns))
		return;
	m = a->luns[lun];
	pthread_mutex_lock(&m->lock);
	*used = m->used;
	*total = m->nsectors;
	pthread_mutex_unlock(&m->lock);
}

void alloc_totals(struct alloc *a, uint64_t *used, uint64_t *total)
{
	*used = atomic_load(&a->used);
	*total = atomic_load(&a->total);
}

uint64_t alloc_data_free(struct alloc *a, uint64_t *log)
{
	uint64_t total = atomic_load(&a->total), excess = atomic_load(&a->excess);
	uint64_t taken = atomic_load(&a->used) + excess;

	*log = excess;
	return total > taken ? total - taken : 0;
}
