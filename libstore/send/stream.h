/* SPDX-License-Identifier: MIT */
/*
 * The send stream: what `coffer send` writes and `coffer receive` reads
 * (send.c writes it, recv.c parses it; the fuzz harness feeds recv.c's
 * parser). After OpenZFS's DRR records (zfs_ioctl.h), flatter: a volume has
 * no objects, only records of one size.
 *
 * Everything is big-endian through format.h's codecs. A stream is
 *   header | record* | end
 * and each part carries its own XXH3-64 (hash.h) over its bytes before the
 * checksum (a record: over its fixed part and its payload, chained), so a flipped bit is named where it is; the end also carries a
 * chain over every part, so a part dropped, repeated or moved is refused
 * too: chain(0) = the header's checksum, chain(i) = XXH3-64 of
 * chain(i - 1) | the checksum of part i (16 bytes). The chain is a u64 a
 * sender can carry from one chunk of the stream to the next (the daemon
 * sends statelessly: the client hands the cursor back). None of this is
 * keyed: it catches damage and truncation, not a forger, who can rebuild
 * every checksum; what a forger cannot get past is below ("Raw").
 *
 * Header (STREAM_HDR_LEN bytes):
 *   u64 magic "COFFSEND" | u32 version | u32 flags (STREAM_F_RAW,
 *   STREAM_F_INCREMENTAL, STREAM_F_RESUME, STREAM_F_KEYGEN1) | u64 dataset guid | u64 from-snapshot guid |
 *   u64 from txg | u64 to-snapshot guid | u64 to txg (the snapshot's) |
 *   u32 recordsize | u64 volsize | u8 suite (crypt.h) | u8 compression level
 *   (the property, 0 off; informative) | u8 keyformat | u32 pbkdf2iters |
 *   u8[16] pbkdf2 salt | u8[60] wrapped master key | u64 newest birth txg
 *   of any record | u8[64] snapshot name (after the '@', NUL padded) |
 *   u8[32] the snapshot's view root (raw: bpmac.c, zero otherwise) |
 *   u8[16] the tag of the dataset's empty list of children (raw:
 *   children.c, zero otherwise) |
 *   u64 xxh64 of everything before it
 * The key fields are zero unless raw. A raw stream's wrapped key is the
 * dataset's master key as its encryption root wrapped it (keys.c: AEAD,
 * AAD = dataset GUID, suite, keyformat, iterations, salt), with the root's
 * keyformat, iterations and salt, so the received dataset is an encryption
 * root of its own that the root's key (the original passphrase) unwraps.
 *
 * Record (STREAM_REC_LEN bytes, then @len payload bytes):
 *   u32 kind (STREAM_REC) | u64 record number | u8 flags | u8 compression |
 *   u32 psize | u32 lsize | u32 csize | u64 birth txg | u64 key salt |
 *   u8[12] nonce | u8[16] tag | u64 stored-bytes checksum | u32 len |
 *   u64 checksum: chain(XXH3-64 of the fixed part before it, XXH3-64 of the
 *   payload), with the chain step below
 * Non-raw: the payload is the record's recordsize bytes of plaintext, the
 * pointer fields zero. Raw: the psize stored bytes as they are on the LUN
 * (compressed, encrypted, sector padded) and the block pointer fields that
 * open them (format.h: struct bp without its place), so the receiver
 * writes them unchanged wherever it likes. Records come in increasing
 * record number; one never written (or all zeros, non-raw) is not sent.
 * Frees (STREAM_FREE: u32 kind | u64 first | u64 count | u64 xxh64) are the
 * holes an incremental makes; a full stream has none.
 *
 * Incremental (STREAM_F_INCREMENTAL, zfs send -i): the header names the
 * snapshot the stream starts from (from guid, from txg: the sender's
 * snapshot FROM) and the stream carries what changed from FROM to the
 * snapshot it names: every record whose version at the snapshot was born
 * after FROM's txg (a raw record's birth must be above it), and a free for
 * each run of records present at FROM and holes at the snapshot (a plain
 * record that reads as zeros is sent as a free too). Records and frees
 * come in one increasing order of record numbers, no number twice. The
 * receiver applies it to a dataset whose newest snapshot is FROM (the same
 * guid) and makes the snapshot, with the stream's guid, in the commit that
 * ends the receive (recv.c).
 *
 * A package (zfs send -I FROM NAME): the incremental streams FROM..S1,
 * S1..S2, ..., Sn..NAME over every snapshot between, one after another,
 * each a whole stream as above. Nothing binds them beyond each one's
 * FROM: the receiver takes them in turn, each all or nothing, so a package
 * cut short leaves the snapshots whose streams came whole (as zfs receive
 * does with a -I stream).
 *
 * End (STREAM_END_LEN bytes): u32 kind (STREAM_END) | u64 parts before it |
 * u64 chain | u64 xxh64 of the fields before it.
 *
 * Resumed (STREAM_F_RESUME, zfs send -t): the rest of a stream a receive -s
 * kept part of. The header is the original's but for this flag (and the
 * informative compression level), and its first part is
 *   Resume (STREAM_RESUME_LEN bytes): u32 kind (STREAM_RESUME) | u64 the
 *   first record number it carries | u64 xxh64 of the fields before it
 * then records and frees from that number on, and the end, as any stream:
 * its chain and count start at its own header, so a resumed stream is
 * checked whole in itself. The receiver takes it only onto the partial
 * state of a stream with the same header, at the record number it kept
 * (recv.c says why records of another snapshot cannot be spliced in).
 *
 * Raw: why the copy stays authentic and no (key, nonce) pair repeats.
 * - Each record's AEAD tag binds its ciphertext to the dataset GUID, the
 *   record number, the birth txg, compression and sizes (record.c's AAD),
 *   and its data key is HKDF(master key, dataset GUID, suite, key salt).
 *   So the received dataset keeps the source's GUID (and every birth txg):
 *   it is the same dataset under the same master key, in another place.
 *   A pool refuses a raw stream whose GUID it holds already, and any
 *   stream whose snapshot has its dataset's GUID or a GUID of a dataset
 *   of the pool: a snapshot's MAC table is keyed by its GUID (bpmac.c).
 * - The set of records: the header carries the snapshot's view root
 *   (bpmac.c), the MAC root of every pointer the snapshot reads, made by
 *   the source under the key, over the pointers' fields but their place,
 *   which the receiver chooses. The receiver, which has no key, stores it
 *   as the snapshot's view root and its head's root, and the first
 *   load-key (or the end of an incremental whose key is loaded there)
 *   builds the tree from the pointers received and refuses the dataset
 *   unless it comes out with exactly those roots (recv.c). So a stream
 *   rebuilt by a forger, or the receiver's metadata changed before that
 *   load-key, that drops a record, adds one or carries an older authentic
 *   version of one never loads, as OpenZFS's objset MAC does. Version 1
 *   streams carry no root and are refused.
 * - Nonces: the copy's later writes draw nonce blocks as every key state
 *   does (crypt.c): a random 64-bit key salt and 32-bit prefix per block,
 *   in memory, never read from metadata. The source's records and the
 *   copy's are then blocks of one dataset drawn by different key states,
 *   exactly as two load-keys of the source are: the bound crypt.c gives,
 *   B^2 / 2^97 over all blocks both ever draw, holds. Nothing of the
 *   source's nonce state needs to travel or be reserved.
 * - Birth txgs are the source's, and so is the txg of the snapshot the
 *   receiver makes: the snapshot holds exactly the records born by its
 *   txg, as snapshot.c needs, and a raw incremental's records, born after
 *   FROM's txg on the source, are after FROM's txg here too. The receiver
 *   moves its open txg past the stream's snapshot txg first (txg_advance),
 *   so every later write and snapshot there is newer than all of it; a
 *   snapshot more than STREAM_TXG_AHEAD past the pool's txg is refused.
 * - Keys: a raw incremental carries the wrapping it was sent with; one
 *   whose wrapped key or key parameters differ from the target's (a
 *   change-key on either side since FROM) is refused: applying it would
 *   leave records and a wrapped key that disagree (openzfs #12614, #12000).
 */
#ifndef STOR_STREAM_H
#define STOR_STREAM_H

#include <stdint.h>

#include "kv/format.h"

#define STREAM_MAGIC 0x434f464653454e44ull /* "COFFSEND" */
#define STREAM_VERSION 3u

#define STREAM_F_RAW 0x1u
#define STREAM_F_INCREMENTAL 0x2u
#define STREAM_F_RESUME 0x4u
/* raw: the wrapped key is of generation 1, and so are the records it seals
 * (BP_F_KEYGEN, rekey.c); a receiver that does not know the flag refuses */
#define STREAM_F_KEYGEN1 0x8u
#define STREAM_F_KNOWN (STREAM_F_RAW | STREAM_F_INCREMENTAL | STREAM_F_RESUME | STREAM_F_KEYGEN1)

#define STREAM_SNAPNAME_LEN 64u
#define STREAM_WRAPPED_LEN 60u /* KEYS_WRAPPED_LEN */
#define STREAM_SALT_LEN 16u    /* KEYS_SALT_LEN */

#define STREAM_VIEW_LEN 32u /* MAC_ROOT_LEN */
#define STREAM_KIDS_LEN 16u /* MAC_LEN */
#define STREAM_HDR_LEN                                                                    \
	(8 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 4 + 8 + 1 + 1 + 1 + 4 + STREAM_SALT_LEN +         \
	 STREAM_WRAPPED_LEN + 8 + STREAM_SNAPNAME_LEN + STREAM_VIEW_LEN + STREAM_KIDS_LEN + 8)

#define STREAM_REC 1u
#define STREAM_FREE 2u
#define STREAM_END 3u
#define STREAM_RESUME 4u

#define STREAM_REC_LEN (4 + 8 + 1 + 1 + 4 + 4 + 4 + 8 + 8 + 12 + 16 + 8 + 4 + 8)
#define STREAM_FREE_LEN (4 + 8 + 8 + 8)
#define STREAM_END_LEN (4 + 8 + 8 + 8)
#define STREAM_RESUME_LEN (4 + 8 + 8)

/*
 * How far ahead of the receiving pool's txg a raw stream's snapshot may be
 * (the pool moves its own txg past it): a source committing a thousand
 * txgs a second for 35 years, while a forged stream moves the pool's txg
 * by this much at most, far from stream_hdr_get's absolute 2^48.
 */
#define STREAM_TXG_AHEAD (1ull << 40)

/* The largest part: a record of the largest recordsize, raw or not. */
#define STREAM_PART_MAX (STREAM_REC_LEN + (1u << 20))

/** The header, decoded. */
struct stream_hdr {
	uint32_t version, flags;
	uint64_t guid, from_guid, from_txg, to_guid, to_txg;
	uint32_t recsize;
	uint64_t volsize;
	uint8_t suite, comp, keyformat;
	uint32_t iters;
	uint8_t salt[STREAM_SALT_LEN];
	uint8_t wrapped[STREAM_WRAPPED_LEN];
	uint64_t max_birth;
	char snapname[STREAM_SNAPNAME_LEN + 1];
	uint8_t view[STREAM_VIEW_LEN];
	uint8_t kids[STREAM_KIDS_LEN];
};

/** A record's fixed part, decoded (its payload follows it in the stream). */
struct stream_rec {
	uint64_t recno;
	uint8_t flags, comp;
	uint32_t psize, lsize, csize;
	uint64_t birth, salt;
	uint8_t nonce[12], tag[16];
	uint64_t cksum;
	uint32_t len;
};

/** The next link of the chain over parts (the head comment). */
uint64_t stream_chain(uint64_t chain, uint64_t part_sum);

/** Encode @h into @out (STREAM_HDR_LEN bytes); its checksum in *@sum. */
void stream_hdr_put(const struct stream_hdr *h, uint8_t *out, uint64_t *sum);
/**
 * Decode and check a header: magic, version, checksum, known flags, and the
 * bounds a receiver relies on (recordsize, volsize, suite, key fields of a
 * raw stream, the name). @return 0, STOR_EFORMAT (not a stream, or a newer
 * one), STOR_ECKSUM, STOR_ECORRUPT; the reason in pool_set_error()
 */
int stream_hdr_get(const uint8_t *in, struct stream_hdr *h, uint64_t *sum);

/** A record's fixed part into @out; the checksum covers @payload too. */
void stream_rec_put(const struct stream_rec *r, const uint8_t *payload, uint8_t *out,
		    uint64_t *sum);
/** The kind of the part at @in (4 bytes). */
uint32_t stream_kind(const uint8_t *in);
/** Decode a record's fixed part (its length checked against the header's
 *  shape, not its checksum: that needs the payload, stream_rec_check). */
int stream_rec_get(const uint8_t *in, const struct stream_hdr *h, struct stream_rec *r);
/** Check the checksum of the record at @in with its @payload. */
int stream_rec_check(const uint8_t *in, const uint8_t *payload, uint32_t len, uint64_t *sum);

/** A free of records [first, first + count) into @out; its checksum in *@sum. */
void stream_free_put(uint64_t first, uint64_t count, uint8_t *out, uint64_t *sum);
/** Decode and check a free: its checksum, an incremental stream's, inside
 *  the volume. @return 0, STOR_ECKSUM, STOR_ECORRUPT */
int stream_free_get(const uint8_t *in, const struct stream_hdr *h, uint64_t *first,
		    uint64_t *count, uint64_t *sum);

/** The resume part of a stream resumed at record @first; its checksum in *@sum. */
void stream_resume_put(uint64_t first, uint8_t *out, uint64_t *sum);
/** Decode and check one against the header's shape. @return 0, STOR_ECKSUM, STOR_ECORRUPT */
int stream_resume_get(const uint8_t *in, const struct stream_hdr *h, uint64_t *first,
		      uint64_t *sum);
/** Are @a and @b the header of one stream, all but STREAM_F_RESUME and the
 *  informative compression level? 1 yes, 0 no */
int stream_hdr_same(const struct stream_hdr *a, const struct stream_hdr *b);

void stream_end_put(uint64_t parts, uint64_t chain, uint8_t *out);
/** @return 0 with the fields, or STOR_ECKSUM */
int stream_end_get(const uint8_t *in, uint64_t *parts, uint64_t *chain);

#endif
