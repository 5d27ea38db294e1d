// SPDX-License-Identifier: MIT
/*
 * Threads that keep libstore off the loop.
 *
 * Record I/O goes to worker threads through one mutex+cond queue. A worker
 * hands what it takes (across connections and datasets) to stor_io_submit()
 * in one call, so the crypto sees bursts and the LUN extents go out
 * together; completions go back to the loop that submitted them (each event
 * loop has its own list, loops.c) with one uv_async_send per loop and batch.
 * Per request that is one lock on each side and no syscall of its own.
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
 * Reads of pools on O_DIRECT LUNs skip the workers: they start on their
 * loop and their extents go to a ring of that loop's own (stor_read_start), each
 * request answered in the turn its own extents arrive. A worker waiting on a
 * batch sends nothing new meanwhile, so with two workers the disk saw at
 * most two batches in flight, each as slow as its slowest read, however
 * many the clients had sent; on the loop's ring every read sent is in
 * flight, and no thread switches per batch. In encryption.sh's O_DIRECT
 * pass (192 datasets, 384 reads in flight) clear went from 0.69 to 0.94 of
 * fio io_uring on the same files (medians of 3 alternated rounds).
 *
 * Blocking admin calls (pool import, PBKDF2 in load-key...) are rare and go
 * to the libuv threadpool one by one.
 *
 * A request is completed through its own function pointer; this file names
 * no layer above it (work.h).
 */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
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
} wq = {
	/* adaptive: the sections are a few pointer moves, spinning beats sleeping */
	.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
	.cond = PTHREAD_COND_INITIALIZER,
};

/*
 * Each event loop's own (loops.c): the workers hand a request back to the
 * loop that submitted it, and the loop's O_DIRECT reads go to its own ring.
 */
struct work_loop {
	pthread_mutex_t done_lock;
	struct work_io *done;        /* completed, for the loop (LIFO, reversed there) */
	uv_async_t async;
	size_t out;                  /* requests given to the workers, not yet back */
	struct stor_reader *reader;  /* reads of O_DIRECT pools, on the loop */
	uv_poll_t reader_poll;
	int reader_efd;
	int handles;                 /* open: freed when the last closes */
};

static _Thread_local struct work_loop *here;

/*
 * A worker's malloc arena keeps the peak of a burst: a fill of 1 MiB writes
 * has up to IO_BATCH of them in record buffers per worker, and with the pages
 * left resident RssAnon stayed at 139 MiB through every later read run of
 * encryption.sh. Giving free pages back once a second costs a walk of the
 * free lists; the loop thread's main arena trims itself. A worker that goes
 * idle with a trim skipped trims a second later: reads of O_DIRECT pools
 * never wake the workers, and the arenas kept the writes' peak (158 MiB)
 * through them.
 * @return 1 if a trim was due and skipped
 */
static int trim_now_and_then(void)
{
	static _Thread_local time_t last;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	if (now.tv_sec == last)
		return 1;
	last = now.tv_sec;
	stor_heap_trim();
	return 0;
}

/* Sleep until there is work; @untrimmed: wake after a second to trim. */
static void wait_for_work(int *untrimmed)
{
	while (!wq.head && !wq.stop) {
		struct timespec at;

		wq.idle++;
		if (!*untrimmed) {
			pthread_cond_wait(&wq.cond, &wq.lock);
		} else {
			clock_gettime(CLOCK_REALTIME, &at);
			at.tv_sec += 1;
			if (pthread_cond_timedwait(&wq.cond, &wq.lock, &at) == ETIMEDOUT) {
				pthread_mutex_unlock(&wq.lock);
				*untrimmed = trim_now_and_then();
				pthread_mutex_lock(&wq.lock);
			}
		}
		wq.idle--;
	}
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

/*
 * Give the requests of a batch back to the loops that sent them: one lock
 * and one wake-up per loop in the batch (the loops share the workers, and a
 * batch may hold requests of several).
 */
static void hand_back(struct work_io **batch, size_t n)
{
	size_t i = 0;

	while (i < n) {
		struct work_loop *home = batch[i]->home;
		struct work_io *first = NULL, *last = NULL;

		for (size_t k = i; k < n; k++) {
			if (!batch[k] || batch[k]->home != home)
				continue;
			batch[k]->next = NULL;
			if (last)
				last->next = batch[k];
			else
				first = batch[k];
			last = batch[k];
			batch[k] = NULL;
		}
		pthread_mutex_lock(&home->done_lock);
		last->next = home->done;
		home->done = first;
		/* under the lock: once the loop has the list, no worker touches the loop */
		uv_async_send(&home->async);
		pthread_mutex_unlock(&home->done_lock);
		while (i < n && !batch[i])
			i++;
	}
}

static void *worker(void *arg)
{
	struct work_io *batch[IO_BATCH];
	int untrimmed = 0;
	char name[16];

	/* named for top -H, perf and ps -L: which threads the cores go to */
	snprintf(name, sizeof(name), "cofferd-io%u", (unsigned)(uintptr_t)arg);
	(void)pthread_setname_np(pthread_self(), name);
	for (;;) {
		size_t n = 0, share;

		pthread_mutex_lock(&wq.lock);
		wait_for_work(&untrimmed);
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
		hand_back(batch, n);
		untrimmed = trim_now_and_then();
	}
	return NULL;
}

static void async_cb(uv_async_t *h)
{
	struct work_io *list, *next;

	(void)h;
	pthread_mutex_lock(&here->done_lock);
	list = here->done;
	here->done = NULL;
	pthread_mutex_unlock(&here->done_lock);
	for (; list; list = next) {
		next = list->next;
		here->out--;
		list->done(list);
	}
}

static void reader_done(struct stor_io *io)
{
	struct work_io *w = (struct work_io *)((char *)io - offsetof(struct work_io, io));

	w->done(w);
}

static void reader_cb(uv_poll_t *h, int status, int events)
{
	uint64_t n;

	(void)h;
	(void)status;
	(void)events;
	if (read(here->reader_efd, &n, sizeof(n)) < 0) {
		/* EAGAIN: nothing new; the completions are reaped all the same */
	}
	stor_reader_reap(here->reader);
}

/*
 * Reads of pools on O_DIRECT LUNs stay on the loop, each extent on its own
 * in the reader's ring (stor_read_start): no worker hand-off, and the disk
 * sees every read the clients have in flight. Where io_uring is not allowed
 * they go to the workers as before.
 */
static void loop_handle_closed(uv_handle_t *h)
{
	struct work_loop *wl = h->data;

	if (h == (uv_handle_t *)&wl->reader_poll)
		close(wl->reader_efd);
	if (--wl->handles == 0)
		free(wl);
}

static void reader_start(uv_loop_t *loop)
{
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (efd < 0)
		return;
	here->reader = stor_reader_new(efd, reader_done);
	if (!here->reader || uv_poll_init(loop, &here->reader_poll, efd) < 0) {
		stor_reader_free(here->reader);
		here->reader = NULL;
		close(efd);
		return;
	}
	here->reader_efd = efd;
	here->reader_poll.data = here;
	here->handles++;
	if (uv_poll_start(&here->reader_poll, UV_READABLE, reader_cb) < 0) {
		stor_reader_free(here->reader);
		here->reader = NULL;
		uv_close((uv_handle_t *)&here->reader_poll, loop_handle_closed);
	}
}

/* Wait for every read of the reader: the loop is about to block. */
static void reader_drain(void)
{
	struct pollfd pfd = { .fd = here->reader_efd, .events = POLLIN };

	while (here->reader && stor_reader_inflight(here->reader)) {
		poll(&pfd, 1, 100);
		reader_cb(NULL, 0, 0);
	}
}

static void reader_stop(void)
{
	if (!here->reader)
		return;
	reader_drain(); /* nothing, once every connection is gone */
	stor_reader_free(here->reader);
	here->reader = NULL;
	uv_close((uv_handle_t *)&here->reader_poll, loop_handle_closed);
}

/*
 * Does the whole of @list go to the reader: reads only, of pools it takes,
 * and nothing of the workers' still out? Mixed work stays on the workers,
 * where it ran before; the ring takes pure read streams.
 */
static int for_reader(const struct work_io *list)
{
	if (!here->reader || here->out)
		return 0;
	for (; list; list = list->next)
		if (list->io.op != STOR_IO_READ || !list->io.ds || !stor_ds_reads_async(list->io.ds))
			return 0;
	return 1;
}

static void to_reader(struct work_io *list)
{
	while (list) {
		struct stor_io *ios[IO_BATCH];
		size_t n = 0;

		/* taken off the list first: a completion may link it anew */
		while (list && n < IO_BATCH) {
			ios[n++] = &list->io;
			list = list->next;
		}
		STATS_ADD(ring_reads, n);
		stor_read_start(here->reader, ios, n);
	}
}

int work_start(unsigned n, int io_inline)
{
	int ret;

	run_inline = io_inline;
	if (io_inline)
		return 0; /* no workers: work_submit_io() runs every batch itself */
	if (n == 0)
		n = 1;
	wq.threads = calloc(n, sizeof(*wq.threads));
	if (!wq.threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		ret = pthread_create(&wq.threads[i], NULL, worker, (void *)(uintptr_t)i);
		if (ret) {
			log_err("worker %u: %s", i, strerror(ret));
			return -ret;
		}
		wq.nthreads++;
	}
	return 0;
}

int work_loop_attach(uv_loop_t *loop)
{
	struct work_loop *wl = calloc(1, sizeof(*wl));
	int ret;

	if (!wl)
		return -ENOMEM;
	ret = uv_async_init(loop, &wl->async, async_cb);
	if (ret < 0) {
		free(wl);
		return ret;
	}
	pthread_mutex_init(&wl->done_lock, NULL);
	wl->async.data = wl;
	wl->handles = 1;
	wl->reader_efd = -1;
	here = wl;
	reader_start(loop);
	return 0;
}

void work_loop_detach(void)
{
	reader_stop();
	uv_close((uv_handle_t *)&here->async, loop_handle_closed);
	here = NULL;
}

void work_submit_io(struct work_io *list)
{
	struct work_io *tail = list;
	size_t count = 1;

	if (!list)
		return;
	if (for_reader(list)) {
		to_reader(list);
		return;
	}
	if (run_inline) {
		/* a commit waits for the reader sections the ring's reads hold,
		 * which only this thread can end */
		reader_drain();
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
	for (struct work_io *w = list; w; w = w->next)
		w->home = here;
	here->out += count;
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
	static _Thread_local int named;
	struct work_job *j = w->data;

	/* libuv's pool threads would show the name of the loop that started them */
	if (!named)
		named = pthread_setname_np(pthread_self(), "cofferd-admin") == 0;
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
}
