/* SPDX-License-Identifier: MIT */
/*
 * The reason behind the last failure of a pool call in this thread, as one
 * line for people ("lun 2 (/x/l2): label names another pool"), read back by
 * stor_pool_last_error(). Every unit that refuses something for a reason a
 * code cannot say (pool, LUN set, datasets, key file) sets it here.
 *
 * Its own unit, at the bottom of libstore: it depends on nothing, so no
 * unit has to call into pool.c to report a reason. Not in errors.c, which
 * is the constant expansion of the error map (code -> name, message) and
 * holds no state; this is mutable, per-thread state a call leaves behind.
 */
#include <stdarg.h>
#include <stdio.h>

#include "base/pool_error.h"
#include "store.h"

static _Thread_local char last_error[512];

void pool_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

void pool_clear_error(void)
{
	last_error[0] = '\0';
}

void stor_clear_error(void)
{
	pool_clear_error();
}

int pool_error_set(void)
{
	return last_error[0] != '\0';
}

const char *stor_pool_last_error(void)
{
	return last_error;
}
