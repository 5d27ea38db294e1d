/* SPDX-License-Identifier: MIT */
/*
 * Record I/O: round trips at any offset and length against an in-memory
 * shadow of the volume, zero reads that take no space, discard, range
 * checks, a full pool, damaged data on a LUN, batches over two datasets,
 * concurrent readers and writers, a LUN that refuses writes in the middle
 * of a batch, and records of 512 B and 1 MiB.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fixture.h"

#define REC 8192u
#define VOL (4u << 20)

static struct tpool tp;
static struct stor_ds *ds;

static void setup(void)
{
	tpool_init(&tp, 2, 32u << 20, NULL);
	ds = tpool_ds(&tp, TPOOL_NAME "/vol", VOL, REC);
}

static void teardown(void)
{
	stor_ds_close(ds);
	ds = NULL;
	tpool_fini(&tp);
}

TestSuite(record, .init = setup, .fini = teardown, .timeout = 240);

/* Reopen the pool and the test dataset: nothing may come from memory. */
static void reopen(void)
{
	stor_ds_close(ds);
	ds = NULL;
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/vol", &ds), 0);
}

static void check_range(struct stor_ds *d, const unsigned char *want, uint64_t off, size_t len)
{
	unsigned char *got = malloc(len);
	int ret;

	cr_assert_not_null(got);
	memset(got, 0x5a, len);
	ret = stor_ds_read(d, off, got, len);
	cr_assert_eq(ret, 0, "read %llu+%zu: %s", (unsigned long long)off, len, stor_strerror(ret));
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i])
			cr_assert_fail("byte %llu: want %02x got %02x",
				       (unsigned long long)(off + i), want[i], got[i]);
	free(got);
}

static void check_zero(struct stor_ds *d, uint64_t off, size_t len)
{
	unsigned char *z = calloc(1, len);

	check_range(d, z, off, len);
	free(z);
}

/* Write @len bytes at @off into the dataset and the shadow. */
static void shadow_write(unsigned char *shadow, uint64_t off, size_t len, uint64_t seed)
{
	int ret;

	tpat_random(shadow + off, len, seed);
	ret = stor_ds_write(ds, off, shadow + off, len);
	cr_assert_eq(ret, 0, "write %llu+%zu: %s", (unsigned long long)off, len,
		     stor_strerror(ret));
}

Test(record, one_byte_at_8191_round_trips)
{
	unsigned char b = 0xa7, got[3 * REC];

	cr_assert_eq(stor_ds_write(ds, 8191, &b, 1), 0);
	memset(got, 0x11, sizeof(got));
	cr_assert_eq(stor_ds_read(ds, 0, got, sizeof(got)), 0);
	for (size_t i = 0; i < sizeof(got); i++)
		cr_assert_eq(got[i], i == 8191 ? 0xa7 : 0, "byte %zu", i);
	reopen();
	b = 0;
	cr_assert_eq(stor_ds_read(ds, 8191, &b, 1), 0);
	cr_assert_eq(b, 0xa7);
}

Test(record, unaligned_writes_match_a_shadow)
{
	/* offsets and lengths chosen to hit every edge case of read-modify-write */
	static const struct {
		uint64_t off;
		size_t len;
	} w[] = {
		{ 0, REC },			/* one aligned record */
		{ 2 * REC + 100, 3 * REC },	/* 3 records' worth over 4, 2 partial edges */
		{ 5 * REC - 1, 2 },		/* straddles a boundary */
		{ 7 * REC + 1, REC - 2 },	/* inside one record, both edges partial */
		{ 10 * REC, 1 },		/* first byte */
		{ 11 * REC - 1, 1 },		/* last byte */
		{ 12 * REC + 4000, 10 * REC },	/* long, unaligned */
		{ 13 * REC + 17, 333 },		/* overwrite inside the previous */
		{ VOL - 3 * REC - 5, 3 * REC + 5 }, /* to the end of the volume */
		{ 0, 1 },			/* rewrite inside an existing record */
	};
	unsigned char *shadow = calloc(1, VOL);

	cr_assert_not_null(shadow);
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		shadow_write(shadow, w[i].off, w[i].len, 100 + i);
		/* read back whole records around the write: its edges must be intact */
		uint64_t start = w[i].off / REC * REC;
		uint64_t end = (w[i].off + w[i].len + REC - 1) / REC * REC;

		check_range(ds, shadow + start, start, (size_t)(end - start));
	}
	check_range(ds, shadow, 0, VOL);
	cr_assert_eq(stor_ds_flush(ds), 0);
	reopen();
	check_range(ds, shadow, 0, VOL);
	/* unaligned reads of committed data */
	check_range(ds, shadow + 2 * REC + 99, 2 * REC + 99, 3 * REC + 7);
	check_range(ds, shadow + 5 * REC - 1, 5 * REC - 1, 2);
	free(shadow);
}

Test(record, random_ops_match_a_shadow)
{
	unsigned char *shadow = calloc(1, VOL);
	unsigned seed = 12345;

	cr_assert_not_null(shadow);
	for (int i = 0; i < 300; i++) {
		uint64_t off = (uint64_t)rand_r(&seed) % VOL;
		size_t len = 1 + (size_t)rand_r(&seed) % (3 * REC);
		int op = rand_r(&seed) % 10;

		if (off + len > VOL)
			len = VOL - off;
		if (op < 6) {
			shadow_write(shadow, off, len, 1000 + (uint64_t)i);
		} else if (op < 8) {
			cr_assert_eq(stor_ds_discard(ds, off, len), 0);
			memset(shadow + off, 0, len);
		} else if (op < 9) {
			check_range(ds, shadow + off, off, len);
		} else {
			cr_assert_eq(stor_pool_sync(tp.pool), 0);
		}
	}
	check_range(ds, shadow, 0, VOL);
	reopen();
	check_range(ds, shadow, 0, VOL);
	free(shadow);
}

Test(record, whole_volume_round_trips)
{
	unsigned char *buf = malloc(VOL);

	cr_assert_not_null(buf);
	tpat_random(buf, VOL, 99);
	cr_assert_eq(stor_ds_write(ds, 0, buf, VOL), 0);
	check_range(ds, buf, 0, VOL);
	reopen();
	check_range(ds, buf, 0, VOL);
	free(buf);
}

Test(record, unwritten_records_are_zeros_and_take_no_space)
{
	uint64_t used0;

	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used0 = tpool_used(&tp);
	check_zero(ds, 0, VOL);
	check_zero(ds, 12345, 67890);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(tpool_used(&tp), used0, "reading unwritten records took space");
}

Test(record, discard_zeroes_and_frees_after_sync)
{
	static unsigned char buf[6 * REC];
	uint64_t used1, used2;

	tpat_random(buf, sizeof(buf), 5);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used1 = tpool_used(&tp);
	/* records 1..4 wholly inside */
	cr_assert_eq(stor_ds_discard(ds, REC, 4 * REC), 0);
	check_range(ds, buf, 0, REC);
	check_zero(ds, REC, 4 * REC);
	check_range(ds, buf + 5 * REC, 5 * REC, REC);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used2 = tpool_used(&tp);
	cr_assert_leq(used2 + 4 * REC, used1, "used %llu before discard, %llu after sync",
		      (unsigned long long)used1, (unsigned long long)used2);
	reopen();
	check_range(ds, buf, 0, REC);
	check_zero(ds, REC, 4 * REC);
	check_range(ds, buf + 5 * REC, 5 * REC, REC);
	cr_assert_eq(tpool_used(&tp), used2);
}

Test(record, partial_edge_discard_zeroes_only_the_range)
{
	static unsigned char buf[3 * REC], want[3 * REC];

	tpat_random(buf, sizeof(buf), 6);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	memcpy(want, buf, sizeof(want));
	memset(want + 100, 0, sizeof(want) - 200);
	cr_assert_eq(stor_ds_discard(ds, 100, sizeof(buf) - 200), 0);
	check_range(ds, want, 0, sizeof(want));
	cr_assert_eq(stor_ds_flush(ds), 0);
	reopen();
	check_range(ds, want, 0, sizeof(want));
	/* a discard inside one record */
	cr_assert_eq(stor_ds_discard(ds, 10, 20), 0);
	memset(want + 10, 0, 20);
	check_range(ds, want, 0, sizeof(want));
}

Test(record, discard_of_unwritten_records_is_fine)
{
	cr_assert_eq(stor_ds_discard(ds, 0, VOL), 0);
	check_zero(ds, 0, 4 * REC);
}

Test(record, out_of_range_is_erange)
{
	unsigned char b[16] = { 0 };

	cr_assert_eq(stor_ds_read(ds, VOL - 1, b, 2), STOR_ERANGE);
	cr_assert_eq(stor_ds_read(ds, VOL, b, 1), STOR_ERANGE);
	cr_assert_eq(stor_ds_write(ds, VOL - 8, b, 16), STOR_ERANGE);
	cr_assert_eq(stor_ds_write(ds, VOL, b, 1), STOR_ERANGE);
	cr_assert_eq(stor_ds_write(ds, UINT64_MAX - 4, b, 8), STOR_ERANGE, "offset overflow");
	cr_assert_eq(stor_ds_read(ds, UINT64_MAX - 4, b, 8), STOR_ERANGE, "offset overflow");
	cr_assert_eq(stor_ds_discard(ds, VOL - 1, 2), STOR_ERANGE);
	cr_assert_eq(stor_ds_discard(ds, 8, UINT64_MAX), STOR_ERANGE, "length overflow");
	/* the last byte is inside */
	cr_assert_eq(stor_ds_write(ds, VOL - 1, b, 1), 0);
	cr_assert_eq(stor_ds_read(ds, VOL - 1, b, 1), 0);
	/* a refused write changed nothing */
	check_zero(ds, VOL - 16, 15);
}

Test(record, flipped_data_byte_is_ecksum_never_wrong_bytes)
{
	static unsigned char buf[REC], got[REC];
	unsigned lun;
	uint64_t off;
	int n, ret;

	tpat_random(buf, sizeof(buf), 0xfeed);
	cr_assert_eq(stor_ds_write(ds, 3 * REC, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_write(ds, 4 * REC, buf + 1, 1), 0); /* a neighbour */
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	n = tpool_find(&tp, buf + 64, 64, &lun, &off);
	cr_assert_eq(n, 1, "record found %d times in the LUN files", n);
	reopen(); /* nothing from memory */
	tpool_flip_byte(&tp, lun, off + 10);
	memset(got, 0, sizeof(got));
	ret = stor_ds_read(ds, 3 * REC, got, sizeof(got));
	cr_assert_eq(ret, STOR_ECKSUM, "got %s", stor_strerror(ret));
	/* a partial read of the record fails too, and so does a read-modify-write */
	ret = stor_ds_read(ds, 3 * REC + 5, got, 5);
	cr_assert_eq(ret, STOR_ECKSUM, "partial read: got %s", stor_strerror(ret));
	ret = stor_ds_write(ds, 3 * REC + 5, got, 5);
	cr_assert_eq(ret, STOR_ECKSUM, "read-modify-write over damage: got %s", stor_strerror(ret));
	/* the neighbour still reads */
	cr_assert_eq(stor_ds_read(ds, 4 * REC, got, 1), 0);
	cr_assert_eq(got[0], buf[1]);
	/* the LUN's error counter saw it */
	{
		struct stor_lun_stat ls;

		cr_assert_eq(stor_pool_lun_stat(tp.pool, lun, &ls), 0);
		cr_expect_geq(ls.cksum_errors, 1, "cksum_errors not counted");
	}
	/* an overwrite of the whole record repairs it */
	cr_assert_eq(stor_ds_write(ds, 3 * REC, buf, sizeof(buf)), 0);
	check_range(ds, buf, 3 * REC, REC);
}

Test(record, io_submit_batch_over_two_datasets)
{
	struct stor_ds *ds2 = tpool_ds(&tp, TPOOL_NAME "/two", VOL, 4096);
	static unsigned char w1[3 * REC], w2[20000], w3[100], r1[3 * REC], r2[20000], r3[REC],
		r4[100], rz[REC], z[REC];
	struct stor_io ios[] = {
		{ .ds = ds, .op = STOR_IO_WRITE, .off = 0, .len = sizeof(w1), .buf = w1 },
		{ .ds = ds2, .op = STOR_IO_WRITE, .off = 1000, .len = sizeof(w2), .buf = w2 },
		{ .ds = ds, .op = STOR_IO_READ, .off = 0, .len = sizeof(r1), .buf = r1 },
		{ .ds = ds2, .op = STOR_IO_READ, .off = 1000, .len = sizeof(r2), .buf = r2 },
		{ .ds = ds, .op = STOR_IO_WRITE, .off = REC + 50, .len = sizeof(w3), .buf = w3 },
		{ .ds = ds, .op = STOR_IO_READ, .off = REC, .len = REC, .buf = r3 },
		{ .ds = ds2, .op = STOR_IO_READ, .off = 100 * 4096, .len = REC, .buf = rz },
		{ .ds = ds2, .op = STOR_IO_READ, .off = 1000, .len = sizeof(r4), .buf = r4 },
		{ .ds = ds2, .op = STOR_IO_FLUSH },
	};
	unsigned char want3[REC];
	int ret;

	tpat_random(w1, sizeof(w1), 1);
	tpat_random(w2, sizeof(w2), 2);
	tpat_random(w3, sizeof(w3), 3);
	memset(rz, 0x77, sizeof(rz));
	for (size_t i = 0; i < sizeof(ios) / sizeof(ios[0]); i++)
		ios[i].result = 12345;
	ret = stor_io_submit(ios, sizeof(ios) / sizeof(ios[0]));
	cr_assert_eq(ret, 0, "%d requests failed", ret);
	for (size_t i = 0; i < sizeof(ios) / sizeof(ios[0]); i++)
		cr_assert_eq(ios[i].result, 0, "request %zu: %s", i, stor_strerror(ios[i].result));
	/* array order where requests overlap */
	cr_assert_arr_eq(r1, w1, sizeof(w1), "read after write in one batch");
	cr_assert_arr_eq(r2, w2, sizeof(w2));
	memcpy(want3, w1 + REC, REC);
	memcpy(want3 + 50, w3, sizeof(w3));
	cr_assert_arr_eq(r3, want3, REC, "second write not seen by the later read");
	cr_assert_arr_eq(rz, z, REC);
	cr_assert_arr_eq(r4, w2, sizeof(r4));

	stor_ds_close(ds2);
	reopen();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/two", &ds2), 0);
	check_range(ds, want3, REC, REC);
	check_range(ds2, w2, 1000, sizeof(w2));
	stor_ds_close(ds2);
}

Test(record, io_submit_fails_requests_one_by_one)
{
	static unsigned char a[REC], b[REC], c[REC];
	struct stor_io ios[] = {
		{ .ds = ds, .op = STOR_IO_WRITE, .off = 0, .len = REC, .buf = a },
		{ .ds = ds, .op = STOR_IO_WRITE, .off = VOL, .len = REC, .buf = b },
		{ .ds = ds, .op = STOR_IO_READ, .off = 0, .len = REC, .buf = c },
		{ .ds = ds, .op = STOR_IO_DISCARD, .off = VOL - 1, .len = 5 },
	};

	tpat_random(a, sizeof(a), 11);
	cr_assert_eq(stor_io_submit(ios, 4), 2);
	cr_assert_eq(ios[0].result, 0);
	cr_assert_eq(ios[1].result, STOR_ERANGE, "%s", stor_strerror(ios[1].result));
	cr_assert_eq(ios[2].result, 0);
	cr_assert_eq(ios[3].result, STOR_ERANGE, "%s", stor_strerror(ios[3].result));
	cr_assert_arr_eq(c, a, REC);
}

Test(record, data_survives_close_and_open)
{
	static unsigned char buf[40 * REC];

	tpat_random(buf, sizeof(buf), 77);
	cr_assert_eq(stor_ds_write(ds, 17 * REC, buf, sizeof(buf)), 0);
	/* no explicit sync: close commits the open txg */
	reopen();
	check_range(ds, buf, 17 * REC, sizeof(buf));
	reopen();
	check_range(ds, buf, 17 * REC, sizeof(buf));
}

static void geometry_round_trip(uint32_t recsize, uint64_t volsize)
{
	struct stor_ds *d = tpool_ds(&tp, TPOOL_NAME "/geo", volsize, recsize);
	unsigned char *shadow = calloc(1, volsize);
	uint64_t offs[] = { 0, recsize - 1, 3ull * recsize + 7, volsize - recsize - 3 };
	int ret;

	cr_assert_not_null(shadow);
	cr_assert_eq(stor_ds_recordsize(d), recsize);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		size_t len = recsize + 3;

		tpat_random(shadow + offs[i], len, 500 + i);
		ret = stor_ds_write(d, offs[i], shadow + offs[i], len);
		cr_assert_eq(ret, 0, "recsize %u off %llu: %s", recsize,
			     (unsigned long long)offs[i], stor_strerror(ret));
	}
	check_range(d, shadow, 0, volsize);
	stor_ds_close(d);
	reopen();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/geo", &d), 0);
	check_range(d, shadow, 0, volsize);
	stor_ds_close(d);
	free(shadow);
}

Test(record, recordsize_512_works)
{
	geometry_round_trip(512, 1 << 20);
}

Test(record, recordsize_1m_works)
{
	geometry_round_trip(1u << 20, 8u << 20);
}

/* ---- full pool ---- */

/* Pools of their own; a static so that teardown removes them when a test fails. */
static struct tpool small;

static void small_teardown(void)
{
	tpool_fini(&small);
}

TestSuite(record_full, .fini = small_teardown, .timeout = 240);

Test(record_full, enospc_leaves_every_earlier_write_intact)
{
	struct stor_ds *d;
	unsigned char buf[REC];
	unsigned n = 0, before;
	int ret = 0;

	tpool_init(&small, 2, 2u << 20, NULL);
	d = tpool_ds(&small, TPOOL_NAME "/fill", 64u << 20, REC);
	for (n = 0; n < 8192; n++) {
		tpat_fill(buf, REC, n, 1);
		ret = stor_ds_write(d, (uint64_t)n * REC, buf, REC);
		if (ret)
			break;
		if (n % 64 == 63)
			cr_assert_eq(stor_pool_sync(small.pool), 0);
	}
	cr_assert_eq(ret, STOR_ENOSPC, "after %u records: %s", n, stor_strerror(ret));
	cr_assert_gt(n, 100, "only %u records of 8 KiB fit in 4 MiB less its slop", n);
	/* the refused record is unwritten, every earlier one intact */
	check_zero(d, (uint64_t)n * REC, REC);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(stor_ds_read(d, (uint64_t)i * REC, buf, REC), 0);
		cr_assert_eq(tpat_check(buf, REC, i), 1, "record %u", i);
	}
	/* an overwrite needs a new extent before the old one is freed (copy on
	 * write): the slop space ordinary writes cannot use gives it one */
	tpat_fill(buf, REC, 0, 2);
	ret = stor_ds_write(d, 0, buf, REC);
	cr_assert_eq(ret, 0, "overwrite when full: %s", stor_strerror(ret));
	cr_assert_eq(stor_ds_read(d, 0, buf, REC), 0);
	cr_assert_eq(tpat_check(buf, REC, 0), 2);
	/* while new data is still refused, and leaves nothing behind */
	tpat_fill(buf, REC, n, 2);
	ret = stor_ds_write(d, (uint64_t)n * REC, buf, REC);
	cr_assert_eq(ret, STOR_ENOSPC, "new data when full: %s", stor_strerror(ret));
	check_zero(d, (uint64_t)n * REC, REC);
	before = n;
	ret = stor_pool_sync(small.pool);
	cr_assert_eq(ret, 0, "sync of a full pool: %s", stor_strerror(ret));
	stor_ds_close(d);
	tpool_reopen(&small);
	cr_assert_eq(stor_ds_open(small.pool, TPOOL_NAME "/fill", &d), 0);
	for (unsigned i = 1; i < before; i++) {
		cr_assert_eq(stor_ds_read(d, (uint64_t)i * REC, buf, REC), 0);
		cr_assert_eq(tpat_check(buf, REC, i), 1, "record %u after reopen", i);
	}
	/* freeing space makes room again (after the freeing txg is durable) */
	cr_assert_eq(stor_ds_discard(d, 0, 64 * REC), 0);
	cr_assert_eq(stor_pool_sync(small.pool), 0);
	cr_assert_eq(stor_pool_sync(small.pool), 0);
	tpat_fill(buf, REC, before, 3);
	ret = stor_ds_write(d, (uint64_t)before * REC, buf, REC);
	cr_assert_eq(ret, 0, "write after discard+sync: %s", stor_strerror(ret));
	stor_ds_close(d);
	tpool_fini(&small);
}

/*
 * A full pool, committed, and a batch of overwrites of every record (as a
 * daemon worker hands over what its clients queued) with no timer commit in
 * the way. The free space takes the first of them; the others need the
 * extents those replaced, which only a commit gives back, and that commit's
 * overwrites free what the next ones need: the batch waits for as many
 * commits as it takes, and no overwrite fails. New data is still refused.
 */
Test(record_full, a_batch_of_overwrites_beyond_the_free_space_waits_for_commits)
{
	struct stor_pool_opts o = { .txg_timeout_ms = 600000 };
	struct stor_io *ios;
	struct stor_ds *d;
	unsigned char buf[REC], *bufs;
	unsigned n;
	int ret = 0, failed;

	tpool_init(&small, 1, 8u << 20, &o);
	d = tpool_ds(&small, TPOOL_NAME "/fill", 64u << 20, REC);
	for (n = 0; n < 8192; n++) {
		tpat_fill(buf, REC, n, 1);
		if ((ret = stor_ds_write(d, (uint64_t)n * REC, buf, REC)))
			break;
		if (n % 64 == 63)
			cr_assert_eq(stor_pool_sync(small.pool), 0);
	}
	cr_assert_eq(ret, STOR_ENOSPC, "after %u records: %s", n, stor_strerror(ret));
	cr_assert_eq(stor_pool_sync(small.pool), 0);
	ios = calloc(n, sizeof(*ios));
	bufs = malloc((size_t)n * REC);
	cr_assert(ios && bufs);
	for (unsigned i = 0; i < n; i++) {
		tpat_fill(bufs + (size_t)i * REC, REC, i, 2);
		ios[i] = (struct stor_io){ .ds = d, .op = STOR_IO_WRITE, .off = (uint64_t)i * REC,
					   .buf = bufs + (size_t)i * REC, .len = REC };
	}
	failed = stor_io_submit(ios, n);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(ios[i].result, 0, "overwrite %u of %u: %s", i, n,
			     stor_strerror(ios[i].result));
	cr_assert_eq(failed, 0);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(stor_ds_read(d, (uint64_t)i * REC, buf, REC), 0);
		cr_assert_eq(tpat_check(buf, REC, i), 2, "record %u", i);
	}
	tpat_fill(buf, REC, n, 3);
	ret = stor_ds_write(d, (uint64_t)n * REC, buf, REC);
	cr_assert_eq(ret, STOR_ENOSPC, "new data on the full pool: %s", stor_strerror(ret));
	/* in one batch: the check of the whole batch as new data refuses it,
	 * and each record is then judged alone */
	tpat_fill(bufs, REC, 0, 4);
	ios[0] = (struct stor_io){ .ds = d, .op = STOR_IO_WRITE, .off = (uint64_t)n * REC,
				   .buf = buf, .len = REC };
	ios[1] = (struct stor_io){ .ds = d, .op = STOR_IO_WRITE, .off = 0, .buf = bufs, .len = REC };
	cr_assert_eq(stor_io_submit(ios, 2), 1);
	cr_assert_eq(ios[0].result, STOR_ENOSPC, "new data: %s", stor_strerror(ios[0].result));
	cr_assert_eq(ios[1].result, 0, "the overwrite beside it: %s", stor_strerror(ios[1].result));
	cr_assert_eq(stor_ds_read(d, 0, buf, REC), 0);
	cr_assert_eq(tpat_check(buf, REC, 0), 4);
	check_zero(d, (uint64_t)n * REC, REC);
	free(ios);
	free(bufs);
	stor_ds_close(d);
	tpool_fini(&small);
}

Test(record_full, enospc_multi_record_write_changes_nothing)
{
	struct stor_ds *d;
	unsigned char buf[REC], big[8 * REC];
	unsigned n;
	int ret = 0;

	tpool_init(&small, 1, 2u << 20, NULL);
	d = tpool_ds(&small, TPOOL_NAME "/fill", 64u << 20, REC);
	for (n = 0; n < 8192; n++) {
		tpat_fill(buf, REC, n, 1);
		if ((ret = stor_ds_write(d, (uint64_t)n * REC, buf, REC)))
			break;
	}
	cr_assert_eq(ret, STOR_ENOSPC);
	/* free two records' space, then ask for eight */
	cr_assert_eq(stor_ds_discard(d, 0, 2 * REC), 0);
	cr_assert_eq(stor_pool_sync(small.pool), 0);
	cr_assert_eq(stor_pool_sync(small.pool), 0);
	for (unsigned i = 0; i < 8; i++)
		tpat_fill(big + i * REC, REC, n + 10 + i, 9);
	ret = stor_ds_write(d, (uint64_t)(n + 10) * REC, big, sizeof(big));
	cr_assert_eq(ret, STOR_ENOSPC, "got %s", stor_strerror(ret));
	check_zero(d, (uint64_t)(n + 10) * REC, sizeof(big));
	stor_ds_close(d);
	tpool_fini(&small);
}

/* ---- threads ---- */

#define TREC 48
#define TTHREADS 4

struct tshared {
	struct stor_ds *ds;
	struct stor_pool *pool;
	atomic_uint_fast64_t gen[TREC]; /* highest generation handed out per record */
	atomic_int discarded[TREC];     /* zeros are a valid read from then on */
	atomic_int stop;
	atomic_int errors;
	char msg[256];
};

struct targ {
	struct tshared *sh;
	unsigned id;
	atomic_ulong reads, writes; /* polled by the test while the thread runs */
};

static void tfail(struct tshared *sh, const char *what, unsigned rec, long gen, long ret)
{
	if (atomic_fetch_add(&sh->errors, 1) == 0)
		snprintf(sh->msg, sizeof(sh->msg), "%s rec %u gen %ld: %ld (%s)", what, rec, gen,
			 ret, ret < 0 ? stor_strerror((int)ret) : "content");
	atomic_store(&sh->stop, 1);
}

/* A record read by a worker: generation 1..max handed out, or zeros once discarded. */
static int tcheck(struct tshared *sh, const unsigned char *buf, unsigned r)
{
	int64_t g = tpat_check(buf, REC, r);

	if ((g == 0 && atomic_load(&sh->discarded[r])) ||
	    (g > 0 && (uint64_t)g <= atomic_load(&sh->gen[r])))
		return 0;
	tfail(sh, "read: bad content, check", r, (long)g, (long)atomic_load(&sh->gen[r]));
	return -1;
}

static void *tworker(void *p)
{
	struct targ *a = p;
	struct tshared *sh = a->sh;
	unsigned seed = 1000 + a->id;
	unsigned char *buf = malloc(4 * REC);

	while (!atomic_load(&sh->stop)) {
		/* thread i favours its own quarter, but every thread reaches every record */
		unsigned own = a->id * (TREC / TTHREADS) +
			       (unsigned)rand_r(&seed) % (TREC / TTHREADS);
		unsigned r = rand_r(&seed) % 4 ? own : (unsigned)rand_r(&seed) % (TREC - 1);
		int op = rand_r(&seed) % 16, ret;

		if (r + 1 >= TREC)
			r = TREC - 2;
		if (op < 3) {
			uint64_t g = atomic_fetch_add(&sh->gen[r], 1) + 1;

			tpat_fill(buf, REC, r, g);
			ret = stor_ds_write(sh->ds, (uint64_t)r * REC, buf, REC);
			if (ret)
				tfail(sh, "write", r, (long)g, ret);
			a->writes++;
		} else if (op < 5) {
			/* two records in one call: each still one generation */
			uint64_t g0 = atomic_fetch_add(&sh->gen[r], 1) + 1;
			uint64_t g1 = atomic_fetch_add(&sh->gen[r + 1], 1) + 1;

			tpat_fill(buf, REC, r, g0);
			tpat_fill(buf + REC, REC, r + 1, g1);
			ret = stor_ds_write(sh->ds, (uint64_t)r * REC, buf, 2 * REC);
			if (ret)
				tfail(sh, "write2", r, (long)g0, ret);
			a->writes += 2;
		} else if (op < 6) {
			atomic_store(&sh->discarded[r], 1);
			ret = stor_ds_discard(sh->ds, (uint64_t)r * REC, REC);
			if (ret)
				tfail(sh, "discard", r, 0, ret);
		} else if (op < 11) {
			/* one or two records in one read */
			size_t len = (op & 1 ? 2 : 1) * REC;

			ret = stor_ds_read(sh->ds, (uint64_t)r * REC, buf, len);
			if (ret) {
				tfail(sh, "read", r, 0, ret);
				break;
			}
			if (tcheck(sh, buf, r) || (len > REC && tcheck(sh, buf + REC, r + 1)))
				break;
			a->reads++;
		} else if (op < 15) {
			/* a batch: a write, a read of another record, a read of the written one */
			unsigned r2 = (unsigned)rand_r(&seed) % TREC;
			uint64_t g = atomic_fetch_add(&sh->gen[r], 1) + 1;
			struct stor_io ios[3] = {
				{ .ds = sh->ds, .op = STOR_IO_WRITE, .off = (uint64_t)r * REC,
				  .len = REC, .buf = buf },
				{ .ds = sh->ds, .op = STOR_IO_READ, .off = (uint64_t)r2 * REC,
				  .len = REC, .buf = buf + REC },
				{ .ds = sh->ds, .op = STOR_IO_READ, .off = (uint64_t)r * REC,
				  .len = REC, .buf = buf + 2 * REC },
			};

			tpat_fill(buf, REC, r, g);
			ret = stor_io_submit(ios, 3);
			if (ret) {
				tfail(sh, "io_submit", r, (long)g, ios[0].result ? ios[0].result :
								ios[1].result ? ios[1].result :
										ios[2].result);
				break;
			}
			if (tcheck(sh, buf + REC, r2) || tcheck(sh, buf + 2 * REC, r))
				break;
			a->writes++;
			a->reads += 2;
		} else if (rand_r(&seed) % 8 == 0) {
			ret = rand_r(&seed) % 2 ? stor_ds_flush(sh->ds) : stor_pool_sync(sh->pool);
			if (ret)
				tfail(sh, "flush", 0, 0, ret);
		}
	}
	free(buf);
	return NULL;
}

/* The counts the test asserts, reached by the threads in @arg (struct targ[TTHREADS]). */
static bool enough_ios(void *arg)
{
	const struct targ *a = arg;
	unsigned long reads = 0, writes = 0;

	for (unsigned i = 0; i < TTHREADS; i++) {
		reads += atomic_load(&a[i].reads);
		writes += atomic_load(&a[i].writes);
	}
	return reads > 100 && writes > 100;
}

Test(record, concurrent_readers_and_writers_see_whole_generations, .timeout = 240)
{
	static struct tshared sh;
	struct targ args[TTHREADS];
	pthread_t th[TTHREADS];
	unsigned char buf[REC];
	unsigned long reads = 0, writes = 0;

	sh.ds = ds;
	sh.pool = tp.pool;
	/* every record starts at generation 1 so a zero read is always wrong */
	for (unsigned r = 0; r < TREC; r++) {
		tpat_fill(buf, REC, r, 1);
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * REC, buf, REC), 0);
		atomic_store(&sh.gen[r], 1);
	}
	for (unsigned i = 0; i < TTHREADS; i++) {
		args[i] = (struct targ){ .sh = &sh, .id = i };
		cr_assert_eq(pthread_create(&th[i], NULL, tworker, &args[i]), 0);
	}
	trace_for(3, 40, enough_ios, args);
	atomic_store(&sh.stop, 1);
	for (unsigned i = 0; i < TTHREADS; i++) {
		pthread_join(th[i], NULL);
		reads += args[i].reads;
		writes += args[i].writes;
	}
	cr_assert_eq(atomic_load(&sh.errors), 0, "%d errors, first: %s", atomic_load(&sh.errors),
		     sh.msg);
	cr_log_info("%lu record reads, %lu record writes from %d threads", reads, writes,
		    TTHREADS);
	cr_assert_gt(reads, 100);
	cr_assert_gt(writes, 100);
	/* the final state: one generation per record, the newest not older than any read */
	reopen();
	for (unsigned r = 0; r < TREC; r++) {
		int64_t g;

		cr_assert_eq(stor_ds_read(ds, (uint64_t)r * REC, buf, REC), 0);
		g = tpat_check(buf, REC, r);
		cr_assert((g == 0 && atomic_load(&sh.discarded[r])) ||
				  (g >= 1 && (uint64_t)g <= atomic_load(&sh.gen[r])),
			  "record %u: check %lld", r, (long long)g);
	}
}

static uint64_t ds_used(const char *name, const char *prop)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp.pool, name, prop, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", name, prop, stor_strerror(ret));
	return strtoull(v.value, NULL, 10);
}

Test(record, dataset_used_follows_writes_overwrites_and_discards)
{
	static unsigned char buf[32 * REC];

	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "used"), 0);
	tpat_random(buf, sizeof(buf), 3);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "used"), sizeof(buf));
	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "logicalused"), sizeof(buf));
	/* copy-on-write: an overwrite does not add up once committed */
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "used"), sizeof(buf));
	cr_assert_eq(stor_ds_discard(ds, 0, 16 * REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "used"), 16 * REC);
	reopen();
	cr_assert_eq(ds_used(TPOOL_NAME "/vol", "used"), 16 * REC, "used lost over close/open");
}

Test(record, compressed_records_round_trip)
{
	const char *props[] = { "compression=zstd" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 1 };
	struct stor_ds *z = NULL;
	static unsigned char buf[64 * REC], rnd[4 * REC], late[REC];
	uint64_t used, lused;

	cr_assert_eq(stor_ds_create(tp.pool, TPOOL_NAME "/z", &o, &z), 0);
	for (unsigned r = 0; r < 64; r++)
		tpat_fill(buf + r * REC, REC, r, 7); /* compresses well */
	tpat_random(rnd, sizeof(rnd), 8);        /* does not compress: stored raw */
	cr_assert_eq(stor_ds_write(z, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_write(z, 64 * REC, rnd, sizeof(rnd)), 0);
	/* unaligned read-modify-write of a compressed record */
	memset(buf + 5 * REC + 100, 0xee, 300);
	cr_assert_eq(stor_ds_write(z, 5 * REC + 100, buf + 5 * REC + 100, 300), 0);
	check_range(z, buf, 0, sizeof(buf));
	check_range(z, rnd, 64 * REC, sizeof(rnd));
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used = ds_used(TPOOL_NAME "/z", "referenced");
	lused = ds_used(TPOOL_NAME "/z", "logicalused");
	cr_assert_eq(lused, sizeof(buf) + sizeof(rnd));
	cr_assert_leq(used, sizeof(buf) + sizeof(rnd));
	/* records written before a change of compression stay readable */
	cr_assert_eq(stor_ds_set(tp.pool, TPOOL_NAME "/z", "compression", "off"), 0);
	tpat_fill(late, REC, 70, 1);
	cr_assert_eq(stor_ds_write(z, 70 * REC, late, REC), 0);
	stor_ds_close(z);
	reopen();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/z", &z), 0);
	check_range(z, buf, 0, 64 * REC);
	check_range(z, rnd, 64 * REC, sizeof(rnd));
	check_range(z, late, 70 * REC, REC);
	stor_ds_close(z);
}

Test(record, damaged_compressed_record_is_ecksum)
{
	const char *props[] = { "compression=zstd-3" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 1 };
	struct stor_ds *z = NULL;
	unsigned char buf[REC], got[REC];
	unsigned lun;
	uint64_t off;
	int ret;

	cr_assert_eq(stor_ds_create(tp.pool, TPOOL_NAME "/z", &o, &z), 0);
	/* half random, half zeros: compressed, and the random half is findable */
	memset(buf, 0, sizeof(buf));
	tpat_random(buf, REC / 2, 4242);
	cr_assert_eq(stor_ds_write(z, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(tpool_find(&tp, buf + 256, 64, &lun, &off), 1);
	tpool_flip_byte(&tp, lun, off + 3);
	stor_ds_close(z);
	reopen();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/z", &z), 0);
	ret = stor_ds_read(z, 0, got, sizeof(got));
	cr_assert_eq(ret, STOR_ECKSUM, "got %s", stor_strerror(ret));
	stor_ds_close(z);
}

Test(record, writes_are_striped_over_the_luns)
{
	static unsigned char buf[64 * REC];
	struct stor_lun_stat ls;

	tpat_random(buf, sizeof(buf), 21);
	for (unsigned r = 0; r < 64; r++)
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * REC, buf + r * REC, REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	for (unsigned i = 0; i < tp.nluns; i++) {
		cr_assert_eq(stor_pool_lun_stat(tp.pool, i, &ls), 0);
		cr_assert_geq(ls.used, 16 * REC, "LUN %u holds only %llu bytes of 64 records", i,
			      (unsigned long long)ls.used);
	}
}

Test(record, zstd_records_take_less_space)
{
	const char *props[] = { "compression=zstd" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 1 };
	struct stor_ds *z = NULL;
	static unsigned char buf[64 * REC];
	uint64_t used;

	cr_assert_eq(stor_ds_create(tp.pool, TPOOL_NAME "/z", &o, &z), 0);
	for (unsigned r = 0; r < 64; r++)
		tpat_fill(buf + r * REC, REC, r, 7);
	cr_assert_eq(stor_ds_write(z, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used = ds_used(TPOOL_NAME "/z", "referenced");
	/* every record is one repeated word: one sector each at most */
	cr_assert_leq(used, 64 * STOR_SECTOR, "zstd saved nothing: used %llu",
		      (unsigned long long)used);
	check_range(z, buf, 0, sizeof(buf));
	stor_ds_close(z);
}

/* ---- misplaced data: the checksum binds a record to its place and birth ---- */

static void copy_lun_bytes(unsigned from_lun, uint64_t from, unsigned to_lun, uint64_t to,
			   size_t len)
{
	unsigned char *b = malloc(len);
	int in = open(tp.lun[from_lun], O_RDONLY), out = open(tp.lun[to_lun], O_WRONLY);

	cr_assert(b && in >= 0 && out >= 0);
	cr_assert_eq(pread(in, b, len, (off_t)from), (ssize_t)len);
	cr_assert_eq(pwrite(out, b, len, (off_t)to), (ssize_t)len);
	close(in);
	close(out);
	free(b);
}

/* Write @buf as record @rec, sync, and find its one place in the LUN files. */
static void write_and_find(uint64_t rec, const unsigned char *buf, unsigned *lun, uint64_t *off)
{
	cr_assert_eq(stor_ds_write(ds, rec * REC, buf, REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(tpool_find(&tp, buf, 64, lun, off), 1);
}

/* Close the test dataset and the pool, copy @len LUN bytes, open both again. */
static void copy_while_closed(unsigned from_lun, uint64_t from, unsigned to_lun, uint64_t to,
			      size_t len)
{
	stor_ds_close(ds);
	ds = NULL;
	tpool_close(&tp);
	copy_lun_bytes(from_lun, from, to_lun, to, len);
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/vol", &ds), 0);
}

/*
 * Write @src as record @rs, then @dst as record @rd, put @src's bytes where
 * @dst's are and read record @rd: a valid record in the wrong place (or an
 * older version) fails its checksum and never comes back as data.
 */
static void misplaced_is_ecksum(uint64_t rs, const unsigned char *src, uint64_t rd,
				const unsigned char *dst, const char *what)
{
	static unsigned char got[REC];
	unsigned ls, ld;
	uint64_t os, od;
	int ret;

	write_and_find(rs, src, &ls, &os);
	/* copy-on-write: an overwrite lands elsewhere, the old sectors keep their bytes */
	write_and_find(rd, dst, &ld, &od);
	cr_assert(ls != ld || os != od, "overwrite was done in place");
	copy_while_closed(ls, os, ld, od, REC);
	ret = stor_ds_read(ds, rd * REC, got, REC);
	cr_assert_eq(ret, STOR_ECKSUM, "%s: read %s%s", what, stor_strerror(ret),
		     ret == 0 && !memcmp(got, src, REC) ? " and returned the misplaced bytes" : "");
}

Test(record, another_records_data_in_place_is_ecksum)
{
	static unsigned char a[REC], b[REC];

	tpat_random(a, REC, 0xa);
	tpat_random(b, REC, 0xb);
	/* record 10's bytes where record 20 lives: a valid record, the wrong place */
	misplaced_is_ecksum(10, a, 20, b, "record 20");
	check_range(ds, a, 10 * REC, REC);
}

Test(record, an_older_version_in_place_is_ecksum)
{
	static unsigned char v1[REC], v2[REC];

	tpat_random(v1, REC, 0x1);
	tpat_random(v2, REC, 0x2);
	/* a replay of the old version where the new one lives */
	misplaced_is_ecksum(7, v1, 7, v2, "replayed record");
}

Test(record, swapped_lun_files_never_give_wrong_data)
{
	static unsigned char buf[16 * REC];
	char tmp[PATH_MAX];
	int ret;

	tpat_random(buf, sizeof(buf), 0x5a);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	stor_ds_close(ds);
	ds = NULL;
	tpool_close(&tp);
	snprintf(tmp, sizeof(tmp), "%s/swap", tp.dir);
	cr_assert_eq(rename(tp.lun[0], tmp), 0);
	cr_assert_eq(rename(tp.lun[1], tp.lun[0]), 0);
	cr_assert_eq(rename(tmp, tp.lun[1]), 0);
	/* the pool opens its LUNs by the paths it recorded and checks each
	 * label's LUN GUID and index: LUN 0's file now holds LUN 1's label */
	ret = tpool_open(&tp);
	cr_assert_eq(ret, STOR_EFOREIGN, "swapped LUNs: %s", stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "lun 0"), "%s", stor_pool_last_error());
	cr_log_info("swapped LUNs refused: %s", stor_pool_last_error());
}

/*
 * Write 64 random records, truncate LUN 1's file to @size and open the pool
 * again. @return what the open returned; @buf holds the records.
 */
static int open_truncated(unsigned char *buf, size_t len, off_t size)
{
	tpat_random(buf, len, 0x77);
	cr_assert_eq(stor_ds_write(ds, 0, buf, len), 0);
	stor_ds_close(ds);
	ds = NULL;
	tpool_close(&tp);
	cr_assert_eq(truncate(tp.lun[1], size), 0);
	return tpool_open(&tp);
}

/* Below the smallest LUN (a label, the data offset, a sector): refused with a reason. */
Test(record, lun_truncated_below_the_minimum_size_is_refused)
{
	static unsigned char buf[64 * REC];
	int ret = open_truncated(buf, sizeof(buf), (off_t)(1u << 20) + 4096);

	cr_assert_eq(ret, -EINVAL, "got %s", stor_strerror(ret));
	cr_assert_neq(stor_pool_last_error()[0], '\0', "refused (%s) without a reason",
		      stor_strerror(ret));
	cr_log_info("truncated LUN refused: %s", stor_pool_last_error());
}

/*
 * Every record of @buf reads back as written or fails with -EIO (lost past
 * the cut), never with other bytes; the lost ones are in the pool's error
 * list and LUN 1 says it was truncated. @return the records lost
 */
static unsigned check_cut(const unsigned char *buf, unsigned nrec)
{
	static struct stor_pool_error e[64];
	static unsigned char got[REC];
	struct stor_lun_stat ls;
	struct stor_pool_stat st;
	uint64_t more;
	unsigned lost = 0;
	int n;

	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_gt(ls.truncated_from, ls.size, "lun 1 not named truncated");
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert(strstr(st.meta_log, "lun 1") && strstr(st.meta_log, "truncated"),
		  "pool status says '%s'", st.meta_log);
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/vol", &ds), 0);
	for (unsigned r = 0; r < nrec; r++) {
		int ret = stor_ds_read(ds, (uint64_t)r * REC, got, REC);

		cr_assert(ret == 0 || ret == -EIO, "record %u: %s", r, stor_strerror(ret));
		if (ret == 0)
			cr_assert(memcmp(got, buf + r * REC, REC) == 0,
				  "record %u: read succeeded with wrong data", r);
		lost += ret < 0;
	}
	cr_assert_gt(lost, 0, "no record lay past the cut");
	cr_assert_lt(lost, nrec, "every record lost: nothing was on lun 0?");
	n = stor_pool_errors(tp.pool, e, 64, &more);
	cr_assert_eq((unsigned)n, lost, "%d records named damaged, %u lost", n, lost);
	return lost;
}

/*
 * Cut through its records: the pool imports, names lun 1 truncated and the
 * records past the cut lost; they read EIO and the others as written, the
 * same after another import and after one from the LUNs alone (LMDB gone).
 * An overwrite of a lost record lands, and freeing its old extent is no
 * bad free.
 */
Test(record, lun_truncated_through_its_records_imports_and_names_what_is_lost)
{
	static unsigned char buf[64 * REC], got[REC];
	struct stor_pool_stat st;
	char mdb[PATH_MAX + 64];
	unsigned lost, r;
	int ret = open_truncated(buf, sizeof(buf), (off_t)(1u << 20) + 65536);

	cr_assert_eq(ret, 0, "got %s: %s", stor_strerror(ret), stor_pool_last_error());
	lost = check_cut(buf, 64);
	stor_ds_close(ds);
	ds = NULL;
	tpool_reopen(&tp);
	cr_assert_eq(check_cut(buf, 64), lost, "another import lost other records");
	stor_ds_close(ds);
	ds = NULL;
	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(mdb), 0);
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	cr_assert_eq(check_cut(buf, 64), lost, "the import from the LUNs lost other records");
	/* the first lost record, written again, reads back; its old extent's free is sound */
	for (r = 0; stor_ds_read(ds, (uint64_t)r * REC, got, REC) == 0; r++)
		;
	cr_assert_eq(stor_ds_write(ds, (uint64_t)r * REC, buf + r * REC, REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_ds_read(ds, (uint64_t)r * REC, got, REC), 0);
	cr_assert(memcmp(got, buf + r * REC, REC) == 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(st.bad_frees, 0, "freeing a record past the cut counted as a bad free");
}

/* Cut past its last record: the pool opens and every record reads back as written. */
Test(record, lun_truncated_past_its_records_never_gives_wrong_data)
{
	static unsigned char buf[64 * REC], got[REC];
	int ret = open_truncated(buf, sizeof(buf), (off_t)(16u << 20));

	cr_assert_eq(ret, 0, "got %s: %s", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/vol", &ds), 0);
	for (unsigned r = 0; r < 64; r++) {
		ret = stor_ds_read(ds, (uint64_t)r * REC, got, REC);
		cr_assert_eq(ret, 0, "record %u: %s", r, stor_strerror(ret));
		cr_assert(memcmp(got, buf + r * REC, REC) == 0,
			  "record %u: read succeeded with wrong data", r);
	}
}

/* ---- O_DIRECT ---- */

TestSuite(record_direct, .fini = small_teardown, .timeout = 240);

/* tmpfs before Linux 6.6 has no O_DIRECT: only then is a refusal acceptable */
static void skip_without_o_direct(void)
{
	const char *tmp = getenv("TMPDIR");
	char probe[PATH_MAX];
	int fd;

	snprintf(probe, sizeof(probe), "%s/stor-odirect-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(probe);
	cr_assert(fd >= 0);
	close(fd);
	fd = open(probe, O_RDWR | O_DIRECT);
	unlink(probe);
	if (fd < 0)
		cr_skip_test("no O_DIRECT in TMPDIR");
	close(fd);
}

Test(record_direct, direct_io_round_trips_with_unaligned_buffers)
{
	struct stor_pool_opts o = { .direct_io = 1 };
	struct tpool *dpp = &small;
	struct stor_ds *d;
	unsigned char *mem = malloc(3 * REC + 64), *buf = mem + 3; /* deliberately misaligned */
	unsigned char *got = malloc(3 * REC + 64) + 5;
	int ret;

	skip_without_o_direct();
	tpool_init(dpp, 2, 16u << 20, &o);
	d = tpool_ds(dpp, TPOOL_NAME "/d", 1 << 20, REC);
	tpat_random(buf, 3 * REC, 0xd1);
	ret = stor_ds_write(d, REC / 2 + 1, buf, 2 * REC + 7);
	cr_assert_eq(ret, 0, "direct write: %s", stor_strerror(ret));
	ret = stor_ds_read(d, REC / 2 + 1, got, 2 * REC + 7);
	cr_assert_eq(ret, 0, "direct read: %s", stor_strerror(ret));
	cr_assert_arr_eq(got, buf, 2 * REC + 7);
	stor_ds_close(d);
	tpool_reopen(dpp);
	cr_assert_eq(stor_ds_open(dpp->pool, TPOOL_NAME "/d", &d), 0);
	memset(got, 0, 2 * REC + 7);
	cr_assert_eq(stor_ds_read(d, REC / 2 + 1, got, 2 * REC + 7), 0);
	cr_assert_arr_eq(got, buf, 2 * REC + 7);
	stor_ds_close(d);
	tpool_fini(dpp);
	free(mem);
	free(got - 5);
}

/* More extents than one ring submission holds, over several LUNs, in one
 * batch: every record comes back whole, and a damaged one is ECKSUM. */
Test(record_direct, a_batch_larger_than_a_ring_round_trips)
{
	enum { N = 150 };
	struct stor_pool_opts o = { .direct_io = 1 };
	struct tpool *dpp = &small;
	struct stor_io ios[N];
	unsigned char *w = malloc((size_t)N * REC), *r = malloc((size_t)N * REC);
	struct stor_ds *d;
	unsigned lun;
	uint64_t off;
	int ret;

	skip_without_o_direct();
	tpool_init(dpp, 4, 16u << 20, &o);
	d = tpool_ds(dpp, TPOOL_NAME "/d", (uint64_t)N * REC, REC);
	tpat_random(w, (size_t)N * REC, 0xba7c);
	for (unsigned i = 0; i < N; i++)
		ios[i] = (struct stor_io){ .ds = d, .op = STOR_IO_WRITE, .off = (uint64_t)i * REC,
					   .len = REC, .buf = w + (size_t)i * REC };
	cr_assert_eq(stor_io_submit(ios, N), 0);
	cr_assert_eq(stor_ds_flush(d), 0);
	/* backwards, so the extents are not read in the order written */
	for (unsigned i = 0; i < N; i++)
		ios[i] = (struct stor_io){ .ds = d, .op = STOR_IO_READ,
					   .off = (uint64_t)(N - 1 - i) * REC, .len = REC,
					   .buf = r + (size_t)(N - 1 - i) * REC };
	ret = stor_io_submit(ios, N);
	cr_assert_eq(ret, 0, "%d reads failed", ret);
	cr_assert_arr_eq(r, w, (size_t)N * REC);

	cr_assert_eq(tpool_find(dpp, w + 77 * REC, 4096, &lun, &off), 1);
	stor_ds_close(d);
	tpool_close(dpp);
	tpool_flip_byte(dpp, lun, off + 100);
	cr_assert_eq(tpool_open(dpp), 0);
	cr_assert_eq(stor_ds_open(dpp->pool, TPOOL_NAME "/d", &d), 0);
	for (unsigned i = 0; i < N; i++)
		ios[i].ds = d;
	ret = stor_io_submit(ios, N);
	cr_assert_eq(ret, 1, "one damaged record, %d failed", ret);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(ios[i].result, ios[i].off == 77 * REC ? STOR_ECKSUM : 0,
			     "record %llu: %s", (unsigned long long)ios[i].off / REC,
			     stor_strerror(ios[i].result));
	stor_ds_close(d);
	tpool_fini(dpp);
	free(w);
	free(r);
}

/*
 * Point every descriptor this process holds on LUN file @path at a read-only
 * open of the same file: from now on its writes fail (EBADF), reads work.
 */
static void lun_refuse_writes(const char *path)
{
	char want[PATH_MAX], link[64], got[PATH_MAX];
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert(realpath(path, want), "realpath %s", path);
	cr_assert(d);
	while ((de = readdir(d))) {
		ssize_t len;
		int fd = atoi(de->d_name), ro;

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		len = readlink(link, got, sizeof(got) - 1);
		if (len < 0)
			continue;
		got[len] = '\0';
		if (strcmp(got, want))
			continue;
		ro = open(path, O_RDONLY);
		cr_assert(ro >= 0);
		cr_assert(dup2(ro, fd) == fd);
		close(ro);
		n++;
	}
	closedir(d);
	cr_assert(n > 0, "no descriptor of %s", path);
}

/*
 * One batch of requests of one and two records, over two LUNs of which one
 * refuses writes: the allocator alternates LUNs, so every two-record
 * request has one record on each. A request whose extent failed must fail,
 * whatever failed before it in the batch, and keep its old bytes; every
 * request that succeeds must read back what it wrote.
 */
Test(record, a_failed_extent_fails_its_own_request_and_no_other)
{
	enum { REQS = 8 };
	const uint32_t rs = REC;
	struct stor_io io[REQS];
	uint8_t *buf = malloc(2 * REQS * rs), *back = malloc(2 * rs);
	uint64_t rec = 0;
	int failed = 0, ok = 0;

	cr_assert(buf && back);
	for (uint64_t r = 0; r < 2 * REQS; r++) {
		tpat_fill(buf, rs, r, 1);
		cr_assert_eq(stor_ds_write(ds, r * rs, buf, rs), 0);
	}
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	lun_refuse_writes(tp.lun[0]);
	for (int i = 0; i < REQS; i++) {
		uint32_t nrec = i % 2 ? 1 : 2;

		for (uint32_t k = 0; k < nrec; k++)
			tpat_fill(buf + (rec + k) * rs, rs, rec + k, 2);
		io[i] = (struct stor_io){ ds, STOR_IO_WRITE, rec * rs, (uint64_t)nrec * rs,
					  buf + rec * rs, 0 };
		rec += nrec;
	}
	stor_io_submit(io, REQS);
	for (int i = 0; i < REQS; i++) {
		uint64_t first = io[i].off / rs, nrec = io[i].len / rs;
		int64_t want = io[i].result ? 1 : 2;

		cr_assert_eq(stor_ds_read(ds, io[i].off, back, io[i].len), 0, "read of request %d", i);
		for (uint64_t k = 0; k < nrec; k++)
			cr_expect_eq(tpat_check(back + k * rs, rs, first + k), want,
				     "request %d (result %d): record %" PRIu64 " holds generation %" PRId64
				     ", not %" PRId64, i, io[i].result, first + k,
				     tpat_check(back + k * rs, rs, first + k), want);
		failed += io[i].result != 0;
		ok += io[i].result == 0;
	}
	/* every two-record request had a record on the LUN that refuses writes */
	cr_expect_geq(failed, REQS / 2, "%d requests failed", failed);
	cr_expect_gt(ok, 0, "no request succeeded");
	free(buf);
	free(back);
}

Test(record, io_submit_applies_overlapping_requests_in_array_order)
{
	static unsigned char a[REC], b[REC], r1[REC], r2[REC], r3[2 * REC], z[REC];
	struct stor_io ios[] = {
		{ .ds = ds, .op = STOR_IO_WRITE, .off = 0, .len = REC, .buf = a },
		{ .ds = ds, .op = STOR_IO_WRITE, .off = 0, .len = REC, .buf = b },
		{ .ds = ds, .op = STOR_IO_READ, .off = 0, .len = REC, .buf = r1 },
		{ .ds = ds, .op = STOR_IO_DISCARD, .off = 0, .len = REC },
		{ .ds = ds, .op = STOR_IO_READ, .off = 0, .len = REC, .buf = r2 },
		{ .ds = ds, .op = STOR_IO_WRITE, .off = REC + 10, .len = 100, .buf = a },
		{ .ds = ds, .op = STOR_IO_WRITE, .off = REC + 50, .len = 100, .buf = b },
		{ .ds = ds, .op = STOR_IO_READ, .off = 0, .len = 2 * REC, .buf = r3 },
	};
	unsigned char want[2 * REC];

	tpat_random(a, REC, 1001);
	tpat_random(b, REC, 1002);
	memset(r2, 0x33, REC);
	cr_assert_eq(stor_io_submit(ios, sizeof(ios) / sizeof(ios[0])), 0);
	cr_assert_arr_eq(r1, b, REC, "second write of a record in one batch did not win");
	cr_assert_arr_eq(r2, z, REC, "discard in a batch not seen by the read after it");
	memset(want, 0, sizeof(want));
	memcpy(want + REC + 10, a, 100);
	memcpy(want + REC + 50, b, 100);
	cr_assert_arr_eq(r3, want, sizeof(want), "overlapping partial writes in one batch");
	reopen();
	check_range(ds, want, 0, sizeof(want));
}

Test(record, a_new_dataset_of_a_destroyed_name_reads_zeros)
{
	static unsigned char buf[8 * REC];
	struct stor_ds *d = tpool_ds(&tp, TPOOL_NAME "/gone", VOL, REC);

	tpat_random(buf, sizeof(buf), 404);
	cr_assert_eq(stor_ds_write(d, 0, buf, sizeof(buf)), 0); /* staged, never synced */
	stor_ds_close(d);
	cr_assert_eq(stor_ds_destroy(tp.pool, TPOOL_NAME "/gone", 0), 0);
	d = tpool_ds(&tp, TPOOL_NAME "/gone", VOL, REC);
	check_zero(d, 0, sizeof(buf));
	stor_ds_close(d);
	reopen();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/gone", &d), 0);
	check_zero(d, 0, sizeof(buf));
	stor_ds_close(d);
}

Test(record, io_stats_count_requests_bytes_and_checksum_errors)
{
	static unsigned char buf[4 * REC];
	struct stor_io_stats st, pst;
	unsigned lun;
	uint64_t off, lat = 0;

	tpat_random(buf, sizeof(buf), 0x51);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_write(ds, 100, buf, 10), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, REC), 0);
	cr_assert_eq(stor_ds_discard(ds, 3 * REC, REC), 0);
	cr_assert_eq(stor_ds_flush(ds), 0);
	cr_assert_eq(stor_ds_read(ds, VOL, buf, 1), STOR_ERANGE);
	cr_assert_eq(stor_ds_io_stats(tp.pool, TPOOL_NAME "/vol", &st), 0);
	cr_assert_eq(st.writes, 2);
	cr_assert_eq(st.reads, 1);
	cr_assert_eq(st.discards, 1);
	cr_assert_eq(st.flushes, 1);
	cr_assert_eq(st.errors, 1);
	cr_assert_eq(st.write_bytes, sizeof(buf) + 10);
	cr_assert_eq(st.read_bytes, REC);
	for (unsigned i = 0; i < STOR_LAT_BUCKETS; i++)
		lat += st.lat[i];
	cr_assert_geq(lat, 5, "latency histogram holds %llu requests", (unsigned long long)lat);
	cr_assert_eq(stor_ds_io_stats(tp.pool, TPOOL_NAME "/nosuch", &st), -ENOENT);

	/* a checksum failure is counted where it happened */
	tpat_random(buf, REC, 0x52);
	cr_assert_eq(stor_ds_write(ds, 9 * REC, buf, REC), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(tpool_find(&tp, buf + 128, 64, &lun, &off), 1);
	reopen();
	tpool_flip_byte(&tp, lun, off);
	cr_assert_eq(stor_ds_read(ds, 9 * REC, buf, REC), STOR_ECKSUM);
	cr_assert_eq(stor_ds_io_stats(tp.pool, TPOOL_NAME "/vol", &st), 0);
	cr_assert_eq(st.cksum_errors, 1);
	cr_assert_eq(stor_pool_io_stats(tp.pool, &pst), 0);
	cr_assert_geq(pst.cksum_errors, 1);
}

Test(record, pool_logical_used_counts_before_compression)
{
	const char *props[] = { "compression=zstd" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 1 };
	struct stor_pool_stat st;
	struct stor_ds *z = NULL;
	static unsigned char buf[16 * REC];

	cr_assert_eq(stor_ds_create(tp.pool, TPOOL_NAME "/z", &o, &z), 0);
	for (unsigned r = 0; r < 16; r++)
		tpat_fill(buf + r * REC, REC, r, 3);
	cr_assert_eq(stor_ds_write(z, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(st.logical_used, sizeof(buf));
	cr_assert_lt(st.used, st.logical_used);
	stor_ds_close(z);
}

/* ---- no stale reads, with the data cache on and off ---- */

#define SREC 32

struct fresh {
	struct stor_ds *ds;
	atomic_uint_fast64_t done[SREC];   /* newest generation whose write has returned */
	atomic_uint_fast64_t issued[SREC]; /* newest generation handed to a write */
	atomic_int zeroed[SREC];           /* a discard of the record has returned */
	atomic_int stop, errors;
	char msg[200];
	unsigned long reads;
};

struct fresh_arg {
	struct fresh *f;
	unsigned id;
};

static void fresh_fail(struct fresh *f, const char *what, unsigned r, long want, long got)
{
	if (atomic_fetch_add(&f->errors, 1) == 0)
		snprintf(f->msg, sizeof(f->msg), "%s: record %u: want %ld, got %ld", what, r, want,
			 got);
	atomic_store(&f->stop, 1);
}

/*
 * Thread i alone writes records i, i + n, ...; every thread reads every
 * record. The owner must read back exactly what it wrote last; any other
 * thread must see at least the generation whose write had returned before
 * its read began: a stale cached record fails here.
 */
static void *fresh_worker(void *p)
{
	struct fresh_arg *a = p;
	struct fresh *f = a->f;
	unsigned seed = 77 + a->id;
	unsigned char buf[REC];

	while (!atomic_load(&f->stop)) {
		unsigned r = (unsigned)rand_r(&seed) % SREC;
		int own = r % TTHREADS == a->id, op = rand_r(&seed) % 4, ret;

		if (own && op == 0) {
			uint64_t g = atomic_load(&f->issued[r]) + 1;

			atomic_store(&f->issued[r], g);
			tpat_fill(buf, REC, r, g);
			ret = stor_ds_write(f->ds, (uint64_t)r * REC, buf, REC);
			if (ret)
				fresh_fail(f, "write", r, 0, ret);
			atomic_store(&f->zeroed[r], 0);
			atomic_store(&f->done[r], g);
		} else if (own && op == 1 && rand_r(&seed) % 8 == 0) {
			ret = stor_ds_discard(f->ds, (uint64_t)r * REC, REC);
			if (ret)
				fresh_fail(f, "discard", r, 0, ret);
			atomic_store(&f->zeroed[r], 1);
		} else {
			uint64_t floor = atomic_load(&f->done[r]);
			int zero_ok = atomic_load(&f->zeroed[r]) || !own;
			int64_t g;

			ret = stor_ds_read(f->ds, (uint64_t)r * REC, buf, REC);
			if (ret) {
				fresh_fail(f, "read", r, 0, ret);
				break;
			}
			g = tpat_check(buf, REC, r);
			if (own && atomic_load(&f->zeroed[r]) && g != 0)
				fresh_fail(f, "own read after discard", r, 0, (long)g);
			else if (own && !atomic_load(&f->zeroed[r]) && (uint64_t)g != floor)
				fresh_fail(f, "own read", r, (long)floor, (long)g);
			else if (!own && g != 0 && (g < 0 || (uint64_t)g < floor ||
						    (uint64_t)g > atomic_load(&f->issued[r])))
				fresh_fail(f, "stale or bad read", r, (long)floor, (long)g);
			else if (g == 0 && !zero_ok)
				fresh_fail(f, "zeros", r, (long)floor, 0);
			f->reads++; /* racy count, only a rough figure */
		}
	}
	return NULL;
}

static void fresh_run(size_t cache_bytes)
{
	static struct fresh f;
	struct fresh_arg args[TTHREADS];
	pthread_t th[TTHREADS];
	struct timespec d = { .tv_sec = 2 };
	unsigned char buf[REC];

	cr_assert_eq(stor_cache_set_size(cache_bytes), 0);
	f.ds = ds;
	for (unsigned r = 0; r < SREC; r++) {
		tpat_fill(buf, REC, r, 1);
		cr_assert_eq(stor_ds_write(ds, (uint64_t)r * REC, buf, REC), 0);
		atomic_store(&f.issued[r], 1);
		atomic_store(&f.done[r], 1);
	}
	for (unsigned i = 0; i < TTHREADS; i++) {
		args[i] = (struct fresh_arg){ .f = &f, .id = i };
		cr_assert_eq(pthread_create(&th[i], NULL, fresh_worker, &args[i]), 0);
	}
	nanosleep(&d, NULL);
	atomic_store(&f.stop, 1);
	for (unsigned i = 0; i < TTHREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&f.errors), 0, "%d errors, first: %s", atomic_load(&f.errors),
		     f.msg);
	cr_log_info("%lu reads, cache %zu bytes", f.reads, cache_bytes);
	cr_assert_eq(stor_cache_set_size(0), 0);
}

Test(record, reads_are_never_stale)
{
	fresh_run(0);
}

Test(record, reads_are_never_stale_with_the_data_cache)
{
	struct stor_io_stats st;

	fresh_run(4u << 20);
	cr_assert_eq(stor_ds_io_stats(tp.pool, TPOOL_NAME "/vol", &st), 0);
	cr_assert_gt(st.cache_hits, 0, "the data cache was never hit: the test proved nothing");
}
