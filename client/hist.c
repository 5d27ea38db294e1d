/* SPDX-License-Identifier: MIT */
/*
 * hist.c owns the bucket arithmetic of the latency histogram. Bucket i of
 * group g = i / HIST_SUB (g >= 1) covers values whose highest set bit is
 * HIST_SUB_BITS + g - 1, in steps of 2^(g-1); group 0 and 1 together count
 * 0 .. 2*HIST_SUB-1 one value per bucket. No allocation, no locking: callers
 * keep one histogram per thread and merge them.
 */

#include <math.h>
#include <string.h>

#include "hist.h"

void hist_init(struct hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

unsigned hist_bucket(uint64_t v)
{
	unsigned msb, shift;

	if (v < HIST_SUB)
		return (unsigned)v;
	msb = 63 - (unsigned)__builtin_clzll(v);
	shift = msb - HIST_SUB_BITS;
	/* (v >> shift) is in [HIST_SUB, 2*HIST_SUB): the sub-bucket plus HIST_SUB */
	return (shift + 1) * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

uint64_t hist_bucket_low(unsigned i)
{
	unsigned g = i / HIST_SUB, s = i % HIST_SUB;

	if (g == 0)
		return s;
	return (uint64_t)(HIST_SUB + s) << (g - 1);
}

uint64_t hist_bucket_high(unsigned i)
{
	unsigned g = i / HIST_SUB;

	if (g == 0)
		return hist_bucket_low(i);
	return hist_bucket_low(i) + ((uint64_t)1 << (g - 1)) - 1;
}

void hist_add(struct hist *h, uint64_t v)
{
	h->b[hist_bucket(v)]++;
	h->count++;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->sum += (double)v;
	h->sumsq += (double)v * (double)v;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
	if (!src->count)
		return;
	for (unsigned i = 0; i < HIST_NBUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->sum += src->sum;
	dst->sumsq += src->sumsq;
}

uint64_t hist_percentile(const struct hist *h, double p)
{
	uint64_t rank, seen = 0, v;

	if (!h->count)
		return 0;
	if (p >= 100.0)
		return h->max;
	/* the epsilon keeps 99.9 % of 10000 at rank 9990 despite binary fractions */
	rank = (uint64_t)ceil(p / 100.0 * (double)h->count - 1e-7);
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < HIST_NBUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			v = hist_bucket_high(i);
			if (v > h->max)
				v = h->max;
			if (v < h->min)
				v = h->min;
			return v;
		}
	}
	return h->max;
}

double hist_mean(const struct hist *h)
{
	return h->count ? h->sum / (double)h->count : 0.0;
}

double hist_stddev(const struct hist *h)
{
	double m, var;

	if (!h->count)
		return 0.0;
	m = h->sum / (double)h->count;
	var = h->sumsq / (double)h->count - m * m;
	return var > 0 ? sqrt(var) : 0.0;
}
