/* SPDX-License-Identifier: MIT */
/*
 * Growable arrays: the one doubling rule of libstore's tables (datasets,
 * a stage's frees and MAC keys, verify's nonces), so each keeps only its
 * own element type and first size.
 */
#ifndef STOR_ARRAY_H
#define STOR_ARRAY_H

#include <stdint.h>
#include <stdlib.h>

/**
 * Room for one more element in @arr, which holds @n of *@cap elements of
 * @elem bytes: @arr itself while there is room, else @arr reallocated to
 * twice its capacity (@first if it had none) and *@cap updated.
 * @return the array to use from now on, or NULL (out of memory; @arr and
 *         *@cap are as they were)
 */
static inline void *array_grow(void *arr, size_t n, size_t *cap, size_t elem, size_t first)
{
	size_t want = *cap ? *cap * 2 : first;
	void *a;

	if (n < *cap)
		return arr;
	if (want < *cap || want > SIZE_MAX / elem)
		return NULL;
	a = realloc(arr, want * elem);
	if (a)
		*cap = want;
	return a;
}

#endif
