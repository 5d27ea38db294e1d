/* SPDX-License-Identifier: MIT */
/*
 * Datasets: ZFS-style name validation, create/destroy/list/open, a pool of
 * 1,000 datasets that survives close/open, space freed by destroy, and the
 * property rules (inheritance, local override, inherit, recordsize fixed at
 * creation, unknown properties).
 */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fixture.h"

TPOOL_FIXTURE(2, 16u << 20)
TestSuite(dataset, .init = setup, .fini = teardown, .timeout = 240);

static int create(const char *name)
{
	return stor_ds_create(tp.pool, name, NULL, NULL);
}

Test(dataset, valid_names_are_accepted)
{
	char longest[STOR_NAME_MAX + 1];
	int ret;

	cr_assert_eq(ret = create("tank/a"), 0, "tank/a: %s", stor_strerror(ret));
	cr_assert_eq(ret = create("tank/a-b_c.d:e"), 0, "tank/a-b_c.d:e: %s", stor_strerror(ret));
	cr_assert_eq(ret = create("tank/a/b"), 0, "tank/a/b: %s", stor_strerror(ret));
	cr_assert_eq(ret = create("tank/9Z"), 0, "tank/9Z: %s", stor_strerror(ret));
	/* exactly STOR_NAME_MAX characters is still a name */
	memset(longest, 'x', STOR_NAME_MAX);
	memcpy(longest, "tank/", 5);
	longest[STOR_NAME_MAX] = '\0';
	ret = create(longest);
	cr_assert_eq(ret, 0, "%zu chars: %s", strlen(longest), stor_strerror(ret));
}

Test(dataset, invalid_names_are_rejected)
{
	static const char *bad[] = {
		"",	  "tank/a/",  "tank//a",	"/tank/a", "tank/a b",
		"tank/a@b", "tank/a#b", "tank/a%b",	"tank/a\tb", "tank/\xc3\xa4",
		"tank/a*",  "tank/.",   "tank/..",
	};
	char toolong[STOR_NAME_MAX + 2];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = create(bad[i]);

		cr_expect_eq(ret, STOR_EBADNAME, "'%s': got %s", bad[i], stor_strerror(ret));
	}
	memset(toolong, 'x', sizeof(toolong) - 1);
	memcpy(toolong, "tank/", 5);
	toolong[sizeof(toolong) - 1] = '\0';
	cr_expect_eq(create(toolong), STOR_EBADNAME, "%zu chars accepted", strlen(toolong));
	cr_expect_eq(stor_ds_create(tp.pool, NULL, NULL, NULL) < 0, 1);
}

Test(dataset, missing_parent_is_enoent)
{
	int ret = create("tank/x/y");

	cr_assert_eq(ret, -ENOENT, "got %s", stor_strerror(ret));
	ret = stor_ds_open(tp.pool, "tank/x", &(struct stor_ds *){ NULL });
	cr_assert_eq(ret, -ENOENT, "the parent was created: %s", stor_strerror(ret));
}

Test(dataset, another_pools_name_is_refused)
{
	int ret = create("other/a");

	cr_assert(ret == -ENOENT || ret == STOR_EBADNAME, "got %s", stor_strerror(ret));
}

Test(dataset, duplicate_is_eexist)
{
	cr_assert_eq(create("tank/a"), 0);
	cr_assert_eq(create("tank/a"), -EEXIST);
}

Test(dataset, open_returns_geometry)
{
	struct stor_ds_opts o = { .volsize = 3 << 20, .recordsize = 4096 };
	struct stor_ds *ds = NULL, *ds2 = NULL;

	cr_assert_eq(stor_ds_create(tp.pool, "tank/g", &o, &ds), 0);
	cr_assert_str_eq(stor_ds_name(ds), "tank/g");
	cr_assert_eq(stor_ds_volsize(ds), 3 << 20);
	cr_assert_eq(stor_ds_recordsize(ds), 4096);
	cr_assert_neq(stor_ds_guid(ds), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/g", &ds2), 0);
	cr_assert_eq(stor_ds_guid(ds2), stor_ds_guid(ds));
	stor_ds_close(ds);
	stor_ds_close(ds2);
	stor_ds_close(NULL);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/g", &ds), 0);
	cr_assert_eq(stor_ds_volsize(ds), 3 << 20);
	cr_assert_eq(stor_ds_recordsize(ds), 4096);
	stor_ds_close(ds);
}

Test(dataset, defaults_are_1g_and_8k)
{
	struct stor_ds *ds = NULL;

	cr_assert_eq(stor_ds_create(tp.pool, "tank/d", NULL, &ds), 0);
	cr_assert_eq(stor_ds_volsize(ds), 1ull << 30);
	cr_assert_eq(stor_ds_recordsize(ds), STOR_RECSIZE_DEFAULT);
	stor_ds_close(ds);
}

struct names {
	char **v;
	size_t n, cap;
};

static int collect(const char *name, void *ctx)
{
	struct names *nm = ctx;

	/* the pool's own root may or may not be listed; the children must be */
	if (strncmp(name, TPOOL_NAME "/", strlen(TPOOL_NAME "/")) != 0)
		return 0;
	if (nm->n == nm->cap) {
		nm->cap = nm->cap ? 2 * nm->cap : 64;
		nm->v = realloc(nm->v, nm->cap * sizeof(*nm->v));
	}
	nm->v[nm->n++] = strdup(name);
	return 0;
}

static void names_free(struct names *nm)
{
	for (size_t i = 0; i < nm->n; i++)
		free(nm->v[i]);
	free(nm->v);
	memset(nm, 0, sizeof(*nm));
}

static void check_thousand(void)
{
	struct names nm = { 0 };
	char want[64];

	cr_assert_eq(stor_ds_list(tp.pool, collect, &nm), 0);
	cr_assert_eq(nm.n, 1000, "listed %zu", nm.n);
	for (size_t i = 0; i < nm.n; i++) {
		/* created in reverse order, listed in name order */
		snprintf(want, sizeof(want), TPOOL_NAME "/d%04zu", i);
		cr_assert_str_eq(nm.v[i], want);
	}
	names_free(&nm);
}

Test(dataset, thousand_datasets_listed_in_order_and_reopened)
{
	struct stor_pool_stat st;
	struct stor_ds *ds;
	char name[64];

	for (int i = 999; i >= 0; i--) {
		int ret;

		snprintf(name, sizeof(name), TPOOL_NAME "/d%04d", i);
		ret = create(name);
		cr_assert_eq(ret, 0, "%s: %s", name, stor_strerror(ret));
	}
	check_thousand();
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_geq(st.ndatasets, 1000);
	tpool_reopen(&tp);
	check_thousand();
	cr_assert_eq(stor_ds_open(tp.pool, TPOOL_NAME "/d0500", &ds), 0);
	stor_ds_close(ds);
}

static int stop_at_three(const char *name, void *ctx)
{
	int *n = ctx;

	(void)name;
	return ++*n == 3 ? 42 : 0;
}

Test(dataset, list_stops_when_callback_says_so)
{
	int n = 0, ret;

	cr_assert_eq(create("tank/a"), 0);
	cr_assert_eq(create("tank/b"), 0);
	cr_assert_eq(create("tank/c"), 0);
	cr_assert_eq(create("tank/d"), 0);
	ret = stor_ds_list(tp.pool, stop_at_three, &n);
	cr_assert_eq(n, 3);
	cr_assert_neq(ret, 0, "callback's stop value was dropped");
}

Test(dataset, destroy_frees_space)
{
	static unsigned char buf[64 * 8192];
	struct stor_ds *ds;
	uint64_t used0, used1, used2;
	int ret;

	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used0 = tpool_used(&tp);
	ds = tpool_ds(&tp, "tank/big", 1 << 20, 8192);
	tpat_random(buf, sizeof(buf), 7);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(stor_ds_flush(ds), 0);
	used1 = tpool_used(&tp);
	cr_assert_geq(used1, used0 + sizeof(buf));
	/* an open handle keeps it */
	ret = stor_ds_destroy(tp.pool, "tank/big", 0);
	cr_assert_eq(ret, -EBUSY, "destroy with open handle: %s", stor_strerror(ret));
	stor_ds_close(ds);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/big", 0), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	used2 = tpool_used(&tp);
	cr_assert_eq(used2, used0, "used %llu before, %llu with data, %llu after destroy+sync",
		     (unsigned long long)used0, (unsigned long long)used1,
		     (unsigned long long)used2);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/big", &ds), -ENOENT);
	/* the name is free again and the new dataset reads zeros */
	ds = tpool_ds(&tp, "tank/big", 1 << 20, 8192);
	memset(buf, 0xaa, 8192);
	cr_assert_eq(stor_ds_read(ds, 0, buf, 8192), 0);
	for (int i = 0; i < 8192; i++)
		cr_assert_eq(buf[i], 0, "old data visible in a new dataset of the same name");
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(tpool_used(&tp), used0);
}

Test(dataset, destroy_of_unknown_is_enoent)
{
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/nosuch", 0), -ENOENT);
}

Test(dataset, destroy_with_children_needs_recursive)
{
	struct stor_ds *ds;

	cr_assert_eq(create("tank/p"), 0);
	cr_assert_eq(create("tank/p/c"), 0);
	cr_assert_eq(create("tank/p/c/g"), 0);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/p", 0), -EBUSY);
	cr_assert_eq(stor_ds_destroy(tp.pool, "tank/p", STOR_RECURSIVE), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/p/c/g", &ds), -ENOENT);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/p", &ds), -ENOENT);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/p/c", &ds), -ENOENT);
}

static struct stor_prop_value get(const char *name, const char *prop)
{
	struct stor_prop_value v;
	int ret;

	memset(&v, 0, sizeof(v));
	ret = stor_ds_get(tp.pool, name, prop, &v);
	cr_assert_eq(ret, 0, "get %s %s: %s", name, prop, stor_strerror(ret));
	cr_assert_str_eq(v.name, prop);
	return v;
}

/* @prop of @name is @value, from @source (-1: unchecked), inherited from @from (NULL: unchecked). */
static void assert_prop(const char *name, const char *prop, const char *value, int source,
			const char *from)
{
	struct stor_prop_value v = get(name, prop);

	cr_assert_str_eq(v.value, value, "%s %s", name, prop);
	if (source >= 0)
		cr_assert_eq(v.source, source, "%s %s", name, prop);
	if (from)
		cr_assert_str_eq(v.inherited_from, from, "%s %s", name, prop);
}

Test(dataset, properties_are_inherited_overridden_and_reverted)
{
	struct stor_prop_value v;

	cr_assert_eq(create("tank/a"), 0);
	cr_assert_eq(create("tank/a/b"), 0);
	cr_assert_eq(create("tank/a/b/c"), 0);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/a", "compression", "zstd"), 0);

	assert_prop("tank/a", "compression", "zstd", STOR_SRC_LOCAL, NULL);
	assert_prop("tank/a/b", "compression", "zstd", STOR_SRC_INHERITED, "tank/a");
	assert_prop("tank/a/b/c", "compression", "zstd", STOR_SRC_INHERITED, "tank/a");

	cr_assert_eq(stor_ds_set(tp.pool, "tank/a/b", "compression", "off"), 0);
	assert_prop("tank/a/b", "compression", "off", STOR_SRC_LOCAL, NULL);
	assert_prop("tank/a/b/c", "compression", "off", -1, "tank/a/b");

	/* properties survive close/open */
	tpool_reopen(&tp);
	assert_prop("tank/a/b", "compression", "off", STOR_SRC_LOCAL, NULL);

	cr_assert_eq(stor_ds_inherit(tp.pool, "tank/a/b", "compression"), 0);
	assert_prop("tank/a/b", "compression", "zstd", STOR_SRC_INHERITED, "tank/a");

	cr_assert_eq(stor_ds_inherit(tp.pool, "tank/a", "compression"), 0);
	v = get("tank/a/b/c", "compression");
	cr_assert_neq(v.source, STOR_SRC_LOCAL);
	cr_assert_str_neq(v.inherited_from, "tank/a");
}

Test(dataset, create_time_props_are_local)
{
	const char *props[] = { "compression=zstd-3", "primarycache=metadata" };
	struct stor_ds_opts o = { .props = props, .nprops = 2 };
	struct stor_prop_value v;

	cr_assert_eq(stor_ds_create(tp.pool, "tank/p", &o, NULL), 0);
	assert_prop("tank/p", "compression", "zstd-3", STOR_SRC_LOCAL, NULL);
	v = get("tank/p", "primarycache");
	cr_assert_str_eq(v.value, "metadata");
	cr_assert_eq(create("tank/p/q"), 0);
	assert_prop("tank/p/q", "primarycache", "metadata", STOR_SRC_INHERITED, NULL);
}

Test(dataset, bad_create_props_are_ebadprop)
{
	const char *p1[] = { "compression=lz77" };
	const char *p2[] = { "nosuchprop=1" };
	const char *p3[] = { "compression" };
	struct stor_ds_opts o = { .nprops = 1 };
	int ret;

	o.props = p1;
	cr_expect_eq(ret = stor_ds_create(tp.pool, "tank/a", &o, NULL), STOR_EBADPROP, "%s",
		     stor_strerror(ret));
	o.props = p2;
	cr_expect_eq(ret = stor_ds_create(tp.pool, "tank/a", &o, NULL), STOR_EBADPROP, "%s",
		     stor_strerror(ret));
	o.props = p3;
	cr_expect_eq(ret = stor_ds_create(tp.pool, "tank/a", &o, NULL), STOR_EBADPROP, "%s",
		     stor_strerror(ret));
	cr_assert_eq(stor_ds_open(tp.pool, "tank/a", &(struct stor_ds *){ NULL }), -ENOENT,
		     "a refused create left a dataset");
}

Test(dataset, recordsize_is_fixed_at_creation)
{
	struct stor_ds_opts o = { .recordsize = 65536 };
	struct stor_prop_value v;
	int ret;

	cr_assert_eq(stor_ds_create(tp.pool, "tank/r", &o, NULL), 0);
	ret = stor_ds_set(tp.pool, "tank/r", "recordsize", "8192");
	cr_assert_eq(ret, STOR_EREADONLY, "got %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, "tank/r", "guid", "1");
	cr_assert_eq(ret, STOR_EREADONLY, "guid: got %s", stor_strerror(ret));
	v = get("tank/r", "recordsize");
	cr_assert(strcmp(v.value, "65536") == 0 || strcmp(v.value, "64K") == 0, "recordsize '%s'",
		  v.value);
}

Test(dataset, volsize_grows_but_never_shrinks)
{
	struct stor_ds_opts o = { .volsize = 1 << 20, .recordsize = 8192 };
	struct stor_ds *ds = NULL;
	unsigned char b = 0x42;
	int ret;

	cr_assert_eq(stor_ds_create(tp.pool, "tank/v", &o, &ds), 0);
	/* like zfs set volsize: shrinking would drop data */
	ret = stor_ds_set(tp.pool, "tank/v", "volsize", "8192");
	cr_assert_eq(ret, -EINVAL, "shrink: got %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, "tank/v", "volsize", "1000000000");
	cr_assert_eq(ret, -EINVAL, "not a record multiple: got %s", stor_strerror(ret));
	cr_assert_eq(stor_ds_write(ds, (1 << 20) + 1, &b, 1), STOR_ERANGE);
	ret = stor_ds_set(tp.pool, "tank/v", "volsize", "2097152");
	cr_assert_eq(ret, 0, "grow: got %s", stor_strerror(ret));
	cr_assert_eq(stor_ds_volsize(ds), 2 << 20, "open handle does not see the new size");
	cr_assert_eq(stor_ds_write(ds, (1 << 20) + 1, &b, 1), 0);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	cr_assert_eq(stor_ds_volsize(ds), 2 << 20);
	b = 0;
	cr_assert_eq(stor_ds_read(ds, (1 << 20) + 1, &b, 1), 0);
	cr_assert_eq(b, 0x42);
	stor_ds_close(ds);
}

Test(dataset, invalid_recordsize_is_einval)
{
	static const uint32_t bad[] = { 1000, 256, 511, 3 << 12, 2u << 20, STOR_RECSIZE_MAX + 512 };
	static const uint32_t good[] = { 512, 1024, 4096, 131072, 1u << 20 };
	char name[32];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct stor_ds_opts o = { .recordsize = bad[i] };
		int ret = stor_ds_create(tp.pool, "tank/bad", &o, NULL);

		cr_expect_eq(ret, -EINVAL, "recordsize %u: got %s", bad[i], stor_strerror(ret));
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct stor_ds_opts o = { .recordsize = good[i] };
		int ret;

		snprintf(name, sizeof(name), "tank/good%zu", i);
		ret = stor_ds_create(tp.pool, name, &o, NULL);
		cr_expect_eq(ret, 0, "recordsize %u: got %s", good[i], stor_strerror(ret));
	}
}

Test(dataset, volsize_not_a_multiple_of_recordsize_is_einval)
{
	struct stor_ds_opts o = { .volsize = 8192 * 3 + 1, .recordsize = 8192 };
	int ret = stor_ds_create(tp.pool, "tank/v", &o, NULL);

	/* ZFS refuses a volsize that is not a multiple of volblocksize */
	cr_expect_eq(ret, -EINVAL, "got %s", stor_strerror(ret));
}

Test(dataset, unknown_property_is_ebadprop)
{
	struct stor_prop_value v;
	int ret;

	cr_assert_eq(create("tank/a"), 0);
	ret = stor_ds_set(tp.pool, "tank/a", "nosuchprop", "1");
	cr_assert_eq(ret, STOR_EBADPROP, "set: %s", stor_strerror(ret));
	ret = stor_ds_get(tp.pool, "tank/a", "nosuchprop", &v);
	cr_assert_eq(ret, STOR_EBADPROP, "get: %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, "tank/a", "compression", "lz77");
	cr_assert_eq(ret, STOR_EBADPROP, "bad value: %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, "tank/a", "sync", "sometimes");
	cr_assert_eq(ret, STOR_EBADPROP, "bad sync value: %s", stor_strerror(ret));
	ret = stor_ds_set(tp.pool, "tank/nosuch", "compression", "off");
	cr_assert_eq(ret, -ENOENT, "set on missing dataset: %s", stor_strerror(ret));
	ret = stor_ds_get(tp.pool, "tank/nosuch", "compression", &v);
	cr_assert_eq(ret, -ENOENT, "get on missing dataset: %s", stor_strerror(ret));
}

struct seen {
	int compression, recordsize, guid, n;
};

static int count_props(const struct stor_prop_value *v, void *ctx)
{
	struct seen *s = ctx;

	s->n++;
	s->compression += !strcmp(v->name, "compression");
	s->recordsize += !strcmp(v->name, "recordsize");
	s->guid += !strcmp(v->name, "guid");
	return 0;
}

Test(dataset, get_all_lists_every_property_once)
{
	struct seen s = { 0 };

	cr_assert_eq(create("tank/a"), 0);
	cr_assert_eq(stor_ds_get_all(tp.pool, "tank/a", count_props, &s), 0);
	cr_assert_eq(s.compression, 1);
	cr_assert_eq(s.recordsize, 1);
	cr_assert_eq(s.guid, 1);
	cr_assert_geq(s.n, 8);
}

/* ---- administration from several threads while I/O runs ---- */

struct admin_arg {
	int id;
	int errors;
	char msg[200];
	struct stor_ds *ds; /* for the I/O thread */
	atomic_int *stop;
};

static void *admin_thread(void *p)
{
	struct admin_arg *a = p;
	char name[64];

	for (int i = 0; i < 150 && !a->errors; i++) {
		int ret;

		snprintf(name, sizeof(name), "tank/t%d-%03d", a->id, i);
		ret = stor_ds_create(tp.pool, name, NULL, NULL);
		if (ret == 0 && i % 3 == 0)
			ret = stor_ds_set(tp.pool, name, "compression", "zstd");
		if (ret == 0 && i % 2 == 0) /* destroy every other one again */
			ret = stor_ds_destroy(tp.pool, name, 0);
		if (ret) {
			a->errors++;
			snprintf(a->msg, sizeof(a->msg), "%s: %s", name, stor_strerror(ret));
		}
	}
	return NULL;
}

static void *io_thread(void *p)
{
	struct admin_arg *a = p;
	unsigned char buf[8192];
	uint64_t gen = 0;

	while (!atomic_load(a->stop) && !a->errors) {
		unsigned r = (unsigned)(gen % 32);
		int ret;

		gen++;
		tpat_fill(buf, sizeof(buf), r, gen);
		ret = stor_ds_write(a->ds, r * 8192ull, buf, sizeof(buf));
		if (ret == 0)
			ret = stor_ds_read(a->ds, r * 8192ull, buf, sizeof(buf));
		if (ret == 0 && tpat_check(buf, sizeof(buf), r) != (int64_t)gen)
			ret = -EIO;
		if (ret == 0 && gen % 50 == 0)
			ret = stor_pool_sync(tp.pool);
		if (ret) {
			a->errors++;
			snprintf(a->msg, sizeof(a->msg), "io gen %llu: %s", (unsigned long long)gen,
				 stor_strerror(ret));
		}
	}
	return NULL;
}

Test(dataset, create_destroy_from_threads_while_io_runs)
{
	struct admin_arg args[3] = { { .id = 0 }, { .id = 1 }, { .id = 2 } };
	atomic_int stop = 0;
	pthread_t th[3];
	struct names nm = { 0 };
	struct stor_ds *ds = tpool_ds(&tp, "tank/io", 1 << 20, 8192);

	args[2].ds = ds;
	args[2].stop = &stop;
	cr_assert_eq(pthread_create(&th[0], NULL, admin_thread, &args[0]), 0);
	cr_assert_eq(pthread_create(&th[1], NULL, admin_thread, &args[1]), 0);
	cr_assert_eq(pthread_create(&th[2], NULL, io_thread, &args[2]), 0);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	atomic_store(&stop, 1);
	pthread_join(th[2], NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(args[i].errors, 0, "thread %d: %s", i, args[i].msg);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_list(tp.pool, collect, &nm), 0);
	/* tank/io and 75 survivors per admin thread */
	cr_assert_eq(nm.n, 1 + 2 * 75, "listed %zu", nm.n);
	names_free(&nm);
}

Test(dataset, properties_set_on_the_pool_root_are_inherited)
{
	int ret;

	cr_assert_eq(create("tank/a"), 0);
	ret = stor_ds_set(tp.pool, "tank", "primarycache", "none");
	cr_assert_eq(ret, 0, "set on the root: %s", stor_strerror(ret));
	assert_prop("tank/a", "primarycache", "none", STOR_SRC_INHERITED, "tank");
	assert_prop("tank/a", "sync", "standard", STOR_SRC_DEFAULT, NULL);
}
