// SPDX-License-Identifier: MIT
/*
 * E2E: space through the daemon and coffer. Thick volumes are the default
 * and a pool refuses one it cannot guarantee, with a text that says what
 * to do; -s makes a sparse one. A thick volume keeps its room while a
 * sparse neighbour fills the pool. On a pool filled to "out of space" by
 * ordinary writes, overwrites, flush, destroy and export still succeed.
 * `get` and `list` report the space as zfs does. Thick volumes take every
 * write while the metadata log grows, round after round of destroys.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"
#include "store.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(space, .init = setup, .fini = teardown, .timeout = 240);

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

#define REC 8192u
#define CHUNK (16 * REC)

static struct coffer_conn *open_ds(const char *name, int *h)
{
	struct coffer_conn *c = NULL;

	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	*h = coffer_ds_open(c, name, NULL, NULL);
	cr_assert_geq(*h, 0, "open %s: %d\n%s", name, *h, tdaemon_log(&td));
	return c;
}

/* Write CHUNKs of @gen from @off until one fails or @end; @return that status. */
static int fill(struct coffer_conn *c, int h, uint64_t *off, uint64_t end, int gen)
{
	static uint8_t buf[CHUNK];
	int ret = 0;

	while (ret == 0 && *off + CHUNK <= end) {
		memset(buf, gen, sizeof(buf));
		buf[0] = (uint8_t)(*off / CHUNK);
		ret = coffer_write(c, h, *off, buf, CHUNK);
		if (ret == 0)
			*off += CHUNK;
	}
	return ret;
}

Test(space, thick_by_default_sparse_with_s_and_the_neighbour_cannot_eat_the_reservation)
{
	struct coffer_conn *c, *t;
	uint64_t off = 0, avail;
	int h, ht, ret;

	/* 8 MiB of data space (each LUN's first MiB holds its label), slop 2 MiB */
	COF_OK("pool create -s 5M tank %s/l0 %s/l1", td.dir, td.dir);
	cr_assert_eq(cof("create -V 10G tank/big"), 1, "%s", out);
	cr_assert(strstr(out, "not enough space: ") && strstr(out, "10.7G needed") &&
			  strstr(out, "use -s for a sparse volume"),
		  "%s", out);
	cr_assert_neq(cof("get volsize tank/big"), 0, "refused: not made");
	COF_OK("create -s -V 10G tank/big");
	COF_OK("create -V 2M tank/thick");
	COF_OK("get -H -p refreservation tank/thick tank/big");
	/* 2 MiB of data and 152 KiB of metadata: 256 block pointers of 100
	 * bytes and a MAC row of 40, in 3 copies of a checkpoint and a log */
	cr_assert(strstr(out, "tank/thick\trefreservation\t2252800\tlocal") &&
			  strstr(out, "tank/big\trefreservation\tnone\tlocal"),
		  "%s", out);
	/* growing the thick one past what the pool has is refused; the sparse one grows */
	cr_assert_eq(cof("set volsize=64M tank/thick"), 1, "%s", out);
	cr_assert(strstr(out, "not enough space"), "%s", out);
	COF_OK("set volsize=20G tank/big");

	COF_OK("get -H -p available tank/big");
	/* NAME\tPROPERTY\tVALUE\tSOURCE */
	avail = strtoull(strchr(strchr(out, '\t') + 1, '\t') + 1, NULL, 10);
	cr_assert(avail > 0 && avail <= 4u << 20, "available %s", out);
	c = open_ds("tank/big", &h);
	ret = fill(c, h, &off, 20ull << 30, 1);
	cr_assert_eq(ret, STOR_ENOSPC, "the sparse one: %s", proto_strerror(ret));
	/* what it was told it has (8 MiB less slop, the metadata reserve and the
	 * thick one's 2 MiB), in whole chunks */
	cr_assert(off > avail - 2 * CHUNK && off <= avail, "the sparse one wrote %llu of %llu",
		  (unsigned long long)off, (unsigned long long)avail);
	t = open_ds("tank/thick", &ht);
	off = 0;
	ret = fill(t, ht, &off, 2u << 20, 2);
	cr_assert_eq(ret, 0, "the thick one at %llu: %s", (unsigned long long)off,
		     proto_strerror(ret));
	cr_assert_eq(off, 2u << 20);
	cr_assert_eq(coffer_ds_flush(t, ht), 0);
	coffer_close(t);
	coffer_close(c);
}

Test(space, a_full_pool_overwrites_flushes_destroys_and_exports)
{
	struct coffer_conn *c;
	uint64_t off = 0, full, o2;
	int h, ret;

	COF_OK("pool create -s 2M tank %s/l0 %s/l1", td.dir, td.dir); /* 2 MiB of data, slop 1 MiB */
	COF_OK("create -s -V 64M tank/a");
	COF_OK("create -s -V 64M tank/b");
	c = open_ds("tank/a", &h);
	ret = fill(c, h, &off, 64u << 20, 1);
	cr_assert_eq(ret, STOR_ENOSPC, "%s", proto_strerror(ret));
	full = off;
	cr_assert_gt(full, 0);
	for (int gen = 2; gen <= 4; gen++) {
		o2 = 0;
		ret = fill(c, h, &o2, full, gen);
		cr_assert_eq(ret, 0, "overwrite pass %d at %llu: %s", gen, (unsigned long long)o2,
			     proto_strerror(ret));
	}
	cr_assert_eq(coffer_ds_flush(c, h), 0, "flush of a full pool");
	o2 = full;
	cr_assert_eq(fill(c, h, &o2, full + CHUNK, 5), STOR_ENOSPC, "new data is still refused");
	coffer_close(c);
	COF_OK("destroy tank/b");
	COF_OK("pool export tank");
	COF_OK("pool import tank");
	c = open_ds("tank/a", &h);
	{
		static uint8_t buf[CHUNK];
		cr_assert_eq(coffer_read(c, h, full - CHUNK, buf, CHUNK), 0);
		cr_assert_eq(buf[1], 4, "the last overwrite is what reads back");
	}
	coffer_close(c);
}

/*
 * The daemon again with no timer commit in the way: what frees space
 * waits for a commit that only a writer short of space can ask for.
 */
static void restart_with_long_txgs(void)
{
	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nlog_level = debug\nlog_target = stderr\n"
			   "workers = 2\ntxg_timeout = 300\n");
	tdaemon_start_ok(&td);
}

/* A file of @len bytes of rand(), read back into @data (@len bytes). */
static const char *random_file(const char *name, uint8_t *data, size_t len)
{
	static char path[4096];
	FILE *f;

	tdaemon_random_file(&td, name, len, path, sizeof(path));
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_eq(fread(data, 1, len, f), len);
	fclose(f);
	return path;
}

/*
 * A pool filled with incompressible data, committed: its metadata log on
 * the LUNs grew with the fill, and must not have eaten the slop. Then 8 MiB
 * of its records are overwritten by `coffer write` (16 requests of 128 KiB
 * in flight), three times over: every overwrite succeeds, waiting for the
 * commits that free the extents it replaces; a write of a record never
 * written is still refused, clearly, and nothing stored is lost.
 */
Test(space, a_full_pool_after_its_commit_takes_every_overwrite_and_refuses_new_data)
{
	static uint8_t want[8u << 20], buf[CHUNK];
	struct coffer_conn *c;
	const char *src;
	uint64_t off = 0, full;
	int h, ret = 0;

	restart_with_long_txgs();
	COF_OK("pool create -s 24M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK("create -s -V 64M tank/a");
	c = open_ds("tank/a", &h);
	while (ret == 0) {
		for (size_t i = 0; i < CHUNK; i++)
			buf[i] = (uint8_t)(rand() >> 7);
		ret = coffer_write(c, h, off, buf, CHUNK);
		if (ret == 0)
			off += CHUNK;
	}
	cr_assert_eq(ret, STOR_ENOSPC, "the fill: %s", proto_strerror(ret));
	full = off;
	cr_assert_gt(full, 16u << 20, "filled only %llu", (unsigned long long)full);
	cr_assert_eq(coffer_ds_flush(c, h), 0, "the fill's commit");
	for (int pass = 0; pass < 3; pass++) {
		char name[32];

		snprintf(name, sizeof(name), "over%d", pass);
		src = random_file(name, want, sizeof(want));
		cr_assert_eq(tdaemon_cofferf(&td, src, out, sizeof(out), "write tank/a"), 0,
			     "overwrite pass %d: %s\n%s", pass, out, tdaemon_log(&td));
	}
	for (uint64_t o = 0; o < sizeof(want); o += CHUNK) {
		cr_assert_eq(coffer_read(c, h, o, buf, CHUNK), 0);
		cr_assert(memcmp(buf, want + o, CHUNK) == 0, "the last pass at %llu",
			  (unsigned long long)o);
	}
	/* new data takes the last records the fill's chunks left and what the
	 * log gave back since (no more than the slop), then is refused, and
	 * says so */
	off = full;
	while ((ret = coffer_write(c, h, off, buf, REC)) == 0)
		off += REC;
	cr_assert_eq(ret, STOR_ENOSPC, "new data: %s", proto_strerror(ret));
	cr_assert_lt(off - full, 2u << 20, "new data took %llu of the slop",
		     (unsigned long long)(off - full));
	full = off;
	src = random_file("new", want, REC);
	cr_assert_eq(tdaemon_cofferf(&td, src, out, sizeof(out), "write -o %llu tank/a",
				     (unsigned long long)full),
		     1, "%s", out);
	cr_assert(strstr(out, "pool is out of space"), "%s", out);
	cr_assert_eq(coffer_read(c, h, full, buf, REC), 0);
	for (size_t i = 0; i < REC; i++)
		cr_assert_eq(buf[i], 0, "the refused write left nothing");
	coffer_close(c);
}

Test(space, get_and_list_report_used_avail_refer)
{
	json_t *j, *p, *v;
	const char *k;
	uint64_t used = 0, refres = 0, rr = 0, refer = 0;

	COF_OK("pool create -s 4M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK("create -V 1M tank/t");
	COF_OK("list");
	cr_assert(strstr(out, "NAME") && strstr(out, "USED") && strstr(out, "AVAIL") &&
			  strstr(out, "REFER"),
		  "%s", out);
	j = tdaemon_coffer_json(&td, "-j get -p all tank/t");
	p = json_object_get(json_object_get(json_object_get(j, "datasets"), "tank/t"),
			    "properties");
	json_object_foreach(p, k, v) {
		uint64_t n = strtoull(json_string_value(json_object_get(v, "value")), NULL, 10);

		if (!strcmp(k, "used"))
			used = n;
		else if (!strcmp(k, "refreservation"))
			refres = n;
		else if (!strcmp(k, "usedbyrefreservation"))
			rr = n;
		else if (!strcmp(k, "referenced"))
			refer = n;
	}
	json_decref(j);
	cr_assert_eq(refres, (1u << 20) + 77824, "1 MiB of data and its metadata");
	cr_assert_eq(rr, refres, "nothing written: all of it unused");
	cr_assert_eq(refer, 0);
	cr_assert_eq(used, refres, "used counts the unused refreservation");
}

/*
 * Thick volumes tank/rROUND/vN with @bs records, of @from bytes, then of
 * that over @step down to @to, until the pool refuses one; each one's size
 * into @size. @return how many.
 */
static int make_until_refused(int round, const char *bs, uint64_t from, uint64_t to,
			      uint64_t step, uint64_t size[128])
{
	int n = 0;

	COF_OK("create tank/r%d", round);
	for (uint64_t v = from; v >= to; v /= step)
		while (n < 128 && cof("create -V %llu -b %s tank/r%d/v%d", (unsigned long long)v,
				      bs, round, n) == 0)
			size[n++] = v;
	cr_assert(strstr(out, "not enough space"), "round %d: %s", round, out);
	cr_assert_gt(n, 8, "round %d made %d", round, n);
	return n;
}

/*
 * Every byte of the @n volumes of round @round, each flushed before the
 * next one's writes: a log record per volume, so the log grows after the
 * last promise. A refused write fails the test with the pool's space.
 */
static void write_every_byte(int round, int n, const uint64_t size[128])
{
	static uint8_t buf[CHUNK];
	char name[64];

	for (int v = 0; v < n; v++) {
		struct coffer_conn *c;
		int h, ret;

		snprintf(name, sizeof(name), "tank/r%d/v%d", round, v);
		c = open_ds(name, &h);
		for (uint64_t off = 0; off < size[v]; off += CHUNK) {
			memset(buf, round * 128 + v + 1, sizeof(buf));
			ret = coffer_write(c, h, off, buf, CHUNK);
			if (ret) {
				cof("pool list -p -o name,size,alloc,metadata_used,free");
				cr_assert_fail("round %d: %s of %d at %llu: %s\n%s", round, name, n,
					       (unsigned long long)off, proto_strerror(ret), out);
			}
		}
		cr_assert_eq(coffer_ds_flush(c, h), 0);
		coffer_close(c);
	}
}

/*
 * A thick volume is promised room for its data and for its block pointers
 * in the metadata log, so it takes every write however full the pool is
 * promised: volumes of 4 MiB, then of 256 KiB, are made until the pool
 * refuses one. Small records make the log large beside the data (a
 * tenth of it), and each round's volumes are made right after the last
 * round's destroy, while the log still holds the pointers of those.
 */
Test(space, thick_volumes_made_after_a_destroy_take_every_write)
{
	COF_OK("pool create -s 40M tank %s/l0 %s/l1 %s/l2", td.dir, td.dir, td.dir);
	for (int round = 0; round < 3; round++) {
		uint64_t size[128];
		int n = make_until_refused(round, "4k", 4u << 20, 256u << 10, 16, size);

		write_every_byte(round, n, size);
		COF_OK("destroy -r tank/r%d", round);
	}
}

/*
 * The pointers of destroyed volumes stay in the metadata log until a
 * checkpoint written after the destroy, so their metadata shares stay
 * promised until then, and a create that finds no room asks for that
 * checkpoint. Round 0's volumes have 4k records (shares a seventh of
 * their data), round 1's, made right after round 0's destroy, 128k records
 * (shares that cover little of the log): were round 0's shares let go at
 * the destroy, round 1 would be promised the room the log still holds and
 * its writes would find none; were the checkpoint not asked for, round 1
 * would be refused while round 0's shares, an eighth of the pool, are
 * still held for a log that no longer needs them.
 */
Test(space, thick_volumes_made_while_the_log_holds_a_destroy_take_every_write)
{
	static const char *const bs[] = { "4k", "128k" };
	unsigned long long pool_size;
	uint64_t promised = 0;

	/* on this pool round 0's last checkpoint is of its 13th volume: the log
	 * holds it and round 0's deletes through round 1, no checkpoint being
	 * due by size (a log as large as the checkpoint) before round 1 ends */
	COF_OK("pool create -s 30M tank %s/l0 %s/l1 %s/l2", td.dir, td.dir, td.dir);
	COF_OK("pool list -H -p -o size tank");
	cr_assert_eq(sscanf(out, "%llu", &pool_size), 1, "%s", out);
	for (int round = 0; round < 2; round++) {
		uint64_t size[128];
		/* 128 KiB volumes last, so that little is left unpromised */
		int n = make_until_refused(round, bs[round], 4u << 20, 128u << 10, 32, size);

		write_every_byte(round, n, size);
		for (int v = 0; round && v < n; v++)
			promised += size[v];
		if (round == 0)
			COF_OK("destroy -r tank/r0");
	}
	/* the slop (1/32) and the shares of 128k records leave less than 1/8 */
	cr_assert_geq(promised, pool_size / 8 * 7, "round 1 promised %llu of %llu",
		      (unsigned long long)promised, pool_size);
}
