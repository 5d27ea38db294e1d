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
 * Named stor_assert.h, not assert.h: libstore is on other targets' include
 * path, and a local assert.h would shadow <assert.h> there.
 */
#ifndef STOR_ASSERT_H
#define STOR_ASSERT_H

/** Report a failed assertion; aborts in debug builds. @return 1 */
int stor_assert_fail(const char *expr, const char *file, int line, const char *func);

/** True when @expr is false (after reporting it): guard a fallback with it. */
#define STOR_FAILS_ASSERT(expr) \
	(!(expr) ? stor_assert_fail(#expr, __FILE__, __LINE__, __func__) : 0)

/** Check @expr, reporting (and in debug builds aborting) when it is false. */
#define STOR_ASSERT(expr) ((void)STOR_FAILS_ASSERT(expr))

#endif
