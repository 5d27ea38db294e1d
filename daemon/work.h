/* SPDX-License-Identifier: MIT */
/*
 * Threads that keep libstore off the loop: I/O workers for record I/O and
 * the libuv threadpool for blocking calls. A unit of work says what to run
 * and which function completes it on the loop thread; work.c knows nothing
 * of who asked (a connection, a call) and includes no layer above it.
 */
#ifndef COFFERD_WORK_H
#define COFFERD_WORK_H

#include <uv.h>

#include "store.h"

/** One record I/O request for the workers. */
struct work_io {
	struct stor_io io;                  /* io.result holds the outcome in @done */
	void (*done)(struct work_io *w);    /* on the thread of the loop that submitted it */
	struct work_io *next;               /* list link for work_submit_io() */
	struct work_loop *home;             /* that loop (work.c's) */
};

/** One blocking call for the libuv threadpool. */
struct work_job {
	uv_work_t req;
	void (*run)(struct work_job *j);              /* on a threadpool thread */
	void (*done)(struct work_job *j, int status); /* on the loop: 0, or -ECANCELED/-EIO */
};

/** Start @n I/O worker threads (none with @io_inline: I/O runs on the loops). @return 0 or -errno */
int work_start(unsigned n, int io_inline);
/**
 * Take I/O on @loop, from its own thread (loops.c): its completions and its
 * ring for the reads of O_DIRECT pools. @return 0 or -errno
 */
int work_loop_attach(uv_loop_t *loop);
/** This loop's I/O is over (nothing in flight): close what work_loop_attach() opened. */
void work_loop_detach(void);
/** Queue a list of I/O requests (linked by ->next, oldest first) for the workers: one wake-up. */
void work_submit_io(struct work_io *list);
/** Run @j on the libuv threadpool of @loop. @return 0 or a libuv error */
int work_submit_job(uv_loop_t *loop, struct work_job *j);
/** Stop and join the I/O workers (the queue must be empty, every loop detached). */
void work_stop(void);

#endif
