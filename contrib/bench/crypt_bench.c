/* SPDX-License-Identifier: MIT */
/*
 * crypt_bench: nanoseconds per record to seal and to open with each suite
 * and backend at batch sizes 1, 2, 4, 8, 16 and 64, beside a clear copy (memcpy)
 * and an xxh3-128 checksum of the same record. One thread, 24-byte AAD (the
 * engine's), records rotated over a 64-record working set. Each cell is the
 * best of three runs, so a neighbour's burst on a shared machine shows less.
 *
 * With a working set of MiB, the inputs (the clear records a seal reads, the
 * sealed ones an open reads) rotate over that much memory, in a random
 * order, while the outputs stay in the 64 records: a daemon's random reads
 * take records from LUN pages that have left the caches (and the TLB: no
 * record follows the one before in memory, for the prefetcher to have
 * fetched; each starts a page, as on a LUN, so it spans two pages, not
 * three) and write them to reply buffers it reuses, so
 * `crypt_bench 8192 0.3 256` is the cipher's cost as the daemon's reads pay
 * it, and the xxh3 row what a clear read pays for its checksum.
 *
 * The last row is the floor under every CCM row: the AES unit's own rate,
 * block-rounds a nanosecond with eight independent chains of the widest
 * AES instruction the CPU has (VAESENC on 512-bit registers, else AES-NI),
 * and what a record's two passes (CTR and CBC-MAC: two block encryptions
 * per 16 bytes) cost at that rate for 10, 12 and 14 rounds. No
 * implementation opens a CCM record faster on this CPU. Run without a
 * working set (`crypt_bench 8192 0.3 1`) the rows above are in cache, and
 * their distance to this row is the implementation's; with one, the rest
 * is the memory's.
 *
 * Usage: crypt_bench [record-bytes (default 8192)] [seconds per cell (default 0.3)]
 *        [working-set MiB (default: 64 records)] [suite (default: all)]
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define AES_PEAK 1
#endif

#include "crypt/crypt.h"

#define NREC 64 /* the outputs, and the inputs unless a working set is given */

static const size_t batches[] = { 1, 2, 4, 8, 16, 64 };
#define NBATCH (sizeof(batches) / sizeof(batches[0]))

static size_t rec_len = 8192;
static double cell_secs = 0.3;
static size_t nin = NREC;         /* inputs rotated over */
static uint8_t **pt, **ct, *back[NREC];
static uint8_t (*nonce)[CRYPT_NONCE_LEN], (*tag)[CRYPT_TAG_LEN], (*aad)[24];

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		*s = *s * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(*s >> 56);
	}
}

/* ns per record for seal (@seal) or open of batches of @batch records with key @k. */
static double run_once(struct crypt_key *k, size_t batch, int seal)
{
	struct crypt_op *ops = calloc(nin, sizeof(*ops));
	size_t done = 0, at = 0;
	double t0, t1;

	if (!ops)
		exit(1);
	for (size_t i = 0; i < nin; i++)
		ops[i] = (struct crypt_op){ .key = k, .nonce = nonce[i], .aad = aad[i],
					    .aad_len = sizeof(aad[i]), .in = pt[i], .out = ct[i],
					    .len = rec_len, .tag = tag[i] };
	for (size_t i = 0; i < nin; i += NREC)
		if (crypt_seal(ops + i, nin - i < NREC ? nin - i : NREC)) {
			fprintf(stderr, "crypt_bench: seal failed\n");
			exit(1);
		}
	/* the inputs rotate over nin, the outputs over NREC */
	for (size_t i = 0; i < nin; i++) {
		if (!seal)
			ops[i].in = ct[i];
		ops[i].out = back[i % NREC];
	}
	t0 = now();
	do {
		for (int rep = 0; rep < 64; rep++) {
			int bad = seal ? crypt_seal(ops + at, batch) : crypt_open(ops + at, batch);

			if (bad) {
				fprintf(stderr, "crypt_bench: %s failed\n", seal ? "seal" : "open");
				exit(1);
			}
			done += batch;
			at += batch;
			if (at + batch > nin)
				at = 0;
		}
		t1 = now();
	} while (t1 - t0 < cell_secs / 3);
	free(ops);
	return (t1 - t0) / (double)done * 1e9;
}

static double run(struct crypt_key *k, size_t batch, int seal)
{
	double best = run_once(k, batch, seal);

	for (int i = 1; i < 3; i++) {
		double t = run_once(k, batch, seal);

		if (t < best)
			best = t;
	}
	return best;
}

static double run_plain_once(int hash)
{
	size_t done = 0;
	uint64_t sink = 0;
	double t0, t1;

	t0 = now();
	do {
		for (int rep = 0; rep < 256; rep++) {
			size_t i = done++ % nin;

			if (hash) {
				XXH128_hash_t h = XXH3_128bits(pt[i], rec_len);

				sink += h.low64;
			} else {
				memcpy(back[i % NREC], pt[i], rec_len);
				sink += back[i % NREC][rec_len / 2];
			}
		}
		t1 = now();
	} while (t1 - t0 < cell_secs / 3);
	if (sink == 42)
		putchar(' '); /* keep the work observable */
	return (t1 - t0) / (double)done * 1e9;
}

static double run_plain(int hash)
{
	double best = run_plain_once(hash);

	for (int i = 1; i < 3; i++) {
		double t = run_plain_once(hash);

		if (t < best)
			best = t;
	}
	return best;
}

#ifdef AES_PEAK
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define TURNS 4096

/*
 * Eight chains' state between bursts: in memory, so that their work stays
 * observable; a burst keeps them in registers, named, for TURNS turns.
 */
static _Alignas(64) uint8_t chains[8][64];

/* TURNS turns of eight chains of 512-bit VAESENC (four blocks each). */
__attribute__((target("avx512f,vaes"))) static void vaes_burst(void)
{
#define LOAD(i) __m512i a##i = _mm512_load_si512(chains[i]);
#define STEP(i) a##i = _mm512_aesenc_epi128(a##i, k);
#define STORE(i) _mm512_store_si512(chains[i], a##i);
	__m512i k = _mm512_set1_epi32(0x5a5a5a5a);
	CHAINS(LOAD)
	for (int t = 0; t < TURNS; t++) {
		CHAINS(STEP)
	}
	CHAINS(STORE)
#undef LOAD
#undef STEP
#undef STORE
}

/* The same with 128-bit AES-NI (one block each). */
__attribute__((target("aes,sse2"))) static void aesni_burst(void)
{
#define LOAD(i) __m128i a##i = _mm_load_si128((const __m128i *)chains[i]);
#define STEP(i) a##i = _mm_aesenc_si128(a##i, k);
#define STORE(i) _mm_store_si128((__m128i *)chains[i], a##i);
	__m128i k = _mm_set1_epi32(0x5a5a5a5a);
	CHAINS(LOAD)
	for (int t = 0; t < TURNS; t++) {
		CHAINS(STEP)
	}
	CHAINS(STORE)
#undef LOAD
#undef STEP
#undef STORE
}

/* Block-rounds a nanosecond of @burst, whose instruction does @blocks at once. */
static double chains_rate(void (*burst)(void), int blocks)
{
	size_t done = 0;
	double t0 = now(), t1;

	do {
		burst();
		done += TURNS;
		t1 = now();
	} while (t1 - t0 < cell_secs);
	return (double)done * 8 * blocks / ((t1 - t0) * 1e9);
}

/* The AES unit's floor under a CCM record of each key size. */
static void aes_floor(void)
{
	unsigned a, b, c, d;
	int wide;
	double rate, blocks = 2.0 * (double)((rec_len + 15) / 16);

	/* VAES is leaf 7's ECX bit 9; avx512f's check covers the OS's state saving */
	__builtin_cpu_init();
	wide = __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
	       (c >> 9 & 1);
	if (!wide && !__builtin_cpu_supports("aes"))
		return;
	memset(chains, 0x5a, sizeof(chains));
	rate = wide ? chains_rate(vaes_burst, 4) : chains_rate(aesni_burst, 1);
	printf("%-12s %-9s %9.1f block-rounds/ns (%s); a CCM record at that rate: "
	       "%.0f ns (10 rounds), %.0f (12), %.0f (14)\n",
	       "aes-unit", "-", rate, wide ? "vaesenc zmm" : "aesenc xmm", blocks * 10 / rate,
	       blocks * 12 / rate, blocks * 14 / rate);
}
#else
static void aes_floor(void)
{
}
#endif

int main(int argc, char **argv)
{
	static const char *const backends[] = { "ipsec-mb", "openssl" };
	uint64_t seed = 1;
	uint8_t key[CRYPT_KEY_MAX];

	if (argc > 1)
		rec_len = strtoul(argv[1], NULL, 0);
	if (argc > 2)
		cell_secs = strtod(argv[2], NULL);
	if (argc > 3)
		nin = strtoul(argv[3], NULL, 0) * 1024 * 1024 / (2 * (rec_len ? rec_len : 1));
	if (rec_len == 0 || rec_len > CRYPT_LEN_MAX || cell_secs <= 0 || nin < NREC) {
		fprintf(stderr, "usage: crypt_bench [record-bytes] [seconds-per-cell] "
				"[working-set-MiB, at least 64 records] [suite]\n");
		return 2;
	}
	pt = calloc(nin, sizeof(*pt));
	ct = calloc(nin, sizeof(*ct));
	nonce = calloc(nin, sizeof(*nonce));
	tag = calloc(nin, sizeof(*tag));
	aad = calloc(nin, sizeof(*aad));
	if (!pt || !ct || !nonce || !tag || !aad)
		return 1;
	for (size_t i = 0; i < nin; i++) {
		pt[i] = aligned_alloc(4096, (rec_len + 4095) / 4096 * 4096);
		ct[i] = aligned_alloc(4096, (rec_len + 4095) / 4096 * 4096);
		if (!pt[i] || !ct[i])
			return 1;
		fill(pt[i], rec_len, &seed);
		fill(nonce[i], CRYPT_NONCE_LEN, &seed);
		fill(aad[i], sizeof(aad[i]), &seed);
	}
	for (size_t i = 0; i < NREC; i++)
		if (!(back[i] = malloc(rec_len)))
			return 1;
	/* a working set is taken in a random order (Fisher-Yates over the records) */
	for (size_t i = nin - 1; argc > 3 && i > 0; i--) {
		size_t j;
		uint8_t *t;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		j = (size_t)(seed >> 33) % (i + 1);
		t = pt[i];
		pt[i] = pt[j];
		pt[j] = t;
		t = ct[i];
		ct[i] = ct[j];
		ct[j] = t;
	}
	fill(key, sizeof(key), &seed);

	printf("%zu-byte records, ns per record, one thread, 24-byte AAD, inputs over %zu records "
	       "(%.1f MiB), outputs over %d\n",
	       rec_len, nin, (double)nin * 2 * (double)rec_len / (1024 * 1024), NREC);
	printf("%-12s %-9s", "suite", "backend");
	for (size_t b = 0; b < NBATCH; b++)
		printf(" %7s%-2zu", "seal@", batches[b]);
	for (size_t b = 0; b < NBATCH; b++)
		printf(" %7s%-2zu", "open@", batches[b]);
	printf("\n");
	for (int s = 1; s < CRYPT_NSUITES; s++) {
		if (argc > 4 && strcmp(argv[4], crypt_suite_name(s)))
			continue;
		for (size_t bi = 0; bi < sizeof(backends) / sizeof(backends[0]); bi++) {
			const struct crypt_backend *be = crypt_backend_by_name(backends[bi]);
			struct crypt_key *k = NULL;

			if (!be || !crypt_backend_supports(be, s))
				continue;
			if (crypt_key_new(s, key, crypt_suite_keylen(s), be, &k)) {
				fprintf(stderr, "crypt_bench: key for %s on %s failed\n",
					crypt_suite_name(s), backends[bi]);
				return 1;
			}
			printf("%-12s %-9s", crypt_suite_name(s), backends[bi]);
			for (int seal = 1; seal >= 0; seal--)
				for (size_t b = 0; b < NBATCH; b++)
					printf(" %9.0f", run(k, batches[b], seal));
			printf("\n");
			fflush(stdout);
			crypt_key_free(k);
		}
	}
	printf("%-12s %-9s %9.0f\n", "memcpy", "-", run_plain(0));
	printf("%-12s %-9s %9.0f\n", "xxh3-128", "-", run_plain(1));
	aes_floor();
	crypt_thread_cleanup();
	for (size_t i = 0; i < nin; i++) {
		free(pt[i]);
		free(ct[i]);
	}
	for (size_t i = 0; i < NREC; i++)
		free(back[i]);
	free(pt);
	free(ct);
	free(nonce);
	free(tag);
	free(aad);
	return 0;
}
