/* SPDX-License-Identifier: MIT */
/* pool.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_POOL_H
#define STOR_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct meta_txn;

int pool_save_config(struct stor_pool *p);

/** The pool record put in @t, which the caller commits: for a change that
 * leaves the LUNs as they are (a new dataset's id), so <pool>.luns stays. */
int pool_config_txn(struct stor_pool *p, struct meta_txn *t);

/** The pool record naming LUNs [0, @n), one not yet published among them (attach). */
int pool_save_config_n(struct stor_pool *p, unsigned n);

#endif
