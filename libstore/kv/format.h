/* SPDX-License-Identifier: MIT */
/*
 * On-disk layout. Everything is big-endian and written through the put/get
 * codecs below, never as a memcpy'd struct.
 *
 * LUN of size bytes; end = size rounded down to 4 KiB, minus LUN_LABEL_SIZE:
 *   [0, 4 KiB)            label copy 0 (front)
 *   [4 KiB, 516 KiB)      the uberblock ring: UB_SLOTS slots of UB_SIZE bytes
 *   [516 KiB, 1 MiB)      reserved, zero
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
 * A LUN of a mirror vdev (mirror.c) carries a version 5 label: the version
 * 4 fields and checksum, then u32 vdev (index of the vdev's first LUN) |
 * u32 sides (the mirror's width) | u64 xxh64 of everything before it. The
 * first checksum stays where version 4 has it, so a coffer that predates
 * mirrors reads a sound label of another version and refuses the LUN
 * (STOR_EFORMAT) rather than striping over a mirror's sides. Nothing else
 * changes: a pool without mirrors is byte for byte a version 4 pool, and
 * every other structure keeps FORMAT_VERSION.
 *
 * A side of a vdev that had a LUN detached carries a version 6 label: the
 * version 4 fields and checksum, then u32 vdev | u32 sides (the LUNs of
 * the vdev not detached, 1 to STOR_MIRROR_MAX) | u8[LABEL_DETACHED_LEN]
 * the indexes of the vdev's detached LUNs, a bitmap (index i is bit i % 8
 * of byte i / 8) | u64 xxh64 of everything before it. A detached LUN keeps
 * its index for good (block pointers and the log name a vdev by its first
 * LUN's index, which a detach may leave to a stand-in), and its own label
 * is wiped: the bitmap is how a scan that finds only the sides tells an
 * index detached from one missing, and how a vdev down to one LUN that is
 * not its first keeps its vdev. Written only where a version 5 label
 * could not say it, so a pool that never detached stays readable by a
 * coffer that predates it, and that coffer refuses one that did
 * (STOR_EFORMAT) rather than take the detached index for a missing side.
 *
 * Format versions: 2 had one label and data up to the end of the LUN; 3 adds
 * the end copy, so a version 2 LUN is refused (STOR_EFORMAT), never read
 * with data where the end copy would go. 4 adds the host id and pool state
 * to the label and puts the pool's metadata on its LUNs (below), so a
 * version 3 pool, whose LUNs lack both, is refused too.
 *
 * Metadata on the LUNs (metalog.c). LMDB in the state directory is a cache
 * of it: everything an import needs (the four LMDB tables and the key
 * file's bytes) is on the LUNs, as a log of redo records:
 * - A log record holds the ops (meta.h: table, put or delete, key, value)
 *   of one txg commit: its block pointers and MAC rows and every LMDB
 *   transaction committed since the previous record (dataset records,
 *   properties, the pool record), and the key file when it changed. A
 *   checkpoint is a record of kind MLOG_FULL holding every row of every
 *   table; the log starts at the newest checkpoint and each record names
 *   the one before it, so an import walks back from the newest to the
 *   checkpoint and replays forward.
 * - Each record is written whole, in copies (ditto blocks) on different
 *   vdevs (MLOG_COPIES on three or more vdevs, else two; one on a pool of
 *   one mirror, each of whose sides holds it), as extents of the
 *   data area taken from the allocator; they are not block pointers, so an
 *   import marks the extents of the log it walked as used. The extents of a
 *   log replaced by a checkpoint are freed once that checkpoint's commit is
 *   done. A record is padded to whole sectors and written in parts of 64
 *   sectors at most (metalog.c), but for a part of one op larger than that
 *   (the key file of a pool of thousands of encrypted datasets); no part is
 *   ever larger than MLOG_PART_MAX_SECT. An import reads each copy whole
 *   before its checksum can vouch for it, so a pointer whose sector count is
 *   not its length rounded up, or is above that bound, is refused unread.
 * - The uberblock ring: every commit writes an uberblock into slot
 *   seq % UB_SLOTS of every LUN, after the record copies are durable and
 *   before LMDB commits; it names the newest record. An import takes the
 *   newest uberblock (highest seq) that verifies on any LUN and whose log
 *   verifies (each record from any sound copy), else the next older one.
 *   The uberblock is the commit point: a crash leaves the old or the new
 *   txg, and an LMDB behind the newest uberblock gets the missing records
 *   replayed; a missing or unreadable LMDB is rebuilt from the log.
 * Why a redo log and not a copy of LMDB each txg: a txg changes a few
 * pointers of a large tree; the log costs what changed, and the checkpoint
 * (written when the log since the last one outgrows it, MLOG_MIN_CKPT at
 * least) keeps the walk at an import short and the cost amortised at twice
 * the bytes that changed. LMDB's own file layout is never on the LUNs.
 *
 * Record pointer (MPTR_LEN bytes): u8 copies | MLOG_COPIES x (u16 lun |
 * u64 sector) | u32 sectors | u32 length in bytes | u64 xxh64 of those bytes.
 * Log record: u64 magic "COFFMLOG" | u32 version | u32 kind | u64 pool guid |
 * u64 txg | u64 seq | record pointer of the previous record (copies 0 for a
 * checkpoint) | u32 length of the ops | ops | zero to the sector's end.
 * Uberblock (UB_LEN bytes, rest of its slot zero): u64 magic "COFFUBER" |
 * u32 version | u32 reserved | u64 pool guid | u64 txg | u64 seq |
 * record pointer of the newest record | u64 xxh64 of everything before it.
 * The key file's bytes travel as ops of table MLOG_TABLE_KEYS (never in
 * LMDB: keyfile.c says why); wrapped keys a change-key replaced may stay in
 * freed log extents until those are reused, as freed records do.
 *
 * LMDB (one environment per pool, file <state_dir>/pools/<pool>.mdb):
 *   "pool": "config" -> pool record (txg/pool_record.c);
 *           "recv/<dataset id, 16 hex digits>" -> u8 1 (being received) or
 *           2 (its MAC tree waits for a key, to be built and checked
 *           against the roots there) or 3 (an incremental going in): ds/recv_state.c;
 *           "resume/<dataset id, 16 hex digits>" -> a receive -s's resume
 *           state, beside a mark 1 or 3 only (ds/recv_state.h);
 *           "kids/<dataset id, 16 hex digits>" -> the encrypted children of
 *           an encrypted dataset, under its key: children.c
 *   "ds":   dataset name -> dataset record (dataset.c)
 *   "bp":   u64 dataset id | u64 record number -> block pointer (BP_LEN bytes)
 *   "mac":  u64 dataset id | u64 group -> group MAC (MAC_LEN bytes), and
 *           u64 dataset id | MAC_ROOT -> dataset root (MAC_ROOT_LEN bytes),
 *           u64 snapshot id | MAC_VIEW -> its view root (MAC_ROOT_LEN);
 *           encrypted datasets only, see bpmac.c
 *   "space": local (never in the log): the free map and each table's
 *           space, derived from "bp" (txg/spacemap.c has the rows)
 */
#ifndef STOR_FORMAT_H
#define STOR_FORMAT_H

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "base/bytes.h"

#define LUN_MAGIC 0x434f46464c554e00ull /* "COFFLUN\0" */
#define FORMAT_VERSION 4u
/* The pool record's version: 5 since MAC leaves left out the place (bpmac.c),
 * so a version 4 pool's trees do not verify here and it is refused; 6 since
 * each encrypted dataset lists its encrypted children under its key
 * (children.c): a version 5 pool has no lists, and one made for it now
 * would sign whatever an attacker left, so it is refused too. */
#define POOL_RECORD_VERSION 6u
#define LUN_LABEL_SIZE 4096u
#define LUN_DATA_OFF (1u << 20)
#define LUN_LABELS 2u /* copies: 0 at the front, 1 at the end */
/* Smallest LUN: front area, one data sector, the end copy. */
#define LUN_MIN_SIZE (LUN_DATA_OFF + 4096u + LUN_LABEL_SIZE)
#define LABEL_NAME_LEN 64u
#define LABEL_LEN (8 + 4 + 4 + 8 + 8 + 8 + 4 + LABEL_NAME_LEN + 4 + 4 + 8)
#define LABEL_LEN_V3 (LABEL_LEN - 4 - 4) /* versions 2 and 3: no host id, no state */
#define LABEL_VERSION_MIRROR 5u
#define LABEL_LEN_MIRROR (LABEL_LEN + 4 + 4 + 8)
#define LABEL_VERSION_DETACHED 6u
#define LABEL_DETACHED_LEN 128u /* bytes of the bitmap: one bit per LUN index */
#define LABEL_LEN_DETACHED (LABEL_LEN + 4 + 4 + LABEL_DETACHED_LEN + 8)
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
#define MAC_VIEW (UINT64_MAX - 1) /* a snapshot's view root (bpmac.c), MAC_ROOT_LEN bytes */
#define MAC_ROOT_LEN (MAC_LEN + MAC_LEN) /* accumulator | tag */

/* Metadata on the LUNs (see the head comment). */
#define UB_OFF 4096u
#define UB_SIZE 4096u
#define UB_SLOTS 128u
#define UB_MAGIC 0x434f464655424552ull   /* "COFFUBER" */
#define MLOG_MAGIC 0x434f46464d4c4f47ull /* "COFFMLOG" */
#define MLOG_COPIES 3u
#define MLOG_DELTA 1u
#define MLOG_FULL 2u
#define MLOG_TABLE_KEYS 0x80u
#define MLOG_MIN_CKPT (256u << 10) /* bytes of log (whole sectors, one copy) */
#define MLOG_MAX_RECORDS 4096u /* a checkpoint at the latest after this many records */
#define MLOG_PART_MAX_SECT 1024u /* 4 MiB: the largest log record part, head included */
#define MPTR_LEN (1 + MLOG_COPIES * (2 + 8) + 4 + 4 + 8)
#define MLOG_HEAD_LEN (8 + 4 + 4 + 8 + 8 + 8 + MPTR_LEN + 4)
#define UB_LEN (8 + 4 + 4 + 8 + 8 + 8 + MPTR_LEN + 8)
static_assert(UB_OFF + UB_SLOTS * UB_SIZE <= LUN_DATA_OFF, "the ring fits the reserved area");
static_assert(UB_LEN <= UB_SIZE, "an uberblock fits its slot");

static_assert(BP_LEN == 76, "block pointer is 76 bytes");
static_assert(LABEL_LEN_MIRROR <= LUN_LABEL_SIZE, "label fits its sector");
static_assert(LABEL_LEN_DETACHED <= LUN_LABEL_SIZE, "label fits its sector");

/* Record flags in a block pointer. */
#define BP_F_ENCRYPTED 0x1u
#define BP_F_KEYGEN 0x2u /* sealed under the dataset's master key of generation 1 (rekey.c) */
#define BP_F_HOLE 0x80u /* staged discard: delete at commit; never on disk */

/* Compression of a record's payload. */
#define BP_COMP_OFF 0u
#define BP_COMP_ZSTD 1u

#endif
