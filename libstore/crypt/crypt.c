/* SPDX-License-Identifier: MIT */
/*
 * Record crypto: the suite table, the nonce scheme, data keys and the batch
 * seal/open entry points.
 *
 * Owns: struct crypt_key (one page-aligned mapping per key from
 * keys_secure_alloc(): mlock'ed where the limit allows, MADV_DONTDUMP and
 * MADV_WIPEONFORK, cleansed on free), the validation of every crypt_op, and
 * the split of a batch by backend so that each backend sees all of its
 * records at once. This file never includes a crypto library header.
 *
 * Where key schedules live: no long-lived key material is kept outside the
 * key mappings and the backends' locked per-thread state. ipsec-mb expands
 * its schedules once into k->sched, inside the mapping, and its per-thread
 * manager (which copies round keys and CBC-MAC state into its lanes) is a
 * locked, no-dump mapping of its own. OpenSSL would keep a schedule in
 * ordinary heap for as long as a context lives, so it keeps none per key:
 * each batch keys a per-thread context from k->bytes and resets it (which
 * cleanses the schedule) before returning. That costs one full key init per
 * run of records under one key instead of a template copy (~0.2 us, see
 * crypt_openssl.c), a price per batch, not per record; libcrypto offers no
 * way to put a cipher context's provider state in the secure heap.
 *
 * Invariants: a key is immutable after crypt_key_new() returns, so any
 * number of threads may use it; all mutable state is per thread inside the
 * backends. An op whose status is not 0 after crypt_open() has an all-zero
 * output.
 *
 * Nonce scheme and bound
 * ----------------------
 * Records are sealed in nonce blocks. A block is drawn in memory, never
 * read back from metadata, the first time a dataset seals a record after
 * its key is loaded and whenever the previous block is used up: a random
 * 64-bit key salt and a random 32-bit nonce prefix. The block's data key
 * is HKDF(master key, dataset GUID, suite, key salt) (keys.c), the nonce of
 * its n-th record is prefix || n as 8 big-endian bytes (crypt_nonce()), and
 * the salt is stored in every block pointer so a read finds the key.
 *
 * Why random and not a persisted counter: a counter is only as fresh as the
 * metadata that holds it, and metadata goes backwards (a VM snapshot
 * reverted, state_dir restored from a backup, a copy of a pool imported, a
 * rollback), which would hand out the same (key, nonce) pairs again; with
 * GCM a repeat also gives away the authentication key. A block drawn by
 * each running key state cannot be replayed by restoring anything.
 *
 * Bound: inside a block the counter never repeats, and the engine draws a
 * new block before CRYPT_BLOCK_RECORDS = 2^32 records, so one data key
 * seals at most 2^32 records: SP 800-38D §8.3's invocation limit for GCM
 * holds under any reading of the construction. Two blocks of a dataset
 * share a (key, nonce) pair only if they drew the same 64-bit salt and the
 * same 32-bit prefix: for B blocks over the dataset's life that has
 * probability at most B^2 / 2^97 (B = 2^24 key loads or 2^56 records gives
 * 2^-49). SP 800-38C (CCM) sets no count of its own: its security rests on
 * AES staying indistinguishable from a random permutation, i.e. on the
 * blocks enciphered under one key staying far below the 2^64 birthday
 * bound. A record of up to 2^20 bytes (STOR_RECSIZE_MAX) costs about 2^17
 * AES calls (CBC-MAC plus CTR), so 2^32 records are q = 2^49 calls:
 * q^2 / 2^129 = 2^-31 distinguishing advantage. GCM's per-record limit
 * (2^39 - 256 bits) is far above CRYPT_LEN_MAX.
 *
 * The checkable form of the invariant is stor_pool_verify() (verify.c): it
 * walks a pool's block pointers and reports any (dataset, key salt, nonce)
 * seen twice.
 */

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "crypt/crypt.h"
#include "crypt/crypt_backend.h"
#include "crypt/keys.h"
#include "store.h"

struct suite_info {
	const char *name;
	size_t keylen;
};

static const struct suite_info suites[CRYPT_NSUITES] = {
	[CRYPT_OFF] = { "off", 0 },
	[CRYPT_AES128_CCM] = { "aes-128-ccm", 16 },
	[CRYPT_AES192_CCM] = { "aes-192-ccm", 24 },
	[CRYPT_AES256_CCM] = { "aes-256-ccm", 32 },
	[CRYPT_AES128_GCM] = { "aes-128-gcm", 16 },
	[CRYPT_AES256_GCM] = { "aes-256-gcm", 32 },
};

/* Preference order: the first backend that supports a suite expands its keys. */
static const struct crypt_backend *const backends[] = {
#ifdef HAVE_IPSEC_MB
	&crypt_ipsecmb_backend,
#endif
	&crypt_openssl_backend,
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

/* Ops are dispatched in slices of this many, so the per-backend lists fit on the stack. */
#define SLICE 256

const char *crypt_suite_name(enum crypt_suite s)
{
	if ((unsigned)s >= CRYPT_NSUITES)
		return NULL;
	return suites[s].name;
}

size_t crypt_suite_keylen(enum crypt_suite s)
{
	if ((unsigned)s >= CRYPT_NSUITES)
		return 0;
	return suites[s].keylen;
}

int crypt_suite_parse(const char *name)
{
	if (!name)
		return -1;
	if (strcmp(name, "on") == 0)
		return CRYPT_AES256_CCM;
	for (int s = 0; s < CRYPT_NSUITES; s++)
		if (strcmp(name, suites[s].name) == 0)
			return s;
	return -1;
}

const struct crypt_backend *crypt_backend_by_name(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < NBACKENDS; i++)
		if (strcmp(name, backends[i]->name) == 0)
			return backends[i];
	return NULL;
}

const char *crypt_backend_name(const struct crypt_backend *b)
{
	return b ? b->name : NULL;
}

int crypt_backend_supports(const struct crypt_backend *b, enum crypt_suite s)
{
	if (!b || s <= CRYPT_OFF || s >= CRYPT_NSUITES)
		return 0;
	return b->supports(s);
}

void crypt_nonce(uint32_t prefix, uint64_t counter, uint8_t nonce[CRYPT_NONCE_LEN])
{
	for (int i = 0; i < 4; i++)
		nonce[i] = (uint8_t)(prefix >> (24 - 8 * i));
	for (int i = 0; i < 8; i++)
		nonce[4 + i] = (uint8_t)(counter >> (56 - 8 * i));
}

static void key_unmap(struct crypt_key *k)
{
	/* cleanses every page, schedules included, then unlocks and unmaps */
	keys_secure_free(k, k->map_len);
}

int crypt_key_new(enum crypt_suite s, const uint8_t *key, size_t keylen,
		  const struct crypt_backend *b, struct crypt_key **out)
{
	struct crypt_key *k = NULL;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t map_len = (sizeof(*k) + page - 1) & ~(page - 1);
	void *p;
	int ret;

	*out = NULL;
	if (s <= CRYPT_OFF || s >= CRYPT_NSUITES || !key || keylen != suites[s].keylen)
		return -EINVAL;
	if (b && !b->supports(s))
		return -ENOTSUP;
	for (size_t i = 0; !b && i < NBACKENDS; i++)
		if (backends[i]->supports(s))
			b = backends[i];
	if (!b)
		return -ENOTSUP;

	/*
	 * A mapping of its own, so the lock and the no-dump and wipe-on-fork
	 * advice cover the key and its schedules and nothing else. mlock may
	 * be refused (RLIMIT_MEMLOCK); the key still works, it just may be
	 * swapped, and stor_key_pages_unlocked() counts it.
	 */
	p = keys_secure_alloc(map_len);
	if (!p)
		return -ENOMEM;
	k = p;
	k->map_len = map_len;
	k->suite = s;
	k->backend = b;
	k->keylen = keylen;
	memcpy(k->bytes, key, keylen);

	/* Every key can fall back to OpenSSL for any record. */
	ret = crypt_openssl_backend.key_init(k);
	if (ret < 0)
		goto out;
	if (b != &crypt_openssl_backend) {
		ret = b->key_init(k);
		if (ret < 0)
			goto out;
	}
out:
	if (ret < 0) {
		crypt_openssl_backend.key_fini(k);
		key_unmap(k);
	} else {
		*out = k;
	}
	return ret;
}

void crypt_key_free(struct crypt_key *k)
{
	if (!k)
		return;
	if (k->backend != &crypt_openssl_backend)
		k->backend->key_fini(k);
	crypt_openssl_backend.key_fini(k);
	key_unmap(k);
}

enum crypt_suite crypt_key_suite(const struct crypt_key *k)
{
	return k ? k->suite : CRYPT_OFF;
}

static int op_valid(const struct crypt_op *op)
{
	const struct crypt_key *k = op->key;

	if (!k || k->suite <= CRYPT_OFF || k->suite >= CRYPT_NSUITES)
		return 0;
	if (!op->nonce || !op->tag || (op->aad_len && !op->aad))
		return 0;
	if (op->len > CRYPT_LEN_MAX || (op->len && (!op->in || !op->out)))
		return 0;
	/* In place or apart: a partial overlap would read bytes already written. */
	if (op->len && op->in != op->out && op->in < op->out + op->len &&
	    op->out < op->in + op->len)
		return 0;
	return 1;
}

/* stor_crypt_bursts(): [seal][bucket], relaxed (a statistic) */
static atomic_ullong bursts[2][STOR_BURST_BUCKETS];

static void count_burst(size_t n, int seal)
{
	unsigned b = 0;

	while (b + 1 < STOR_BURST_BUCKETS && n >> (b + 1))
		b++;
	atomic_fetch_add_explicit(&bursts[seal][b], 1, memory_order_relaxed);
}

void stor_crypt_bursts(struct stor_crypt_bursts *out)
{
	for (unsigned b = 0; b < STOR_BURST_BUCKETS; b++) {
		out->open[b] = atomic_load_explicit(&bursts[0][b], memory_order_relaxed);
		out->seal[b] = atomic_load_explicit(&bursts[1][b], memory_order_relaxed);
	}
}

static int run_batch(struct crypt_op *ops, size_t n, int seal)
{
	struct crypt_op *lists[NBACKENDS][SLICE];
	size_t counts[NBACKENDS];
	int failed = 0;

	for (size_t base = 0; base < n; base += SLICE) {
		size_t end = n - base < SLICE ? n : base + SLICE;

		memset(counts, 0, sizeof(counts));
		for (size_t i = base; i < end; i++) {
			struct crypt_op *op = &ops[i];
			size_t b;

			if (!op_valid(op)) {
				op->status = -EINVAL;
				if (!seal && op->out && op->len)
					memset(op->out, 0, op->len);
				continue;
			}
			op->status = 0;
			/* The last backend (OpenSSL) takes anything unmatched. */
			for (b = 0; b + 1 < NBACKENDS && op->key->backend != backends[b]; b++)
				;
			lists[b][counts[b]++] = op;
		}
		for (size_t b = 0; b < NBACKENDS; b++) {
			if (!counts[b])
				continue;
			count_burst(counts[b], seal);
			backends[b]->run(lists[b], counts[b], seal);
		}
		for (size_t i = base; i < end; i++)
			failed += ops[i].status != 0;
	}
	return failed;
}

int crypt_seal(struct crypt_op *ops, size_t n)
{
	return run_batch(ops, n, 1);
}

int crypt_open(struct crypt_op *ops, size_t n)
{
	return run_batch(ops, n, 0);
}

void crypt_thread_cleanup(void)
{
	for (size_t i = 0; i < NBACKENDS; i++)
		backends[i]->thread_cleanup();
}
