/* SPDX-License-Identifier: MIT */
/* coffer bench data validation: unit headers, generations, the journal. */

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_verify.h"

#define UNIT 8192

static uint8_t guid[16], other[16];
static uint8_t *buf;
static char dir[300];

static void setup(void)
{
	const char *tmp = getenv("TMPDIR");

	verify_guid("tank/a", NULL, guid);
	verify_guid("tank/b", NULL, other);
	buf = malloc(UNIT);
	cr_assert_not_null(buf);
	snprintf(dir, sizeof(dir), "%s/bench-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[400];

	free(buf);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(bench_verify, .init = setup, .fini = teardown, .timeout = 240);

static enum verify_status check(uint64_t rec, uint32_t expect, uint32_t *got)
{
	return verify_check(buf, UNIT, guid, rec, expect, got);
}

Test(bench_verify, a_unit_written_is_read_back_as_ok)
{
	uint32_t got;

	verify_fill(buf, UNIT, guid, 7, 3);
	cr_assert_eq(check(7, 3, &got), VERIFY_OK);
	cr_assert_eq(got, 3);
}

Test(bench_verify, a_flipped_byte_anywhere_is_a_checksum_mismatch)
{
	uint32_t got;
	size_t where[] = { 9, 30, 40, 47, 64, 100, UNIT / 2, UNIT - 1 };

	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		verify_fill(buf, UNIT, guid, 7, 3);
		buf[where[i]] ^= 0x10;
		cr_assert_eq(check(7, 3, &got), VERIFY_BAD_CHECKSUM, "byte %zu", where[i]);
	}
	verify_fill(buf, UNIT, guid, 7, 3);
	buf[0] ^= 1;
	cr_assert_eq(check(7, 3, &got), VERIFY_BAD_MAGIC);
}

Test(bench_verify, a_stale_generation_is_a_lost_write)
{
	uint32_t got;

	verify_fill(buf, UNIT, guid, 7, 4);
	cr_assert_eq(check(7, 5, &got), VERIFY_STALE);
	cr_assert_eq(got, 4);
	cr_assert_eq(check(7, 3, &got), VERIFY_FUTURE);
}

Test(bench_verify, zeros_where_data_was_written_are_a_lost_write)
{
	uint32_t got;

	memset(buf, 0, UNIT);
	cr_assert_eq(check(7, 1, &got), VERIFY_ZERO);
	cr_assert_eq(check(7, VERIFY_GEN_NONE, &got), VERIFY_UNCHECKED);
}

Test(bench_verify, another_record_or_dataset_is_caught)
{
	uint32_t got;

	verify_fill(buf, UNIT, guid, 8, 1);
	cr_assert_eq(check(7, 1, &got), VERIFY_WRONG_RECORD);
	verify_fill(buf, UNIT, other, 7, 1);
	cr_assert_eq(check(7, 1, &got), VERIFY_WRONG_DATASET);
}

Test(bench_verify, an_unknown_generation_accepts_any_valid_unit)
{
	uint32_t got;

	verify_fill(buf, UNIT, guid, 7, 9);
	cr_assert_eq(check(7, VERIFY_GEN_UNKNOWN, &got), VERIFY_OK);
	cr_assert_eq(got, 9);
}

Test(bench_verify, the_daemon_guid_is_used_when_given)
{
	uint8_t g[16];

	verify_guid("x", "00112233-4455-6677-8899-aabbccddeeff", g);
	cr_assert_eq(g[0], 0x00);
	cr_assert_eq(g[1], 0x11);
	cr_assert_eq(g[15], 0xff);
	verify_guid("x", NULL, g);
	cr_assert_neq(memcmp(g, guid, 16), 0);
}

Test(bench_verify, journal_round_trip)
{
	struct verify_ds *ds[2], **back = NULL;
	unsigned n = 0;
	char path[400];

	snprintf(path, sizeof(path), "%s/j", dir);
	cr_assert_eq(verify_ds_new("tank/a", guid, UNIT, 100, &ds[0]), 0);
	cr_assert_eq(verify_ds_new("tank/b", other, 4096, 3, &ds[1]), 0);
	ds[0]->gen[5] = 17;
	ds[0]->gen[99] = VERIFY_GEN_UNKNOWN;
	ds[1]->gen[2] = 2;
	cr_assert_eq(verify_journal_save(path, ds, 2), 0);
	cr_assert_eq(verify_journal_load(path, &back, &n), 0);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(back[0]->name, "tank/a");
	cr_assert_eq(memcmp(back[0]->guid, guid, 16), 0);
	cr_assert_eq(back[0]->unit, UNIT);
	cr_assert_eq(back[0]->nunits, 100);
	cr_assert_eq(back[0]->gen[5], 17);
	cr_assert_eq(back[0]->gen[99], VERIFY_GEN_UNKNOWN);
	cr_assert_eq(back[0]->gen[6], 0);
	cr_assert_eq(back[1]->gen[2], 2);
	for (unsigned i = 0; i < 2; i++) {
		verify_ds_free(ds[i]);
		verify_ds_free(back[i]);
	}
	free(back);
}

Test(bench_verify, a_damaged_journal_is_refused)
{
	struct verify_ds *ds, **back = NULL;
	unsigned n = 0;
	char path[400];
	int fd;
	uint8_t b;

	snprintf(path, sizeof(path), "%s/j", dir);
	cr_assert_eq(verify_ds_new("tank/a", guid, UNIT, 10, &ds), 0);
	cr_assert_eq(verify_journal_save(path, &ds, 1), 0);
	verify_ds_free(ds);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, 30), 1);
	b ^= 1;
	cr_assert_eq(pwrite(fd, &b, 1, 30), 1);
	close(fd);
	cr_assert_eq(verify_journal_load(path, &back, &n), -EBADMSG);
	cr_assert_null(back);
	cr_assert_eq(truncate(path, 10), 0);
	cr_assert_eq(verify_journal_load(path, &back, &n), -EBADMSG);
	snprintf(path, sizeof(path), "%s/none", dir);
	cr_assert_eq(verify_journal_load(path, &back, &n), -ENOENT);
}
