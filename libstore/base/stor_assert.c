/* SPDX-License-Identifier: MIT */
/*
 * A failed STOR_ASSERT (stor_assert.h): said on stderr, and fatal in
 * debug builds (--enable-debug defines STOR_DEBUG).
 */
#include <stdio.h>
#include <stdlib.h>

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
