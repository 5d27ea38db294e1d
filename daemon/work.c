// SPDX-License-Identifier: MIT
/*
 * Threads that keep libstore off the loop.
 *
 * Record I/O goes to worker threads through one mutex+cond queue. A worker
 * hands what it takes (across connections and datasets) to stor_io_submit()
 * in one call, so the crypto sees bursts and the LUN extents go out
 * together; completions go back to the loop on one list with one
 * uv_async_send per batch. Per request that is one lock on each side and no
 * syscall of its own.
 *
 * A batch answers when its slowest extent is back, so one worker taking all
 * that is ready would hold a disk to one batch at a time, each as slow as
 * its worst read. A worker takes its share of what is queued, split over
 * the workers asleep and itself: with little load every request goes out
 * at once on a worker of its own; with every worker busy, batches grow up
 * to IO_BATCH and the crypto gets its bursts. More workers than cores did
 * not pay on a disk: the thread switches cost more CPU than the extra
 * reads in flight gave back.
 *
 * Blocking admin calls (pool import, PBKDF2 in load-key...) are rare and go
 * to the libuv threadpool one by one.
 *
 * A request is completed through its own function pointer; this file names
 * no layer above it (work.h).
 */
#include <config.h> /* the autoconf header first: _GNU_SOURCE, PACKAGE_VERSION */

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "counters.h"
#include "log.h"
#include "work.h"

#define IO_BATCH 64u

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct work_io *head, *tail; /* ready requests, FIFO */
	size_t queued;               /* requests on it */
	unsigned idle;               /* workers waiting for requests */
	int stop;
	pthread_t *threads;
	unsigned nthreads;
	pthread_mutex_t done_lock;
	struct work_io *done;        /* completed, for the loop (LIFO, reversed there) */
	uv_async_t async;
	int async_init;
} wq = {
	/* adaptive: the sections are a few pointer moves, spinning beats sleeping */
	.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
	.cond = PTHREAD_COND_INITIALIZER,
	.done_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
};

/*
 * A worker's malloc arena keeps the peak of a burst: a fill of 1 MiB writes
 * has up to IO_BATCH of them in record buffers per worker, and with the pages
 * left resident RssAnon stayed at 139 MiB through every later read run of
 * encryption.sh. Giving free pages back once a second costs a walk of the
 * free lists; the loop thread's main arena trims itself.
 */
static void trim_now_and_then(void)
{
#ifdef __SANITIZE_ADDRESS__
	/* ASan's allocator owns the heap: glibc's arenas may never have been
	 * set up, and malloc_trim() then reads through a null arena */
#else
	static _Thread_local time_t last;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	if (now.tv_sec == last)
		return;
	last = now.tv_sec;
	malloc_trim(0);
#endif
}

/* Run up to IO_BATCH requests of @batch as one stor_io_submit(). */
static void run_batch(struct work_io **batch, size_t n)
{
	struct stor_io ios[IO_BATCH];

	for (size_t i = 0; i < n; i++) {
		ios[i] = batch[i]->io;
		ios[i].result = 0;
	}
	stor_io_submit(ios, n);
	STATS_ADD(batches, 1);
	STATS_ADD(batched_ios, n);
	for (size_t i = 0; i < n; i++)
		batch[i]->io.result = ios[i].result;
}

static int run_inline; /* io_inline: batches run on the loop thread */

static void *worker(void *arg)
{
	struct work_io *batch[IO_BATCH];

	(void)arg;
	for (;;) {
		struct work_io *first, *last;
		size_t n = 0, share;

		pthread_mutex_lock(&wq.lock);
		while (!wq.head && !wq.stop) {
			wq.idle++;
			pthread_cond_wait(&wq.cond, &wq.lock);
			wq.idle--;
		}
		if (!wq.head && wq.stop) {
			pthread_mutex_unlock(&wq.lock);
			break;
		}
		/* this worker's part of the queue, the rest for the sleepers */
		share = (wq.queued + wq.idle) / (wq.idle + 1);
		if (share > IO_BATCH)
			share = IO_BATCH;
		while (wq.head && n < share) {
			batch[n++] = wq.head;
			wq.head = wq.head->next;
		}
		wq.queued -= n;
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
	struct work_io *list, *next;

	(void)h;
	pthread_mutex_lock(&wq.done_lock);
	list = wq.done;
	wq.done = NULL;
	pthread_mutex_unlock(&wq.done_lock);
	for (; list; list = next) {
		next = list->next;
		list->done(list);
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
		return 0; /* no workers: work_submit_io() runs every batch itself */
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

void work_submit_io(struct work_io *list)
{
	struct work_io *tail = list;
	size_t count = 1;

	if (!list)
		return;
	if (run_inline) {
		while (list) {
			struct work_io *batch[IO_BATCH];
			size_t n = 0;

			while (list && n < IO_BATCH) {
				batch[n++] = list;
				list = list->next;
			}
			run_batch(batch, n);
			for (size_t i = 0; i < n; i++)
				batch[i]->done(batch[i]);
		}
		return;
	}
	while (tail->next) {
		tail = tail->next;
		count++;
	}
	pthread_mutex_lock(&wq.lock);
	if (wq.tail)
		wq.tail->next = list;
	else
		wq.head = list;
	wq.tail = tail;
	wq.queued += count;
	pthread_cond_signal(&wq.cond);
	pthread_mutex_unlock(&wq.lock);
}

static void job_run(uv_work_t *w)
{
	struct work_job *j = w->data;

	j->run(j);
}

static void job_after(uv_work_t *w, int status)
{
	struct work_job *j = w->data;

	j->done(j, status == 0 ? 0 : status == UV_ECANCELED ? -ECANCELED : -EIO);
}

int work_submit_job(uv_loop_t *loop, struct work_job *j)
{
	j->req.data = j;
	return uv_queue_work(loop, &j->req, job_run, job_after);
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
