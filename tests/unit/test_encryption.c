/* SPDX-License-Identifier: MIT */
/*
 * End-to-end tests of per-dataset encryption through the public API: no
 * plaintext on the LUNs, every suite across a restart, tampering with
 * ciphertext and with block pointers in LMDB, key load/unload/change and
 * inheritance, nonce uniqueness over a million record writes and across
 * mixed batches and metadata rollbacks, and the block pointer MACs.
 *
 * Block pointers are reached by opening the pool's LMDB file directly, only
 * while the pool is closed (or from a forked child, which is a process of
 * its own), since LMDB forbids a second environment on one file per process.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <lmdb.h>
#include <xxhash.h>

#include "fixture.h"

#define ITERS "pbkdf2iters=100000"
/* Options of a test dataset: @n properties @props, key @key. */
#define DS_OPTS(p_, n_, k_)                                                             \
	(struct stor_ds_opts)                                                            \
	{                                                                                \
		.volsize = VOLSIZE, .recordsize = RECSIZE, .props = (p_), .nprops = (n_), \
		.key = (k_)                                                              \
	}
#define LUN_SIZE (64ull << 20)
#define VOLSIZE (1ull << 20)
#define RECSIZE 8192u
#define BP_SIZE 76
#define BP_OFF_LUN 0
#define BP_OFF_SECTOR 16
#define BP_OFF_FLAGS 2
#define BP_OFF_COMP 3
#define BP_OFF_SALT 32
#define BP_OFF_NONCE 40
#define BP_OFF_MAC 52
#define DATA_OFF (1ull << 20)

static void setup(void)
{
	struct stat st;

	/* tmpfs keeps the LUN traffic off the disk */
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
		setenv("TMPDIR", "/dev/shm", 1);
}

TestSuite(encryption, .init = setup, .timeout = 240);

static const struct stor_key_material pass_a = { (const uint8_t *)"correct horse battery", 21 };
static const struct stor_key_material pass_b = { (const uint8_t *)"another passphrase!", 19 };
static const struct stor_key_material pass_bad = { (const uint8_t *)"incorrect horse battery", 23 };

/* Create @name encrypted with @suite and a passphrase; return an open handle. */
static struct stor_ds *enc_ds(struct tpool *tp, const char *name, const char *suite,
			      const struct stor_key_material *key)
{
	char enc[64];
	const char *props[] = { enc, "keyformat=passphrase", ITERS };
	struct stor_ds_opts o = DS_OPTS(props, 3, key);
	struct stor_ds *ds = NULL;
	int ret;

	snprintf(enc, sizeof(enc), "encryption=%s", suite);
	ret = stor_ds_create(tp->pool, name, &o, &ds);
	cr_assert_eq(ret, 0, "create %s (%s): %s", name, suite, stor_strerror(ret));
	return ds;
}

/* A new one-LUN pool in @tp holding enc_ds() @name. */
static struct stor_ds *pool_with_enc_ds(struct tpool *tp, const char *name, const char *suite,
					const struct stor_key_material *key)
{
	tpool_init(tp, 1, LUN_SIZE, NULL);
	return enc_ds(tp, name, suite, key);
}

/* A new one-LUN pool in @tp; @return what creating dataset @name in it with @o returned. */
static int pool_and_create(struct tpool *tp, const char *name, const struct stor_ds_opts *o)
{
	tpool_init(tp, 1, LUN_SIZE, NULL);
	return stor_ds_create(tp->pool, name, o, NULL);
}

static struct stor_ds *open_ds(struct tpool *tp, const char *name)
{
	struct stor_ds *ds = NULL;
	int ret = stor_ds_open(tp->pool, name, &ds);

	cr_assert_eq(ret, 0, "open %s: %s", name, stor_strerror(ret));
	return ds;
}

static void load_key(struct tpool *tp, const char *name, const struct stor_key_material *k)
{
	int ret = stor_key_load(tp->pool, name, k, 0);

	cr_assert_eq(ret, 0, "load-key %s: %s", name, stor_strerror(ret));
}

static void prop(struct tpool *tp, const char *name, const char *p, char *out, size_t len)
{
	struct stor_prop_value v;
	int ret = stor_ds_get(tp->pool, name, p, &v);

	cr_assert_eq(ret, 0, "get %s %s: %s", name, p, stor_strerror(ret));
	snprintf(out, len, "%s", v.value);
}

static void assert_prop(struct tpool *tp, const char *name, const char *p, const char *want)
{
	char got[256];

	prop(tp, name, p, got, sizeof(got));
	cr_assert_str_eq(got, want, "%s %s: got %s, want %s", name, p, got, want);
}

static void write_ok(struct stor_ds *ds, uint64_t off, const void *buf, size_t len)
{
	int ret = stor_ds_write(ds, off, buf, len);

	cr_assert_eq(ret, 0, "write %s @%llu: %s", stor_ds_name(ds), (unsigned long long)off,
		     stor_strerror(ret));
}

static void read_eq(struct stor_ds *ds, uint64_t off, const void *want, size_t len)
{
	void *buf = malloc(len);
	int ret;

	cr_assert_not_null(buf);
	ret = stor_ds_read(ds, off, buf, len);
	cr_assert_eq(ret, 0, "read %s @%llu: %s", stor_ds_name(ds), (unsigned long long)off,
		     stor_strerror(ret));
	cr_assert_arr_eq(buf, want, len, "%s @%llu: data differs", stor_ds_name(ds),
			 (unsigned long long)off);
	free(buf);
}

/* ---- direct LMDB access (pool closed) ---- */

struct lm {
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi ds, bp, mac;
};

static void lm_open_path(struct lm *l, const char *path, bool rdonly)
{
	int rc;

	memset(l, 0, sizeof(*l));
	rc = mdb_env_create(&l->env);
	cr_assert_eq(rc, 0);
	mdb_env_set_maxdbs(l->env, 4);
	mdb_env_set_mapsize(l->env, (size_t)4 << 30);
	rc = mdb_env_open(l->env, path, MDB_NOSUBDIR | (rdonly ? MDB_RDONLY : 0), 0600);
	cr_assert_eq(rc, 0, "mdb_env_open %s: %s", path, mdb_strerror(rc));
	rc = mdb_txn_begin(l->env, NULL, rdonly ? MDB_RDONLY : 0, &l->txn);
	cr_assert_eq(rc, 0, "txn: %s", mdb_strerror(rc));
	rc = mdb_dbi_open(l->txn, "ds", 0, &l->ds);
	cr_assert_eq(rc, 0, "dbi ds: %s", mdb_strerror(rc));
	rc = mdb_dbi_open(l->txn, "bp", 0, &l->bp);
	cr_assert_eq(rc, 0, "dbi bp: %s", mdb_strerror(rc));
	rc = mdb_dbi_open(l->txn, "mac", 0, &l->mac);
	cr_assert_eq(rc, 0, "dbi mac: %s", mdb_strerror(rc));
}

static void lm_path(const struct tpool *tp, char *path, size_t len)
{
	snprintf(path, len, "%s/pools/%s.mdb", tp->state, tp->name);
}

static void lm_open(struct lm *l, struct tpool *tp)
{
	char path[PATH_MAX];

	cr_assert_null(tp->pool, "LMDB opened while the pool is open");
	lm_path(tp, path, sizeof(path));
	lm_open_path(l, path, false);
}

static void lm_close(struct lm *l, bool commit)
{
	int rc = 0;

	if (commit)
		rc = mdb_txn_commit(l->txn);
	else
		mdb_txn_abort(l->txn);
	mdb_env_close(l->env);
	cr_assert_eq(rc, 0, "commit: %s", mdb_strerror(rc));
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* Dataset id: the u64 after the u32 version in its "ds" record. */
static uint64_t lm_ds_id(struct lm *l, const char *name)
{
	MDB_val k = { strlen(name), (void *)name }, v;
	int rc = mdb_get(l->txn, l->ds, &k, &v);

	cr_assert_eq(rc, 0, "ds record %s: %s", name, mdb_strerror(rc));
	cr_assert_geq(v.mv_size, 12);
	return be64((const uint8_t *)v.mv_data + 4);
}

static void bp_key(uint8_t key[16], uint64_t id, uint64_t rec)
{
	put_be64(key, id);
	put_be64(key + 8, rec);
}

static void lm_bp_get(struct lm *l, uint64_t id, uint64_t rec, uint8_t bp[BP_SIZE])
{
	uint8_t key[16];
	MDB_val k = { 16, key }, v;
	int rc;

	bp_key(key, id, rec);
	rc = mdb_get(l->txn, l->bp, &k, &v);
	cr_assert_eq(rc, 0, "bp %llu/%llu: %s", (unsigned long long)id, (unsigned long long)rec,
		     mdb_strerror(rc));
	cr_assert_eq(v.mv_size, BP_SIZE);
	memcpy(bp, v.mv_data, BP_SIZE);
}

static void lm_bp_put(struct lm *l, uint64_t id, uint64_t rec, const uint8_t bp[BP_SIZE])
{
	uint8_t key[16];
	MDB_val k = { 16, key }, v = { BP_SIZE, (void *)bp };
	int rc;

	bp_key(key, id, rec);
	rc = mdb_put(l->txn, l->bp, &k, &v, 0);
	cr_assert_eq(rc, 0, "put bp: %s", mdb_strerror(rc));
}

static void lm_bp_del(struct lm *l, uint64_t id, uint64_t rec)
{
	uint8_t key[16];
	MDB_val k = { 16, key };
	int rc;

	bp_key(key, id, rec);
	rc = mdb_del(l->txn, l->bp, &k, NULL);
	cr_assert_eq(rc, 0, "del bp: %s", mdb_strerror(rc));
}

/* ---- 1. no plaintext on the LUNs ---- */

struct win {
	uint64_t word;
	uint32_t pos;
};

static int win_cmp(const void *a, const void *b)
{
	const struct win *x = a, *y = b;

	return x->word < y->word ? -1 : x->word > y->word;
}

/* Count the places where any 32-byte window of @pat occurs in the LUN files. */
static size_t scan_windows(struct tpool *tp, const uint8_t *pat, size_t len)
{
	size_t nw = len - 31, hits = 0;
	struct win *w = calloc(nw, sizeof(*w));

	cr_assert_not_null(w);
	for (size_t i = 0; i < nw; i++) {
		memcpy(&w[i].word, pat + i, 8);
		w[i].pos = (uint32_t)i;
	}
	qsort(w, nw, sizeof(*w), win_cmp);
	for (unsigned l = 0; l < tp->nluns; l++) {
		int fd = open(tp->lun[l], O_RDONLY);
		struct stat st;
		uint8_t *buf;

		cr_assert(fd >= 0);
		cr_assert_eq(fstat(fd, &st), 0);
		buf = malloc((size_t)st.st_size);
		cr_assert_not_null(buf);
		cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
		close(fd);
		for (size_t i = 0; i + 32 <= (size_t)st.st_size; i++) {
			struct win key, *hit;

			memcpy(&key.word, buf + i, 8);
			if (!key.word)
				continue;
			hit = bsearch(&key, w, nw, sizeof(*w), win_cmp);
			if (hit && memcmp(buf + i, pat + hit->pos, 32) == 0)
				hits++;
		}
		free(buf);
	}
	free(w);
	return hits;
}

Test(encryption, luns_hold_no_plaintext)
{
	struct tpool tp;
	struct stor_ds *enc, *clr;
	uint8_t *pat = malloc(RECSIZE);

	cr_assert_not_null(pat);
	tpool_init(&tp, 2, 8ull << 20, NULL);
	tpat_random(pat, RECSIZE, 0x5eed);
	enc = enc_ds(&tp, "tank/enc", "aes-256-ccm", &pass_a);
	write_ok(enc, 3 * RECSIZE, pat, RECSIZE);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(scan_windows(&tp, pat, RECSIZE), 0,
		     "plaintext of the encrypted dataset found");
	read_eq(enc, 3 * RECSIZE, pat, RECSIZE);

	/* the same scan finds the clear copy, so it does look */
	clr = tpool_ds(&tp, "tank/clear", VOLSIZE, RECSIZE);
	write_ok(clr, 3 * RECSIZE, pat, RECSIZE);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_geq(scan_windows(&tp, pat, RECSIZE), 1, "scan misses a clear record");
	stor_ds_close(enc);
	stor_ds_close(clr);
	tpool_fini(&tp);
	free(pat);
}

/* True if this process maps the file @path (a LUN read in place). */
static bool mapped(const char *path)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	cr_assert_not_null(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, path) != NULL;
	fclose(f);
	return found;
}

/*
 * LUN files on tmpfs are read in place through a mapping: records come back
 * right, clear and encrypted, also after an overwrite (pwrite and the
 * mapping share the page cache), and pread_only turns the mapping off.
 */
Test(encryption, tmpfs_luns_are_read_in_place_unless_pread_only)
{
	struct stor_pool_opts o = { .pread_only = 1 };
	struct tpool tp;
	struct statfs fs;
	uint8_t a[RECSIZE], b[RECSIZE];

	tpool_init(&tp, 2, 8ull << 20, NULL);
	if (statfs(tp.dir, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
		tpool_fini(&tp);
		cr_skip_test("the LUN files are not on tmpfs");
	}
	cr_assert(mapped(tp.lun[0]) && mapped(tp.lun[1]), "tmpfs LUNs not mapped");
	for (int pass = 0; pass < 2; pass++) {
		struct stor_ds *enc = enc_ds(&tp, pass ? "tank/e2" : "tank/e", "aes-256-ccm", &pass_a);
		struct stor_ds *clr = tpool_ds(&tp, pass ? "tank/c2" : "tank/c", VOLSIZE, RECSIZE);

		tpat_random(a, sizeof(a), 1 + pass);
		tpat_random(b, sizeof(b), 3 + pass);
		write_ok(enc, 2 * RECSIZE, a, RECSIZE);
		write_ok(clr, 2 * RECSIZE, a, RECSIZE);
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
		read_eq(enc, 2 * RECSIZE, a, RECSIZE);
		read_eq(clr, 2 * RECSIZE, a, RECSIZE);
		read_eq(clr, 2 * RECSIZE + 100, a + 100, 1000); /* part of a record */
		write_ok(enc, 2 * RECSIZE, b, RECSIZE);
		write_ok(clr, 2 * RECSIZE, b, RECSIZE);
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
		read_eq(enc, 2 * RECSIZE, b, RECSIZE);
		read_eq(clr, 2 * RECSIZE, b, RECSIZE);
		stor_ds_close(enc);
		stor_ds_close(clr);
		if (pass)
			break;
		/* again with every read a pread */
		tpool_close(&tp);
		tp.opts.pread_only = o.pread_only;
		cr_assert_eq(tpool_open(&tp), 0);
		cr_assert(!mapped(tp.lun[0]) && !mapped(tp.lun[1]), "mapped despite pread_only");
		load_key(&tp, "tank/e", &pass_a);
	}
	tpool_fini(&tp);
}

/* ---- 2. every suite across a restart ---- */

Test(encryption, every_suite_round_trips)
{
	static const char *const suites[] = { "aes-128-ccm", "aes-192-ccm", "aes-256-ccm",
					      "aes-128-gcm", "aes-256-gcm", "on" };
	const size_t n = sizeof(suites) / sizeof(suites[0]);
	uint8_t buf[3 * RECSIZE + 100];
	char name[64];
	struct tpool tp;

	tpool_init(&tp, 2, LUN_SIZE, NULL);
	for (size_t i = 0; i < n; i++) {
		struct stor_ds *ds;

		snprintf(name, sizeof(name), "tank/s%zu", i);
		ds = enc_ds(&tp, name, suites[i], &pass_a);
		tpat_random(buf, sizeof(buf), 100 + i);
		write_ok(ds, 1000, buf, sizeof(buf));
		stor_ds_close(ds);
	}
	tpool_reopen(&tp);
	for (size_t i = 0; i < n; i++) {
		const char *want = strcmp(suites[i], "on") ? suites[i] : "aes-256-ccm";
		struct stor_ds *ds;

		snprintf(name, sizeof(name), "tank/s%zu", i);
		assert_prop(&tp, name, "keystatus", "unavailable");
		load_key(&tp, name, &pass_a);
		assert_prop(&tp, name, "keystatus", "available");
		assert_prop(&tp, name, "encryption", want);
		assert_prop(&tp, name, "encryptionroot", name);
		ds = open_ds(&tp, name);
		tpat_random(buf, sizeof(buf), 100 + i);
		read_eq(ds, 1000, buf, sizeof(buf));
		stor_ds_close(ds);
	}
	tpool_fini(&tp);
}

/* ---- 3. tampering ---- */

/* Read record @rec of @name after a restart: must fail with EAUTH (or ECKSUM). */
static void assert_rejected(struct tpool *tp, const char *name, uint64_t rec,
			    const struct stor_key_material *key, const char *what)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	int ret;

	ret = tpool_open(tp);
	cr_assert_eq(ret, 0, "reopen after %s: %s (%s)", what, stor_errname(ret),
		     stor_pool_last_error());
	load_key(tp, name, key);
	ds = open_ds(tp, name);
	memset(buf, 0xa5, sizeof(buf));
	ret = stor_ds_read(ds, rec * RECSIZE, buf, sizeof(buf));
	cr_assert_eq(ret, STOR_EAUTH, "%s: read got %d (%s), want EAUTH", what, ret,
		     stor_errname(ret));
	stor_ds_close(ds);
}

/* Dataset "tank/a" with records 0..3 holding tpat_fill(rec, 1), closed pool. */
static void tamper_setup(struct tpool *tp)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;

	ds = pool_with_enc_ds(tp, "tank/a", "aes-256-gcm", &pass_a);
	for (uint64_t r = 0; r < 4; r++) {
		tpat_fill(buf, sizeof(buf), r, 1);
		write_ok(ds, r * RECSIZE, buf, sizeof(buf));
	}
	stor_ds_close(ds);
	tpool_close(tp);
}

/* tamper_setup(), then the closed pool's LMDB open in @l. @return tank/a's id */
static uint64_t tamper_open(struct tpool *tp, struct lm *l)
{
	tamper_setup(tp);
	lm_open(l, tp);
	return lm_ds_id(l, "tank/a");
}

Test(encryption, flipped_ciphertext_byte_is_rejected)
{
	uint8_t bp[BP_SIZE];
	struct tpool tp;
	struct lm l;
	uint64_t id, sector;
	unsigned lun;

	id = tamper_open(&tp, &l);
	lm_bp_get(&l, id, 1, bp);
	lm_close(&l, false);
	lun = (unsigned)(bp[BP_OFF_LUN] << 8 | bp[BP_OFF_LUN + 1]);
	sector = be64(bp + BP_OFF_SECTOR);
	tpool_flip_byte(&tp, lun, DATA_OFF + sector * STOR_SECTOR + 1234);
	assert_rejected(&tp, "tank/a", 1, &pass_a, "flipped byte");
	tpool_fini(&tp);
}

Test(encryption, swapped_block_pointers_are_rejected)
{
	uint8_t b0[BP_SIZE], b1[BP_SIZE];
	struct tpool tp;
	struct lm l;
	uint64_t id;

	id = tamper_open(&tp, &l);
	lm_bp_get(&l, id, 0, b0);
	lm_bp_get(&l, id, 1, b1);
	lm_bp_put(&l, id, 0, b1);
	lm_bp_put(&l, id, 1, b0);
	lm_close(&l, true);
	assert_rejected(&tp, "tank/a", 0, &pass_a, "swap (record 0)");
	tpool_close(&tp);
	assert_rejected(&tp, "tank/a", 1, &pass_a, "swap (record 1)");
	tpool_fini(&tp);
}

Test(encryption, block_pointer_from_other_dataset_or_offset_is_rejected)
{
	uint8_t buf[RECSIZE], bp[BP_SIZE];
	struct stor_ds *b;
	struct tpool tp;
	struct lm l;
	uint64_t ida, idb;

	tamper_setup(&tp);
	cr_assert_eq(tpool_open(&tp), 0);
	b = enc_ds(&tp, "tank/b", "aes-256-gcm", &pass_b);
	tpat_fill(buf, sizeof(buf), 0, 7);
	write_ok(b, 0, buf, sizeof(buf));
	stor_ds_close(b);
	tpool_close(&tp);

	lm_open(&l, &tp);
	ida = lm_ds_id(&l, "tank/a");
	idb = lm_ds_id(&l, "tank/b");
	cr_assert_neq(ida, idb);
	/*
	 * Moves, not copies: pool open refuses two block pointers to one extent
	 * (ECORRUPT), and the point here is what the crypto layer says.
	 */
	lm_bp_get(&l, idb, 0, bp);
	lm_bp_put(&l, ida, 0, bp); /* b's record 0 as a's record 0 */
	lm_bp_del(&l, idb, 0);
	lm_bp_get(&l, ida, 3, bp);
	lm_bp_put(&l, ida, 2, bp); /* a's record 3 as a's record 2 */
	lm_bp_del(&l, ida, 3);
	lm_close(&l, true);
	assert_rejected(&tp, "tank/a", 0, &pass_a, "bp of another dataset");
	tpool_close(&tp);
	assert_rejected(&tp, "tank/a", 2, &pass_a, "bp of another offset");
	tpool_fini(&tp);
}

static void lun_copy(struct tpool *tp, const uint8_t from_bp[BP_SIZE], const uint8_t to_bp[BP_SIZE])
{
	unsigned fl = (unsigned)(from_bp[BP_OFF_LUN] << 8 | from_bp[BP_OFF_LUN + 1]);
	unsigned tl = (unsigned)(to_bp[BP_OFF_LUN] << 8 | to_bp[BP_OFF_LUN + 1]);
	uint64_t fo = DATA_OFF + be64(from_bp + BP_OFF_SECTOR) * STOR_SECTOR;
	uint64_t to = DATA_OFF + be64(to_bp + BP_OFF_SECTOR) * STOR_SECTOR;
	uint8_t buf[RECSIZE];
	int in = open(tp->lun[fl], O_RDONLY), out = open(tp->lun[tl], O_WRONLY);

	cr_assert(in >= 0 && out >= 0);
	cr_assert_eq(pread(in, buf, sizeof(buf), (off_t)fo), (ssize_t)sizeof(buf));
	cr_assert_eq(pwrite(out, buf, sizeof(buf), (off_t)to), (ssize_t)sizeof(buf));
	close(in);
	close(out);
}

/*
 * The LUNs are where an attacker of the data path sits (they may be remote);
 * block pointers, with each record's nonce and tag, stay in local metadata.
 * An older ciphertext of the record put back in place of the current one
 * must not authenticate.
 */
Test(encryption, replayed_old_version_is_rejected)
{
	uint8_t buf[RECSIZE], got[RECSIZE], old[BP_SIZE], cur[BP_SIZE];
	struct stor_ds *ds;
	struct tpool tp;
	struct lm l;
	uint64_t id;
	int ret;

	id = tamper_open(&tp, &l);
	lm_bp_get(&l, id, 1, old);
	lm_close(&l, false);

	/* a new version of record 1, and the old extent's bytes kept aside */
	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/a", &pass_a);
	ds = open_ds(&tp, "tank/a");
	tpat_fill(buf, sizeof(buf), 1, 2);
	write_ok(ds, RECSIZE, buf, sizeof(buf));
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	stor_ds_close(ds);
	tpool_close(&tp);

	lm_open(&l, &tp);
	lm_bp_get(&l, id, 1, cur);
	lm_close(&l, false);
	cr_assert(memcmp(cur, old, BP_SIZE) != 0, "rewrite left the block pointer unchanged");
	lun_copy(&tp, old, cur);

	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/a", &pass_a);
	ds = open_ds(&tp, "tank/a");
	ret = stor_ds_read(ds, RECSIZE, got, sizeof(got));
	tpat_fill(buf, sizeof(buf), 1, 1);
	cr_assert(ret != 0 || memcmp(got, buf, sizeof(buf)) != 0,
		  "replayed ciphertext returned the old version of record 1 (read %s)",
		  stor_errname(ret));
	cr_assert_eq(ret, STOR_EAUTH, "replay: read got %d (%s)", ret, stor_errname(ret));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/* ---- 4. wrong keys, double load, noop ---- */

static void assert_nokey_io(struct tpool *tp, const char *name)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds = open_ds(tp, name);
	int ret;

	assert_prop(tp, name, "keystatus", "unavailable");
	ret = stor_ds_read(ds, 0, buf, sizeof(buf));
	cr_assert_eq(ret, STOR_ENOKEY, "read without key: %s", stor_errname(ret));
	memset(buf, 1, sizeof(buf));
	ret = stor_ds_write(ds, 0, buf, sizeof(buf));
	cr_assert_eq(ret, STOR_ENOKEY, "write without key: %s", stor_errname(ret));
	stor_ds_close(ds);
}

Test(encryption, wrong_keys_double_load_and_noop)
{
	static const uint8_t raw_a[32] = {
		1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
		17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
	};
	uint8_t raw_bad[32];
	const struct stor_key_material ka = { raw_a, 32 }, kbad = { raw_bad, 32 };
	const char *rprops[] = { "encryption=aes-128-gcm", "keyformat=raw" };
	struct stor_ds_opts o = DS_OPTS(rprops, 2, &ka);
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	memcpy(raw_bad, raw_a, 32);
	raw_bad[31] ^= 1;
	ds = pool_with_enc_ds(&tp, "tank/p", "aes-256-ccm", &pass_a);
	tpat_fill(buf, sizeof(buf), 0, 1);
	write_ok(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	ret = stor_ds_create(tp.pool, "tank/r", &o, &ds);
	cr_assert_eq(ret, 0, "create raw: %s", stor_strerror(ret));
	write_ok(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_reopen(&tp);

	ret = stor_key_load(tp.pool, "tank/p", &pass_bad, 0);
	cr_assert_eq(ret, STOR_EBADKEY, "wrong passphrase: %s", stor_errname(ret));
	assert_nokey_io(&tp, "tank/p");
	ret = stor_key_load(tp.pool, "tank/r", &kbad, 0);
	cr_assert_eq(ret, STOR_EBADKEY, "wrong raw key: %s", stor_errname(ret));
	assert_nokey_io(&tp, "tank/r");

	ret = stor_key_load(tp.pool, "tank/p", &pass_a, STOR_KEY_NOOP);
	cr_assert_eq(ret, 0, "noop with the right key: %s", stor_errname(ret));
	assert_prop(&tp, "tank/p", "keystatus", "unavailable");
	ret = stor_key_load(tp.pool, "tank/p", &pass_bad, STOR_KEY_NOOP);
	cr_assert_eq(ret, STOR_EBADKEY, "noop with a wrong key: %s", stor_errname(ret));

	load_key(&tp, "tank/p", &pass_a);
	ret = stor_key_load(tp.pool, "tank/p", &pass_a, 0);
	cr_assert_eq(ret, -EEXIST, "second load: %s", stor_errname(ret));
	load_key(&tp, "tank/r", &ka);
	ds = open_ds(&tp, "tank/p");
	read_eq(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	ds = open_ds(&tp, "tank/r");
	read_eq(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/* ---- 5. change-key ---- */

Test(encryption, change_key_then_only_the_new_key_loads)
{
	static const char *const pprops[] = { "keyformat=passphrase", ITERS };
	static const char *const rprops[] = { "keyformat=raw" };
	uint8_t raw[32], buf[RECSIZE];
	const struct stor_key_material kraw = { raw, 32 };
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	for (int i = 0; i < 32; i++)
		raw[i] = (uint8_t)(0x40 + i);
	ds = pool_with_enc_ds(&tp, "tank/c", "aes-256-ccm", &pass_a);
	tpat_fill(buf, sizeof(buf), 5, 9);
	write_ok(ds, 5 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);
	ret = stor_key_change(tp.pool, "tank/c", pprops, 2, &pass_b);
	cr_assert_eq(ret, 0, "change-key: %s", stor_strerror(ret));
	tpool_reopen(&tp);

	ret = stor_key_load(tp.pool, "tank/c", &pass_a, 0);
	cr_assert_eq(ret, STOR_EBADKEY, "old passphrase after change: %s", stor_errname(ret));
	assert_prop(&tp, "tank/c", "keystatus", "unavailable");
	load_key(&tp, "tank/c", &pass_b);
	ds = open_ds(&tp, "tank/c");
	read_eq(ds, 5 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);

	/* passphrase -> raw */
	ret = stor_key_change(tp.pool, "tank/c", rprops, 1, &kraw);
	cr_assert_eq(ret, 0, "change-key to raw: %s", stor_strerror(ret));
	tpool_reopen(&tp);
	assert_prop(&tp, "tank/c", "keyformat", "raw");
	ret = stor_key_load(tp.pool, "tank/c", &pass_b, 0);
	cr_assert_neq(ret, 0, "passphrase loads after change to raw");
	load_key(&tp, "tank/c", &kraw);
	ds = open_ds(&tp, "tank/c");
	read_eq(ds, 5 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

static void keyfile_path(const struct tpool *tp, char *path, size_t len)
{
	snprintf(path, len, "%s/pools/%s.keys", tp->state, tp->name);
}

/* Rewrite the u32 at @off of the key file (pool closed) and fix its xxh64
 * trailer, as someone who can write the file (or a bad disk) could. */
static void keyfile_patch_u32(struct tpool *tp, size_t off, uint32_t v)
{
	char path[PATH_MAX];
	uint8_t *buf;
	struct stat st;
	uint64_t h;
	int fd;

	cr_assert_null(tp->pool, "key file patched while the pool is open");
	keyfile_path(tp, path, sizeof(path));
	fd = open(path, O_RDWR);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_gt(st.st_size, (off_t)(off + 4 + 8));
	buf = malloc((size_t)st.st_size);
	cr_assert_not_null(buf);
	cr_assert_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	for (int i = 0; i < 4; i++)
		buf[off + i] = (uint8_t)(v >> (24 - 8 * i));
	h = XXH64(buf, (size_t)st.st_size - 8, 0);
	for (int i = 0; i < 8; i++)
		buf[st.st_size - 8 + i] = (uint8_t)(h >> (56 - 8 * i));
	cr_assert_eq(pwrite(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	free(buf);
}

/* keyfile.c layout: 24-byte header (magic, version, generation, count),
 * then per entry u64 guid | u64 root | u8 keyformat | u32 iterations | ... */
#define KF_ENTRY0_ITERS (24 + 8 + 8 + 1)

Test(encryption, pbkdf2iters_above_the_bound_are_refused_at_create_change_and_load)
{
	static const char *const big[] = { "keyformat=passphrase", "pbkdf2iters=10000001" };
	static const char *const huge[] = { "keyformat=passphrase", "pbkdf2iters=50000000" };
	struct stor_ds_opts o = DS_OPTS(big, 2, &pass_a);
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ret = pool_and_create(&tp, "tank/big", &o);
	cr_assert_eq(ret, STOR_EITERS, "create with 10000001 iterations: %s", stor_errname(ret));
	cr_assert_str_eq(stor_strerror(ret), "pbkdf2iters must be 100000 to 10000000");
	ds = enc_ds(&tp, "tank/c", "aes-256-ccm", &pass_a);
	stor_ds_close(ds);
	/* the old bound was 1e8: this one would have held the admin lock for half a minute */
	ret = stor_key_change(tp.pool, "tank/c", huge, 2, &pass_b);
	cr_assert_eq(ret, STOR_EITERS, "change-key to 5e7 iterations: %s", stor_errname(ret));
	assert_prop(&tp, "tank/c", "pbkdf2iters", "100000");
	tpool_close(&tp);

	/* a key file that asks for 4e9 iterations is damaged, not a load-key of an hour */
	keyfile_patch_u32(&tp, KF_ENTRY0_ITERS, 4000000000u);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, STOR_ECORRUPT, "open with 4e9 iterations in the key file: %s",
		     stor_errname(ret));
	cr_assert(strstr(stor_pool_last_error(), "damaged"), "error: %s", stor_pool_last_error());
	keyfile_patch_u32(&tp, KF_ENTRY0_ITERS, 100000);
	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/c", &pass_a);
	tpool_fini(&tp);
}

Test(encryption, regular_raw_and_hex_keys_are_refused_at_create_and_change_key)
{
	static const char *const rprops[] = { "encryption=aes-256-ccm", "keyformat=raw" };
	static const char *const hprops[] = { "encryption=aes-256-ccm", "keyformat=hex" };
	static const char *const to_raw[] = { "keyformat=raw" };
	char hex[65];
	uint8_t zero[32] = { 0 }, good[32];
	const struct stor_key_material kzero = { zero, 32 }, kgood = { good, 32 };
	const struct stor_key_material khex = { (const uint8_t *)hex, 64 };
	struct stor_ds_opts o = DS_OPTS(rprops, 2, &kzero);
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ret = pool_and_create(&tp, "tank/z", &o);
	cr_assert_eq(ret, STOR_EWEAKKEY, "all-zero raw key: %s", stor_errname(ret));
	cr_assert_eq(stor_ds_open(tp.pool, "tank/z", &ds), -ENOENT);
	/* "abab...": one byte value in hex */
	for (int i = 0; i < 64; i++)
		hex[i] = i & 1 ? 'b' : 'a';
	hex[64] = '\0';
	o.props = hprops;
	o.key = &khex;
	ret = stor_ds_create(tp.pool, "tank/h", &o, NULL);
	cr_assert_eq(ret, STOR_EWEAKKEY, "hex key of one byte value: %s", stor_errname(ret));

	/* a raw key of 32 distinct values is fine; change-key to an all-zero one is not */
	for (int i = 0; i < 32; i++)
		good[i] = (uint8_t)(0x40 + i);
	o.props = rprops;
	o.key = &kgood;
	ret = stor_ds_create(tp.pool, "tank/r", &o, NULL);
	cr_assert_eq(ret, 0, "create: %s", stor_strerror(ret));
	ret = stor_key_change(tp.pool, "tank/r", to_raw, 1, &kzero);
	cr_assert_eq(ret, STOR_EWEAKKEY, "change-key to zeros: %s", stor_errname(ret));
	tpool_reopen(&tp);
	load_key(&tp, "tank/r", &kgood);
	tpool_fini(&tp);
}

/* The LMDB record of dataset @name (pool closed): malloc'ed copy. */
static void *ds_record_get(struct tpool *tp, const char *name, size_t *len)
{
	MDB_val k = { strlen(name), (void *)name }, v;
	struct lm l;
	void *copy;
	int rc;

	lm_open(&l, tp);
	rc = mdb_get(l.txn, l.ds, &k, &v);
	cr_assert_eq(rc, 0, "get %s: %s", name, mdb_strerror(rc));
	copy = malloc(v.mv_size);
	cr_assert_not_null(copy);
	memcpy(copy, v.mv_data, v.mv_size);
	*len = v.mv_size;
	lm_close(&l, false);
	return copy;
}

static void ds_record_put(struct tpool *tp, const char *name, const void *val, size_t len)
{
	MDB_val k = { strlen(name), (void *)name }, v = { len, (void *)val };
	struct lm l;
	int rc;

	lm_open(&l, tp);
	rc = mdb_put(l.txn, l.ds, &k, &v, 0);
	cr_assert_eq(rc, 0, "put %s: %s", name, mdb_strerror(rc));
	lm_close(&l, true);
}

Test(encryption, change_key_and_keylocation_commit_with_the_key_file_alone)
{
	static const char *const to_hex[] = { "keyformat=hex", "keylocation=file:///k/hex" };
	static const char *const to_pass[] = { "keyformat=passphrase", ITERS };
	char hex[65], path[PATH_MAX + 8];
	const struct stor_key_material khex = { (const uint8_t *)hex, 64 };
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;
	void *before;
	size_t blen;
	int ret;

	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned)(i * 41 + 3) & 0xff);
	ds = pool_with_enc_ds(&tp, "tank/c", "aes-256-ccm", &pass_a);
	tpat_fill(buf, sizeof(buf), 3, 1);
	write_ok(ds, 3 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_close(&tp);
	before = ds_record_get(&tp, "tank/c", &blen);

	/* change-key, then the metadata as a crash right after the key-file rename
	 * leaves it: every LMDB write of the change lost */
	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/c", &pass_a);
	ret = stor_key_change(tp.pool, "tank/c", to_hex, 2, &khex);
	cr_assert_eq(ret, 0, "change-key: %s", stor_strerror(ret));
	tpool_close(&tp);
	ds_record_put(&tp, "tank/c", before, blen);
	cr_assert_eq(tpool_open(&tp), 0);
	/* what load-key (and coffer, to read the key) need is the new key's */
	assert_prop(&tp, "tank/c", "keyformat", "hex");
	assert_prop(&tp, "tank/c", "keylocation", "file:///k/hex");
	assert_prop(&tp, "tank/c", "pbkdf2iters", "0");
	ret = stor_key_load(tp.pool, "tank/c", &pass_a, 0);
	cr_assert_neq(ret, 0, "the old passphrase still loads");
	load_key(&tp, "tank/c", &khex);
	ds = open_ds(&tp, "tank/c");
	read_eq(ds, 3 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);

	/* set keylocation commits the same way */
	ret = stor_ds_set(tp.pool, "tank/c", "keylocation", "file:///k/other");
	cr_assert_eq(ret, 0, "set keylocation: %s", stor_strerror(ret));
	tpool_close(&tp);
	ds_record_put(&tp, "tank/c", before, blen);
	cr_assert_eq(tpool_open(&tp), 0);
	assert_prop(&tp, "tank/c", "keylocation", "file:///k/other");

	/* a key file that cannot be written: the change fails and nothing changes */
	load_key(&tp, "tank/c", &khex);
	snprintf(path, sizeof(path), "%s/pools/%s.keys.new", tp.state, tp.name);
	cr_assert_eq(mkdir(path, 0700), 0, "%s: %s", path, strerror(errno));
	ret = stor_key_change(tp.pool, "tank/c", to_pass, 2, &pass_b);
	cr_assert_lt(ret, 0, "change-key over an unwritable key file succeeded");
	assert_prop(&tp, "tank/c", "keyformat", "hex");
	assert_prop(&tp, "tank/c", "keylocation", "file:///k/other");
	assert_prop(&tp, "tank/c", "pbkdf2iters", "0");
	cr_assert_eq(rmdir(path), 0);
	tpool_reopen(&tp);
	assert_prop(&tp, "tank/c", "keyformat", "hex");
	ret = stor_key_load(tp.pool, "tank/c", &pass_b, 0);
	cr_assert_neq(ret, 0, "the refused passphrase loads");
	load_key(&tp, "tank/c", &khex);
	free(before);
	tpool_fini(&tp);
}

/*
 * change-key -i: the child root joins its parent's, in one commit (the key
 * file), so the parent's key opens it after a reopen; a key file that cannot
 * be written leaves it a root of its own key.
 */
Test(encryption, change_key_i_joins_the_parent_root_with_the_key_file_alone)
{
	const char *props[] = { "keyformat=passphrase", ITERS };
	struct stor_ds_opts o = DS_OPTS(props, 2, &pass_b);
	char path[PATH_MAX + 8];
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ds = pool_with_enc_ds(&tp, "tank/p", "aes-256-ccm", &pass_a);
	stor_ds_close(ds);
	ret = stor_ds_create(tp.pool, "tank/p/c", &o, &ds);
	cr_assert_eq(ret, 0, "create: %s", stor_strerror(ret));
	tpat_fill(buf, sizeof(buf), 5, 1);
	write_ok(ds, 2 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);
	cr_assert_eq(stor_ds_create(tp.pool, "tank/p/c/g", &DS_OPTS(NULL, 0, NULL), NULL), 0);
	assert_prop(&tp, "tank/p/c/g", "encryptionroot", "tank/p/c");

	/* refused: a pool's root dataset, a dataset that is no root */
	cr_assert_eq(stor_key_inherit(tp.pool, "tank"), STOR_ENOTENCRYPTED);
	cr_assert_eq(stor_key_inherit(tp.pool, "tank/p/c/g"), STOR_ENOTROOT);
	/* a key file that cannot be written: nothing changes */
	snprintf(path, sizeof(path), "%s/pools/%s.keys.new", tp.state, tp.name);
	cr_assert_eq(mkdir(path, 0700), 0, "%s: %s", path, strerror(errno));
	cr_assert_lt(stor_key_inherit(tp.pool, "tank/p/c"), 0);
	assert_prop(&tp, "tank/p/c", "encryptionroot", "tank/p/c");
	assert_prop(&tp, "tank/p/c", "keyformat", "passphrase");
	cr_assert_eq(rmdir(path), 0);
	tpool_reopen(&tp);
	load_key(&tp, "tank/p/c", &pass_b);

	load_key(&tp, "tank/p", &pass_a);
	ret = stor_key_inherit(tp.pool, "tank/p/c");
	cr_assert_eq(ret, 0, "change-key -i: %s (%s)", stor_strerror(ret), stor_pool_last_error());
	assert_prop(&tp, "tank/p/c", "encryptionroot", "tank/p");
	assert_prop(&tp, "tank/p/c/g", "encryptionroot", "tank/p");
	tpool_reopen(&tp);
	/* the child's own passphrase opens nothing now; the parent's opens all three */
	cr_assert_eq(stor_key_load(tp.pool, "tank/p/c", &pass_b, 0), STOR_ENOTROOT);
	load_key(&tp, "tank/p", &pass_a);
	assert_prop(&tp, "tank/p/c", "keystatus", "available");
	assert_prop(&tp, "tank/p/c/g", "keystatus", "available");
	ds = open_ds(&tp, "tank/p/c");
	read_eq(ds, 2 * RECSIZE, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/* ---- 6. unload ---- */

Test(encryption, unload_then_io_fails)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ds = pool_with_enc_ds(&tp, "tank/u", "aes-128-ccm", &pass_a);
	tpat_fill(buf, sizeof(buf), 0, 1);
	write_ok(ds, 0, buf, sizeof(buf));
	assert_prop(&tp, "tank/u", "keystatus", "available");
	/* a key in use stays unless forced */
	ret = stor_key_unload(tp.pool, "tank/u", 0);
	cr_assert_eq(ret, -EBUSY, "unload with a handle open: %s", stor_strerror(ret));
	assert_prop(&tp, "tank/u", "keystatus", "available");
	ret = stor_ds_read(ds, 0, buf, sizeof(buf));
	cr_assert_eq(ret, 0, "read after a refused unload: %s", stor_errname(ret));
	ret = stor_key_unload(tp.pool, "tank/u", STOR_FORCE);
	cr_assert_eq(ret, 0, "unload: %s", stor_strerror(ret));
	assert_prop(&tp, "tank/u", "keystatus", "unavailable");
	/* the handle opened before the unload must not keep a usable key */
	ret = stor_ds_read(ds, 0, buf, sizeof(buf));
	cr_assert_eq(ret, STOR_ENOKEY, "read after unload: %s", stor_errname(ret));
	ret = stor_ds_write(ds, RECSIZE, buf, sizeof(buf));
	cr_assert_eq(ret, STOR_ENOKEY, "write after unload: %s", stor_errname(ret));
	stor_ds_close(ds);
	assert_nokey_io(&tp, "tank/u");
	load_key(&tp, "tank/u", &pass_a);
	ds = open_ds(&tp, "tank/u");
	tpat_fill(buf, sizeof(buf), 0, 1);
	read_eq(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/* ---- 7. inheritance ---- */

Test(encryption, child_inherits_encryption_root)
{
	const char *offp[] = { "encryption=off" };
	struct stor_ds_opts o = { .volsize = VOLSIZE, .recordsize = RECSIZE };
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ds = pool_with_enc_ds(&tp, "tank/p", "aes-192-ccm", &pass_a);
	stor_ds_close(ds);
	ret = stor_ds_create(tp.pool, "tank/p/c", &o, &ds);
	cr_assert_eq(ret, 0, "create child: %s", stor_strerror(ret));
	tpat_fill(buf, sizeof(buf), 2, 3);
	write_ok(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	assert_prop(&tp, "tank/p/c", "encryptionroot", "tank/p");
	assert_prop(&tp, "tank/p/c", "encryption", "aes-192-ccm");
	assert_prop(&tp, "tank/p/c", "keystatus", "available");

	o.props = offp;
	o.nprops = 1;
	ret = stor_ds_create(tp.pool, "tank/p/clear", &o, NULL);
	cr_assert_neq(ret, 0, "clear child under an encrypted parent was created");
	cr_assert_eq(stor_ds_open(tp.pool, "tank/p/clear", &ds), -ENOENT);

	cr_assert_eq(stor_key_unload(tp.pool, "tank/p", 0), 0);
	assert_prop(&tp, "tank/p/c", "keystatus", "unavailable");
	assert_nokey_io(&tp, "tank/p/c");
	ret = stor_key_load(tp.pool, "tank/p/c", &pass_a, 0);
	cr_assert_eq(ret, STOR_ENOTROOT, "load-key on the child: %s", stor_errname(ret));

	tpool_reopen(&tp);
	assert_prop(&tp, "tank/p/c", "encryptionroot", "tank/p");
	assert_prop(&tp, "tank/p/c", "keystatus", "unavailable");
	load_key(&tp, "tank/p", &pass_a);
	assert_prop(&tp, "tank/p/c", "keystatus", "available");
	ds = open_ds(&tp, "tank/p/c");
	read_eq(ds, 0, buf, sizeof(buf));
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/* ---- 8. nonce uniqueness ---- */

#define N_RECSIZE 512u
#define N_RECS 4096u
/*
 * 244 rounds x 4096 records = 999,424 writes + the 4096 of the first fill:
 * 1,003,520 sealed records, with a pool close/open after half the rounds.
 */
#define N_ROUNDS 244u
#define NONCE_LEN 12

struct nset {
	uint8_t (*slot)[16]; /* byte 0 = used; nonce in 1..12 */
	size_t mask, n;
};

static uint64_t nhash(const uint8_t *n)
{
	uint64_t a, b = 0;

	memcpy(&a, n, 8);
	memcpy(&b, n + 8, 4);
	a ^= b * 0x9e3779b97f4a7c15ull;
	a ^= a >> 31;
	a *= 0xbf58476d1ce4e5b9ull;
	return a ^ (a >> 29);
}

/* @return false if @n was in the set already. */
static bool nset_add(struct nset *s, const uint8_t *n)
{
	for (size_t i = nhash(n) & s->mask;; i = (i + 1) & s->mask) {
		if (!s->slot[i][0]) {
			s->slot[i][0] = 1;
			memcpy(s->slot[i] + 1, n, NONCE_LEN);
			s->n++;
			return true;
		}
		if (memcmp(s->slot[i] + 1, n, NONCE_LEN) == 0)
			return false;
	}
}

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		cr_assert(n > 0, "nonce reader: %s", n ? strerror(errno) : "EOF");
		p += n;
		len -= (size_t)n;
	}
}

/* Reader process: send a u32 count and the nonces of dataset @id to @fd. */
static int dump_nonces(const char *path, uint64_t id, int fd)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_cursor *c = NULL;
	MDB_dbi dbi;
	MDB_val k, v;
	uint8_t key[16], *out = NULL;
	size_t have = 0, cap = 0;
	uint32_t cnt;
	int rc, ret = 0;

	if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
	    mdb_env_set_mapsize(env, (size_t)4 << 30) ||
	    mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY, 0600) ||
	    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, "bp", 0, &dbi) ||
	    mdb_cursor_open(txn, dbi, &c))
		return 2;
	put_be64(key, id);
	put_be64(key + 8, 0);
	k.mv_size = 16;
	k.mv_data = key;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (k.mv_size != 16 || be64(k.mv_data) != id)
			break;
		if (v.mv_size != BP_SIZE) {
			ret = 3;
			break;
		}
		if (have == cap) {
			uint8_t *n = realloc(out, cap = cap ? 2 * cap : 4096 * NONCE_LEN);

			if (!n) {
				ret = 4;
				break;
			}
			out = n;
		}
		memcpy(out + have, (const uint8_t *)v.mv_data + BP_OFF_NONCE, NONCE_LEN);
		have += NONCE_LEN;
	}
	mdb_cursor_close(c);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	cnt = ret ? UINT32_MAX : (uint32_t)(have / NONCE_LEN);
	if (write_all(fd, &cnt, sizeof(cnt)) || (!ret && write_all(fd, out, have)))
		ret = 5;
	free(out);
	return ret;
}

/*
 * One reader process for the whole test (forking an ASan process per round
 * costs more than the round): each byte on @cmd asks for a dump.
 */
struct reader {
	pid_t pid;
	int cmd, data;
};

static void reader_start(struct reader *r, struct tpool *tp, uint64_t id)
{
	char path[PATH_MAX];
	int c[2], d[2];

	lm_path(tp, path, sizeof(path));
	cr_assert_eq(pipe(c), 0);
	cr_assert_eq(pipe(d), 0);
	r->pid = fork();
	cr_assert(r->pid >= 0);
	if (r->pid == 0) {
		char b;
		int ret = 0;

		close(c[1]);
		close(d[0]);
		while (ret == 0 && read(c[0], &b, 1) == 1)
			ret = dump_nonces(path, id, d[1]);
		_exit(ret);
	}
	close(c[0]);
	close(d[1]);
	r->cmd = c[1];
	r->data = d[0];
}

static void reader_stop(struct reader *r)
{
	int status;

	close(r->cmd);
	close(r->data);
	cr_assert_eq(waitpid(r->pid, &status, 0), r->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader exited %d", status);
}

/* This round's nonces into @s; @return how many. */
static size_t collect_nonces(struct reader *r, struct nset *s, unsigned round)
{
	uint8_t *buf;
	uint32_t cnt;

	cr_assert_eq(write(r->cmd, "d", 1), 1);
	read_all(r->data, &cnt, sizeof(cnt));
	cr_assert_neq(cnt, UINT32_MAX, "reader failed to scan LMDB");
	buf = malloc((size_t)cnt * NONCE_LEN + 1);
	cr_assert_not_null(buf);
	read_all(r->data, buf, (size_t)cnt * NONCE_LEN);
	for (size_t i = 0; i < cnt; i++)
		cr_assert(nset_add(s, buf + i * NONCE_LEN),
			  "round %u: nonce repeated after %zu distinct nonces", round, s->n);
	free(buf);
	return cnt;
}

Test(encryption, no_nonce_repeats_over_a_million_writes)
{
	const char *props[] = { "encryption=aes-256-gcm", "keyformat=passphrase", ITERS };
	struct stor_ds_opts o = { .volsize = (uint64_t)N_RECS * N_RECSIZE, .recordsize = N_RECSIZE,
				  .props = props, .nprops = 3, .key = &pass_a };
	const size_t len = (size_t)N_RECS * N_RECSIZE;
	uint8_t *buf = malloc(len);
	struct nset s = { 0 };
	struct stor_ds *ds = NULL;
	struct reader rd;
	struct tpool tp;
	struct lm l;
	uint64_t id;
	int ret;

	cr_assert_not_null(buf);
	s.mask = (1u << 21) - 1;
	s.slot = calloc(s.mask + 1, sizeof(*s.slot));
	cr_assert_not_null(s.slot);
	tpool_init(&tp, 2, 64ull << 20, NULL);
	ret = stor_ds_create(tp.pool, "tank/n", &o, &ds);
	cr_assert_eq(ret, 0, "create: %s", stor_strerror(ret));
	stor_ds_close(ds);
	tpool_close(&tp);
	lm_open(&l, &tp);
	id = lm_ds_id(&l, "tank/n");
	lm_close(&l, false);
	reader_start(&rd, &tp, id);
	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/n", &pass_a);
	ds = open_ds(&tp, "tank/n");

	for (unsigned round = 0; round <= N_ROUNDS; round++) {
		if (round == N_ROUNDS / 2) {
			stor_ds_close(ds);
			tpool_reopen(&tp);
			load_key(&tp, "tank/n", &pass_a);
			ds = open_ds(&tp, "tank/n");
		}
		for (size_t i = 0; i < len; i += 8)
			memcpy(buf + i, &(uint64_t){ (uint64_t)round << 32 | i }, 8);
		write_ok(ds, 0, buf, len);
		ret = stor_pool_sync(tp.pool);
		cr_assert_eq(ret, 0, "sync: %s", stor_strerror(ret));
		cr_assert_eq(collect_nonces(&rd, &s, round), N_RECS, "round %u", round);
	}
	reader_stop(&rd);
	cr_assert_eq(s.n, (size_t)(N_ROUNDS + 1) * N_RECS);
	/* the last round reads back: the nonces were the ones used */
	read_eq(ds, 0, buf, len);
	stor_ds_close(ds);
	tpool_fini(&tp);
	free(s.slot);
	free(buf);
}

/* ---- 9. nonces of mixed batches, metadata rollback, block pointer MACs ---- */

struct nonce_id {
	uint8_t b[20]; /* key salt | nonce */
};

static int nid_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct nonce_id));
}

/* Every (key salt, nonce) of dataset @name, read from the closed pool's LMDB. */
static size_t lm_nonces(struct tpool *tp, const char *name, struct nonce_id *out, size_t cap)
{
	uint8_t prefix[8];
	MDB_cursor *cur;
	MDB_val k, v;
	struct lm l;
	size_t n = 0;
	int rc;

	lm_open(&l, tp);
	put_be64(prefix, lm_ds_id(&l, name));
	cr_assert_eq(mdb_cursor_open(l.txn, l.bp, &cur), 0);
	k = (MDB_val){ sizeof(prefix), prefix };
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	     rc == 0 && k.mv_size == 16 && memcmp(k.mv_data, prefix, 8) == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		cr_assert_lt(n, cap);
		cr_assert_eq(v.mv_size, BP_SIZE);
		memcpy(out[n++].b, (const uint8_t *)v.mv_data + BP_OFF_SALT, 20);
	}
	mdb_cursor_close(cur);
	lm_close(&l, false);
	return n;
}

static void assert_unique(struct nonce_id *ids, size_t n, const char *what)
{
	qsort(ids, n, sizeof(*ids), nid_cmp);
	for (size_t i = 1; i < n; i++)
		cr_assert(nid_cmp(&ids[i - 1], &ids[i]) != 0, "%s: a (key salt, nonce) repeats", what);
}

static void assert_verified(struct tpool *tp, uint64_t min_encrypted)
{
	struct stor_verify_report rep;
	int ret = stor_pool_verify(tp->pool, &rep);

	stor_verify_report_free(&rep);
	cr_assert_eq(ret, 0, "verify: %s", stor_strerror(ret));
	cr_assert_eq(rep.mac_errors, 0, "verify: %llu MAC groups or roots fail",
		     (unsigned long long)rep.mac_errors);
	cr_assert_eq(rep.nonce_repeats, 0, "verify: %llu nonces repeat",
		     (unsigned long long)rep.nonce_repeats);
	cr_assert_eq(rep.cksum_errors, 0, "verify: %llu checksum errors",
		     (unsigned long long)rep.cksum_errors);
	cr_assert_geq(rep.encrypted, min_encrypted);
}

/*
 * A whole-record discard ahead of writes of the same dataset in one batch
 * once sealed the write under the nonce of the dataset's first record:
 * holes, failed requests and writes of several datasets, all in one submit.
 */
Test(encryption, mixed_batch_gives_every_sealed_record_its_own_nonce)
{
	uint8_t rec[4][RECSIZE];
	struct stor_ds *a, *b, *c;
	struct nonce_id ids[64];
	struct tpool tp;
	size_t n;

	tpool_init(&tp, 2, LUN_SIZE, NULL);
	a = enc_ds(&tp, "tank/a", "aes-256-ccm", &pass_a);
	b = enc_ds(&tp, "tank/b", "aes-128-gcm", &pass_b);
	c = tpool_ds(&tp, "tank/c", VOLSIZE, RECSIZE);
	for (int i = 0; i < 4; i++)
		tpat_fill(rec[i], RECSIZE, (uint64_t)i, 9);
	write_ok(a, 7 * RECSIZE, rec[0], RECSIZE); /* the first nonce of each block */
	write_ok(b, 7 * RECSIZE, rec[0], RECSIZE);
	for (int round = 0; round < 2; round++) {
		struct stor_io io[] = {
			{ .ds = a, .op = STOR_IO_DISCARD, .off = 0, .len = RECSIZE },
			{ .ds = a, .op = STOR_IO_WRITE, .off = RECSIZE, .len = RECSIZE, .buf = rec[1] },
			{ .ds = a, .op = STOR_IO_WRITE, .off = VOLSIZE, .len = RECSIZE, .buf = rec[2] },
			{ .ds = a, .op = STOR_IO_DISCARD, .off = 2 * RECSIZE + 100, .len = 200 },
			{ .ds = b, .op = STOR_IO_DISCARD, .off = 0, .len = 2 * RECSIZE },
			{ .ds = b, .op = STOR_IO_WRITE, .off = 2 * RECSIZE, .len = RECSIZE, .buf = rec[2] },
			{ .ds = c, .op = STOR_IO_WRITE, .off = RECSIZE, .len = RECSIZE, .buf = rec[1] },
			{ .ds = a, .op = STOR_IO_WRITE, .off = 3 * RECSIZE, .len = RECSIZE, .buf = rec[3] },
			{ .ds = b, .op = STOR_IO_WRITE, .off = 3 * RECSIZE, .len = RECSIZE, .buf = rec[3] },
		};
		cr_assert_eq(stor_io_submit(io, sizeof(io) / sizeof(io[0])), 1,
			     "only the out-of-range write fails");
		cr_assert_eq(io[2].result, STOR_ERANGE);
		assert_verified(&tp, 7);
		read_eq(a, RECSIZE, rec[1], RECSIZE);
		read_eq(a, 3 * RECSIZE, rec[3], RECSIZE);
		read_eq(b, 3 * RECSIZE, rec[3], RECSIZE);
	}
	stor_ds_close(a);
	stor_ds_close(b);
	stor_ds_close(c);
	tpool_close(&tp);
	n = lm_nonces(&tp, "tank/a", ids, 64);
	cr_assert_eq(n, 4); /* records 1, 2 (partial discard: zeros), 3, 7 */
	assert_unique(ids, n, "tank/a");
	n = lm_nonces(&tp, "tank/b", ids, 64);
	cr_assert_eq(n, 3);
	assert_unique(ids, n, "tank/b");
	tpool_fini(&tp);
}

/* Copy a sparse file (LMDB with MDB_WRITEMAP is as long as its map) by its data extents. */
static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	static char buf[1 << 16];
	off_t end, data, hole;

	cr_assert(in >= 0 && out >= 0, "copy %s -> %s", from, to);
	end = lseek(in, 0, SEEK_END);
	cr_assert_eq(ftruncate(out, end), 0);
	for (data = lseek(in, 0, SEEK_DATA); data >= 0 && data < end;
	     data = lseek(in, hole, SEEK_DATA)) {
		hole = lseek(in, data, SEEK_HOLE);
		for (off_t o = data; o < hole;) {
			size_t want = (size_t)(hole - o < (off_t)sizeof(buf) ? hole - o : (off_t)sizeof(buf));
			ssize_t r = pread(in, buf, want, o);
			cr_assert_gt(r, 0);
			cr_assert_eq(pwrite(out, buf, (size_t)r, o), r);
			o += r;
		}
	}
	close(in);
	close(out);
}

static void state_files(struct tpool *tp, const char *suffix, bool save)
{
	static const char *const ext[] = { "mdb", "keys" };

	for (int i = 0; i < 2; i++) {
		char live[PATH_MAX], kept[PATH_MAX + 8];

		snprintf(live, sizeof(live), "%s/pools/%s.%s", tp->state, tp->name, ext[i]);
		snprintf(kept, sizeof(kept), "%s%s", live, suffix);
		if (save)
			copy_file(live, kept);
		else
			copy_file(kept, live);
	}
}

/* Open the pool again and write records 1 to 8 of tank/a, generation @gen. */
static void rewrite_records(struct tpool *tp, uint64_t gen)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;

	cr_assert_eq(tpool_open(tp), 0);
	load_key(tp, "tank/a", &pass_a);
	ds = open_ds(tp, "tank/a");
	for (uint64_t r = 1; r < 9; r++)
		write_ok(ds, r * RECSIZE, (tpat_fill(buf, RECSIZE, r, gen), buf), RECSIZE);
	stor_ds_close(ds);
	tpool_close(tp);
}

/*
 * A state_dir restored from a backup (or a VM reverted) puts the metadata
 * back in time; nonces must still never repeat under one key, which a
 * counter kept in that metadata cannot promise.
 */
Test(encryption, nonces_stay_unique_across_a_metadata_rollback)
{
	uint8_t buf[RECSIZE];
	struct nonce_id ids[64], again[9];
	struct stor_ds *ds;
	struct tpool tp;
	size_t n;

	ds = pool_with_enc_ds(&tp, "tank/a", "aes-256-gcm", &pass_a);
	write_ok(ds, 0, (tpat_fill(buf, RECSIZE, 0, 1), buf), RECSIZE);
	stor_ds_close(ds);
	tpool_close(&tp);
	state_files(&tp, ".old", true);
	/* writes after the backup... */
	rewrite_records(&tp, 2);
	n = lm_nonces(&tp, "tank/a", ids, 64);
	cr_assert_eq(n, 9);
	/* ...then the backup is put back and the same records written again */
	state_files(&tp, ".old", false);
	rewrite_records(&tp, 3);
	/* record 0 (first in key order) is the one pointer both timelines share */
	cr_assert_eq(lm_nonces(&tp, "tank/a", again, 9), 9);
	memcpy(ids + n, again + 1, 8 * sizeof(*ids));
	n += 8;
	assert_unique(ids, n, "before and after the rollback");
	tpool_fini(&tp);
}

/* Reopen, load the key, read @rec: it must fail with @want and return nothing. */
static void assert_read_fails(struct tpool *tp, uint64_t rec, bool with_key, int want,
			      const void *forged, const char *what)
{
	uint8_t got[RECSIZE];
	struct stor_ds *ds;
	int ret = tpool_open(tp);

	cr_assert_eq(ret, 0, "%s: reopen: %s (%s)", what, stor_errname(ret), stor_pool_last_error());
	if (with_key)
		load_key(tp, "tank/a", &pass_a);
	ds = open_ds(tp, "tank/a");
	ret = stor_ds_read(ds, rec * RECSIZE, got, sizeof(got));
	cr_assert_eq(ret, want, "%s: read got %s, want %s", what, stor_errname(ret),
		     stor_errname(want));
	if (forged)
		cr_assert(memcmp(got, forged, RECSIZE) != 0, "%s: the forged bytes came back", what);
	stor_ds_close(ds);
	tpool_close(tp);
}

/* A pointer that claims clear inside an encrypted dataset, with plaintext at its extent. */
Test(encryption, clear_flagged_pointer_in_encrypted_dataset_is_rejected)
{
	uint8_t bp[BP_SIZE], forged[RECSIZE];
	struct tpool tp;
	struct lm l;
	uint64_t id;
	int fd;

	id = tamper_open(&tp, &l);
	lm_bp_get(&l, id, 1, bp);
	bp[BP_OFF_FLAGS] = 0;
	bp[BP_OFF_COMP] = 0;
	memset(bp + BP_OFF_MAC, 0, 16); /* "no checksum", as checksum=off writes */
	lm_bp_put(&l, id, 1, bp);
	lm_close(&l, true);
	memset(forged, 'F', sizeof(forged));
	fd = open(tp.lun[bp[BP_OFF_LUN] << 8 | bp[BP_OFF_LUN + 1]], O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, forged, RECSIZE, (off_t)(DATA_OFF + be64(bp + BP_OFF_SECTOR) *
								  STOR_SECTOR)),
		     RECSIZE);
	close(fd);
	assert_read_fails(&tp, 1, true, STOR_EAUTH, forged, "clear flag, key loaded");
	assert_read_fails(&tp, 1, false, STOR_ENOKEY, forged, "clear flag, key unloaded");
	tpool_fini(&tp);
}

/* A pointer deleted (the record would read as zeros) or its compression flag flipped. */
Test(encryption, deleted_or_reflagged_pointer_is_rejected)
{
	uint8_t bp[BP_SIZE];
	struct tpool tp;
	struct lm l;
	uint64_t id;

	id = tamper_open(&tp, &l);
	lm_bp_del(&l, id, 2);
	lm_bp_get(&l, id, 3, bp);
	bp[BP_OFF_COMP] = 1;
	lm_bp_put(&l, id, 3, bp);
	lm_close(&l, true);
	assert_read_fails(&tp, 2, true, STOR_EAUTH, NULL, "deleted pointer");
	assert_read_fails(&tp, 3, true, STOR_EAUTH, NULL, "compression flag");
	tpool_fini(&tp);
}

/* One byte of the dataset record, its suite, turned to 0 (clear). */
Test(encryption, suite_byte_turned_clear_refuses_the_import)
{
	struct tpool tp;
	struct lm l;
	MDB_val k = { 6, (void *)"tank/a" }, v;
	uint8_t *rec;
	int ret;

	tamper_setup(&tp);
	lm_open(&l, &tp);
	cr_assert_eq(mdb_get(l.txn, l.ds, &k, &v), 0);
	rec = malloc(v.mv_size);
	cr_assert_not_null(rec);
	memcpy(rec, v.mv_data, v.mv_size);
	/* the suite byte, before the tail (dataset.c): u64 origin | u16 0 sealers |
	 * u64 creation | u16 0 user properties */
	cr_assert_eq(rec[v.mv_size - 21], 3 + 2, "suite byte of aes-256-gcm");
	rec[v.mv_size - 21] = 0;
	v.mv_data = rec;
	cr_assert_eq(mdb_put(l.txn, l.ds, &k, &v, 0), 0);
	lm_close(&l, true);
	free(rec);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, STOR_ECORRUPT, "import of a dataset turned clear: %s", stor_errname(ret));
	cr_assert(strstr(stor_pool_last_error(), "tank/a"), "message names the dataset: %s",
		  stor_pool_last_error());
	tpool_fini(&tp);
}

/* The root of a dataset's MACs deleted: load-key refuses, naming the dataset. */
Test(encryption, missing_mac_root_refuses_load_key)
{
	uint8_t key[16];
	MDB_val k = { 16, key };
	struct tpool tp;
	struct lm l;
	int ret;

	tamper_setup(&tp);
	lm_open(&l, &tp);
	put_be64(key, lm_ds_id(&l, "tank/a"));
	put_be64(key + 8, UINT64_MAX);
	cr_assert_eq(mdb_del(l.txn, l.mac, &k, NULL), 0);
	lm_close(&l, true);
	cr_assert_eq(tpool_open(&tp), 0);
	ret = stor_key_load(tp.pool, "tank/a", &pass_a, 0);
	cr_assert_eq(ret, STOR_EAUTH, "load-key: %s", stor_errname(ret));
	cr_assert(strstr(stor_pool_last_error(), "tank/a"), "message names the dataset: %s",
		  stor_pool_last_error());
	assert_prop(&tp, "tank/a", "keystatus", "unavailable");
	tpool_fini(&tp);
}

/* Discards are changes: a locked dataset refuses them like writes. */
Test(encryption, discard_of_a_locked_dataset_is_refused)
{
	uint8_t buf[RECSIZE];
	struct stor_ds *ds;
	struct tpool tp;

	tamper_setup(&tp);
	cr_assert_eq(tpool_open(&tp), 0);
	ds = open_ds(&tp, "tank/a");
	cr_assert_eq(stor_ds_discard(ds, 0, RECSIZE), STOR_ENOKEY);
	cr_assert_eq(stor_ds_discard(ds, RECSIZE + 10, 100), STOR_ENOKEY);
	load_key(&tp, "tank/a", &pass_a);
	tpat_fill(buf, sizeof(buf), 0, 1);
	read_eq(ds, 0, buf, RECSIZE);
	tpat_fill(buf, sizeof(buf), 1, 1);
	read_eq(ds, RECSIZE, buf, RECSIZE);
	stor_ds_close(ds);
	tpool_fini(&tp);
}

/*
 * Each key load draws a new nonce block, so a dataset written across many
 * loads has as many data keys. Past the cache of a key state, reads use a
 * key of their own and still open every record.
 */
Test(encryption, records_of_more_nonce_blocks_than_the_key_cache_all_read_back, .timeout = 600)
{
	static const uint8_t raw[32] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
					 0xcc, 0xdd, 0xee, 0xf0, 0x01, 0x12, 0x23, 0x34, 0x45, 0x56,
					 0x67, 0x78, 0x89, 0x9a, 0xab, 0xbc, 0xcd, 0xde, 0xef, 0xf1, 0x02 };
	const struct stor_key_material k = { raw, sizeof(raw) };
	const char *props[] = { "encryption=aes-128-gcm", "keyformat=raw" };
	const unsigned nrec = 4096 + 40, rs = 512;
	struct stor_ds_opts o = { .volsize = (uint64_t)nrec * rs, .recordsize = rs, .props = props,
				  .nprops = 2, .key = &k };
	uint8_t buf[512], got[512];
	struct stor_ds *ds = NULL;
	struct tpool tp;

	tpool_init(&tp, 1, 64ull << 20, NULL);
	cr_assert_eq(stor_ds_create(tp.pool, "tank/many", &o, &ds), 0);
	for (unsigned r = 0; r < nrec; r++) {
		tpat_fill(buf, rs, r, 1);
		write_ok(ds, (uint64_t)r * rs, buf, rs);
		/* the next write draws a new block under a new key state */
		cr_assert_eq(stor_key_unload(tp.pool, "tank/many", STOR_FORCE), 0);
		cr_assert_eq(stor_key_load(tp.pool, "tank/many", &k, 0), 0);
	}
	for (unsigned r = 0; r < nrec; r++) {
		int ret = stor_ds_read(ds, (uint64_t)r * rs, got, rs);

		cr_assert_eq(ret, 0, "record %u: %s", r, stor_errname(ret));
		cr_assert_eq(tpat_check(got, rs, r), 1, "record %u", r);
	}
	stor_ds_close(ds);
	tpool_close(&tp);
	{
		struct nonce_id *ids = calloc(nrec, sizeof(*ids));
		cr_assert_not_null(ids);
		cr_assert_eq(lm_nonces(&tp, "tank/many", ids, nrec), nrec);
		assert_unique(ids, nrec, "one record per nonce block");
		free(ids);
	}
	tpool_fini(&tp);
}

/* Flip a byte in the middle of key file copy @copy (0: .keys, 1: .keys.1). */
static void keyfile_damage(struct tpool *tp, int copy)
{
	char path[PATH_MAX];
	struct stat st;
	uint8_t b;
	int fd;

	snprintf(path, sizeof(path), "%s/pools/%s.keys%s", tp->state, tp->name, copy ? ".1" : "");
	fd = open(path, O_RDWR);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(pread(fd, &b, 1, st.st_size / 2), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, st.st_size / 2), 1);
	close(fd);
}

/* One damaged byte in the key file locked every dataset out; now its copy answers. */
Test(encryption, a_damaged_key_file_copy_is_rewritten_from_the_other)
{
	struct stor_pool_stat st;
	struct tpool tp;
	int ret;

	stor_ds_close(pool_with_enc_ds(&tp, "tank/a", "aes-256-gcm", &pass_a));
	for (int copy = 0; copy < 2; copy++) {
		tpool_close(&tp);
		keyfile_damage(&tp, copy);
		ret = tpool_open(&tp);
		cr_assert_eq(ret, 0, "copy %d damaged: %s (%s)", copy, stor_errname(ret),
			     stor_pool_last_error());
		cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
		cr_assert(strstr(st.key_file, "damaged; rewritten"), "pool status: %s", st.key_file);
		load_key(&tp, "tank/a", &pass_a);
		/* rewritten: the next import finds both copies sound */
		tpool_reopen(&tp);
		cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
		cr_assert_str_eq(st.key_file, "");
	}
	/* both damaged: the LUNs hold the key file too, and it is rebuilt from them */
	tpool_close(&tp);
	keyfile_damage(&tp, 0);
	keyfile_damage(&tp, 1);
	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "both copies damaged: %s (%s)", stor_errname(ret),
		     stor_pool_last_error());
	cr_assert_eq(stor_pool_stat(tp.pool, &st), 0);
	cr_assert(strstr(st.meta_log, "key file rebuilt from the LUNs"), "status: %s", st.meta_log);
	load_key(&tp, "tank/a", &pass_a);
	tpool_fini(&tp);
}

/*
 * The MAC change of a pointer staged again in one txg uses the leaf kept
 * with the staged pointer (txg.c): records written, overwritten and
 * discarded many times between commits, then every group is verified from
 * LMDB after a reopen and every record reads back its last version.
 */
Test(encryption, records_rewritten_within_a_txg_keep_their_group_macs_true)
{
	enum { RECS = VOLSIZE / RECSIZE, OPS = 3000 };
	static uint8_t buf[RECSIZE], got[RECSIZE];
	unsigned version[RECS] = { 0 };
	uint64_t x = 0x9e3779b97f4a7c15ull;
	struct stor_ds *ds;
	struct tpool tp;
	int ret;

	ds = pool_with_enc_ds(&tp, "tank/a", "aes-256-ccm", &pass_a);
	for (unsigned i = 1; i <= OPS; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned r = (unsigned)(x % 24); /* few records: most writes hit a staged one */

		if (x % 7 == 0) {
			cr_assert_eq(stor_ds_discard(ds, (uint64_t)r * RECSIZE, RECSIZE), 0);
			version[r] = 0;
		} else {
			tpat_fill(buf, sizeof(buf), r, i);
			write_ok(ds, (uint64_t)r * RECSIZE, buf, sizeof(buf));
			version[r] = i;
		}
		if (i % 500 == 0)
			cr_assert_eq(stor_pool_sync(tp.pool), 0);
	}
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	stor_ds_close(ds);
	tpool_close(&tp);

	cr_assert_eq(tpool_open(&tp), 0);
	load_key(&tp, "tank/a", &pass_a);
	ds = open_ds(&tp, "tank/a");
	for (unsigned r = 0; r < RECS; r++) {
		ret = stor_ds_read(ds, (uint64_t)r * RECSIZE, got, sizeof(got));
		cr_assert_eq(ret, 0, "record %u: %s", r, stor_errname(ret));
		if (version[r])
			tpat_fill(buf, sizeof(buf), r, version[r]);
		else
			memset(buf, 0, sizeof(buf));
		cr_assert(memcmp(got, buf, sizeof(buf)) == 0, "record %u is not its last version", r);
	}
	stor_ds_close(ds);
	tpool_fini(&tp);
}
