/* SPDX-License-Identifier: MIT */
/* keyfile.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_KEYFILE_H
#define STOR_KEYFILE_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

/** Replace the key file with the keys of every encrypted dataset (and @extra). */
int keyfile_save(struct stor_pool *p, struct stor_ds *extra);

/** keyfile_save() with the @nextra datasets @extra (copies of datasets as
 *  they will be, whose entries come after the pool's). */
int keyfile_save_with(struct stor_pool *p, struct stor_ds *const *extra, size_t nextra);

/** Fill the key fields of the pool's encrypted datasets from the key file. */
int keyfile_load(struct stor_pool *p);

/** The key file's bytes as the LUNs hold them: write both copies when neither
 *  is sound and as new (a state directory lost or restored from an older copy);
 *  when a copy here is newer than the LUNs' (they lagged), hand it to the
 *  metadata log for the next commit instead.
 *  @return 1 rewritten, 0 nothing to do, or an error */
int keyfile_restore(struct stor_pool *p, const uint8_t *buf, size_t len);

#endif
