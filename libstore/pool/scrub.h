/* SPDX-License-Identifier: MIT */
/* scrub.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_SCRUB_H
#define STOR_SCRUB_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

/** Start a resilver now (in place of a scrub or a resilver running): the
 *  walk of every block pointer, from the first, for the sides catching up. */
int scan_resilver(struct stor_pool *p);

/** Load the scrub's row; one that was running goes on. After txg_init. */
int scrub_init(struct stor_pool *p);

/** Stop the thread (a close), keeping the row as it is. NULL-safe. */
void scrub_fini(struct stor_pool *p);

#endif
