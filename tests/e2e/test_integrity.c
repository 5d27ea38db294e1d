// SPDX-License-Identifier: MIT
/*
 * E2E: crypto integrity against an attacker who holds the LUN files and the
 * pool's LMDB file. The real cofferd and coffer run over real files; the
 * attacker works with the daemon stopped (tamper.c), and the daemon is
 * started again to see what a client gets.
 *
 * - Mixed bursts of DISCARD, WRITE, failed requests and holes, pipelined on
 *   several connections over datasets of three suites and a clear one, must
 *   never seal two records of a dataset under one (key salt, nonce): the
 *   extents on the LUNs are checked directly (no two give the same
 *   keystream against their known plaintext) and by stor_pool_verify, after
 *   a restart and after change-key too.
 * - A block pointer flagged clear inside an encrypted dataset, a dataset
 *   record whose suite byte says "off", a replayed block pointer, block
 *   pointers swapped between datasets of one key root and a deleted "mac"
 *   root must each be refused; no forged byte is ever returned.
 * - A state dir put back to an earlier copy must not make the engine hand
 *   out a nonce it used for the records written in between.
 * - DISCARD, whole or partial, with the key unloaded changes nothing.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <lmdb.h>
#include <xxhash.h>

#include "client.h"
#include "daemon.h"
#include "kv/format.h" /* FORMAT_VERSION only: whether stor_pool_verify exists */
#include "store.h"
#include "tamper.h"

static struct tdaemon td;
static char out[65536];
static char key1[PATH_MAX], key2[PATH_MAX];
static struct tamper *cur_tamper; /* closed by teardown when a test stops early */

#define cof(...) tdaemon_cofferf(&td, NULL, out, sizeof(out), __VA_ARGS__)
#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

#define NLUNS 2
#define RS 4096u             /* record size of every dataset here */
#define VOL (2u << 20)       /* volume size: records of two MAC groups (256 records each) */
#define NREC (VOL / RS)
#define DEADLINE_MS 60000    /* for completions on a loaded machine */

#ifndef TEST_DIRECT_IO
#define TEST_DIRECT_IO 0
#endif

static void setup(void)
{
	uint8_t k[32];

	/* built twice: test_integrity_direct reads through the loop's ring */
	tdaemon_init(&td, TEST_DIRECT_IO ? "direct_io = yes" : NULL);
	for (int i = 0; i < 32; i++)
		k[i] = (uint8_t)(0x3c ^ i * 29);
	snprintf(key1, sizeof(key1), "%s", tdaemon_file(&td, "key1", k, sizeof(k)));
	for (int i = 0; i < 32; i++)
		k[i] = (uint8_t)(0xc3 ^ i * 53);
	snprintf(key2, sizeof(key2), "%s", tdaemon_file(&td, "key2", k, sizeof(k)));
	tdaemon_start_ok(&td);
}

static void teardown(void)
{
	tamper_close(cur_tamper);
	tdaemon_teardown(&td);
}

TestSuite(integrity, .init = setup, .fini = teardown, .timeout = 240);

/* ---- helpers ---- */

/*
 * A daemon that stopped but not cleanly (a leak report) is a failure, yet the
 * files it left are still the attacker's to look at: go on.
 */
static void stop(void)
{
	int st = tdaemon_stop(&td);

	cr_expect_eq(st, 0, "cofferd exit %d:\n%s", st, tdaemon_log(&td));
	cr_assert_leq(td.pid, 0);
}

static off_t log_size(void)
{
	struct stat st;

	return stat(td.log, &st) == 0 ? st.st_size : 0;
}

/* The daemon's stderr from byte @from on (static buffer). */
static const char *log_since(off_t from)
{
	static char buf[65536];
	int fd = open(td.log, O_RDONLY);
	ssize_t n = 0;

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	n = pread(fd, buf, sizeof(buf) - 1, from);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void start(void)
{
	tdaemon_start_ok(&td);
}

static const char *lun_path(unsigned i)
{
	static char path[NLUNS][PATH_MAX];

	cr_assert_lt(i, NLUNS, "block pointer names LUN %u of a %u-LUN pool", i, NLUNS);
	snprintf(path[i], sizeof(path[i]), "%s/l%u", td.dir, i);
	return path[i];
}

static const char *mdb_path(void)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/pools/tank.mdb", td.state);
	return path;
}

static struct tamper *tam(void)
{
	struct tamper *t = NULL;
	int ret = tamper_open(mdb_path(), &t);

	cr_assert_eq(ret, 0, "open %s: %d", mdb_path(), ret);
	cur_tamper = t;
	return t;
}

static void untam(struct tamper *t)
{
	tamper_close(t);
	cur_tamper = NULL;
}

static uint64_t ds_id(struct tamper *t, const char *name)
{
	uint64_t id = 0;
	int ret = tamper_ds_id(t, name, &id);

	cr_assert_eq(ret, 0, "no dataset record for %s: %d", name, ret);
	return id;
}

static void pool_create(void)
{
	COF_OK("pool create -s 24M tank %s %s", lun_path(0), lun_path(1));
}

/* An encryption root with a raw key in key1. */
static void create_root(const char *name, const char *suite)
{
	COF_OK("create -V %u -b %u -o encryption=%s -o keyformat=raw -o keylocation=file://%s %s",
	       VOL, RS, suite, key1, name);
}

/* Deterministic incompressible bytes that name (@seed) in every 64 bytes. */
static void pat(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++) {
		if (i % 8 == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (uint8_t)(x >> (8 * (i % 8)));
	}
}

/* `coffer write` @len bytes of pattern @seed at @off. @return the exit status */
static int write_pat(const char *ds, uint64_t off, size_t len, uint64_t seed)
{
	uint8_t *b = malloc(len);
	const char *f;
	int st;

	cr_assert_not_null(b);
	pat(b, len, seed);
	f = tdaemon_file(&td, "in", b, len);
	free(b);
	st = tdaemon_cofferf(&td, f, out, sizeof(out), "write -o %llu %s",
			     (unsigned long long)off, ds);
	return st;
}

/*
 * `coffer read` @len bytes at @off into @dst (zeroed first; what came out on
 * stdout lands there, *got bytes). @out holds stderr. @return the exit status
 */
static int read_rec(const char *ds, uint64_t off, size_t len, uint8_t *dst, size_t *got)
{
	char path[PATH_MAX];
	int st, fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/read.out", td.dir);
	unlink(path);
	st = cof("read -o %llu -l %zu %s > '%s'", (unsigned long long)off, len, ds, path);
	memset(dst, 0, len);
	*got = 0;
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		n = read(fd, dst, len);
		*got = n > 0 ? (size_t)n : 0;
		close(fd);
	}
	return st;
}

static int has_authfail(const char *s)
{
	return strcasestr(s, "authenticat") != NULL;
}

/* No 32-byte window of @p (len @plen) anywhere in @hay. */
static int leaks(const uint8_t *hay, size_t hlen, const uint8_t *p, size_t plen)
{
	for (size_t i = 0; i + 32 <= plen; i += 32)
		if (memmem(hay, hlen, p + i, 32))
			return 1;
	return 0;
}

/* Places on every LUN where the first 64 bytes of @p are stored. */
static long on_luns(const uint8_t *p)
{
	long n = 0;

	for (unsigned i = 0; i < NLUNS; i++) {
		long r = tlun_find(lun_path(i), p, 64);

		cr_assert_geq(r, 0, "scan %s: %ld", lun_path(i), r);
		n += r;
	}
	return n;
}

/* Offline verify of the stopped daemon's pool through libstore. */
static void offline_verify(const char *when, uint64_t nenc)
{
#if FORMAT_VERSION >= 2
	struct stor_pool_opts o = { .state_dir = td.state };
	struct stor_verify_report rep = { 0 };
	struct stor_pool *p = NULL;
	int ret = stor_pool_open("tank", &o, &p);

	cr_assert_eq(ret, 0, "%s: open pool offline: %s (%s)", when, stor_strerror(ret),
		     stor_pool_last_error());
	ret = stor_pool_verify(p, &rep);
	stor_verify_report_free(&rep);
	cr_assert_eq(ret, 0, "%s: stor_pool_verify: %s", when, stor_strerror(ret));
	cr_assert_eq(stor_pool_close(p), 0);
	cr_log_info("%s: verify: %llu records, %llu encrypted, %llu nonce repeats, %llu cksum "
		    "errors",
		    when, (unsigned long long)rep.records, (unsigned long long)rep.encrypted,
		    (unsigned long long)rep.nonce_repeats, (unsigned long long)rep.cksum_errors);
	cr_expect_eq(rep.nonce_repeats, 0, "%s: stor_pool_verify found %llu nonce repeats", when,
		     (unsigned long long)rep.nonce_repeats);
	cr_expect_eq(rep.cksum_errors, 0, "%s: stor_pool_verify found %llu checksum errors", when,
		     (unsigned long long)rep.cksum_errors);
	cr_expect_eq(rep.encrypted, nenc, "%s: stor_pool_verify saw %llu encrypted records, the "
		     "block pointer table holds %llu", when, (unsigned long long)rep.encrypted,
		     (unsigned long long)nenc);
#else
	(void)nenc;
	cr_expect_fail("%s: this engine (format %u) has no stor_pool_verify", when,
		       FORMAT_VERSION);
#endif
}

/* ==== 1. mixed bursts over the wire ==== */

/* every encrypted one is an encryption root of its own (a local suite makes one) */
static const struct {
	const char *name, *suite; /* suite NULL: clear */
} bds[] = {
	{ "tank/c256", "aes-256-ccm" },
	{ "tank/g128", "aes-128-gcm" },
	{ "tank/c192", "aes-192-ccm" },
	{ "tank/clear", NULL },
};
#define NDS (sizeof(bds) / sizeof(bds[0]))
#define NCONN 3

static uint8_t *model[NDS]; /* what each volume must hold */
static uint64_t rng = 0x1234567;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct req {
	uint32_t id;
	enum coffer_op op;
	int handle;
	uint64_t off;
	uint32_t len;
	uint8_t *buf;
	int ds;     /* index into bds */
	int fail;   /* must fail */
	int done;
	int status;
	uint8_t *want; /* READ: the expected bytes */
};

struct burst {
	struct coffer_conn *c[NCONN];
	int h[NCONN][NDS];
	struct req *reqs[NCONN];
	size_t nreq[NCONN], cap[NCONN];
	uint32_t next_id;
	unsigned gen;
};

static struct req *add(struct burst *b, int conn, enum coffer_op op, int ds, uint64_t off,
		       uint32_t len)
{
	struct req *r;

	if (b->nreq[conn] == b->cap[conn]) {
		b->cap[conn] = b->cap[conn] ? 2 * b->cap[conn] : 64;
		b->reqs[conn] = realloc(b->reqs[conn], b->cap[conn] * sizeof(*r));
		cr_assert_not_null(b->reqs[conn]);
	}
	r = &b->reqs[conn][b->nreq[conn]++];
	*r = (struct req){ .id = ++b->next_id, .op = op, .ds = ds, .off = off, .len = len,
			   .handle = b->h[conn][ds] };
	if (op == COFFER_WRITE || op == COFFER_READ) {
		r->buf = malloc(len ? len : 1);
		cr_assert_not_null(r->buf);
	}
	return r;
}

static void burst_open(struct burst *b)
{
	memset(b, 0, sizeof(*b));
	for (int c = 0; c < NCONN; c++) {
		int ret = coffer_connect(td.sock, &b->c[c]);

		cr_assert_eq(ret, 0, "connect: %s", strerror(-ret));
		for (size_t d = 0; d < NDS; d++) {
			b->h[c][d] = coffer_ds_open(b->c[c], bds[d].name, NULL, NULL);
			cr_assert_geq(b->h[c][d], 0, "open %s: %d", bds[d].name, b->h[c][d]);
		}
	}
}

static void burst_close(struct burst *b)
{
	for (int c = 0; c < NCONN; c++)
		coffer_close(b->c[c]);
}

/*
 * One round: every dataset gets requests on records no other request of the
 * round touches (so the result does not depend on which connection's
 * request the daemon runs first), in a random order per connection:
 * whole-record and partial writes and discards, discards of two records,
 * reads, and requests that must fail. All are queued first and sent at once,
 * so they arrive together and the workers batch them.
 */
static void burst_round(struct burst *b)
{
	uint8_t used[NDS][NREC];

	memset(used, 0, sizeof(used));
	b->gen++;
	for (size_t d = 0; d < NDS; d++) {
		for (int k = 0; k < 40; k++) {
			int conn = (int)(rnd() % NCONN), kind = (int)(rnd() % 100);
			uint64_t r = rnd() % NREC, a, l;
			struct req *q;

			if (used[d][r])
				continue;
			used[d][r] = 1;
			if (kind < 30) { /* whole record */
				q = add(b, conn, COFFER_WRITE, (int)d, r * RS, RS);
				pat(q->buf, RS, (uint64_t)d << 40 | r << 8 | b->gen);
				memcpy(model[d] + r * RS, q->buf, RS);
			} else if (kind < 45) { /* partial */
				a = 1 + rnd() % (RS - 2);
				l = 1 + rnd() % (RS - a - 1);
				q = add(b, conn, COFFER_WRITE, (int)d, r * RS + a, (uint32_t)l);
				pat(q->buf, l, (uint64_t)d << 40 | r << 8 | b->gen | 1ull << 60);
				memcpy(model[d] + r * RS + a, q->buf, l);
			} else if (kind < 58) { /* whole-record discard: a hole */
				add(b, conn, COFFER_DISCARD, (int)d, r * RS, RS);
				memset(model[d] + r * RS, 0, RS);
			} else if (kind < 64 && r + 1 < NREC && !used[d][r + 1]) {
				used[d][r + 1] = 1;
				add(b, conn, COFFER_DISCARD, (int)d, r * RS, 2 * RS);
				memset(model[d] + r * RS, 0, 2 * RS);
			} else if (kind < 76) { /* partial discard: zeros inside a record */
				a = rnd() % (RS / 2);
				l = 1 + rnd() % (RS / 2 - 1);
				add(b, conn, COFFER_DISCARD, (int)d, r * RS + a, (uint32_t)l);
				memset(model[d] + r * RS + a, 0, l);
			} else if (kind < 86) { /* read, holes included */
				q = add(b, conn, COFFER_READ, (int)d, r * RS, RS);
				q->want = malloc(RS);
				cr_assert_not_null(q->want);
				memcpy(q->want, model[d] + r * RS, RS);
			} else if (kind < 91) { /* past the end of the volume */
				used[d][r] = 0;
				q = add(b, conn, COFFER_WRITE, (int)d, VOL - RS / 2, RS);
				pat(q->buf, RS, rnd());
				q->fail = 1;
			} else if (kind < 95) { /* discard past the end */
				used[d][r] = 0;
				q = add(b, conn, COFFER_DISCARD, (int)d, VOL + RS, RS);
				q->fail = 1;
			} else { /* a handle this connection never opened */
				used[d][r] = 0;
				q = add(b, conn, COFFER_WRITE, (int)d, r * RS, RS);
				pat(q->buf, RS, rnd());
				q->handle = 4000 + (int)d;
				q->fail = 1;
			}
		}
	}
	/* shuffle each connection's list: discards land before and after writes */
	for (int c = 0; c < NCONN; c++)
		for (size_t i = b->nreq[c]; i > 1; i--) {
			size_t j = rnd() % i;
			struct req t = b->reqs[c][i - 1];

			b->reqs[c][i - 1] = b->reqs[c][j];
			b->reqs[c][j] = t;
		}
	for (int c = 0; c < NCONN; c++)
		for (size_t i = 0; i < b->nreq[c]; i++) {
			struct req *q = &b->reqs[c][i];
			int ret = coffer_submit(b->c[c], q->id, q->op, q->handle, q->off, q->len,
						q->buf);

			cr_assert_eq(ret, 0, "submit: %d", ret);
		}
	for (int c = 0; c < NCONN; c++)
		cr_assert_eq(coffer_flush_out(b->c[c]), 0);
	for (int c = 0; c < NCONN; c++) {
		size_t left = b->nreq[c];
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (left) {
			struct coffer_completion cc[64];
			int n = coffer_reap(b->c[c], cc, 64, 1000);

			cr_assert_geq(n, 0, "reap: %d", n);
			for (int i = 0; i < n; i++)
				for (size_t k = 0; k < b->nreq[c]; k++) {
					struct req *q = &b->reqs[c][k];

					if (q->id != cc[i].id || q->done)
						continue;
					q->done = 1;
					q->status = cc[i].status;
					left--;
					break;
				}
			clock_gettime(CLOCK_MONOTONIC, &t1);
			cr_assert_lt((t1.tv_sec - t0.tv_sec) * 1000, DEADLINE_MS,
				     "%zu requests of connection %d never completed:\n%s", left, c,
				     tdaemon_log(&td));
		}
	}
	for (int c = 0; c < NCONN; c++) {
		for (size_t i = 0; i < b->nreq[c]; i++) {
			struct req *q = &b->reqs[c][i];

			if (q->fail)
				cr_expect_lt(q->status, 0, "%s %s at %llu+%u (handle %d) succeeded",
					     q->op == COFFER_WRITE ? "write" : "discard",
					     bds[q->ds].name, (unsigned long long)q->off, q->len,
					     q->handle);
			else
				cr_expect_eq(q->status, 0, "op %d on %s at %llu+%u: status %d", q->op,
					     bds[q->ds].name, (unsigned long long)q->off, q->len,
					     q->status);
			if (q->want && q->status == 0)
				cr_expect(!memcmp(q->buf, q->want, q->len),
					  "read of %s at %llu returned other bytes", bds[q->ds].name,
					  (unsigned long long)q->off);
			free(q->buf);
			free(q->want);
		}
		b->nreq[c] = 0;
	}
}

static void burst_flush(struct burst *b)
{
	for (size_t d = 0; d < NDS; d++) {
		int ret = coffer_ds_flush(b->c[0], b->h[0][d]);

		cr_assert_eq(ret, 0, "flush %s: %d", bds[d].name, ret);
	}
}

static void burst_free(struct burst *b)
{
	for (int c = 0; c < NCONN; c++)
		free(b->reqs[c]);
}

/* One record's stored bytes against its known plaintext. */
struct ks {
	uint64_t recno, salt;
	uint8_t nonce[12];
	uint8_t k[64]; /* stored ^ plaintext over the first 64 bytes */
};

static int ks_cmp(const void *a, const void *b)
{
	return memcmp(((const struct ks *)a)->k, ((const struct ks *)b)->k, 64);
}

static int nonce_cmp(const void *a, const void *b)
{
	const struct ks *x = a, *y = b;

	if (x->salt != y->salt)
		return x->salt < y->salt ? -1 : 1;
	return memcmp(x->nonce, y->nonce, 12);
}

struct collect {
	uint64_t id;
	size_t d;
	struct ks *ks;
	size_t n, nclear, bad_len, bad_flag;
};

static int collect_bp(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct collect *cl = ctx;
	uint8_t stored[64];
	uint64_t id, recno;
	struct tbp bp;
	int ret;

	if (klen != TBP_KEY_LEN)
		return 0;
	tbp_key_parse(key, &id, &recno);
	if (id != cl->id)
		return 0;
	if (tbp_decode(val, vlen, &bp) < 0 || recno >= NREC) {
		cl->bad_len++;
		return 0;
	}
	ret = tlun_read(lun_path(bp.lun), bp.sector, 0, stored, sizeof(stored));
	cr_assert_eq(ret, 0, "read extent of %s record %llu: %d", bds[cl->d].name,
		     (unsigned long long)recno, ret);
	if (!bds[cl->d].suite) {
		/* the harness itself: a clear record is stored as the model has it */
		cr_assert_eq(bp.comp, 0);
		cr_assert(!memcmp(stored, model[cl->d] + recno * RS, 64),
			  "%s record %llu on the LUN is not what was written: the model is wrong",
			  bds[cl->d].name, (unsigned long long)recno);
		cl->nclear++;
		return 0;
	}
	if (!(bp.flags & TBP_F_ENCRYPTED) || bp.comp != 0) {
		cl->bad_flag++;
		return 0;
	}
	struct ks *k = &cl->ks[cl->n++];
	k->recno = recno;
	k->salt = bp.salt;
	memcpy(k->nonce, bp.nonce, 12);
	for (int i = 0; i < 64; i++)
		k->k[i] = stored[i] ^ model[cl->d][recno * RS + (size_t)i];
	return 0;
}

/*
 * For every pair A, B of records of one encrypted dataset: A ^ B must differ
 * from P_A ^ P_B, i.e. stored ^ plaintext (the keystream of a CTR-based
 * suite) must differ; sorting those makes the pairwise check linear.
 * (salt, nonce) pairs of the block pointers must differ too.
 * @return the encrypted records seen
 */
static uint64_t check_extents(const char *when)
{
	struct tamper *t = tam();
	uint64_t nenc = 0;

	for (size_t d = 0; d < NDS; d++) {
		struct collect cl = { .id = ds_id(t, bds[d].name), .d = d };
		long n;
		size_t rep = 0, nrep = 0;

		cl.ks = calloc(NREC, sizeof(*cl.ks));
		cr_assert_not_null(cl.ks);
		n = tamper_each(t, "bp", collect_bp, &cl);
		cr_assert_geq(n, 0, "walk bp: %ld", n);
		cr_assert_eq(cl.bad_len, 0, "%s: %zu block pointers of unknown length", when,
			     cl.bad_len);
		cr_expect_eq(cl.bad_flag, 0,
			     "%s: %s: %zu records on the LUNs not flagged encrypted (or compressed)",
			     when, bds[d].name, cl.bad_flag);
		if (!bds[d].suite) {
			cr_assert_gt(cl.nclear, 20, "%s: too few clear records to trust the model",
				     when);
			free(cl.ks);
			continue;
		}
		cr_assert_gt(cl.n, 20, "%s: %s: only %zu encrypted records", when, bds[d].name,
			     cl.n);
		nenc += cl.n;
		qsort(cl.ks, cl.n, sizeof(*cl.ks), ks_cmp);
		for (size_t i = 1; i < cl.n; i++)
			if (!memcmp(cl.ks[i].k, cl.ks[i - 1].k, 64)) {
				if (!rep++)
					cr_log_error("%s: %s: records %llu and %llu XOR to their "
						     "plaintexts' XOR",
						     when, bds[d].name,
						     (unsigned long long)cl.ks[i - 1].recno,
						     (unsigned long long)cl.ks[i].recno);
			}
		qsort(cl.ks, cl.n, sizeof(*cl.ks), nonce_cmp);
		for (size_t i = 1; i < cl.n; i++)
			nrep += !nonce_cmp(&cl.ks[i], &cl.ks[i - 1]);
		cr_expect_eq(rep, 0,
			     "%s: %s (%s): %zu of %zu encrypted extents share a keystream with "
			     "another: a nonce was used twice",
			     when, bds[d].name, bds[d].suite, rep, cl.n);
		cr_expect_eq(nrep, 0, "%s: %s: %zu repeated (salt, nonce) pairs in block pointers",
			     when, bds[d].name, nrep);
		free(cl.ks);
	}
	untam(t);
	return nenc;
}

static void at_rest(const char *when)
{
	uint64_t nenc = check_extents(when);

	offline_verify(when, nenc);
}

static void bursts(int rounds)
{
	struct burst b;

	burst_open(&b);
	for (int i = 0; i < rounds; i++)
		burst_round(&b);
	burst_flush(&b);
	burst_close(&b);
	burst_free(&b);
}

static void load_keys(void)
{
	for (size_t d = 0; d < NDS; d++)
		if (bds[d].suite)
			COF_OK("load-key %s", bds[d].name);
}

Test(integrity, mixed_bursts_never_repeat_a_nonce_across_restart_and_change_key)
{
	for (size_t d = 0; d < NDS; d++) {
		model[d] = calloc(1, VOL);
		cr_assert_not_null(model[d]);
	}
	pool_create();
	for (size_t d = 0; d < NDS; d++)
		if (bds[d].suite)
			create_root(bds[d].name, bds[d].suite);
		else
			COF_OK("create -V %u -b %u %s", VOL, RS, bds[d].name);

	bursts(4);
	stop();
	at_rest("first bursts");

	start();
	load_keys();
	bursts(4);
	stop();
	at_rest("bursts after a restart");

	start();
	load_keys();
	bursts(2);
	for (size_t d = 0; d < NDS; d++)
		if (bds[d].suite)
			COF_OK("change-key -o keylocation=file://%s %s", key2, bds[d].name);
	bursts(2);
	COF_OK("unload-key -a");
	load_keys();
	bursts(2);
	stop();
	at_rest("bursts around change-key");
	start();
	for (size_t d = 0; d < NDS; d++)
		free(model[d]);
}

/* ==== 2. offline tampering ==== */

#define ENC "tank/e"

#define OTHER_GROUP 300 /* a record of another MAC group than records 0-7 */

/*
 * Pool, encryption root ENC (aes-256-ccm) with records 0-7 and OTHER_GROUP
 * written; daemon stopped.
 */
static void enc_pool_stopped(const char *extra_create)
{
	pool_create();
	COF_OK("create -V %u -b %u -o encryption=aes-256-ccm -o keyformat=raw "
	       "-o keylocation=file://%s %s %s",
	       VOL, RS, key1, extra_create ? extra_create : "", ENC);
	for (uint64_t r = 0; r < 8; r++)
		cr_assert_eq(write_pat(ENC, r * RS, RS, 0xe000 + r), 0, "%s", out);
	cr_assert_eq(write_pat(ENC, OTHER_GROUP * RS, RS, 0xe000 + OTHER_GROUP), 0, "%s", out);
	COF_OK("flush %s", ENC);
	stop();
}

/*
 * Flag record 3 clear (flags 0, comp 0, the stored-bytes checksum of the
 * forged bytes, which needs no key) and put plaintext at its extent. The
 * mac of a clear record is a checksum seeded by the engine; the attacker
 * does not copy the seed: @guess_mac 0 leaves the mac zero (the old engine
 * took a zero mac for "no checksum" when checksum=off), 1 sets it to an
 * unseeded XXH3-128 of the forged bytes.
 */
static void clear_flag_attack(int guess_mac)
{
	uint8_t forged[RS], got[3 * RS];
	struct tamper *t;
	struct tbp bp;
	uint64_t id;
	size_t n;
	int st;

	t = tam();
	id = ds_id(t, ENC);
	cr_assert_eq(tamper_bp_get(t, id, 3, &bp), 0);
	cr_assert(bp.flags & TBP_F_ENCRYPTED, "record 3 of %s is not encrypted", ENC);
	pat(forged, sizeof(forged), 0xf0f0);
	bp.flags = 0;
	bp.comp = 0;
	bp.csize = bp.lsize;
	memset(bp.mac, 0, sizeof(bp.mac));
	if (guess_mac) {
		XXH128_hash_t h = XXH3_128bits(forged, sizeof(forged));

		for (int i = 0; i < 8; i++) {
			bp.mac[i] = (uint8_t)(h.high64 >> (56 - 8 * i));
			bp.mac[8 + i] = (uint8_t)(h.low64 >> (56 - 8 * i));
		}
	}
	bp.xxh = XXH3_64bits(forged, bp.psize <= sizeof(forged) ? bp.psize : sizeof(forged));
	cr_assert_eq(bp.psize, RS);
	cr_assert_eq(tamper_bp_put(t, id, 3, &bp), 0);
	untam(t);
	cr_assert_eq(tlun_write(lun_path(bp.lun), bp.sector, 0, forged, sizeof(forged)), 0);

	start();
	COF_OK("load-key %s", ENC);
	st = read_rec(ENC, 3 * RS, RS, got, &n);
	cr_expect_neq(st, 0, "a record flagged clear in an encrypted dataset was read");
	cr_expect(has_authfail(out), "read of the forged record: no authentication error: %s",
		  out);
	cr_expect(!leaks(got, n, forged, sizeof(forged)), "the forged plaintext was returned");
	/* a read around it gives nothing of it either */
	st = read_rec(ENC, 2 * RS, 3 * RS, got, &n);
	cr_expect_neq(st, 0, "a read covering the forged record succeeded");
	cr_expect(!leaks(got, n, forged, sizeof(forged)), "the forged plaintext was returned");

	COF_OK("unload-key %s", ENC);
	st = read_rec(ENC, 3 * RS, RS, got, &n);
	cr_expect_neq(st, 0, "with the key unloaded, the forged record was read");
	cr_expect(strcasestr(out, "not loaded") || has_authfail(out),
		  "read with the key unloaded: %s", out);
	cr_expect(!leaks(got, n, forged, sizeof(forged)),
		  "with the key unloaded, the forged plaintext was returned");
	/*
	 * A group MAC cannot tell which of its pointers lied, so the records of
	 * the forged one's group may go with it; another group still reads.
	 */
	COF_OK("load-key %s", ENC);
	st = read_rec(ENC, OTHER_GROUP * RS, RS, got, &n);
	cr_assert_eq(st, 0, "a record of another group: %s", out);
	pat(forged, RS, 0xe000 + OTHER_GROUP);
	cr_assert(n == RS && !memcmp(got, forged, RS), "record %u changed", OTHER_GROUP);
}

Test(integrity, bp_flagged_clear_with_zero_mac_and_checksum_off_is_refused)
{
	enc_pool_stopped("-o checksum=off");
	clear_flag_attack(0);
}

Test(integrity, bp_flagged_clear_with_zero_mac_and_checksum_on_is_refused)
{
	enc_pool_stopped("-o checksum=on");
	clear_flag_attack(0);
}

Test(integrity, bp_flagged_clear_with_a_guessed_checksum_as_mac_is_refused)
{
	enc_pool_stopped("-o checksum=on");
	clear_flag_attack(1);
}

/* The suite byte of a dataset record of @n bytes, no clone and no user
 * properties: the crypto section's last, before the tail (dataset.c):
 * u64 origin | u16 0 sealers | u64 creation | u16 0 user properties. */
#define SUITE_AT(n) ((n) - 21)

/*
 * Set the suite byte of ENC's record off; with @prop_too, make its local
 * encryption property say "off" as well (a u16-length-prefixed value in the
 * same record), so that only what lies outside the record can tell.
 */
static void record_says_clear(int prop_too)
{
	static const char was[] = "\0\x0b" "aes-256-ccm", now[] = "\0\x03" "off";
	uint8_t rec[4096];
	struct tamper *t = tam();
	long n;

	n = tamper_get(t, "ds", ENC, strlen(ENC), rec, sizeof(rec));
	cr_assert_gt(n, 12, "ds record of %s: %ld", ENC, n);
	cr_assert_eq(rec[SUITE_AT(n)], TSUITE_AES256_CCM,
		     "the suite byte of the dataset record is %u, not aes-256-ccm (%u)",
		     rec[SUITE_AT(n)], TSUITE_AES256_CCM);
	rec[SUITE_AT(n)] = TSUITE_OFF;
	if (prop_too) {
		uint8_t *v = memmem(rec, (size_t)n, was, sizeof(was) - 1);

		cr_assert_not_null(v, "no encryption=aes-256-ccm in the record of %s", ENC);
		memmove(v + sizeof(now) - 1, v + sizeof(was) - 1,
			(size_t)(rec + n - (v + sizeof(was) - 1)));
		memcpy(v, now, sizeof(now) - 1);
		n -= (long)(sizeof(was) - sizeof(now));
	}
	cr_assert_eq(tamper_put(t, "ds", ENC, strlen(ENC), rec, (size_t)n), 0);
	untam(t);
}

/*
 * Both copies of the key file without ENC's entry (it is the only
 * encrypted dataset: an empty list), each a generation newer, with its
 * checksum (keyfile.c's layout: magic | version | generation | count |
 * entries | XXH64): with the record edited too, nothing unkeyed says ENC
 * was encrypted but its records.
 */
static void key_file_forgets_enc(void)
{
	for (int copy = 0; copy < 2; copy++) {
		char path[PATH_MAX];
		uint8_t buf[4096];
		uint64_t gen = 0, sum;
		ssize_t n;
		int fd;

		snprintf(path, sizeof(path), "%s/pools/tank.keys%s", td.state, copy ? ".1" : "");
		fd = open(path, O_RDWR);
		cr_assert_geq(fd, 0, "open %s", path);
		n = pread(fd, buf, sizeof(buf), 0);
		cr_assert_gt(n, 24 + 8, "%s: %zd bytes", path, n);
		for (int i = 0; i < 8; i++)
			gen = gen << 8 | buf[12 + i];
		gen++;
		for (int i = 0; i < 8; i++)
			buf[12 + i] = (uint8_t)(gen >> (56 - 8 * i));
		memset(buf + 20, 0, 4); /* no entries */
		sum = XXH64(buf, 24, 0);
		for (int i = 0; i < 8; i++)
			buf[24 + i] = (uint8_t)(sum >> (56 - 8 * i));
		cr_assert_eq(ftruncate(fd, 0), 0);
		cr_assert_eq(pwrite(fd, buf, 32, 0), 32);
		close(fd);
	}
}

enum downgrade { SUITE_BYTE, AND_PROPERTY, AND_KEY_FILE, AND_ROWS };

/* The free map's rows of every table ("space", "o" ids), as read. */
struct sums_seen {
	uint8_t key[16][9], val[16][24];
	size_t n;
};

static int sums_keep(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct sums_seen *s = ctx;

	if (klen == 9 && vlen == 24 && ((const uint8_t *)key)[0] == 'o' && s->n < 16) {
		memcpy(s->key[s->n], key, 9);
		memcpy(s->val[s->n], val, 24);
		s->n++;
	}
	return 0;
}

/* Each table's count of sealed pointers in the rows set to 0, as a hand
 * that knows the format would, so that the rows say nothing is sealed. */
static void rows_say_unsealed(void)
{
	struct tamper *t = tam();
	struct sums_seen s = { .n = 0 };

	cr_assert_geq(tamper_each(t, "space", sums_keep, &s), 0);
	cr_assert_gt(s.n, 0, "no sums in the free map's rows");
	for (size_t i = 0; i < s.n; i++) {
		memset(s.val[i] + 16, 0, 8);
		cr_assert_eq(tamper_put(t, "space", s.key[i], 9, s.val[i], 24), 0);
	}
	untam(t);
}

static void suite_off_attack(enum downgrade how)
{
	uint8_t plain[RS];
	off_t from;
	int st;

	enc_pool_stopped(NULL);
	record_says_clear(how >= AND_PROPERTY);
	if (how >= AND_KEY_FILE)
		key_file_forgets_enc();
	if (how == AND_ROWS)
		rows_say_unsealed();

	from = log_size();
	if (tdaemon_start(&td) != 0) {
		/* refusing the whole pool at start is allowed, if it says why */
		cr_assert(strstr(log_since(from), ENC), "cofferd did not start and did not name "
			  "%s:\n%s", ENC, log_since(from));
		return;
	}
	cof("pool status");
	cr_log_info("after the suite byte was set off:\nlog:\n%s\nstatus:\n%s", log_since(from),
		    out);
	cr_expect(strstr(log_since(from), ENC) || strstr(out, ENC),
		  "neither the import nor pool status names %s:\nlog:\n%s\nstatus:\n%s", ENC,
		  log_since(from), out);
	cof("load-key %s", ENC);
	pat(plain, sizeof(plain), 0x5157);
	st = write_pat(ENC, 9 * RS, RS, 0x5157);
	cr_expect_neq(st, 0, "a write to %s, its suite byte set off, succeeded", ENC);
	COF_OK("ping");
	stop();
	cr_expect_eq(on_luns(plain), 0, "the plaintext written to %s is on a LUN", ENC);
	start();
}

Test(integrity, suite_byte_set_off_refuses_the_dataset_and_stores_no_plaintext)
{
	suite_off_attack(SUITE_BYTE);
}

Test(integrity, suite_byte_and_encryption_property_set_off_still_refuse_the_dataset)
{
	suite_off_attack(AND_PROPERTY);
}

/*
 * The downgrade of a root under the pool's (clear) root dataset: record,
 * encryption property and key file all say clear, consistently. Its
 * records are still sealed, and the import refuses the pool naming it.
 */
Test(integrity, record_property_and_key_file_set_clear_refuse_the_pool_and_store_no_plaintext)
{
	suite_off_attack(AND_KEY_FILE);
}

/*
 * The same, and the free map's rows edited too so that they count no
 * sealed pointer: the import, which reads them instead of every pointer,
 * still looks at each clear table's first pointer and refuses the pool.
 */
Test(integrity, a_downgrade_with_the_rows_edited_to_match_still_refuses_the_pool)
{
	suite_off_attack(AND_ROWS);
}

/*
 * ENC with records written (enc_pool_stopped), the pointer and extent of
 * record 5 kept in @old_bp and @old_ext, then records 4-6 rewritten by the
 * owner and the daemon stopped: an older version an attacker can put back.
 * @return ENC's id
 */
static uint64_t keep_old_record_5(struct tbp *old_bp, uint8_t old_ext[RS])
{
	struct tamper *t;
	uint64_t id;

	enc_pool_stopped(NULL);
	t = tam();
	id = ds_id(t, ENC);
	cr_assert_eq(tamper_bp_get(t, id, 5, old_bp), 0);
	untam(t);
	cr_assert_eq(old_bp->psize, RS);
	cr_assert_eq(tlun_read(lun_path(old_bp->lun), old_bp->sector, 0, old_ext, RS), 0);

	start();
	COF_OK("load-key %s", ENC);
	for (uint64_t r = 4; r < 7; r++)
		cr_assert_eq(write_pat(ENC, r * RS, RS, 0xa000 + r), 0, "%s", out);
	COF_OK("flush %s", ENC);
	stop();
	return id;
}

Test(integrity, replayed_block_pointer_and_extent_fail_authentication)
{
	uint8_t old_ext[RS], got[RS], p1[RS];
	struct tamper *t;
	struct tbp old_bp, new_bp;
	uint64_t id;
	size_t n;
	int st;

	id = keep_old_record_5(&old_bp, old_ext);

	t = tam();
	cr_assert_eq(tamper_bp_get(t, id, 5, &new_bp), 0);
	cr_assert(new_bp.birth != old_bp.birth || new_bp.sector != old_bp.sector,
		  "the rewrite did not make a new block pointer");
	cr_assert_eq(tamper_bp_put(t, id, 5, &old_bp), 0);
	untam(t);
	cr_assert_eq(tlun_write(lun_path(old_bp.lun), old_bp.sector, 0, old_ext, RS), 0);

	start();
	COF_OK("load-key %s", ENC);
	st = read_rec(ENC, 5 * RS, RS, got, &n);
	pat(p1, RS, 0xe005);
	cr_expect(!leaks(got, n, p1, RS), "the replayed old contents were returned");
	cr_expect_neq(st, 0, "the replayed record was read");
	cr_expect(has_authfail(out), "replayed record: no authentication error: %s", out);
}

/*
 * The off switch's edits, in the LMDB at hand: record 5's older pointer put
 * back, record 6's pointer deleted, and the mark of a raw receive ("recv/<id>"
 * = 2) on ENC; with @checkpoint, the "unlogged" mark too, so that the next
 * open writes this LMDB to the LUNs. The mark's key goes to @mark.
 */
static void forge_off_switch(uint64_t id, const struct tbp *old_bp, int checkpoint,
			     char mark[32])
{
	uint8_t key[TBP_KEY_LEN], two = 2, one = 1;
	struct tamper *t = tam();

	cr_assert_eq(tamper_bp_put(t, id, 5, old_bp), 0);
	tbp_key(id, 6, key);
	cr_assert_eq(tamper_del(t, "bp", key, sizeof(key)), 0);
	snprintf(mark, 32, "recv/%016llx", (unsigned long long)id);
	cr_assert_eq(tamper_put(t, "pool", mark, strlen(mark), &two, 1), 0);
	if (checkpoint)
		cr_assert_eq(tamper_put(t, "pool", "unlogged", 8, &one, 1), 0);
	untam(t);
}

/* What the forged state must come to: load-key refuses naming ENC, or the
 * replayed record 5 and the deleted record 6 both read as authentication errors. */
static void expect_off_switch_refused(void)
{
	uint8_t got[RS], p1[RS];
	size_t n;
	int st;

	if (cof("load-key %s", ENC) != 0) {
		cr_expect(strstr(out, ENC), "load-key refused without naming %s: %s", ENC, out);
		return;
	}
	pat(p1, RS, 0xe005);
	st = read_rec(ENC, 5 * RS, RS, got, &n);
	cr_expect(!leaks(got, n, p1, RS), "the replayed old contents were returned");
	cr_expect_neq(st, 0, "the replayed record was read");
	cr_expect(has_authfail(out), "replayed record: no authentication error: %s", out);
	st = read_rec(ENC, 6 * RS, RS, got, &n);
	cr_expect_neq(st, 0, "the deleted record read (as a hole)");
	cr_expect(has_authfail(out), "deleted record: no authentication error: %s", out);
}

/*
 * The mark a raw receive leaves ("recv/<id>" = 2 in the pool table, the
 * tree built at the first load-key) added to an ordinary encrypted dataset,
 * with an older pointer and extent of record 5 put back and record 6's
 * pointer deleted: a load-key that rebuilt the tree from whatever pointers
 * are there would bless both. The mark may change how the tree is checked,
 * never whether.
 */
Test(integrity, recv_mark_added_to_a_dataset_switches_no_mac_check_off)
{
	uint8_t old_ext[RS];
	struct tbp old_bp;
	char mark[32];
	uint64_t id = keep_old_record_5(&old_bp, old_ext);

	forge_off_switch(id, &old_bp, 0, mark);
	cr_assert_eq(tlun_write(lun_path(old_bp.lun), old_bp.sector, 0, old_ext, RS), 0);
	start();
	expect_off_switch_refused();
}

/*
 * The same attack from the LUNs alone: the attacker never touches the
 * owner's state directory. On the LUN files (a copy of the LUNs and a state
 * directory of the attacker's own, imported without any key) the attacker
 * edits that LMDB as above and sets its "unlogged" mark, so that the next
 * open writes a checkpoint of it to the LUNs; with record 5's old extent put
 * back there too, the owner's state directory is the one that lags. The
 * owner's import takes the LUNs' newer state; the mark still changes no check.
 */
Test(integrity, recv_mark_forged_on_the_luns_alone_switches_no_mac_check_off)
{
	uint8_t old_ext[RS], two;
	char mark[32], owner[PATH_MAX + 16], cmd[3 * PATH_MAX];
	struct tamper *t;
	struct tbp old_bp;
	uint64_t id = keep_old_record_5(&old_bp, old_ext);

	snprintf(owner, sizeof(owner), "%s.owner", td.state);
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", td.state, owner);
	cr_assert_eq(system(cmd), 0, "%s", cmd);

	/* the attacker's side: the forged state, checkpointed to the LUNs */
	forge_off_switch(id, &old_bp, 1, mark);
	start();
	COF_OK("pool status tank");
	cr_assert(strstr(out, "checkpoint"), "the forged LMDB was not written to the LUNs: %s",
		  out);
	stop();
	cr_assert_eq(tlun_write(lun_path(old_bp.lun), old_bp.sector, 0, old_ext, RS), 0);

	/* the owner's state directory, as it was: only the LUNs changed */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mv '%s' '%s'", td.state, owner, td.state);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	t = tam();
	cr_assert_neq(tamper_get(t, "pool", mark, strlen(mark), &two, 1), 1,
		      "the owner's LMDB has the mark");
	untam(t);

	start();
	COF_OK("pool status tank");
	cr_assert(strstr(out, "from the LUNs"), "the owner's import did not take the LUNs' newer "
		  "state: %s", out);
	expect_off_switch_refused();
}

Test(integrity, block_pointers_swapped_between_datasets_of_one_root_fail_both)
{
	const char *child = ENC "/f";
	uint8_t got[RS], pa[RS], pb[RS];
	struct tamper *t;
	struct tbp a, b;
	uint64_t ida, idb;
	size_t n;
	int st;

	pool_create();
	create_root(ENC, "aes-256-ccm");
	COF_OK("create -V %u -b %u %s", VOL, RS, child);
	cr_assert_eq(write_pat(ENC, 2 * RS, RS, 0xaa), 0, "%s", out);
	cr_assert_eq(write_pat(child, 2 * RS, RS, 0xbb), 0, "%s", out);
	COF_OK("get -H encryptionroot %s", child);
	cr_assert(strstr(out, ENC), "%s does not share the key root %s: %s", child, ENC, out);
	COF_OK("flush %s", ENC);
	stop();

	t = tam();
	ida = ds_id(t, ENC);
	idb = ds_id(t, child);
	cr_assert_eq(tamper_bp_get(t, ida, 2, &a), 0);
	cr_assert_eq(tamper_bp_get(t, idb, 2, &b), 0);
	cr_assert_eq(tamper_bp_put(t, ida, 2, &b), 0);
	cr_assert_eq(tamper_bp_put(t, idb, 2, &a), 0);
	untam(t);

	start();
	COF_OK("load-key %s", ENC);
	pat(pa, RS, 0xaa);
	pat(pb, RS, 0xbb);
	st = read_rec(ENC, 2 * RS, RS, got, &n);
	cr_expect_neq(st, 0, "%s read the record of %s", ENC, child);
	cr_expect(has_authfail(out), "%s: no authentication error: %s", ENC, out);
	cr_expect(!leaks(got, n, pb, RS) && !leaks(got, n, pa, RS), "%s returned data", ENC);
	st = read_rec(child, 2 * RS, RS, got, &n);
	cr_expect_neq(st, 0, "%s read the record of %s", child, ENC);
	cr_expect(has_authfail(out), "%s: no authentication error: %s", child, out);
	cr_expect(!leaks(got, n, pa, RS) && !leaks(got, n, pb, RS), "%s returned data", child);
}

Test(integrity, deleted_mac_root_makes_load_key_or_import_refuse_the_dataset)
{
	uint8_t key[16], got[RS], p[RS];
	struct tamper *t;
	uint64_t id;
	off_t from;
	size_t n;
	int st, ret;

	enc_pool_stopped(NULL);
	t = tam();
	id = ds_id(t, ENC);
	cr_assert(tamper_has_db(t, "mac"), "the pool has no \"mac\" database");
	tbp_key(id, UINT64_MAX, key);
	ret = tamper_del(t, "mac", key, sizeof(key));
	untam(t);
	cr_assert_eq(ret, 0, "no root entry of %s in \"mac\": %d", ENC, ret);

	from = log_size();
	if (tdaemon_start(&td) != 0) {
		cr_assert(strstr(log_since(from), ENC), "cofferd did not start and did not name "
			  "%s:\n%s", ENC, log_since(from));
		return;
	}
	st = cof("load-key %s", ENC);
	cr_log_info("load-key without the mac root: exit %d: %s", st, out);
	cr_expect_neq(st, 0, "load-key of %s succeeded without its mac root", ENC);
	cr_expect(strstr(out, ENC) || strstr(log_since(from), ENC),
		  "neither load-key nor the import names %s:\n%s\nlog:\n%s", ENC, out,
		  log_since(from));
	st = read_rec(ENC, 0, RS, got, &n);
	pat(p, RS, 0xe000);
	cr_expect_neq(st, 0, "a record of %s was read without its mac root", ENC);
	cr_expect(!leaks(got, n, p, RS), "a record of %s was returned", ENC);
}

/*
 * pool check with and without the key. ENC@s keeps record 5's first
 * version; the attacker changes a byte of the nonce of record 3's pointer
 * in the head's table and of the tag of record 5's in the snapshot's. The
 * stored bytes are untouched, so every keyless check still passes: only the
 * MAC tree tells. With the key unloaded, pool check must say it did not
 * verify those MACs; with it loaded, it must name both tables and the
 * records of the forged groups, and fail.
 */
struct other_table {
	uint64_t head, id;
};

static int find_other(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct other_table *o = ctx;
	uint64_t id, recno;

	(void)val, (void)vlen;
	if (klen != TBP_KEY_LEN)
		return 0;
	tbp_key_parse(key, &id, &recno);
	if (id != o->head && recno == 5)
		o->id = id;
	return 0;
}

Test(integrity, pool_check_names_forged_pointers_with_the_key_and_says_when_it_cannot)
{
	struct other_table o = { 0 };
	struct tamper *t;
	struct tbp bp;
	int st;

	pool_create();
	create_root(ENC, "aes-256-ccm");
	for (uint64_t r = 0; r < 8; r++)
		cr_assert_eq(write_pat(ENC, r * RS, RS, 0xe000 + r), 0, "%s", out);
	cr_assert_eq(write_pat(ENC, OTHER_GROUP * RS, RS, 0xe000 + OTHER_GROUP), 0, "%s", out);
	COF_OK("snapshot %s@s", ENC);
	cr_assert_eq(write_pat(ENC, 5 * RS, RS, 0xa005), 0, "%s", out);
	COF_OK("flush %s", ENC);
	COF_OK("pool check tank");
	cr_assert(strstr(out, "no errors"), "pool check before the attack: %s", out);
	stop();

	t = tam();
	o.head = ds_id(t, ENC);
	cr_assert_eq(tamper_bp_get(t, o.head, 3, &bp), 0);
	bp.nonce[5] ^= 0x10;
	cr_assert_eq(tamper_bp_put(t, o.head, 3, &bp), 0);
	cr_assert_gt(tamper_each(t, "bp", find_other, &o), 0);
	cr_assert_neq(o.id, 0, "no snapshot table keeps record 5 of %s", ENC);
	cr_assert_eq(tamper_bp_get(t, o.id, 5, &bp), 0);
	bp.mac[0] ^= 0x01;
	cr_assert_eq(tamper_bp_put(t, o.id, 5, &bp), 0);
	untam(t);
	start();

	/* the key is not loaded after a start */
	st = cof("pool check tank");
	cr_log_info("pool check, key unloaded: exit %d:\n%s", st, out);
	cr_expect(strstr(out, ENC ": MACs not verified: key not loaded"),
		  "pool check does not say it left the MACs of %s unverified:\n%s", ENC, out);
	cr_expect(strstr(out, ENC "@s: MACs not verified: key not loaded"),
		  "pool check does not say it left the MACs of %s@s unverified:\n%s", ENC, out);
	st = cof("pool check -j tank");
	cr_expect(strstr(out, "\"mac_not_verified\"") && strstr(out, "\"" ENC "@s\""),
		  "pool check -j does not list %s@s as not verified:\n%s", ENC, out);

	COF_OK("load-key %s", ENC);
	st = cof("pool check tank");
	cr_log_info("pool check, key loaded: exit %d:\n%s", st, out);
	cr_expect_neq(st, 0, "pool check passed a forged block pointer:\n%s", out);
	cr_expect(strstr(out, ENC ": records 0-255: block pointer MACs do not verify"),
		  "pool check does not name the forged record 3 of %s:\n%s", ENC, out);
	cr_expect(strstr(out, ENC "@s: records 0-255: block pointer MACs do not verify"),
		  "pool check does not name the forged record 5 of %s@s:\n%s", ENC, out);
	cr_expect(!strstr(out, "records 256-"), "pool check blames a sound group:\n%s", out);
	cr_expect(!strstr(out, "not verified"), "the key is loaded:\n%s", out);
	st = cof("pool check -j tank");
	cr_expect_neq(st, 0, "pool check -j passed a forged block pointer");
	cr_expect(strstr(out, "\"mac_failures\"") && strstr(out, "\"" ENC "@s\""),
		  "pool check -j does not list the forged tables:\n%s", out);
}

/*
 * f. Metadata rolled back: the attacker keeps a copy of the state dir,
 * lets the owner write, keeps the ciphertext that went to the LUNs, and
 * puts the old state dir back. Whatever the engine persisted about the
 * nonces it handed out is then old; the owner's next writes must still
 * never seal under a (key, nonce) already used for the lost ones.
 */
struct sealed {
	uint64_t recno, salt;
	uint8_t nonce[12];
	uint8_t k[64]; /* stored ^ plaintext, the first 64 bytes */
};

static size_t seal_list(uint64_t gen, struct sealed *v)
{
	struct tamper *t = tam();
	uint64_t id = ds_id(t, ENC);
	size_t n = 0;

	for (uint64_t r = 10; r < 40; r++) {
		uint8_t c[64], p[RS];
		struct tbp bp;

		cr_assert_eq(tamper_bp_get(t, id, r, &bp), 0, "no bp of record %llu",
			     (unsigned long long)r);
		cr_assert(bp.flags & TBP_F_ENCRYPTED);
		cr_assert_eq(tlun_read(lun_path(bp.lun), bp.sector, 0, c, sizeof(c)), 0);
		pat(p, RS, gen << 16 | r);
		v[n] = (struct sealed){ .recno = r, .salt = bp.salt };
		memcpy(v[n].nonce, bp.nonce, 12);
		for (int i = 0; i < 64; i++)
			v[n].k[i] = c[i] ^ p[i];
		n++;
	}
	untam(t);
	return n;
}

static void write_gen(uint64_t gen)
{
	start();
	COF_OK("load-key %s", ENC);
	for (uint64_t r = 10; r < 40; r++)
		cr_assert_eq(write_pat(ENC, r * RS, RS, gen << 16 | r), 0, "%s", out);
	COF_OK("flush %s", ENC);
	stop();
}

Test(integrity, rolled_back_metadata_never_makes_the_engine_reuse_a_nonce)
{
	struct sealed lost[30], now[30];
	size_t nl, nn, rep = 0, nrep = 0;
	char cmd[4 * PATH_MAX];

	enc_pool_stopped(NULL);
	snprintf(cmd, sizeof(cmd), "cp -a '%s/pools' '%s/pools.saved'", td.state, td.dir);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	write_gen(1);
	nl = seal_list(1, lost);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/pools' && cp -a '%s/pools.saved' '%s/pools'",
		 td.state, td.dir, td.state);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	write_gen(2);
	nn = seal_list(2, now);
	for (size_t i = 0; i < nl; i++)
		for (size_t j = 0; j < nn; j++) {
			if (!memcmp(lost[i].k, now[j].k, 64) && !rep++)
				cr_log_error("record %llu before the rollback and record %llu after "
					     "it XOR to their plaintexts' XOR",
					     (unsigned long long)lost[i].recno,
					     (unsigned long long)now[j].recno);
			nrep += lost[i].salt == now[j].salt &&
				!memcmp(lost[i].nonce, now[j].nonce, 12);
		}
	cr_expect_eq(rep, 0, "%zu records written after the metadata was rolled back share a "
		     "keystream with records written before it", rep);
	cr_expect_eq(nrep, 0, "%zu (salt, nonce) pairs used before the rollback were used again",
		     nrep);
	start();
}

/* ==== 3. discard with the key unloaded ==== */

/* The block pointer values of records 0-7 of ENC (zeros where there is none). */
static void bp_snapshot(uint8_t v[8][TBP_LEN])
{
	struct tamper *t = tam();
	uint64_t id = ds_id(t, ENC);

	memset(v, 0, 8 * TBP_LEN);
	for (uint64_t r = 0; r < 8; r++) {
		uint8_t key[TBP_KEY_LEN];
		long n;

		tbp_key(id, r, key);
		n = tamper_get(t, "bp", key, sizeof(key), v[r], TBP_LEN);
		cr_assert(n > 0 || n == -MDB_NOTFOUND, "bp of record %llu: %ld",
			  (unsigned long long)r, n);
	}
	untam(t);
}

Test(integrity, discard_with_key_unloaded_is_refused_and_changes_nothing)
{
	struct coffer_conn *c = NULL;
	uint8_t got[8 * RS], want[8 * RS], before[8][TBP_LEN], after[8][TBP_LEN];
	size_t n;
	int h, ret;

	enc_pool_stopped(NULL);
	bp_snapshot(before);
	start();
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, ENC, NULL, NULL);
	cr_assert_geq(h, 0, "open %s: %d", ENC, h);
	/* keys are not loaded after a start */
	COF_OK("get -H keystatus %s", ENC);
	cr_assert(strstr(out, "unavailable"), "key of %s: %s", ENC, out);

	struct {
		uint64_t off;
		uint32_t len;
		const char *what;
	} d[] = {
		{ 2 * RS, RS, "whole-record" },
		{ 3 * RS, 2 * RS, "two-record" },
		{ 6 * RS + 100, 200, "partial" },
		{ 7 * RS - 50, 100, "straddling" },
	};
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
		struct coffer_completion cc;

		cr_assert_eq(coffer_submit(c, (uint32_t)i + 1, COFFER_DISCARD, h, d[i].off, d[i].len,
					   NULL),
			     0);
		cr_assert_eq(coffer_flush_out(c), 0);
		ret = coffer_reap(c, &cc, 1, DEADLINE_MS);
		cr_assert_eq(ret, 1, "no completion of the %s discard", d[i].what);
		cr_expect_eq(cc.status, STOR_ENOKEY, "%s discard with the key unloaded: %d (%s)",
			     d[i].what, cc.status, stor_strerror(cc.status));
	}
	ret = coffer_ds_flush(c, h);
	coffer_close(c);
	cr_log_info("flush with the key unloaded: %d", ret);
	/* across a restart, so a staged hole would have been committed */
	stop();
	start();
	COF_OK("load-key %s", ENC);
	for (uint64_t r = 0; r < 8; r++)
		pat(want + r * RS, RS, 0xe000 + r);
	ret = read_rec(ENC, 0, sizeof(got), got, &n);
	cr_assert_eq(ret, 0, "%s", out);
	cr_assert_eq(n, sizeof(got));
	for (uint64_t r = 0; r < 8; r++)
		cr_expect(!memcmp(got + r * RS, want + r * RS, RS),
			  "record %llu changed under a discard with the key unloaded",
			  (unsigned long long)r);
	/* read as another LMDB reader while the daemon runs */
	bp_snapshot(after);
	for (int r = 0; r < 8; r++)
		cr_expect(!memcmp(before[r], after[r], TBP_LEN),
			  "the block pointer of record %d changed under a discard with the key "
			  "unloaded", r);
}

static void roots_file(const char *text)
{
	tdaemon_file(&td, "roots", text, strlen(text));
}

/*
 * The downgrade the import cannot see: ENC holds no sealed record yet, so
 * nothing on the LUNs says it was encrypted once its record, property and
 * key-file entry say clear. The operator's encryption_roots list (on the
 * host, out of the attacker's reach) does: ENC is not opened, no write
 * reaches a LUN, and load-key -a names it and a listed root that is gone.
 */
Test(integrity, a_listed_root_set_clear_is_never_opened_and_load_key_a_names_it)
{
	char roots[PATH_MAX];
	uint8_t plain[RS];
	int st;

	snprintf(roots, sizeof(roots), "%s", tdaemon_path(&td, "roots"));
	roots_file("# must be encrypted\ntank/e\n");
	stop();
	tdaemon_write_conf(&td, NULL, "%sencryption_roots = %s\n",
			   TEST_DIRECT_IO ? "direct_io = yes\n" : "", roots);
	start();
	pool_create();
	create_root(ENC, "aes-256-ccm");
	/* as listed: opened, and load-key -a has nothing to say */
	cr_assert_eq(cof("load-key -a"), 0, "%s", out);
	COF_OK("read -l %u %s > /dev/null", RS, ENC);
	stop();

	record_says_clear(1);
	key_file_forgets_enc();
	roots_file("tank/e\ntank/gone # destroyed\n");
	start();
	pat(plain, sizeof(plain), 0x5158);
	st = write_pat(ENC, 0, RS, 0x5158);
	cr_expect_neq(st, 0, "a write to %s, listed but clear by its metadata, succeeded", ENC);
	cr_expect_neq(cof("read -l %u %s > /dev/null", RS, ENC), 0, "%s opened", ENC);
	cr_expect(strstr(out, "encryption_roots") || strstr(out, "encryption root"), "%s", out);
	cr_expect_eq(cof("load-key -a"), 1, "load-key -a passed a listed root made clear:\n%s",
		     out);
	cr_expect(strstr(out, "tank/e: listed") && strstr(out, "clear by its metadata"), "%s",
		  out);
	cr_expect(strstr(out, "tank/gone: listed") && strstr(out, "no such dataset"), "%s", out);
	stop();
	cr_expect_eq(on_luns(plain), 0, "the plaintext written to %s is on a LUN", ENC);
	tdaemon_write_conf(&td, NULL, "%s", TEST_DIRECT_IO ? "direct_io = yes\n" : "");
	start();
}

/* A list that is not a list of dataset names stops the daemon at start, naming the line. */
Test(integrity, an_encryption_roots_line_that_is_no_dataset_stops_the_daemon)
{
	char roots[PATH_MAX];
	off_t from = log_size();

	snprintf(roots, sizeof(roots), "%s", tdaemon_path(&td, "roots"));
	roots_file("tank\n");
	stop();
	tdaemon_write_conf(&td, NULL, "encryption_roots = %s\n", roots);
	cr_assert_neq(tdaemon_start(&td), 0, "cofferd started with a pool name as a root");
	cr_expect(strstr(log_since(from), "roots:1:"), "%s", log_since(from));
	tdaemon_write_conf(&td, NULL, "%s", TEST_DIRECT_IO ? "direct_io = yes\n" : "");
	start();
}

/*
 * Each encrypted dataset lists its encrypted children under its key
 * (children.c). ENC has two children, tank/e/c (nothing written: the import
 * cannot see a downgrade of it) and tank/e/d. The attacker, with the daemon
 * stopped, edits tank/e/c's record: @how MOVE_OUT renames it to tank/c under
 * the clear pool root, says clear and gives it a new GUID (so its key-file
 * entry names nothing and is skipped); CLEAR_IN_PLACE says clear with a new
 * GUID where it is; DELETE removes it. The import refuses a clear child of
 * an encrypted parent; the other two pass the import (no sealed record
 * says anything), and load-key of ENC fails naming ENC, as load-key -a
 * does, so cofferd-load-key.service fails.
 */
enum child_edit { MOVE_OUT, CLEAR_IN_PLACE, DELETE };

static void child_edit_attack(enum child_edit how)
{
	uint8_t rec[4096];
	struct tamper *t;
	const char *to = how == MOVE_OUT ? "tank/c" : ENC "/c";
	long n;
	int st;

	pool_create();
	create_root(ENC, "aes-256-ccm");
	COF_OK("create -V %u %s/c", VOL, ENC);
	COF_OK("create -V %u %s/d", VOL, ENC);
	stop();
	start();
	cr_assert_eq(cof("load-key -a"), 0, "untouched: %s", out);
	stop();

	t = tam();
	n = tamper_get(t, "ds", ENC "/c", strlen(ENC "/c"), rec, sizeof(rec));
	cr_assert_gt(n, 20, "ds record of %s/c: %ld", ENC, n);
	cr_assert_eq(tamper_del(t, "ds", ENC "/c", strlen(ENC "/c")), 0);
	if (how != DELETE) {
		cr_assert_eq(rec[SUITE_AT(n)], TSUITE_AES256_CCM, "suite byte %u", rec[SUITE_AT(n)]);
		rec[SUITE_AT(n)] = TSUITE_OFF;
		for (int i = 12; i < 20; i++)
			rec[i] ^= 0x5a; /* the guid: its key-file entry now names nothing */
		cr_assert_eq(tamper_put(t, "ds", to, strlen(to), rec, (size_t)n), 0);
	}
	untam(t);

	start();
	st = cof("load-key %s", ENC);
	cr_log_info("load-key after the child was edited (%d): exit %d: %s", how, st, out);
	cr_expect_neq(st, 0, "load-key of %s passed with a child edited (%d)", ENC, how);
	cr_expect(strstr(out, ENC), "load-key does not name %s: %s", ENC, out);
	if (how == CLEAR_IN_PLACE) {
		/* a clear child of an encrypted parent: the import refuses the pool */
		cr_expect(strstr(out, ENC "/c") && strstr(out, "parent is encrypted"), "%s", out);
		return;
	}
	cr_expect(strstr(out, "list of encrypted children"), "%s", out);
	cr_expect_eq(cof("load-key -a"), 1, "load-key -a passed: %s", out);
	cr_expect(strstr(out, ENC), "load-key -a does not name %s: %s", ENC, out);
	cr_expect_neq(cof("read -l %u %s/d > /dev/null", RS, ENC), 0,
		      "a child of %s was read after its load-key failed", ENC);
}

Test(integrity, an_empty_child_moved_out_and_made_clear_fails_its_parents_load_key)
{
	child_edit_attack(MOVE_OUT);
}

Test(integrity, an_empty_child_made_clear_in_place_fails_its_parents_load_key)
{
	child_edit_attack(CLEAR_IN_PLACE);
}

Test(integrity, a_deleted_child_fails_its_parents_load_key)
{
	child_edit_attack(DELETE);
}

/*
 * The lists follow every change made with the keys: children created,
 * cloned, received raw under an encrypted parent and destroyed, and a
 * restart after each; load-key -a passes throughout. A change that would
 * need an unloaded key (create or destroy under ENC) is refused, naming
 * the dataset whose key it needs, and changes nothing.
 */
Test(integrity, lists_of_children_follow_create_clone_receive_and_destroy)
{
	char stream[PATH_MAX];

	snprintf(stream, sizeof(stream), "%s", tdaemon_path(&td, "stream"));
	pool_create();
	create_root(ENC, "aes-256-gcm");
	COF_OK("create -V %u %s/c", VOL, ENC);
	COF_OK("create -V %u -o encryption=aes-128-ccm -o keyformat=raw "
	       "-o keylocation=file://%s %s/c/own", VOL, key1, ENC);
	COF_OK("create -V %u %s/x", VOL, ENC);
	COF_OK("create -V %u %s/y", VOL, ENC);
	cr_assert_eq(write_pat(ENC "/c", 0, RS, 0xc1), 0, "%s", out);
	cr_assert_eq(write_pat(ENC "/x", 0, RS, 0xc2), 0, "%s", out);
	COF_OK("snapshot %s/c@s %s/x@s %s/y@s", ENC, ENC, ENC);
	COF_OK("clone %s/c@s %s/k", ENC, ENC);
	/* raw copies (a pool holds one copy of a stream: the sources go first),
	 * one under the encrypted ENC and one under the clear pool root */
	COF_OK("send -w %s/x@s > '%s'", ENC, stream);
	COF_OK("send -w %s/y@s > '%s.y'", ENC, stream);
	COF_OK("destroy -r %s/x", ENC);
	COF_OK("destroy -r %s/y", ENC);
	cr_assert_eq(tdaemon_cofferf(&td, stream, out, sizeof(out), "receive %s/r", ENC), 0,
		     "%s", out);
	strcat(stream, ".y");
	cr_assert_eq(tdaemon_cofferf(&td, stream, out, sizeof(out), "receive tank/r"), 0, "%s",
		     out);
	/* received raw: roots of their own, unwrapped by the sender's root's key */
	COF_OK("set keylocation=file://%s %s/r", key1, ENC);
	COF_OK("set keylocation=file://%s tank/r", key1);
	stop();
	start();
	cr_assert_eq(cof("load-key -a"), 0, "after create, clone and receive: %s", out);
	COF_OK("read -l %u %s/r > /dev/null", RS, ENC);
	COF_OK("read -l %u tank/r > /dev/null", RS);
	COF_OK("destroy %s/k", ENC);
	COF_OK("destroy -r %s/c/own", ENC);

	/* with the key of ENC unloaded: refused, nothing changes */
	COF_OK("unload-key -r %s", ENC);
	cr_expect_neq(cof("destroy -r %s/r", ENC), 0, "destroyed under an unloaded parent");
	cr_expect(strstr(out, "not loaded") && strstr(out, ENC), "%s", out);
	cr_expect_neq(cof("create -V %u -o encryption=aes-256-ccm -o keyformat=raw "
			  "-o keylocation=file://%s %s/new", VOL, key1, ENC),
		      0, "created under an unloaded parent");
	cr_expect(strstr(out, "not loaded") && strstr(out, ENC), "%s", out);
	stop();
	start();
	cr_assert_eq(cof("load-key -a"), 0, "after the destroys and the refusals: %s", out);
	COF_OK("destroy -r %s/r", ENC);
	stop();
	start();
	cr_assert_eq(cof("load-key -a"), 0, "after the last destroy: %s", out);
	COF_OK("list -r %s", ENC);
	cr_expect(!strstr(out, ENC "/r") && !strstr(out, ENC "/k") && strstr(out, ENC "/c"),
		  "%s", out);
}

/*
 * A snapshot record given its dataset's id would make the snapshot's kept
 * pointers and the dataset's one table: the import refuses the pool, naming
 * both, and its LMDB file is left as it was.
 */
Test(integrity, a_snapshot_record_with_its_datasets_id_refuses_the_pool)
{
	uint8_t rec[4096], p[8];
	struct tamper *t;
	uint64_t id;
	long n;

	pool_create();
	COF_OK("create -V %u -b %u tank/v", VOL, RS);
	cr_assert_eq(write_pat("tank/v", 0, RS, 1), 0, "%s", out);
	COF_OK("snapshot tank/v@s");
	cr_assert_eq(write_pat("tank/v", 0, RS, 2), 0, "%s", out);
	COF_OK("flush tank/v");
	stop();
	t = tam();
	id = ds_id(t, "tank/v");
	n = tamper_get(t, "ds", "tank/v@s", 8, rec, sizeof(rec));
	cr_assert_gt(n, 12, "no snapshot record: %ld", n);
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(id >> (56 - 8 * i));
	memcpy(rec + 4, p, 8); /* u32 version | u64 id, big-endian */
	cr_assert_eq(tamper_put(t, "ds", "tank/v@s", 8, rec, (size_t)n), 0);
	untam(t);
	start();
	COF_OK("pool list -H -o name,health tank");
	cr_assert(strstr(out, "FAULTED"), "%s", out);
	cr_assert(strstr(tdaemon_log(&td), "tank/v and tank/v@s have the same id"), "%s",
		  tdaemon_log(&td));
}
