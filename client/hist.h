/* SPDX-License-Identifier: MIT */
/*
 * Log-linear latency histogram (the HDR histogram layout): values below
 * 2^HIST_SUB_BITS are counted exactly, above that each power of two is cut
 * into 2^HIST_SUB_BITS equal buckets, so any recorded value is known to
 * within 1/2^HIST_SUB_BITS (0.78 %) of itself. Values are unsigned 64-bit
 * integers (coffer bench records nanoseconds). A histogram is a plain struct
 * of about 60 KiB: one per thread, merged at the end; not thread-safe.
 */
#ifndef COFFER_HIST_H
#define COFFER_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
/* groups 0 and 1 hold 0..2*HIST_SUB-1 exactly, groups 2..64-HIST_SUB_BITS the octaves above */
#define HIST_NBUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t min;
	uint64_t max;
	double sum;   /* for the exact mean */
	double sumsq; /* for the standard deviation */
	uint64_t b[HIST_NBUCKETS];
};

/** Empty @h (count 0). */
void hist_init(struct hist *h);
/** Count one value @v. */
void hist_add(struct hist *h, uint64_t v);
/** Add every count of @src into @dst (per-thread histograms into one). */
void hist_merge(struct hist *dst, const struct hist *src);
/**
 * The value at percentile @p (0 < p <= 100): the highest value of the bucket
 * holding the sample of rank ceil(p/100 * count), clamped to [min, max], so
 * the answer is never below the true one and at most one bucket width above
 * it; p = 100 gives the exact max. @return 0 when empty
 */
uint64_t hist_percentile(const struct hist *h, double p);
/** Exact mean and population standard deviation of the values (0 when empty). */
double hist_mean(const struct hist *h);
double hist_stddev(const struct hist *h);

/** Bucket index of @v and the lowest / highest value counted in bucket @i. */
unsigned hist_bucket(uint64_t v);
uint64_t hist_bucket_low(unsigned i);
uint64_t hist_bucket_high(unsigned i);

#endif
