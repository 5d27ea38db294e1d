/* SPDX-License-Identifier: MIT */
/* rekey.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_REKEY_H
#define STOR_REKEY_H

#include "pool_impl.h"

/**
 * The generation of the master key @ds's MAC tree is under, as its pool
 * table says (a rekey switches it in a commit of its own): what a load-key
 * derives the MAC key from. It also says whether @ds is being encrypted in
 * place (ds->encrypting). @return 0 or 1, or STOR_ECORRUPT
 */
int rekey_mac_gen(struct stor_pool *p, struct stor_ds *ds);

/** After a load-key installed @ds's keys: a rekey that was running goes on.
 *  Admin lock held. */
void rekey_resume(struct stor_pool *p, struct stor_ds *ds);

/** Stop @ds's rekey thread, if any, keeping its state for a resume (before
 *  its key is unloaded, or it is destroyed). Admin lock held. */
void rekey_halt(struct stor_ds *ds);

/** rekey_halt() of every dataset, before the pool closes. */
void rekey_fini(struct stor_pool *p);

/** The rekeystatus property of @ds into @buf: none, running N% (...),
 *  paused N%, stopped N%, done DATE, failed: WHY, or - (clear). Admin lock held. */
void rekey_status_text(struct stor_pool *p, struct stor_ds *ds, char *buf, size_t len);

/**
 * May a rekey have sealed records again at txg @since or after? A record
 * sealed again keeps its birth in a new extent, so a side of a mirror out
 * of service meanwhile lacks extents older than its missing_since, and is
 * resilvered whole (resilver.c). Any thread.
 */
int rekey_sealed_since(struct stor_pool *p, uint64_t since);

/** Is a rekey of @ds under way (paused, stopped and failed ones too), or
 *  its encryption in place: what waits for its end. */
static inline int rekey_under_way(const struct stor_ds *ds)
{
	return ds->has_old || atomic_load(&ds->encrypting);
}

/** The error of a call that waits for @ds's rekey to end: "DS is being
 *  rekeyed; @what once that is done (...)". */
void rekey_busy_error(const struct stor_ds *ds, const char *what);

/** Free @ds's rekey state (ds_free). */
void rekey_free(struct stor_ds *ds);

#endif
