/* SPDX-License-Identifier: MIT */
/*
 * Temp pool helpers for the engine's unit tests: a mkdtemp directory under
 * ${TMPDIR:-/tmp} holding sparse LUN files and, in state/, the LMDB state, a pool over
 * them, byte-level damage of LUN files, and record patterns that tell a
 * record and its generation apart in every 8-byte word.
 *
 * Functions named tpool_* fail the running Criterion test on any error, so
 * they are for the test process only; a forked child uses the stor_* calls
 * itself and the tpat_* helpers, which never assert.
 */
#ifndef STOR_TEST_FIXTURE_H
#define STOR_TEST_FIXTURE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define TPOOL_NAME "tank"
#define TPOOL_LUNS_MAX 8

struct tpool {
	char dir[1024];                        /* mkdtemp directory, holding the LUN files */
	char state[1100];                      /* dir/state: state_dir (LUNs may not be inside) */
	char lun[TPOOL_LUNS_MAX][PATH_MAX];    /* LUN file paths inside dir */
	const char *lunv[TPOOL_LUNS_MAX];      /* the same, as an argv for create */
	unsigned nluns;
	uint64_t lun_size;
	char name[64];                         /* pool name */
	struct stor_pool_opts opts;            /* state_dir points at dir */
	struct stor_pool *pool;
};

/*
 * The usual fixture of a suite: `static struct tpool tp`, a pool of @nluns
 * LUNs of @lun_size bytes made by setup() and removed by teardown(), for
 * TestSuite(name, .init = setup, .fini = teardown).
 */
#define TPOOL_FIXTURE(nluns, lun_size)                           \
	static struct tpool tp;                                  \
	static void setup(void)                                  \
	{                                                        \
		tpool_init(&tp, (nluns), (lun_size), NULL);      \
	}                                                        \
	static void teardown(void)                               \
	{                                                        \
		tpool_fini(&tp);                                 \
	}

/*
 * Make a temp dir and create pool @name (TPOOL_NAME if NULL) over @nluns
 * sparse LUN files of @lun_size bytes. @opts may be NULL; its state_dir and
 * lun_size are replaced (state_dir by tp->state).
 */
void tpool_init(struct tpool *tp, unsigned nluns, uint64_t lun_size,
		const struct stor_pool_opts *opts);
/* Same, but a second pool in the directory of @base (state shared). */
void tpool_init_in(struct tpool *tp, const struct tpool *base, const char *name, unsigned nluns,
		   uint64_t lun_size);
/* Close the pool if open and remove the directory with everything in it. */
void tpool_fini(struct tpool *tp);
/* Close only (asserts the close returned 0). */
void tpool_close(struct tpool *tp);
/* Open again; returns the stor_pool_open() code, tp->pool set on success. */
int tpool_open(struct tpool *tp);
/* Close and open, asserting both succeed. */
void tpool_reopen(struct tpool *tp);

/* Create dataset @name with @volsize and @recsize (0 = default), open it. */
struct stor_ds *tpool_ds(struct tpool *tp, const char *name, uint64_t volsize, uint32_t recsize);

/* Create dataset @name with @opts, open it (any failure fails the test). */
struct stor_ds *tpool_ds_opts(struct tpool *tp, const char *name, const struct stor_ds_opts *opts);

/* pwrite one changed byte (xor 0xff) at @off of LUN @lun's file. */
void tpool_flip_byte(struct tpool *tp, unsigned lun, uint64_t off);

/*
 * Find @len bytes of @pat in the LUN files (a record written with a unique,
 * incompressible pattern lands there in clear text when not encrypted).
 * @return the number of places found; the first in *lun and *off.
 */
int tpool_find(struct tpool *tp, const void *pat, size_t len, unsigned *lun, uint64_t *off);

/* Pool space in use right now (stor_pool_stat.used). */
uint64_t tpool_used(struct tpool *tp);

/* ---- patterns (never assert; safe in a forked child) ---- */

/* Every 8-byte word = (@rec << 32) | (@gen & 0xffffffff). */
void tpat_fill(void *buf, size_t len, uint64_t rec, uint64_t gen);
/*
 * Check a buffer filled by tpat_fill: every word must be the same and name
 * @rec. @return the generation (0 if the whole buffer is zero: unwritten),
 * -1 if words differ (torn) or name another record (-2).
 */
int64_t tpat_check(const void *buf, size_t len, uint64_t rec);
/* Deterministic incompressible bytes from @seed (xorshift). */
void tpat_random(void *buf, size_t len, uint64_t seed);

/* ---- time ---- */

/* CLOCK_MONOTONIC in seconds. */
double tnow(void);
/*
 * Let threads race for @min_s seconds, then on until @enough(@arg) holds
 * (they did the work the test counts), up to @max_s: a loaded machine gets
 * the time it needs instead of failing a count. @return @enough at the end
 */
bool trace_for(double min_s, double max_s, bool (*enough)(void *arg), void *arg);

#endif
