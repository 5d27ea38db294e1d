/* SPDX-License-Identifier: MIT */
/* resilver.c's functions inside libstore: sides going out of service and back (store.h: offline, online, replace, attach, detach) (its head comment says the rest). */
#ifndef STOR_RESILVER_H
#define STOR_RESILVER_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

/** Is a side of the pool catching up (a resilver has work)? */
int resilver_wanted(struct stor_pool *p);

/** The resilver's walk is done: copy the metadata log to the sides
 *  catching up, and put them in service. */
void resilver_done(struct stor_pool *p);

#endif
