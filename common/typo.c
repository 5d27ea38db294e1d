/* SPDX-License-Identifier: MIT */
/*
 * "Did you mean": how far a mistyped word is from a name the program knows,
 * for the client's verbs, the daemon's config options and the dataset
 * properties alike, so all three suggest by one rule.
 *
 * The distance counts single-character edits - insertion, deletion,
 * substitution and the swap of two neighbours (optimal string alignment,
 * after Damerau) - with case and '-' against '_' ignored ("Cache-Size" is
 * cache_size). A name is worth suggesting within one edit for words of up
 * to four characters and two beyond: further than that, a suggestion is
 * more often noise than help.
 */
#include <limits.h>
#include <string.h>

#include "common.h"

#define TYPO_MAX 64

static char fold(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return (char)(ch - 'A' + 'a');
	return ch == '-' ? '_' : ch;
}

static unsigned min3(unsigned a, unsigned b, unsigned c)
{
	unsigned m = a < b ? a : b;

	return m < c ? m : c;
}

unsigned stor_typo_distance(const char *typed, const char *name)
{
	size_t n = strlen(typed), m = strlen(name);
	unsigned d[TYPO_MAX + 1][TYPO_MAX + 1], limit = n <= 4 ? 1 : 2;

	if (n > TYPO_MAX || m > TYPO_MAX || n == 0)
		return UINT_MAX;
	for (size_t i = 0; i <= n; i++)
		d[i][0] = (unsigned)i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			unsigned cost = fold(typed[i - 1]) != fold(name[j - 1]);

			d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
			if (i > 1 && j > 1 && fold(typed[i - 1]) == fold(name[j - 2]) &&
			    fold(typed[i - 2]) == fold(name[j - 1]) && d[i - 2][j - 2] + 1 < d[i][j])
				d[i][j] = d[i - 2][j - 2] + 1;
		}
	return d[n][m] <= limit ? d[n][m] : UINT_MAX;
}
