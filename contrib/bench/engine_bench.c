/* SPDX-License-Identifier: MIT */
/*
 * engine_bench: the 8 KiB random read and write rates of the engine itself,
 * without daemon or RPC, on a pool of LUN files, buffered and with O_DIRECT.
 *
 * Without -t, -q or -r: one dataset, one thread. It fills the dataset, then
 * for -s seconds each writes and reads whole records at random record
 * numbers with stor_ds_write / stor_ds_read and prints records/s.
 *
 * With -t LIST (thread mode, also with -q or -r alone): how the read path
 * scales over threads. cofferd runs N event loops, and each submits the
 * record I/O of its own connections as batches of struct stor_io, one
 * stor_io_submit() per batch (daemon/work.c run_batch; with io_inline on
 * the loop itself, else on workers). Whether N loops serve N times one
 * loop's reads depends on the engine letting those calls run side by side:
 * LMDB read transactions, the pool's locks, the cipher, the allocator. So
 * for each thread count T, T threads each read random records of a dataset
 * of their own (one per thread, all in one pool, created and filled
 * beforehand) in batches of -q requests per stor_io_submit(), for -s
 * seconds; no client process takes a core. Per T it prints records/s, the
 * CPU time per record (getrusage of the whole process over the run), the
 * CPU the threads got, their sleeps (voluntary context switches: a thread
 * asleep on a lock or on I/O), and the speedup over T=1 of the same round.
 * A machine shared with other jobs gives the threads less than a core each
 * (a note says so), and then the speedup measures the machine; the
 * cpu-bound column, T x the CPU per record of 1 thread / that of T, is the
 * speedup the CPU cost per record allows (what cache lines shared between
 * the threads, and spinning, take away), if the threads do not sleep. The
 * counts are run in turn for -r rounds and printed as medians with min-max:
 * one measurement alone says little on such a machine. Give counts up to
 * the cores to use (e.g. -t 1,2 on 2 cores, -t 1,2,4,8 on 8): the benchmark
 * itself takes no core beyond its threads.
 *
 * -e SUITE makes the datasets encryption roots with that suite and a fixed
 * raw test key (in both modes), so the cipher is measured too.
 *
 * The pool lives in a mkdtemp directory under the directory given (default
 * /var/tmp, since tmpfs refuses O_DIRECT; use -b on /dev/shm) and is removed
 * at the end. Buffered reads come from the page cache once the LUN files are
 * cached (on tmpfs, from the engine's mapping of them, as in cofferd); the
 * O_DIRECT rows are the ones that reach the device.
 */

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

#define REC 8192u
#define NLUNS 4u
#define MAX_THREADS 256u
#define MAX_COUNTS 32u
#define MAX_ROUNDS 100u
#define MAX_BATCH 1024u

struct result {
	const char *mode, *op;
	uint64_t n;
	double secs;
};

/* One pool of NLUNS LUN files under a temporary directory, its datasets filled. */
struct bench {
	const char *parent, *suite; /* suite NULL: clear datasets */
	int direct;
	uint64_t volsize;
	unsigned nds;
	char dir[1024];
	struct stor_pool *pool;
	struct stor_ds *ds[MAX_THREADS];
};

/* One reading thread of a thread-mode measurement. */
struct reader {
	pthread_t tid;
	struct stor_ds *ds;
	struct stor_io *ios;
	unsigned char *bufs;
	unsigned id, batch;
	uint64_t nrec, x, n;
	int ret;
	pthread_barrier_t *go;
	atomic_int *stop;
};

/* Thread mode: one measurement of T threads. */
struct sample {
	double rate;   /* records/s */
	double cpu_us; /* process CPU time per record */
	double cpus;   /* process CPU time per wall time: at most the threads, or the cores */
	double vcs;    /* voluntary context switches (sleeps) per 1000 records */
	double ivcs;   /* involuntary ones (preempted) per 1000 records */
};

struct usage {
	double cpu;         /* user + system seconds */
	double nvcsw, nivcsw;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Of the whole process: every thread, finished or not. */
static struct usage usage_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (struct usage){ (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
				       (double)ru.ru_stime.tv_sec +
				       (double)ru.ru_stime.tv_usec / 1e6,
			       (double)ru.ru_nvcsw, (double)ru.ru_nivcsw };
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
	fprintf(f, "usage: engine_bench [-s seconds] [-m dataset-MiB] [-b|-d] [-e suite]\n"
		   "                    [-t threads,...] [-q batch] [-r rounds] [dir]\n"
		   "  -s  seconds per measurement (default 5)\n"
		   "  -m  dataset size in MiB, filled before measuring (default 256;\n"
		   "      in thread mode, of each thread's dataset)\n"
		   "  -b  buffered only; -d  O_DIRECT only (default both)\n"
		   "  -e  encryption of the datasets: off (default), aes-256-ccm, aes-256-gcm...\n"
		   "      (a fixed raw test key)\n"
		   "  -t, -q or -r: thread mode, random reads, each thread on its own dataset:\n"
		   "  -t  thread counts to measure, comma-separated (default 1), e.g. 1,2\n"
		   "  -q  requests per stor_io_submit() batch (default 16)\n"
		   "  -r  rounds over the thread counts, printed as medians (default 3)\n"
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

static void bench_close(struct bench *b)
{
	for (unsigned i = 0; i < b->nds; i++) {
		stor_ds_close(b->ds[i]);
		b->ds[i] = NULL;
	}
	if (b->pool) {
		int ret = stor_pool_close(b->pool);

		if (ret)
			fail("pool close", ret);
		b->pool = NULL;
	}
	if (b->dir[0])
		nftw(b->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	b->dir[0] = 0;
}

/* Create the pool and b->nds datasets bench/vol<i>, each filled with incompressible bytes. */
static int bench_open(struct bench *b)
{
	/* a fixed raw test key; one byte repeated would be refused as a key */
	uint8_t key[32];
	const struct stor_key_material km = { key, sizeof(key) };
	char enc[64], state[1100], lun[NLUNS][1200], name[64];
	const char *props[] = { "primarycache=metadata", enc, "keyformat=raw" };
	struct stor_ds_opts dso = { .volsize = b->volsize, .recordsize = REC, .props = props,
				    .nprops = b->suite ? 3 : 1, .key = b->suite ? &km : NULL };
	struct stor_pool_opts po = { .direct_io = b->direct };
	const char *lunv[NLUNS];
	const char *mode = b->direct ? "O_DIRECT" : "buffered";
	uint64_t x = 0x2545f4914f6cdd1dull;
	unsigned char *buf = NULL;
	const size_t fill = 1u << 20;
	double t0;
	int ret;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(7 + 37 * i);
	snprintf(enc, sizeof(enc), "encryption=%s", b->suite ? b->suite : "off");
	snprintf(b->dir, sizeof(b->dir), "%s/coffer-bench.XXXXXX", b->parent);
	if (!mkdtemp(b->dir)) {
		ret = -errno;
		fprintf(stderr, "engine_bench: mkdtemp %s: %s\n", b->dir, strerror(errno));
		b->dir[0] = 0;
		return ret;
	}
	/* LUNs may not live inside the state directory */
	snprintf(state, sizeof(state), "%s/state", b->dir);
	if (mkdir(state, 0700) < 0) {
		ret = -errno;
		fprintf(stderr, "engine_bench: mkdir %s: %s\n", state, strerror(errno));
		goto out;
	}
	/* room for the data, its copy-on-write turnover and the labels */
	po.state_dir = state;
	po.lun_size = (b->volsize * b->nds * 2 / NLUNS + (16u << 20)) / STOR_SECTOR * STOR_SECTOR;
	for (unsigned i = 0; i < NLUNS; i++) {
		snprintf(lun[i], sizeof(lun[i]), "%s/lun%u", b->dir, i);
		lunv[i] = lun[i];
	}
	ret = posix_memalign((void **)&buf, STOR_SECTOR, fill);
	if (ret) {
		ret = -ret;
		goto out;
	}
	ret = stor_pool_create("bench", lunv, NLUNS, &po, &b->pool);
	if (ret) {
		fail("pool create", ret);
		goto out;
	}
	for (unsigned i = 0; i < b->nds; i++) {
		if (b->nds == 1)
			snprintf(name, sizeof(name), "bench/vol");
		else
			snprintf(name, sizeof(name), "bench/vol%u", i);
		ret = stor_ds_create(b->pool, name, &dso, &b->ds[i]);
		if (ret) {
			fail("dataset create", ret);
			goto out;
		}
	}

	/* fill with incompressible bytes so every read finds a record */
	for (size_t i = 0; i < fill / 8; i++)
		((uint64_t *)buf)[i] = next_rand(&x);
	t0 = now();
	for (unsigned i = 0; i < b->nds; i++) {
		for (uint64_t off = 0; off < b->volsize; off += fill) {
			((uint64_t *)buf)[0] = off;
			((uint64_t *)buf)[1] = i;
			ret = stor_ds_write(b->ds[i], off, buf, fill);
			if (ret) {
				fail("fill", ret);
				goto out;
			}
		}
	}
	ret = stor_pool_sync(b->pool);
	if (ret) {
		fail("sync", ret);
		goto out;
	}
	fprintf(stderr, "%s: filled %u x %llu MiB in %.1f s\n", mode, b->nds,
		(unsigned long long)(b->volsize >> 20), now() - t0);
out:
	free(buf);
	if (ret)
		bench_close(b);
	return ret;
}

/* Without -t: one dataset, random writes then random reads. */
static int run_mode(struct bench *b, double secs, struct result *res)
{
	const char *mode = b->direct ? "O_DIRECT" : "buffered";
	uint64_t nrec = b->volsize / REC, x = 0x9e3779b97f4a7c15ull, n;
	unsigned char *buf = NULL;
	struct stor_ds *ds;
	double t0, t;
	int ret;

	b->nds = 1;
	ret = bench_open(b);
	if (ret)
		return ret;
	ds = b->ds[0];
	ret = posix_memalign((void **)&buf, STOR_SECTOR, REC);
	if (ret) {
		ret = -ret;
		goto out;
	}
	/* incompressible, like the fill */
	for (size_t i = 0; i < REC / 8; i++)
		((uint64_t *)buf)[i] = next_rand(&x);

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
	ret = stor_pool_sync(b->pool);
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
	free(buf);
	bench_close(b);
	return ret;
}

/* Thread mode: read random records of one dataset in batches until told to stop. */
static void *reader_run(void *arg)
{
	struct reader *r = arg;

	char name[16];

	/* for perf report --sort comm */
	snprintf(name, sizeof(name), "ebench-rd%u", r->id);
	pthread_setname_np(pthread_self(), name);
	r->n = 0;
	r->ret = 0;
	pthread_barrier_wait(r->go);
	while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
		for (unsigned k = 0; k < r->batch; k++)
			r->ios[k] = (struct stor_io){ .ds = r->ds,
						      .op = STOR_IO_READ,
						      .off = next_rand(&r->x) % r->nrec * REC,
						      .len = REC,
						      .buf = r->bufs + (size_t)k * REC };
		if (stor_io_submit(r->ios, r->batch)) {
			for (unsigned k = 0; k < r->batch; k++)
				if (r->ios[k].result)
					r->ret = r->ios[k].result;
			break;
		}
		r->n += r->batch;
	}
	return NULL;
}

/* One measurement: @t threads of @rd read for @secs seconds. */
static int measure(struct reader *rd, unsigned t, double secs, struct sample *s)
{
	pthread_barrier_t go;
	atomic_int stop = 0;
	struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
	struct usage u0, u1;
	uint64_t n = 0;
	double t0, wall, k;
	int ret = 0;

	pthread_barrier_init(&go, NULL, t + 1);
	for (unsigned i = 0; i < t; i++) {
		rd[i].go = &go;
		rd[i].stop = &stop;
		ret = pthread_create(&rd[i].tid, NULL, reader_run, &rd[i]);
		if (ret) {
			fprintf(stderr, "engine_bench: pthread_create: %s\n", strerror(ret));
			exit(1); /* the threads started wait on the barrier forever */
		}
	}
	pthread_barrier_wait(&go);
	t0 = now();
	u0 = usage_now();
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&stop, 1);
	for (unsigned i = 0; i < t; i++) {
		pthread_join(rd[i].tid, NULL);
		n += rd[i].n;
		if (rd[i].ret && !ret)
			ret = fail("read", rd[i].ret);
	}
	wall = now() - t0;
	u1 = usage_now();
	k = n ? 1e3 / (double)n : 0;
	s->rate = (double)n / wall;
	s->cpu_us = (u1.cpu - u0.cpu) * k * 1e3;
	s->cpus = (u1.cpu - u0.cpu) / wall;
	s->vcs = (u1.nvcsw - u0.nvcsw) * k;
	s->ivcs = (u1.nivcsw - u0.nivcsw) * k;
	pthread_barrier_destroy(&go);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median, min and max of @n values (@v is sorted). */
static void stats(double *v, unsigned n, double *med, double *lo, double *hi)
{
	qsort(v, n, sizeof(*v), cmp_double);
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*lo = v[0];
	*hi = v[n - 1];
}

/* Thread mode on one pool: @ncounts thread counts @counts, @rounds rounds. */
static int run_threads(struct bench *b, const unsigned *counts, unsigned ncounts, unsigned rounds,
		       unsigned batch, double secs, const char *ename)
{
	static struct sample smp[MAX_ROUNDS][MAX_COUNTS];
	struct reader rd[MAX_THREADS] = { 0 };
	const char *mode = b->direct ? "O_DIRECT" : "buffered";
	int one = -1, ret;

	b->nds = 0;
	for (unsigned c = 0; c < ncounts; c++) {
		if (counts[c] > b->nds)
			b->nds = counts[c];
		if (counts[c] == 1 && one < 0)
			one = (int)c;
	}
	ret = bench_open(b);
	if (ret)
		return ret;
	for (unsigned i = 0; i < b->nds; i++) {
		rd[i].ds = b->ds[i];
		rd[i].id = i;
		rd[i].batch = batch;
		rd[i].nrec = b->volsize / REC;
		rd[i].x = 0x9e3779b97f4a7c15ull * (i + 1) | 1;
		rd[i].ios = calloc(batch, sizeof(*rd[i].ios));
		if (!rd[i].ios || posix_memalign((void **)&rd[i].bufs, STOR_SECTOR,
						 (size_t)batch * REC)) {
			ret = -ENOMEM;
			goto out;
		}
	}
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned c = 0; c < ncounts; c++) {
			ret = measure(rd, counts[c], secs, &smp[r][c]);
			if (ret)
				goto out;
			fprintf(stderr,
				"%s round %u: %3u thread%s %9.0f records/s %6.2f us cpu/rec "
				"%5.2f cpus, per 1000 records %6.2f sleeps %6.2f preempted\n",
				mode, r + 1, counts[c], counts[c] == 1 ? " " : "s", smp[r][c].rate,
				smp[r][c].cpu_us, smp[r][c].cpus, smp[r][c].vcs, smp[r][c].ivcs);
		}
	}

	printf("engine_bench: 8 KiB random reads, %s, batches of %u per stor_io_submit(), "
	       "one %llu MiB dataset per thread, encryption %s, %u LUN files in %s\n",
	       mode, batch, (unsigned long long)(b->volsize >> 20), ename, NLUNS, b->parent);
	printf("medians of %u rounds of %g s (min-max), %ld CPUs online. cpu us: process "
	       "user+sys per record; cpus: process CPU time / wall time;\nsleeps: voluntary "
	       "context switches per 1000 records; speedup: vs 1 thread in the same round;\n"
	       "cpu-bound: T x (cpu us of 1 thread / cpu us of T) in the same round, the speedup "
	       "if each thread had a core and none slept\n",
	       rounds, secs, sysconf(_SC_NPROCESSORS_ONLN));
	printf("%-7s %10s %-19s %6s %-13s %5s %6s %7s %-11s %9s %s\n", "threads", "records/s",
	       "(min-max)", "cpu us", "(min-max)", "cpus", "sleeps", "speedup", "(min-max)",
	       "cpu-bound", "(min-max)");
	for (unsigned c = 0; c < ncounts; c++) {
		double v[MAX_ROUNDS], med[6], lo[6], hi[6];
		char range[4][48];

		for (int f = 0; f < 6; f++) {
			if (f >= 4 && one < 0)
				break;
			for (unsigned r = 0; r < rounds; r++) {
				const struct sample *x = &smp[r][c], *x1 = &smp[r][one < 0 ? 0 : one];

				v[r] = f == 0 ? x->rate :
				       f == 1 ? x->cpu_us :
				       f == 2 ? x->cpus :
				       f == 3 ? x->vcs :
				       f == 4 ? x->rate / x1->rate :
						counts[c] * x1->cpu_us / x->cpu_us;
			}
			stats(v, rounds, &med[f], &lo[f], &hi[f]);
		}
		snprintf(range[0], sizeof(range[0]), "(%.0f-%.0f)", lo[0], hi[0]);
		snprintf(range[1], sizeof(range[1]), "(%.2f-%.2f)", lo[1], hi[1]);
		printf("%-7u %10.0f %-19s %6.2f %-13s %5.2f %6.2f ", counts[c], med[0], range[0],
		       med[1], range[1], med[2], med[3]);
		if (one < 0) {
			printf("%7s\n", "-");
			continue;
		}
		snprintf(range[2], sizeof(range[2]), "(%.2f-%.2f)", lo[4], hi[4]);
		snprintf(range[3], sizeof(range[3]), "(%.2f-%.2f)", lo[5], hi[5]);
		printf("%6.2fx %-11s %8.2fx %s\n", med[4], range[2], med[5], range[3]);
	}
	for (unsigned c = 0; c < ncounts; c++) {
		double v[MAX_ROUNDS], med, lo, hi;
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		double want = counts[c] < cores ? counts[c] : (double)cores;

		for (unsigned r = 0; r < rounds; r++)
			v[r] = smp[r][c].cpus;
		stats(v, rounds, &med, &lo, &hi);
		if (lo < 0.9 * want)
			printf("note: %u thread%s ran on %.2f-%.2f CPU of %.0f: asleep (sleeps) or "
			       "preempted by other processes; its records/s and speedup show that too\n",
			       counts[c], counts[c] == 1 ? "" : "s", lo, hi, want);
	}
	ret = 0;
out:
	for (unsigned i = 0; i < MAX_THREADS; i++) {
		free(rd[i].ios);
		free(rd[i].bufs);
	}
	bench_close(b);
	return ret;
}

/* "1,2,4" into @counts; @return how many, or 0 if malformed. */
static unsigned parse_counts(const char *s, unsigned *counts)
{
	unsigned n = 0;

	for (;;) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v < 1 || v > MAX_THREADS || n >= MAX_COUNTS)
			return 0;
		counts[n++] = (unsigned)v;
		if (!*end)
			return n;
		if (*end != ',')
			return 0;
		s = end + 1;
	}
}

int main(int argc, char **argv)
{
	struct result res[4];
	struct bench b = { .parent = "/var/tmp" };
	const char *ename = "off";
	unsigned counts[MAX_COUNTS] = { 1 }, ncounts = 1, rounds = 3, batch = 16;
	double secs = 5;
	uint64_t mib = 256;
	int c, nres = 0, modes = 3, threads = 0, ret = 0;

	while ((c = getopt(argc, argv, "s:m:bde:t:q:r:h")) != -1) {
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
		case 'e':
			ename = optarg;
			break;
		case 't':
			threads = 1;
			ncounts = parse_counts(optarg, counts);
			break;
		case 'q':
			threads = 1;
			batch = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'r':
			threads = 1;
			rounds = (unsigned)strtoul(optarg, NULL, 10);
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
		b.parent = argv[optind];
	if (secs <= 0 || mib < 1 || !ncounts || batch < 1 || batch > MAX_BATCH || rounds < 1 ||
	    rounds > MAX_ROUNDS) {
		usage(stderr);
		return 2;
	}
	b.suite = strcmp(ename, "off") ? ename : NULL;
	b.volsize = mib << 20;
	for (int direct = 0; direct <= 1; direct++) {
		if (!(modes & (1 << direct)))
			continue;
		b.direct = direct;
		if (threads) {
			ret = run_threads(&b, counts, ncounts, rounds, batch, secs, ename);
			if (ret)
				return 1;
			continue;
		}
		ret = run_mode(&b, secs, res + nres);
		if (ret)
			return 1;
		nres += 2;
	}
	if (threads)
		return 0;
	printf("engine_bench: 8 KiB records, 1 thread, %llu MiB dataset, %u LUN files in %s",
	       (unsigned long long)mib, NLUNS, b.parent);
	if (b.suite)
		printf(", encryption %s", b.suite);
	printf("\n%-9s %-6s %12s %10s %10s\n", "mode", "op", "records/s", "MB/s", "us/rec");
	for (int i = 0; i < nres; i++) {
		double rate = (double)res[i].n / res[i].secs;

		printf("%-9s %-6s %12.0f %10.1f %10.2f\n", res[i].mode, res[i].op, rate,
		       rate * REC / 1e6, 1e6 / rate);
	}
	return 0;
}
