/* SPDX-License-Identifier: MIT */
/*
 * OpenSSL EVP backend for record crypto: every suite, one record at a time.
 * It is the fallback for records another backend cannot take (aes-192-ccm
 * records that are not whole blocks among them) and the portable build's
 * only backend.
 *
 * No key schedule of this backend outlives a batch: OpenSSL allocates a
 * context's provider state (the expanded key among it) in ordinary heap,
 * which is neither locked nor kept out of core dumps, so no context is
 * kept per key. The first record of a run under one key initialises the
 * calling thread's context from the key bytes in the key's locked mapping
 * (cipher fetched once per process, 12-byte nonce, 16-byte tag, key); the
 * following records of the run only set their nonce. After each batch the
 * context is reset, which frees its provider state with OPENSSL_clear_free,
 * so the schedule is gone when the call returns. Measured (a probe timing
 * both in turn, best of 15, loaded 2-core machine): init from the key, nonce
 * and reset take 330-350 ns for CCM and ~440 ns for GCM, against 160-200 ns
 * for the template copy that kept a schedule per key in heap: ~0.2 us more
 * per run of records under one key, i.e. per batch, not per record (1-3% of
 * one 8 KiB record alone, far less in a batch).
 *
 * Also the home of the constant-time compare and cleanse that crypt.c and
 * the other backends use, so that only backends include OpenSSL headers.
 */

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "crypt/crypt.h"
#include "crypt/crypt_backend.h"
#include "store.h"

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_CIPHER_CTX *tls_ctx;

int crypt_ct_memcmp(const void *a, const void *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len);
}

void crypt_cleanse(void *p, size_t len)
{
	/* glibc's, kept like OPENSSL_cleanse, but at memset's speed: that one
	 * stores 8 bytes at a time, 0.3 us an 8 KiB record (aes-192-ccm's chains) */
	explicit_bzero(p, len);
}

/*
 * Crypto libraries leave block state in their stack frames (OpenSSL's
 * CCM keeps the MAC mask S0 in a local it never clears); a frame of this
 * size, called from the level that called them, overwrites it.
 */
#define STACK_WIPE 8192

void __attribute__((noinline)) crypt_stack_wipe(void)
{
	uint8_t buf[STACK_WIPE];

	OPENSSL_cleanse(buf, sizeof(buf));
}

static void tls_destroy(void *p)
{
	EVP_CIPHER_CTX_free(p);
}

static void tls_init(void)
{
	(void)pthread_key_create(&tls_key, tls_destroy);
}

static EVP_CIPHER_CTX *thread_ctx(void)
{
	if (tls_ctx)
		return tls_ctx;
	pthread_once(&tls_once, tls_init);
	tls_ctx = EVP_CIPHER_CTX_new();
	if (tls_ctx)
		/* Registered so the context is freed when the thread exits. */
		(void)pthread_setspecific(tls_key, tls_ctx);
	return tls_ctx;
}

static void ossl_thread_cleanup(void)
{
	if (!tls_ctx)
		return;
	pthread_once(&tls_once, tls_init);
	(void)pthread_setspecific(tls_key, NULL);
	EVP_CIPHER_CTX_free(tls_ctx);
	tls_ctx = NULL;
}

static const char *const cipher_names[CRYPT_NSUITES] = {
	[CRYPT_AES128_CCM] = "AES-128-CCM", [CRYPT_AES192_CCM] = "AES-192-CCM",
	[CRYPT_AES256_CCM] = "AES-256-CCM", [CRYPT_AES128_GCM] = "AES-128-GCM",
	[CRYPT_AES256_GCM] = "AES-256-GCM",
};
static EVP_CIPHER *ciphers[CRYPT_NSUITES];
static pthread_once_t ciphers_once = PTHREAD_ONCE_INIT;

/*
 * Fetched once and kept for the life of the process: an implicit fetch in
 * every EVP_CipherInit_ex (what EVP_aes_256_ccm() leads to) would cost a
 * lookup per run of records.
 */
static void ciphers_fetch(void)
{
	for (int s = 0; s < CRYPT_NSUITES; s++)
		if (cipher_names[s])
			ciphers[s] = EVP_CIPHER_fetch(NULL, cipher_names[s], NULL);
}

static const EVP_CIPHER *suite_cipher(enum crypt_suite s)
{
	if ((unsigned)s >= CRYPT_NSUITES || !cipher_names[s])
		return NULL;
	pthread_once(&ciphers_once, ciphers_fetch);
	return ciphers[s];
}

static int ossl_supports(enum crypt_suite s)
{
	return (unsigned)s < CRYPT_NSUITES && cipher_names[s] != NULL;
}

static int ossl_key_init(struct crypt_key *k)
{
	/* nothing to expand ahead: contexts are keyed per batch from k->bytes */
	return suite_cipher(k->suite) ? 0 : -ENOTSUP;
}

static void ossl_key_fini(struct crypt_key *k)
{
	(void)k;
}

/*
 * Key @c for @k in direction @seal. A fresh init per direction: OpenSSL's
 * AES-NI CCM picks its bulk routine (encrypt or decrypt blocks) when the key
 * is set.
 */
static int ctx_key(EVP_CIPHER_CTX *c, const struct crypt_key *k, int seal)
{
	const EVP_CIPHER *ci = suite_cipher(k->suite);

	if (!ci)
		return -ENOTSUP;
	if (!EVP_CipherInit_ex(c, ci, NULL, NULL, NULL, seal))
		return -EIO;
	if (!EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_IVLEN, CRYPT_NONCE_LEN, NULL))
		return -EIO;
	/* CCM fixes the tag length before the key; GCM takes it at the end. */
	if (crypt_suite_is_ccm(k->suite) &&
	    !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, CRYPT_TAG_LEN, NULL))
		return -EIO;
	if (!EVP_CipherInit_ex(c, NULL, NULL, k->bytes, NULL, seal))
		return -EIO;
	return 0;
}

/*
 * 0, STOR_EAUTH (open: tag mismatch) or -EIO. @keyed: @c already holds this
 * op's key and direction from the previous record, which finished cleanly.
 */
static int one(EVP_CIPHER_CTX *c, struct crypt_op *op, int seal, int keyed)
{
	const struct crypt_key *k = op->key;
	int ccm = crypt_suite_is_ccm(k->suite);
	/* EVP wants non-NULL buffers even for an empty record. */
	uint8_t dummy[1];
	const uint8_t *in = op->len ? op->in : dummy;
	uint8_t *out = op->len ? op->out : dummy;
	int len = (int)op->len, l, ret;

	if (!keyed && (ret = ctx_key(c, k, seal)) < 0)
		return ret;
	if (!EVP_CipherInit_ex(c, NULL, NULL, NULL, op->nonce, seal))
		return -EIO;
	/* Expected tags go in before the data: CCM checks it inside the update. */
	if (!seal && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, CRYPT_TAG_LEN, op->tag))
		return -EIO;
	if (ccm && !EVP_CipherUpdate(c, NULL, &l, NULL, len))
		return -EIO;
	if (op->aad_len && !EVP_CipherUpdate(c, NULL, &l, op->aad, (int)op->aad_len))
		return -EIO;
	if (ccm || op->len) {
		if (!EVP_CipherUpdate(c, out, &l, in, len))
			return seal ? -EIO : STOR_EAUTH;
	}
	if (!EVP_CipherFinal_ex(c, out, &l))
		return seal ? -EIO : STOR_EAUTH;
	if (seal && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, CRYPT_TAG_LEN, op->tag))
		return -EIO;
	return 0;
}

static void ossl_run(struct crypt_op **ops, size_t n, int seal)
{
	EVP_CIPHER_CTX *c = thread_ctx();
	const struct crypt_key *keyed = NULL;

	for (size_t i = 0; i < n; i++) {
		struct crypt_op *op = ops[i];

		/*
		 * A run of records under one key (the usual batch: one dataset)
		 * keeps the context and only sets the next nonce.
		 */
		op->status = c ? one(c, op, seal, op->key == keyed) : -ENOMEM;
		keyed = op->status == 0 ? op->key : NULL;
		if (op->status && op->len)
			memset(op->out, 0, op->len);
		if (op->status && seal)
			memset(op->tag, 0, CRYPT_TAG_LEN);
	}
	/* frees the provider state with OPENSSL_clear_free: no schedule outlives the batch */
	if (c)
		EVP_CIPHER_CTX_reset(c);
	crypt_stack_wipe();
}

const struct crypt_backend crypt_openssl_backend = {
	.name = "openssl",
	.supports = ossl_supports,
	.key_init = ossl_key_init,
	.key_fini = ossl_key_fini,
	.run = ossl_run,
	.thread_cleanup = ossl_thread_cleanup,
};
