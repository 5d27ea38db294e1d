// SPDX-License-Identifier: MIT
/*
 * scale_records: the import of a pool of many records, which must not walk
 * them (txg/spacemap.c). A pool of 10^8 records of 8 KiB is 800 GB of
 * data: the builder stages block pointers to extents the allocator hands
 * out, through the txg as a write does, but writes no record, so the LUN
 * files stay sparse and the metadata (LMDB, and the log on the LUNs) is
 * what a written pool's would be.
 *
 *   scale_records build DIR N [LUNS]
 *                                pool "big" over LUNS (default 4, at most
 *                                16) sparse LUN files in DIR (state in
 *                                DIR/state), dataset big/v of N records,
 *                                committed every 2^20 records
 *   scale_records import DIR     import it: seconds and RssAnon after
 *   scale_records walk DIR       the same after dropping LMDB's rows of the
 *                                free map, so the import walks every
 *                                pointer (and writes them anew)
 *   scale_records check DIR      pool check (the rows against a walk)
 *
 * Output: one line "import|walk records=N secs=S read_mib=M rss_anon_kib=K
 * trimmed=K2" (bytes read by syscalls, which the LMDB map's page faults
 * are not; RssAnon before and after the heap trim, which cofferd does after
 * an import) or the check's counts. DIR should be on a disk with room for
 * the metadata: LMDB about 120 bytes a record, and the log about 200 bytes
 * a record for each copy of it (three on 3 LUNs or more, two on 2, one on
 * 1), 2.6 times that at 10^8 records: LUN files stay sparse where no
 * record is written but keep every log extent ever written (each
 * checkpoint, twice the size of the one before, at a new place). 10^8
 * records on one LUN took 66 GiB.
 */
#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dev/alloc.h"
#include "kv/bp.h"
#include "pool_impl.h"
#include "store.h"
#include "txg/txg.h"

#define REC 8192u
#define MAX_LUNS 16
#define BATCH (1u << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int ret)
{
	fprintf(stderr, "scale_records: %s: %s (%s)\n", what, stor_strerror(ret),
		stor_pool_last_error());
	exit(1);
}

/* The number after @key in /proc/self/@file, or -1. */
static long proc_field(const char *file, const char *key)
{
	char path[64], line[256];
	long v = -1;
	size_t klen = strlen(key);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/%s", file);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && sscanf(line + klen, " %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static long rss_anon_kib(void)
{
	return proc_field("status", "RssAnon:");
}

static void opts_of(const char *dir, struct stor_pool_opts *o, char *state, size_t len)
{
	snprintf(state, len, "%s/state", dir);
	mkdir(state, 0700);
	memset(o, 0, sizeof(*o));
	o->state_dir = state;
	o->map_size = (size_t)64 << 30; /* no growth steps in the figures */
}

static void build(const char *dir, uint64_t n, unsigned nluns)
{
	char state[4200], paths[MAX_LUNS][4200];
	const char *luns[MAX_LUNS];
	const char *props[] = { "refreservation=none", "checksum=off" };
	struct stor_ds_opts dso = { .volsize = n * REC, .recordsize = REC, .props = props,
				    .nprops = 2 };
	struct stor_pool_opts o;
	struct stor_pool *p;
	struct stor_ds *ds;
	double t0 = now_s();
	int ret;

	opts_of(dir, &o, state, sizeof(state));
	/* each LUN its share of the records, a third more for the log */
	o.lun_size = (n * REC / nluns + (64u << 20)) / 3 * 4 / 4096 * 4096;
	for (unsigned i = 0; i < nluns; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/lun%u", dir, i);
		luns[i] = paths[i];
	}
	ret = stor_pool_create("big", luns, nluns, &o, &p);
	if (ret < 0)
		die("create", ret);
	ret = stor_ds_create(p, "big/v", &dso, &ds);
	if (ret < 0)
		die("dataset create", ret);
	for (uint64_t r = 0; r < n; r++) {
		struct bp bp = { .psize = REC, .lsize = REC, .csize = REC }, old;
		unsigned lun;
		int had;

		bp.birth = txg_hold(p);
		pthread_mutex_lock(&p->stripes[pool_stripe(ds->id, r)]);
		ret = txg_reserve(p, 1);
		if (ret == 0)
			ret = alloc_get(p->alloc, REC / STOR_SECTOR, &lun, &bp.sector);
		bp.lun = (uint16_t)lun;
		if (ret == 0)
			ret = txg_stage(p, ds, r, &bp, NULL, &old, &had);
		pthread_mutex_unlock(&p->stripes[pool_stripe(ds->id, r)]);
		txg_rele(p);
		if (ret < 0)
			die("stage", ret);
		atomic_fetch_add(&ds->used, REC);
		atomic_fetch_add(&ds->logical_used, REC);
		if (r % BATCH == BATCH - 1 || r + 1 == n) {
			ret = stor_pool_sync(p);
			if (ret < 0)
				die("sync", ret);
			fprintf(stderr, "%" PRIu64 " records, %.0f s\n", r + 1, now_s() - t0);
		}
	}
	stor_ds_close(ds);
	ret = stor_pool_export(p);
	if (ret < 0)
		die("export", ret);
	printf("build records=%" PRIu64 " secs=%.1f\n", n, now_s() - t0);
}

/* As a hand on the file would: LMDB without the free map's rows. */
static void drop_rows(const char *state)
{
	char path[4300];
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

	snprintf(path, sizeof(path), "%s/pools/big.mdb", state);
	if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) ||
	    mdb_env_set_mapsize(env, (size_t)64 << 30) ||
	    mdb_env_open(env, path, MDB_NOSUBDIR, 0600) || mdb_txn_begin(env, NULL, 0, &txn) ||
	    mdb_dbi_open(txn, "space", 0, &dbi) || mdb_drop(txn, dbi, 0) || mdb_txn_commit(txn)) {
		fprintf(stderr, "scale_records: dropping the rows of %s failed\n", path);
		exit(1);
	}
	mdb_env_close(env);
}

static void import(const char *dir, int walk, int check)
{
	char state[4200];
	struct stor_pool_opts o;
	struct stor_pool *p;
	struct stor_prop_value v;
	double t0;
	long rchar0;
	int ret;

	opts_of(dir, &o, state, sizeof(state));
	if (walk)
		drop_rows(state);
	rchar0 = proc_field("io", "rchar:");
	t0 = now_s();
	ret = stor_pool_open("big", &o, &p);
	if (ret < 0)
		die("import", ret);
	if (check) {
		struct stor_verify_report r;

		ret = stor_pool_verify(p, &r);
		if (ret < 0)
			die("check", ret);
		printf("check records=%" PRIu64 " space_errors=%" PRIu64 " extent_errors=%" PRIu64
		       " secs=%.1f\n",
		       r.records, r.space_errors, r.extent_errors, now_s() - t0);
		stor_verify_report_free(&r);
	} else {
		double secs = now_s() - t0;
		long rss = rss_anon_kib(), rchar = proc_field("io", "rchar:") - rchar0;

		stor_heap_trim(); /* as cofferd does after an import */
		ret = stor_ds_get(p, "big/v", "used", &v);
		printf("%s records=%llu secs=%.2f read_mib=%.1f rss_anon_kib=%ld trimmed=%ld\n",
		       walk ? "walk" : "import", ret == 0 ? strtoull(v.value, NULL, 10) / REC : 0ull,
		       secs, (double)rchar / 1048576, rss, rss_anon_kib());
	}
	ret = stor_pool_export(p);
	if (ret < 0)
		die("export", ret);
}

int main(int argc, char **argv)
{
	unsigned nluns = argc == 5 ? (unsigned)strtoul(argv[4], NULL, 10) : 4;

	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "build") && nluns >= 1 &&
	    nluns <= MAX_LUNS)
		build(argv[2], strtoull(argv[3], NULL, 10), nluns);
	else if (argc == 3 && !strcmp(argv[1], "import"))
		import(argv[2], 0, 0);
	else if (argc == 3 && !strcmp(argv[1], "walk"))
		import(argv[2], 1, 0);
	else if (argc == 3 && !strcmp(argv[1], "check"))
		import(argv[2], 0, 1);
	else {
		fprintf(stderr, "usage: scale_records build DIR N [LUNS] | import DIR | walk DIR | check DIR\n");
		return 2;
	}
	return 0;
}
