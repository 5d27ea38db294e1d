/* SPDX-License-Identifier: MIT */
/*
 * Pools: create/close/open round trips, the label checks of import (a LUN of
 * another pool, a missing LUN, a damaged label), destroy, and the size/used
 * accounting of stor_pool_stat.
 */

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

TestSuite(pool, .init = setup, .fini = teardown, .timeout = 240);

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

/* Byte offset of label copy @copy (0 front, 1 end) of a fixture LUN. */
static uint64_t label_at(unsigned copy)
{
	return copy == 0 ? 0 : LUN_SIZE - 4096;
}

static void expect_label_damage_refused(unsigned lun, uint64_t off)
{
	struct stor_pool *p = NULL;
	int ret;

	tpool_flip_byte(&tp, lun, label_at(0) + off);
	tpool_flip_byte(&tp, lun, label_at(1) + off);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_expect_eq(ret, STOR_ELABEL, "lun %u byte %llu: got %s", lun, (unsigned long long)off,
		     stor_strerror(ret));
	if (ret == STOR_ELABEL)
		cr_expect(strstr(stor_pool_last_error(), tp.lun[lun]) &&
				  strstr(stor_pool_last_error(), "front") &&
				  strstr(stor_pool_last_error(), "end"),
			  "error names neither the LUN nor its copies: %s", stor_pool_last_error());
	stor_pool_close(p);
	tpool_flip_byte(&tp, lun, label_at(0) + off); /* restore */
	tpool_flip_byte(&tp, lun, label_at(1) + off);
}

static void read_at(const char *path, uint64_t off, void *buf, size_t len)
{
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	close(fd);
}

Test(pool, label_damaged_in_both_copies_is_refused_and_named)
{
	unsigned char label[4096], end[4096];
	unsigned tried = 0;
	int ret;

	tpool_close(&tp);
	for (unsigned lun = 0; lun < tp.nluns; lun++) {
		size_t nz = 0, seen = 0;

		read_at(tp.lun[lun], label_at(0), label, sizeof(label));
		read_at(tp.lun[lun], label_at(1), end, sizeof(end));
		for (size_t i = 0; i < sizeof(label); i++)
			nz += label[i] != 0;
		cr_assert_gt(nz, 16, "lun %u: no label in the first 4 KiB", lun);
		cr_assert_arr_eq(end, label, sizeof(label), "lun %u: no end copy of the label", lun);
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

/* Damage copy @copy of LUN 1 (@zero: zero it, else flip a byte), import, and
 * expect the pool to open with that copy rewritten. */
static void one_copy_is_repaired(unsigned copy, int zero)
{
	static const unsigned char zeros[4096];
	unsigned char before[4096], after[4096];
	struct stor_lun_stat ls;
	int fd, ret;

	tpool_close(&tp);
	read_at(tp.lun[1], label_at(copy), before, sizeof(before));
	if (zero) {
		fd = open(tp.lun[1], O_WRONLY);
		cr_assert(fd >= 0);
		cr_assert_eq(pwrite(fd, zeros, sizeof(zeros), (off_t)label_at(copy)),
			     (ssize_t)sizeof(zeros));
		close(fd);
	} else {
		tpool_flip_byte(&tp, 1, label_at(copy) + 30);
	}
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "one bad copy refused the pool: %s (%s)", stor_strerror(ret),
		     stor_pool_last_error());
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_eq(ls.label_damaged, 1u << copy, "damaged copies %u", ls.label_damaged);
	cr_assert_eq(ls.label_repaired, 1u << copy, "repaired copies %u", ls.label_repaired);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_eq(ls.label_damaged, 0);
	read_at(tp.lun[1], label_at(copy), after, sizeof(after));
	cr_assert_arr_eq(after, before, sizeof(after), "copy %u not rewritten", copy);
	/* repaired for good: the next import finds both copies sound */
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_eq(ls.label_damaged, 0);
}

Test(pool, flipped_byte_in_the_front_label_is_repaired_from_the_end_copy)
{
	one_copy_is_repaired(0, 0);
}

Test(pool, flipped_byte_in_the_end_label_is_repaired_from_the_front_copy)
{
	one_copy_is_repaired(1, 0);
}

Test(pool, zeroed_front_label_is_repaired)
{
	one_copy_is_repaired(0, 1);
}

Test(pool, zeroed_label_copies_are_refused)
{
	static const char zero[4096];
	struct stor_pool *p = NULL;
	int fd, ret;

	tpool_close(&tp);
	fd = open(tp.lun[0], O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, zero, sizeof(zero), 0), (ssize_t)sizeof(zero));
	cr_assert_eq(pwrite(fd, zero, sizeof(zero), (off_t)label_at(1)), (ssize_t)sizeof(zero));
	close(fd);
	ret = stor_pool_open(TPOOL_NAME, &tp.opts, &p);
	cr_assert_eq(ret, STOR_ELABEL, "got %s", stor_strerror(ret));
	cr_assert_null(p);
}

Test(pool, data_area_ends_before_the_end_label)
{
	static unsigned char buf[64 * 8192];
	unsigned char end[4096], end2[4096];
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_leq(ls.size + (1u << 20), label_at(1), "data area overlaps the end label");
	read_at(tp.lun[0], label_at(1), end, sizeof(end));
	/* fill the pool: no record may land on the end copy */
	ds = tpool_ds(&tp, TPOOL_NAME "/full", 2 * LUN_SIZE, 8192);
	for (uint64_t off = 0;; off += sizeof(buf)) {
		tpat_random(buf, sizeof(buf), off);
		if (stor_ds_write(ds, off, buf, sizeof(buf)) < 0)
			break;
	}
	stor_pool_sync(tp.pool);
	stor_ds_close(ds);
	read_at(tp.lun[0], label_at(1), end2, sizeof(end2));
	cr_assert_arr_eq(end2, end, sizeof(end), "a full pool wrote over the end label");
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
	cr_assert_eq(stor_pool_add_lun(tp.pool, l, LUN_SIZE, 0), 0);
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
	cr_assert_eq(stor_pool_add_lun(tp.pool, l, LUN_SIZE, 0), 0);
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
	ret = stor_pool_add_lun(tp.pool, other.lun[0], 0, 0);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	ret = stor_pool_add_lun(tp.pool, tp.lun[1], 0, 0);
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
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	memset(junk, 0x5a, sizeof(junk));
	fd = open(mdb, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	close(fd);
	/* damaged LMDB is rebuilt from the LUNs; without its LUN list there is
	 * nowhere to look, and the pool no longer imports */
	snprintf(junk, sizeof(junk), "%s/pools/%s.luns", tp.state, TPOOL_NAME);
	cr_assert_eq(unlink(junk), 0);
	cr_assert_lt(stor_pool_open(TPOOL_NAME, &tp.opts, &p), 0);
	cr_assert_eq(stor_pool_destroy(TPOOL_NAME, &tp.opts), 0);
	cr_assert_eq(stor_pool_open(TPOOL_NAME, &tp.opts, &p), -ENOENT);
	cr_assert_eq(access(tp.lun[0], F_OK), 0, "the LUN files are left alone");
}

/* ---- what may become a LUN ---- */

/* A file of @size bytes at @path holding @text at offset @off (NULL: sparse, all zero). */
static void make_file(const char *path, uint64_t size, const char *text, uint64_t off)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	if (text)
		cr_assert_eq(pwrite(fd, text, strlen(text), (off_t)off), (ssize_t)strlen(text));
	close(fd);
}

static int file_has(const char *path, const char *text, uint64_t off)
{
	char buf[256] = { 0 };
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0);
	cr_assert(pread(fd, buf, strlen(text), (off_t)off) >= 0);
	close(fd);
	return !memcmp(buf, text, strlen(text));
}

static int create1(const char *name, const char *lun, int force)
{
	struct stor_pool_opts o = tp.opts;
	struct stor_pool *p = NULL;
	const char *v[1] = { lun };
	int ret;

	o.force = force;
	ret = stor_pool_create(name, v, 1, &o, &p);
	if (ret == 0)
		cr_assert_eq(stor_pool_close(p), 0);
	else
		cr_assert_null(p);
	return ret;
}

Test(pool, symlink_to_a_file_is_refused_unless_forced)
{
	char target[PATH_MAX], link[PATH_MAX];
	int ret;

	/* a file the caller could not write, reached through a link it could make */
	snprintf(target, sizeof(target), "%s/secret", tp.dir);
	snprintf(link, sizeof(link), "%s/innocent", tp.dir);
	make_file(target, LUN_SIZE, NULL, 0);
	cr_assert_eq(symlink(target, link), 0);
	ret = create1("linked", link, 0);
	cr_assert_eq(ret, -ELOOP, "got %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert(strstr(stor_pool_last_error(), "symbolic link"), "%s", stor_pool_last_error());
	ret = stor_pool_add_lun(tp.pool, link, 0, 0);
	cr_assert_eq(ret, -ELOOP, "add: got %s", stor_strerror(ret));
	/* a dangling link is not created through either */
	cr_assert_eq(unlink(target), 0);
	ret = stor_pool_add_lun(tp.pool, link, LUN_SIZE, 0);
	cr_assert_lt(ret, 0, "a LUN was created through a dangling link");
	cr_assert_neq(access(target, F_OK), 0, "the link's target was created");
	make_file(target, LUN_SIZE, NULL, 0);
	ret = create1("linked", link, 1);
	cr_assert_eq(ret, 0, "forced: %s (%s)", stor_strerror(ret), stor_pool_last_error());
}

Test(pool, existing_file_with_data_is_refused_unless_forced)
{
	static const char *const where[] = { "front", "end" };
	char path[PATH_MAX];
	int ret;

	for (int w = 0; w < 2; w++) {
		/* a file system's superblock near the start, or a backup GPT at the end */
		uint64_t off = w == 0 ? 1024 : LUN_SIZE - 512;

		snprintf(path, sizeof(path), "%s/data%d", tp.dir, w);
		make_file(path, LUN_SIZE, "precious bytes", off);
		ret = create1("taken", path, 0);
		cr_assert_eq(ret, STOR_ENOTBLANK, "%s: got %s (%s)", where[w], stor_strerror(ret),
			     stor_pool_last_error());
		cr_assert(strstr(stor_pool_last_error(), path), "%s", stor_pool_last_error());
		cr_assert(file_has(path, "precious bytes", off), "refused create wrote %s", path);
		ret = stor_pool_add_lun(tp.pool, path, 0, 0);
		cr_assert_eq(ret, STOR_ENOTBLANK, "add: got %s", stor_strerror(ret));
	}
	ret = create1("taken", path, 1);
	cr_assert_eq(ret, 0, "forced: %s (%s)", stor_strerror(ret), stor_pool_last_error());
}

Test(pool, existing_sparse_or_empty_files_are_taken)
{
	char sparse[PATH_MAX], empty[PATH_MAX];
	struct stat st;
	int ret;

	snprintf(sparse, sizeof(sparse), "%s/sparse", tp.dir);
	snprintf(empty, sizeof(empty), "%s/empty", tp.dir);
	make_file(sparse, LUN_SIZE, NULL, 0);
	make_file(empty, 0, NULL, 0);
	ret = create1("zeros", sparse, 0);
	cr_assert_eq(ret, 0, "sparse: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	ret = stor_pool_add_lun(tp.pool, empty, LUN_SIZE, 0);
	cr_assert_eq(ret, 0, "empty: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stat(empty, &st), 0);
	cr_assert_eq(st.st_size, LUN_SIZE, "the empty file was not sized");
}

Test(pool, files_inside_the_state_directory_are_refused_even_forced)
{
	char mdb[PATH_MAX], fresh[PATH_MAX], via[PATH_MAX];
	struct stat before, after;
	int ret;

	/* another pool's live metadata must not become a LUN */
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	cr_assert_eq(stat(mdb, &before), 0);
	for (int force = 0; force < 2; force++) {
		ret = create1("eater", mdb, force);
		cr_assert(ret == -EINVAL || (!force && ret == STOR_ENOTBLANK),
			  "force %d: got %s (%s)", force, stor_strerror(ret),
			  stor_pool_last_error());
	}
	ret = stor_pool_add_lun(tp.pool, mdb, 0, STOR_FORCE);
	cr_assert_eq(ret, -EINVAL, "add: got %s", stor_strerror(ret));
	/* nor a new file there, nor one reached through a link or "..": real paths count */
	snprintf(fresh, sizeof(fresh), "%s/pools/new-lun", tp.state);
	ret = create1("eater", fresh, 1);
	cr_assert_eq(ret, -EINVAL, "new file in state dir: got %s", stor_strerror(ret));
	cr_assert_neq(access(fresh, F_OK), 0, "the refused file was left behind");
	snprintf(via, sizeof(via), "%s/state/../state/pools/%s.mdb", tp.dir, TPOOL_NAME);
	ret = create1("eater", via, 1);
	cr_assert_eq(ret, -EINVAL, "dotted path: got %s", stor_strerror(ret));
	snprintf(via, sizeof(via), "%s/statelink", tp.dir);
	cr_assert_eq(symlink(tp.state, via), 0);
	strcat(via, "/pools/" TPOOL_NAME ".mdb");
	ret = create1("eater", via, 1);
	cr_assert_eq(ret, -EINVAL, "linked dir: got %s", stor_strerror(ret));
	cr_assert_eq(stat(mdb, &after), 0);
	cr_assert_eq(after.st_mtime, before.st_mtime);
	tpool_reopen(&tp);
}

Test(pool, lun_of_an_open_pool_is_in_use_here_and_in_other_processes)
{
	pid_t pid;
	int ret, status;

	ret = create1("second", tp.lun[0], 1);
	cr_assert_eq(ret, -EBUSY, "got %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert(strstr(stor_pool_last_error(), "in use by pool '" TPOOL_NAME "'"), "%s",
		  stor_pool_last_error());
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		/* another process with its own state dir: only the claim can stop it */
		struct stor_pool_opts o = { .state_dir = tp.dir, .force = 1 };
		struct stor_pool *p = NULL;
		const char *v[1] = { tp.lun[1] };
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/other-state", tp.dir);
		o.state_dir = dir;
		ret = stor_pool_create("thief", v, 1, &o, &p);
		if (ret == 0)
			stor_pool_close(p);
		_exit(ret == -EBUSY ? 0 : ret == 0 ? 1 : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "another process %s the LUN of an open pool",
		     WEXITSTATUS(status) == 1 ? "took" : "failed oddly on");
	/* the claim ends with the pool */
	tpool_close(&tp);
	cr_assert_eq(stor_lun_labelclear(tp.lun[0], &tp.opts, STOR_FORCE), 0);
}

/* The state a crash between labels and metadata leaves: labels, no metadata. */
static void half_created(const char *name, char lun[PATH_MAX])
{
	static const char *const ext[] = { ".mdb", ".mdb-lock", ".mdb.lock", ".keys", ".luns" };
	char path[PATH_MAX + 32];

	snprintf(lun, PATH_MAX, "%s/%s-l0", tp.dir, name);
	cr_assert_eq(create1(name, lun, 0), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(path, sizeof(path), "%s/pools/%s%s", tp.state, name, ext[i]);
		unlink(path);
	}
}

Test(pool, labels_of_a_pool_without_metadata_are_reclaimed_by_forced_create)
{
	char lun[PATH_MAX];
	int ret;

	half_created("crashed", lun);
	ret = create1("retry", lun, 0);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "no metadata"), "%s", stor_pool_last_error());
	ret = create1("crashed", lun, 1);
	cr_assert_eq(ret, 0, "forced: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	/* but never a LUN of a pool that has metadata, forced or not */
	ret = create1("retry", lun, 1);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	ret = create1("retry", tp.lun[0], 1);
	cr_assert_eq(ret, -EBUSY, "got %s", stor_strerror(ret));
}

Test(pool, labelclear_wipes_labels_no_pool_uses)
{
	char lun[PATH_MAX], plain[PATH_MAX], mdb[PATH_MAX];
	int ret;

	half_created("crashed", lun);
	ret = stor_lun_labelclear(lun, &tp.opts, 0);
	cr_assert_eq(ret, 0, "%s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(create1("reused", lun, 0), 0, "%s", stor_pool_last_error());
	/* a LUN of an exported pool that has metadata: destroy it, or force */
	ret = stor_lun_labelclear(lun, &tp.opts, 0);
	cr_assert_eq(ret, STOR_EFOREIGN, "got %s", stor_strerror(ret));
	cr_assert_eq(stor_lun_labelclear(lun, &tp.opts, STOR_FORCE), 0);
	/* never a LUN an open pool holds */
	ret = stor_lun_labelclear(tp.lun[0], &tp.opts, STOR_FORCE);
	cr_assert_eq(ret, -EBUSY, "got %s", stor_strerror(ret));
	/* never a file without a label, nor the metadata */
	snprintf(plain, sizeof(plain), "%s/plain", tp.dir);
	make_file(plain, LUN_SIZE, "not a label", 0);
	ret = stor_lun_labelclear(plain, &tp.opts, STOR_FORCE);
	cr_assert_eq(ret, STOR_ELABEL, "got %s", stor_strerror(ret));
	cr_assert(file_has(plain, "not a label", 0));
	snprintf(mdb, sizeof(mdb), "%s/pools/%s.mdb", tp.state, TPOOL_NAME);
	ret = stor_lun_labelclear(mdb, &tp.opts, STOR_FORCE);
	cr_assert_lt(ret, 0);
	tpool_reopen(&tp);
}

Test(pool, a_grown_lun_file_gets_its_end_label_at_the_new_end)
{
	struct stor_lun_stat ls;
	uint64_t size0;

	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	size0 = ls.size;
	tpool_close(&tp);
	cr_assert_eq(truncate(tp.lun[0], 2 * LUN_SIZE), 0);
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_eq(ls.label_repaired, 2u, "end copy at the new end: %u", ls.label_repaired);
	cr_assert_eq(ls.size, size0 + LUN_SIZE);
	/* and it stays put: both copies read the same from now on */
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_eq(ls.label_damaged, 0, "copies differ after the repair: %u", ls.label_damaged);
}
