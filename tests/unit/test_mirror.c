/* SPDX-License-Identifier: MIT */
/*
 * Mirror vdevs in the engine: the layout in labels and the pool record
 * (kept across an import), one vdev's space however many sides, every
 * extent on every side, a stripe pool's labels still version 4, sides of
 * different sizes refused, and self-healing reads: a copy damaged on one
 * side (or on two of three) reads back right and is rewritten; damaged on
 * every side, that record fails and no other. Scrub: it mends copies no
 * read touched, a second one finds nothing, it goes on after an import and
 * keeps a pause; on a stripe pool it counts what it cannot mend.
 * Degraded import: mirrors whose first sides' files are gone import (with
 * LMDB gone too, so the log comes from the other sides) and serve; a
 * mirror with no side left fails the import; a side whose label was not
 * the pool's stays out once it reads well again, because it missed writes.
 * Resilver: offline then online copies only what the side missed; replace
 * copies everything, and goes on after an import cut it short; attach makes
 * a LUN of its own a mirror, detach takes a side away, even the first, and
 * a side attached after that counts at every import and in a scan, which
 * tells the detached index from a missing one; the only side that holds
 * every write can be neither offlined, replaced nor detached; a side larger
 * than the first, detached or gone, leaves the pool importable.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "kv/format.h"

#define LUN_SIZE (16u << 20)
#define REC 8192u
#define NREC 64u

static struct tpool tp;

static void mirror_pool(unsigned nluns, const unsigned *sides, unsigned nvdevs)
{
	struct stor_pool_opts o = { .vdev_sides = sides, .nvdevs = nvdevs };

	tpool_init(&tp, nluns, LUN_SIZE, &o);
	tp.opts.vdev_sides = NULL; /* create only */
	tp.opts.nvdevs = 0;
}

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(mirror, .fini = teardown, .timeout = 240);

static void write_all(struct stor_ds *ds)
{
	uint8_t buf[REC];

	for (uint64_t r = 0; r < NREC; r++) {
		tpat_fill(buf, sizeof(buf), r, 7);
		cr_assert_eq(stor_ds_write(ds, r * REC, buf, sizeof(buf)), 0);
	}
	cr_assert_eq(stor_ds_flush(ds), 0);
}

/* Every record reads back as written; the count of those that do not. */
static unsigned read_all(struct stor_ds *ds, uint64_t skip)
{
	uint8_t buf[REC];
	unsigned bad = 0;

	for (uint64_t r = 0; r < NREC; r++) {
		int ret = stor_ds_read(ds, r * REC, buf, sizeof(buf));

		if (r == skip) {
			bad += ret < 0;
			continue;
		}
		cr_assert_eq(ret, 0, "record %llu: %s", (unsigned long long)r, stor_strerror(ret));
		cr_assert_eq(tpat_check(buf, sizeof(buf), r), 7, "record %llu",
			     (unsigned long long)r);
	}
	return bad;
}

/* Overwrite @len bytes at @off of LUN file @lun with junk. */
static void junk(unsigned lun, uint64_t off, size_t len)
{
	uint8_t *b = malloc(len);
	int fd = open(tp.lun[lun], O_WRONLY);

	cr_assert(b && fd >= 0);
	tpat_random(b, len, off ^ lun);
	cr_assert_eq(pwrite(fd, b, len, (off_t)off), (ssize_t)len);
	close(fd);
	free(b);
}

/* Where @len bytes of @pat first are in LUN file @lun, or -1. */
static int64_t first_at(unsigned lun, const void *pat, size_t len)
{
	int fd = open(tp.lun[lun], O_RDONLY);
	off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
	const uint8_t *hit;
	int64_t at = -1;

	cr_assert(buf && pread(fd, buf, (size_t)size, 0) == size);
	close(fd);
	hit = memmem(buf, (size_t)size, pat, len);
	if (hit)
		at = hit - buf;
	free(buf);
	return at;
}

/* The file offset of record @r on every side (the same: one sector). */
static uint64_t where(uint64_t r, unsigned nsides)
{
	uint8_t word[8 * 4];
	int64_t at = -1;

	tpat_fill(word, sizeof(word), r, 7);
	for (unsigned i = 0; i < nsides; i++) {
		int64_t x = first_at(i, word, sizeof(word));

		cr_assert_geq(x, 0, "record %llu is on side %u", (unsigned long long)r, i);
		cr_assert(i == 0 || x == at, "record %llu: one place on every side",
			  (unsigned long long)r);
		at = x;
	}
	return (uint64_t)at;
}

static uint32_t label_version(unsigned lun)
{
	uint8_t b[12];
	const uint8_t *p = b + 8;
	int fd = open(tp.lun[lun], O_RDONLY);

	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, b, sizeof(b), 0), (ssize_t)sizeof(b));
	close(fd);
	return get_u32(&p);
}

Test(mirror, one_vdev_of_two_sides_holds_every_record_on_both)
{
	static const unsigned sides[] = { 2 };
	struct stor_pool_stat st;
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	for (uint64_t r = 0; r < NREC; r += 9)
		where(r, 2);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_lt(st.size, LUN_SIZE, "a mirror's space is one side's, not the sum");
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_eq(ls.vdev, 0);
	cr_assert_eq(ls.sides, 2);
	cr_assert_eq(ls.side, 1);
	cr_assert_eq(label_version(0), LABEL_VERSION_MIRROR);
	cr_assert_eq(label_version(1), LABEL_VERSION_MIRROR);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_eq(ls.vdev, 0, "the layout survives an import");
	cr_assert_eq(ls.sides, 2);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	read_all(ds, UINT64_MAX);
	stor_ds_close(ds);
}

/* Sum of a histogram of stor_lun_iostat. */
static uint64_t hist_sum(const uint64_t *h)
{
	uint64_t n = 0;

	for (unsigned b = 0; b < STOR_LUN_HIST_BUCKETS; b++)
		n += h[b];
	return n;
}

Test(mirror, each_side_counts_the_writes_it_took_and_the_reads_it_served)
{
	static const unsigned sides[] = { 2 };
	struct stor_lun_iostat a, b;
	struct stor_ds *ds;
	uint64_t reads;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 0, &a), 0);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 1, &b), 0);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 2, &b), -ENOENT);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 1, &b), 0);
	/* every write reaches both sides: the same extents, the same bytes */
	cr_assert_geq(a.bytes[1], (uint64_t)NREC * REC);
	cr_assert_eq(a.bytes[1], b.bytes[1]);
	cr_assert_eq(a.ops[1], b.ops[1]);
	for (int w = 0; w < 2; w++) {
		cr_assert_eq(hist_sum(a.hist[w]), a.ops[w], "every extent has its wait");
		cr_assert_eq(hist_sum(a.disk_hist[w]), a.ops[w]);
		cr_assert_eq(a.inflight[w], 0, "nothing in flight once the calls returned");
		cr_assert_leq(a.disk_ns[w], a.wait_ns[w], "the disk alone waits no longer");
	}
	cr_assert_gt(a.wait_ns[1], 0);
	cr_assert_leq(a.since_ns, a.now_ns);
	reads = a.ops[0] + b.ops[0];
	read_all(ds, UINT64_MAX);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 0, &a), 0);
	cr_assert_eq(stor_pool_lun_iostat(tp.pool, 1, &b), 0);
	/* each record read from one side or the other (no data cache here) */
	cr_assert_geq(a.ops[0] + b.ops[0] - reads, NREC);
	stor_ds_close(ds);
}

Test(mirror, a_stripe_pool_keeps_version_4_labels)
{
	struct stor_lun_stat ls;

	tpool_init(&tp, 2, LUN_SIZE, NULL);
	cr_assert_eq(label_version(0), FORMAT_VERSION);
	cr_assert_eq(label_version(1), FORMAT_VERSION);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls), 0);
	cr_assert_eq(ls.vdev, 1);
	cr_assert_eq(ls.sides, 1);
}

Test(mirror, sides_of_different_sizes_are_refused)
{
	static const unsigned sides[] = { 2 };
	struct stor_pool_opts o = { .lun_size = LUN_SIZE };
	struct stor_pool *p = NULL;
	char big[PATH_MAX];
	const char *v[2];
	int ret;

	tpool_init(&tp, 1, LUN_SIZE, NULL);
	snprintf(big, sizeof(big), "%s/big", tp.dir);
	{
		int fd = open(big, O_CREAT | O_WRONLY, 0600);
		cr_assert(fd >= 0);
		cr_assert_eq(ftruncate(fd, 2 * LUN_SIZE), 0);
		close(fd);
	}
	o.state_dir = tp.state;
	o.vdev_sides = sides;
	o.nvdevs = 1;
	v[0] = big;
	{
		char small[PATH_MAX];

		snprintf(small, sizeof(small), "%s/small", tp.dir);
		v[1] = small;
		ret = stor_pool_create("odd", v, 2, &o, &p);
	}
	cr_assert_eq(ret, -EINVAL, "got %s", stor_strerror(ret));
	cr_assert(strstr(stor_pool_last_error(), "of one size"), "%s", stor_pool_last_error());
	cr_assert_null(p);
	o.vdev_sides = (const unsigned[]){ 4 };
	ret = stor_pool_create("odd", v, 2, &o, &p);
	cr_assert_eq(ret, -EINVAL, "a mirror of more sides than LUNs given");
}

Test(mirror, junk_on_one_side_reads_back_and_is_rewritten)
{
	static const unsigned sides[] = { 2 };
	struct stor_lun_stat ls[2];
	struct stor_ds *ds;
	uint8_t word[32];

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	for (uint64_t r = 0; r < NREC; r += 3)
		junk(r % 2, where(r, 2), REC);
	/* twice: the second round reads the repaired copies */
	for (int round = 0; round < 2; round++)
		cr_assert_eq(read_all(ds, UINT64_MAX), 0);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls[0]), 0);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 1, &ls[1]), 0);
	cr_assert_eq(ls[0].repaired + ls[1].repaired, (NREC + 2) / 3, "%llu + %llu repaired",
		     (unsigned long long)ls[0].repaired, (unsigned long long)ls[1].repaired);
	cr_assert_eq(ls[0].repaired, ls[0].cksum_errors);
	cr_assert_eq(ls[1].repaired, ls[1].cksum_errors);
	cr_assert(!ls[0].faulted && !ls[1].faulted, "checksum errors leave a side in service");
	/* the bad copies hold the record again */
	tpat_fill(word, sizeof(word), 0, 7);
	cr_assert_eq(first_at(0, word, sizeof(word)), first_at(1, word, sizeof(word)));
	stor_ds_close(ds);
}

Test(mirror, encrypted_records_heal_through_the_keyless_checksum)
{
	static const unsigned sides[] = { 2 };
	struct stor_lun_stat ls;
	static const char *const props[] = { "encryption=aes-256-ccm", "keyformat=raw" };
	uint8_t key[32];
	struct stor_key_material km = { key, sizeof(key) };
	struct stor_ds_opts o = { .volsize = NREC * REC, .recordsize = REC, .props = props,
				  .nprops = 2, .key = &km };
	struct stor_ds *ds;

	tpat_random(key, sizeof(key), 99);
	mirror_pool(2, sides, 1);
	ds = tpool_ds_opts(&tp, "tank/e", &o);
	write_all(ds);
	/* ciphertext: find each record by its place in the data area instead */
	for (uint64_t s = 0; s < 2 * NREC; s += 5)
		junk(s % 2, LUN_DATA_OFF + s * STOR_SECTOR, STOR_SECTOR);
	cr_assert_eq(read_all(ds, UINT64_MAX), 0);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 0, &ls), 0);
	cr_assert_gt(ls.repaired, 0);
	stor_ds_close(ds);
}

Test(mirror, three_sides_two_damaged_at_different_places)
{
	static const unsigned sides[] = { 3 };
	struct stor_ds *ds;

	mirror_pool(3, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	for (uint64_t r = 0; r < NREC; r += 2) {
		uint64_t off = where(r, 3);

		junk(0, off, REC);
		if (r % 4 == 0)
			junk(1, off, REC); /* two sides of three at this record */
		else
			junk(2, off + 4096, 4096);
	}
	cr_assert_eq(read_all(ds, UINT64_MAX), 0);
	cr_assert_eq(read_all(ds, UINT64_MAX), 0);
	stor_ds_close(ds);
}

static struct stor_scrub_stat scrub_wait(void);

Test(mirror, every_side_damaged_fails_that_record_only)
{
	static const unsigned sides[] = { 2 };
	struct stor_ds *ds;
	uint64_t off;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	off = where(5, 2);
	junk(0, off, 64);
	junk(1, off + 100, 64);
	cr_assert_eq(read_all(ds, 5), 1, "record 5 reads an error, never wrong bytes");
	{
		uint8_t buf[REC];
		int ret = stor_ds_read(ds, 5 * REC, buf, sizeof(buf));

		cr_assert_eq(ret, STOR_ECKSUM, "got %s", stor_strerror(ret));
	}
	stor_ds_close(ds);
	/* the pool's list names that record, and keeps it across an import */
	for (int round = 0; round < 2; round++) {
		struct stor_pool_error e[4];
		uint64_t more;

		cr_assert_eq(stor_pool_errors(tp.pool, e, 4, &more), 1, "round %d", round);
		cr_assert_eq(more, 0);
		cr_assert_str_eq(e[0].dataset, "tank/v");
		cr_assert_eq(e[0].record, 5);
		cr_assert_eq(e[0].offset, 5 * REC);
		tpool_reopen(&tp);
	}
	/* a scrub that still finds the damage keeps it; once the record is
	 * written anew, a clean scrub empties the list */
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	cr_assert_eq(scrub_wait().errors, 1);
	{
		struct stor_pool_error e[4];
		uint64_t more;
		uint8_t buf[REC];

		cr_assert_eq(stor_pool_errors(tp.pool, e, 4, &more), 1);
		cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
		tpat_fill(buf, sizeof(buf), 5, 9);
		cr_assert_eq(stor_ds_write(ds, 5 * REC, buf, sizeof(buf)), 0);
		cr_assert_eq(stor_ds_flush(ds), 0);
		stor_ds_close(ds);
		cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
		cr_assert_eq(scrub_wait().errors, 0);
		cr_assert_eq(stor_pool_errors(tp.pool, e, 4, &more), 0, "a clean scrub clears it");
	}
}

Test(mirror, a_mirror_added_to_a_stripe_pool_takes_data)
{
	struct stor_pool_stat st0, st1;
	struct stor_lun_stat ls;
	struct stor_ds *ds;
	char a[PATH_MAX], b[PATH_MAX];
	const char *v[2] = { a, b };

	tpool_init(&tp, 1, LUN_SIZE, NULL);
	cr_assert_eq(stor_pool_stat(tp.pool, &st0), 0);
	snprintf(a, sizeof(a), "%s/ma", tp.dir);
	snprintf(b, sizeof(b), "%s/mb", tp.dir);
	cr_assert_eq(stor_pool_add_mirror(tp.pool, v, 2, LUN_SIZE, 0), 0, "%s",
		     stor_pool_last_error());
	cr_assert_eq(stor_pool_add_mirror(tp.pool, v, 1, LUN_SIZE, 0), -EINVAL);
	cr_assert_eq(stor_pool_stat(tp.pool, &st1), 0);
	cr_assert_eq(st1.size, 2 * st0.size, "one LUN's space more, not two");
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 2, &ls), 0);
	cr_assert_eq(ls.vdev, 1);
	cr_assert_eq(ls.sides, 2);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_lun_stat(tp.pool, 2, &ls), 0);
	cr_assert_eq(ls.vdev, 1);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	read_all(ds, UINT64_MAX);
	stor_ds_close(ds);
}

/* Wait (bounded, polling) until the scrub is no longer running. */
static struct stor_scrub_stat scrub_wait(void)
{
	struct stor_scrub_stat ss;
	double end = tnow() + 60;

	do {
		cr_assert_eq(stor_pool_scrub_stat(tp.pool, &ss), 0);
		if (ss.state != STOR_SCRUB_RUNNING)
			return ss;
		usleep(10000);
	} while (tnow() < end);
	cr_assert_fail("scrub still running after 60 s: %llu of %llu bytes",
		       (unsigned long long)ss.examined, (unsigned long long)ss.total);
	return ss;
}

Test(mirror, scrub_repairs_what_no_read_touched_and_a_second_finds_nothing)
{
	static const unsigned sides[] = { 2 };
	struct stor_scrub_stat ss;
	struct stor_ds *ds;
	uint64_t at[NREC];

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	for (uint64_t r = 0; r < NREC; r += 4) {
		at[r] = where(r, 2);
		junk(0, at[r], REC);
	}
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_PAUSE), -ENOENT);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.state, STOR_SCRUB_FINISHED);
	cr_assert_eq(ss.repaired, (NREC / 4) * REC, "repaired %llu",
		     (unsigned long long)ss.repaired);
	cr_assert_eq(ss.errors, 0);
	cr_assert_geq(ss.examined, NREC * REC);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.repaired, 0, "the second scrub finds nothing");
	cr_assert_eq(ss.errors, 0);
	/* side 0 holds every record again: side 1 may go bad at the same places */
	for (uint64_t r = 0; r < NREC; r += 4)
		junk(1, at[r], REC);
	cr_assert_eq(read_all(ds, UINT64_MAX), 0);
	/* both sides bad at one record: an error, counted, nothing rewritten */
	junk(0, at[4], 100);
	junk(1, at[4] + 200, 100);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.errors, 1);
	cr_assert_eq(read_all(ds, 4), 1);
	stor_ds_close(ds);
}

Test(mirror, scrub_goes_on_after_an_import_and_pauses_where_it_is)
{
	static const unsigned sides[] = { 2 };
	struct stor_scrub_stat ss;
	struct stor_ds *ds;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	stor_ds_close(ds);
	tp.opts.scrub_rate = 128u << 10; /* half the records a second */
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), -EBUSY);
	tpool_reopen(&tp);
	cr_assert_eq(stor_pool_scrub_stat(tp.pool, &ss), 0);
	cr_assert(ss.state == STOR_SCRUB_RUNNING || ss.state == STOR_SCRUB_FINISHED,
		  "running at the close: going on after the import (%d)", ss.state);
	if (ss.state == STOR_SCRUB_RUNNING) {
		cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_PAUSE), 0);
		tpool_reopen(&tp);
		cr_assert_eq(stor_pool_scrub_stat(tp.pool, &ss), 0);
		cr_assert_eq(ss.state, STOR_SCRUB_PAUSED, "a pause is kept too");
		cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	}
	ss = scrub_wait();
	cr_assert_eq(ss.state, STOR_SCRUB_FINISHED);
	cr_assert_geq(ss.examined, NREC * REC);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_STOP), -ENOENT);
}

Test(mirror, a_stripe_pool_scrub_counts_what_it_cannot_mend)
{
	struct stor_scrub_stat ss;
	struct stor_ds *ds;

	tpool_init(&tp, 2, LUN_SIZE, NULL);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_all(ds);
	{
		uint8_t word[32];
		int64_t at0, at1;

		tpat_fill(word, sizeof(word), 3, 7);
		at0 = first_at(0, word, sizeof(word));
		at1 = first_at(1, word, sizeof(word));
		cr_assert((at0 < 0) != (at1 < 0), "a stripe's record is on one LUN");
		junk(at0 < 0, (uint64_t)(at0 < 0 ? at1 : at0), 64);
	}
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.errors, 1);
	cr_assert_eq(ss.repaired, 0);
	cr_assert_eq(read_all(ds, 3), 1);
	stor_ds_close(ds);
}

/* write_all with generation @gen */
static void write_gen(struct stor_ds *ds, uint64_t gen)
{
	uint8_t buf[REC];

	for (uint64_t r = 0; r < NREC; r++) {
		tpat_fill(buf, sizeof(buf), r, gen);
		cr_assert_eq(stor_ds_write(ds, r * REC, buf, sizeof(buf)), 0);
	}
	cr_assert_eq(stor_ds_flush(ds), 0);
}

static void check_gen(struct stor_ds *ds, uint64_t gen)
{
	uint8_t buf[REC];

	for (uint64_t r = 0; r < NREC; r++) {
		int ret = stor_ds_read(ds, r * REC, buf, sizeof(buf));

		cr_assert_eq(ret, 0, "record %llu: %s", (unsigned long long)r, stor_strerror(ret));
		cr_assert_eq(tpat_check(buf, sizeof(buf), r), (int64_t)gen, "record %llu",
			     (unsigned long long)r);
	}
}

static void remove_lmdb(void)
{
	static const char *const ext[] = { ".mdb", ".mdb-lock" };
	char path[PATH_MAX + 64];

	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/pools/%s%s", tp.state, TPOOL_NAME, ext[i]);
		unlink(path);
	}
}

static struct stor_lun_stat lun_stat(unsigned i)
{
	struct stor_lun_stat ls;

	cr_assert_eq(stor_pool_lun_stat(tp.pool, i, &ls), 0);
	return ls;
}

Test(mirror, mirrors_whose_first_sides_are_gone_import_degraded_and_serve)
{
	static const unsigned sides[] = { 2, 2 };
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	mirror_pool(4, sides, 2);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_gen(ds, 7);
	stor_ds_close(ds);
	tpool_close(&tp);
	/* the first side of each mirror, and the cache: the log must come
	 * from the second sides, the only ones left */
	cr_assert_eq(unlink(tp.lun[0]), 0);
	cr_assert_eq(unlink(tp.lun[2]), 0);
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "degraded import: %s", stor_pool_last_error());
	for (unsigned i = 0; i < 4; i += 2) {
		ls = lun_stat(i);
		cr_assert(ls.faulted, "lun %u is out of service", i);
		cr_assert(strstr(ls.absent, tp.lun[i]) || ls.absent[0], "lun %u: says why", i);
		cr_assert_gt(ls.missing_since, 0, "lun %u: lacks writes from a txg on", i);
		cr_assert_str_eq(ls.path, tp.lun[i], "an absent side keeps its path");
		ls = lun_stat(i + 1);
		cr_assert(!ls.faulted && !ls.absent[0], "lun %u serves", i + 1);
	}
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_gen(ds, 7);
	write_gen(ds, 8);
	stor_ds_close(ds);
	tpool_reopen(&tp); /* degraded again, LMDB there this time */
	cr_assert(lun_stat(0).faulted && lun_stat(2).faulted);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_gen(ds, 8);
	stor_ds_close(ds);
	/* a mirror with no side left cannot serve: the import fails as before */
	tpool_close(&tp);
	cr_assert_eq(unlink(tp.lun[1]), 0);
	cr_assert_lt(tpool_open(&tp), 0);
	cr_assert(strstr(stor_pool_last_error(), "no side of the mirror of lun 0"), "%s",
		  stor_pool_last_error());
}

/*
 * A side whose file was truncated (the second of one mirror, the first of
 * the other): out of service and named "truncated", not a vdev it is not
 * in; the pool imports degraded and serves every record, with LMDB and
 * again without it (the log from the whole sides).
 */
Test(mirror, a_truncated_side_is_named_truncated_and_the_mirror_serves)
{
	static const unsigned sides[] = { 2, 2 };
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	mirror_pool(4, sides, 2);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_gen(ds, 7);
	stor_ds_close(ds);
	tpool_close(&tp);
	cr_assert_eq(truncate(tp.lun[1], (off_t)(1u << 20) + 65536), 0);
	cr_assert_eq(truncate(tp.lun[2], (off_t)(LUN_SIZE / 2)), 0);
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			remove_lmdb();
		cr_assert_eq(tpool_open(&tp), 0, "degraded import: %s", stor_pool_last_error());
		for (unsigned i = 1; i < 3; i++) {
			ls = lun_stat(i);
			cr_assert(ls.faulted, "lun %u is out of service", i);
			cr_assert(strstr(ls.absent, "truncated"), "lun %u: %s", i, ls.absent);
			cr_assert_null(strstr(ls.absent, "which the pool does not have"), "lun %u: %s",
				       i, ls.absent);
		}
		cr_assert(!lun_stat(0).faulted && !lun_stat(3).faulted);
		cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
		check_gen(ds, 7);
		stor_ds_close(ds);
		tpool_close(&tp);
	}
}

Test(mirror, a_side_whose_label_was_not_the_pools_stays_out_when_it_is_back)
{
	static const unsigned sides[] = { 2 };
	char saved[PATH_MAX + 8], cmd[3 * PATH_MAX];
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_gen(ds, 7);
	stor_ds_close(ds);
	tpool_close(&tp);
	snprintf(saved, sizeof(saved), "%s.old", tp.lun[1]);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", tp.lun[1], saved);
	cr_assert_eq(system(cmd), 0);
	/* both label copies of side 1 junk: not this pool's LUN any more */
	junk(1, 0, 4096);
	junk(1, LUN_SIZE - 4096, 4096);
	cr_assert_eq(tpool_open(&tp), 0, "degraded import: %s", stor_pool_last_error());
	ls = lun_stat(1);
	cr_assert(ls.faulted && ls.absent[0], "side 1 did not open");
	cr_assert(strstr(ls.absent, "label"), "and says why: %s", ls.absent);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	write_gen(ds, 8);
	stor_ds_close(ds);
	tpool_close(&tp);
	/* the old side is back whole and sound, but it lacks generation 8 */
	snprintf(cmd, sizeof(cmd), "mv '%s' '%s'", saved, tp.lun[1]);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	ls = lun_stat(1);
	cr_assert(!ls.absent[0], "it opened");
	cr_assert(ls.faulted, "but stays out of service: it missed writes");
	cr_assert_gt(ls.missing_since, 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_gen(ds, 8);
	check_gen(ds, 8); /* two passes: a side in service would have had its turn */
	stor_ds_close(ds);
	cr_assert_eq(lun_stat(1).cksum_errors + lun_stat(0).cksum_errors, 0,
		     "the stale side was never read");
	cr_assert_eq(lun_stat(1).repaired, 0);
}

/* Random records (seed @gen) over records [from, to) */
static void write_random(struct stor_ds *ds, uint64_t from, uint64_t to, uint64_t gen)
{
	uint8_t buf[REC];

	for (uint64_t r = from; r < to; r++) {
		tpat_random(buf, sizeof(buf), r * 1000 + gen);
		cr_assert_eq(stor_ds_write(ds, r * REC, buf, sizeof(buf)), 0);
	}
	cr_assert_eq(stor_ds_flush(ds), 0);
}

/* Every record r reads as generation gen(r). */
static void check_random(struct stor_ds *ds, uint64_t (*gen)(uint64_t))
{
	uint8_t buf[REC], want[REC];

	for (uint64_t r = 0; r < NREC; r++) {
		int ret = stor_ds_read(ds, r * REC, buf, sizeof(buf));

		cr_assert_eq(ret, 0, "record %llu: %s", (unsigned long long)r, stor_strerror(ret));
		tpat_random(want, sizeof(want), r * 1000 + gen(r));
		cr_assert(!memcmp(buf, want, REC), "record %llu", (unsigned long long)r);
	}
}

static uint64_t gen7(uint64_t r)
{
	(void)r;
	return 7;
}

static uint64_t first8_gen8(uint64_t r)
{
	return r < 8 ? 8 : 7;
}

/* Wait (bounded) for the resilver to end; it must have been one. */
static struct stor_scrub_stat resilver_wait(void)
{
	struct stor_scrub_stat ss = scrub_wait();

	cr_assert_eq(ss.function, STOR_SCAN_RESILVER);
	cr_assert_eq(ss.state, STOR_SCRUB_FINISHED);
	return ss;
}

Test(mirror, offline_then_online_resilvers_only_what_the_side_missed)
{
	static const unsigned sides[] = { 2 };
	struct stor_pool_stat st0, st1;
	struct stor_scrub_stat ss;
	struct stor_lun_stat ls;
	struct stor_ds *ds;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	cr_assert_eq(stor_pool_stat(tp.pool, &st0), 0);
	cr_assert_eq(stor_pool_offline(tp.pool, tp.lun[1]), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_pool_stat(tp.pool, &st1), 0);
	cr_assert_gt(st1.meta_records, st0.meta_records,
		     "the commit that takes the side out writes its log record too");
	ls = lun_stat(1);
	cr_assert_eq(ls.state, STOR_SIDE_OFFLINE);
	cr_assert_gt(ls.missing_since, 0);
	cr_assert_eq(stor_pool_offline(tp.pool, "0"), -EBUSY, "the only sound side stays");
	write_random(ds, 0, 8, 8); /* an eighth of the records, while it is out */
	/* the LUNs alone know it is out: the commit that said so reached their log */
	stor_ds_close(ds);
	tpool_close(&tp);
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(lun_stat(1).state, STOR_SIDE_OFFLINE, "offline, from the LUNs' log");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	cr_assert_eq(stor_pool_online(tp.pool, "1"), 0, "%s", stor_pool_last_error());
	ss = resilver_wait();
	cr_assert_geq(ss.repaired, 8 * REC, "what it missed was copied");
	cr_assert_lt(ss.repaired, ss.examined / 2, "and not the rest (%llu of %llu)",
		     (unsigned long long)ss.repaired, (unsigned long long)ss.examined);
	ls = lun_stat(1);
	cr_assert_eq(ls.state, STOR_SIDE_ONLINE);
	cr_assert_eq(ls.missing_since, 0);
	/* side 1 alone serves every record, the new and the old */
	cr_assert_eq(stor_pool_offline(tp.pool, "0"), 0, "%s", stor_pool_last_error());
	check_random(ds, first8_gen8);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(lun_stat(0).state, STOR_SIDE_OFFLINE, "offline is kept by an import");
	cr_assert_eq(lun_stat(1).state, STOR_SIDE_ONLINE);
}

Test(mirror, replace_copies_everything_and_goes_on_after_an_import)
{
	static const unsigned sides[] = { 2 };
	struct stor_scrub_stat ss;
	struct stor_lun_stat ls;
	struct stor_ds *ds;
	char fresh[PATH_MAX + 8];

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	tp.opts.scrub_rate = 128u << 10; /* 64 records of 8 KiB: 4 s */
	tpool_reopen(&tp);
	snprintf(fresh, sizeof(fresh), "%s/fresh", tp.dir);
	cr_assert_eq(stor_pool_replace(tp.pool, "1", fresh, 0), 0, "%s", stor_pool_last_error());
	ls = lun_stat(1);
	cr_assert_str_eq(ls.path, fresh);
	cr_assert_eq(ls.state, STOR_SIDE_RESILVERING);
	cr_assert_eq(stor_pool_scrub_stat(tp.pool, &ss), 0);
	cr_assert_eq(ss.function, STOR_SCAN_RESILVER);
	cr_assert_eq(ss.state, STOR_SCRUB_RUNNING, "slow enough to be cut short");
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), -EBUSY, "no scrub meanwhile");
	/* the old side's label is wiped: it is no LUN of this pool any more */
	cr_assert_neq(label_version(1), LABEL_VERSION_MIRROR);
	tpool_reopen(&tp); /* mid-resilver */
	ls = lun_stat(1);
	cr_assert_str_eq(ls.path, fresh, "the pool record names the new LUN");
	cr_assert(ls.state == STOR_SIDE_RESILVERING || ls.state == STOR_SIDE_ONLINE);
	ss = resilver_wait();
	cr_assert_geq(ss.repaired, NREC * REC, "everything, for a new side");
	cr_assert_eq(lun_stat(1).state, STOR_SIDE_ONLINE);
	cr_assert_eq(stor_pool_offline(tp.pool, "0"), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
	/* and the new side alone imports the pool: its log and uberblocks */
	tpool_close(&tp);
	unlink(tp.lun[0]);
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
}

Test(mirror, attach_makes_a_lun_a_mirror_and_detach_takes_a_side_away)
{
	struct stor_lun_stat ls;
	struct stor_ds *ds;
	char more[PATH_MAX + 8];

	tpool_init(&tp, 1, LUN_SIZE, NULL);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	cr_assert_eq(label_version(0), FORMAT_VERSION);
	snprintf(more, sizeof(more), "%s/more", tp.dir);
	cr_assert_eq(stor_pool_detach(tp.pool, "0"), -EINVAL, "a LUN of its own is no side");
	cr_assert_eq(stor_pool_attach(tp.pool, "0", more, 0), 0, "%s", stor_pool_last_error());
	resilver_wait();
	ls = lun_stat(1);
	cr_assert_eq(ls.vdev, 0);
	cr_assert_eq(ls.sides, 2);
	cr_assert_eq(ls.state, STOR_SIDE_ONLINE);
	cr_assert_eq(label_version(0), LABEL_VERSION_MIRROR, "a mirror's labels now");
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(lun_stat(1).sides, 2, "the mirror survives an import");
	/* the first side goes; the second holds everything and serves alone */
	cr_assert_eq(stor_pool_detach(tp.pool, "0"), 0, "%s", stor_pool_last_error());
	cr_assert_eq(lun_stat(0).state, STOR_SIDE_DETACHED);
	cr_assert_eq(stor_pool_detach(tp.pool, "1"), -EINVAL, "the last side stays");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	write_random(ds, 0, 8, 8);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(lun_stat(0).state, STOR_SIDE_DETACHED, "detached for good");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, first8_gen8);
	stor_ds_close(ds);
	{
		struct stor_verify_report rep;

		cr_assert_eq(stor_pool_verify(tp.pool, &rep), 0);
		stor_verify_report_free(&rep);
		cr_assert_eq(rep.cksum_errors + rep.extent_errors + rep.space_errors, 0,
			     "the check reads the side left, not the detached first LUN");
	}
}

/* What a scan of the pool's directory says of its LUNs. */
struct scanned {
	unsigned nluns, nfound, ndetached, detached0;
	int complete;
};

static int scanned_one(const struct stor_found_pool *sp, void *ctx)
{
	struct scanned *s = ctx;

	s->nluns = sp->nluns;
	s->nfound = sp->nfound;
	s->ndetached = sp->ndetached;
	s->detached0 = sp->detached[0];
	s->complete = sp->complete;
	return 0;
}

Test(mirror, a_side_attached_after_the_first_is_detached_counts_at_every_import)
{
	static const unsigned sides[] = { 2 };
	const char *dirs[1];
	struct scanned sc = { 0 };
	struct stor_ds *ds;
	char more[PATH_MAX + 8];

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	cr_assert_eq(stor_pool_detach(tp.pool, "0"), 0, "%s", stor_pool_last_error());
	cr_assert_eq(label_version(1), LABEL_VERSION_DETACHED, "the side left names the detached");
	snprintf(more, sizeof(more), "%s/more", tp.dir);
	cr_assert_eq(stor_pool_attach(tp.pool, "1", more, 0), 0, "%s", stor_pool_last_error());
	resilver_wait();
	cr_assert_eq(lun_stat(2).state, STOR_SIDE_ONLINE);
	tpool_reopen(&tp);
	cr_assert_eq(lun_stat(0).state, STOR_SIDE_DETACHED);
	cr_assert_eq(lun_stat(1).state, STOR_SIDE_ONLINE, "%s", lun_stat(1).absent);
	cr_assert_eq(lun_stat(2).state, STOR_SIDE_ONLINE, "%s", lun_stat(2).absent);
	cr_assert_eq(lun_stat(2).sides, 2);
	/* the detached file, labelled anew as a side: its path names that one */
	cr_assert_eq(stor_pool_attach(tp.pool, "2", tp.lun[0], 0), 0, "%s",
		     stor_pool_last_error());
	resilver_wait();
	cr_assert_eq(lun_stat(3).state, STOR_SIDE_ONLINE);
	cr_assert_eq(stor_pool_offline(tp.pool, tp.lun[0]), 0, "%s", stor_pool_last_error());
	cr_assert_eq(lun_stat(3).state, STOR_SIDE_OFFLINE);
	cr_assert_eq(stor_pool_online(tp.pool, tp.lun[0]), 0, "%s", stor_pool_last_error());
	resilver_wait();
	tpool_close(&tp);
	dirs[0] = tp.dir;
	cr_assert_eq(stor_pool_search(dirs, 1, scanned_one, &sc), 1);
	cr_assert_eq(sc.nluns, 4);
	cr_assert_eq(sc.ndetached, 1, "index 0 is detached, not missing");
	cr_assert(sc.detached0);
	cr_assert_eq(sc.nfound, 3);
	cr_assert(sc.complete);
	/* the LUNs alone: LMDB gone, the labels and the log say it all */
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	for (unsigned i = 1; i < 4; i++)
		cr_assert_eq(lun_stat(i).state, STOR_SIDE_ONLINE, "lun %u: %s", i,
			     lun_stat(i).absent);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
}

Test(mirror, a_larger_side_attached_then_detached_or_gone_leaves_the_pool_importable)
{
	static const unsigned sides[] = { 2 };
	struct stor_ds *ds;
	char big[PATH_MAX + 8], bigger[PATH_MAX + 8];

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	snprintf(big, sizeof(big), "%s/big", tp.dir);
	snprintf(bigger, sizeof(bigger), "%s/bigger", tp.dir);
	cr_assert_eq(truncate(big, 2 * LUN_SIZE), -1); /* no such file yet */
	cr_assert_eq(close(open(big, O_CREAT | O_WRONLY, 0600)), 0);
	cr_assert_eq(truncate(big, 2 * LUN_SIZE), 0);
	cr_assert_eq(close(open(bigger, O_CREAT | O_WRONLY, 0600)), 0);
	cr_assert_eq(truncate(bigger, 3 * LUN_SIZE), 0);
	cr_assert_eq(stor_pool_replace(tp.pool, "1", big, 0), 0, "%s", stor_pool_last_error());
	resilver_wait();
	cr_assert_eq(stor_pool_attach(tp.pool, "0", bigger, 0), 0, "%s", stor_pool_last_error());
	resilver_wait();
	/* a larger side detached is a stand-in; one gone joins absent */
	cr_assert_eq(stor_pool_detach(tp.pool, big), 0, "%s", stor_pool_last_error());
	tpool_close(&tp);
	cr_assert_eq(unlink(bigger), 0);
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(lun_stat(1).state, STOR_SIDE_DETACHED);
	cr_assert_eq(lun_stat(2).state, STOR_SIDE_FAULTED);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
}

Test(mirror, the_only_side_holding_every_write_stays)
{
	static const unsigned sides[] = { 2 };
	char fresh[PATH_MAX + 8];

	mirror_pool(2, sides, 1);
	snprintf(fresh, sizeof(fresh), "%s/fresh", tp.dir);
	cr_assert_eq(stor_pool_offline(tp.pool, "1"), 0);
	cr_assert_eq(stor_pool_offline(tp.pool, "0"), -EBUSY);
	cr_assert_eq(stor_pool_detach(tp.pool, "0"), -EBUSY);
	cr_assert_eq(stor_pool_replace(tp.pool, "0", fresh, 0), -EBUSY);
	cr_assert(strstr(stor_pool_last_error(), "only side"), "%s", stor_pool_last_error());
	cr_assert_eq(access(fresh, F_OK), -1, "and nothing was made");
	cr_assert_eq(stor_pool_online(tp.pool, "7"), -ENOENT);
	cr_assert_eq(lun_stat(0).state, STOR_SIDE_ONLINE);
}

Test(mirror, a_lone_mirror_keeps_one_copy_of_each_log_record_on_each_side)
{
	static const unsigned three[] = { 3 };
	struct stor_pool_stat st, one;
	struct stor_ds *ds;
	struct tpool lone;

	/* the same datasets on one LUN (two copies) and on a 3-way mirror */
	mirror_pool(3, three, 1);
	tpool_init_in(&lone, &tp, "solo", 1, LUN_SIZE);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	ds = tpool_ds(&lone, "solo/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_eq(stor_pool_stat(lone.pool, &one), 0);
	cr_assert_lt(st.meta_used * 4, one.meta_used * 3,
		     "one copy per record on the mirror (%llu B), two on a LUN (%llu B)",
		     (unsigned long long)st.meta_used, (unsigned long long)one.meta_used);
	tpool_close(&lone); /* its files go with tp's directory */
	/* and the mirror's sides each import it alone */
	tpool_close(&tp);
	unlink(tp.lun[0]);
	unlink(tp.lun[1]);
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
}

/* Junk the header of every metadata log record in LUN file @lun's data
 * area (live or freed); how many. */
static unsigned junk_log_records(unsigned lun)
{
	static const uint8_t magic[8] = { 'C', 'O', 'F', 'F', 'M', 'L', 'O', 'G' };
	int fd = open(tp.lun[lun], O_RDONLY);
	off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
	unsigned n = 0;

	cr_assert(buf && pread(fd, buf, (size_t)size, 0) == size);
	close(fd);
	for (off_t at = LUN_DATA_OFF; at + 4096 <= size; at += 4096) {
		if (memcmp(buf + at, magic, sizeof(magic)))
			continue;
		junk(lun, (uint64_t)at + 8, 32);
		n++;
	}
	free(buf);
	return n;
}

Test(mirror, scrub_mends_the_metadata_log_on_every_side)
{
	static const unsigned sides[] = { 2 };
	struct stor_scrub_stat ss;
	struct stor_ds *ds;

	mirror_pool(2, sides, 1);
	ds = tpool_ds(&tp, "tank/v", NREC * REC, REC);
	write_random(ds, 0, NREC, 7);
	stor_ds_close(ds);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_gt(junk_log_records(1), 0, "side 1 holds log records");
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.errors, 0);
	cr_assert_gt(ss.repaired, 0, "the log's bad copies on side 1 were rewritten");
	cr_assert_gt(lun_stat(1).repaired, 0);
	cr_assert_eq(stor_pool_scrub(tp.pool, STOR_SCRUB_START), 0);
	ss = scrub_wait();
	cr_assert_eq(ss.repaired, 0, "a second scrub finds nothing");
	/* side 1 alone, and no LMDB: its log imports the pool */
	tpool_close(&tp);
	unlink(tp.lun[0]);
	remove_lmdb();
	cr_assert_eq(tpool_open(&tp), 0, "%s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/v", &ds), 0);
	check_random(ds, gen7);
	stor_ds_close(ds);
}
