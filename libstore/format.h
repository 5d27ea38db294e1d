/* SPDX-License-Identifier: MIT */
/*
 * On-disk layout. Everything is big-endian and written through the put/get
 * codecs below, never as a memcpy'd struct.
 *
 * LUN of size bytes; end = size rounded down to 4 KiB, minus LUN_LABEL_SIZE:
 *   [0, 4 KiB)            label copy 0 (front)
 *   [4 KiB, 1 MiB)        reserved, zero
 *   [1 MiB, end)          data sectors of STOR_SECTOR bytes; sector n of LUN i
 *                         is at byte LUN_DATA_OFF + n * 4096
 *   [end, end + 4 KiB)    label copy 1 (end), the same bytes as copy 0
 * Anything past end + 4 KiB (a size that is not a 4 KiB multiple) is unused.
 * Both copies are checked at import: one damaged copy is rewritten from the
 * other, two damaged copies refuse the LUN. A file grown after labelling has
 * its end copy rewritten at the new end (the old one is then in free space).
 *
 * Label (LABEL_LEN bytes, rest of the 4 KiB zero):
 *   u64 magic "COFFLUN\0" | u32 version | u32 lun index | u64 pool guid |
 *   u64 lun guid | u64 size in bytes (whole LUN at labelling) |
 *   u32 nluns at labelling | u8[64] pool name |
 *   u32 host id (of the host that last imported the pool; 0 = none) |
 *   u32 pool state (LABEL_ACTIVE: imported, LABEL_EXPORTED: cleanly exported) |
 *   u64 xxh64 of everything before it (seed 0)
 * What a scan needs to put a pool back together from LUNs found anywhere is
 * here: pool guid and name, lun guid, index and nluns. Import refuses a pool
 * whose labels are active under another host id unless forced (as ZFS does
 * with the hostid in its vdev labels), writes them active under its own id,
 * and export writes them exported.
 *
 * Format versions: 2 had one label and data up to the end of the LUN; 3 adds
 * the end copy, so a version 2 LUN is refused (STOR_EFORMAT), never read
 * with data where the end copy would go; 4 adds host id and pool state, so
 * a version 3 label is refused too.
 *
 * LMDB (one environment per pool, file <state_dir>/pools/<pool>.mdb):
 *   "pool": "config" -> pool record (meta_pool_* in pool.c)
 *   "ds":   dataset name -> dataset record (dataset.c)
 *   "bp":   u64 dataset id | u64 record number -> block pointer (BP_LEN bytes)
 *   "mac":  u64 dataset id | u64 group -> group MAC (MAC_LEN bytes), and
 *           u64 dataset id | MAC_ROOT -> dataset root (MAC_ROOT_LEN bytes);
 *           encrypted datasets only, see bpmac.c
 */
#ifndef STOR_FORMAT_H
#define STOR_FORMAT_H

#include <assert.h>
#include <stdint.h>
#include <string.h>

#define LUN_MAGIC 0x434f46464c554e00ull /* "COFFLUN\0" */
#define FORMAT_VERSION 4u
#define LUN_LABEL_SIZE 4096u
#define LUN_DATA_OFF (1u << 20)
#define LUN_LABELS 2u /* copies: 0 at the front, 1 at the end */
/* Smallest LUN: front area, one data sector, the end copy. */
#define LUN_MIN_SIZE (LUN_DATA_OFF + 4096u + LUN_LABEL_SIZE)
#define LABEL_NAME_LEN 64u
#define LABEL_LEN (8 + 4 + 4 + 8 + 8 + 8 + 4 + LABEL_NAME_LEN + 4 + 4 + 8)
#define LABEL_LEN_V3 (LABEL_LEN - 4 - 4) /* versions 2 and 3: no host id, no state */
/* Pool state in a label. */
#define LABEL_ACTIVE 0u
#define LABEL_EXPORTED 1u

/*
 * Block pointer, BP_LEN bytes:
 *   u16 lun | u8 flags | u8 comp | u32 psize (bytes on the LUN, sector multiple) |
 *   u32 lsize (logical bytes) | u32 csize (payload bytes before padding) |
 *   u64 sector | u64 birth txg | u64 key salt | u8[12] nonce | u8[16] mac |
 *   u64 cksum
 * mac is the AEAD tag of an encrypted record or XXH3-128 of a clear one,
 * seeded with the dataset GUID, record number and birth txg. The key salt
 * names the data key of an encrypted record (crypt.c, nonce scheme). cksum
 * is XXH3-64 of the psize stored bytes of an encrypted record, keyless, so a
 * scrub can check it with its key unloaded (0 in a clear record, whose mac
 * needs no key).
 */
#define BP_LEN (2 + 1 + 1 + 4 + 4 + 4 + 8 + 8 + 8 + 12 + 16 + 8)
#define BP_KEY_LEN 16

/* Block pointer MACs (bpmac.c): records per group, and the root's place. */
#define MAC_GROUP 256u
#define MAC_LEN 16
#define MAC_ROOT UINT64_MAX
#define MAC_ROOT_LEN (MAC_LEN + MAC_LEN) /* accumulator | tag */

static_assert(BP_LEN == 76, "block pointer is 76 bytes");
static_assert(LABEL_LEN <= LUN_LABEL_SIZE, "label fits its sector");

/* Record flags in a block pointer. */
#define BP_F_ENCRYPTED 0x1u
#define BP_F_HOLE 0x80u /* staged discard: delete at commit; never on disk */

/* Compression of a record's payload. */
#define BP_COMP_OFF 0u
#define BP_COMP_ZSTD 1u

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
