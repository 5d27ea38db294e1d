/* SPDX-License-Identifier: MIT */
/* errlog.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_ERRLOG_H
#define STOR_ERRLOG_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct meta_txn;

/** Record @recno of dataset @ds_id has no sound copy (a read, scrub or
 *  resilver found none); any thread, no lock held but leaves. The first
 *  time, an io.error event names it: dataset @name (NULL where the caller
 *  knows only the id), found by @via ("read", "scrub", "resilver", "import"). */
void errlog_note(struct stor_pool *p, uint64_t ds_id, uint64_t recno, const char *name,
		 const char *via);

/** Empty the list (pool clear, a scrub without errors). */
void errlog_clear(struct stor_pool *p);

/** The list from the "errlog" row of @t, at import. */
int errlog_load(struct stor_pool *p, struct meta_txn *t);

/** Put the row into @t if the list changed: 1 put, 0 nothing, or an error;
 *  after 1, a commit that fails calls errlog_undo() */
int errlog_save(struct stor_pool *p, struct meta_txn *t);

void errlog_undo(struct stor_pool *p);

/** The list as it is now, into @out (ERRLOG_MAX entries); returns how many,
 *  and in @more how many were noted past the bound. */
unsigned errlog_copy(struct stor_pool *p, struct errlog_ent *out, uint64_t *more);

#endif
