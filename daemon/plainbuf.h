/* SPDX-License-Identifier: MIT */
/*
 * Buffers for the bytes of record I/O (plainbuf.c): read replies and write
 * bodies, which hold an encrypted dataset's plaintext. Each loop thread
 * keeps the ones it freed, by size, and hands them out again: a request
 * makes no heap allocation of its own, and its plaintext is not wiped
 * when it is done (the next request overwrites it). The buffers are pages
 * of their own, locked where RLIMIT_MEMLOCK leaves room beside the keys,
 * never in a core dump nor a forked child. Kept plaintext does not outlive
 * its key: once a key is dropped (stor_set_key_drop_fn) every loop wipes
 * the buffers it keeps, and a buffer taken before the drop is wiped when
 * it comes back. A buffer leaving the pool for good is wiped too.
 */
#ifndef COFFERD_PLAINBUF_H
#define COFFERD_PLAINBUF_H

#include <stddef.h>

#include <uv.h>

/** Requests of more bytes than this (or of fewer than a page) get malloc. */
#define PLAINBUF_MAX (128u << 10)
/** The most bytes a loop keeps free. */
#define PLAINBUF_KEEP (8u << 20)

/** Whether a buffer of @len bytes comes from the pool. */
static inline int plainbuf_takes(size_t len)
{
	return len >= 4096 && len <= PLAINBUF_MAX;
}

/**
 * A page-aligned buffer of at least @len bytes (plainbuf_takes(@len)),
 * from the calling loop's pool; *@epoch says when it was taken.
 * @return NULL: no memory
 */
void *plainbuf_get(size_t len, unsigned *epoch);
/**
 * Give back @p (plainbuf_get(@len) of this loop thread): wiped here if a
 * key was dropped since @epoch.
 */
void plainbuf_put(void *p, size_t len, unsigned epoch);

/** Seconds plainbuf_sync() waits for the loops at most: they never block that long. */
#define PLAINBUF_SYNC_S 5

/** Key drops so far: compare two values to learn whether one happened between. */
unsigned plainbuf_epoch(void);
/**
 * Wipe the calling loop's buffers and, off the loops, wait until every loop
 * has wiped its own for the key drops so far.
 */
void plainbuf_sync(void);

/** Keep buffers on @loop, from its own thread. @return 0 or a libuv error */
int plainbuf_loop_attach(uv_loop_t *loop);
/** The calling loop is ending: wipe and release what it keeps. */
void plainbuf_loop_detach(void);
/** Wipe every loop's buffers on key drops from now on (call once, at start). */
void plainbuf_init(void);

#endif
