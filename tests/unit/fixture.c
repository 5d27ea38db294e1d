/* SPDX-License-Identifier: MIT */
/*
 * Temp pools for the unit tests. Everything lives in one mkdtemp directory
 * under ${TMPDIR:-/tmp}: the sparse LUN files, and the LMDB state in state/
 * (a LUN inside state_dir is refused),
 * so a test never writes into the source tree and tpool_fini() leaves
 * nothing behind. The engine hides block pointers, so tests that damage a
 * record find it by content: they write an incompressible pattern and scan
 * the LUN files for it.
 */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fixture.h"

static void make_dir(struct tpool *tp)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(tp->dir, sizeof(tp->dir), "%s/stor-test.XXXXXX", tmp);
	cr_assert_not_null(mkdtemp(tp->dir), "mkdtemp %s: %s", tp->dir, strerror(errno));
	snprintf(tp->state, sizeof(tp->state), "%s/state", tp->dir);
	cr_assert_eq(mkdir(tp->state, 0700), 0, "mkdir %s: %s", tp->state, strerror(errno));
}

static void create_pool(struct tpool *tp, const char *name, unsigned nluns, uint64_t lun_size,
			const char *prefix)
{
	int ret;

	cr_assert(nluns >= 1 && nluns <= TPOOL_LUNS_MAX);
	snprintf(tp->name, sizeof(tp->name), "%s", name ? name : TPOOL_NAME);
	tp->nluns = nluns;
	tp->lun_size = lun_size;
	tp->opts.state_dir = tp->state;
	tp->opts.lun_size = lun_size;
	for (unsigned i = 0; i < nluns; i++) {
		snprintf(tp->lun[i], sizeof(tp->lun[i]), "%s/%slun%u", tp->dir, prefix, i);
		tp->lunv[i] = tp->lun[i];
	}
	ret = stor_pool_create(tp->name, tp->lunv, nluns, &tp->opts, &tp->pool);
	cr_assert_eq(ret, 0, "pool create %s: %s (%s)", tp->name, stor_strerror(ret),
		     stor_pool_last_error());
	cr_assert_not_null(tp->pool);
}

void tpool_init(struct tpool *tp, unsigned nluns, uint64_t lun_size,
		const struct stor_pool_opts *opts)
{
	memset(tp, 0, sizeof(*tp));
	if (opts)
		tp->opts = *opts;
	make_dir(tp);
	create_pool(tp, NULL, nluns, lun_size, "");
}

void tpool_init_in(struct tpool *tp, const struct tpool *base, const char *name, unsigned nluns,
		   uint64_t lun_size)
{
	memset(tp, 0, sizeof(*tp));
	tp->opts = base->opts;
	memcpy(tp->dir, base->dir, sizeof(tp->dir));
	memcpy(tp->state, base->state, sizeof(tp->state));
	create_pool(tp, name, nluns, lun_size, name);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 ? -errno : 0;
}

void tpool_fini(struct tpool *tp)
{
	/*
	 * Remove the files first: the pool works on open descriptors, and if
	 * closing it aborts (a failed test can leave handles open) nothing is
	 * left behind in TMPDIR.
	 */
	if (tp->dir[0])
		nftw(tp->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	tp->dir[0] = '\0';
	if (tp->pool) {
		stor_pool_close(tp->pool);
		tp->pool = NULL;
	}
}

void tpool_close(struct tpool *tp)
{
	int ret = stor_pool_close(tp->pool);

	tp->pool = NULL;
	cr_assert_eq(ret, 0, "pool close: %s", stor_strerror(ret));
}

int tpool_open(struct tpool *tp)
{
	cr_assert_null(tp->pool, "pool is still open");
	return stor_pool_open(tp->name, &tp->opts, &tp->pool);
}

void tpool_reopen(struct tpool *tp)
{
	int ret;

	tpool_close(tp);
	ret = tpool_open(tp);
	cr_assert_eq(ret, 0, "pool open: %s (%s)", stor_strerror(ret), stor_pool_last_error());
}

/*
 * Test volumes are sparse (refreservation=none) unless the test says
 * otherwise: most are far larger than the tiny pools they live in.
 */
struct stor_ds *tpool_ds_opts(struct tpool *tp, const char *name, const struct stor_ds_opts *opts)
{
	static const struct stor_ds_opts none;
	const char *props[64];
	struct stor_ds_opts o = opts ? *opts : none;
	struct stor_ds *ds = NULL;
	int ret, given = 0;

	cr_assert_lt(o.nprops, 63);
	for (size_t i = 0; i < o.nprops; i++) {
		props[i] = o.props[i];
		given |= strncmp(o.props[i], "refreservation=", 15) == 0;
	}
	if (!given)
		props[o.nprops++] = "refreservation=none";
	o.props = props;
	ret = stor_ds_create(tp->pool, name, &o, &ds);

	cr_assert_eq(ret, 0, "create %s: %s", name, stor_strerror(ret));
	cr_assert_not_null(ds);
	return ds;
}

struct stor_ds *tpool_ds(struct tpool *tp, const char *name, uint64_t volsize, uint32_t recsize)
{
	struct stor_ds_opts o = { .volsize = volsize, .recordsize = recsize };

	return tpool_ds_opts(tp, name, &o);
}

void tpool_flip_byte(struct tpool *tp, unsigned lun, uint64_t off)
{
	unsigned char b;
	int fd;

	cr_assert(lun < tp->nluns);
	fd = open(tp->lun[lun], O_RDWR);
	cr_assert(fd >= 0, "open %s: %s", tp->lun[lun], strerror(errno));
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0xff;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

int tpool_find(struct tpool *tp, const void *pat, size_t len, unsigned *lun, uint64_t *off)
{
	const size_t chunk = 1 << 20;
	unsigned char *buf = malloc(chunk + len);
	int found = 0;

	cr_assert_not_null(buf);
	cr_assert(len > 0 && len <= 4096);
	for (unsigned i = 0; i < tp->nluns; i++) {
		int fd = open(tp->lun[i], O_RDONLY);
		uint64_t pos = 0;
		size_t carry = 0;

		cr_assert(fd >= 0, "open %s: %s", tp->lun[i], strerror(errno));
		for (;;) {
			/* keep len - 1 bytes of the last chunk so a match across chunks counts */
			ssize_t n = pread(fd, buf + carry, chunk, (off_t)pos);
			size_t have;
			unsigned char *p, *start = buf;

			cr_assert(n >= 0);
			if (n == 0)
				break;
			have = carry + (size_t)n;
			while ((p = memmem(start, have - (size_t)(start - buf), pat, len))) {
				if (!found++) {
					*lun = i;
					*off = pos - carry + (uint64_t)(p - buf);
				}
				start = p + 1;
			}
			pos += (uint64_t)n;
			carry = have < len - 1 ? have : len - 1;
			memmove(buf, buf + have - carry, carry);
		}
		close(fd);
	}
	free(buf);
	return found;
}

uint64_t tpool_used(struct tpool *tp)
{
	struct stor_pool_stat st;
	int ret = stor_pool_stat(tp->pool, &st);

	cr_assert_eq(ret, 0, "pool stat: %s", stor_strerror(ret));
	return st.used;
}

void tpat_fill(void *buf, size_t len, uint64_t rec, uint64_t gen)
{
	uint64_t w = (rec << 32) | (gen & 0xffffffffu);
	unsigned char *p = buf;

	for (size_t i = 0; i + 8 <= len; i += 8)
		memcpy(p + i, &w, 8);
}

int64_t tpat_check(const void *buf, size_t len, uint64_t rec)
{
	const unsigned char *p = buf;
	uint64_t first, w;

	memcpy(&first, p, 8);
	for (size_t i = 8; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		if (w != first)
			return -1;
	}
	if (first == 0)
		return 0;
	if (first >> 32 != rec)
		return -2;
	return (int64_t)(first & 0xffffffffu);
}

void tpat_random(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, len - i < 8 ? len - i : 8);
	}
}

double tnow(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

bool trace_for(double min_s, double max_s, bool (*enough)(void *arg), void *arg)
{
	double t0 = tnow();

	for (;;) {
		double t = tnow() - t0;

		if (t >= max_s || (t >= min_s && enough(arg)))
			return enough(arg);
		poll(NULL, 0, 10);
	}
}
