/* SPDX-License-Identifier: MIT */
/*
 * engine_bench: the single-thread 8 KiB random read and write rates of the
 * engine itself, without daemon or RPC, on a pool of LUN files, buffered and
 * with O_DIRECT. It fills a dataset, then for N seconds each writes and reads
 * whole records at random record numbers and prints records/s.
 *
 * The pool lives in a mkdtemp directory under the directory given (default
 * /var/tmp, since tmpfs refuses O_DIRECT) and is removed at the end.
 * Buffered reads come from the page cache once the LUN files are cached; the
 * O_DIRECT rows are the ones that reach the device.
 */

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

#define REC 8192u
#define NLUNS 4u

struct result {
	const char *mode, *op;
	uint64_t n;
	double secs;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: engine_bench [-s seconds] [-m dataset-MiB] [-b|-d] [dir]\n"
		   "  -s  seconds per measurement (default 5)\n"
		   "  -m  dataset size in MiB, filled before measuring (default 256)\n"
		   "  -b  buffered only; -d  O_DIRECT only (default both)\n"
		   "  dir parent of the temporary pool directory (default /var/tmp)\n");
}

static int fail(const char *what, int ret)
{
	fprintf(stderr, "engine_bench: %s: %s", what, stor_strerror(ret));
	if (stor_pool_last_error()[0])
		fprintf(stderr, " (%s)", stor_pool_last_error());
	fputc('\n', stderr);
	return ret;
}

/* One pool, one dataset: fill, random writes, random reads. */
static int run_mode(const char *parent, int direct, uint64_t volsize, double secs,
		    struct result *res)
{
	const char *props[] = { "primarycache=metadata" };
	struct stor_ds_opts dso = { .volsize = volsize, .recordsize = REC, .props = props,
				    .nprops = 1 };
	struct stor_pool_opts po = { .direct_io = direct };
	struct stor_pool *pool = NULL;
	struct stor_ds *ds = NULL;
	char dir[1024], state[1100], lun[NLUNS][1200];
	const char *lunv[NLUNS];
	const char *mode = direct ? "O_DIRECT" : "buffered";
	uint64_t nrec = volsize / REC, x = 0x2545f4914f6cdd1dull, n;
	unsigned char *buf = NULL;
	const size_t fill = 1u << 20;
	double t0, t;
	int ret;

	snprintf(dir, sizeof(dir), "%s/coffer-bench.XXXXXX", parent);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "engine_bench: mkdtemp %s: %s\n", dir, strerror(errno));
		return -errno;
	}
	/* LUNs may not live inside the state directory */
	snprintf(state, sizeof(state), "%s/state", dir);
	if (mkdir(state, 0700) < 0) {
		ret = -errno;
		fprintf(stderr, "engine_bench: mkdir %s: %s\n", state, strerror(errno));
		rmdir(dir);
		return ret;
	}
	/* room for the data, its copy-on-write turnover and the labels */
	po.state_dir = state;
	po.lun_size = (volsize * 2 / NLUNS + (16u << 20)) / STOR_SECTOR * STOR_SECTOR;
	for (unsigned i = 0; i < NLUNS; i++) {
		snprintf(lun[i], sizeof(lun[i]), "%s/lun%u", dir, i);
		lunv[i] = lun[i];
	}
	ret = posix_memalign((void **)&buf, STOR_SECTOR, fill);
	if (ret) {
		ret = -ret;
		goto out;
	}
	ret = stor_pool_create("bench", lunv, NLUNS, &po, &pool);
	if (ret) {
		fail("pool create", ret);
		goto out;
	}
	ret = stor_ds_create(pool, "bench/vol", &dso, &ds);
	if (ret) {
		fail("dataset create", ret);
		goto out;
	}

	/* fill with incompressible bytes so every read finds a record */
	for (size_t i = 0; i < fill / 8; i++)
		((uint64_t *)buf)[i] = next_rand(&x);
	t0 = now();
	for (uint64_t off = 0; off < volsize; off += fill) {
		((uint64_t *)buf)[0] = off;
		ret = stor_ds_write(ds, off, buf, fill);
		if (ret) {
			fail("fill", ret);
			goto out;
		}
	}
	ret = stor_pool_sync(pool);
	if (ret) {
		fail("sync", ret);
		goto out;
	}
	fprintf(stderr, "%s: filled %llu MiB in %.1f s\n", mode,
		(unsigned long long)(volsize >> 20), now() - t0);

	/* random writes; the commit at the end is part of the cost */
	n = 0;
	t0 = now();
	do {
		for (int k = 0; k < 64; k++, n++) {
			((uint64_t *)buf)[1] = n;
			ret = stor_ds_write(ds, next_rand(&x) % nrec * REC, buf, REC);
			if (ret) {
				fail("write", ret);
				goto out;
			}
		}
	} while ((t = now()) - t0 < secs);
	ret = stor_pool_sync(pool);
	if (ret) {
		fail("sync", ret);
		goto out;
	}
	res[0] = (struct result){ mode, "write", n, now() - t0 };

	n = 0;
	t0 = now();
	do {
		for (int k = 0; k < 64; k++, n++) {
			ret = stor_ds_read(ds, next_rand(&x) % nrec * REC, buf, REC);
			if (ret) {
				fail("read", ret);
				goto out;
			}
		}
	} while ((t = now()) - t0 < secs);
	res[1] = (struct result){ mode, "read", n, t - t0 };
	ret = 0;
out:
	stor_ds_close(ds);
	if (pool) {
		int r2 = stor_pool_close(pool);

		if (r2 && !ret)
			ret = fail("pool close", r2);
	}
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(buf);
	return ret;
}

int main(int argc, char **argv)
{
	struct result res[4];
	const char *parent = "/var/tmp";
	double secs = 5;
	uint64_t mib = 256;
	int c, nres = 0, modes = 3, ret = 0;

	while ((c = getopt(argc, argv, "s:m:bdh")) != -1) {
		switch (c) {
		case 's':
			secs = atof(optarg);
			break;
		case 'm':
			mib = strtoull(optarg, NULL, 10);
			break;
		case 'b':
			modes = 1;
			break;
		case 'd':
			modes = 2;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		parent = argv[optind];
	if (secs <= 0 || mib < 1) {
		usage(stderr);
		return 2;
	}
	for (int direct = 0; direct <= 1; direct++) {
		if (!(modes & (1 << direct)))
			continue;
		ret = run_mode(parent, direct, mib << 20, secs, res + nres);
		if (ret)
			return 1;
		nres += 2;
	}
	printf("engine_bench: 8 KiB records, 1 thread, %llu MiB dataset, %u LUN files in %s\n",
	       (unsigned long long)mib, NLUNS, parent);
	printf("%-9s %-6s %12s %10s %10s\n", "mode", "op", "records/s", "MB/s", "us/rec");
	for (int i = 0; i < nres; i++) {
		double rate = (double)res[i].n / res[i].secs;

		printf("%-9s %-6s %12.0f %10.1f %10.2f\n", res[i].mode, res[i].op, rate,
		       rate * REC / 1e6, 1e6 / rate);
	}
	return 0;
}
