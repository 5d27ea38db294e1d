/* SPDX-License-Identifier: MIT */
/*
 * Lock contracts (base/stor_assert.h): glibc's record of a mutex's owner,
 * which STOR_ASSERT_HELD reads, is this thread's id exactly while this
 * thread holds the mutex; a *_locked function called without its lock
 * aborts with a line naming the lock, the file and the function, where the
 * build checks contracts (STOR_ASSERT_LOCKS: --enable-debug, --enable-asan)
 * and is silent with it. A forked child, one thread with an id of its own,
 * is not taken for its parent.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/stor_assert.h"
#include "ds/dataset.h"
#include "fixture.h"
#include "pool_impl.h"

TestSuite(stor_assert, .timeout = 60);

/* A pool with nothing but its admin lock and an empty dataset table:
 * enough for ds_find_locked(), which looks at no more. */
static struct stor_pool bare;

static void bare_init(void)
{
	pthread_mutex_init(&bare.admin, NULL);
}

static void *hold_admin(void *arg)
{
	int *fd = arg; /* a pipe: its write end says "locked", its read end "let go" */
	char c = 0;

	/* not the test's thread: no cr_assert here */
	pthread_mutex_lock(&bare.admin);
	if (write(fd[1], &c, 1) != 1 || read(fd[0], &c, 1) != 1)
		abort();
	pthread_mutex_unlock(&bare.admin);
	return NULL;
}

/* Another thread holds bare.admin until stop_holder(). */
static pthread_t start_holder(int locked[2], int release[2])
{
	static int fds[2];
	pthread_t t;
	char c;

	cr_assert_eq(pipe(locked), 0);
	cr_assert_eq(pipe(release), 0);
	fds[0] = release[0];
	fds[1] = locked[1];
	cr_assert_eq(pthread_create(&t, NULL, hold_admin, fds), 0);
	cr_assert_eq(read(locked[0], &c, 1), 1);
	return t;
}

static void stop_holder(pthread_t t, int locked[2], int release[2])
{
	cr_assert_eq(write(release[1], "", 1), 1);
	pthread_join(t, NULL);
	for (int i = 0; i < 2; i++) {
		close(locked[i]);
		close(release[i]);
	}
}

Test(stor_assert, a_mutex_records_this_thread_as_its_owner_while_it_holds_it, .init = bare_init)
{
	int locked[2], release[2];
	pthread_t t;

	if (stor_mutex_owner(&bare.admin) < 0)
		cr_skip_test("not glibc: who holds a mutex cannot be told here");
	cr_assert_eq(stor_mutex_owner(&bare.admin), 0);
	pthread_mutex_lock(&bare.admin);
	cr_assert_eq(stor_mutex_owner(&bare.admin), gettid());
	pthread_mutex_unlock(&bare.admin);
	cr_assert_eq(stor_mutex_owner(&bare.admin), 0);
	t = start_holder(locked, release);
	cr_assert_gt(stor_mutex_owner(&bare.admin), 0);
	cr_assert_neq(stor_mutex_owner(&bare.admin), gettid());
	stop_holder(t, locked, release);
	cr_assert_eq(stor_mutex_owner(&bare.admin), 0);
}

Test(stor_assert, a_locked_function_with_its_lock_held_runs_quietly)
{
	struct tpool tp;
	struct stor_ds *root;

	tpool_init(&tp, 1, 16 << 20, NULL);
	pthread_mutex_lock(&tp.pool->admin);
	root = ds_find_locked(tp.pool, TPOOL_NAME);
	pthread_mutex_unlock(&tp.pool->admin);
	cr_assert_not_null(root);
	cr_assert_str_eq(root->name, TPOOL_NAME);
	tpool_fini(&tp);
}

#ifdef STOR_ASSERT_LOCKS
Test(stor_assert, a_locked_function_without_its_lock_aborts, .init = bare_init,
     .signal = SIGABRT)
{
	ds_find_locked(&bare, TPOOL_NAME);
}

Test(stor_assert, a_lock_another_thread_holds_is_not_held, .init = bare_init, .signal = SIGABRT)
{
	int locked[2], release[2];

	start_holder(locked, release);
	ds_find_locked(&bare, TPOOL_NAME);
}

Test(stor_assert, a_read_hold_is_no_write_hold, .signal = SIGABRT)
{
	pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

	pthread_rwlock_wrlock(&rw);
	STOR_ASSERT_WRHELD(&rw);
	pthread_rwlock_unlock(&rw);
	pthread_rwlock_rdlock(&rw);
	STOR_ASSERT_WRHELD(&rw);
}

Test(stor_assert, the_report_names_the_lock_the_file_and_the_function, .init = bare_init)
{
	char buf[4096] = "", rest[4096];
	size_t n = 0;
	ssize_t r;
	int fd[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(fd[1], STDERR_FILENO);
		ds_find_locked(&bare, TPOOL_NAME);
		_exit(0); /* not reached */
	}
	close(fd[1]);
	/* the first line is the report (a sanitizer's stack of the call may follow) */
	while ((r = n < sizeof(buf) - 1 ? read(fd[0], buf + n, sizeof(buf) - 1 - n)
					: read(fd[0], rest, sizeof(rest))) > 0)
		n += n < sizeof(buf) - 1 ? (size_t)r : 0;
	close(fd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %#x", status);
	cr_assert(strstr(buf, "libstore: lock not held: &p->admin ("), "%s", buf);
	cr_assert(strstr(buf, "ds/dataset.c:"), "%s", buf);
	cr_assert(strstr(buf, ", ds_find_locked): no thread holds it"), "%s", buf);
}

Test(stor_assert, a_forked_child_holding_the_lock_is_not_taken_for_its_parent, .init = bare_init)
{
	int status;
	pid_t pid;

	/* the parent asks its thread id first, so a stale copy would show */
	pthread_mutex_lock(&bare.admin);
	cr_assert_null(ds_find_locked(&bare, TPOOL_NAME));
	pthread_mutex_unlock(&bare.admin);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		pthread_mutex_lock(&bare.admin);
		ds_find_locked(&bare, TPOOL_NAME);
		pthread_mutex_unlock(&bare.admin);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}
#else
Test(stor_assert, a_locked_function_without_its_lock_aborts)
{
	cr_skip_test("lock contracts are compiled out: configure --enable-debug or --enable-asan");
}
#endif
