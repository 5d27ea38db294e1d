/* SPDX-License-Identifier: MIT */
/*
 * stor_ds_rename in the engine: a rename is one commit of its own, with
 * nothing left for a later txg to take to the LUNs (the end-to-end tests
 * kill the daemon and import from the LUNs); the names survive a reopen; a
 * refusal leaves LMDB as it was.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "fixture.h"
#include "kv/meta.h"
#include "pool_impl.h"

TPOOL_FIXTURE(2, 16 << 20)
TestSuite(rename, .init = setup, .fini = teardown, .timeout = 120);

struct names {
	char buf[4096];
};

static int add(const char *name, void *ctx)
{
	struct names *n = ctx;

	strncat(n->buf, name, sizeof(n->buf) - strlen(n->buf) - 2);
	strcat(n->buf, "\n");
	return 0;
}

static const char *names(void)
{
	static struct names n;

	n.buf[0] = '\0';
	cr_assert_eq(stor_ds_list(tp.pool, add, &n), 0);
	cr_assert_eq(stor_snap_list(tp.pool, add, &n), 0);
	return n.buf;
}

Test(rename, a_rename_is_one_commit_with_nothing_left_pending)
{
	const char *snap[] = { "tank/a@s" };
	uint64_t before;

	stor_ds_close(tpool_ds(&tp, "tank/a", 1 << 20, 0));
	stor_ds_close(tpool_ds(&tp, "tank/a/b", 1 << 20, 0));
	cr_assert_eq(stor_snap_create(tp.pool, snap, 1, STOR_RECURSIVE), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(meta_pending(tp.pool->meta), 0);
	before = atomic_load(&tp.pool->synced_txg);
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/a", "tank/c", 0), 0, "%s",
		     stor_pool_last_error());
	/* every key moved in the rename's own txg, on the LUNs when it returned */
	cr_assert_eq(meta_pending(tp.pool->meta), 0);
	cr_assert_eq(atomic_load(&tp.pool->synced_txg), before + 1);
	cr_assert_str_eq(names(), "tank\ntank/c\ntank/c/b\ntank/c@s\ntank/c/b@s\n");
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/c/b@s", "tank/c/b@t", 0), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(meta_pending(tp.pool->meta), 0);
	tpool_reopen(&tp);
	cr_assert_str_eq(names(), "tank\ntank/c\ntank/c/b\ntank/c@s\ntank/c/b@t\n");
}

Test(rename, a_refusal_changes_nothing)
{
	stor_ds_close(tpool_ds(&tp, "tank/a", 1 << 20, 0));
	stor_ds_close(tpool_ds(&tp, "tank/b", 1 << 20, 0));
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/a", "tank/b", 0), -EEXIST);
	cr_assert(strstr(stor_pool_last_error(), "tank/b exists"), "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_rename(tp.pool, "tank", "tank/z", 0), -EBUSY);
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/a", "other/a", 0), -EXDEV);
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/a", "tank/a/x", 0), -EINVAL);
	cr_assert_eq(stor_ds_rename(tp.pool, "tank/a", "tank/x/y", 0), -ENOENT);
	cr_assert_eq(meta_pending(tp.pool->meta), 0);
	tpool_reopen(&tp);
	cr_assert_str_eq(names(), "tank\ntank/a\ntank/b\n");
}
