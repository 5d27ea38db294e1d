/* SPDX-License-Identifier: MIT */
/*
 * What libstore, cofferd, coffer and libcoffer share (OpenZFS's zcommon):
 * the error map, the grammar of names and sizes, "did you mean", hex, the
 * form of a LUN's path and the property table's help texts; one definition
 * each, so the daemon's frame checks, the CLI and the engine agree. The
 * wire protocol (proto.h) and the default socket path (sockpath.h) live
 * beside it. Nothing here includes libstore or the daemon.
 */
#ifndef COFFER_COMMON_H
#define COFFER_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error map: one list drives the enum, stor_strerror() and stor_errname(). */
#define STOR_ERRNO_MAP(XX)                                                                      \
	XX(EFORMAT, -10001, "unsupported on-disk format version")                              \
	XX(ECORRUPT, -10002, "metadata or record failed validation")                           \
	XX(EAUTH, -10003, "record authentication tag mismatch")                                \
	XX(ENOKEY, -10004, "dataset key is not loaded")                                        \
	XX(ECKSUM, -10005, "record checksum mismatch")                                         \
	XX(EBADKEY, -10006, "incorrect key")                                                   \
	XX(ELABEL, -10007, "LUN label is missing or damaged")                                  \
	XX(EFOREIGN, -10008, "LUN belongs to another pool")                                    \
	XX(ENOSPC, -10009, "pool is out of space")                                             \
	XX(EBADNAME, -10010, "invalid dataset or pool name")                                   \
	XX(EBADPROP, -10011, "invalid property or value")                                      \
	XX(EREADONLY, -10012, "property is read-only or fixed at creation")                    \
	XX(EFAULTED, -10013, "pool is faulted")                                                \
	XX(ERANGE, -10014, "offset or length outside the volume")                              \
	XX(ENOTENCRYPTED, -10015, "dataset is not encrypted")                                  \
	XX(ENOTROOT, -10016, "dataset is not an encryption root")                             \
	XX(ESUSPENDED, -10017, "pool is suspended after a failed flush or metadata commit (see pool status)") \
	XX(EITERS, -10018, "pbkdf2iters must be 100000 to 10000000")                           \
	XX(EWEAKKEY, -10019, "raw key is all zero or too regular; use 32 random bytes")        \
	XX(ENOTBLANK, -10020, "LUN is not blank: it may hold a file system or other data")         \
	XX(EHOSTID, -10021, "pool was last used by another host; use -f")                          \
	XX(EMETAFULL, -10022, "pool metadata is full: its map is at its largest or the state directory's file system has no room")

enum {
#define XX(name, val, msg) STOR_##name = (val),
	STOR_ERRNO_MAP(XX)
#undef XX
};

/** Text for any return code of libstore (STOR_E* or -errno). Never NULL. */
const char *stor_strerror(int err);
/** Symbolic name ("EAUTH", "ENOENT") of a return code. Never NULL. */
const char *stor_errname(int err);

/* Limits of names. */
#define STOR_NAME_MAX 255          /* full dataset name, pool/a/b */
#define STOR_POOL_NAME_MAX 63      /* a pool's name: it is kept in every LUN label */

/** May @path name a LUN: absolute, or "rados:POOL/PREFIX"? 1 or 0 */
int stor_lun_path_ok(const char *path);
/** May stor_pool_search() look in @dir: absolute, or "rados:POOL"? 1 or 0 */
int stor_search_dir_ok(const char *dir);
/* The prefix of a LUN on Ceph RADOS. */
#define LUN_RADOS_PREFIX "rados:"
/** Is @path a RADOS LUN's ("rados:POOL/PREFIX")? */
int lun_path_is_rados(const char *path);

/**
 * Decode @n hex digits (either case) of @hex into @n / 2 bytes of @out.
 * @return 0, or -EINVAL with *@bad (if not NULL) the offset of the first
 *         character that is not a hex digit (@n - 1 for an odd @n)
 */
int stor_hex_decode(const char *hex, size_t n, uint8_t *out, size_t *bad);

/*
 * Rules shared by libstore, cofferd and coffer: one definition each, so the
 * daemon's frame checks, the CLI and the engine agree on what a name and a
 * size are.
 */

/** What stor_name_check() checks @name as. */
enum stor_name_kind {
	STOR_NAME_POOL,    /* one component, at most STOR_POOL_NAME_MAX bytes */
	STOR_NAME_DATASET, /* pool/a/b (a pool's own name too), at most STOR_NAME_MAX bytes */
	STOR_NAME_SNAPSHOT, /* pool/a@snap, or a range pool/a@first%last (either side may be empty) */
};

/**
 * Check the form of a pool or dataset name (name.c gives the grammar; no
 * lookup: whether the pool or dataset exists is the caller's question).
 * @return 0 or STOR_EBADNAME (also for NULL)
 */
int stor_name_check(const char *name, enum stor_name_kind kind);

/**
 * How many edits @typed is from @name, for "did you mean" (typo.c: case and
 * '-'/'_' ignored), or UINT_MAX when too far to be worth suggesting.
 */
unsigned stor_typo_distance(const char *typed, const char *name);

enum stor_prop_when { STOR_PROP_READONLY, STOR_PROP_AT_CREATE, STOR_PROP_SETTABLE };

/**
 * The @i-th dataset property (i from 0), for help texts: its name, with what
 * it takes in *@values ("one of on | off") and when it can be set in *@when.
 * @return the name, or NULL past the last one
 */
const char *stor_prop_describe(size_t i, const char **values, enum stor_prop_when *when);

/**
 * Parse a size: digits with an optional fraction and an optional suffix
 * B, K, M, G, T, P or E (powers of 1024), each unit also written with i
 * and/or B after it, letters in any case: 8192, 8K, 8KiB, 1.5G, 16mb.
 * A fraction must come to a whole number of bytes (size.c gives the grammar).
 * @param[out] out  the size in bytes, set only on success
 * @return 0, -EINVAL (not a size), -ERANGE (above 2^64 - 1 bytes)
 */
int stor_parse_size(const char *s, uint64_t *out);

/**
 * Write @v bytes as coffer shows sizes: bytes below 1K, else three
 * significant digits and a unit of 1024 ("1.50M", "10.0G", "128G").
 */
void stor_format_size(uint64_t v, char *buf, size_t len);

/** Give the heap's free pages back to the system (heap.c says when not). */
void stor_heap_trim(void);

/*
 * The receive_resume_token (resume_token.c gives its form): what a receive
 * -s cut short keeps, for send -t to go on from.
 */
#define STOR_RESUME_RAW 0x1u  /* the stream is raw (send -w) */
#define STOR_RESUME_INCR 0x2u /* the stream is an incremental (from_guid set) */
#define STOR_RESUME_TOKEN_MAX 128 /* its length and NUL, rounded up */
struct stor_resume_token {
	unsigned flags;
	uint64_t guid;      /* the source dataset's GUID (the stream header's) */
	uint64_t to_guid;   /* the snapshot sent */
	uint64_t from_guid; /* an incremental's FROM, else 0 */
	uint64_t to_txg;    /* the snapshot's txg on the source */
	uint64_t next;      /* the record number the resumed stream starts at */
};
/** Write @t as a token into @out (@len >= STOR_RESUME_TOKEN_MAX). @return 0, -ENOSPC */
int stor_resume_token_encode(const struct stor_resume_token *t, char *out, size_t len);
/**
 * Read token @s into @t. @return 0, or -EINVAL with the reason in @why (a
 * version not read here, not the token's form, a checksum that does not match)
 */
int stor_resume_token_decode(const char *s, struct stor_resume_token *t, char *why,
			     size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
