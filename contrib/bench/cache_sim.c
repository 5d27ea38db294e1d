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
 *   cache_sim -T threads [-n accesses per thread] ...
 *
 * -T measures throughput instead: threads running zipfian traces against
 * one cache of 1 and of CACHE_SHARDS shards, per policy.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cache.h"

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

#define SEED 0x9e3779b97f4a7c15ull

static double uniform(uint64_t *rng)
{
	/* xorshift64*: a fixed seed, so every policy sees the same trace */
	*rng ^= *rng >> 12;
	*rng ^= *rng << 25;
	*rng ^= *rng >> 27;
	return (double)((*rng * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53);
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

static unsigned long zipf_draw(const double *cdf, unsigned long n, uint64_t *rng)
{
	double u = uniform(rng);
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
	uint64_t rng = SEED;
	double t0;
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = cache_create_policy(cap, pol, p->shards, &c);
	if (ret < 0)
		goto out;
	t0 = now();
	for (i = 0; i < p->n; i++) {
		uint64_t ds, rec;
		int scan = is_scan(p, t, i, &scanned);

		if (scan) {
			ds = DS_SCAN;
			rec = scanned++;
		} else {
			ds = DS_HOT;
			rec = zipf_draw(cdf, p->records, &rng);
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

struct worker {
	pthread_t th;
	const struct params *p;
	struct cache *c;
	const double *cdf;
	uint64_t rng;
	unsigned long hits;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = calloc(1, w->p->len);
	unsigned long i;

	if (!buf)
		return NULL;
	for (i = 0; i < w->p->n; i++) {
		uint64_t rec = zipf_draw(w->cdf, w->p->records, &w->rng);

		if (cache_get(w->c, DS_HOT, rec, buf, w->p->len) == 0) {
			w->hits++;
		} else {
			uint64_t gen = cache_gen(w->c, DS_HOT, rec);

			cache_put(w->c, DS_HOT, rec, buf, w->p->len, gen);
		}
	}
	free(buf);
	return NULL;
}

/* -T: accesses per second of @nthreads threads, each running its own zipf
 * s=1.0 trace of -n accesses against one cache of -S shards. */
static int run_threads(const struct params *p, unsigned nthreads)
{
	static const unsigned shard_counts[] = { 1, CACHE_SHARDS };
	size_t cap = (size_t)(p->records * p->pct / 100.0) * (p->len + CACHE_ENTRY_OVERHEAD);
	double *cdf = zipf_cdf(p->records, 1.0);
	struct worker *w = calloc(nthreads, sizeof(*w));
	unsigned i, k, pol;
	int ret = -ENOMEM;

	if (!cdf || !w)
		goto out;
	printf("# %u threads x %lu accesses, zipf s=1.0 over %lu records, cache %.0f%%, %zu B\n",
	       nthreads, p->n, p->records, p->pct, p->len);
	printf("%-8s %6s  %8s  %10s\n", "policy", "shards", "hit", "Maccess/s");
	for (pol = CACHE_S3FIFO; pol <= CACHE_LRU; pol++) {
		for (k = 0; k < sizeof(shard_counts) / sizeof(shard_counts[0]); k++) {
			struct cache *c = NULL;
			unsigned long hits = 0;
			double t0;

			ret = cache_create_policy(cap, pol, shard_counts[k], &c);
			if (ret < 0)
				goto out;
			t0 = now();
			for (i = 0; i < nthreads; i++) {
				w[i] = (struct worker){ .p = p, .c = c, .cdf = cdf,
							.rng = SEED + i * 0x632be59bd9b4e019ull };
				if (pthread_create(&w[i].th, NULL, worker_run, &w[i]))
					abort();
			}
			for (i = 0; i < nthreads; i++) {
				pthread_join(w[i].th, NULL);
				hits += w[i].hits;
			}
			t0 = now() - t0;
			cache_destroy(c);
			printf("%-8s %6u  %8.4f  %10.2f\n", pol == CACHE_LRU ? "lru" : "s3-fifo",
			       shard_counts[k], (double)hits / (p->n * nthreads),
			       p->n * nthreads / t0 / 1e6);
		}
	}
	ret = 0;
out:
	free(cdf);
	free(w);
	return ret;
}

int main(int argc, char **argv)
{
	static const double skews[] = { 0.9, 1.0, 1.1 };
	struct params p = { .n = 1000000, .records = 100000, .scan = 200000, .share = 0.2,
			    .pct = 10, .len = 8192, .shards = 1 };
	unsigned si, nthreads = 0;
	int opt, t;

	while ((opt = getopt(argc, argv, "n:r:s:f:c:l:S:T:")) != -1) {
		switch (opt) {
		case 'n': p.n = strtoul(optarg, NULL, 0); break;
		case 'r': p.records = strtoul(optarg, NULL, 0); break;
		case 's': p.scan = strtoul(optarg, NULL, 0); break;
		case 'f': p.share = strtod(optarg, NULL); break;
		case 'c': p.pct = strtod(optarg, NULL); break;
		case 'l': p.len = strtoul(optarg, NULL, 0); break;
		case 'S': p.shards = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'T': nthreads = (unsigned)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: cache_sim [-n accesses] [-r records] "
				"[-s scan records] [-f scan share] [-c cache %%] "
				"[-l record bytes] [-S shards] [-T threads]\n");
			return 2;
		}
	}
	if (!p.n || !p.records || p.len < 8 || p.share < 0 || p.share >= 1 ||
	    (!nthreads && p.scan > p.n)) {
		fprintf(stderr, "cache_sim: bad parameters\n");
		return 2;
	}
	if (nthreads)
		return run_threads(&p, nthreads) < 0;
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
