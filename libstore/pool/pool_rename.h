/* SPDX-License-Identifier: MIT */
/* pool_rename.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_POOL_RENAME_H
#define STOR_POOL_RENAME_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

/** Bring dataset record keys named for another pool in line with p->name
 *  (a rename cut short); before the datasets load. */
int pool_follow_name(struct stor_pool *p);

/** Rename the open pool @p to @name: dataset records, state files, memory. */
int pool_rename(struct stor_pool *p, const char *name);

#endif
