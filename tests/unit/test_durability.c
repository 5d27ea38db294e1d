/* SPDX-License-Identifier: MIT */
/*
 * Durability of the engine's bookkeeping: each interleaving here once left
 * a pool whose space accounting was wrong or that no longer imported. After
 * every test the pool passes the offline check (stor_pool_verify: no extent
 * referenced twice, allocator and datasets count what the pointers
 * reference, no double free refused) before and after a re-import.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fixture.h"

#define REC 8192u
#define VOL (64u * REC)

static struct tpool tp;

static void setup(void)
{
	/* tmpfs keeps the LUN traffic off the disk */
	setenv("TMPDIR", "/dev/shm", 0);
}

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(durability, .init = setup, .fini = teardown, .timeout = 240);

static void assert_clean(const char *when)
{
	struct stor_verify_report r;
	int ret = stor_pool_verify(tp.pool, &r);

	stor_verify_report_free(&r);
	cr_assert_eq(ret, 0, "%s: verify: %s", when, stor_strerror(ret));
	cr_assert_eq(r.extent_errors + r.space_errors + r.bad_frees + r.cksum_errors + r.mac_errors,
		     0,
		     "%s: %llu extent errors, %llu space errors, %llu double frees, "
		     "%llu checksum errors, %llu MAC errors",
		     when, (unsigned long long)r.extent_errors, (unsigned long long)r.space_errors,
		     (unsigned long long)r.bad_frees, (unsigned long long)r.cksum_errors,
		     (unsigned long long)r.mac_errors);
}

/* Clean now, and after the pool is closed and imported again. */
static void assert_clean_across_import(void)
{
	int ret;

	assert_clean("open");
	tpool_close(&tp);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "re-import: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	assert_clean("re-imported");
}

static void fill(uint8_t *buf, uint64_t rec, uint64_t gen)
{
	tpat_fill(buf, REC, rec, gen);
}

static void write_all(struct stor_ds *ds, uint64_t gen)
{
	static uint8_t buf[REC];

	for (uint64_t r = 0; r < VOL / REC; r++) {
		fill(buf, r, gen);
		cr_assert_eq(stor_ds_write(ds, r * REC, buf, REC), 0);
	}
}

static uint64_t pool_used(void)
{
	struct stor_pool_stat st;

	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	return st.used;
}

/*
 * Overwrites staged but not committed, then destroy: the replaced extents
 * are on the open txg's free list and LMDB still points at them; each must
 * be freed once. Freeing them twice made 'used' wrap and let two records
 * share sectors.
 */
Test(durability, destroy_with_uncommitted_overwrites_frees_each_extent_once)
{
	struct stor_ds *ds;
	uint64_t before;

	tpool_init(&tp, 2, 32ull << 20, NULL);
	before = pool_used();
	ds = tpool_ds(&tp, "tank/a", VOL, REC);
	write_all(ds, 1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	write_all(ds, 2); /* overwrites, not committed */
	stor_ds_close(ds);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/a", 0), 0);
	cr_assert_eq(pool_used(), before, "used after destroy: %llu, want %llu",
		     (unsigned long long)pool_used(), (unsigned long long)before);
	assert_clean_across_import();
	cr_assert_eq(pool_used(), before);
}

struct churn {
	struct stor_ds *ds;
	atomic_int stop;
	unsigned long rounds;
	int err;
};

/* Overwrite and read back the records of one dataset until told to stop. */
static void *writer(void *arg)
{
	struct churn *c = arg;
	static uint8_t buf[REC], got[REC];

	for (uint64_t gen = 1; !atomic_load(&c->stop) && !c->err; gen++) {
		for (uint64_t r = 0; r < 8 && !c->err; r++) {
			fill(buf, r, gen);
			c->err = stor_ds_write(c->ds, r * REC, buf, REC);
			if (!c->err)
				c->err = stor_ds_read(c->ds, r * REC, got, REC);
			if (!c->err && memcmp(buf, got, REC))
				c->err = -EILSEQ;
		}
		c->rounds++;
	}
	return NULL;
}

/* A writer on another dataset takes freed extents while datasets with
 * uncommitted overwrites are destroyed, hundreds of times. */
Test(durability, destroy_churn_beside_a_writer_keeps_every_extent_owned_once)
{
	struct churn c = { 0 };
	uint8_t buf[REC], got[REC];
	pthread_t th;

	tpool_init(&tp, 2, 64ull << 20, NULL);
	c.ds = tpool_ds(&tp, "tank/live", 8 * REC, REC);
	cr_assert_eq(pthread_create(&th, NULL, writer, &c), 0);
	for (int i = 0; i < 200 && !c.err; i++) {
		struct stor_ds *ds = tpool_ds(&tp, "tank/churn", 8 * REC, REC);

		for (uint64_t r = 0; r < 8; r++) {
			fill(buf, r, 1);
			cr_assert_eq(stor_ds_write(ds, r * REC, buf, REC), 0);
		}
		if (i % 2)
			cr_assert_eq(stor_pool_sync(tp.pool), 0);
		for (uint64_t r = 0; r < 8; r++) {
			fill(buf, r, 2);
			cr_assert_eq(stor_ds_write(ds, r * REC, buf, REC), 0);
		}
		stor_ds_close(ds);
		cr_assert_eq(stor_ds_destroy(tp.pool, "tank/churn", 0), 0, "round %d", i);
	}
	atomic_store(&c.stop, 1);
	pthread_join(th, NULL);
	cr_assert_eq(c.err, 0, "the writer failed: %s", stor_strerror(c.err));
	cr_assert_gt(c.rounds, 0);
	for (uint64_t r = 0; r < 8; r++) {
		cr_assert_eq(stor_ds_read(c.ds, r * REC, got, REC), 0);
		cr_assert_geq(tpat_check(got, REC, r), 1, "record %llu of the live dataset",
			      (unsigned long long)r);
	}
	stor_ds_close(c.ds);
	assert_clean_across_import();
}

struct loader {
	atomic_int stop;
	int err;
	unsigned long loads;
};

/* load-key and unload-key in a loop: each load holds the admin lock through PBKDF2. */
static void *key_churn(void *arg)
{
	static const struct stor_key_material pass = { (const uint8_t *)"correct horse battery", 21 };
	struct loader *l = arg;

	while (!atomic_load(&l->stop) && !l->err) {
		l->err = stor_key_unload(tp.pool, "tank/enc", 0);
		if (!l->err)
			l->err = stor_key_load(tp.pool, "tank/enc", &pass, 0);
		l->loads++;
	}
	return NULL;
}

/*
 * LUNs added while a writer runs and load-key holds the admin lock: no
 * write may land on a LUN before the pool has it, and every LUN a pointer
 * names must be in the durable pool record.
 */
Test(durability, luns_added_under_writes_and_key_loads_are_durable_before_use)
{
	static const struct stor_key_material pass = { (const uint8_t *)"correct horse battery", 21 };
	const char *props[] = { "encryption=aes-256-gcm", "keyformat=passphrase",
				"pbkdf2iters=200000" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 3,
				  .key = &pass };
	struct churn c = { 0 };
	struct loader l = { 0 };
	pthread_t w, k;
	char path[PATH_MAX + 16];

	tpool_init(&tp, 1, 16ull << 20, NULL);
	cr_assert_eq(stor_ds_create(tp.pool, "tank/enc", &o, NULL), 0);
	c.ds = tpool_ds(&tp, "tank/live", 8 * REC, REC);
	cr_assert_eq(pthread_create(&w, NULL, writer, &c), 0);
	cr_assert_eq(pthread_create(&k, NULL, key_churn, &l), 0);
	for (unsigned i = 1; i < 6; i++) {
		int ret;

		snprintf(path, sizeof(path), "%s/added%u", tp.dir, i);
		ret = stor_pool_add_lun(tp.pool, path, 16ull << 20, 0);
		cr_assert_eq(ret, 0, "add lun %u: %s (%s)", i, stor_strerror(ret),
			     stor_pool_last_error());
	}
	atomic_store(&c.stop, 1);
	atomic_store(&l.stop, 1);
	pthread_join(w, NULL);
	pthread_join(k, NULL);
	cr_assert_eq(c.err, 0, "the writer failed: %s", stor_strerror(c.err));
	cr_assert_eq(l.err, 0, "key churn failed: %s", stor_strerror(l.err));
	stor_ds_close(c.ds);
	assert_clean_across_import();
	{
		struct stor_pool_stat st;
		cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
		cr_assert_eq(st.nluns, 6, "LUNs after re-import: %u", st.nluns);
	}
}

/* A metadata map that fills grows, and the commit that filled it succeeds. */
Test(durability, a_full_metadata_map_grows_instead_of_failing_commits)
{
	struct stor_pool_opts o = { .map_size = 1 << 20 };
	static uint8_t buf[64 * 4096];
	struct stor_ds *ds;
	const unsigned rs = 4096, n = 32768; /* about 3 MiB of block pointers */
	int ret;

	tpool_init(&tp, 1, 256ull << 20, &o);
	ds = tpool_ds(&tp, "tank/a", (uint64_t)n * rs, rs);
	for (unsigned r = 0; r < n; r += 64) {
		for (unsigned k = 0; k < 64; k++)
			tpat_fill(buf + k * rs, rs, r + k, 1);
		ret = stor_ds_write(ds, (uint64_t)r * rs, buf, sizeof(buf));
		cr_assert_eq(ret, 0, "write of record %u: %s", r, stor_strerror(ret));
		if (r % 4096 == 0)
			cr_assert_eq(stor_ds_flush(ds), 0, "flush at record %u", r);
	}
	ret = stor_ds_flush(ds);
	cr_assert_eq(ret, 0, "last flush: %s", stor_strerror(ret));
	stor_ds_close(ds);
	assert_clean_across_import();
	ds = NULL;
	cr_assert_eq(stor_ds_open(tp.pool, "tank/a", &ds), 0);
	for (unsigned r = 0; r < n; r += 997) {
		cr_assert_eq(stor_ds_read(ds, (uint64_t)r * rs, buf, rs), 0);
		cr_assert_eq(tpat_check(buf, rs, r), 1, "record %u", r);
	}
	stor_ds_close(ds);
}

/*
 * O_DIRECT LUNs on a disk file system: a commit flushes the txg's data LUNs
 * and its log record's copies in one round of fdatasyncs in flight at once
 * (io_uring), then the uberblocks. Every write reads back after the pool is
 * imported again, from LMDB and from the LUNs alone.
 */
Test(durability, o_direct_luns_commit_in_one_flush_round_and_import)
{
	struct stor_pool_opts o = { .direct_io = 1 };
	static uint8_t buf[REC], want[REC];
	char probe[] = "/var/tmp/coffer-direct.XXXXXX", mdb[PATH_MAX + 16];
	struct stor_ds *ds;
	int fd = mkstemp(probe);

	cr_assert(fd >= 0, "mkstemp in /var/tmp: %s", strerror(errno));
	close(fd);
	fd = open(probe, O_RDWR | O_DIRECT);
	unlink(probe);
	if (fd < 0)
		cr_skip_test("/var/tmp takes no O_DIRECT (%s): no disk file system here",
			     strerror(errno));
	close(fd);
	setenv("TMPDIR", "/var/tmp", 1);
	tpool_init(&tp, 4, 16ull << 20, &o);
	setenv("TMPDIR", "/dev/shm", 1);
	ds = tpool_ds(&tp, "tank/vol", VOL, REC);
	for (uint64_t gen = 1; gen <= 3; gen++) {
		write_all(ds, gen);
		cr_assert_eq(stor_pool_sync(tp.pool), 0, "sync of generation %llu",
			     (unsigned long long)gen);
	}
	stor_ds_close(ds);
	assert_clean_across_import();
	/* and once more with the LMDB file gone: the LUNs alone */
	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(mdb), 0, "unlink %s: %s", mdb, strerror(errno));
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/vol", &ds), 0);
	for (uint64_t r = 0; r < VOL / REC; r++) {
		fill(want, r, 3);
		cr_assert_eq(stor_ds_read(ds, r * REC, buf, REC), 0);
		cr_assert(memcmp(buf, want, REC) == 0, "record %llu after the rebuild",
			  (unsigned long long)r);
	}
	stor_ds_close(ds);
	assert_clean("rebuilt");
}

/*
 * Copy-on-write leaves a pool's free space in short runs. Each txg's log
 * record, and the checkpoint every so many txgs, must still reach the LUNs
 * (in parts, as short as a sector): a record that found no run long enough
 * left the LUNs behind LMDB, and the LUNs alone no longer imported the pool
 * as it was.
 */
Test(durability, a_fragmented_pool_keeps_its_metadata_on_its_luns)
{
	static uint8_t buf[REC], want[REC], gen[(32ull << 20) / REC];
	struct stor_pool_stat st;
	char mdb[PATH_MAX + 16];
	struct stor_ds *ds;
	uint64_t nrec = sizeof(gen), r, seed = 12345;
	int ret;

	tpool_init(&tp, 2, 16ull << 20, NULL);
	ds = tpool_ds(&tp, "tank/vol", nrec * REC, REC);
	/* the pool most of the way full, records in a row */
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	nrec = st.size / REC * 4 / 5;
	for (r = 0; r < nrec; r++) {
		fill(buf, r, 1);
		cr_assert_eq(stor_ds_write(ds, r * REC, buf, REC), 0, "write %llu",
			     (unsigned long long)r);
		gen[r] = 1;
	}
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	/* overwrites at random, a few per txg, for more txgs than a log holds
	 * before its checkpoint: the allocator's cursor sweeps the free space
	 * again and again and leaves it in runs of a record */
	for (unsigned txg = 0; txg < 400; txg++) {
		for (unsigned k = 0; k < 8; k++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			r = (seed >> 33) % nrec;
			gen[r] = (uint8_t)(gen[r] % 200 + 1);
			fill(buf, r, gen[r]);
			ret = stor_ds_write(ds, r * REC, buf, REC);
			cr_assert_eq(ret, 0, "overwrite %llu in txg %u: %s", (unsigned long long)r,
				     txg, stor_strerror(ret));
		}
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
	}
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert(!strstr(st.meta_log, "lag"), "the LUNs lag: %s", st.meta_log);
	stor_ds_close(ds);
	assert_clean("fragmented");

	/* the LUNs alone hold every txg */
	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(mdb), 0, "unlink %s: %s", mdb, strerror(errno));
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/vol", &ds), 0);
	for (r = 0; r < nrec; r++) {
		fill(want, r, gen[r]);
		cr_assert_eq(stor_ds_read(ds, r * REC, buf, REC), 0);
		cr_assert(memcmp(buf, want, REC) == 0, "record %llu (generation %u) after the "
			  "rebuild", (unsigned long long)r, gen[r]);
	}
	stor_ds_close(ds);
	assert_clean("rebuilt");
}
