/* SPDX-License-Identifier: MIT */
/*
 * A failed STOR_ASSERT (stor_assert.h): said on stderr, and fatal in
 * debug builds (--enable-debug defines STOR_DEBUG). A lock contract that
 * fails (STOR_ASSERT_HELD): said, and fatal wherever it is compiled in.
 * Who holds a lock is read from glibc's own record of it; only this file
 * knows glibc's layout of pthread_mutex_t and pthread_rwlock_t.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/stor_assert.h"

int stor_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	/* stderr, unbuffered and always there: the daemon's log may be what broke */
	fprintf(stderr, "libstore: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
#ifdef STOR_DEBUG
	abort();
#endif
	return 1;
}

#ifdef __GLIBC__
/* glibc's flag in __kind of a mutex it elides (nptl's pthreadP.h): such a
 * lock leaves __owner alone */
#define MUTEX_ELIDED 256

/* this thread's kernel id, asked once (0: not yet) */
static _Thread_local pid_t my_tid;
static pthread_once_t fork_watch = PTHREAD_ONCE_INIT;

/* the child of a fork is one thread with an id of its own, and this
 * thread's copy of my_tid is its parent's */
static void forget_tid(void)
{
	my_tid = 0;
}

static void watch_forks(void)
{
	pthread_atfork(NULL, NULL, forget_tid);
}

static int thread_id(void)
{
	if (!my_tid) {
		pthread_once(&fork_watch, watch_forks);
		my_tid = gettid();
	}
	return my_tid;
}

/* Relaxed loads: a lock this thread holds has this thread's id, which it
 * wrote itself; one it does not hold never has it, whatever the race. */
int stor_mutex_owner(const pthread_mutex_t *m)
{
	if (__atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & MUTEX_ELIDED)
		return -1;
	return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
}

int stor_rwlock_writer(const pthread_rwlock_t *rw)
{
	return __atomic_load_n(&rw->__data.__cur_writer, __ATOMIC_RELAXED);
}
#else
static int thread_id(void)
{
	return -1;
}

int stor_mutex_owner(const pthread_mutex_t *m)
{
	(void)m;
	return -1;
}

int stor_rwlock_writer(const pthread_rwlock_t *rw)
{
	(void)rw;
	return -1;
}
#endif

#ifdef __SANITIZE_ADDRESS__
/* the sanitizer's runtime: the stack of the call, symbolized */
void __sanitizer_print_stack_trace(void);
#define print_stack() __sanitizer_print_stack_trace()
#else
#define print_stack() ((void)0)
#endif

void stor_lock_check(const char *lock, int owner, const char *file, int line, const char *func)
{
	if (owner == -1 || owner == thread_id())
		return;
	if (owner)
		fprintf(stderr, "libstore: lock not held: %s (%s:%d, %s): thread %d holds it, not %d\n",
			lock, file, line, func, owner, thread_id());
	else
		fprintf(stderr, "libstore: lock not held: %s (%s:%d, %s): no thread holds it\n",
			lock, file, line, func);
	print_stack(); /* who called without the lock */
	abort();
}
