/* SPDX-License-Identifier: MIT */
/* The latency histogram of coffer bench: bucket bounds, percentiles on known distributions, merge. */

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "hist.h"

static struct hist *h;

static void setup(void)
{
	h = malloc(sizeof(*h));
	cr_assert_not_null(h);
	hist_init(h);
}

static void teardown(void)
{
	free(h);
}

TestSuite(hist, .init = setup, .fini = teardown, .timeout = 240);

/* the answer is never below the truth and at most one bucket (1/128) above */
static void assert_close(uint64_t got, uint64_t want)
{
	cr_assert_geq(got, want, "got %llu want %llu", (unsigned long long)got,
		      (unsigned long long)want);
	cr_assert_leq((double)got, (double)want * (1.0 + 1.0 / HIST_SUB) + 1.0, "got %llu want %llu",
		      (unsigned long long)got, (unsigned long long)want);
}

Test(hist, every_value_falls_inside_its_bucket)
{
	uint64_t vals[] = { 0, 1, 127, 128, 129, 255, 256, 257, 1000, 123456789, 1ull << 40,
			    (1ull << 63) + 12345, UINT64_MAX };

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		unsigned b = hist_bucket(vals[i]);

		cr_assert_lt(b, HIST_NBUCKETS);
		cr_assert_leq(hist_bucket_low(b), vals[i]);
		cr_assert_geq(hist_bucket_high(b), vals[i]);
	}
}

Test(hist, buckets_tile_the_value_range_without_gaps)
{
	for (unsigned i = 1; i < HIST_NBUCKETS; i++)
		cr_assert_eq(hist_bucket_low(i), hist_bucket_high(i - 1) + 1, "bucket %u", i);
	cr_assert_eq(hist_bucket_high(HIST_NBUCKETS - 1), UINT64_MAX);
}

Test(hist, small_values_are_exact)
{
	static const double pcts[] = { 50, 90, 99, 100 };

	for (uint64_t v = 1; v <= 100; v++)
		hist_add(h, v);
	/* the value of rank k is k */
	for (unsigned i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		cr_assert_eq(hist_percentile(h, pcts[i]), (uint64_t)pcts[i], "p%g", pcts[i]);
	cr_assert_float_eq(hist_mean(h), 50.5, 1e-9);
}

Test(hist, uniform_distribution_percentiles_within_bucket_precision)
{
	static const double pcts[] = { 50, 90, 99, 99.9 };

	/* 1..1,000,000 ns: the value of rank k is k */
	for (uint64_t v = 1; v <= 1000000; v++)
		hist_add(h, v);
	for (unsigned i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		assert_close(hist_percentile(h, pcts[i]), (uint64_t)(pcts[i] * 10000));
	cr_assert_eq(hist_percentile(h, 100), 1000000);
	cr_assert_eq(h->min, 1);
	cr_assert_float_eq(hist_stddev(h), 1000000 / sqrt(12.0), 1.0);
}

Test(hist, long_tail_is_seen_by_p999_but_not_p99)
{
	/* 9990 fast I/Os at 100 us, 10 slow ones at 50 ms */
	for (int i = 0; i < 9990; i++)
		hist_add(h, 100000);
	for (int i = 0; i < 10; i++)
		hist_add(h, 50000000);
	assert_close(hist_percentile(h, 99), 100000);
	assert_close(hist_percentile(h, 99.9), 100000);
	assert_close(hist_percentile(h, 99.91), 50000000);
	cr_assert_eq(hist_percentile(h, 100), 50000000);
}

Test(hist, merge_of_per_thread_histograms_equals_one_histogram)
{
	struct hist *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));

	cr_assert(a && b);
	hist_init(a);
	hist_init(b);
	for (uint64_t v = 1; v <= 200000; v++) {
		hist_add(h, v * 37);
		hist_add(v % 3 ? a : b, v * 37);
	}
	hist_merge(a, b);
	cr_assert_eq(a->count, h->count);
	cr_assert_eq(a->min, h->min);
	cr_assert_eq(a->max, h->max);
	for (double p = 1; p <= 100; p += 0.5)
		cr_assert_eq(hist_percentile(a, p), hist_percentile(h, p), "p%.1f", p);
	cr_assert_float_eq(hist_mean(a), hist_mean(h), 1e-6);
	free(a);
	free(b);
}

Test(hist, merge_of_an_empty_histogram_changes_nothing)
{
	struct hist *e = malloc(sizeof(*e));

	cr_assert_not_null(e);
	hist_init(e);
	hist_add(h, 42);
	hist_merge(h, e);
	cr_assert_eq(h->count, 1);
	cr_assert_eq(h->min, 42);
	hist_merge(e, h);
	cr_assert_eq(e->min, 42);
	cr_assert_eq(hist_percentile(e, 50), 42);
	free(e);
}

Test(hist, empty_histogram_reports_zero)
{
	cr_assert_eq(hist_percentile(h, 99), 0);
	cr_assert_float_eq(hist_mean(h), 0.0, 1e-12);
	cr_assert_float_eq(hist_stddev(h), 0.0, 1e-12);
}
