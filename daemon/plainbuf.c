/* SPDX-License-Identifier: MIT */
/*
 * Record I/O buffers kept per loop thread (plainbuf.h says what for).
 *
 * A buffer is pages of its own (mmap), so that it can be locked and kept
 * out of core dumps and forked children without touching the heap, and is
 * aligned for O_DIRECT. Sizes are whole pages, from one to PLAINBUF_MAX (a
 * write of a record and its header takes three pages, not four); a loop keeps what it freed on a list per size, linked
 * through each buffer's first word, up to PLAINBUF_KEEP bytes, and only its
 * own thread touches its lists: taking and giving back is no lock and no
 * system call once the pool is warm.
 *
 * Locking: the daemon run as root (or with an unlimited RLIMIT_MEMLOCK)
 * locks every buffer. Under an ordinary user's limit (8 MiB) it locks none:
 * that budget is the keys' (keys_secure_alloc), and a pool of reply
 * buffers would use it up. The buffers are MADV_DONTDUMP either way.
 *
 * Key drops: libstore calls keys_dropped() from whatever thread dropped a
 * key; it bumps the epoch and wakes every loop, which wipes what it keeps.
 * A buffer that was out at the time carries the epoch it was taken at and
 * is wiped when it comes back. The command that dropped the key replies
 * once every loop has wiped (plainbuf_sync), so after `unload-key`,
 * `export` or `destroy` the plaintext is gone, not about to go.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "loops.h"
#include "plainbuf.h"
#include "store.h"

#define PAGE_SHIFT 12
#define CLASSES (PLAINBUF_MAX >> PAGE_SHIFT) /* 1 .. 32 pages */

struct plain_loop {
	void *free[CLASSES]; /* each buffer's first word: the next one */
	size_t kept;         /* bytes on the lists */
	unsigned epoch;      /* the drops this loop's lists were wiped for */
	uv_async_t *wipe;
};

static _Thread_local struct plain_loop *here;

static struct {
	pthread_mutex_t lock; /* wake[], wiped[]: attach, detach, drops and wipes only */
	pthread_cond_t cond;  /* a loop wiped, or left */
	uv_async_t *wake[CONFIG_LOOPS_MAX];
	unsigned wiped[CONFIG_LOOPS_MAX]; /* each loop's epoch */
	atomic_uint epoch;    /* key drops so far */
	int lock_pages;
} pb = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static unsigned class_of(size_t len)
{
	return (unsigned)((len + (1u << PAGE_SHIFT) - 1) >> PAGE_SHIFT) - 1;
}

static size_t class_size(unsigned c)
{
	return (size_t)(c + 1) << PAGE_SHIFT;
}

static void *map_buf(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* by system call, as keys.c does: sanitizer runtimes make mlock() a
	 * no-op that reports success; refused, the buffer is only swappable */
	if (pb.lock_pages)
		(void)syscall(SYS_mlock, p, size);
	(void)madvise(p, size, MADV_DONTDUMP);
#ifdef MADV_WIPEONFORK
	(void)madvise(p, size, MADV_WIPEONFORK);
#endif
	return p;
}

static void unmap_buf(void *p, size_t size)
{
	explicit_bzero(p, size);
	(void)munmap(p, size); /* unlocks too */
}

void *plainbuf_get(size_t len, unsigned *epoch)
{
	unsigned c = class_of(len);
	void *p = here ? here->free[c] : NULL;

	*epoch = atomic_load_explicit(&pb.epoch, memory_order_acquire);
	if (!p)
		return map_buf(class_size(c));
	memcpy(&here->free[c], p, sizeof(void *));
	here->kept -= class_size(c);
	return p;
}

void plainbuf_put(void *p, size_t len, unsigned epoch)
{
	unsigned c = class_of(len);
	size_t size = class_size(c);

	if (!p)
		return;
	/* whatever the buffer held: a write refused before its dataset was
	 * known to be encrypted still carried the plaintext it was sent */
	if (epoch != atomic_load_explicit(&pb.epoch, memory_order_acquire))
		explicit_bzero(p, size);
	if (!here || here->kept + size > PLAINBUF_KEEP) {
		unmap_buf(p, size);
		return;
	}
	memcpy(p, &here->free[c], sizeof(void *));
	here->free[c] = p;
	here->kept += size;
}

/* Wipe (@release: and unmap) every buffer the calling loop keeps. */
static void wipe_kept(int release)
{
	for (unsigned c = 0; c < CLASSES; c++) {
		void **at = &here->free[c];

		while (*at) {
			void *p = *at, *next;

			memcpy(&next, p, sizeof(next));
			if (release) {
				unmap_buf(p, class_size(c));
				*at = next;
				continue;
			}
			explicit_bzero(p, class_size(c));
			memcpy(p, &next, sizeof(next));
			at = (void **)p;
		}
	}
	if (release)
		here->kept = 0;
}

/* Wipe what the calling loop keeps if a key was dropped since it last did. */
static void wipe_here(void)
{
	unsigned now = atomic_load_explicit(&pb.epoch, memory_order_acquire);

	if (!here || here->epoch == now)
		return;
	here->epoch = now;
	wipe_kept(0);
	pthread_mutex_lock(&pb.lock);
	pb.wiped[loops_self()] = now;
	pthread_cond_broadcast(&pb.cond);
	pthread_mutex_unlock(&pb.lock);
}

static void wipe_cb(uv_async_t *a)
{
	(void)a;
	wipe_here();
}

/* Any thread, libstore's locks maybe held: an atomic add and wake-ups. */
static void keys_dropped(void)
{
	atomic_fetch_add_explicit(&pb.epoch, 1, memory_order_acq_rel);
	pthread_mutex_lock(&pb.lock);
	for (unsigned i = 0; i < CONFIG_LOOPS_MAX; i++)
		if (pb.wake[i])
			uv_async_send(pb.wake[i]);
	pthread_mutex_unlock(&pb.lock);
}

unsigned plainbuf_epoch(void)
{
	return atomic_load_explicit(&pb.epoch, memory_order_acquire);
}

void plainbuf_sync(void)
{
	unsigned want = plainbuf_epoch();
	struct timespec until;
	int late = 0;

	wipe_here();
	/* a loop thread waits for none: two waiting for each other would hang */
	if (here)
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += PLAINBUF_SYNC_S;
	pthread_mutex_lock(&pb.lock);
	for (unsigned i = 0; i < CONFIG_LOOPS_MAX && !late; i++)
		while (pb.wake[i] && (int)(pb.wiped[i] - want) < 0 && !late)
			late = pthread_cond_timedwait(&pb.cond, &pb.lock, &until) != 0;
	pthread_mutex_unlock(&pb.lock);
}

void plainbuf_init(void)
{
	struct rlimit rl;

	pb.lock_pages = geteuid() == 0 ||
			(getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY);
	stor_set_key_drop_fn(keys_dropped);
}

int plainbuf_loop_attach(uv_loop_t *loop)
{
	struct plain_loop *pl = calloc(1, sizeof(*pl));
	int ret;

	if (!pl)
		return -ENOMEM;
	pl->wipe = malloc(sizeof(*pl->wipe));
	ret = pl->wipe ? uv_async_init(loop, pl->wipe, wipe_cb) : -ENOMEM;
	if (ret < 0) {
		free(pl->wipe);
		free(pl);
		return ret;
	}
	uv_unref((uv_handle_t *)pl->wipe);
	pl->epoch = atomic_load(&pb.epoch);
	here = pl;
	pthread_mutex_lock(&pb.lock);
	pb.wake[loops_self()] = pl->wipe;
	pb.wiped[loops_self()] = pl->epoch;
	pthread_mutex_unlock(&pb.lock);
	return 0;
}

void plainbuf_loop_detach(void)
{
	struct plain_loop *pl = here;

	if (!pl)
		return;
	pthread_mutex_lock(&pb.lock);
	pb.wake[loops_self()] = NULL;
	pthread_cond_broadcast(&pb.cond);
	pthread_mutex_unlock(&pb.lock);
	wipe_kept(1);
	uv_close((uv_handle_t *)pl->wipe, (uv_close_cb)free);
	here = NULL;
	free(pl);
}
