/* SPDX-License-Identifier: MIT */
/*
 * The receive_resume_token (zfs receive -s, zfs send -t): what a receive
 * cut short tells the sender so that it can go on where the receiver's
 * durable state ends. libstore writes it (the property), cofferd reads it
 * back from a send request and checks it against the snapshot, and coffer
 * reads it to find the snapshot by its GUID. One codec for the three.
 *
 *   "1-" | hex of the payload (RESUME_TOKEN_PAYLOAD bytes, big-endian):
 *     u8 flags (STOR_RESUME_RAW, STOR_RESUME_INCR) | u64 dataset guid |
 *     u64 snapshot guid | u64 from-snapshot guid (0: a full stream) |
 *     u64 snapshot txg | u64 next record number (the offset)
 *   | "-" | 16 hex digits: XXH64 (seed 0) of the version byte and the payload
 * The checksum is no seal: a token carries no secret and proves nothing;
 * it only makes a token mangled by a copy and paste (a digit changed, cut
 * short) refused whole, instead of resuming some other offset. What makes
 * a resumed stream sound is the sender's and the receiver's checks of the
 * identity it names (libstore/send/recv.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common.h"
#include "proto.h"

#define TOKEN_VERSION 1u
#define RESUME_TOKEN_PAYLOAD (1 + 5 * 8)

static uint64_t token_sum(const uint8_t *payload)
{
	uint8_t b[1 + RESUME_TOKEN_PAYLOAD];

	b[0] = TOKEN_VERSION;
	memcpy(b + 1, payload, RESUME_TOKEN_PAYLOAD);
	return XXH64(b, sizeof(b), 0);
}

int stor_resume_token_encode(const struct stor_resume_token *t, char *out, size_t len)
{
	uint8_t p[RESUME_TOKEN_PAYLOAD];
	const uint64_t v[5] = { t->guid, t->to_guid, t->from_guid, t->to_txg, t->next };
	size_t n;

	if (len < STOR_RESUME_TOKEN_MAX)
		return -ENOSPC;
	p[0] = (uint8_t)t->flags;
	for (int i = 0; i < 5; i++)
		wire_put_u64(p + 1 + 8 * i, v[i]);
	n = (size_t)snprintf(out, len, "%u-", TOKEN_VERSION);
	for (size_t i = 0; i < sizeof(p); i++)
		n += (size_t)snprintf(out + n, len - n, "%02x", p[i]);
	snprintf(out + n, len - n, "-%016llx", (unsigned long long)token_sum(p));
	return 0;
}

int stor_resume_token_decode(const char *s, struct stor_resume_token *t, char *why, size_t whylen)
{
	uint8_t p[RESUME_TOKEN_PAYLOAD], sum[8];
	size_t plen = 2 * RESUME_TOKEN_PAYLOAD;

	memset(t, 0, sizeof(*t));
	if (strncmp(s, "1-", 2)) {
		snprintf(why, whylen, "it does not begin with '1-' (a version this coffer reads): "
			 "copy it whole from 'coffer get receive_resume_token'");
		return -EINVAL;
	}
	s += 2;
	if (strlen(s) != plen + 1 + 16 || s[plen] != '-' ||
	    stor_hex_decode(s, plen, p, NULL) < 0 || stor_hex_decode(s + plen + 1, 16, sum, NULL) < 0) {
		snprintf(why, whylen, "it is not %zu characters of hex in the token's form: it was "
			 "cut short or changed; copy it whole from 'coffer get "
			 "receive_resume_token'", 2 + plen + 1 + 16);
		return -EINVAL;
	}
	if (wire_get_u64(sum) != token_sum(p)) {
		snprintf(why, whylen, "its checksum does not match: it was changed or mangled; copy "
			 "it whole from 'coffer get receive_resume_token'");
		return -EINVAL;
	}
	t->flags = p[0];
	t->guid = wire_get_u64(p + 1);
	t->to_guid = wire_get_u64(p + 9);
	t->from_guid = wire_get_u64(p + 17);
	t->to_txg = wire_get_u64(p + 25);
	t->next = wire_get_u64(p + 33);
	if (t->flags & ~(STOR_RESUME_RAW | STOR_RESUME_INCR) || !t->to_guid ||
	    !(t->flags & STOR_RESUME_INCR) != !t->from_guid) {
		snprintf(why, whylen, "it names no stream a coffer sends (flags 0x%x)", t->flags);
		return -EINVAL;
	}
	return 0;
}
