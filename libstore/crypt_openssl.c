/* SPDX-License-Identifier: MIT */
/*
 * OpenSSL EVP backend for record crypto: every suite, one record at a time.
 * It is the fallback for records another backend cannot take (aes-192-ccm
 * records that are not whole blocks among them) and the portable build's
 * only backend.
 *
 * Each key keeps two EVP_CIPHER_CTX templates (seal, open), created in
 * key_init with the cipher, the 12-byte nonce length, the 16-byte tag length
 * and the expanded key. The first record of a run under one key copies the
 * template into the calling thread's context (EVP_CIPHER_CTX_copy duplicates
 * the provider state, key schedule included: ~55 ns against ~250 ns for a
 * full init with the key); the following records of the run only set their
 * nonce. The templates stay read-only, so any number of threads can share a
 * key. The thread's context is reset after each batch, so no schedule
 * outlives the call that used it.
 *
 * Also the home of the constant-time compare and cleanse that crypt.c and
 * the other backends use, so that only backends include OpenSSL headers.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "crypt.h"
#include "crypt_backend.h"
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
	OPENSSL_cleanse(p, len);
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

static const EVP_CIPHER *suite_cipher(enum crypt_suite s)
{
	switch (s) {
	case CRYPT_AES128_CCM:
		return EVP_aes_128_ccm();
	case CRYPT_AES192_CCM:
		return EVP_aes_192_ccm();
	case CRYPT_AES256_CCM:
		return EVP_aes_256_ccm();
	case CRYPT_AES128_GCM:
		return EVP_aes_128_gcm();
	case CRYPT_AES256_GCM:
		return EVP_aes_256_gcm();
	default:
		return NULL;
	}
}

static int ossl_supports(enum crypt_suite s)
{
	return suite_cipher(s) != NULL;
}

/*
 * One keyed template per direction: OpenSSL's AES-NI CCM picks its bulk
 * routine (encrypt or decrypt blocks) when the key is set, so a template
 * keyed for sealing cannot open.
 */
static int template_new(const struct crypt_key *k, int seal, EVP_CIPHER_CTX **out)
{
	const EVP_CIPHER *c = suite_cipher(k->suite);
	EVP_CIPHER_CTX *t = NULL;
	int ret = -EIO;

	*out = NULL;
	if (!c)
		return -ENOTSUP;
	t = EVP_CIPHER_CTX_new();
	if (!t)
		return -ENOMEM;
	if (!EVP_CipherInit_ex(t, c, NULL, NULL, NULL, seal))
		goto out;
	if (!EVP_CIPHER_CTX_ctrl(t, EVP_CTRL_AEAD_SET_IVLEN, CRYPT_NONCE_LEN, NULL))
		goto out;
	/* CCM fixes the tag length before the key; GCM takes it at the end. */
	if (crypt_suite_is_ccm(k->suite) &&
	    !EVP_CIPHER_CTX_ctrl(t, EVP_CTRL_AEAD_SET_TAG, CRYPT_TAG_LEN, NULL))
		goto out;
	if (!EVP_CipherInit_ex(t, NULL, NULL, k->bytes, NULL, seal))
		goto out;
	*out = t;
	t = NULL;
	ret = 0;
out:
	EVP_CIPHER_CTX_free(t);
	return ret;
}

static void ossl_key_fini(struct crypt_key *k)
{
	/* EVP_CIPHER_CTX_free cleanses the provider state, key schedule included. */
	for (int i = 0; i < 2; i++) {
		EVP_CIPHER_CTX_free(k->ossl[i]);
		k->ossl[i] = NULL;
	}
}

static int ossl_key_init(struct crypt_key *k)
{
	EVP_CIPHER_CTX *t[2] = { NULL, NULL };
	int ret;

	for (int i = 0; i < 2; i++) {
		ret = template_new(k, i, &t[i]);
		if (ret < 0)
			goto out;
	}
	k->ossl[0] = t[0];
	k->ossl[1] = t[1];
	t[0] = t[1] = NULL;
out:
	EVP_CIPHER_CTX_free(t[0]);
	EVP_CIPHER_CTX_free(t[1]);
	return ret;
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
	int len = (int)op->len, l;

	if (!keyed && !EVP_CIPHER_CTX_copy(c, k->ossl[seal]))
		return -EIO;
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
	if (c)
		EVP_CIPHER_CTX_reset(c);
}

const struct crypt_backend crypt_openssl_backend = {
	.name = "openssl",
	.supports = ossl_supports,
	.key_init = ossl_key_init,
	.key_fini = ossl_key_fini,
	.run = ossl_run,
	.thread_cleanup = ossl_thread_cleanup,
};
