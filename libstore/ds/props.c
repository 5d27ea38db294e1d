/* SPDX-License-Identifier: MIT */
/*
 * The validators of property values. Resolution (local, inherited,
 * default) is dataset.c's business; the names are prop_names.c's.
 * Sizes (volsize) take the one grammar of stor_parse_size() (size.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/crypt.h"
#include "crypt/keys.h"
#include "ds/props.h"
#include "pool_impl.h"
#include "store.h"

/* prop_names.c says the bounds of pbkdf2iters in words */
_Static_assert(KEYS_PBKDF2_MIN == 100000u && KEYS_PBKDF2_MAX == 10000000u,
	       "pbkdf2iters' words match its bounds");

int prop_compression_level(const char *v)
{
	if (strcmp(v, "off") == 0)
		return 0;
	if (strcmp(v, "on") == 0 || strcmp(v, "zstd") == 0)
		return 3;
	if (strncmp(v, "zstd-", 5) == 0) {
		char *end;
		long l = strtol(v + 5, &end, 10);
		if (*end == '\0' && l >= 1 && l <= 19)
			return (int)l;
	}
	return -1;
}

uint64_t prop_reservation_bytes(const char *v, uint64_t auto_bytes)
{
	if (!v || strcmp(v, "none") == 0)
		return 0;
	if (strcmp(v, "auto") == 0)
		return auto_bytes;
	return strtoull(v, NULL, 10);
}

int prop_sync_mode(const char *v)
{
	if (strcmp(v, "standard") == 0)
		return PROP_SYNC_STANDARD;
	if (strcmp(v, "always") == 0)
		return PROP_SYNC_ALWAYS;
	if (strcmp(v, "disabled") == 0)
		return PROP_SYNC_DISABLED;
	return -1;
}

static int one_of(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return 1;
	return 0;
}

/*
 * One id of an owner value: decimal digits only (no sign, no space, which
 * strtoul takes), at most 4294967294 ((uid_t)-1 means "no id" to chown).
 * Leading zeros go. @return the end of the id, or NULL.
 */
static const char *owner_id(const char *s, char *out, size_t len)
{
	unsigned long long v = 0;
	const char *p = s;

	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > 4294967294ull)
			return NULL;
	}
	if (p == s)
		return NULL;
	snprintf(out, len, "%llu", v);
	return p;
}

/* "-", "UID" or "UID:GID" into its canonical form @out. */
static int owner_parse(const char *v, char *out, size_t outlen)
{
	char uid[16], gid[16];
	const char *end;

	if (strcmp(v, "-") == 0) {
		snprintf(out, outlen, "-");
		return 0;
	}
	end = owner_id(v, uid, sizeof(uid));
	if (!end)
		return STOR_EBADPROP;
	if (*end == '\0') {
		snprintf(out, outlen, "%s", uid);
		return 0;
	}
	if (*end != ':' || !(end = owner_id(end + 1, gid, sizeof(gid))) || *end != '\0')
		return STOR_EBADPROP;
	snprintf(out, outlen, "%s:%s", uid, gid);
	return 0;
}

/*
 * keylocation: prompt, file:///absolute/path, or an http(s) URL with a host,
 * as zfs takes them. Only printable ASCII without spaces: the value is shown
 * in listings and handed to the client's fetcher as it is.
 */
static int keylocation_valid(const char *v)
{
	const char *rest;

	if (strcmp(v, "prompt") == 0)
		return 1;
	for (const char *p = v; *p; p++)
		if (*p <= ' ' || *p > '~')
			return 0;
	if (strncmp(v, "file:///", 8) == 0)
		return v[8] != '\0';
	if (strncmp(v, "https://", 8) == 0)
		rest = v + 8;
	else if (strncmp(v, "http://", 7) == 0)
		rest = v + 7;
	else
		return 0;
	/* a host before any path, query or port */
	return *rest && !strchr("/?#:@", *rest);
}

static int validate(int id, const char *value, char *out, size_t outlen)
{
	static const char *const onoff[] = { "on", "off", NULL };
	static const char *const caches[] = { "all", "metadata", "none", NULL };
	static const char *const syncs[] = { "standard", "always", "disabled", NULL };
	const char *canon = value;
	char num[32];
	uint64_t n;

	if (!value || strlen(value) >= outlen || strlen(value) > 255)
		return STOR_EBADPROP;
	switch (id) {
	case PROP_COMPRESSION:
		if (prop_compression_level(value) < 0)
			return STOR_EBADPROP;
		if (strcmp(value, "on") == 0)
			canon = "zstd";
		break;
	case PROP_CHECKSUM:
		if (!one_of(value, onoff))
			return STOR_EBADPROP;
		break;
	case PROP_SYNC:
		if (!one_of(value, syncs))
			return STOR_EBADPROP;
		break;
	case PROP_PRIMARYCACHE:
		if (!one_of(value, caches))
			return STOR_EBADPROP;
		break;
	case PROP_OWNER:
		if (owner_parse(value, num, sizeof(num)) < 0)
			return STOR_EBADPROP;
		canon = num;
		break;
	case PROP_ENCRYPTION: {
		int s = crypt_suite_parse(value);
		if (s < 0)
			return STOR_EBADPROP;
		canon = crypt_suite_name((enum crypt_suite)s);
		break;
	}
	case PROP_KEYFORMAT:
		if (keys_format_parse(value) < 0)
			return STOR_EBADPROP;
		break;
	case PROP_KEYLOCATION:
		if (!keylocation_valid(value))
			return STOR_EBADPROP;
		break;
	case PROP_PBKDF2ITERS:
		if (stor_parse_size(value, &n) < 0)
			return STOR_EBADPROP;
		if (n < KEYS_PBKDF2_MIN || n > KEYS_PBKDF2_MAX)
			return STOR_EITERS; /* a number, but one we refuse: say which */
		snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
		canon = num;
		break;
	case PROP_REFRESERVATION:
	case PROP_RESERVATION:
		/* "auto" (refreservation only) is resolved to a size by dataset.c */
		if (strcmp(value, "none") == 0 || (id == PROP_REFRESERVATION && strcmp(value, "auto") == 0))
			break;
		if (stor_parse_size(value, &n) < 0)
			return STOR_EBADPROP;
		if (n == 0)
			canon = "none";
		else {
			snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
			canon = num;
		}
		break;
	case PROP_VOLSIZE:
		if (stor_parse_size(value, &n) < 0 || n == 0)
			return STOR_EBADPROP;
		snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
		canon = num;
		break;
	default:
		/* callers refuse read-only properties first: a settable one is missing here */
		STOR_ASSERT(id >= 0 && id < PROP_COUNT && (prop_table[id].flags & PROP_READONLY));
		return STOR_EBADPROP;
	}
	snprintf(out, outlen, "%s", canon);
	return 0;
}

int prop_validate(int id, const char *value, char *out, size_t outlen)
{
	int ret = validate(id, value, out, outlen);

	if (ret == STOR_EBADPROP && prop_values(id))
		pool_set_error("'%s' must be %s", prop_table[id].name, prop_values(id));
	else if (ret == STOR_EITERS)
		pool_set_error("'pbkdf2iters' must be a number from %u to %u", KEYS_PBKDF2_MIN,
			       KEYS_PBKDF2_MAX);
	return ret;
}
