/* SPDX-License-Identifier: MIT */
/*
 * Interface between crypt.c and its backends (crypt_openssl.c, crypt_ipsecmb.c).
 *
 * crypt.c owns struct crypt_key (one locked, non-dumpable mapping per key),
 * validates every op and hands each backend only the ops whose key it
 * expanded. The OpenSSL backend keys a per-thread context from k->bytes for
 * each batch, so any backend may pass records it cannot take (ipsec-mb CCM
 * with long AAD or long records) on to crypt_openssl_backend within the same
 * call. Key schedules live only in the key's mapping (k->sched) or, for the
 * length of one batch, in a backend's per-thread state.
 */
#ifndef STOR_CRYPT_BACKEND_H
#define STOR_CRYPT_BACKEND_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "crypt/crypt.h"

/* Room for the largest backend schedule (ipsec-mb struct gcm_key_data). */
#define CRYPT_SCHED_MAX 2048

struct crypt_key {
	enum crypt_suite suite;
	const struct crypt_backend *backend;
	size_t keylen;
	size_t map_len;     /* bytes of the mapping that holds this struct */
	uint8_t bytes[CRYPT_KEY_MAX];
	alignas(64) uint8_t sched[CRYPT_SCHED_MAX]; /* backend-private expanded key */
};

struct crypt_backend {
	const char *name;
	int (*supports)(enum crypt_suite s);
	/* Expand k->bytes into k->sched (or check it can be used). 0 or -errno. */
	int (*key_init)(struct crypt_key *k);
	void (*key_fini)(struct crypt_key *k);
	/*
	 * Seal (@seal != 0) or open @n validated ops whose keys belong to this
	 * backend, setting every op's status; open zeroes the output of a
	 * record that fails.
	 */
	void (*run)(struct crypt_op **ops, size_t n, int seal);
	void (*thread_cleanup)(void);
};

extern const struct crypt_backend crypt_openssl_backend;
#ifdef HAVE_IPSEC_MB
extern const struct crypt_backend crypt_ipsecmb_backend;
/* Jobs the calling thread's IMB_MGR has completed: tests check records took that path. */
uint64_t crypt_ipsecmb_jobs(void);
#endif

/* Whether a suite is CCM (needs the message length before the AAD). */
static inline int crypt_suite_is_ccm(enum crypt_suite s)
{
	return s == CRYPT_AES128_CCM || s == CRYPT_AES192_CCM || s == CRYPT_AES256_CCM;
}

/* Helpers of crypt_openssl.c: only backends include OpenSSL headers. */
int crypt_ct_memcmp(const void *a, const void *b, size_t len);
void crypt_cleanse(void *p, size_t len);
/* Overwrite the stack below the caller's frame, where library calls left block state. */
void crypt_stack_wipe(void);

#endif
