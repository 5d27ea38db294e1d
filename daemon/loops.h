/* SPDX-License-Identifier: MIT */
/*
 * The daemon's event loops (loops.c): the main loop and `loops - 1` more,
 * each on a thread of its own, each serving the connections it was given.
 */
#ifndef COFFERD_LOOPS_H
#define COFFERD_LOOPS_H

#include <uv.h>

#include "conf.h"

/**
 * Serve from @n loops: @main (index 0, on the calling thread) and @n - 1
 * new ones, each started on its thread with @attach, which sets up each
 * layer's part of a loop and returns 0 or a negative errno. A loop's
 * thread ends when its last handle is closed.
 * @return 0, or a negative errno (then the daemon exits: loops started run on)
 */
int loops_start(uv_loop_t *main, unsigned n, int (*attach)(uv_loop_t *loop));
/** The number of loops (1 before loops_start()). */
unsigned loops_count(void);
/** The index of the calling loop thread: 0 on the main loop's. */
unsigned loops_self(void);
/** Wait for the threads of the loops other than the main one to end. */
void loops_join(void);
/** The count `loops = auto` means: one per online CPU, at most CONFIG_LOOPS_MAX. */
unsigned loops_auto(void);

#endif
