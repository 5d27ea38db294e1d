// SPDX-License-Identifier: MIT
/*
 * Event loops, one per core (`loops` in cofferd.conf), after SPDK's
 * reactors and Seastar's shards: each loop runs on its own thread, owns the
 * connections it was given and everything they do (framing, dispatch, the
 * io_uring of its O_DIRECT reads, the completions of its requests, the
 * replies), and runs a request to completion without handing it to another
 * loop. The main loop (index 0) also accepts, and keeps what is the
 * daemon's rather than a connection's: signals, timers, the threadpool's
 * admin calls, events and metrics.
 *
 * Each layer keeps its per-loop state behind a thread-local pointer set by
 * its attach function, so the code of a request reads as it did with one
 * loop; what the loops share (the limits per uid, max_buffered, the
 * registry's client list) is shared on purpose and says how.
 */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "loops.h"

struct loop_thread {
	pthread_t thread;
	uv_loop_t loop;
	unsigned idx;
	int (*attach)(uv_loop_t *loop);
	int ret;               /* what attach returned */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ready;
};

static struct {
	struct loop_thread *t; /* loops 1..n-1 at t[1..n-1] */
	unsigned n;
} lp = { .n = 1 };

static _Thread_local unsigned self;

static void *loop_main(void *arg)
{
	struct loop_thread *t = arg;
	char name[16];
	int ret;

	self = t->idx;
	snprintf(name, sizeof(name), "cofferd-loop%u", t->idx);
	(void)pthread_setname_np(pthread_self(), name);
	ret = uv_loop_init(&t->loop);
	if (ret == 0)
		ret = t->attach(&t->loop);
	pthread_mutex_lock(&t->lock);
	t->ret = ret;
	t->ready = 1;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	if (ret < 0)
		return NULL;
	uv_run(&t->loop, UV_RUN_DEFAULT);
	uv_loop_close(&t->loop);
	return NULL;
}

int loops_start(uv_loop_t *main, unsigned n, int (*attach)(uv_loop_t *loop))
{
	int ret;

	self = 0;
	ret = attach(main);
	if (ret < 0 || n <= 1)
		return ret;
	lp.t = calloc(n, sizeof(*lp.t));
	if (!lp.t)
		return -ENOMEM;
	for (unsigned i = 1; i < n; i++) {
		struct loop_thread *t = &lp.t[i];

		*t = (struct loop_thread){ .idx = i, .attach = attach };
		pthread_mutex_init(&t->lock, NULL);
		pthread_cond_init(&t->cond, NULL);
		/* counted first: attach sizes what it shares by loops_count() */
		lp.n = i + 1;
		ret = pthread_create(&t->thread, NULL, loop_main, t);
		if (ret) {
			lp.n = i;
			log_err("loop %u: %s", i, strerror(ret));
			return -ret;
		}
		pthread_mutex_lock(&t->lock);
		while (!t->ready)
			pthread_cond_wait(&t->cond, &t->lock);
		pthread_mutex_unlock(&t->lock);
		if (t->ret < 0) {
			pthread_join(t->thread, NULL);
			lp.n = i;
			log_err("loop %u: %s", i, uv_strerror(t->ret));
			return t->ret;
		}
	}
	return 0;
}

unsigned loops_count(void)
{
	return lp.n;
}

unsigned loops_self(void)
{
	return self;
}

void loops_join(void)
{
	for (unsigned i = 1; i < lp.n; i++)
		pthread_join(lp.t[i].thread, NULL);
	free(lp.t);
	lp.t = NULL;
	lp.n = 1;
}

unsigned loops_auto(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	if (ncpu < 1)
		return 1;
	return ncpu > (long)CONFIG_LOOPS_MAX ? CONFIG_LOOPS_MAX : (unsigned)ncpu;
}
