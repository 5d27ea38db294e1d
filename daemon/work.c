// SPDX-License-Identifier: MIT
/*
 * Threads that keep libstore off the loop.
 *
 * Record I/O goes to a few worker threads through one mutex+cond queue. A
 * worker takes everything that is ready (up to IO_BATCH requests, across
 * connections and datasets) and hands it to stor_io_submit() in one call, so
 * the crypto sees bursts and the LUN extents go out together; completions go
 * back to the loop on one list with one uv_async_send per batch. Per request
 * that is one lock on each side and no syscall of its own.
 *
 * Blocking admin calls (pool import, PBKDF2 in load-key...) are rare and go
 * to the libuv threadpool one by one.
 */
#include <config.h> /* the autoconf header first: _GNU_SOURCE, PACKAGE_VERSION */

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "rpc.h"

#define IO_BATCH 64u

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rpc_call *head, *tail; /* ready requests, FIFO */
	int stop;
	pthread_t *threads;
	unsigned nthreads;
	pthread_mutex_t done_lock;
	struct rpc_call *done;        /* completed, for the loop (LIFO, reversed there) */
	uv_async_t async;
	int async_init;
} wq = {
	/* adaptive: the sections are a few pointer moves, spinning beats sleeping */
	.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
	.cond = PTHREAD_COND_INITIALIZER,
	.done_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
};

static void count_io(const struct rpc_call *c)
{
	switch (c->io.op) {
	case STOR_IO_READ:
		atomic_fetch_add_explicit(&rpc_stats.reads, 1, memory_order_relaxed);
		if (c->status == 0)
			atomic_fetch_add_explicit(&rpc_stats.read_bytes, c->io.len,
						  memory_order_relaxed);
		break;
	case STOR_IO_WRITE:
		atomic_fetch_add_explicit(&rpc_stats.writes, 1, memory_order_relaxed);
		if (c->status == 0)
			atomic_fetch_add_explicit(&rpc_stats.write_bytes, c->io.len,
						  memory_order_relaxed);
		break;
	case STOR_IO_FLUSH:
		atomic_fetch_add_explicit(&rpc_stats.flushes, 1, memory_order_relaxed);
		break;
	case STOR_IO_DISCARD:
		atomic_fetch_add_explicit(&rpc_stats.discards, 1, memory_order_relaxed);
		break;
	}
}

/*
 * A worker's malloc arena keeps the peak of a burst: a fill of 1 MiB writes
 * has up to IO_BATCH of them in record buffers per worker, and with the pages
 * left resident RssAnon stayed at 139 MiB through every later read run of
 * encryption.sh. Giving free pages back once a second costs a walk of the
 * free lists; the loop thread's main arena trims itself.
 */
static void trim_now_and_then(void)
{
	static _Thread_local time_t last;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	if (now.tv_sec == last)
		return;
	last = now.tv_sec;
	malloc_trim(0);
}

/* Run up to IO_BATCH requests of @batch as one stor_io_submit(). */
static void run_batch(struct rpc_call **batch, size_t n)
{
	struct stor_io ios[IO_BATCH];

	for (size_t i = 0; i < n; i++) {
		ios[i] = batch[i]->io;
		ios[i].result = 0;
	}
	stor_io_submit(ios, n);
	atomic_fetch_add_explicit(&rpc_stats.batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&rpc_stats.batched_ios, n, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		batch[i]->status = ios[i].result;
		count_io(batch[i]);
	}
}

static int run_inline; /* io_inline: batches run on the loop thread */

static void *worker(void *arg)
{
	struct rpc_call *batch[IO_BATCH];

	(void)arg;
	for (;;) {
		struct rpc_call *first, *last;
		size_t n = 0;

		pthread_mutex_lock(&wq.lock);
		while (!wq.head && !wq.stop)
			pthread_cond_wait(&wq.cond, &wq.lock);
		if (!wq.head && wq.stop) {
			pthread_mutex_unlock(&wq.lock);
			break;
		}
		while (wq.head && n < IO_BATCH) {
			batch[n++] = wq.head;
			wq.head = wq.head->next;
		}
		if (!wq.head)
			wq.tail = NULL;
		else
			pthread_cond_signal(&wq.cond); /* more left: wake a sibling */
		pthread_mutex_unlock(&wq.lock);

		run_batch(batch, n);
		for (size_t i = 0; i < n; i++)
			batch[i]->next = i + 1 < n ? batch[i + 1] : NULL;
		first = batch[0];
		last = batch[n - 1];
		pthread_mutex_lock(&wq.done_lock);
		last->next = wq.done;
		wq.done = first;
		pthread_mutex_unlock(&wq.done_lock);
		uv_async_send(&wq.async);
		trim_now_and_then();
	}
	return NULL;
}

static void async_cb(uv_async_t *h)
{
	struct rpc_call *list, *next;

	(void)h;
	pthread_mutex_lock(&wq.done_lock);
	list = wq.done;
	wq.done = NULL;
	pthread_mutex_unlock(&wq.done_lock);
	for (; list; list = next) {
		next = list->next;
		rpc_call_done(list);
	}
}

int work_start(uv_loop_t *loop, unsigned n, int io_inline)
{
	int ret;

	run_inline = io_inline;
	if (n == 0)
		n = 1;
	ret = uv_async_init(loop, &wq.async, async_cb);
	if (ret < 0)
		return ret;
	wq.async_init = 1;
	if (io_inline)
		return 0; /* no workers: tick_cb runs every batch itself */
	wq.threads = calloc(n, sizeof(*wq.threads));
	if (!wq.threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		ret = pthread_create(&wq.threads[i], NULL, worker, NULL);
		if (ret) {
			log_err("worker %u: %s", i, strerror(ret));
			return -ret;
		}
		wq.nthreads++;
	}
	return 0;
}

void work_submit_io(struct rpc_call *list)
{
	struct rpc_call *tail = list;

	if (!list)
		return;
	if (run_inline) {
		while (list) {
			struct rpc_call *batch[IO_BATCH];
			size_t n = 0;

			while (list && n < IO_BATCH) {
				batch[n++] = list;
				list = list->next;
			}
			run_batch(batch, n);
			for (size_t i = 0; i < n; i++)
				rpc_call_done(batch[i]);
		}
		return;
	}
	while (tail->next)
		tail = tail->next;
	pthread_mutex_lock(&wq.lock);
	if (wq.tail)
		wq.tail->next = list;
	else
		wq.head = list;
	wq.tail = tail;
	pthread_cond_signal(&wq.cond);
	pthread_mutex_unlock(&wq.lock);
}

static void admin_work(uv_work_t *w)
{
	struct rpc_call *c = w->data;

	handlers_run(c);
}

static void admin_after(uv_work_t *w, int status)
{
	struct rpc_call *c = w->data;

	if (status < 0 && c->status == 0)
		c->status = status == UV_ECANCELED ? -ECANCELED : -EIO;
	rpc_call_done(c);
}

int work_submit_admin(uv_loop_t *loop, struct rpc_call *c)
{
	c->work.data = c;
	return uv_queue_work(loop, &c->work, admin_work, admin_after);
}

void work_stop(void)
{
	pthread_mutex_lock(&wq.lock);
	wq.stop = 1;
	pthread_cond_broadcast(&wq.cond);
	pthread_mutex_unlock(&wq.lock);
	for (unsigned i = 0; i < wq.nthreads; i++)
		pthread_join(wq.threads[i], NULL);
	free(wq.threads);
	wq.threads = NULL;
	wq.nthreads = 0;
	if (wq.async_init) {
		uv_close((uv_handle_t *)&wq.async, NULL);
		wq.async_init = 0;
	}
}
