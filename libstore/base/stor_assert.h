/* SPDX-License-Identifier: MIT */
/*
 * Assertions for programmer errors inside libstore (Knot Resolver's
 * kr_assert): a state the code itself should have made impossible, never
 * bad input. Anything read from disk or the wire is input and gets
 * STOR_ECORRUPT or -EINVAL, not an assertion.
 *
 * A failed assertion writes one line (expression, file, line, function) to
 * stderr. Built with --enable-debug (STOR_DEBUG) it then aborts, so tests
 * stop at the bug; otherwise the caller goes on with its fallback, which
 * must leave the pool consistent (return an error, skip the step):
 *
 *	if (STOR_FAILS_ASSERT(n <= cap))
 *		return -EINVAL;
 *
 * Lock contracts. A function named *_locked, or whose comment says its
 * caller holds a lock, opens with the check of that lock, so the contract
 * is code and not only prose:
 *
 *	struct stor_ds *ds_find_locked(struct stor_pool *p, const char *name)
 *	{
 *		STOR_ASSERT_HELD(&p->admin);
 *
 * - STOR_ASSERT_HELD(&mutex): this thread holds the pthread mutex.
 * - STOR_ASSERT_WRHELD(&rwlock): this thread holds the rwlock for writing.
 * - A read hold of an rwlock (txg_hold's, of p->hold) cannot be checked:
 *   glibc counts readers but records none of them, so a function that needs
 *   one says so in its comment only. Nor is a contract with a condition
 *   ("held, or no one else sees it yet") asserted.
 * - Where STOR_ASSERT_LOCKS is defined (configure --enable-debug or
 *   --enable-asan: the sanitizer build CI runs every test in), a lock that
 *   is not held is fatal in every such build, not only with STOR_DEBUG:
 *   one line, "libstore: lock not held: &p->admin (file:line, function)"
 *   and who holds it, then abort(). A lock contract that fails is a race,
 *   and a fallback would only hide it. Elsewhere the check is compiled out
 *   (its argument is only type-checked: no code, no call).
 * - How: glibc's mutex records its owner's kernel thread id while locked
 *   (__data.__owner, for the normal type too) and clears it on unlock, its
 *   rwlock the writer's (__data.__cur_writer); stor_lock_check() compares
 *   that with this thread's id (asked once per thread, again in a fork's
 *   child). A mutex glibc elides (GLIBC_TUNABLES=glibc.elision.enable=1)
 *   records no owner and counts as held, as every lock does on a libc other
 *   than glibc: there the check can tell nothing and passes.
 *
 * Named stor_assert.h, not assert.h: libstore is on other targets' include
 * path, and a local assert.h would shadow <assert.h> there.
 */
#ifndef STOR_ASSERT_H
#define STOR_ASSERT_H

#include <pthread.h>

/** Report a failed assertion; aborts in debug builds. @return 1 */
int stor_assert_fail(const char *expr, const char *file, int line, const char *func);

/** True when @expr is false (after reporting it): guard a fallback with it. */
#define STOR_FAILS_ASSERT(expr) \
	(!(expr) ? stor_assert_fail(#expr, __FILE__, __LINE__, __func__) : 0)

/** Check @expr, reporting (and in debug builds aborting) when it is false. */
#define STOR_ASSERT(expr) ((void)STOR_FAILS_ASSERT(expr))

/** The kernel id of the thread holding @m: 0 if none, -1 if that cannot be told. */
int stor_mutex_owner(const pthread_mutex_t *m);

/** The same of the thread holding @rw for writing (readers are never told). */
int stor_rwlock_writer(const pthread_rwlock_t *rw);

/** Unless @owner is this thread (or -1), report lock @lock not held and abort. */
void stor_lock_check(const char *lock, int owner, const char *file, int line, const char *func);

#ifdef STOR_ASSERT_LOCKS
#define STOR_ASSERT_HELD(m) stor_lock_check(#m, stor_mutex_owner(m), __FILE__, __LINE__, __func__)
#define STOR_ASSERT_WRHELD(rw) \
	stor_lock_check(#rw " for writing", stor_rwlock_writer(rw), __FILE__, __LINE__, __func__)
#else
/* compiled out: sizeof evaluates nothing, but the argument must still be a lock */
#define STOR_ASSERT_HELD(m) ((void)sizeof(stor_mutex_owner(m)))
#define STOR_ASSERT_WRHELD(rw) ((void)sizeof(stor_rwlock_writer(rw)))
#endif

#endif
