/* SPDX-License-Identifier: MIT */
/*
 * Pools: create/close/open round trips, the label checks of import (a LUN of
 * another pool, a missing LUN, a damaged label), destroy, and the size/used
 * accounting of stor_pool_stat.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fixture.h"

#define LUN_SIZE (16u << 20)

static struct tpool tp;

static void setup(void)
{
	tpool_init(&tp, 2, LUN_SIZE, NULL);
}

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(pool, .init = setup, .fini = teardown, .timeout = 30);

static void copy_file(const char *from, const char *to)
{
	static char buf[1 << 16];
	int in = open(from, O_RDONLY);
	int out = open(to, O_WRONLY | O_TRUNC);
	ssize_t n;

	cr_assert(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	cr_assert_eq(n, 0);
	close(in);
	close(out);
}

Test(pool, create_close_open_round_trip)
{
	struct stor_pool_stat st1, st2;
	uint64_t guid;

	cr_assert_eq(stor_pool_stat(tp.pool, &st1), 0);
	cr_assert_str_eq(st1.name, TPOOL_NAME);
	cr_assert_eq(st1.nluns, 2);
	cr_assert_neq(st1.guid, 0);
	guid = st1.guid;
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_stat(tp.pool, &st2), 0);
	cr_assert_str_eq(st2.name, TPOOL_NAME);
	cr_assert_eq(st2.guid, guid, "guid changed over close/open");
	cr_assert_eq(st2.nluns, 2);
	cr_assert_eq(st2.size, st1.size);
}

Test(pool, close_of_null_is_a_no_op)
{
	cr_assert_eq(stor_pool_close(NULL), 0);
}

Test(pool, create_over_existing_pool_metadata_is_refused)
{
	struct stor_pool *p = NULL;
	char l[PATH_MAX];
	const char *v[1] = { l };
	int ret;

	snprintf(l, sizeof(l), "%s/extra", tp.dir);
	ret = stor_pool_create(TPOOL_NAME, v, 1, &tp.opts, &p);
	cr_assert_eq(ret, -EEXIST, "got %s", stor_strerror(ret));
	cr_assert_null(p);
}

Test(pool, create_with_no_luns_is_refused)
{
	struct stor_pool *p = NULL;
	int ret = stor_pool_create("empty", NULL, 0, &tp.opts, &p);

	cr_assert_eq(ret, -EINVAL, "got %s", stor_strerror(ret));
	cr_assert_null(p);
}

Test(pool, bad_pool_names_are_refused)
{
	static const char *bad[] = { "", "a/b", "a b", "a@b", "/tank" };
	char l[PATH_MAX];
	const char *v[1] = { l };

	snprintf(l, sizeof(l), "%s/extra", tp.dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct stor_pool *p = NULL;
		int ret = stor_pool_create(bad[i], v, 1, &tp.opts, &p);

		cr_expect_eq(ret, STOR_EBADNAME, "'%s': got %s", bad[i], stor_strerror(ret));
		stor_pool_close(p);
	}
}

Test(pool, open_of_unknown_pool_is_enoent)
{
	struct stor_pool *p = NULL;
	int ret = stor_pool_open("nosuch", &tp.opts, &p);

	cr_assert_eq(ret, -ENOENT, "got %s", stor_strerror(ret));
	cr_assert_null(p);
}

Test(pool, lun_of_another_pool_is_foreign)
{
	struct tpool other;
	struct stor_pool *p = NULL;
	int ret;

	tpool_init_in(&other, &tp, "other", 2, LUN_SIZE);
	tpool_close(&other);
	tpool_close(&tp);
	/* the second LUN of tank now carries other's label: checks must cover every LUN */
	copy_file(other.lun[1], tp.lun[1]);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_null(p);
	cr_expect_neq(stor_pool_last_error()[0], '\0', "no last error text");
	/* the other pool is untouched by the failed import */
	ret = tpool_open(&other);
	cr_assert_eq(ret, 0, "other: %s", stor_strerror(ret));
	tpool_close(&other);
}

Test(pool, create_over_a_lun_of_another_pool_is_foreign)
{
	struct stor_pool *p = NULL;
	const char *v[1] = { tp.lun[0] };
	int ret;

	tpool_close(&tp);
	ret = stor_pool_create("second", v, 1, &tp.opts, &p);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	cr_assert_null(p);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "tank damaged by refused create: %s", stor_strerror(ret));
}

Test(pool, missing_lun_is_enoent_and_named)
{
	struct stor_pool *p = NULL;
	const char *msg;
	int ret;

	tpool_close(&tp);
	cr_assert_eq(unlink(tp.lun[1]), 0);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_assert_eq(ret, -ENOENT, "got %s", stor_strerror(ret));
	cr_assert_null(p);
	msg = stor_pool_last_error();
	cr_assert(strstr(msg, tp.lun[1]) || strstr(msg, "lun 1"),
		  "last error does not name the LUN: '%s'", msg);
}

static void expect_label_damage_refused(unsigned lun, uint64_t off)
{
	struct stor_pool *p = NULL;
	int ret;

	tpool_flip_byte(&tp, lun, off);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_expect_eq(ret, STOR_ELABEL, "lun %u byte %llu: got %s", lun, (unsigned long long)off,
		     stor_strerror(ret));
	stor_pool_close(p);
	tpool_flip_byte(&tp, lun, off); /* restore */
}

Test(pool, flipped_label_byte_is_refused)
{
	unsigned char label[4096];
	unsigned tried = 0;
	int fd, ret;

	tpool_close(&tp);
	for (unsigned lun = 0; lun < tp.nluns; lun++) {
		size_t nz = 0, seen = 0;

		fd = open(tp.lun[lun], O_RDONLY);
		cr_assert(fd >= 0);
		cr_assert_eq(pread(fd, label, sizeof(label), 0), (ssize_t)sizeof(label));
		close(fd);
		for (size_t i = 0; i < sizeof(label); i++)
			nz += label[i] != 0;
		cr_assert_gt(nz, 16, "lun %u: no label in the first 4 KiB", lun);
		/*
		 * The layout is private, but every non-zero byte of the first
		 * 4 KiB is label content: damage a spread of them, one at a time.
		 */
		for (size_t i = 0; i < sizeof(label); i++) {
			if (!label[i] || seen++ % (nz / 6) != 0)
				continue;
			expect_label_damage_refused(lun, i);
			tried++;
		}
	}
	cr_assert_geq(tried, 8);
	/* once every byte is back the pool opens again */
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "restored pool: %s (%s)", stor_strerror(ret), stor_pool_last_error());
}

Test(pool, zeroed_label_is_refused)
{
	static const char zero[4096];
	struct stor_pool *p = NULL;
	int fd, ret;

	tpool_close(&tp);
	fd = open(tp.lun[0], O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, zero, sizeof(zero), 0), (ssize_t)sizeof(zero));
	close(fd);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_assert_eq(ret, STOR_ELABEL, "got %s", stor_strerror(ret));
	cr_assert_null(p);
}

Test(pool, destroy_removes_pool_and_frees_its_luns)
{
	struct stor_pool *p = NULL;
	int ret;

	tpool_close(&tp);
	ret = stor_pool_destroy(TPOOL_NAME, &tp.opts);
	cr_assert_eq(ret, 0, "destroy: %s", stor_strerror(ret));
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_assert_eq(ret, -ENOENT, "open after destroy: %s", stor_strerror(ret));
	cr_assert_null(p);
	/* labels are wiped: the LUNs may be reused by a new pool */
	ret = stor_pool_create("fresh", tp.lunv, 2, &tp.opts, &p);
	cr_assert_eq(ret, 0, "reuse LUNs: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stor_pool_close(p), 0);
}

Test(pool, destroy_of_unknown_pool_is_enoent)
{
	int ret = stor_pool_destroy("nosuch", &tp.opts);

	cr_assert_eq(ret, -ENOENT, "got %s", stor_strerror(ret));
}

Test(pool, stat_reports_size_and_used)
{
	struct stor_pool_stat st;
	struct stor_lun_stat ls;
	struct stor_ds *ds;
	static unsigned char buf[16 * 8192];
	uint64_t used0, used1, lsize = 0;

	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	/* data space: most of the LUNs, not more than all of them */
	cr_assert_leq(st.size, 2ull * LUN_SIZE);
	cr_assert_geq(st.size, 2ull * LUN_SIZE * 9 / 10, "size %llu", (unsigned long long)st.size);
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(stor_pool_lun_stat(tp.pool, i, &ls), 0);
		cr_assert_str_eq(ls.path, tp.lun[i]);
		lsize += ls.size;
	}
	cr_assert_eq(lsize, st.size, "LUN sizes do not add up to the pool size");
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 2, &ls), -ENOENT);
	used0 = st.used;

	ds = tpool_ds(&tp, TPOOL_NAME "/a", 1 << 20, 8192);
	tpat_random(buf, sizeof(buf), 1); /* incompressible */
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	used1 = tpool_used(&tp);
	/* staged writes count */
	cr_assert_geq(used1, used0 + sizeof(buf), "used %llu -> %llu", (unsigned long long)used0,
		      (unsigned long long)used1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used1 = tpool_used(&tp);
	cr_assert_geq(used1, used0 + sizeof(buf));
	cr_assert_leq(used1, used0 + 2 * sizeof(buf), "16 records of 8 KiB took %llu bytes",
		      (unsigned long long)(used1 - used0));
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(st.ndatasets >= 1, 1);
	cr_assert_gt(st.txg, 0, "sync did not advance the txg");
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(tpool_used(&tp), used1, "used changed over close/open");
}

Test(pool, sync_advances_txg)
{
	struct stor_pool_stat st;
	struct stor_ds *ds = tpool_ds(&tp, TPOOL_NAME "/a", 1 << 20, 0);
	char b[512] = { 1 };
	uint64_t t0;

	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	t0 = st.txg;
	cr_assert_eq(stor_ds_write(ds, 0, b, sizeof(b)), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_gt(st.txg, t0);
	stor_ds_close(ds);
}

Test(pool, add_lun_grows_the_pool)
{
	struct stor_pool_stat st0, st1;
	char l[PATH_MAX];

	cr_assert_eq(stor_pool_stat(tp.pool, &st0), 0);
	snprintf(l, sizeof(l), "%s/lun2", tp.dir);
	cr_assert_eq(stor_pool_add_lun(tp.pool, l, LUN_SIZE), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st1), 0);
	cr_assert_eq(st1.nluns, 3);
	cr_assert_gt(st1.size, st0.size);
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_stat(tp.pool, &st1), 0);
	cr_assert_eq(st1.nluns, 3, "added LUN lost over close/open");
}

Test(pool, error_names_cover_store_and_errno_codes)
{
	cr_assert_str_eq(stor_errname(STOR_ELABEL), "ELABEL");
	cr_assert_str_eq(stor_errname(0), "OK");
	cr_assert_str_eq(stor_errname(-ENOENT), "ENOENT");
	cr_assert_str_eq(stor_errname(-EEXIST), "EEXIST");
	cr_assert_str_eq(stor_strerror(STOR_ECKSUM), "record checksum mismatch");
	cr_assert_not_null(stor_strerror(12345));
}

Test(pool, open_of_a_pool_open_in_another_process_is_ebusy)
{
	pid_t pid;
	int status;

	/*
	 * Two processes allocating from one pool would hand out the same
	 * sectors twice; import must refuse a pool that is in use (zpool
	 * import says "pool is in use"), as STYLE.md's -EBUSY example has it.
	 */
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct stor_pool *p = NULL;
		int ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);

		if (ret == 0)
			stor_pool_close(p);
		_exit(ret == -EBUSY ? 0 : ret == 0 ? 1 : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_neq(WEXITSTATUS(status), 1, "a second process opened the pool while it was open");
	cr_assert_eq(WEXITSTATUS(status), 0, "second open failed, but not with -EBUSY");
}

Test(pool, data_survives_adding_a_lun_and_new_writes_use_it)
{
	static unsigned char buf[64 * 8192];
	struct stor_lun_stat ls;
	struct stor_ds *ds = tpool_ds(&tp, TPOOL_NAME "/a", 2 << 20, 8192);
	char l[PATH_MAX];

	tpat_random(buf, sizeof(buf), 31);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf) / 2), 0);
	snprintf(l, sizeof(l), "%s/lun2", tp.dir);
	cr_assert_eq(stor_pool_add_lun(tp.pool, l, LUN_SIZE), 0);
	for (unsigned r = 32; r < 64; r++)
		cr_assert_eq(stor_ds_write(ds, r * 8192ull, buf + r * 8192, 8192), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 2, &ls), 0);
	cr_assert_gt(ls.used, 0, "nothing was written to the new LUN");
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/a", &ds), 0);
	{
		static unsigned char got[sizeof(buf)];

		cr_assert_eq(stor_ds_read(ds, 0, got, sizeof(got)), 0);
		cr_assert_arr_eq(got, buf, sizeof(buf));
	}
	stor_ds_close(ds);
}

Test(pool, adding_a_lun_of_another_pool_is_foreign)
{
	struct tpool other;
	int ret;

	tpool_init_in(&other, &tp, "other", 1, LUN_SIZE);
	tpool_close(&other);
	ret = stor_pool_add_lun(tp.pool, other.lun[0], 0);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	ret = stor_pool_add_lun(tp.pool, tp.lun[1], 0);
	cr_assert(ret < 0, "a LUN of this very pool was added twice");
	ret = tpool_open(&other);
	cr_assert_eq(ret, 0, "other pool damaged: %s", stor_strerror(ret));
	tpool_close(&other);
}

Test(pool, destroy_of_an_open_pool_is_ebusy)
{
	int ret = stor_pool_destroy(TPOOL_NAME, &tp.opts);

	cr_expect_eq(ret, -EBUSY, "destroy of an open pool: %s", stor_strerror(ret));
	/* whatever it said, the open pool must still be whole */
	tpool_close(&tp);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "pool gone after a refused destroy: %s (%s)", stor_strerror(ret),
		     stor_pool_last_error());
}

Test(pool, destroy_of_a_pool_that_no_longer_imports_forgets_it)
{
	char mdb[PATH_MAX], junk[4096];
	struct stor_pool *p = NULL;
	int fd;

	tpool_close(&tp);
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.dir, TPOOL_NAME);
	memset(junk, 0x5a, sizeof(junk));
	fd = open(mdb, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	close(fd);
	cr_assert_lt(stor_pool_open(TPOOL_NAME, &tp.opts, &p), 0);
	cr_assert_eq(stor_pool_destroy(TPOOL_NAME, &tp.opts), 0);
	cr_assert_eq(stor_pool_open(TPOOL_NAME, &tp.opts, &p), -ENOENT);
	cr_assert_eq(access(tp.lun[0], F_OK), 0, "the LUN files are left alone");
}
