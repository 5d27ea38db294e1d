/* SPDX-License-Identifier: MIT */
/*
 * cache_sim: hit ratios of the data cache's policies (S3-FIFO, plain LRU) on
 * zipfian traces with and without a one-pass scan mixed in, driven through
 * the real libstore cache as a reader would (get; on a miss take the
 * generation, "read", put). Prints one table row per policy and trace:
 * hit ratio of all accesses, hit ratio of the zipfian accesses alone (a
 * one-pass scan can never hit, so this is what the scan costs the hot
 * set), and ns per access on one thread.
 *
 * Traces: "zipf" (every access zipfian over -r records), "mixed" (every
 * 1/f-th access is the next record of a one-pass scan over -s other records)
 * and "burst" (the same scan in one piece in the middle of the trace).
 *
 *   cache_sim [-n accesses] [-r records] [-s scan records] [-f scan share]
 *             [-c cache % of the working set] [-l record bytes] [-S shards]
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"

#define DS_HOT 1
#define DS_SCAN 2

struct params {
	unsigned long n, records, scan;
	double share, pct;
	size_t len;
	unsigned shards;
};

enum trace { T_ZIPF, T_MIXED, T_BURST };
static const char *const trace_names[] = { "zipf", "mixed", "burst" };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
	/* xorshift64*: a fixed seed, so every policy sees the same trace */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53);
}

/* cumulative distribution of ranks 1..n with weight 1/k^s */
static double *zipf_cdf(unsigned long n, double s)
{
	double *cdf = malloc(n * sizeof(*cdf)), sum = 0;
	unsigned long k;

	if (!cdf)
		return NULL;
	for (k = 0; k < n; k++)
		cdf[k] = sum += 1.0 / pow((double)(k + 1), s);
	for (k = 0; k < n; k++)
		cdf[k] /= sum;
	return cdf;
}

static unsigned long zipf_draw(const double *cdf, unsigned long n)
{
	double u = uniform();
	unsigned long lo = 0, hi = n - 1;

	while (lo < hi) {
		unsigned long mid = lo + (hi - lo) / 2;

		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Is access @i a scan access? */
static int is_scan(const struct params *p, enum trace t, unsigned long i, unsigned long *scanned)
{
	unsigned long start = (p->n - p->scan) / 2;

	if (*scanned >= p->scan)
		return 0;
	switch (t) {
	case T_MIXED:
		return (unsigned long)((i + 1) * p->share) > (unsigned long)(i * p->share);
	case T_BURST:
		return i >= start;
	default:
		return 0;
	}
}

static int run(const struct params *p, enum cache_policy pol, enum trace t, double s,
	       const double *cdf)
{
	struct cache *c = NULL;
	struct cache_stats st;
	unsigned long i, scanned = 0, zipf_n = 0, zipf_hits = 0, hits = 0;
	size_t cap = (size_t)(p->records * p->pct / 100.0) * (p->len + CACHE_ENTRY_OVERHEAD);
	uint8_t *buf = calloc(1, p->len);
	double t0;
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = cache_create_policy(cap, pol, p->shards, &c);
	if (ret < 0)
		goto out;
	rng = 0x9e3779b97f4a7c15ull;
	t0 = now();
	for (i = 0; i < p->n; i++) {
		uint64_t ds, rec;
		int scan = is_scan(p, t, i, &scanned);

		if (scan) {
			ds = DS_SCAN;
			rec = scanned++;
		} else {
			ds = DS_HOT;
			rec = zipf_draw(cdf, p->records);
			zipf_n++;
		}
		if (cache_get(c, ds, rec, buf, p->len) == 0) {
			hits++;
			zipf_hits += !scan;
		} else {
			uint64_t gen = cache_gen(c, ds, rec);

			memcpy(buf, &rec, sizeof(rec)); /* the "read" */
			cache_put(c, ds, rec, buf, p->len, gen);
		}
	}
	t0 = now() - t0;
	cache_stats(c, &st);
	if (st.hits != hits || st.bytes > cap) {
		fprintf(stderr, "cache_sim: stats disagree (hits %lu/%lu, bytes %lu/%zu)\n",
			(unsigned long)st.hits, hits, (unsigned long)st.bytes, cap);
		ret = -EPROTO;
		goto out;
	}
	printf("%-8s %-6s %4.2f  %8.4f  %8.4f  %8lu  %8.0f\n", pol == CACHE_LRU ? "lru" : "s3-fifo",
	       trace_names[t], s, (double)hits / p->n, zipf_n ? (double)zipf_hits / zipf_n : 0,
	       (unsigned long)st.evictions, t0 * 1e9 / p->n);
out:
	cache_destroy(c);
	free(buf);
	return ret;
}

int main(int argc, char **argv)
{
	static const double skews[] = { 0.9, 1.0, 1.1 };
	struct params p = { .n = 1000000, .records = 100000, .scan = 200000, .share = 0.2,
			    .pct = 10, .len = 8192, .shards = 1 };
	unsigned si;
	int opt, t;

	while ((opt = getopt(argc, argv, "n:r:s:f:c:l:S:")) != -1) {
		switch (opt) {
		case 'n': p.n = strtoul(optarg, NULL, 0); break;
		case 'r': p.records = strtoul(optarg, NULL, 0); break;
		case 's': p.scan = strtoul(optarg, NULL, 0); break;
		case 'f': p.share = strtod(optarg, NULL); break;
		case 'c': p.pct = strtod(optarg, NULL); break;
		case 'l': p.len = strtoul(optarg, NULL, 0); break;
		case 'S': p.shards = (unsigned)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: cache_sim [-n accesses] [-r records] [-s scan records] "
					"[-f scan share] [-c cache %%] [-l record bytes] [-S shards]\n");
			return 2;
		}
	}
	if (!p.n || !p.records || p.len < 8 || p.share < 0 || p.share >= 1 ||
	    p.scan > p.n) {
		fprintf(stderr, "cache_sim: bad parameters\n");
		return 2;
	}
	printf("# %lu accesses, zipf over %lu records, scan of %lu records (mixed: 1 in %.1f), "
	       "cache %.0f%% of the zipf set, %zu B records, %u shard(s)\n",
	       p.n, p.records, p.scan, p.share > 0 ? 1 / p.share : 0, p.pct, p.len, p.shards);
	printf("%-8s %-6s %4s  %8s  %8s  %8s  %8s\n", "policy", "trace", "s", "hit", "zipf-hit",
	       "evicted", "ns/op");
	for (si = 0; si < sizeof(skews) / sizeof(skews[0]); si++) {
		double *cdf = zipf_cdf(p.records, skews[si]);

		if (!cdf)
			return 1;
		for (t = T_ZIPF; t <= T_BURST; t++) {
			if (run(&p, CACHE_LRU, t, skews[si], cdf) < 0 ||
			    run(&p, CACHE_S3FIFO, t, skews[si], cdf) < 0) {
				free(cdf);
				return 1;
			}
		}
		free(cdf);
	}
	return 0;
}
