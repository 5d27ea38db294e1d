// SPDX-License-Identifier: MIT
/*
 * The one renderer of the Prometheus text exposition format (0.0.4): what
 * `coffer stats --prometheus` prints and what GET /metrics answers, so the
 * two never disagree. Names follow Prometheus's conventions: coffer_ prefix,
 * base units (bytes, seconds), _total on counters; the layer is in the name
 * (coffer_pool_*, coffer_lun_*, coffer_dataset_*, coffer_daemon_*), the
 * object in labels (pool, lun, path, dataset) and kinds in op/kind/state.
 *
 * The format wants every sample of a family together, after its # HELP and
 * # TYPE lines, so the state is snapshotted first (struct snap: every pool,
 * its LUNs and datasets) and then written family by family. The caller holds
 * the registry's read lock, which keeps the pool entries alive meanwhile.
 *
 * Latency histograms take libstore's log-linear buckets (four per power of
 * two of nanoseconds) at every second power of two, 1.024 us to 68.7 s: a
 * bucket boundary of libstore's, so each `le` count is exact, in 14 buckets
 * and +Inf. _count is the sum of the buckets, so +Inf == _count holds even
 * while requests land during the read-out. A LUN's wait histogram (the LUN
 * layer's, power-of-two buckets) is folded at the same boundaries.
 */

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "metrics.h"
#include "registry.h"

#define LE_FIRST 10 /* 2^10 ns */
#define LE_LAST 36  /* 2^36 ns, 68.7 s */
#define LE_STEP 2

struct ds_snap {
	char name[STOR_NAME_MAX + 1];
	struct stor_io_stats io;
	unsigned long long used, logical_used;
	int key; /* -1: not encrypted; 0: key not loaded; 1: loaded */
};

struct pool_snap {
	const char *name;
	const char *state; /* ONLINE, SUSPENDED, DEGRADED (no stat), FAULTED */
	int open, have_stat; /* open: imported, not faulted */
	struct stor_pool_stat st;
	struct stor_io_stats io;
	unsigned handles, keys_loaded;
	struct stor_lun_stat *luns;
	struct stor_lun_iostat *lunio; /* nluns of them */
	unsigned nluns;
	struct ds_snap *ds;
	size_t nds, cap;
};

struct snap {
	struct pool_snap *p;
	size_t np;
	struct stor_cache_stats cache;
};

static const char *const pool_states[] = { "ONLINE", "SUSPENDED", "DEGRADED", "FAULTED" };
/* the words of stor_lun_state_name(), one series each */
static const char *const lun_states[] = { "ONLINE",   "FAULTED",  "OFFLINE",
					  "RESILVERING", "DETACHED", "UNAVAIL" };

/* ---- the snapshot ---- */

static int ds_one(const char *name, const struct stor_prop_value *v, size_t nv, void *ctx)
{
	struct pool_snap *ps = ctx;
	struct ds_snap *d;

	(void)nv;
	if (ps->nds == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 8;
		struct ds_snap *n = realloc(ps->ds, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		ps->ds = n;
		ps->cap = cap;
	}
	d = &ps->ds[ps->nds++];
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->used = strtoull(v[0].value, NULL, 10);
	d->logical_used = strtoull(v[1].value, NULL, 10);
	d->key = !strcmp(v[2].value, "available") ? 1 : !strcmp(v[2].value, "unavailable") ? 0 : -1;
	return 0;
}

static void pool_take(struct pool_snap *ps, struct pool_ent *pe)
{
	static const char *const props[] = { "used", "logicalused", "keystatus" };

	ps->name = pe->name;
	ps->handles = atomic_load(&pe->nhandles);
	if (!pe->pool) {
		ps->state = "FAULTED";
		return;
	}
	ps->open = 1;
	ps->have_stat = stor_pool_stat(pe->pool, &ps->st) == 0;
	ps->state = !ps->have_stat ? "DEGRADED" : ps->st.suspended ? "SUSPENDED" : "ONLINE";
	stor_pool_io_stats(pe->pool, &ps->io);
	ps->luns = calloc(STOR_LUNS_MAX, sizeof(*ps->luns));
	while (ps->luns && ps->nluns < STOR_LUNS_MAX &&
	       stor_pool_lun_stat(pe->pool, ps->nluns, &ps->luns[ps->nluns]) == 0)
		ps->nluns++;
	ps->lunio = calloc(ps->nluns ? ps->nluns : 1, sizeof(*ps->lunio));
	for (unsigned i = 0; ps->lunio && i < ps->nluns; i++)
		stor_pool_lun_iostat(pe->pool, i, &ps->lunio[i]);
	/* the names under the pool's lock, then each one's counters: the
	 * listing's callback must not call into the pool */
	stor_ds_list_props(pe->pool, props, 3, ds_one, ps);
	for (size_t i = 0; i < ps->nds; i++) {
		stor_ds_io_stats(pe->pool, ps->ds[i].name, &ps->ds[i].io);
		ps->keys_loaded += ps->ds[i].key == 1;
	}
}

static void snap_free(struct snap *s)
{
	for (size_t i = 0; i < s->np; i++) {
		free(s->p[i].luns);
		free(s->p[i].lunio);
		free(s->p[i].ds);
	}
	free(s->p);
}

/* ---- writing ---- */

/* A label value: backslash, double quote and newline escaped. */
static void put_label(FILE *f, const char *key, const char *v)
{
	fprintf(f, "%s=\"", key);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
	fputc('"', f);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Nanoseconds as seconds, exactly, into @buf. */
static const char *secs(char *buf, size_t len, unsigned long long ns)
{
	snprintf(buf, len, "%llu.%09llu", ns / 1000000000ull, ns % 1000000000ull);
	return buf;
}

/* The labels of a pool ({pool="p"}), a dataset's, or a LUN's, then @extra ("op=\"read\""). */
struct who {
	const char *pool, *dataset;
	int lun;           /* -1: none */
	const char *path;
};

static void sample_start(FILE *f, const char *name, const char *suffix, const struct who *w,
			 const char *extra)
{
	int n = 0;

	fprintf(f, "%s%s", name, suffix);
	if (!w->pool && !extra)
		return;
	fputc('{', f);
	if (w->pool) {
		put_label(f, "pool", w->pool);
		n++;
	}
	if (w->dataset) {
		fputc(',', f);
		put_label(f, "dataset", w->dataset);
	}
	if (w->lun >= 0) {
		fprintf(f, ",lun=\"%d\",", w->lun);
		put_label(f, "path", w->path);
	}
	if (extra)
		fprintf(f, "%s%s", n ? "," : "", extra);
	fputc('}', f);
}

static void sample(FILE *f, const char *name, const struct who *w, const char *extra,
		   unsigned long long v)
{
	sample_start(f, name, "", w, extra);
	fprintf(f, " %llu\n", v);
}

/*
 * The counters of struct stor_io_stats, for pools and datasets alike. Rows
 * with the same metric are one family; kind names the unit's conversion.
 */
static const struct io_field {
	const char *metric, *type, *help, *label;
	size_t off;
	int ns; /* nanoseconds, written as seconds */
} io_fields[] = {
#define IOF(m, t, h, l, f, ns) { m, t, h, l, offsetof(struct stor_io_stats, f), ns }
	IOF("ops_total", "counter", "Requests that succeeded.", "op=\"read\"", reads, 0),
	IOF("ops_total", "counter", "", "op=\"write\"", writes, 0),
	IOF("ops_total", "counter", "", "op=\"discard\"", discards, 0),
	IOF("ops_total", "counter", "", "op=\"flush\"", flushes, 0),
	IOF("bytes_total", "counter", "Bytes of requests that succeeded.", "op=\"read\"",
	    read_bytes, 0),
	IOF("bytes_total", "counter", "", "op=\"write\"", write_bytes, 0),
	IOF("errors_total", "counter", "Failures by kind: requests that failed, records that "
	    "failed their checksum or authentication.", "kind=\"request\"", errors, 0),
	IOF("errors_total", "counter", "", "kind=\"checksum\"", cksum_errors, 0),
	IOF("errors_total", "counter", "", "kind=\"auth\"", auth_errors, 0),
	IOF("cache_hits_total", "counter", "Records read from the data cache.", NULL, cache_hits, 0),
	IOF("cache_misses_total", "counter", "Records the data cache did not hold.", NULL,
	    cache_misses, 0),
	IOF("crypto_ops_total", "counter", "Records sealed (encrypted) and opened (decrypted).",
	    "op=\"seal\"", sealed, 0),
	IOF("crypto_ops_total", "counter", "", "op=\"open\"", opened, 0),
	IOF("crypto_seconds_total", "counter", "Time spent sealing and opening records.",
	    "op=\"seal\"", seal_ns, 1),
	IOF("crypto_seconds_total", "counter", "", "op=\"open\"", open_ns, 1),
#undef IOF
};

/*
 * libstore's two histogram shapes, folded into our boundaries 2^log ns:
 * @n buckets, of which bucket step * (log - shift) is the first to start at
 * 2^log. The I/O latency histograms (STOR_LAT_BUCKETS) have four buckets an
 * octave; a LUN's (STOR_LUN_HIST_BUCKETS) bucket b is [2^b, 2^(b+1)) ns.
 * Either way the count under each boundary is exact.
 */
struct hist_shape {
	unsigned n, step, shift;
};
static const struct hist_shape LAT_SHAPE = { STOR_LAT_BUCKETS, 4, 1 };
static const struct hist_shape LUN_SHAPE = { STOR_LUN_HIST_BUCKETS, 1, 0 };

/* One latency histogram: @h's buckets (of @shape) folded into ours, @sum_ns. */
static void histogram(FILE *f, const char *name, const struct who *w, const char *op,
		      const struct hist_shape *shape, const uint64_t *h, uint64_t sum_ns)
{
	unsigned long long cum = 0;
	unsigned b = 0;
	char extra[96], le[32];

	for (unsigned log = LE_FIRST; log <= LE_LAST + LE_STEP; log += LE_STEP) {
		/* past the last boundary, every bucket: +Inf */
		unsigned end = log <= LE_LAST ? shape->step * (log - shape->shift) : shape->n;

		for (; b < end; b++)
			cum += h[b];
		snprintf(extra, sizeof(extra), "op=\"%s\",le=\"%s\"", op,
			 log <= LE_LAST ? secs(le, sizeof(le), 1ull << log) : "+Inf");
		sample_start(f, name, "_bucket", w, extra);
		fprintf(f, " %llu\n", cum);
	}
	snprintf(extra, sizeof(extra), "op=\"%s\"", op);
	sample_start(f, name, "_sum", w, extra);
	fprintf(f, " %s\n", secs(le, sizeof(le), sum_ns));
	sample_start(f, name, "_count", w, extra);
	fprintf(f, " %llu\n", cum);
}

#define EACH_POOL(s, p) for (const struct pool_snap *p = (s)->p; p < (s)->p + (s)->np; p++)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The counters and latency histograms of every open pool (@per_ds 0) or dataset. */
static void io_families(FILE *f, const struct snap *s, int per_ds)
{
	const char *level = per_ds ? "dataset" : "pool";
	char name[96];

	for (size_t k = 0; k < NELEM(io_fields); k++) {
		const struct io_field *x = &io_fields[k];

		snprintf(name, sizeof(name), "coffer_%s_%s", level, x->metric);
		if (k == 0 || strcmp(x->metric, io_fields[k - 1].metric))
			family(f, name, x->type, x->help);
		EACH_POOL(s, p) {
			for (size_t d = 0; p->open && d < (per_ds ? p->nds : 1); d++) {
				struct who w = { p->name, per_ds ? p->ds[d].name : NULL, -1, NULL };
				const struct stor_io_stats *io = per_ds ? &p->ds[d].io : &p->io;
				uint64_t v = *(const uint64_t *)((const char *)io + x->off);
				char buf[32];

				if (x->ns)
					secs(buf, sizeof(buf), v);
				else
					snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
				sample_start(f, name, "", &w, x->label);
				fprintf(f, " %s\n", buf);
			}
		}
	}
	snprintf(name, sizeof(name), "coffer_%s_latency_seconds", level);
	family(f, name, "histogram", "Latency of the reads and writes that succeeded.");
	EACH_POOL(s, p) {
		for (size_t d = 0; p->open && d < (per_ds ? p->nds : 1); d++) {
			struct who w = { p->name, per_ds ? p->ds[d].name : NULL, -1, NULL };
			const struct stor_io_stats *io = per_ds ? &p->ds[d].io : &p->io;

			histogram(f, name, &w, "read", &LAT_SHAPE, io->lat_read, io->read_ns);
			histogram(f, name, &w, "write", &LAT_SHAPE, io->lat_write, io->write_ns);
		}
	}
}

/* The gauges of a pool, in one table: what pool_value() returns for each. */
enum pool_gauge { PG_SIZE, PG_ALLOC, PG_FREE, PG_META, PG_LOGICAL, PG_TXG, PG_DATASETS,
		  PG_HANDLES, PG_KEYS };
static const struct {
	const char *metric, *help;
} pool_gauges[] = {
	[PG_SIZE] = { "coffer_pool_size_bytes", "Data space over all LUNs." },
	[PG_ALLOC] = { "coffer_pool_allocated_bytes", "Space allocated to datasets." },
	[PG_FREE] = { "coffer_pool_free_bytes", "Space neither allocated nor metadata." },
	[PG_META] = { "coffer_pool_metadata_bytes", "Space of the metadata log on the LUNs." },
	[PG_LOGICAL] = { "coffer_pool_logical_used_bytes",
			 "Bytes of records before compression, over all datasets." },
	[PG_TXG] = { "coffer_pool_txg", "Last committed transaction group." },
	[PG_DATASETS] = { "coffer_pool_datasets", "Datasets of the pool." },
	[PG_HANDLES] = { "coffer_pool_handles", "Datasets open on clients." },
	[PG_KEYS] = { "coffer_pool_keys_loaded", "Encrypted datasets whose key is loaded." },
};

static unsigned long long pool_value(const struct pool_snap *p, enum pool_gauge g)
{
	const struct stor_pool_stat *st = &p->st;

	switch (g) {
	case PG_SIZE:
		return st->size;
	case PG_ALLOC:
		return st->used;
	case PG_FREE:
		return st->size - st->used - st->meta_used;
	case PG_META:
		return st->meta_used;
	case PG_LOGICAL:
		return st->logical_used;
	case PG_TXG:
		return st->txg;
	case PG_DATASETS:
		return st->ndatasets;
	case PG_HANDLES:
		return p->handles;
	case PG_KEYS:
		return p->keys_loaded;
	}
	return 0;
}

static void pool_families(FILE *f, const struct snap *s)
{
	family(f, "coffer_pool_state", "gauge", "1 for the state the pool is in, as pool status says it.");
	EACH_POOL(s, p) {
		for (size_t i = 0; i < NELEM(pool_states); i++) {
			struct who w = { p->name, NULL, -1, NULL };
			char extra[48];

			snprintf(extra, sizeof(extra), "state=\"%s\"", pool_states[i]);
			sample(f, "coffer_pool_state", &w, extra, !strcmp(p->state, pool_states[i]));
		}
	}
	for (size_t g = 0; g < NELEM(pool_gauges); g++) {
		family(f, pool_gauges[g].metric, "gauge", pool_gauges[g].help);
		EACH_POOL(s, p) {
			struct who w = { p->name, NULL, -1, NULL };

			if (p->have_stat)
				sample(f, pool_gauges[g].metric, &w, NULL, pool_value(p, g));
		}
	}
}

static void lun_families(FILE *f, const struct snap *s)
{
	static const struct {
		const char *metric, *type, *help, *label;
		size_t off;
	} rows[] = {
#define LF(m, t, h, l, fld) { m, t, h, l, offsetof(struct stor_lun_stat, fld) }
		LF("coffer_lun_size_bytes", "gauge", "Data space of the LUN's vdev.", NULL, size),
		LF("coffer_lun_allocated_bytes", "gauge", "Space allocated on the LUN's vdev.", NULL,
		   used),
		LF("coffer_lun_errors_total", "counter",
		   "I/O errors by kind: read, write, checksum, no space.", "kind=\"read\"",
		   read_errors),
		LF("coffer_lun_errors_total", "counter", "", "kind=\"write\"", write_errors),
		LF("coffer_lun_errors_total", "counter", "", "kind=\"checksum\"", cksum_errors),
		LF("coffer_lun_errors_total", "counter", "", "kind=\"nospace\"", nospace_errors),
		LF("coffer_lun_repairs_total", "counter",
		   "Bad copies of extents rewritten from another side.", NULL, repaired),
#undef LF
	};

	for (size_t k = 0; k < NELEM(rows); k++) {
		if (k == 0 || strcmp(rows[k].metric, rows[k - 1].metric))
			family(f, rows[k].metric, rows[k].type, rows[k].help);
		EACH_POOL(s, p) {
			for (unsigned i = 0; i < p->nluns; i++) {
				const struct stor_lun_stat *ls = &p->luns[i];
				struct who w = { p->name, NULL, (int)i, ls->path };

				sample(f, rows[k].metric, &w, rows[k].label,
				       *(const uint64_t *)((const char *)ls + rows[k].off));
			}
		}
	}
	family(f, "coffer_lun_state", "gauge", "1 for the state the LUN is in, as pool status says it.");
	EACH_POOL(s, p) {
		for (unsigned i = 0; i < p->nluns; i++) {
			struct who w = { p->name, NULL, (int)i, p->luns[i].path };

			for (size_t k = 0; k < NELEM(lun_states); k++) {
				char extra[48];

				snprintf(extra, sizeof(extra), "state=\"%s\"", lun_states[k]);
				sample(f, "coffer_lun_state", &w, extra,
				       !strcmp(stor_lun_state_name(&p->luns[i]), lun_states[k]));
			}
		}
	}
}

/* The LUN layer's I/O counters (pool iostat's): ops, bytes, total wait. */
static void lun_io_families(FILE *f, const struct snap *s)
{
	static const char *const op[] = { "read", "write" };

	family(f, "coffer_lun_io_ops_total", "counter",
	       "Extents the LUN completed without error, as pool iostat counts them.");
	EACH_POOL(s, p)
		for (unsigned i = 0; p->lunio && i < p->nluns; i++)
			for (int d = 0; d < 2; d++)
				sample(f, "coffer_lun_io_ops_total",
				       &(struct who){ p->name, NULL, (int)i, p->luns[i].path },
				       d ? "op=\"write\"" : "op=\"read\"", p->lunio[i].ops[d]);
	family(f, "coffer_lun_io_bytes_total", "counter", "Bytes of those extents.");
	EACH_POOL(s, p)
		for (unsigned i = 0; p->lunio && i < p->nluns; i++)
			for (int d = 0; d < 2; d++)
				sample(f, "coffer_lun_io_bytes_total",
				       &(struct who){ p->name, NULL, (int)i, p->luns[i].path },
				       d ? "op=\"write\"" : "op=\"read\"", p->lunio[i].bytes[d]);
	family(f, "coffer_lun_io_wait_seconds", "histogram",
	       "Total wait of those extents, issue to completion (pool iostat -l, -w).");
	EACH_POOL(s, p)
		for (unsigned i = 0; p->lunio && i < p->nluns; i++)
			for (int d = 0; d < 2; d++)
				histogram(f, "coffer_lun_io_wait_seconds",
					  &(struct who){ p->name, NULL, (int)i, p->luns[i].path },
					  op[d], &LUN_SHAPE, p->lunio[i].hist[d],
					  p->lunio[i].wait_ns[d]);
}

static void dataset_families(FILE *f, const struct snap *s)
{
	family(f, "coffer_dataset_used_bytes", "gauge", "Space the dataset and its children use.");
	EACH_POOL(s, p)
		for (size_t d = 0; d < p->nds; d++)
			sample(f, "coffer_dataset_used_bytes",
			       &(struct who){ p->name, p->ds[d].name, -1, NULL }, NULL, p->ds[d].used);
	family(f, "coffer_dataset_logical_used_bytes", "gauge",
	       "Bytes of the dataset's records before compression.");
	EACH_POOL(s, p)
		for (size_t d = 0; d < p->nds; d++)
			sample(f, "coffer_dataset_logical_used_bytes",
			       &(struct who){ p->name, p->ds[d].name, -1, NULL }, NULL,
			       p->ds[d].logical_used);
	family(f, "coffer_dataset_key_loaded", "gauge",
	       "1 if the encrypted dataset's key is loaded (clear datasets have none).");
	EACH_POOL(s, p)
		for (size_t d = 0; d < p->nds; d++)
			if (p->ds[d].key >= 0)
				sample(f, "coffer_dataset_key_loaded",
				       &(struct who){ p->name, p->ds[d].name, -1, NULL }, NULL,
				       (unsigned long long)p->ds[d].key);
}

#define DS(f) atomic_load_explicit(&daemon_stats.f, memory_order_relaxed)

static void daemon_families(FILE *f, const struct snap *s)
{
	const struct who none = { NULL, NULL, -1, NULL };

	family(f, "coffer_build_info", "gauge", "The daemon's version; always 1.");
	sample(f, "coffer_build_info", &none, "version=\"" PACKAGE_VERSION "\"", 1);
	family(f, "coffer_daemon_requests_total", "counter", "Record I/O requests answered.");
	sample(f, "coffer_daemon_requests_total", &none, "op=\"read\"", DS(reads));
	sample(f, "coffer_daemon_requests_total", &none, "op=\"write\"", DS(writes));
	sample(f, "coffer_daemon_requests_total", &none, "op=\"flush\"", DS(flushes));
	sample(f, "coffer_daemon_requests_total", &none, "op=\"discard\"", DS(discards));
	family(f, "coffer_daemon_bytes_total", "counter", "Bytes of record I/O.");
	sample(f, "coffer_daemon_bytes_total", &none, "op=\"read\"", DS(read_bytes));
	sample(f, "coffer_daemon_bytes_total", &none, "op=\"write\"", DS(write_bytes));
	family(f, "coffer_daemon_errors_total", "counter",
	       "Refusals and failures: record I/O, permission, malformed frames.");
	sample(f, "coffer_daemon_errors_total", &none, "kind=\"io\"", DS(io_errors));
	sample(f, "coffer_daemon_errors_total", &none, "kind=\"eperm\"", DS(eperm));
	sample(f, "coffer_daemon_errors_total", &none, "kind=\"bad_frame\"", DS(bad_frames));
	family(f, "coffer_daemon_admin_calls_total", "counter", "Administrative commands run.");
	sample(f, "coffer_daemon_admin_calls_total", &none, NULL, DS(admin_calls));
	family(f, "coffer_daemon_connections_total", "counter", "Connections accepted.");
	sample(f, "coffer_daemon_connections_total", &none, NULL, DS(conns_total));
	family(f, "coffer_daemon_connections_open", "gauge", "Connections open.");
	sample(f, "coffer_daemon_connections_open", &none, NULL, DS(conns_open));
	family(f, "coffer_cache_hits_total", "counter", "Records the data cache served.");
	sample(f, "coffer_cache_hits_total", &none, NULL, s->cache.hits);
	family(f, "coffer_cache_misses_total", "counter", "Records the data cache did not hold.");
	sample(f, "coffer_cache_misses_total", &none, NULL, s->cache.misses);
	family(f, "coffer_cache_evictions_total", "counter", "Records evicted from the data cache.");
	sample(f, "coffer_cache_evictions_total", &none, NULL, s->cache.evictions);
	family(f, "coffer_cache_bytes", "gauge", "Bytes the data cache holds.");
	sample(f, "coffer_cache_bytes", &none, NULL, s->cache.bytes);
	family(f, "coffer_cache_capacity_bytes", "gauge", "Size of the data cache (cache_size).");
	sample(f, "coffer_cache_capacity_bytes", &none, NULL, s->cache.capacity);
}

char *metrics_render(size_t *len)
{
	struct snap s = { 0 };
	char *buf = NULL;
	FILE *f;
	size_t n = 0;

	*len = 0;
	for (struct pool_ent *pe = reg_pools(); pe; pe = pe->next)
		n++;
	s.p = calloc(n ? n : 1, sizeof(*s.p));
	if (!s.p)
		return NULL;
	for (struct pool_ent *pe = reg_pools(); pe; pe = pe->next)
		pool_take(&s.p[s.np++], pe);
	stor_cache_stats(&s.cache);
	f = open_memstream(&buf, len);
	if (f) {
		daemon_families(f, &s);
		pool_families(f, &s);
		io_families(f, &s, 0);
		lun_families(f, &s);
		lun_io_families(f, &s);
		dataset_families(f, &s);
		io_families(f, &s, 1);
		if (fclose(f) != 0) {
			free(buf);
			buf = NULL;
		}
	}
	snap_free(&s);
	return buf;
}
