/* SPDX-License-Identifier: MIT */
/* I/O statistics: counters agree with what was done, failures are counted
 * by kind, and the latency histogram holds every request. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "fixture.h"

TPOOL_FIXTURE(2, 32u << 20)
TestSuite(stats, .init = setup, .fini = teardown, .timeout = 240);

static uint64_t lat_total(const struct stor_io_stats *st)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < STOR_LAT_BUCKETS; i++)
		n += st->lat[i];
	return n;
}

Test(stats, counters_agree_with_the_requests_made)
{
	struct stor_ds *ds = tpool_ds(&tp, "tank/s", 1u << 20, 0);
	struct stor_io_stats st;
	uint8_t buf[3 * 8192];

	memset(buf, 7, sizeof(buf));
	for (int i = 0; i < 10; i++)
		cr_assert_eq(stor_ds_write(ds, (uint64_t)i * 8192, buf, 8192), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(stor_ds_read(ds, 100, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_discard(ds, 0, 8192), 0);
	cr_assert_eq(stor_ds_flush(ds), 0);
	cr_assert_eq(stor_ds_read(ds, 1u << 20, buf, 1), STOR_ERANGE);
	cr_assert_eq(stor_ds_io_stats(tp.pool, "tank/s", &st), 0);
	cr_assert_eq(st.writes, 10);
	cr_assert_eq(st.write_bytes, 10 * 8192);
	cr_assert_eq(st.reads, 5);
	cr_assert_eq(st.read_bytes, 5 * sizeof(buf));
	cr_assert_eq(st.discards, 1);
	cr_assert_eq(st.flushes, 1);
	cr_assert_eq(st.errors, 1);
	cr_assert_eq(lat_total(&st), 17, "every successful request is in the histogram");
	cr_assert_eq(st.sealed + st.opened, 0, "clear records are not sealed");
	cr_assert_eq(stor_pool_io_stats(tp.pool, &st), 0);
	cr_assert_eq(st.writes, 10);
	cr_assert_eq(stor_ds_io_stats(tp.pool, "tank/none", &st), -ENOENT);
	stor_ds_close(ds);
}

Test(stats, checksum_failures_are_counted)
{
	struct stor_ds *ds = tpool_ds(&tp, "tank/s", 1u << 20, 0);
	struct stor_io_stats st;
	uint8_t buf[8192];
	unsigned lun;
	uint64_t off;

	tpat_random(buf, sizeof(buf), 99);
	cr_assert_eq(stor_ds_write(ds, 3 * 8192, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(tpool_find(&tp, buf, 4096, &lun, &off), 1);
	tpool_flip_byte(&tp, lun, off + 17);
	cr_assert_eq(stor_ds_read(ds, 3 * 8192, buf, sizeof(buf)), STOR_ECKSUM);
	cr_assert_eq(stor_ds_io_stats(tp.pool, "tank/s", &st), 0);
	cr_assert_eq(st.cksum_errors, 1);
	cr_assert_eq(st.errors, 1);
	stor_ds_close(ds);
}

Test(stats, sealing_and_opening_are_counted_and_timed)
{
	static const char *const p[] = { "encryption=aes-256-gcm", "keyformat=raw" };
	uint8_t key[32], buf[4 * 8192];
	struct stor_key_material km = { key, sizeof(key) };
	struct stor_ds_opts o = { .volsize = 1u << 20, .props = p, .nprops = 2, .key = &km };
	struct stor_io_stats st;
	struct stor_ds *ds;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(9 + 37 * i); /* a mostly zero key is refused */
	cr_assert_eq(stor_ds_create(tp.pool, "tank/e", &o, &ds), 0);
	memset(buf, 1, sizeof(buf));
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_io_stats(tp.pool, "tank/e", &st), 0);
	cr_assert_eq(st.sealed, 4);
	cr_assert_eq(st.opened, 4);
	cr_assert_gt(st.seal_ns, 0);
	cr_assert_gt(st.open_ns, 0);
	stor_ds_close(ds);
}

Test(stats, latency_buckets_are_log_linear)
{
	uint64_t prev = stor_lat_bucket_ns(0);

	for (unsigned i = 1; i < STOR_LAT_BUCKETS; i++) {
		uint64_t b = stor_lat_bucket_ns(i);
		cr_assert_gt(b, prev, "bucket %u", i);
		cr_assert_leq(b, prev + prev / 4 + 1, "bucket %u grows by at most a quarter", i);
		prev = b;
	}
}
