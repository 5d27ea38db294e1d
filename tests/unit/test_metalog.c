/* SPDX-License-Identifier: MIT */
/*
 * The pool's metadata on its LUNs (metalog.c): a pool whose LMDB and key
 * files are gone imports from its LUNs alone with every flushed record, its
 * keys load with the same passphrase and its MACs verify; an LMDB one txg
 * behind gets the missing record replayed; a damaged uberblock ring or log
 * copy is ignored for the sound one, repaired in place, and pool status
 * says so; a txg only a minority of the LUNs hold loses to an older one
 * when a copy of its record does not verify. An uberblock whose pointer
 * names more sectors than its record fills is refused unread, in bounded
 * time and memory. An import that replays nothing reserves no room in
 * LMDB's file for the log it read.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "dev/alloc.h"
#include "fixture.h"
#include "kv/format.h"
#include "pool_impl.h"

#define LUN_SIZE (16ull << 20)
#define REC 8192u
#define NREC 32u
#define VOL ((uint64_t)NREC * REC)

TPOOL_FIXTURE(3, LUN_SIZE)
TestSuite(metalog, .init = setup, .fini = teardown, .timeout = 240);

static const struct stor_key_material pass = { (const uint8_t *)"correct horse battery", 21 };

static void make_datasets(void)
{
	const char *props[] = { "encryption=aes-256-ccm", "keyformat=passphrase",
				"pbkdf2iters=100000" };
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC, .props = props, .nprops = 3,
				  .key = &pass };
	int ret;

	stor_ds_close(tpool_ds(&tp, "tank/clear", VOL, REC));
	ret = stor_ds_create(tp.pool, "tank/enc", &o, NULL);
	cr_assert_eq(ret, 0, "create tank/enc: %s", stor_strerror(ret));
}

/* Write generation @gen of every record of both datasets. */
static void write_gen(uint64_t gen)
{
	static const char *const names[] = { "tank/clear", "tank/enc" };
	uint8_t buf[REC];

	stor_key_load(tp.pool, "tank/enc", &pass, 0); /* loaded already, or now */
	for (int d = 0; d < 2; d++) {
		struct stor_ds *ds = NULL;

		cr_assert_eq(stor_ds_open(tp.pool, names[d], &ds), 0);
		for (unsigned r = 0; r < NREC; r++) {
			tpat_fill(buf, sizeof(buf), r + 1000u * d, gen);
			cr_assert_eq(stor_ds_write(ds, (uint64_t)r * REC, buf, sizeof(buf)), 0);
		}
		stor_ds_close(ds);
	}
}

/* Every record of both datasets reads back as generation @gen; the pool verifies. */
static void check_gen(uint64_t gen)
{
	static const char *const names[] = { "tank/clear", "tank/enc" };
	struct stor_verify_report rep;
	uint8_t buf[REC];
	int ret;

	ret = stor_key_load(tp.pool, "tank/enc", &pass, 0);
	cr_assert(ret == 0 || ret == -EEXIST || ret == -EALREADY, "load-key: %s",
		  stor_strerror(ret));
	for (int d = 0; d < 2; d++) {
		struct stor_ds *ds = NULL;

		cr_assert_eq(stor_ds_open(tp.pool, names[d], &ds), 0, "open %s", names[d]);
		for (unsigned r = 0; r < NREC; r++) {
			ret = stor_ds_read(ds, (uint64_t)r * REC, buf, sizeof(buf));
			cr_assert_eq(ret, 0, "%s record %u: %s", names[d], r, stor_strerror(ret));
			cr_assert_eq(tpat_check(buf, sizeof(buf), r + 1000u * d), (int64_t)gen,
				     "%s record %u", names[d], r);
		}
		stor_ds_close(ds);
	}
	ret = stor_pool_verify(tp.pool, &rep);
	stor_verify_report_free(&rep);
	cr_assert_eq(ret, 0, "verify: %s", stor_strerror(ret));
	cr_assert_eq(rep.extent_errors + rep.space_errors + rep.bad_frees + rep.cksum_errors +
			     rep.nonce_repeats + rep.mac_errors,
		     0, "verify: %llu extent, %llu space, %llu MAC errors",
		     (unsigned long long)rep.extent_errors, (unsigned long long)rep.space_errors,
		     (unsigned long long)rep.mac_errors);
}

static void state_file(const char *ext, char *out, size_t len)
{
	snprintf(out, len, "%s/pools/%s%s", tp.state, TPOOL_NAME, ext);
}

static void remove_state(int keys)
{
	static const char *const ext[] = { ".mdb", ".mdb-lock", ".keys", ".keys.1" };
	char path[PATH_MAX + 64];

	for (int i = 0; i < (keys ? 4 : 2); i++) {
		state_file(ext[i], path, sizeof(path));
		unlink(path);
	}
}

static void copy_file(const char *from, const char *to)
{
	char cmd[3 * PATH_MAX];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void status_says(const char *what)
{
	struct stor_pool_stat st;

	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert(strstr(st.meta_log, what), "pool status says '%s', not '%s'", st.meta_log, what);
}

Test(metalog, a_pool_without_its_lmdb_and_key_files_imports_from_its_luns)
{
	make_datasets();
	write_gen(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	write_gen(2);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	tpool_close(&tp);
	remove_state(1);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("metadata rebuilt from the LUNs");
	status_says("key file rebuilt from the LUNs");
	check_gen(2);
	/* and it goes on as a pool: writes, commits, another import */
	write_gen(3);
	tpool_reopen(&tp);
	check_gen(3);
}

Test(metalog, an_lmdb_one_txg_behind_gets_the_missing_txg_replayed)
{
	char mdb[PATH_MAX + 64], old[PATH_MAX + 64];

	make_datasets();
	write_gen(1);
	tpool_reopen(&tp);
	tpool_close(&tp);
	state_file(".mdb", mdb, sizeof(mdb));
	state_file(".mdb.old", old, sizeof(old));
	copy_file(mdb, old);
	cr_assert_eq(tpool_open(&tp), 0);
	write_gen(2);
	tpool_close(&tp);
	remove_state(0);
	copy_file(old, mdb);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("brought up to txg");
	check_gen(2);
}

/* Overwrite [@off, @off + @len) of LUN @lun's file with a byte pattern. */
static void smash(unsigned lun, uint64_t off, size_t len)
{
	uint8_t junk[4096];
	int fd = open(tp.lun[lun], O_WRONLY);

	cr_assert_geq(fd, 0);
	memset(junk, 0xa5, sizeof(junk));
	for (size_t o = 0; o < len; o += sizeof(junk)) {
		size_t k = len - o < sizeof(junk) ? len - o : sizeof(junk);
		cr_assert_eq(pwrite(fd, junk, k, (off_t)(off + o)), (ssize_t)k);
	}
	close(fd);
}

Test(metalog, a_lun_whose_uberblock_ring_is_overwritten_imports_from_the_others)
{
	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	remove_state(1);
	smash(0, 4096, 128 * 4096);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("lun 0: uberblock");
	check_gen(1);
}

/* Sectors of the data area of LUN @lun holding a log record (magic "COFFMLOG"). */
static unsigned find_log(unsigned lun, uint64_t *offs, unsigned max)
{
	static const uint8_t magic[8] = { 'C', 'O', 'F', 'F', 'M', 'L', 'O', 'G' };
	uint8_t buf[4096];
	unsigned n = 0;
	int fd = open(tp.lun[lun], O_RDONLY);

	cr_assert_geq(fd, 0);
	for (uint64_t off = 1u << 20; n < max && pread(fd, buf, sizeof(buf), (off_t)off) ==
						       (ssize_t)sizeof(buf); off += sizeof(buf))
		if (!memcmp(buf, magic, sizeof(magic)))
			offs[n++] = off;
	close(fd);
	return n;
}

Test(metalog, a_damaged_log_copy_is_read_from_another_lun)
{
	uint64_t offs[64];
	unsigned n;

	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	remove_state(1);
	/* every record copy on LUN 0 damaged: each has another copy elsewhere */
	n = find_log(0, offs, 64);
	cr_assert_gt(n, 0, "no log record on lun 0");
	for (unsigned i = 0; i < n; i++)
		smash(0, offs[i] + 64, 4096 - 64);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("copy on lun 0");
	check_gen(1);
}

/* The big-endian u64 at @b (format.h). */
static uint64_t be64(const uint8_t *b)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

/* Offset of the seq of an uberblock or a log record: magic, version, kind/pad, guid, txg. */
#define SEQ_OFF 32

/* The newest uberblock sequence number in LUN @lun's ring. */
static uint64_t ring_newest(unsigned lun)
{
	static const uint8_t magic[8] = { 'C', 'O', 'F', 'F', 'U', 'B', 'E', 'R' };
	uint8_t buf[4096];
	uint64_t newest = 0;
	int fd = open(tp.lun[lun], O_RDONLY);

	cr_assert_geq(fd, 0);
	for (unsigned s = 0; s < 128; s++) {
		uint64_t seq;

		cr_assert_eq(pread(fd, buf, sizeof(buf), (off_t)(4096 + s * 4096)),
			     (ssize_t)sizeof(buf));
		if (memcmp(buf, magic, sizeof(magic)))
			continue;
		seq = be64(buf + SEQ_OFF);
		if (seq > newest)
			newest = seq;
	}
	close(fd);
	return newest;
}

/* Zero every slot of LUN @lun's ring holding a sequence number above @seq. */
static void ring_forget_after(unsigned lun, uint64_t seq)
{
	uint8_t buf[4096], zero[4096] = { 0 };
	int fd = open(tp.lun[lun], O_RDWR);

	cr_assert_geq(fd, 0);
	for (unsigned s = 0; s < 128; s++) {
		cr_assert_eq(pread(fd, buf, sizeof(buf), (off_t)(4096 + s * 4096)),
			     (ssize_t)sizeof(buf));
		if (!memcmp(buf, "COFFUBER", 8) && be64(buf + SEQ_OFF) > seq)
			cr_assert_eq(pwrite(fd, zero, sizeof(zero), (off_t)(4096 + s * 4096)),
				     (ssize_t)sizeof(zero));
	}
	close(fd);
}

/* Damage the copies on LUN @lun of every log record whose seq is above @seq. */
static unsigned smash_records_after(unsigned lun, uint64_t seq)
{
	uint64_t offs[256];
	unsigned n = find_log(lun, offs, 256), hit = 0;
	int fd = open(tp.lun[lun], O_RDONLY);

	cr_assert_geq(fd, 0);
	for (unsigned i = 0; i < n; i++) {
		uint8_t at[8];

		cr_assert_eq(pread(fd, at, sizeof(at), (off_t)(offs[i] + SEQ_OFF)), (ssize_t)sizeof(at));
		if (be64(at) > seq) {
			smash(lun, offs[i] + 64, 4096 - 64);
			hit++;
		}
	}
	close(fd);
	return hit;
}

Test(metalog, a_txg_on_a_minority_of_luns_with_a_damaged_copy_loses_to_the_one_most_hold)
{
	uint64_t agreed;
	unsigned hit = 0;

	make_datasets();
	write_gen(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	agreed = ring_newest(1);
	write_gen(2);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	tpool_close(&tp);
	remove_state(1);
	/* LUN 0 alone got the uberblocks after gen 1 (a crash among the
	 * uberblock writes, as the others never got them), and one copy of
	 * each of those records is damaged */
	cr_assert_gt(ring_newest(0), agreed);
	ring_forget_after(1, agreed);
	ring_forget_after(2, agreed);
	for (unsigned l = 1; l < 3; l++)
		hit += smash_records_after(l, agreed);
	cr_assert_gt(hit, 0, "no record after seq %llu", (unsigned long long)agreed);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("is on 1 of 3 LUNs");
	check_gen(1);
}

Test(metalog, a_txg_on_a_minority_of_luns_whose_copies_all_verify_is_taken)
{
	uint64_t agreed;

	make_datasets();
	write_gen(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	agreed = ring_newest(1);
	write_gen(2);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	tpool_close(&tp);
	remove_state(1);
	/* a crash after LUN 0's uberblock write: the txg is whole, take it */
	ring_forget_after(1, agreed);
	ring_forget_after(2, agreed);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("lun 1: uberblock");
	check_gen(2);
}

Test(metalog, damaged_copies_are_repaired_in_place_so_the_other_copies_may_fail_next)
{
	uint64_t offs[64];
	unsigned n;

	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	/* LUN 0's metadata: its ring and every log record copy on it */
	smash(0, 4096, 128 * 4096);
	n = find_log(0, offs, 64);
	cr_assert_gt(n, 0, "no log record on lun 0");
	for (unsigned i = 0; i < n; i++)
		smash(0, offs[i] + 64, 4096 - 64);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	status_says("lun 0: uberblock");
	status_says("copy on lun 0");
	status_says("repaired from lun");
	tpool_close(&tp);
	/* now the other LUNs lose theirs: only the repaired copies on LUN 0 remain */
	remove_state(1);
	for (unsigned l = 1; l < 3; l++) {
		smash(l, 4096, 128 * 4096);
		n = find_log(l, offs, 64);
		for (unsigned i = 0; i < n; i++)
			smash(l, offs[i] + 64, 4096 - 64);
	}
	cr_assert_eq(tpool_open(&tp), 0, "second import: %s", stor_pool_last_error());
	status_says("copy on lun 1");
	check_gen(1);
}

/* What the progress hook saw: every call in order. */
struct seen {
	unsigned calls, bad_order;
	struct stor_progress first, last;
};

static void on_progress(const struct stor_progress *pr, void *arg)
{
	struct seen *s = arg;

	if (s->calls == 0)
		s->first = *pr;
	else if (pr->records < s->last.records || pr->bytes < s->last.bytes ||
		 pr->records_total != s->last.records_total || pr->records > pr->records_total ||
		 pr->bytes > pr->bytes_total)
		s->bad_order++;
	s->last = *pr;
	s->calls++;
}

Test(metalog, a_rebuild_and_a_replay_report_progress_through_the_open_hook)
{
	char mdb[PATH_MAX + 64], old[PATH_MAX + 64];
	struct seen s = { 0 };

	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	state_file(".mdb", mdb, sizeof(mdb));
	state_file(".mdb.old", old, sizeof(old));
	copy_file(mdb, old);
	/* LMDB current: nothing to replay, no call */
	tp.opts.progress = on_progress;
	tp.opts.progress_arg = &s;
	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(s.calls, 0, "%u progress calls with nothing to replay", s.calls);
	write_gen(2);
	tpool_close(&tp);
	/* one txg behind: a replay of what it lacks */
	remove_state(0);
	copy_file(old, mdb);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	cr_assert_geq(s.calls, 2);
	cr_assert_eq(s.first.records, 0);
	cr_assert_eq(s.last.rebuild, 0);
	cr_assert_gt(s.last.records_total, 0);
	cr_assert_eq(s.last.records, s.last.records_total);
	cr_assert_eq(s.last.bytes, s.last.bytes_total);
	cr_assert_eq(s.bad_order, 0);
	tpool_close(&tp);
	/* LMDB gone: a rebuild of every record from the checkpoint on */
	s = (struct seen){ 0 };
	remove_state(1);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	tp.opts.progress = NULL;
	cr_assert_eq(s.last.rebuild, 1);
	cr_assert_eq(s.calls, s.last.records_total + 1, "%u calls for %llu records", s.calls,
		     (unsigned long long)s.last.records_total);
	cr_assert_eq(s.last.records, s.last.records_total);
	cr_assert_gt(s.last.bytes, (uint64_t)NREC * 2 * 30, "%llu bytes for %u block pointers",
		     (unsigned long long)s.last.bytes, NREC * 2);
	cr_assert_eq(s.last.bytes, s.last.bytes_total);
	cr_assert_eq(s.bad_order, 0);
	check_gen(2);
}

/* Take every free sector of every LUN, the metadata reserve too: no log
 * record fits. @some: each LUN must have had one. */
static void exhaust_space(int some)
{
	for (unsigned l = 0; l < tp.nluns; l++) {
		uint64_t sector;
		unsigned taken = 0;

		while (alloc_get_on(tp.pool->alloc, l, 1, &sector) == 0)
			taken++;
		cr_assert(!some || taken > 0, "lun %u had no free sector", l);
	}
}

/* Copy (@save) or put back every file of the pool: LUNs, LMDB, key files. */
static void image(int save)
{
	static const char *const ext[] = { ".mdb", ".keys", ".keys.1" };
	char from[PATH_MAX + 64], to[PATH_MAX + 80];

	for (unsigned i = 0; i < tp.nluns + 3; i++) {
		if (i < tp.nluns)
			snprintf(from, sizeof(from), "%s", tp.lun[i]);
		else
			state_file(ext[i - tp.nluns], from, sizeof(from));
		snprintf(to, sizeof(to), "%s.crash", from);
		if (save)
			copy_file(from, to);
		else
			copy_file(to, from);
	}
}

/*
 * While no log record fits, pool status says the LUNs lag LMDB, from which
 * txg, that an import from the LUNs alone would miss those txgs, and what
 * to do; once there is room again the next commit catches them up and the
 * sentence goes, and the LUNs alone carry what was written meanwhile.
 */
Test(metalog, pool_status_says_while_the_luns_lag_and_what_to_do)
{
	struct stor_pool_stat st;
	static uint64_t sector[256];
	static unsigned lun[256];
	unsigned n = 0;
	uint8_t buf[REC];
	struct stor_ds *ds = NULL;

	make_datasets();
	write_gen(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	write_gen(2);
	/* every free sector taken, the first ones noted to give back */
	for (unsigned l = 0; l < tp.nluns; l++) {
		uint64_t s;

		while (alloc_get_on(tp.pool->alloc, l, 1, &s) == 0)
			if (n < 256) {
				lun[n] = l;
				sector[n++] = s;
			}
	}
	cr_assert_eq(stor_pool_sync(tp.pool), 0, "the flush of gen 2 was not acknowledged");
	status_says("the LUNs lag LMDB from txg");
	status_says("import -d on another host) would miss them");
	status_says("free space on the LUNs' file system or in the pool, then a commit");
	/* room again, for the checkpoint */
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(alloc_put_meta(tp.pool->alloc, lun[i], sector[i], 1), 0);
	/* a commit: record 0 again as it is */
	cr_assert_eq(stor_ds_open(tp.pool, "tank/clear", &ds), 0);
	tpat_fill(buf, sizeof(buf), 0, 2);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	stor_ds_close(ds);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert_null(strstr(st.meta_log, "lag"), "caught up, yet status says '%s'", st.meta_log);
	tpool_close(&tp);
	remove_state(1);
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	check_gen(2);
}

static const struct stor_key_material pass2 = { (const uint8_t *)"staple battery horse", 20 };

Test(metalog, a_crash_while_the_luns_lag_a_full_pool_loses_nothing_acknowledged)
{
	const char *props[] = { "keyformat=passphrase", "pbkdf2iters=100000" };
	struct stor_pool_stat st;

	/* no timer commit: on a loaded machine one came between the flush and
	 * the image, found the room gen 1's frees left and caught the LUNs up */
	tpool_close(&tp);
	tp.opts.txg_timeout_ms = 3600u * 1000u;
	cr_assert_eq(tpool_open(&tp), 0);
	make_datasets();
	write_gen(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	/* gen 2 staged, then no room for its log record: LMDB commits alone */
	write_gen(2);
	exhaust_space(1);
	cr_assert_eq(stor_pool_sync(tp.pool), 0, "the flush of gen 2 was not acknowledged");
	exhaust_space(0); /* and gen 1's extents, freed by that commit */
	status_says("the LUNs lag LMDB");
	/* and a key change while they lag: the key file here is newer than the LUNs' */
	cr_assert_eq(stor_key_change(tp.pool, "tank/enc", props, 2, &pass2), 0);
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	/* the files as a SIGKILL now leaves them: every acknowledged write is durable */
	image(1);
	tpool_close(&tp);
	image(0);
	remove_state(0); /* the lock file; the image's LMDB stays */
	{
		char from[PATH_MAX + 80], to[PATH_MAX + 64];

		state_file(".mdb", to, sizeof(to));
		snprintf(from, sizeof(from), "%s.crash", to);
		copy_file(from, to);
	}
	cr_assert_eq(tpool_open(&tp), 0, "import after the crash: %s", stor_pool_last_error());
	status_says("ahead of the LUNs");
	cr_assert_eq(stor_key_load(tp.pool, "tank/enc", &pass2, 0), 0, "the new passphrase");
	check_gen(2);
	/* the checkpoint at that import caught the LUNs up: they alone carry gen 2 and the new key */
	tpool_close(&tp);
	remove_state(1);
	cr_assert_eq(tpool_open(&tp), 0, "import from the LUNs: %s", stor_pool_last_error());
	status_says("metadata rebuilt from the LUNs");
	cr_assert_eq(stor_key_load(tp.pool, "tank/enc", &pass2, 0), 0,
		     "the key changed while the LUNs lagged is lost");
	check_gen(2);
}

/*
 * A dataset created and then a crash before any txg took it: LMDB has it,
 * the LUNs do not. The next open writes a checkpoint (the "unlogged" mark),
 * so the deltas after it apply to a state that has the dataset, and an
 * import from the LUNs alone finds it with its records.
 */
Test(metalog, a_change_committed_just_before_a_crash_reaches_the_luns_at_the_next_open)
{
	struct stor_ds_opts o = { .volsize = VOL, .recordsize = REC };
	struct stor_ds *ds = NULL;
	uint8_t buf[REC];
	pid_t pid;
	int st;

	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct stor_pool *p = NULL;

		if (stor_pool_open(TPOOL_NAME, &tp.opts, &p) < 0 ||
		    stor_ds_create(p, "tank/late", &o, NULL) < 0)
			_exit(1);
		_exit(0); /* a crash: no commit, no close */
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed");
	cr_assert_eq(tpool_open(&tp), 0, "open: %s", stor_pool_last_error());
	status_says("LMDB holds changes the LUNs lack");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/late", &ds), 0);
	tpat_fill(buf, sizeof(buf), 7, 1);
	cr_assert_eq(stor_ds_write(ds, 0, buf, sizeof(buf)), 0);
	stor_ds_close(ds);
	write_gen(2);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	tpool_close(&tp);
	remove_state(1);
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, "tank/late", &ds), 0, "the dataset is gone");
	cr_assert_eq(stor_ds_read(ds, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(tpat_check(buf, sizeof(buf), 7), 1);
	stor_ds_close(ds);
	check_gen(2);
}

/* Offsets in an uberblock (format.h): its pointer, after magic, version,
 * reserved, guid, txg, seq; in that the sector count and the length. */
#define UB_PTR 40
#define PTR_NSECT (1 + MLOG_COPIES * (2 + 8))

static void put_be32(uint8_t *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint32_t be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Every LUN keeps its newest uberblock alone, made to name @nsect sectors
 * (its record's length kept, its checksum made good), and its file grows
 * sparsely so that many sectors read as zeros from every copy's place. */
static void forge_newest_ub(uint32_t nsect)
{
	for (unsigned lun = 0; lun < 3; lun++) {
		uint64_t newest = ring_newest(lun), end = 0;
		int fd;

		ring_forget_after(lun, newest);
		fd = open(tp.lun[lun], O_RDWR);
		cr_assert_geq(fd, 0);
		for (unsigned s = 0; s < UB_SLOTS; s++) {
			uint8_t ub[UB_SIZE], *ptr = ub + UB_PTR;
			uint64_t sum;
			off_t at = (off_t)UB_OFF + (off_t)s * UB_SIZE;

			cr_assert_eq(pread(fd, ub, sizeof(ub), at), (ssize_t)sizeof(ub));
			if (memcmp(ub, "COFFUBER", 8) || be64(ub + SEQ_OFF) != newest) {
				cr_assert_eq(pwrite(fd, (uint8_t[UB_SIZE]){ 0 }, UB_SIZE, at), UB_SIZE);
				continue;
			}
			cr_assert_eq(be32(ptr + PTR_NSECT), (be32(ptr + PTR_NSECT + 4) + 4095) / 4096,
				     "a writer's pointer names its length in sectors");
			for (unsigned c = 0; c < ptr[0]; c++) {
				uint64_t last = be64(ptr + 1 + c * 10 + 2) + nsect;

				end = last > end ? last : end;
			}
			put_be32(ptr + PTR_NSECT, nsect);
			sum = XXH64(ub, UB_LEN - 8, 0);
			for (int i = 0; i < 8; i++)
				ub[UB_LEN - 8 + i] = (uint8_t)(sum >> (56 - 8 * i));
			cr_assert_eq(pwrite(fd, ub, sizeof(ub), at), (ssize_t)sizeof(ub));
		}
		cr_assert_gt(end * 4096, LUN_SIZE);
		cr_assert_eq(ftruncate(fd, (off_t)(end * 4096)), 0);
		close(fd);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long maxrss_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

Test(metalog, an_uberblock_naming_more_sectors_than_its_record_is_refused_unread)
{
	long rss;
	double t0, took;
	int ret;

	make_datasets();
	write_gen(1);
	tpool_close(&tp);
	remove_state(1);
	/* 256 MiB per copy: what an import would read and hold of each */
	forge_newest_ub(1u << 16);
	rss = maxrss_kib();
	t0 = now_s();
	ret = tpool_open(&tp);
	took = now_s() - t0;
	cr_assert_neq(ret, 0, "the forged pointer was taken");
	cr_assert(strstr(stor_pool_last_error(), "65536 sectors"), "says why: %s",
		  stor_pool_last_error());
	cr_assert_lt(maxrss_kib() - rss, 32 << 10, "the import grew by %ld KiB",
		     maxrss_kib() - rss);
	cr_log_info("refused in %.3f s, max RSS %ld KiB more", took, maxrss_kib() - rss);
	/* a few ring reads: far below this even on a loaded machine */
	cr_assert_lt(took, 5.0, "the refusal took %.2f s", took);
}

static long long state_blocks(const char *ext)
{
	char path[PATH_MAX + 64];
	struct stat st;

	state_file(ext, path, sizeof(path));
	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	return (long long)st.st_blocks * 512;
}

/* An import reserves room in LMDB's file for the records it replays, not
 * for the whole log: twice a log of 14 GiB was once reserved at each import
 * of a pool of 10^8 records whose LMDB was current, and filled the disk. */
Test(metalog, an_import_that_replays_nothing_reserves_no_room_for_the_log)
{
	long long before, after;

	make_datasets();
	for (uint64_t gen = 1; gen <= 24; gen++) {
		write_gen(gen);
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
	}
	tpool_close(&tp);
	before = state_blocks(".mdb");
	cr_assert_eq(tpool_open(&tp), 0, "import: %s", stor_pool_last_error());
	after = state_blocks(".mdb");
	cr_assert_lt(after - before, 64 << 10,
		     "LMDB's file grew by %lld KiB at an import that replayed nothing",
		     (after - before) >> 10);
	check_gen(24);
}
