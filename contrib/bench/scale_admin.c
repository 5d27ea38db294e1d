// SPDX-License-Identifier: MIT
/*
 * scale_admin: the daemon's latency per admin call at scale, measured over
 * one connection, so that no process start (3-4 ms on a small VM, more
 * than the call itself) hides it; scale.sh runs it.
 *
 *   scale_admin datasets POOL N       create POOL/v1 .. POOL/vN (sparse, 1M)
 *   scale_admin snapshots POOL D PER  create POOL/s1 .. POOL/sD (sparse,
 *                                     64M), then PER rounds of: an 8 KiB
 *                                     write to each, then a snapshot of each
 *                                     (POOL/sI@rR), as writes between
 *                                     snapshots make them hold records
 *   scale_admin heads POOL D PER MIB SNAP
 *                                     the same with POOL/h1 .. POOL/hD of MIB
 *                                     MiB, every record written first, and
 *                                     the snapshots only if SNAP is 1: the
 *                                     heads the read pass of snap_head.sh
 *                                     compares, with and without snapshots
 *
 * One line per kind of call: "create" or "snapshot", how many, the median,
 * the 99th percentile, and the mean of the first and of the last 1000, in
 * milliseconds. The socket is COFFER_SOCKET's, or the default.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "client.h"

static struct coffer_conn *conn;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One call, its milliseconds; exits on a refusal. */
static double timed_call(const char *cmd, json_t *args, const char *what)
{
	char err[512];
	json_t *reply = NULL;
	double t0 = now_ms();
	int ret = coffer_call(conn, cmd, args, &reply, err, sizeof(err));
	double t = now_ms() - t0;

	json_decref(args);
	json_decref(reply);
	if (ret < 0) {
		fprintf(stderr, "scale_admin: %s %s: %s\n", cmd, what, err);
		exit(1);
	}
	return t;
}

static double create(const char *name, uint64_t volsize)
{
	json_t *args = json_pack("{s:s, s:[s], s:I}", "name", name, "props",
				 "refreservation=none", "volsize", (json_int_t)volsize);

	return timed_call("ds_create", args, name);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double mean(const double *v, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += v[i];
	return n ? s / (double)n : 0;
}

/* The figures of @n calls @ms (in call order; sorted here). */
static void report(const char *what, double *ms, size_t n)
{
	size_t k = n < 1000 ? n : 1000;
	double first = mean(ms, k), last = mean(ms + n - k, k);

	qsort(ms, n, sizeof(*ms), cmp_double);
	printf("%s %zu median_ms %.3f p99_ms %.3f first1000_ms %.3f last1000_ms %.3f\n", what, n,
	       ms[n / 2], ms[n * 99 / 100], first, last);
}

static void datasets(const char *pool, size_t n)
{
	double *ms = calloc(n, sizeof(*ms));
	char name[256];

	if (!ms)
		exit(1);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s/v%zu", pool, i + 1);
		ms[i] = create(name, 1u << 20);
	}
	report("create", ms, n);
	free(ms);
}

static void write_rec(int h, const char *pool, const char *base, size_t i, uint64_t off,
		      const char *rec, size_t len)
{
	if (coffer_write(conn, h, off, rec, (uint32_t)len) < 0) {
		fprintf(stderr, "scale_admin: a write to %s/%s%zu failed\n", pool, base, i + 1);
		exit(1);
	}
}

/* POOL/<base>1 .. D of @mib MiB (each record written first if @fill), then
 * PER rounds of an 8 KiB write at random to each, and a snapshot if @snap. */
static void snapshots(const char *pool, const char *base, size_t d, size_t per, unsigned mib,
		      int fill, int snap)
{
	double *ms = calloc(d * per + 1, sizeof(*ms));
	int *handle = calloc(d, sizeof(*handle));
	static char rec[8192];
	uint64_t nrec = ((uint64_t)mib << 20) / sizeof(rec);
	char name[256];
	size_t k = 0;

	if (!ms || !handle)
		exit(1);
	srand(1); /* the twin pools of snap_head.sh get the same writes */
	for (size_t i = 0; i < d; i++) {
		uint64_t volsize;
		uint32_t recsize;

		snprintf(name, sizeof(name), "%s/%s%zu", pool, base, i + 1);
		create(name, (uint64_t)mib << 20);
		handle[i] = coffer_ds_open(conn, name, &volsize, &recsize);
		if (handle[i] < 0) {
			fprintf(stderr, "scale_admin: open %s: %d\n", name, handle[i]);
			exit(1);
		}
		for (uint64_t r = 0; fill && r < nrec; r++) {
			memset(rec, (int)(r * 7 + i), sizeof(rec));
			write_rec(handle[i], pool, base, i, r * sizeof(rec), rec, sizeof(rec));
		}
	}
	for (size_t r = 0; r < per; r++)
		for (size_t i = 0; i < d; i++) {
			uint64_t off = (uint64_t)((uint64_t)rand() % nrec) * sizeof(rec);

			memset(rec, (int)(r + i), sizeof(rec));
			write_rec(handle[i], pool, base, i, off, rec, sizeof(rec));
			if (!snap)
				continue;
			snprintf(name, sizeof(name), "%s/%s%zu@r%zu", pool, base, i + 1, r + 1);
			ms[k++] = timed_call("snapshot",
					     json_pack("{s:s, s:[], s:b}", "name", name, "more",
						       "recursive", 0),
					     name);
		}
	for (size_t i = 0; i < d; i++)
		coffer_ds_close(conn, handle[i]);
	if (k)
		report("snapshot", ms, k);
	free(handle);
	free(ms);
}

int main(int argc, char **argv)
{
	char err[512];

	if (argc < 4 ||
	    (strcmp(argv[1], "datasets") && strcmp(argv[1], "snapshots") && strcmp(argv[1], "heads")) ||
	    (!strcmp(argv[1], "snapshots") && argc < 5) || (!strcmp(argv[1], "heads") && argc < 7)) {
		fprintf(stderr, "usage: scale_admin datasets POOL N | snapshots POOL D PER | "
				"heads POOL D PER MIB SNAP\n");
		return 2;
	}
	if (coffer_connect_err(coffer_socket_path(NULL), &conn, err, sizeof(err)) < 0) {
		fprintf(stderr, "scale_admin: %s\n", err);
		return 1;
	}
	if (!strcmp(argv[1], "datasets"))
		datasets(argv[2], strtoul(argv[3], NULL, 10));
	else if (!strcmp(argv[1], "snapshots"))
		snapshots(argv[2], "s", strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10), 64, 0,
			  1);
	else
		snapshots(argv[2], "h", strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10),
			  (unsigned)strtoul(argv[5], NULL, 10), 1, atoi(argv[6]));
	coffer_close(conn);
	return 0;
}
