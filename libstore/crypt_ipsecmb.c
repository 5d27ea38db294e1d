/* SPDX-License-Identifier: MIT */
/*
 * intel-ipsec-mb backend for record crypto: aes-128/256-ccm and
 * aes-128/256-gcm through the multi-buffer job API.
 *
 * A batch becomes a stream of jobs submitted to the calling thread's
 * IMB_MGR; the manager runs the CBC-MAC chains of up to a lane-width of CCM
 * records side by side and hands jobs back in submission order, and a final
 * flush drains the lanes. Key schedules (IMB_AES_KEYEXP_* for CCM,
 * IMB_AES*_GCM_PRE for GCM) are expanded once, in the key's locked mapping.
 *
 * Every completed job's status is checked. Open computes the tag into a
 * scratch slot and compares it in constant time; a mismatch zeroes the
 * output. Records the library refuses by design are handed to the OpenSSL
 * backend in the same call instead: CCM with AAD over 46 bytes or a message
 * over 65534 bytes (limits of intel-ipsec-mb 1.3, checked in the tests),
 * and a CCM record that would run alone in its lanes (OpenSSL is faster).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <string.h>

#include <intel-ipsec-mb.h>

#include "crypt.h"
#include "crypt_backend.h"
#include "store.h"

/* intel-ipsec-mb 1.3 rejects CCM jobs beyond these (IMB_ERR_JOB_AAD_LEN, _CIPH_LEN). */
#define IMB_CCM_AAD_MAX 46
#define IMB_CCM_LEN_MAX 65534

/* Jobs in flight per chunk; the scratch tags for open live on the stack. */
#define CHUNK 128

union imb_sched {
	struct {
		alignas(16) uint32_t enc[4 * 15];
		alignas(16) uint32_t dec[4 * 15]; /* unused by CCM, written by KEYEXP */
	} aes;
	alignas(64) struct gcm_key_data gcm;
};

_Static_assert(sizeof(union imb_sched) <= CRYPT_SCHED_MAX, "CRYPT_SCHED_MAX too small");
_Static_assert(alignof(union imb_sched) <= 64, "key schedule alignment");

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static _Thread_local IMB_MGR *tls_mgr;
static _Thread_local uint64_t tls_jobs;

uint64_t crypt_ipsecmb_jobs(void)
{
	return tls_jobs;
}

static void tls_destroy(void *p)
{
	free_mb_mgr(p);
}

static void tls_init(void)
{
	(void)pthread_key_create(&tls_key, tls_destroy);
}

static IMB_MGR *thread_mgr(void)
{
	IMB_MGR *m;

	if (tls_mgr)
		return tls_mgr;
	pthread_once(&tls_once, tls_init);
	m = alloc_mb_mgr(0);
	if (!m)
		return NULL;
	init_mb_mgr_auto(m, NULL);
	if (imb_get_errno(m)) {
		free_mb_mgr(m);
		return NULL;
	}
	tls_mgr = m;
	(void)pthread_setspecific(tls_key, m);
	return m;
}

static void imb_thread_cleanup(void)
{
	if (!tls_mgr)
		return;
	pthread_once(&tls_once, tls_init);
	(void)pthread_setspecific(tls_key, NULL);
	free_mb_mgr(tls_mgr);
	tls_mgr = NULL;
}

static int imb_supports(enum crypt_suite s)
{
	return s == CRYPT_AES128_CCM || s == CRYPT_AES256_CCM || s == CRYPT_AES128_GCM ||
	       s == CRYPT_AES256_GCM;
}

static int imb_key_init(struct crypt_key *k)
{
	union imb_sched *ks = (union imb_sched *)k->sched;
	IMB_MGR *m = thread_mgr();

	if (!m)
		return -ENOMEM;
	switch (k->suite) {
	case CRYPT_AES128_CCM:
		IMB_AES_KEYEXP_128(m, k->bytes, ks->aes.enc, ks->aes.dec);
		break;
	case CRYPT_AES256_CCM:
		IMB_AES_KEYEXP_256(m, k->bytes, ks->aes.enc, ks->aes.dec);
		break;
	case CRYPT_AES128_GCM:
		IMB_AES128_GCM_PRE(m, k->bytes, &ks->gcm);
		break;
	case CRYPT_AES256_GCM:
		IMB_AES256_GCM_PRE(m, k->bytes, &ks->gcm);
		break;
	default:
		return -ENOTSUP;
	}
	return imb_get_errno(m) ? -EIO : 0;
}

static void imb_key_fini(struct crypt_key *k)
{
	/* The schedule is cleansed with the whole mapping by crypt.c. */
	(void)k;
}

/* 0 (GCM), 1 (aes-128-ccm) or 2 (aes-256-ccm): CCM key sizes run in separate lane sets. */
static int ccm_lanes(const struct crypt_op *op)
{
	if (!crypt_suite_is_ccm(op->key->suite))
		return 0;
	return op->key->keylen == 16 ? 1 : 2;
}

static int job_fits(const struct crypt_op *op)
{
	if (!ccm_lanes(op))
		return 1;
	return op->aad_len <= IMB_CCM_AAD_MAX && op->len <= IMB_CCM_LEN_MAX;
}

static void job_fill(IMB_JOB *j, struct crypt_op *op, uint8_t *tag, int seal)
{
	static uint8_t dummy[16];
	const struct crypt_key *k = op->key;
	const union imb_sched *ks = (const union imb_sched *)k->sched;
	int ccm = crypt_suite_is_ccm(k->suite);

	j->cipher_direction = seal ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
	/* CCM MACs the plaintext: before encrypting, after decrypting. GCM the reverse. */
	if (ccm)
		j->chain_order = seal ? IMB_ORDER_HASH_CIPHER : IMB_ORDER_CIPHER_HASH;
	else
		j->chain_order = seal ? IMB_ORDER_CIPHER_HASH : IMB_ORDER_HASH_CIPHER;
	j->cipher_mode = ccm ? IMB_CIPHER_CCM : IMB_CIPHER_GCM;
	j->hash_alg = ccm ? IMB_AUTH_AES_CCM : IMB_AUTH_AES_GMAC;
	j->enc_keys = ccm ? (const void *)ks->aes.enc : (const void *)&ks->gcm;
	j->dec_keys = j->enc_keys;
	j->key_len_in_bytes = k->keylen;
	/* The library checks src/dst for NULL even when the length is 0. */
	j->src = op->len ? op->in : dummy;
	j->dst = op->len ? op->out : dummy;
	j->cipher_start_src_offset_in_bytes = 0;
	j->msg_len_to_cipher_in_bytes = op->len;
	j->hash_start_src_offset_in_bytes = 0;
	j->msg_len_to_hash_in_bytes = op->len;
	j->iv = op->nonce;
	j->iv_len_in_bytes = CRYPT_NONCE_LEN;
	if (ccm) {
		j->u.CCM.aad = op->aad_len ? (const void *)op->aad : (const void *)dummy;
		j->u.CCM.aad_len_in_bytes = op->aad_len;
	} else {
		j->u.GCM.aad = op->aad_len ? (const void *)op->aad : (const void *)dummy;
		j->u.GCM.aad_len_in_bytes = op->aad_len;
	}
	j->auth_tag_output = seal ? op->tag : tag;
	j->auth_tag_output_len_in_bytes = CRYPT_TAG_LEN;
	j->user_data = op;
	j->user_data2 = tag;
}

static void job_done(const IMB_JOB *j, int seal)
{
	struct crypt_op *op = j->user_data;

	tls_jobs++;
	if (j->status != IMB_STATUS_COMPLETED)
		op->status = j->status == IMB_STATUS_INVALID_ARGS ? -EINVAL : -EIO;
	else if (!seal && crypt_ct_memcmp(j->user_data2, op->tag, CRYPT_TAG_LEN))
		op->status = STOR_EAUTH;
	else
		op->status = 0;
	if (op->status && op->len)
		memset(op->out, 0, op->len);
	if (op->status && seal)
		memset(op->tag, 0, CRYPT_TAG_LEN);
}

/* One record the manager could not take or did not return: fail it cleanly. */
static void op_fail(struct crypt_op *op, int err, int seal)
{
	op->status = err;
	if (op->len)
		memset(op->out, 0, op->len);
	if (seal)
		memset(op->tag, 0, CRYPT_TAG_LEN);
}

static void imb_run(struct crypt_op **ops, size_t n, int seal)
{
	uint8_t tags[CHUNK][CRYPT_TAG_LEN];
	struct crypt_op *rest[CHUNK];
	IMB_MGR *m = thread_mgr();

	if (!m) {
		/* No manager (out of memory): OpenSSL can still do every record. */
		crypt_openssl_backend.run(ops, n, seal);
		return;
	}
	for (size_t base = 0; base < n; base += CHUNK) {
		size_t end = n - base < CHUNK ? n : base + CHUNK, nrest = 0;
		size_t lanes[3] = { 0, 0, 0 };
		IMB_JOB *j;

		/*
		 * A CCM record alone in its lane set is flushed by itself, which
		 * measures slower than OpenSSL (7.2 vs 5.0 us per 8 KiB record);
		 * from two records on the lanes win, so only lone ones move.
		 */
		for (size_t i = base; i < end; i++)
			if (job_fits(ops[i]))
				lanes[ccm_lanes(ops[i])]++;
		for (size_t i = base; i < end; i++) {
			struct crypt_op *op = ops[i];
			int l = ccm_lanes(op);

			if (!job_fits(op) || (l && lanes[l] == 1)) {
				rest[nrest++] = op;
				continue;
			}
			/* Pending until the manager hands the job back. */
			op->status = 1;
			j = IMB_GET_NEXT_JOB(m);
			job_fill(j, op, tags[i - base], seal);
			j = IMB_SUBMIT_JOB(m);
			while (j) {
				job_done(j, seal);
				j = IMB_GET_COMPLETED_JOB(m);
			}
		}
		while ((j = IMB_FLUSH_JOB(m)))
			job_done(j, seal);
		for (size_t i = base; i < end; i++)
			if (ops[i]->status == 1)
				op_fail(ops[i], -EIO, seal);
		if (nrest)
			crypt_openssl_backend.run(rest, nrest, seal);
	}
}

const struct crypt_backend crypt_ipsecmb_backend = {
	.name = "ipsec-mb",
	.supports = imb_supports,
	.key_init = imb_key_init,
	.key_fini = imb_key_fini,
	.run = imb_run,
	.thread_cleanup = imb_thread_cleanup,
};
