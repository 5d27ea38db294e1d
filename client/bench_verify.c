/* SPDX-License-Identifier: MIT */
/*
 * bench_verify.c owns the data-validation format of coffer bench: the unit
 * header (fixed fields in big-endian, XXH64 over the whole unit with the
 * checksum field zeroed), the pattern after it (xorshift from the header's
 * fields, so a unit from a stale generation differs everywhere) and the
 * journal file of generations. The engine keeps the busy bits so that no two
 * I/Os touch one unit at once; this file never does I/O on datasets.
 *
 * Header: 0 magic "CFBVRFY1" | 8 guid[16] | 24 record u64 | 32 gen u32 |
 *         36 unit u32 | 40 checksum u64 | 48 reserved[16], all zero
 */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "bench_verify.h"

static const char hdr_magic[8] = { 'C', 'F', 'B', 'V', 'R', 'F', 'Y', '1' };
static const char jrnl_magic[8] = { 'C', 'F', 'B', 'J', 'R', 'N', 'L', '1' };

#define OFF_GUID 8
#define OFF_RECORD 24
#define OFF_GEN 32
#define OFF_UNIT 36
#define OFF_CSUM 40

static void put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

int verify_ds_new(const char *name, const uint8_t guid[16], uint32_t unit, uint64_t nunits,
		  struct verify_ds **out)
{
	struct verify_ds *v = NULL;

	*out = NULL;
	if (unit < VERIFY_MIN_UNIT || !nunits || nunits > (1ull << 32))
		return -EINVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->name = strdup(name);
	v->gen = calloc(nunits, sizeof(*v->gen));
	v->busy = calloc(nunits, 1);
	if (!v->name || !v->gen || !v->busy) {
		verify_ds_free(v);
		return -ENOMEM;
	}
	memcpy(v->guid, guid, 16);
	v->unit = unit;
	v->nunits = nunits;
	*out = v;
	return 0;
}

void verify_ds_free(struct verify_ds *v)
{
	if (!v)
		return;
	free(v->name);
	free(v->gen);
	free(v->busy);
	free(v);
}

void verify_guid(const char *name, const char *guid_hex, uint8_t out[16])
{
	size_t n = 0;

	memset(out, 0, 16);
	/* take the hex digits of the daemon's GUID, whatever its dashes */
	for (const char *p = guid_hex; p && *p && n < 32; p++) {
		int d;

		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'F')
			d = *p - 'A' + 10;
		else
			continue;
		out[n / 2] |= (uint8_t)(n % 2 ? d : d << 4);
		n++;
	}
	if (n >= 16)
		return;
	{
		XXH128_hash_t h = XXH3_128bits(name, strlen(name));

		put64(out, h.high64);
		put64(out + 8, h.low64);
	}
}

static uint64_t pattern_seed(const uint8_t guid[16], uint64_t record, uint32_t gen)
{
	uint64_t s = get64(guid) ^ get64(guid + 8) ^ (record * 0x9e3779b97f4a7c15ull) ^
		     ((uint64_t)gen << 32 | gen);

	return s ? s : 0x2545f4914f6cdd1dull;
}

void verify_fill(void *buf, uint32_t unit, const uint8_t guid[16], uint64_t record, uint32_t gen)
{
	uint8_t *b = buf;
	uint64_t x = pattern_seed(guid, record, gen);

	memset(b, 0, VERIFY_HDR_SIZE);
	memcpy(b, hdr_magic, 8);
	memcpy(b + OFF_GUID, guid, 16);
	put64(b + OFF_RECORD, record);
	put32(b + OFF_GEN, gen);
	put32(b + OFF_UNIT, unit);
	for (uint32_t i = VERIFY_HDR_SIZE; i + 8 <= unit; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(b + i, &x, 8);
	}
	put64(b + OFF_CSUM, XXH3_64bits(b, unit));
}

static bool all_zero(const uint8_t *b, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

enum verify_status verify_check(const void *buf, uint32_t unit, const uint8_t guid[16],
				uint64_t record, uint32_t expect, uint32_t *got)
{
	const uint8_t *b = buf;
	uint8_t *copy;
	uint64_t csum, want;
	uint32_t gen;

	*got = 0;
	if (expect == VERIFY_GEN_NONE)
		return VERIFY_UNCHECKED;
	if (memcmp(b, hdr_magic, 8))
		return all_zero(b, unit) ? VERIFY_ZERO : VERIFY_BAD_MAGIC;
	/* the checksum is over the unit with its own field zeroed */
	copy = malloc(unit);
	if (!copy)
		return VERIFY_BAD_CHECKSUM;
	memcpy(copy, b, unit);
	memset(copy + OFF_CSUM, 0, 8);
	csum = XXH3_64bits(copy, unit);
	free(copy);
	want = get64(b + OFF_CSUM);
	if (csum != want || get32(b + OFF_UNIT) != unit)
		return VERIFY_BAD_CHECKSUM;
	gen = get32(b + OFF_GEN);
	if (memcmp(b + OFF_GUID, guid, 16))
		return VERIFY_WRONG_DATASET;
	if (get64(b + OFF_RECORD) != record)
		return VERIFY_WRONG_RECORD;
	*got = gen;
	if (expect == VERIFY_GEN_UNKNOWN || gen == expect)
		return VERIFY_OK;
	return gen < expect ? VERIFY_STALE : VERIFY_FUTURE;
}

const char *verify_status_str(enum verify_status s)
{
	switch (s) {
	case VERIFY_OK: return "ok";
	case VERIFY_UNCHECKED: return "not checked";
	case VERIFY_ZERO: return "zeros where a write was acknowledged (lost write)";
	case VERIFY_BAD_MAGIC: return "no validation header (overwritten or corrupt)";
	case VERIFY_BAD_CHECKSUM: return "checksum mismatch (corrupt data)";
	case VERIFY_WRONG_DATASET: return "data of another dataset";
	case VERIFY_WRONG_RECORD: return "data of another record";
	case VERIFY_STALE: return "stale generation (lost write)";
	case VERIFY_FUTURE: return "generation newer than any acknowledged write";
	}
	return "?";
}

/* ---- journal: magic | u32 version | u32 count | per dataset: u16 namelen, name,
 * guid[16], u32 unit, u64 nunits, nunits x u32 gen | u64 XXH3 of all before ---- */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
};

static int wb_put(struct wbuf *w, const void *d, size_t n)
{
	if (w->len + n > w->cap) {
		size_t cap = (w->cap + n) * 2;
		uint8_t *p = realloc(w->p, cap);

		if (!p)
			return -ENOMEM;
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->len, d, n);
	w->len += n;
	return 0;
}

static int wb_u64(struct wbuf *w, uint64_t v)
{
	uint8_t b[8];

	put64(b, v);
	return wb_put(w, b, 8);
}

static int wb_u32(struct wbuf *w, uint32_t v)
{
	uint8_t b[4];

	put32(b, v);
	return wb_put(w, b, 4);
}

int verify_journal_save(const char *path, struct verify_ds *const *ds, unsigned n)
{
	struct wbuf w = { 0 };
	char *tmp = NULL;
	int fd = -1, ret = 0;
	size_t off = 0;

	ret = wb_put(&w, jrnl_magic, 8);
	ret = ret ? ret : wb_u32(&w, 1);
	ret = ret ? ret : wb_u32(&w, n);
	for (unsigned i = 0; i < n && !ret; i++) {
		size_t nl = strlen(ds[i]->name);
		uint8_t l[2] = { (uint8_t)(nl >> 8), (uint8_t)nl };

		if (nl > 0xffff) {
			ret = -ENAMETOOLONG;
			break;
		}
		ret = wb_put(&w, l, 2);
		ret = ret ? ret : wb_put(&w, ds[i]->name, nl);
		ret = ret ? ret : wb_put(&w, ds[i]->guid, 16);
		ret = ret ? ret : wb_u32(&w, ds[i]->unit);
		ret = ret ? ret : wb_u64(&w, ds[i]->nunits);
		for (uint64_t k = 0; k < ds[i]->nunits && !ret; k++)
			ret = wb_u32(&w, ds[i]->gen[k]);
	}
	ret = ret ? ret : wb_u64(&w, XXH3_64bits(w.p, w.len));
	if (ret)
		goto out;
	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		ret = -ENOMEM;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		goto out;
	}
	while (off < w.len) {
		ssize_t k = write(fd, w.p + off, w.len - off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			ret = -errno;
			goto out;
		}
		off += (size_t)k;
	}
	/* the journal must be as durable as the data it describes */
	if (fsync(fd) < 0 || close(fd) < 0) {
		ret = -errno;
		fd = -1;
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		ret = -errno;
out:
	if (fd >= 0)
		close(fd);
	if (ret && tmp)
		unlink(tmp);
	free(tmp);
	free(w.p);
	return ret;
}

int verify_journal_load(const char *path, struct verify_ds ***out, unsigned *nout)
{
	struct verify_ds **ds = NULL;
	uint8_t *b = NULL;
	size_t len = 0, cap = 0, p = 0;
	unsigned n = 0, got = 0;
	int fd, ret = 0;

	*out = NULL;
	*nout = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t k;

		if (len == cap) {
			uint8_t *nb = realloc(b, cap = cap ? cap * 2 : 65536);

			if (!nb) {
				ret = -ENOMEM;
				goto out;
			}
			b = nb;
		}
		k = read(fd, b + len, cap - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			ret = -errno;
			goto out;
		}
		if (!k)
			break;
		len += (size_t)k;
	}
#define NEED(x)                                 \
	do {                                    \
		if (len - 8 - p < (size_t)(x)) { \
			ret = -EBADMSG;         \
			goto out;               \
		}                               \
	} while (0)
	if (len < 24 || memcmp(b, jrnl_magic, 8) || get32(b + 8) != 1 ||
	    get64(b + len - 8) != XXH3_64bits(b, len - 8)) {
		ret = -EBADMSG;
		goto out;
	}
	n = get32(b + 12);
	p = 16;
	if (n > 1u << 20) {
		ret = -EBADMSG;
		goto out;
	}
	ds = calloc(n ? n : 1, sizeof(*ds));
	if (!ds) {
		ret = -ENOMEM;
		goto out;
	}
	for (got = 0; got < n; got++) {
		char name[65536];
		size_t nl;
		uint32_t unit;
		uint64_t nunits;

		NEED(2);
		nl = (size_t)b[p] << 8 | b[p + 1];
		p += 2;
		NEED(nl + 16 + 12);
		memcpy(name, b + p, nl);
		name[nl] = '\0';
		unit = get32(b + p + nl + 16);
		nunits = get64(b + p + nl + 20);
		if (nunits > (len - p) / 4) {
			ret = -EBADMSG;
			goto out;
		}
		ret = verify_ds_new(name, b + p + nl, unit, nunits, &ds[got]);
		if (ret < 0) {
			ret = ret == -EINVAL ? -EBADMSG : ret;
			goto out;
		}
		p += nl + 28;
		NEED(nunits * 4);
		for (uint64_t k = 0; k < nunits; k++)
			ds[got]->gen[k] = get32(b + p + 4 * k);
		p += nunits * 4;
	}
#undef NEED
	if (p != len - 8)
		ret = -EBADMSG;
out:
	if (fd >= 0)
		close(fd);
	free(b);
	if (ret < 0) {
		for (unsigned i = 0; ds && i <= got && i < n; i++)
			verify_ds_free(ds[i]);
		free(ds);
	} else {
		*out = ds;
		*nout = n;
	}
	return ret;
}
