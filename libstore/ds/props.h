/* SPDX-License-Identifier: MIT */
/* Validation of dataset property values (the table itself: common/prop_names.h). */
#ifndef STOR_PROPS_H
#define STOR_PROPS_H

#include <stddef.h>
#include <stdint.h>

#include "prop_names.h"

/**
 * Validate @value for property @id and write its canonical form into @out
 * (e.g. "zstd" stays "zstd", "on" for encryption becomes "aes-256-ccm").
 * @return 0, STOR_EBADPROP, STOR_EITERS (pbkdf2iters outside
 *         KEYS_PBKDF2_MIN..KEYS_PBKDF2_MAX)
 */
int prop_validate(int id, const char *value, char *out, size_t outlen);

/** A reservation's value in bytes: "none" is 0, "auto" is @auto_bytes. */
uint64_t prop_reservation_bytes(const char *v, uint64_t auto_bytes);

/** Decode "zstd-N"/"zstd"/"off" into a zstd level (0 = off). */
int prop_compression_level(const char *v);
/** The sync property: when a write or flush commits its txg. */
enum prop_sync {
	PROP_SYNC_STANDARD, /* on flush, and by the txg timer */
	PROP_SYNC_ALWAYS,   /* after every write, before it completes */
	PROP_SYNC_DISABLED, /* flushes are no-ops: only the timer commits */
};
/** Decode sync into an enum prop_sync; -1 if it is none of them. */
int prop_sync_mode(const char *v);

#endif
