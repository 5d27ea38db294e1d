/* SPDX-License-Identifier: MIT */
/*
 * Big-endian fields in byte buffers, through a cursor that moves past each:
 * the codec of every on-disk structure (kv/format.h), of the LUNs' log and
 * of streams. The cursor is the caller's; no bound is checked here (the
 * caller has checked the length of what it reads or writes).
 */
#ifndef STOR_BYTES_H
#define STOR_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put_u8(uint8_t **p, uint8_t v)
{
	*(*p)++ = v;
}
static inline void put_u16(uint8_t **p, uint16_t v)
{
	(*p)[0] = v >> 8;
	(*p)[1] = v;
	*p += 2;
}
static inline void put_u32(uint8_t **p, uint32_t v)
{
	for (int i = 3; i >= 0; i--)
		*(*p)++ = v >> (8 * i);
}
static inline void put_u64(uint8_t **p, uint64_t v)
{
	for (int i = 7; i >= 0; i--)
		*(*p)++ = v >> (8 * i);
}
static inline void put_bytes(uint8_t **p, const void *b, size_t n)
{
	memcpy(*p, b, n);
	*p += n;
}
static inline uint8_t get_u8(const uint8_t **p)
{
	return *(*p)++;
}
static inline uint16_t get_u16(const uint8_t **p)
{
	uint16_t v = (uint16_t)((*p)[0] << 8 | (*p)[1]);
	*p += 2;
	return v;
}
static inline uint32_t get_u32(const uint8_t **p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | *(*p)++;
	return v;
}
static inline uint64_t get_u64(const uint8_t **p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | *(*p)++;
	return v;
}
static inline void get_bytes(const uint8_t **p, void *b, size_t n)
{
	memcpy(b, *p, n);
	*p += n;
}

#endif
