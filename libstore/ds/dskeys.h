/* SPDX-License-Identifier: MIT */
/* dskeys.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_DSKEYS_H
#define STOR_DSKEYS_H

#include <stddef.h>
#include <stdint.h>

#include "kv/bp.h"
#include "pool_impl.h"

struct crypt_key;
struct meta_txn;
struct recv_identity;

/** A clone's key state: its origin's master key, wrapped by their root's
 *  wrapping key under its own GUID (dskeys.c). */
int dskeys_clone(struct stor_pool *p, struct stor_ds *ds, const struct stor_ds *parent,
		 const struct stor_ds *origin);

int dskeys_create(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *parent,
		  const struct stor_ds_opts *opts);

void dskeys_drop(struct stor_ds *ds);

/** Draw @n nonces for a batch of writes from the current nonce block of @k. */
void dskeys_nonces(struct ds_keys *k, size_t n, uint64_t *salt, uint32_t *prefix,
		   uint64_t *first);

/**
 * The data key of key salt @salt under the master key of generation @gen
 * (a record's BP_F_KEYGEN), for that generation's suite, derived on first
 * use and kept with the key state; past DSKEYS_MAX_SALTS salts a key of
 * its own in *@own, which the caller frees (crypt_key_free) once its ops
 * are done. NULL on failure, or when the state has no master of @gen
 * (dskeys_has_gen).
 */
const struct crypt_key *dskeys_data_key(struct ds_keys *k, unsigned gen, uint64_t guid,
					uint64_t salt, struct crypt_key **own);

/** The suite of @ds's master key of generation @gen: its suite, but for
 *  the old one during a change of suite (rekey.c). */
unsigned dskeys_suite_of(const struct stor_ds *ds, unsigned gen);

/** Does @k hold the master key of generation @gen? */
int dskeys_has_gen(struct ds_keys *k, unsigned gen);

/** The generation bit of a record: the master key that sealed it. */
static inline unsigned dskeys_gen_of(const struct bp *bp)
{
	return (bp->flags & BP_F_KEYGEN) ? 1u : 0u;
}

/**
 * A key state for @ds: @master of generation @ds->keygen, a rekey's
 * previous master @old (NULL when none), the MAC key derived from the
 * master of generation @mac_gen, and on a root its wrapping key @wk.
 */
struct ds_keys *dskeys_state_new(const struct stor_ds *ds, const uint8_t *master,
				 const uint8_t *old, unsigned mac_gen, const uint8_t *wk);
void dskeys_state_free(struct ds_keys *k);

#define DSKEYS_RECORD_LEN 1
void dskeys_record(struct stor_ds *ds, uint8_t **p);

int dskeys_parse(struct stor_ds *ds, const uint8_t **p, const uint8_t *end);

/** Give @ds the GUID and wrapped key of a raw stream (recv.c). */
int dskeys_adopt(struct stor_ds *ds, const struct recv_identity *id);

/** Write the MAC root of a new encrypted dataset @ds into @t. */
int dskeys_init_macs(struct meta_txn *t, struct stor_ds *ds);

/**
 * A rekey's first step (rekey.c): one new master key into @master for the
 * @n datasets @dss (a dataset and its clones share one), wrapped for each
 * by its root's wrapping key as generation !keygen, the wrapped key it
 * replaces kept beside it until the rekey ends; with @suite (0: theirs)
 * the new key is of that suite, the old one keeps theirs (key_suite,
 * old_suite) until the switch makes it theirs. The key file's replacement
 * is the commit point, for all of them at once. Admin lock held.
 */
int dskeys_new_gen(struct stor_pool *p, struct stor_ds *const *dss, size_t n, uint8_t *master,
		   unsigned suite);

/** A rekey's last step for the @n datasets @dss: their previous master key
 *  leaves the key file (the commit point, once for all), then memory with
 *  every data key derived from it. Admin lock held. */
int dskeys_drop_old(struct stor_pool *p, struct stor_ds *const *dss, size_t n);

/**
 * The first half of encrypting the clear datasets @dss in place (rekey.c):
 * one new master key for all @n (a dataset and its clones, which read its
 * records), wrapped by a wrapping key from @key as keyformat @fmt (@iters
 * for a passphrase) with @dss[0] as their encryption root, into @shadows,
 * copies of them as they will be with suite @suite, and their key states
 * into @out. The key file is saved with the copies' entries marked pending
 * (keyfile.c), so a crash before the commit that makes them encrypted
 * leaves them clear; @loc (the root's keylocation) is borrowed by
 * @shadows[0]. @dss themselves are not changed. Admin lock held.
 */
int dskeys_encrypt_prepare(struct stor_pool *p, struct stor_ds *const *dss, size_t n,
			   unsigned suite, const char *fmt, const char *iters, char *loc,
			   const struct stor_key_material *key, struct stor_ds *shadows,
			   struct ds_keys **out);

#endif
