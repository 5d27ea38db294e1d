/* SPDX-License-Identifier: MIT */
/*
 * Hex digits to bytes, the one decoder for keys (keyformat=hex) and NBD's
 * PSK file: a shared rule with no dependencies, so the daemon's parsers and
 * their fuzz harnesses link it alone.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int stor_hex_decode(const char *hex, size_t n, uint8_t *out, size_t *bad)
{
	for (size_t i = 0; i + 1 < n; i += 2) {
		int hi = hexval((uint8_t)hex[i]), lo = hexval((uint8_t)hex[i + 1]);

		if (hi < 0 || lo < 0) {
			if (bad)
				*bad = hi < 0 ? i : i + 1;
			return -EINVAL;
		}
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	if (n % 2) {
		if (bad)
			*bad = n - 1;
		return -EINVAL;
	}
	return 0;
}
