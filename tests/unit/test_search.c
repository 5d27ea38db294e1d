/* SPDX-License-Identifier: MIT */
/*
 * Import by searching (search.c) and host ids in labels: pools put together
 * from the labels found in a directory, whatever else lies there; a scan
 * that writes nothing; a pool opened at the paths a scan found, its record
 * following them; a pool another host id holds refused without force.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <xxhash.h>

#include "fixture.h"
#include "kv/format.h"

#define LUN_SIZE (8u << 20)

TPOOL_FIXTURE(3, LUN_SIZE)
TestSuite(scan, .init = setup, .fini = teardown, .timeout = 240);

#define SCAN_MAX 4

/* What a scan reported, copied out of the callback. */
struct seen {
	int n;
	struct stor_found_pool pool[SCAN_MAX];
	char path[SCAN_MAX][TPOOL_LUNS_MAX][4096];
};

static int collect(const struct stor_found_pool *sp, void *arg)
{
	struct seen *s = arg;

	cr_assert_lt(s->n, SCAN_MAX);
	s->pool[s->n] = *sp;
	s->pool[s->n].paths = NULL;
	cr_assert_leq(sp->nluns, TPOOL_LUNS_MAX);
	for (unsigned i = 0; i < sp->nluns; i++)
		snprintf(s->path[s->n][i], sizeof(s->path[0][0]), "%s",
			 sp->paths[i] ? sp->paths[i] : "");
	s->n++;
	return 0;
}

static void scan(const char *dir, struct seen *s)
{
	const char *dirs[] = { dir };
	int ret;

	memset(s, 0, sizeof(*s));
	ret = stor_pool_search(dirs, 1, collect, s);
	cr_assert_eq(ret, s->n, "scan %s: %s", dir, stor_strerror(ret));
}

/* The pool named @name among those @s saw, or NULL. */
static const struct stor_found_pool *seen_pool(const struct seen *s, const char *name, int *at)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->pool[i].name, name)) {
			*at = i;
			return &s->pool[i];
		}
	return NULL;
}

static void export(struct tpool *t)
{
	int ret = stor_pool_export(t->pool);

	t->pool = NULL;
	cr_assert_eq(ret, 0, "export: %s", stor_strerror(ret));
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

Test(scan, labels_are_grouped_by_pool_in_index_order)
{
	struct tpool other;
	const struct stor_found_pool *p, *q;
	struct seen s;
	int a, b;

	tpool_init_in(&other, &tp, "other", 2, LUN_SIZE);
	export(&tp);
	scan(tp.dir, &s);
	cr_assert_eq(s.n, 2);
	p = seen_pool(&s, "tank", &a);
	q = seen_pool(&s, "other", &b);
	cr_assert(p && q);
	cr_assert_eq(p->nluns, 3);
	cr_assert_eq(p->nfound, 3);
	cr_assert(p->complete);
	cr_assert_eq(p->state, STOR_FOUND_EXPORTED);
	cr_assert_eq(p->hostid, stor_hostid());
	for (unsigned i = 0; i < 3; i++)
		cr_assert_str_eq(s.path[a][i], tp.lun[i]);
	/* still imported: its labels say active */
	cr_assert_eq(q->nluns, 2);
	cr_assert(q->complete);
	cr_assert_eq(q->state, STOR_FOUND_ACTIVE);
	cr_assert_str_eq(s.path[b][1], other.lun[1]);
	stor_pool_close(other.pool);
}

Test(scan, a_lun_with_both_label_copies_damaged_is_missing)
{
	const struct stor_found_pool *p;
	struct seen s;
	int a;

	export(&tp);
	tpool_flip_byte(&tp, 1, 20);
	tpool_flip_byte(&tp, 1, LUN_SIZE - 4096 + 20);
	/* one damaged copy of another LUN is no loss: the other copy is read */
	tpool_flip_byte(&tp, 2, 20);
	scan(tp.dir, &s);
	cr_assert_eq(s.n, 1);
	p = seen_pool(&s, "tank", &a);
	cr_assert_not_null(p);
	cr_assert_eq(p->nluns, 3);
	cr_assert_eq(p->nfound, 2);
	cr_assert_not(p->complete);
	cr_assert_str_eq(s.path[a][1], "");
	cr_assert_str_eq(s.path[a][2], tp.lun[2]);
}

Test(scan, files_that_are_no_luns_are_ignored_and_links_not_followed)
{
	char path[PATH_MAX + 64], sub[PATH_MAX];
	static uint8_t junk[LUN_SIZE / 8];
	struct seen s;

	export(&tp);
	tpat_random(junk, sizeof(junk), 7);
	snprintf(path, sizeof(path), "%s/junk", tp.dir);
	write_file(path, junk, sizeof(junk));
	snprintf(path, sizeof(path), "%s/empty", tp.dir);
	write_file(path, junk, 0);
	snprintf(path, sizeof(path), "%s/fifo", tp.dir);
	cr_assert_eq(mkfifo(path, 0600), 0); /* opening it would block the scan */
	/* a LUN in a subdirectory, reached directly or through a link, is not here */
	snprintf(sub, sizeof(sub), "%s/sub", tp.dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(path, sizeof(path), "%s/sub/lun2", tp.dir);
	cr_assert_eq(rename(tp.lun[2], path), 0);
	snprintf(sub, sizeof(sub), "%s/link2", tp.dir);
	cr_assert_eq(symlink(path, sub), 0);
	scan(tp.dir, &s);
	cr_assert_eq(s.n, 1);
	cr_assert_eq(s.pool[0].nfound, 2);
	cr_assert_str_eq(s.path[0][2], "");
}

/* Size, mtime and an xor of every byte of a file. */
struct snap {
	off_t size;
	struct timespec mtime;
	uint64_t sum;
};

static void snap(const char *path, struct snap *sn)
{
	static uint64_t buf[8192];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	sn->size = st.st_size;
	sn->mtime = st.st_mtim;
	sn->sum = 0;
	for (uint64_t k = 1; (n = read(fd, buf, sizeof(buf))) > 0; k++)
		for (size_t i = 0; i < (size_t)n / 8; i++)
			sn->sum += (buf[i] ^ (k * 0x9e3779b97f4a7c15ull)) * (i + 1);
	close(fd);
}

Test(scan, a_scan_writes_nothing)
{
	struct snap before[3], after[3];
	struct seen s;

	export(&tp);
	for (unsigned i = 0; i < 3; i++)
		snap(tp.lun[i], &before[i]);
	scan(tp.dir, &s);
	scan(tp.dir, &s);
	cr_assert_eq(s.n, 1);
	for (unsigned i = 0; i < 3; i++) {
		snap(tp.lun[i], &after[i]);
		cr_assert_eq(after[i].size, before[i].size);
		cr_assert_eq(after[i].sum, before[i].sum, "lun %u changed", i);
		cr_assert(after[i].mtime.tv_sec == before[i].mtime.tv_sec &&
				  after[i].mtime.tv_nsec == before[i].mtime.tv_nsec,
			  "lun %u: mtime changed", i);
	}
}

/* Move the LUN files of @t into @dir/moved/, named anew. */
static void move_luns(struct tpool *t, char moved[][PATH_MAX + 64], const char **v)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s/moved", t->dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	for (unsigned i = 0; i < t->nluns; i++) {
		/* names in reverse: the scan goes by label, not by name */
		snprintf(moved[i], PATH_MAX + 64, "%s/disk-%c", dir, 'z' - (char)i);
		cr_assert_eq(rename(t->lun[i], moved[i]), 0);
		v[i] = moved[i];
	}
}

Test(scan, a_pool_opens_at_the_paths_found_and_its_record_follows)
{
	char moved[3][PATH_MAX + 64], dir[PATH_MAX];
	const char *v[3];
	struct stor_lun_stat ls;
	struct stor_ds *ds;
	uint8_t buf[8192], got[8192];
	struct seen s;
	int ret;

	ds = tpool_ds(&tp, "tank/v", 1 << 20, 0);
	tpat_random(buf, sizeof(buf), 3);
	cr_assert_eq(stor_ds_write(ds, 8192, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_flush(ds), 0);
	stor_ds_close(ds);
	export(&tp);
	move_luns(&tp, moved, v);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, -ENOENT, "got %s", stor_strerror(ret));
	snprintf(dir, sizeof(dir), "%s/moved", tp.dir);
	scan(dir, &s);
	cr_assert_eq(s.n, 1);
	cr_assert(s.pool[0].complete);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_str_eq(s.path[0][i], moved[i]);
	tp.opts.lun_paths = v;
	tp.opts.nlun_paths = 3;
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "open: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 2, &ls), 0);
	cr_assert_str_eq(ls.path, moved[2]);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	cr_assert_eq(stor_ds_read(ds, 8192, got, sizeof(got)), 0);
	cr_assert_arr_eq(got, buf, sizeof(buf));
	stor_ds_close(ds);
	/* the record names the new paths: an open without them works */
	tp.opts.lun_paths = NULL;
	tp.opts.nlun_paths = 0;
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_str_eq(ls.path, moved[0]);
}

/* No metadata in the state directory: the open at the LUNs a scan found rebuilds it. */
Test(scan, without_metadata_the_open_at_found_luns_rebuilds_it)
{
	char moved[3][PATH_MAX + 64], mdb[PATH_MAX], hint[PATH_MAX + 8];
	const char *v[3];
	int ret;

	export(&tp);
	move_luns(&tp, moved, v);
	snprintf(mdb, sizeof(mdb), "%s/pools/tank.mdb", tp.state);
	snprintf(hint, sizeof(hint), "%s/pools/tank.luns", tp.state);
	cr_assert_eq(unlink(mdb), 0);
	unlink(hint);
	tp.opts.lun_paths = v;
	tp.opts.nlun_paths = 3;
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "got %s: %s", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(access(mdb, F_OK), 0);
}

Test(scan, a_pool_another_host_did_not_export_needs_force)
{
	struct seen s;
	int ret;

	/* host abcd has it open (whatever id this machine has), then host beef tries */
	tpool_close(&tp);
	cr_assert_eq(setenv("COFFER_HOSTID", "abcd", 1), 0);
	cr_assert_eq(stor_hostid(), 0xabcdu);
	tp.opts.force = 1;
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	tpool_close(&tp);
	tp.opts.force = 0;
	cr_assert_eq(setenv("COFFER_HOSTID", "0000beef", 1), 0);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, STOR_EHOSTID, "got %s", stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "pool was last used by host"), "%s",
		  stor_pool_last_error());
	tp.opts.force = 1;
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "forced: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	tpool_close(&tp);
	scan(tp.dir, &s);
	cr_assert_eq(s.pool[0].hostid, 0xbeefu);
	cr_assert_eq(s.pool[0].state, STOR_FOUND_ACTIVE);
	/* exported, any host imports it without force */
	tp.opts.force = 0;
	cr_assert_eq(tpool_open(&tp), 0);
	export(&tp);
	cr_assert_eq(setenv("COFFER_HOSTID", "0000cafe", 1), 0);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "exported: %s (%s)", stor_strerror(ret), stor_pool_last_error());
}

Test(scan, a_pool_renamed_on_open_keeps_its_new_name)
{
	struct stor_ds *ds;
	struct seen s;
	int ret;

	ds = tpool_ds(&tp, "tank/v", 1 << 20, 0);
	stor_ds_close(ds);
	export(&tp);
	tp.opts.new_name = "pond";
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "rename: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "pond/v", &ds), 0);
	stor_ds_close(ds);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), -ENOENT);
	export(&tp);
	scan(tp.dir, &s);
	cr_assert_str_eq(s.pool[0].name, "pond");
	tp.opts.new_name = NULL;
	snprintf(tp.name, sizeof(tp.name), "pond");
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "pond/v", &ds), 0);
	stor_ds_close(ds);
}

/* Files renamed but records not yet (a rename cut short): the open heals. */
Test(scan, records_of_a_rename_cut_short_follow_the_name)
{
	const char *const sfx[] = { ".mdb", ".mdb-lock", ".keys" };
	char a[PATH_MAX], b[PATH_MAX];
	struct stor_ds *ds;
	int ret;

	ds = tpool_ds(&tp, "tank/v", 1 << 20, 0);
	stor_ds_close(ds);
	export(&tp);
	for (int i = 0; i < 3; i++) {
		snprintf(a, sizeof(a), "%s/pools/tank%s", tp.state, sfx[i]);
		snprintf(b, sizeof(b), "%s/pools/pond%s", tp.state, sfx[i]);
		rename(a, b);
	}
	snprintf(tp.name, sizeof(tp.name), "pond");
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "%s (%s)", stor_strerror(ret), stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "pond/v", &ds), 0);
	stor_ds_close(ds);
}

Test(scan, a_new_name_taken_is_refused)
{
	struct tpool other;
	int ret;

	tpool_init_in(&other, &tp, "pond", 1, LUN_SIZE);
	stor_pool_close(other.pool);
	export(&tp);
	tp.opts.new_name = "pond";
	ret = tpool_open(&tp);
	cr_assert_eq(ret, -EEXIST, "got %s", stor_strerror(ret));
	tp.opts.new_name = NULL;
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
}

/* A sound label of format version 3 (no host id, no state) at both copies. */
static void write_v3_label(const char *path, uint64_t size)
{
	uint8_t buf[4096] = { 0 }, *w = buf;
	char name[LABEL_NAME_LEN] = "old";
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	put_u64(&w, LUN_MAGIC);
	put_u32(&w, 3);
	put_u32(&w, 0);
	put_u64(&w, 0x1234);
	put_u64(&w, 0x5678);
	put_u64(&w, size);
	put_u32(&w, 1);
	put_bytes(&w, name, sizeof(name));
	put_u64(&w, XXH64(buf, LABEL_LEN_V3 - 8, 0));
	cr_assert_eq(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	cr_assert_eq(pwrite(fd, buf, sizeof(buf), (off_t)(size - 4096)), (ssize_t)sizeof(buf));
	close(fd);
}

Test(scan, a_label_of_version_3_is_another_format_and_not_listed)
{
	char path[PATH_MAX + 16];
	struct seen s;
	int ret;

	export(&tp);
	snprintf(path, sizeof(path), "%s/v3", tp.dir);
	write_v3_label(path, LUN_SIZE);
	scan(tp.dir, &s);
	cr_assert_eq(s.n, 1);
	cr_assert_str_eq(s.pool[0].name, "tank");
	/* what labelclear says of it: another version, not damage */
	ret = stor_lun_labelclear(path, &tp.opts, 0);
	cr_assert_eq(ret, STOR_EFORMAT, "got %s (%s)", stor_strerror(ret), stor_pool_last_error());
}
