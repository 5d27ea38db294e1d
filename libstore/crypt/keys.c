/* SPDX-License-Identifier: MIT */
/*
 * Key primitives of libstore: parse user key material into a wrapping key,
 * wrap and unwrap dataset master keys, derive per-epoch data keys, and hand
 * out locked memory for all of them. This file knows nothing about datasets
 * or metadata (dskeys.c does); it only turns bytes into bytes.
 *
 * Invariants: every temporary holding key bytes is cleansed before return,
 * on success and failure alike; a failed unwrap leaves the caller's master
 * buffer untouched; error text goes to a thread-local buffer, never to a log.
 * Only this file and the crypt backends include OpenSSL headers.
 */

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "base/pool_error.h"
#include "crypt/keys.h"
#include "store.h"

#define WRAP_NONCE_LEN 12
#define WRAP_TAG_LEN 16

/* The reason goes where every unit's goes (pool_error.c), for the caller to show. */
static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...)
{
	char why[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pool_set_error("%s", why);
	/* every failure path ends here: leave no stale OpenSSL errors for other callers */
	ERR_clear_error();
}

const char *keys_last_error(void)
{
	return stor_pool_last_error();
}

static const char *const format_names[] = {
	[STOR_KEY_NONE] = "none",
	[STOR_KEY_RAW] = "raw",
	[STOR_KEY_HEX] = "hex",
	[STOR_KEY_PASSPHRASE] = "passphrase",
};

int keys_format_parse(const char *name)
{
	if (!name)
		return -1;
	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++)
		if (strcmp(name, format_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *keys_format_name(enum stor_keyformat f)
{
	if ((unsigned)f < sizeof(format_names) / sizeof(format_names[0]))
		return format_names[f];
	return "unknown";
}

void keys_cleanse(void *p, size_t len)
{
	if (p && len)
		OPENSSL_cleanse(p, len);
}

int keys_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	/* RAND_bytes takes an int; split absurd lengths instead of truncating */
	while (len > 0) {
		int n = len > INT_MAX ? INT_MAX : (int)len;

		if (RAND_bytes(p, n) != 1) {
			set_error("random generator failed");
			return -EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int keys_pbkdf2_sha512(const uint8_t *pass, size_t passlen, const uint8_t *salt, size_t saltlen,
		       uint32_t iters, uint8_t *out, size_t outlen)
{
	if (iters == 0 || outlen == 0 || outlen > INT_MAX || passlen > INT_MAX ||
	    saltlen > INT_MAX || iters > INT_MAX) {
		set_error("pbkdf2: bad parameters");
		return -EINVAL;
	}
	/* OpenSSL refuses a NULL password even when its length is 0 */
	if (PKCS5_PBKDF2_HMAC(pass ? (const char *)pass : "", (int)passlen, salt, (int)saltlen,
			      (int)iters, EVP_sha512(), (int)outlen, out) != 1) {
		keys_cleanse(out, outlen);
		set_error("pbkdf2-hmac-sha512 failed");
		return -EIO;
	}
	return 0;
}

int keys_hkdf_sha512(const uint8_t *ikm, size_t ikmlen, const uint8_t *salt, size_t saltlen,
		     const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen)
{
	EVP_KDF *kdf = NULL;
	EVP_KDF_CTX *kctx = NULL;
	OSSL_PARAM params[5], *p = params;
	int ret = -EIO;

	/* RFC 5869: L <= 255 * HashLen */
	if (!ikm || ikmlen == 0 || outlen == 0 || outlen > 255 * 64) {
		set_error("hkdf: bad parameters");
		return -EINVAL;
	}
	kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	if (!kdf)
		goto out;
	kctx = EVP_KDF_CTX_new(kdf);
	if (!kctx)
		goto out;
	*p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA512", 0);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikmlen);
	/* an absent salt means HashLen zero bytes (RFC 5869 2.2); OpenSSL does that itself */
	if (salt && saltlen)
		*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt,
							 saltlen);
	if (info && infolen)
		*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info,
							 infolen);
	*p = OSSL_PARAM_construct_end();
	if (EVP_KDF_derive(kctx, out, outlen, params) != 1)
		goto out;
	ret = 0;
out:
	if (ret < 0) {
		keys_cleanse(out, outlen);
		set_error("hkdf-sha512 failed");
	}
	EVP_KDF_CTX_free(kctx); /* frees (and cleanses) the copied key */
	EVP_KDF_free(kdf);
	return ret;
}

int keys_derive_wrapping(enum stor_keyformat fmt, const struct stor_key_material *m,
			 const uint8_t salt[KEYS_SALT_LEN], uint32_t iters,
			 uint8_t wk[KEYS_WRAPKEY_LEN])
{
	const uint8_t *d;
	size_t len, bad = 0;
	int ret = -EINVAL;

	if (!m || (!m->data && m->len)) {
		set_error("no key material");
		goto out;
	}
	d = m->data;
	len = m->len;

	switch (fmt) {
	case STOR_KEY_RAW:
		/* raw keys are binary: a trailing 0x0a is key material, not a newline */
		if (len != KEYS_WRAPKEY_LEN) {
			set_error("raw key must be exactly %d bytes, got %zu", KEYS_WRAPKEY_LEN,
				  len);
			goto out;
		}
		memcpy(wk, d, KEYS_WRAPKEY_LEN);
		ret = 0;
		break;
	case STOR_KEY_HEX:
		/* keys read from a file usually end in one newline */
		if (len == 2 * KEYS_WRAPKEY_LEN + 1 && d[len - 1] == '\n')
			len--;
		if (len != 2 * KEYS_WRAPKEY_LEN) {
			set_error("hex key must be exactly %d hex digits, got %zu",
				  2 * KEYS_WRAPKEY_LEN, len);
			goto out;
		}
		if (stor_hex_decode((const char *)d, len, wk, &bad) < 0) {
			set_error("hex key has a non-hex character at offset %zu", bad);
			goto out;
		}
		ret = 0;
		break;
	case STOR_KEY_PASSPHRASE:
		if (len && d[len - 1] == '\n')
			len--;
		if (len < KEYS_PASSPHRASE_MIN || len > KEYS_PASSPHRASE_MAX) {
			set_error("passphrase must be %d to %d bytes, got %zu", KEYS_PASSPHRASE_MIN,
				  KEYS_PASSPHRASE_MAX, len);
			goto out;
		}
		if (!salt || iters == 0) {
			set_error("passphrase needs a salt and at least one pbkdf2 iteration");
			goto out;
		}
		if (iters > KEYS_PBKDF2_MAX) {
			/* the last line of defence against a load-key that runs for hours */
			set_error("pbkdf2 iterations %u above the bound of %u", iters,
				  KEYS_PBKDF2_MAX);
			goto out;
		}
		ret = keys_pbkdf2_sha512(d, len, salt, KEYS_SALT_LEN, iters, wk,
					 KEYS_WRAPKEY_LEN);
		break;
	default:
		set_error("unknown keyformat %d", (int)fmt);
		break;
	}
out:
	if (ret < 0)
		keys_cleanse(wk, KEYS_WRAPKEY_LEN);
	return ret;
}

int keys_check_random(enum stor_keyformat fmt, const uint8_t wk[KEYS_WRAPKEY_LEN])
{
	uint8_t seen[256] = { 0 };
	unsigned distinct = 0;

	if (fmt != STOR_KEY_RAW && fmt != STOR_KEY_HEX)
		return 0;
	for (size_t i = 0; i < KEYS_WRAPKEY_LEN; i++)
		if (!seen[wk[i]]++)
			distinct++;
	keys_cleanse(seen, sizeof(seen)); /* it tells which bytes the key has */
	if (distinct < KEYS_DISTINCT_MIN) {
		set_error("key has %u distinct byte values, fewer than %d", distinct,
			  KEYS_DISTINCT_MIN);
		return STOR_EWEAKKEY;
	}
	return 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

size_t keys_wrap_aad(uint64_t ds_guid, unsigned suite, enum stor_keyformat fmt, uint32_t iters,
		     const uint8_t salt[KEYS_SALT_LEN], uint8_t aad[64])
{
	/* layout documented in keys.h; it authenticates wrapped keys on disk */
	put_be64(aad, ds_guid);
	put_be32(aad + 8, suite);
	put_be32(aad + 12, (uint32_t)fmt);
	put_be32(aad + 16, iters);
	if (salt)
		memcpy(aad + 20, salt, KEYS_SALT_LEN);
	else
		memset(aad + 20, 0, KEYS_SALT_LEN);
	return KEYS_WRAP_AAD_LEN;
}

int keys_wrap(const uint8_t wk[KEYS_WRAPKEY_LEN], const uint8_t *aad, size_t aad_len,
	      const uint8_t master[KEYS_MASTER_LEN], uint8_t wrapped[KEYS_WRAPPED_LEN])
{
	EVP_CIPHER_CTX *ctx = NULL;
	uint8_t *nonce = wrapped;
	uint8_t *ct = wrapped + WRAP_NONCE_LEN;
	uint8_t *tag = wrapped + WRAP_NONCE_LEN + KEYS_MASTER_LEN;
	int n, ret = -EIO;

	if (aad_len > INT_MAX || (!aad && aad_len)) {
		set_error("wrap: bad aad");
		return -EINVAL;
	}
	/* a fresh random nonce per wrap: change-key rewraps under the same key */
	ret = keys_random(nonce, WRAP_NONCE_LEN);
	if (ret < 0)
		goto out;
	ret = -EIO;
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		goto out;
	if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, WRAP_NONCE_LEN, NULL) != 1 ||
	    EVP_EncryptInit_ex(ctx, NULL, NULL, wk, nonce) != 1)
		goto out;
	if (aad_len && EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aad_len) != 1)
		goto out;
	if (EVP_EncryptUpdate(ctx, ct, &n, master, KEYS_MASTER_LEN) != 1 || n != KEYS_MASTER_LEN)
		goto out;
	if (EVP_EncryptFinal_ex(ctx, ct + n, &n) != 1 || n != 0)
		goto out;
	if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, WRAP_TAG_LEN, tag) != 1)
		goto out;
	ret = 0;
out:
	if (ret < 0) {
		keys_cleanse(wrapped, KEYS_WRAPPED_LEN);
		set_error("wrapping the master key failed");
	}
	EVP_CIPHER_CTX_free(ctx); /* cleanses the expanded key schedule */
	return ret;
}

int keys_unwrap(const uint8_t wk[KEYS_WRAPKEY_LEN], const uint8_t *aad, size_t aad_len,
		const uint8_t wrapped[KEYS_WRAPPED_LEN], uint8_t master[KEYS_MASTER_LEN])
{
	EVP_CIPHER_CTX *ctx = NULL;
	const uint8_t *nonce = wrapped;
	const uint8_t *ct = wrapped + WRAP_NONCE_LEN;
	const uint8_t *tag = wrapped + WRAP_NONCE_LEN + KEYS_MASTER_LEN;
	/* decrypt here first: @master must never hold unauthenticated plaintext */
	uint8_t pt[KEYS_MASTER_LEN];
	int n, ret = -EIO;

	if (aad_len > INT_MAX || (!aad && aad_len)) {
		set_error("unwrap: bad aad");
		return -EINVAL;
	}
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		goto out;
	if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, WRAP_NONCE_LEN, NULL) != 1 ||
	    EVP_DecryptInit_ex(ctx, NULL, NULL, wk, nonce) != 1)
		goto out;
	if (aad_len && EVP_DecryptUpdate(ctx, NULL, &n, aad, (int)aad_len) != 1)
		goto out;
	if (EVP_DecryptUpdate(ctx, pt, &n, ct, KEYS_MASTER_LEN) != 1 || n != KEYS_MASTER_LEN)
		goto out;
	if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, WRAP_TAG_LEN, (void *)tag) != 1)
		goto out;
	/* a tag mismatch is the only way a wrong key or a changed byte shows up */
	if (EVP_DecryptFinal_ex(ctx, pt + n, &n) != 1) {
		ret = STOR_EBADKEY;
		set_error("incorrect key, or the wrapped key or its parameters were altered");
		goto out;
	}
	memcpy(master, pt, KEYS_MASTER_LEN);
	ret = 0;
out:
	if (ret == -EIO)
		set_error("unwrapping the master key failed");
	keys_cleanse(pt, sizeof(pt));
	EVP_CIPHER_CTX_free(ctx);
	return ret;
}

int keys_derive_data(const uint8_t master[KEYS_MASTER_LEN], uint64_t ds_guid, unsigned suite,
		     uint64_t salt, uint8_t *out, size_t len)
{
	/*
	 * HKDF-SHA512(IKM = master, salt = GUID (8 bytes BE),
	 *             info = "coffer data key" || suite || key salt (8 bytes BE)).
	 * The GUID salt keeps two datasets that somehow share a master key
	 * (a cloned metadata file) on different data keys; the key salt, drawn
	 * at random for each block of nonces, gives every block its own key.
	 */
	uint8_t hsalt[8];
	uint8_t info[sizeof(KEYS_DATA_INFO) - 1 + 1 + 8];

	if (len == 0 || len > 32) {
		set_error("data key must be 1 to 32 bytes");
		return -EINVAL;
	}
	put_be64(hsalt, ds_guid);
	memcpy(info, KEYS_DATA_INFO, sizeof(KEYS_DATA_INFO) - 1);
	info[sizeof(KEYS_DATA_INFO) - 1] = (uint8_t)suite;
	put_be64(info + sizeof(KEYS_DATA_INFO), salt);
	return keys_hkdf_sha512(master, KEYS_MASTER_LEN, hsalt, sizeof(hsalt), info, sizeof(info),
				out, len);
}

int keys_derive_mac(const uint8_t master[KEYS_MASTER_LEN], uint64_t ds_guid, unsigned suite,
		    uint8_t out[KEYS_MAC_LEN])
{
	uint8_t hsalt[8];
	uint8_t info[sizeof(KEYS_MAC_INFO) - 1 + 1];

	put_be64(hsalt, ds_guid);
	memcpy(info, KEYS_MAC_INFO, sizeof(KEYS_MAC_INFO) - 1);
	info[sizeof(KEYS_MAC_INFO) - 1] = (uint8_t)suite;
	return keys_hkdf_sha512(master, KEYS_MASTER_LEN, hsalt, sizeof(hsalt), info, sizeof(info),
				out, KEYS_MAC_LEN);
}

/*
 * The PRF is SHA-256 over one 64-byte block holding the key, then the
 * message: the state after that first block is computed once per key and
 * copied per call (a third of the cost of hashing both, and no allocation).
 * The low-level SHA-256 calls are deprecated in OpenSSL 3 but are the only
 * ones whose state is a plain struct that can be copied this way.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
_Static_assert(sizeof(SHA256_CTX) <= KEYS_PRF_STATE_LEN, "PRF state fits its buffer");

int keys_prf_key(const uint8_t key[KEYS_MAC_LEN], uint8_t state[KEYS_PRF_STATE_LEN])
{
	uint8_t block[64];
	SHA256_CTX c;
	int ok;

	memcpy(block, key, KEYS_MAC_LEN);
	memset(block + KEYS_MAC_LEN, 0x5c, sizeof(block) - KEYS_MAC_LEN);
	ok = SHA256_Init(&c) == 1 && SHA256_Update(&c, block, sizeof(block)) == 1;
	memcpy(state, &c, sizeof(c));
	OPENSSL_cleanse(&c, sizeof(c));
	OPENSSL_cleanse(block, sizeof(block));
	return ok ? 0 : -EIO;
}

/*
 * Every message of ours fits two blocks with its padding, so they are
 * padded here and compressed straight from the copied state: SHA256_Update
 * and SHA256_Final buffer, pad and cleanse on top of the same compressions,
 * which made a third of the cost on the write path (each write computes
 * two leaves). Nothing is cleansed after: what is left in @c is the final
 * state, whose first half is the output and whose other half tells no more
 * of the key than the output does; the message is not secret.
 */
int keys_prf128(const uint8_t state[KEYS_PRF_STATE_LEN], const void *msg, size_t len,
		uint8_t out[16])
{
	uint8_t blocks[128], md[SHA256_DIGEST_LENGTH];
	size_t nb = (len + 9 + 63) / 64;
	uint64_t bits = (64 + (uint64_t)len) * 8; /* the key block, then the message */
	SHA256_CTX c;
	int ok = 1;

	memcpy(&c, state, sizeof(c));
	if (nb > 2) {
		ok = SHA256_Update(&c, msg, len) == 1 && SHA256_Final(md, &c) == 1;
		memcpy(out, md, 16);
		return ok ? 0 : -EIO;
	}
	memcpy(blocks, msg, len);
	blocks[len] = 0x80;
	memset(blocks + len + 1, 0, nb * 64 - len - 1 - 8);
	put_be64(blocks + nb * 64 - 8, bits);
	for (size_t i = 0; i < nb; i++)
		SHA256_Transform(&c, blocks + 64 * i);
	for (int i = 0; i < 4; i++)
		put_be32(out + 4 * i, c.h[i]);
	return 0;
}
#pragma GCC diagnostic pop

/* pages keys_secure_alloc() could not lock, for stor_key_pages_unlocked() */
static atomic_uint_fast64_t unlocked_pages;

uint64_t stor_key_pages_unlocked(void)
{
	return atomic_load_explicit(&unlocked_pages, memory_order_relaxed);
}

/*
 * mlock/munlock by system call: sanitizer runtimes replace the libc calls
 * with no-ops that report success, and the tests must see what releases do.
 */
static int lock_pages(void *p, size_t len)
{
	return (int)syscall(SYS_mlock, p, len);
}

static void unlock_pages(void *p, size_t len)
{
	(void)syscall(SYS_munlock, p, len);
}

static size_t secure_len(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (len + pg - 1) / pg * pg;
}

void *keys_secure_alloc(size_t len)
{
	size_t sz;
	void *p;

	if (len == 0 || len > SIZE_MAX / 2) {
		errno = EINVAL;
		return NULL;
	}
	sz = secure_len(len);
	/* anonymous pages come zeroed and are never shared with other allocations */
	p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/*
	 * mlock keeps keys out of swap. It fails with EPERM/ENOMEM once
	 * RLIMIT_MEMLOCK is used up (8 MiB by default, 64 KiB on older kernels)
	 * for unprivileged users; the memory is still usable, so carry on,
	 * and count the pages so that the daemon can warn.
	 */
	if (lock_pages(p, sz) < 0)
		atomic_fetch_add_explicit(&unlocked_pages, sz / (size_t)sysconf(_SC_PAGESIZE),
					  memory_order_relaxed);
	/* keep keys out of core dumps, and out of a forked child's copy */
	(void)madvise(p, sz, MADV_DONTDUMP);
#ifdef MADV_WIPEONFORK
	(void)madvise(p, sz, MADV_WIPEONFORK);
#endif
	return p;
}

void keys_secure_free(void *p, size_t len)
{
	size_t sz;

	if (!p)
		return;
	sz = secure_len(len ? len : 1);
	OPENSSL_cleanse(p, sz);
	unlock_pages(p, sz);
	(void)munmap(p, sz);
}
