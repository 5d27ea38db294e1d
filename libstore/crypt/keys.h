/* SPDX-License-Identifier: MIT */
/*
 * Key hierarchy inside libstore, independent of metadata storage:
 *   user key material --(raw | hex | PBKDF2-HMAC-SHA512)--> wrapping key
 *   wrapping key --(AES-256-GCM, AAD = dataset GUID + crypto params)--> wrapped master key
 *   master key --(HKDF-SHA512, info = "coffer data key" + suite + key salt)--> data key
 *   master key --(HKDF-SHA512, info = "coffer bp mac" + suite)--> block pointer MAC key
 * Secret buffers come from keys_secure_alloc(): mlock'ed where allowed,
 * MADV_DONTDUMP, cleansed on free.
 */
#ifndef STOR_KEYS_H
#define STOR_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define KEYS_WRAPKEY_LEN 32
#define KEYS_MASTER_LEN 32
#define KEYS_SALT_LEN 16
#define KEYS_PBKDF2_DEFAULT 350000u
#define KEYS_PBKDF2_MIN 100000u
/*
 * Upper bound of pbkdf2iters, at create/change-key and in the key file.
 * load-key runs PBKDF2 holding the pool's admin lock; 1,000,000 iterations
 * of PBKDF2-HMAC-SHA512 take about 0.7 s of one core of the build machine,
 * so 10,000,000 (28 times the default) is some seconds, while an unbounded
 * u32 from a damaged or hostile key file would be most of an hour.
 * STOR_EITERS spells the range out: keep its message in step.
 */
#define KEYS_PBKDF2_MAX 10000000u
/* wrapped master key: 12-byte nonce + 32-byte ciphertext + 16-byte tag */
#define KEYS_WRAPPED_LEN (12 + KEYS_MASTER_LEN + 16)
/* bytes keys_wrap_aad() writes: 8 GUID + 4 suite + 4 keyformat + 4 iters + 16 salt */
#define KEYS_WRAP_AAD_LEN 36
#define KEYS_PASSPHRASE_MIN 8
#define KEYS_PASSPHRASE_MAX 512
/* HKDF info prefixes (no NUL): data keys, then suite and key salt; MAC keys, then suite */
#define KEYS_DATA_INFO "coffer data key"
#define KEYS_MAC_INFO "coffer bp mac"
#define KEYS_MAC_LEN 32

/**
 * Parse a keyformat name ("raw", "hex", "passphrase"; "none" gives
 * STOR_KEY_NONE); -1 if unknown.
 */
int keys_format_parse(const char *name);
const char *keys_format_name(enum stor_keyformat f);

/**
 * Check @m against @fmt (raw: 32 bytes; hex: 64 hex digits, optional
 * trailing newline; passphrase: 8-512 bytes, optional trailing newline) and
 * derive the 32-byte wrapping key into @wk. @salt/@iters are used for
 * passphrases only (PBKDF2-HMAC-SHA512, 1 <= @iters <= KEYS_PBKDF2_MAX; the
 * caller enforces KEYS_PBKDF2_MIN when the property is set). Hex digits may be upper or
 * lower case. Lengths are counted after the optional newline is removed.
 * @wk is cleansed on failure.
 * @return 0, -EINVAL (material of the wrong shape, unknown format, no salt,
 *         zero iterations or more than KEYS_PBKDF2_MAX; message in
 *         keys_last_error), -EIO
 */
int keys_derive_wrapping(enum stor_keyformat fmt, const struct stor_key_material *m,
			 const uint8_t salt[KEYS_SALT_LEN], uint32_t iters,
			 uint8_t wk[KEYS_WRAPKEY_LEN]);

/* fewer distinct byte values than this in a raw/hex key: not random bytes */
#define KEYS_DISTINCT_MIN 8

/**
 * Refuse a new raw or hex key (@wk as keys_derive_wrapping() made it) that
 * cannot be 32 random bytes: all one value (all zero above all) or fewer
 * than KEYS_DISTINCT_MIN distinct byte values. 32 random bytes have fewer
 * than 8 with a probability below 1e-36, so no real key is refused. Other
 * formats pass (passphrases have their length rule and PBKDF2). For create
 * and change-key only: load-key must still open what was made before.
 * @return 0 or STOR_EWEAKKEY
 */
int keys_check_random(enum stor_keyformat fmt, const uint8_t wk[KEYS_WRAPKEY_LEN]);

/**
 * Wrap @master with @wk into @wrapped (KEYS_WRAPPED_LEN bytes), binding
 * @aad (the dataset GUID and crypto parameters, see keys_wrap_aad()).
 * Draws a fresh random nonce. @return 0 or -EIO
 */
int keys_wrap(const uint8_t wk[KEYS_WRAPKEY_LEN], const uint8_t *aad, size_t aad_len,
	      const uint8_t master[KEYS_MASTER_LEN], uint8_t wrapped[KEYS_WRAPPED_LEN]);

/**
 * Unwrap. @master is written only on success; the plaintext never sits in
 * @master while the tag is unverified.
 * @return 0 or STOR_EBADKEY (wrong key, or tampered AAD/ciphertext), -EIO
 */
int keys_unwrap(const uint8_t wk[KEYS_WRAPKEY_LEN], const uint8_t *aad, size_t aad_len,
		const uint8_t wrapped[KEYS_WRAPPED_LEN], uint8_t master[KEYS_MASTER_LEN]);

/**
 * Build the wrap AAD of a dataset: GUID, suite, keyformat, pbkdf2 iterations
 * and salt, in a fixed big-endian layout. @return bytes written (<= 64)
 *
 *   offset  size  field
 *        0     8  ds_guid, big-endian
 *        8     4  suite, big-endian
 *       12     4  keyformat (enum stor_keyformat), big-endian
 *       16     4  pbkdf2 iterations, big-endian
 *       20    16  salt (all zero if @salt is NULL)
 *   total KEYS_WRAP_AAD_LEN (36) bytes. The layout is on disk in effect (it
 *   authenticates every wrapped key), so it never changes.
 */
size_t keys_wrap_aad(uint64_t ds_guid, unsigned suite, enum stor_keyformat fmt, uint32_t iters,
		     const uint8_t salt[KEYS_SALT_LEN], uint8_t aad[64]);

/**
 * Derive the data key of key salt @salt (@len bytes, <= 32) from @master
 * with HKDF-SHA512: IKM = master, salt = ds_guid as 8 big-endian bytes,
 * info = KEYS_DATA_INFO (15 bytes) || suite (1 byte) || key salt (8 bytes BE).
 * The suite in info keeps an aes-128 key from being a prefix of an aes-256 one.
 * @return 0, -EINVAL (@len 0 or > 32), -EIO
 */
int keys_derive_data(const uint8_t master[KEYS_MASTER_LEN], uint64_t ds_guid, unsigned suite,
		     uint64_t salt, uint8_t *out, size_t len);

/**
 * Derive the block pointer MAC key (KEYS_MAC_LEN bytes) of a dataset:
 * HKDF-SHA512, IKM = master, salt = ds_guid (8 bytes BE),
 * info = KEYS_MAC_INFO (13 bytes) || suite (1 byte). @return 0 or -EIO
 */
int keys_derive_mac(const uint8_t master[KEYS_MASTER_LEN], uint64_t ds_guid, unsigned suite,
		    uint8_t out[KEYS_MAC_LEN]);

/** Bytes of the keyed state keys_prf_key() makes: key material, keep it in secure memory. */
#define KEYS_PRF_STATE_LEN 128

/** The state of the PRF under @key, for keys_prf128(). @return 0 or -EIO */
int keys_prf_key(const uint8_t key[KEYS_MAC_LEN], uint8_t state[KEYS_PRF_STATE_LEN]);

/**
 * A 128-bit PRF of a fixed-length message: the first 16 bytes of
 * SHA-256(key || 32 bytes 0x5c || @msg), from the keyed @state. Every
 * caller passes messages of one length per purpose, with a distinct leading
 * tag byte, so length extension does not apply (and the output is
 * truncated besides). Thread-safe: @state is only read. @return 0 or -EIO
 */
int keys_prf128(const uint8_t state[KEYS_PRF_STATE_LEN], const void *msg, size_t len,
		uint8_t out[16]);

/** Fill @buf with @len random bytes (OpenSSL RAND_bytes). @return 0 or -EIO */
int keys_random(void *buf, size_t len);

/**
 * Locked, non-dumpable, zeroed memory for secrets; keys_secure_free cleanses
 * it. Each call maps whole pages (rounded up from @len), so use it for keys,
 * not for bulk data. mlock failures (RLIMIT_MEMLOCK, EPERM) do not fail the
 * call: the memory is still usable, only swappable, and the pages are
 * counted for stor_key_pages_unlocked(). The pages are also MADV_WIPEONFORK.
 * @return NULL (errno set) on failure.
 * keys_secure_free() takes the @len given to keys_secure_alloc(); NULL is a no-op.
 */
void *keys_secure_alloc(size_t len);
void keys_secure_free(void *p, size_t len);
/** Cleanse @len bytes at @p (OPENSSL_cleanse). */
void keys_cleanse(void *p, size_t len);

/**
 * PBKDF2-HMAC-SHA512 of @pass with @salt and @iters into @out (@outlen).
 * The primitive behind the passphrase keyformat, exposed for known-answer
 * tests. @return 0, -EINVAL (@iters 0, @outlen 0), -EIO
 */
int keys_pbkdf2_sha512(const uint8_t *pass, size_t passlen, const uint8_t *salt, size_t saltlen,
		       uint32_t iters, uint8_t *out, size_t outlen);

/**
 * HKDF-SHA512 (RFC 5869, extract then expand) into @out (@outlen <= 255 * 64).
 * The primitive behind keys_derive_data, exposed for known-answer tests.
 * @return 0, -EINVAL, -EIO
 */
int keys_hkdf_sha512(const uint8_t *ikm, size_t ikmlen, const uint8_t *salt, size_t saltlen,
		     const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen);

/** Message of the last keys_* failure in this thread, or "". */
const char *keys_last_error(void);

#endif
