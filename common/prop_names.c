/* SPDX-License-Identifier: MIT */
/*
 * The property table: names, flags and defaults (props.h), the values each
 * takes in words for help and refusals, and the lookup of a name a person
 * typed, with "did you mean" (typo.c). Apart from the validators (props.c),
 * which need the crypto tables, so that the client can print its help
 * without linking them.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "prop_names.h"

const struct prop_def prop_table[PROP_COUNT] = {
#define XX(id, name, flags, def) [PROP_##id] = { name, flags, def },
	PROPS_XX(XX)
#undef XX
};

int prop_lookup(const char *name)
{
	for (int i = 0; i < PROP_COUNT; i++)
		if (strcmp(prop_table[i].name, name) == 0)
			return i;
	return -1;
}

/* What each settable property takes, for the refusal of a value it does not. */
static const char *const values_of[PROP_COUNT] = {
	[PROP_VOLSIZE] = "a size such as 64M or 10G, a multiple of recordsize",
	[PROP_REFRESERVATION] = "none, auto or a size",
	[PROP_RESERVATION] = "none or a size",
	[PROP_COMPRESSION] = "one of off | on | zstd | zstd-1..19",
	[PROP_CHECKSUM] = "one of on | off",
	[PROP_SYNC] = "one of standard | always | disabled",
	[PROP_PRIMARYCACHE] = "one of all | metadata | none",
	[PROP_OWNER] = "UID or UID:GID, each a decimal from 0 to 4294967294, or -",
	[PROP_ENCRYPTION] = "one of off | on | aes-128-ccm | aes-192-ccm | aes-256-ccm | "
			    "aes-128-gcm | aes-256-gcm",
	[PROP_KEYFORMAT] = "one of raw | hex | passphrase",
	[PROP_KEYLOCATION] = "prompt, file:///absolute/path, https://HOST/PATH or http://HOST/PATH",
	[PROP_PBKDF2ITERS] = "a number from 100000 to 10000000",
};

const char *prop_values(int id)
{
	return id >= 0 && id < PROP_COUNT ? values_of[id] : NULL;
}

const char *stor_prop_describe(size_t i, const char **values, enum stor_prop_when *when)
{
	if (i >= PROP_COUNT)
		return NULL;
	*values = values_of[i] ? values_of[i] : "-";
	*when = prop_table[i].flags & PROP_READONLY ? STOR_PROP_READONLY
		: prop_table[i].flags & PROP_CREATE ? STOR_PROP_AT_CREATE
						      : STOR_PROP_SETTABLE;
	return prop_table[i].name;
}

int prop_is_user(const char *name)
{
	return strchr(name, ':') != NULL;
}

int prop_user_name_check(const char *name, char *why, size_t whylen)
{
	size_t n = strlen(name);

	if (!prop_is_user(name) || n > PROP_USER_NAME_MAX ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-_.:") != n) {
		snprintf(why, whylen,
			 "'%.64s%s' is not a user property name: module:property of lowercase "
			 "letters, digits and -_.:, at most %d bytes (e.g. com.example:owner)",
			 name, n > 64 ? "..." : "", PROP_USER_NAME_MAX);
		return -1;
	}
	return 0;
}

int prop_user_value_check(const char *value, char *why, size_t whylen)
{
	size_t n = strlen(value);

	if (n > PROP_USER_VALUE_MAX) {
		snprintf(why, whylen, "a user property's value is at most %d bytes (this one has %zu)",
			 PROP_USER_VALUE_MAX, n);
		return -1;
	}
	/* tabs and newlines would break get -H and list -H; other control bytes, terminals */
	for (const unsigned char *p = (const unsigned char *)value; *p; p++)
		if (*p < 0x20 || *p == 0x7f) {
			snprintf(why, whylen,
				 "a user property's value may not hold control characters "
				 "(byte 0x%02x at %zu)",
				 *p, (size_t)(p - (const unsigned char *)value));
			return -1;
		}
	return 0;
}

/* Properties of ZFS volumes that coffer does not have: named as such, not as typos. */
static const char *const zfs_only[] = {
	"aclinherit", "aclmode", "acltype", "atime", "canmount", "casesensitivity", "copies",
	"dedup", "devices", "dnodesize", "exec", "filesystem_limit", "logbias", "mountpoint",
	"nbmand", "normalization", "overlay", "quota", "readonly", "redundant_metadata",
	"refquota", "relatime", "secondarycache", "setuid", "sharenfs", "sharesmb",
	"snapdev", "snapdir", "snapshot_limit", "special_small_blocks", "utf8only",
	"volmode", "vscan", "xattr", "zoned", NULL
};

static int listed(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return 1;
	return 0;
}

int prop_find(const char *name, char *why, size_t whylen)
{
	int id = prop_lookup(name), best = -1;
	unsigned d, bestd = UINT_MAX;

	if (id >= 0)
		return id;
	if (listed(name, zfs_only)) {
		snprintf(why, whylen, "'%s' is a ZFS property not supported by coffer", name);
		return -1;
	}
	for (int i = 0; i < PROP_COUNT; i++)
		if ((d = stor_typo_distance(name, prop_table[i].name)) < bestd) {
			bestd = d;
			best = i;
		}
	if (best >= 0)
		snprintf(why, whylen, "unknown property '%s' (did you mean '%s'?)", name,
			 prop_table[best].name);
	else
		snprintf(why, whylen, "unknown property '%s'; 'coffer get all DATASET' lists them",
			 name);
	return -1;
}
