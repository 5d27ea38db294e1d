/* SPDX-License-Identifier: MIT */
/*
 * Record crypto inside libstore: a suite table, expanded data keys and
 * batch seal/open. Batch-first: one call seals or opens many records, each
 * with its own key, nonce, AAD, input, output and tag, so multi-buffer
 * backends can run their CBC-MAC/GHASH chains side by side.
 */
#ifndef STOR_CRYPT_H
#define STOR_CRYPT_H

#include <stddef.h>
#include <stdint.h>

enum crypt_suite {
	CRYPT_OFF = 0,
	CRYPT_AES128_CCM,
	CRYPT_AES192_CCM,
	CRYPT_AES256_CCM,
	CRYPT_AES128_GCM,
	CRYPT_AES256_GCM,
	CRYPT_NSUITES
};

#define CRYPT_NONCE_LEN 12
#define CRYPT_TAG_LEN 16
#define CRYPT_KEY_MAX 32
/* Longest record: CCM with a 12-byte nonce has a 3-byte length field. */
#define CRYPT_LEN_MAX ((1ul << 24) - 1)

/**
 * Records sealed in one nonce block (one data key) before the engine draws
 * a new block. See the nonce scheme in crypt.c for the bound.
 */
#define CRYPT_BLOCK_RECORDS (1ull << 32)

/**
 * Build the nonce of a record: the block's random 4-byte @prefix, big-endian,
 * followed by the 8-byte big-endian @counter within the block.
 * [out] @nonce  CRYPT_NONCE_LEN bytes
 */
void crypt_nonce(uint32_t prefix, uint64_t counter, uint8_t nonce[CRYPT_NONCE_LEN]);

/** Suite name ("aes-256-ccm", "off") and key length in bytes (0 for off). */
const char *crypt_suite_name(enum crypt_suite s);
size_t crypt_suite_keylen(enum crypt_suite s);
/** Parse a suite name; "on" means aes-256-ccm. @return the suite or -1. */
int crypt_suite_parse(const char *name);

struct crypt_backend;
/** The backends compiled in: "ipsec-mb" (when configured) and "openssl". */
const struct crypt_backend *crypt_backend_by_name(const char *name);
const char *crypt_backend_name(const struct crypt_backend *b);
/** Whether @b can do @s (ipsec-mb has no aes-192-ccm). */
int crypt_backend_supports(const struct crypt_backend *b, enum crypt_suite s);

/**
 * An expanded data key: key schedule(s) computed once, used for any number
 * of records from any number of threads. Key bytes live in locked memory
 * and are cleansed by crypt_key_free().
 */
struct crypt_key;

/**
 * Expand @key (crypt_suite_keylen(s) bytes) for suite @s with the best
 * backend for it (or @b if not NULL).
 * @return 0, -EINVAL (bad suite or length), -ENOTSUP (backend lacks suite), -ENOMEM
 */
int crypt_key_new(enum crypt_suite s, const uint8_t *key, size_t keylen,
		  const struct crypt_backend *b, struct crypt_key **out);
void crypt_key_free(struct crypt_key *k);
enum crypt_suite crypt_key_suite(const struct crypt_key *k);

/**
 * One record of a batch. @in and @out may be equal (in place) but must not
 * otherwise overlap. @aad may be NULL when @aad_len is 0; @in and @out may be
 * NULL when @len is 0. @len is at most CRYPT_LEN_MAX.
 */
struct crypt_op {
	const struct crypt_key *key;
	const uint8_t *nonce; /* CRYPT_NONCE_LEN bytes */
	const uint8_t *aad;
	size_t aad_len;
	const uint8_t *in;
	uint8_t *out;
	size_t len;
	uint8_t *tag; /* CRYPT_TAG_LEN bytes: written by seal, checked by open */
	int status;   /* 0, STOR_EAUTH (open: tag mismatch), or -errno */
};

/**
 * Seal (encrypt + tag) or open (verify + decrypt) @n records. Records may
 * mix keys, suites and lengths. Opening compares tags in constant time and
 * leaves no plaintext in @out of a record whose tag fails (it is zeroed).
 * Thread-safe (per-thread backend state). A malformed op (no key, nonce or
 * tag, bad length or overlap) gets status -EINVAL without stopping the
 * others; a record that fails to seal (-EIO) gets zeroed output and tag.
 * @return the number of records whose status is not 0
 */
int crypt_seal(struct crypt_op *ops, size_t n);
int crypt_open(struct crypt_op *ops, size_t n);

/** Release the calling thread's backend state (for thread exit in tests). */
void crypt_thread_cleanup(void);

#endif
