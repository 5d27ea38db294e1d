/* SPDX-License-Identifier: MIT */
/*
 * I/O statistics of datasets and pools: counting (called by the record
 * pipeline, lock-free) and reading them out. The latency histogram is
 * log-linear: four buckets per power of two, so any percentile read from it
 * is within 19% of the true value.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/stor_assert.h"
#include "ds/dataset.h"
#include "io/stats.h"

uint64_t stats_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned lat_bucket(uint64_t ns)
{
	unsigned log, sub;

	if (ns < 4)
		return (unsigned)ns;
	log = 63u - (unsigned)__builtin_clzll(ns);
	sub = (unsigned)(ns >> (log - 2)) & 3u;
	return log * 4 + sub - 4 < STOR_LAT_BUCKETS ? log * 4 + sub - 4 : STOR_LAT_BUCKETS - 1;
}

uint64_t stor_lat_bucket_ns(unsigned i)
{
	unsigned log, sub;

	if (i < 4)
		return i;
	log = (i + 4) / 4;
	sub = (i + 4) % 4;
	return (4ull + sub) << (log - 2);
}

/* @s's latency histograms, made on first use (NULL: no memory, none kept). */
static struct ds_lat *lat_of(struct ds_stats *s)
{
	struct ds_lat *l = atomic_load_explicit(&s->lat, memory_order_acquire), *none = NULL;

	if (l)
		return l;
	l = calloc(1, sizeof(*l));
	if (l && !atomic_compare_exchange_strong(&s->lat, &none, l)) {
		free(l);
		l = none;
	}
	return l;
}

void stats_request(struct stor_ds *ds, enum stor_io_op op, uint64_t bytes, int result,
		   uint64_t ns)
{
	struct ds_stats *s = &ds->stats;
	struct ds_lat *l;
	unsigned h = DS_LAT_OTHER;

	if (result) {
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
		return;
	}
	switch (op) {
	case STOR_IO_READ:
		atomic_fetch_add_explicit(&s->reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->read_bytes, bytes, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->read_ns, ns, memory_order_relaxed);
		h = DS_LAT_READ;
		break;
	case STOR_IO_WRITE:
		atomic_fetch_add_explicit(&s->writes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->write_bytes, bytes, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->write_ns, ns, memory_order_relaxed);
		h = DS_LAT_WRITE;
		break;
	case STOR_IO_DISCARD:
		atomic_fetch_add_explicit(&s->discards, 1, memory_order_relaxed);
		break;
	case STOR_IO_FLUSH:
		atomic_fetch_add_explicit(&s->flushes, 1, memory_order_relaxed);
		break;
	default:
		/* record.c fails an unknown op before it runs, so none succeeds */
		STOR_ASSERT(!"a successful request of an unknown op");
		return;
	}
	l = lat_of(s);
	if (l)
		atomic_fetch_add_explicit(&l->h[h][lat_bucket(ns)], 1, memory_order_relaxed);
}

static void add_one(struct ds_stats *s, struct stor_io_stats *st)
{
	struct ds_lat *l = atomic_load_explicit(&s->lat, memory_order_acquire);

#define ADD(f) st->f += atomic_load_explicit(&s->f, memory_order_relaxed)
	ADD(reads);
	ADD(writes);
	ADD(discards);
	ADD(flushes);
	ADD(errors);
	ADD(read_bytes);
	ADD(write_bytes);
	ADD(cache_hits);
	ADD(cache_misses);
	ADD(sealed);
	ADD(opened);
	ADD(seal_ns);
	ADD(open_ns);
	ADD(cksum_errors);
	ADD(auth_errors);
	ADD(read_ns);
	ADD(write_ns);
#undef ADD
#define LAT(op, i) atomic_load_explicit(&l->h[op][i], memory_order_relaxed)
	for (unsigned i = 0; i < STOR_LAT_BUCKETS && l; i++) {
		uint64_t r = LAT(DS_LAT_READ, i), w = LAT(DS_LAT_WRITE, i);

		st->lat_read[i] += r;
		st->lat_write[i] += w;
		st->lat[i] += r + w + LAT(DS_LAT_OTHER, i);
	}
#undef LAT
}

int stor_ds_io_stats(struct stor_pool *p, const char *name, struct stor_io_stats *st)
{
	struct stor_ds *ds;

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (ds)
		add_one(&ds->stats, st);
	pthread_mutex_unlock(&p->admin);
	return ds ? 0 : -ENOENT;
}

int stor_pool_io_stats(struct stor_pool *p, struct stor_io_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds; i++)
		add_one(&p->ds[i]->stats, st);
	pthread_mutex_unlock(&p->admin);
	return 0;
}
