/* SPDX-License-Identifier: MIT */
/* userprops.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_USERPROPS_H
#define STOR_USERPROPS_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

/** Free every user property of @ds. */
void uprops_free(struct stor_ds *ds);
/** Bytes uprops_record() writes for @ds. */
size_t uprops_record_len(const struct stor_ds *ds);
/** Write @ds's user properties at *@w (the record's tail) and move *@w past them. */
void uprops_record(const struct stor_ds *ds, uint8_t **w);
/** Read them from [*@r, @end) into @ds. @return 0, STOR_ECORRUPT, -ENOMEM */
int uprops_parse(struct stor_ds *ds, const uint8_t **r, const uint8_t *end);
/** @ds's local value of @name, or NULL. */
const char *uprops_local(const struct stor_ds *ds, const char *name);
/** Set (@value) or remove (NULL) @ds's local @name and save its record; admin lock held. */
int uprops_set_locked(struct stor_pool *p, struct stor_ds *ds, const char *name,
		      const char *value);

#endif
