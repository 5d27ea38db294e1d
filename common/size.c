/* SPDX-License-Identifier: MIT */
/*
 * The one size grammar of coffer: cofferd.conf, `coffer create -V`, `coffer
 * set volsize=`, `coffer pool create -s` and every size of `coffer bench` go
 * through stor_parse_size(), so a size that works in one place works in all.
 *
 *   size   = number [suffix]
 *   number = digits | digits "." [digits] | "." digits
 *   suffix = "B" | unit ["i"] ["B"]
 *   unit   = "K" | "M" | "G" | "T" | "P" | "E"      (x 1024^1 .. 1024^6)
 *
 * Letters are case-insensitive and units are powers of 1024, as in zfs(8):
 * 16M = 16m = 16MB = 16MiB = 16777216. A fraction is fine when it comes to
 * whole bytes (1.5G, 0.5K); 0.3 or 1.1K are not sizes. No sign, no spaces,
 * no exponent, no hex. The value is computed exactly (no floating point):
 * the fraction must be a whole number of bytes and the result fit in 64 bits.
 * stor_format_size() writes a size the way coffer shows it, for the CLI and
 * for libstore's texts alike.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char upper(char c)
{
	return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

/* The power of 1024 a suffix stands for, or -1 if @s is not a suffix. */
static int suffix_shift(const char *s)
{
	static const char units[] = "KMGTPE";
	int shift = 0;

	if (!*s)
		return 0;
	if (upper(*s) == 'B')
		return s[1] ? -1 : 0; /* "BB" and "BiB" mean nothing */
	for (int i = 0; units[i]; i++)
		if (upper(*s) == units[i])
			shift = 10 * (i + 1);
	if (!shift)
		return -1;
	s++;
	if (upper(*s) == 'I')
		s++;
	if (upper(*s) == 'B')
		s++;
	return *s ? -1 : shift;
}

int stor_parse_size(const char *s, uint64_t *out)
{
	uint64_t whole = 0, frac = 0, scale = 1, five = 1, part;
	unsigned ndigits = 0, k = 0;
	int shift, overflow = 0;

	if (!s)
		return -EINVAL;
	for (; is_digit(*s); s++, ndigits++) {
		unsigned d = (unsigned)(*s - '0');

		if (whole > (UINT64_MAX - d) / 10)
			overflow = 1;
		else
			whole = whole * 10 + d;
	}
	if (*s == '.') {
		for (s++; is_digit(*s); s++, ndigits++) {
			/* 19 digits of fraction: beyond them no byte count is exact */
			if (scale > UINT64_MAX / 10) {
				if (*s != '0')
					return -EINVAL;
				continue;
			}
			frac = frac * 10 + (uint64_t)(*s - '0');
			scale *= 10;
		}
	}
	shift = suffix_shift(s);
	if (!ndigits || shift < 0)
		return -EINVAL;
	if (overflow || (shift && whole > UINT64_MAX >> shift))
		return -ERANGE;
	/* frac / scale * 2^shift must be whole: with scale = 10^k = 5^k * 2^k
	 * that needs 5^k | frac, then 2^k | (frac / 5^k) * 2^shift. */
	while (scale > 1 && frac % 10 == 0) {
		frac /= 10;
		scale /= 10;
	}
	for (; scale > 1; scale /= 10, k++)
		five *= 5;
	if (frac % five)
		return -EINVAL;
	part = frac / five; /* < 2^k */
	if ((unsigned)shift >= k) {
		part <<= (unsigned)shift - k; /* < 2^shift, so no overflow */
	} else {
		if (part & ((1ull << (k - (unsigned)shift)) - 1))
			return -EINVAL;
		part >>= k - (unsigned)shift;
	}
	whole <<= shift;
	if (part > UINT64_MAX - whole)
		return -ERANGE;
	*out = whole + part;
	return 0;
}

void stor_format_size(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "BKMGTPE";
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	/* as zfs(8) shows them: a whole number of the unit has no decimals (8M, not 8.00M) */
	if (u == 0 || v % (1ull << (10 * u)) == 0)
		snprintf(buf, len, "%llu%s", (unsigned long long)(v >> (10 * u)),
			 u ? (char[]){ units[u], '\0' } : "");
	else
		snprintf(buf, len, d < 10 ? "%.2f%c" : d < 100 ? "%.1f%c" : "%.0f%c", d, units[u]);
}
