// SPDX-License-Identifier: MIT
/*
 * The rules every part of coffer shares (common/size.c, name.c,
 * errors.c): the size grammar, the name check and the error texts, tested
 * once here rather than through each caller; and libstore's assertion.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "base/stor_assert.h"
#include "store.h"

TestSuite(rules, .timeout = 240);

Test(rules, sizes_take_units_of_1024_in_any_spelling)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} good[] = {
		{ "0", 0 },
		{ "8192", 8192 },
		{ "100B", 100 },
		{ "8k", 8192 },
		{ "8K", 8192 },
		{ "8KB", 8192 },
		{ "8kib", 8192 },
		{ "8Ki", 8192 },
		{ "2GiB", 2ull << 30 },
		{ "16m", 16ull << 20 },
		{ "3T", 3ull << 40 },
		{ "1P", 1ull << 50 },
		{ "15E", 15ull << 60 },
		{ "1.5G", 3ull << 29 },
		{ "0.5K", 512 },
		{ ".5K", 512 },
		{ "1.", 1 },
		{ "1.0", 1 },
		{ "1.25k", 1280 },
		{ "1.50000000000000000000000000K", 1536 },
		{ "18446744073709551615", UINT64_MAX },
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		uint64_t v = 1234;
		int ret = stor_parse_size(good[i].text, &v);

		cr_expect_eq(ret, 0, "%s: %d", good[i].text, ret);
		cr_expect_eq(v, good[i].bytes, "%s: %llu", good[i].text, (unsigned long long)v);
	}
}

Test(rules, sizes_refuse_junk_and_partial_bytes)
{
	static const char *const bad[] = {
		"",    "k",   "B",  "-1",   "+1",   " 1",  "1 ",  "1 K", "1KK", "1BB", "1KiBB",
		"1iB", "1Z",  "1X", "0x10", "1e3",  "inf", "nan", ".",   "1.1K", "0.3", "1.5",
		"1,5K", "1..5", "1.5.K", "12X",
		"15.999999999999999999E", /* 10^-18 E is 1.15 bytes: no whole number */
	};
	uint64_t v = 99;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(stor_parse_size(bad[i], &v), -EINVAL, "'%s' accepted", bad[i]);
	cr_expect_eq(v, 99, "a refused size left its output alone");
	cr_expect_eq(stor_parse_size(NULL, &v), -EINVAL);
}

Test(rules, sizes_above_64_bits_are_erange)
{
	static const char *const big[] = {
		"18446744073709551616", "99999999999999999999999", "16E", "16384P", "17179869184T",
		"18446744073709551615.5K",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
		cr_expect_eq(stor_parse_size(big[i], &v), -ERANGE, "'%s'", big[i]);
}

Test(rules, one_name_check_for_pools_and_datasets)
{
	char name[STOR_NAME_MAX + 2];

	cr_expect_eq(stor_name_check("tank", STOR_NAME_POOL), 0);
	cr_expect_eq(stor_name_check("tank", STOR_NAME_DATASET), 0);
	cr_expect_eq(stor_name_check("tank/a/b-c_d.e:f", STOR_NAME_DATASET), 0);
	cr_expect_eq(stor_name_check("tank/a", STOR_NAME_POOL), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("9tank", STOR_NAME_POOL), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/.", STOR_NAME_DATASET), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a/", STOR_NAME_DATASET), STOR_EBADNAME);
	cr_expect_eq(stor_name_check(NULL, STOR_NAME_DATASET), STOR_EBADNAME);
	/* a snapshot, a range, a list of both (destroy's); no empty element */
	cr_expect_eq(stor_name_check("tank/a@s1", STOR_NAME_SNAPSHOT), 0);
	cr_expect_eq(stor_name_check("tank/a@s1%s3", STOR_NAME_SNAPSHOT), 0);
	cr_expect_eq(stor_name_check("tank/a@%", STOR_NAME_SNAPSHOT), 0);
	cr_expect_eq(stor_name_check("tank/a@s1,s2%,%s0,x", STOR_NAME_SNAPSHOT), 0);
	cr_expect_eq(stor_name_check("tank/a@s1,", STOR_NAME_SNAPSHOT), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a@,s1", STOR_NAME_SNAPSHOT), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a@s1,,s2", STOR_NAME_SNAPSHOT), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a@s1%s2%s3", STOR_NAME_SNAPSHOT), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a@s1,s2%s3%", STOR_NAME_SNAPSHOT), STOR_EBADNAME);
	cr_expect_eq(stor_name_check("tank/a@", STOR_NAME_SNAPSHOT), STOR_EBADNAME);

	/* a pool's name fits a LUN label: 63 bytes; a dataset's 255 in all */
	memset(name, 'p', sizeof(name));
	name[STOR_POOL_NAME_MAX] = '\0';
	cr_expect_eq(stor_name_check(name, STOR_NAME_POOL), 0);
	name[STOR_POOL_NAME_MAX] = 'p';
	name[STOR_POOL_NAME_MAX + 1] = '\0';
	cr_expect_eq(stor_name_check(name, STOR_NAME_POOL), STOR_EBADNAME);
	memset(name, 'd', sizeof(name));
	memcpy(name, "tank/", 5);
	name[STOR_NAME_MAX] = '\0';
	cr_expect_eq(stor_name_check(name, STOR_NAME_DATASET), 0);
	name[STOR_NAME_MAX] = 'd';
	name[STOR_NAME_MAX + 1] = '\0';
	cr_expect_eq(stor_name_check(name, STOR_NAME_DATASET), STOR_EBADNAME);
}

Test(rules, error_texts_come_from_the_one_map)
{
	cr_expect_str_eq(stor_strerror(STOR_EBADNAME), "invalid dataset or pool name");
	cr_expect_str_eq(stor_errname(STOR_EBADNAME), "EBADNAME");
	cr_expect_str_eq(stor_strerror(0), "success");
	cr_expect_str_eq(stor_strerror(-ENOENT), strerror(ENOENT));
	cr_expect_str_eq(stor_strerror(-20000), "unknown error");
	cr_expect_str_eq(stor_errname(-20000), "EUNKNOWN");
}

/* STOR_FAILS_ASSERT: a debug build stops at the bug, any other reports it and falls back */
#ifdef STOR_DEBUG
Test(rules, a_failed_assertion_aborts_a_debug_build, .signal = SIGABRT)
#else
Test(rules, a_failed_assertion_reports_and_the_caller_falls_back)
#endif
{
	int x = 1;

	cr_assert(!STOR_FAILS_ASSERT(x == 1));
	if (STOR_FAILS_ASSERT(x == 2))
		x = 3;
	cr_assert_eq(x, 3);
}

Test(rules, sizes_are_shown_with_three_digits_and_a_unit_of_1024)
{
	static const struct {
		uint64_t v;
		const char *s;
	} cases[] = { { 0, "0" },
		      { 1023, "1023" },
		      { 1024, "1K" },
		      { 8u << 20, "8M" },
		      { 1536 << 10, "1.50M" },
		      { (10ull << 30) + (512ull << 20), "10.5G" },
		      { (10ull << 30) + 1, "10.0G" },
		      { 128ull << 30, "128G" } };
	char buf[32];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		stor_format_size(cases[i].v, buf, sizeof(buf));
		cr_expect_str_eq(buf, cases[i].s, "%llu", (unsigned long long)cases[i].v);
	}
}
