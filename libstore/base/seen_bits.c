/* SPDX-License-Identifier: MIT */
/* A sparse bitmap that threads set and test without a lock (seen_bits.h). */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/seen_bits.h"

void seen_bits_free(struct seen_bits *s)
{
	_Atomic(uint8_t *) *dir = atomic_exchange(&s->dir, NULL);

	for (unsigned i = 0; dir && i < SEEN_BITS_CHUNKS; i++)
		free(atomic_load(&dir[i]));
	free(dir);
}

/* @s's directory, made when @make and it is not there yet. */
static _Atomic(uint8_t *) *dir_of(struct seen_bits *s, int make)
{
	_Atomic(uint8_t *) *dir = atomic_load(&s->dir), *none = NULL;

	if (dir || !make)
		return dir;
	dir = calloc(SEEN_BITS_CHUNKS, sizeof(*dir));
	if (dir && !atomic_compare_exchange_strong(&s->dir, &none, dir)) {
		free(dir);
		dir = none;
	}
	return dir;
}

_Atomic uint8_t *seen_bits_at(struct seen_bits *s, uint64_t g, int make, uint8_t *bit)
{
	uint64_t per = (uint64_t)SEEN_BITS_CHUNK_BYTES * 8;
	uint64_t c = g / per, off = g % per;
	_Atomic(uint8_t *) *dir;
	uint8_t *chunk;

	if (c >= SEEN_BITS_CHUNKS || !(dir = dir_of(s, make)))
		return NULL;
	chunk = atomic_load(&dir[c]);
	if (!chunk && make) {
		uint8_t *fresh = calloc(1, SEEN_BITS_CHUNK_BYTES), *none = NULL;
		if (!fresh)
			return NULL;
		if (atomic_compare_exchange_strong(&dir[c], &none, fresh))
			chunk = fresh;
		else {
			free(fresh);
			chunk = none;
		}
	}
	if (!chunk)
		return NULL;
	*bit = (uint8_t)(1u << (off % 8));
	return (_Atomic uint8_t *)&chunk[off / 8];
}
