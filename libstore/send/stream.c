/* SPDX-License-Identifier: MIT */
/*
 * The send stream's codec and the checks every decoded field passes before
 * anyone uses it (stream.h has the format). Pure functions on bytes: the
 * fuzz harness calls them as the receiver does.
 */
#include <errno.h>
#include <string.h>

#include "base/pool_error.h"
#include "crypt/crypt.h"
#include "crypt/hash.h"
#include "pool_impl.h"
#include "send/stream.h"
#include "store.h"

static_assert(STREAM_WRAPPED_LEN == KEYS_WRAPPED_LEN, "the stream carries a whole wrapped key");
static_assert(STREAM_SALT_LEN == KEYS_SALT_LEN, "the stream carries a whole pbkdf2 salt");
static_assert(STREAM_VIEW_LEN == MAC_ROOT_LEN, "the stream carries a whole view root");
static_assert(STREAM_KIDS_LEN == MAC_LEN, "and a whole tag of an empty list");

uint64_t stream_chain(uint64_t chain, uint64_t part_sum)
{
	uint8_t b[16], *w = b;

	put_u64(&w, chain);
	put_u64(&w, part_sum);
	return hash64(b, sizeof(b));
}

void stream_hdr_put(const struct stream_hdr *h, uint8_t *out, uint64_t *sum)
{
	uint8_t *w = out, name[STREAM_SNAPNAME_LEN] = { 0 };

	put_u64(&w, STREAM_MAGIC);
	put_u32(&w, STREAM_VERSION);
	put_u32(&w, h->flags);
	put_u64(&w, h->guid);
	put_u64(&w, h->from_guid);
	put_u64(&w, h->from_txg);
	put_u64(&w, h->to_guid);
	put_u64(&w, h->to_txg);
	put_u32(&w, h->recsize);
	put_u64(&w, h->volsize);
	put_u8(&w, h->suite);
	put_u8(&w, h->comp);
	put_u8(&w, h->keyformat);
	put_u32(&w, h->iters);
	put_bytes(&w, h->salt, STREAM_SALT_LEN);
	put_bytes(&w, h->wrapped, STREAM_WRAPPED_LEN);
	put_u64(&w, h->max_birth);
	memcpy(name, h->snapname, strnlen(h->snapname, STREAM_SNAPNAME_LEN));
	put_bytes(&w, name, STREAM_SNAPNAME_LEN);
	put_bytes(&w, h->view, STREAM_VIEW_LEN);
	put_bytes(&w, h->kids, STREAM_KIDS_LEN);
	*sum = hash64(out, (size_t)(w - out));
	put_u64(&w, *sum);
}

/* A snapshot's own name as name.c allows it: no '@', '/', range '%' or list ','. */
static int snapname_ok(const char *s)
{
	char full[STREAM_SNAPNAME_LEN + 4] = "p@";

	if (!s[0] || strpbrk(s, "@/%,"))
		return 0;
	strcat(full, s);
	return stor_name_check(full, STOR_NAME_SNAPSHOT) == 0;
}

#define BAD(code, ...)                          \
	do {                                    \
		pool_set_error(__VA_ARGS__);    \
		return (code);                  \
	} while (0)

int stream_hdr_get(const uint8_t *in, struct stream_hdr *h, uint64_t *sum)
{
	const uint8_t *r = in;
	uint64_t magic;

	memset(h, 0, sizeof(*h));
	magic = get_u64(&r);
	h->version = get_u32(&r);
	if (magic != STREAM_MAGIC)
		BAD(STOR_EFORMAT, "not a coffer send stream (bad magic)");
	if (h->version != STREAM_VERSION)
		BAD(STOR_EFORMAT, "send stream version %u; this coffer reads version %u",
		    h->version, STREAM_VERSION);
	h->flags = get_u32(&r);
	h->guid = get_u64(&r);
	h->from_guid = get_u64(&r);
	h->from_txg = get_u64(&r);
	h->to_guid = get_u64(&r);
	h->to_txg = get_u64(&r);
	h->recsize = get_u32(&r);
	h->volsize = get_u64(&r);
	h->suite = get_u8(&r);
	h->comp = get_u8(&r);
	h->keyformat = get_u8(&r);
	h->iters = get_u32(&r);
	get_bytes(&r, h->salt, STREAM_SALT_LEN);
	get_bytes(&r, h->wrapped, STREAM_WRAPPED_LEN);
	h->max_birth = get_u64(&r);
	get_bytes(&r, h->snapname, STREAM_SNAPNAME_LEN);
	h->snapname[STREAM_SNAPNAME_LEN] = '\0';
	get_bytes(&r, h->view, STREAM_VIEW_LEN);
	get_bytes(&r, h->kids, STREAM_KIDS_LEN);
	*sum = hash64(in, (size_t)(r - in));
	if (get_u64(&r) != *sum)
		BAD(STOR_ECKSUM, "send stream header checksum mismatch: the stream is damaged");
	if (h->flags & ~STREAM_F_KNOWN)
		BAD(STOR_EFORMAT, "send stream has unknown flags 0x%x", h->flags & ~STREAM_F_KNOWN);
	if (h->recsize < STOR_RECSIZE_MIN || h->recsize > STOR_RECSIZE_MAX ||
	    (h->recsize & (h->recsize - 1)))
		BAD(STOR_ECORRUPT, "send stream recordsize %u is out of range", h->recsize);
	if (!h->volsize || h->volsize % h->recsize || h->volsize > (1ull << 50))
		BAD(STOR_ECORRUPT, "send stream volsize %llu is not a multiple of its recordsize",
		    (unsigned long long)h->volsize);
	if (h->suite >= CRYPT_NSUITES)
		BAD(STOR_ECORRUPT, "send stream names unknown encryption %u", h->suite);
	/* a txg the receiving pool moves its own past: bounded far from wrapping */
	if (!h->to_guid || !h->guid || !h->to_txg || h->to_txg > (1ull << 48) ||
	    h->max_birth > h->to_txg)
		BAD(STOR_ECORRUPT, "send stream names no snapshot it could hold");
	/* a snapshot's table keyed like its head's would share its MAC key */
	if (h->to_guid == h->guid || h->from_guid == h->guid)
		BAD(STOR_ECORRUPT, "send stream's snapshot has the GUID of its dataset");
	if (h->flags & STREAM_F_INCREMENTAL
		    ? !h->from_guid || h->from_guid == h->to_guid || !h->from_txg ||
			      h->from_txg >= h->to_txg
		    : h->from_guid || h->from_txg)
		BAD(STOR_ECORRUPT, "send stream names a snapshot it starts from that it cannot");
	if (!snapname_ok(h->snapname))
		BAD(STOR_ECORRUPT, "send stream snapshot name is not a valid name");
	if (h->flags & STREAM_F_RAW) {
		if (h->suite == CRYPT_OFF)
			BAD(STOR_ECORRUPT, "raw send stream of an unencrypted dataset");
		if (h->keyformat <= STOR_KEY_NONE || h->keyformat > STOR_KEY_PASSPHRASE)
			BAD(STOR_ECORRUPT, "raw send stream has unknown keyformat %u", h->keyformat);
		if (h->keyformat == STOR_KEY_PASSPHRASE
			    ? h->iters < KEYS_PBKDF2_MIN || h->iters > KEYS_PBKDF2_MAX
			    : h->iters != 0)
			BAD(STOR_ECORRUPT, "raw send stream has pbkdf2iters %u out of range", h->iters);
	} else if (h->keyformat || h->iters || h->suite ||
		   memcmp(h->view, (uint8_t[STREAM_VIEW_LEN]){ 0 }, STREAM_VIEW_LEN) ||
		   memcmp(h->kids, (uint8_t[STREAM_KIDS_LEN]){ 0 }, STREAM_KIDS_LEN)) {
		BAD(STOR_ECORRUPT, "plain send stream carries key fields");
	}
	return 0;
}

static size_t rec_fixed(const struct stream_rec *r, uint8_t *out)
{
	uint8_t *w = out;

	put_u32(&w, STREAM_REC);
	put_u64(&w, r->recno);
	put_u8(&w, r->flags);
	put_u8(&w, r->comp);
	put_u32(&w, r->psize);
	put_u32(&w, r->lsize);
	put_u32(&w, r->csize);
	put_u64(&w, r->birth);
	put_u64(&w, r->salt);
	put_bytes(&w, r->nonce, 12);
	put_bytes(&w, r->tag, 16);
	put_u64(&w, r->cksum);
	put_u32(&w, r->len);
	return (size_t)(w - out);
}

/* A record's checksum: its fixed part's and its payload's, chained. */
static uint64_t rec_sum(const uint8_t *fixed, size_t flen, const uint8_t *payload, uint32_t len)
{
	return stream_chain(hash64(fixed, flen), len ? hash64(payload, len) : 0);
}

void stream_rec_put(const struct stream_rec *r, const uint8_t *payload, uint8_t *out,
		    uint64_t *sum)
{
	size_t n = rec_fixed(r, out);
	uint8_t *w = out + n;

	*sum = rec_sum(out, n, payload, r->len);
	put_u64(&w, *sum);
}

uint32_t stream_kind(const uint8_t *in)
{
	return get_u32(&in);
}

int stream_rec_get(const uint8_t *in, const struct stream_hdr *h, struct stream_rec *r)
{
	const uint8_t *p = in + 4;
	uint32_t maxp = (h->recsize + STOR_SECTOR - 1) / STOR_SECTOR * STOR_SECTOR;

	r->recno = get_u64(&p);
	r->flags = get_u8(&p);
	r->comp = get_u8(&p);
	r->psize = get_u32(&p);
	r->lsize = get_u32(&p);
	r->csize = get_u32(&p);
	r->birth = get_u64(&p);
	r->salt = get_u64(&p);
	get_bytes(&p, r->nonce, 12);
	get_bytes(&p, r->tag, 16);
	r->cksum = get_u64(&p);
	r->len = get_u32(&p);
	if (r->recno >= h->volsize / h->recsize)
		BAD(STOR_ECORRUPT, "send stream record %llu is beyond the volume",
		    (unsigned long long)r->recno);
	if (!(h->flags & STREAM_F_RAW)) {
		if (r->len != h->recsize || r->flags || r->comp || r->psize || r->lsize ||
		    r->csize || r->birth || r->salt)
			BAD(STOR_ECORRUPT, "send stream record %llu has a bad shape",
			    (unsigned long long)r->recno);
		return 0;
	}
	/* every record under the stream's key: of its generation (rekey.c) */
	if (r->flags != (BP_F_ENCRYPTED | ((h->flags & STREAM_F_KEYGEN1) ? BP_F_KEYGEN : 0)) ||
	    r->comp > BP_COMP_ZSTD || r->lsize != h->recsize ||
	    !r->psize || r->psize % STOR_SECTOR || r->psize > maxp || !r->csize ||
	    r->csize > r->psize || (r->comp == BP_COMP_OFF && r->csize != r->lsize) ||
	    r->len != r->psize || !r->birth || r->birth > h->max_birth ||
	    r->birth <= h->from_txg)
		BAD(STOR_ECORRUPT, "raw send stream record %llu has a bad block pointer",
		    (unsigned long long)r->recno);
	return 0;
}

int stream_rec_check(const uint8_t *in, const uint8_t *payload, uint32_t len, uint64_t *sum)
{
	const uint8_t *p = in + STREAM_REC_LEN - 8;

	*sum = rec_sum(in, STREAM_REC_LEN - 8, payload, len);
	if (get_u64(&p) != *sum)
		BAD(STOR_ECKSUM, "send stream record checksum mismatch: the stream is damaged");
	return 0;
}

void stream_free_put(uint64_t first, uint64_t count, uint8_t *out, uint64_t *sum)
{
	uint8_t *w = out;

	put_u32(&w, STREAM_FREE);
	put_u64(&w, first);
	put_u64(&w, count);
	*sum = hash64(out, (size_t)(w - out));
	put_u64(&w, *sum);
}

int stream_free_get(const uint8_t *in, const struct stream_hdr *h, uint64_t *first,
		    uint64_t *count, uint64_t *sum)
{
	const uint8_t *r = in + 4;
	uint64_t nrec = h->volsize / h->recsize;

	*first = get_u64(&r);
	*count = get_u64(&r);
	*sum = hash64(in, (size_t)(r - in));
	if (get_u64(&r) != *sum)
		BAD(STOR_ECKSUM, "send stream free checksum mismatch: the stream is damaged");
	if (!(h->flags & STREAM_F_INCREMENTAL))
		BAD(STOR_ECORRUPT, "a full send stream has no frees");
	if (!*count || *first >= nrec || *count > nrec - *first)
		BAD(STOR_ECORRUPT, "send stream frees %llu records from %llu: none, or past the "
		    "volume's end", (unsigned long long)*count, (unsigned long long)*first);
	return 0;
}

void stream_resume_put(uint64_t first, uint8_t *out, uint64_t *sum)
{
	uint8_t *w = out;

	put_u32(&w, STREAM_RESUME);
	put_u64(&w, first);
	*sum = hash64(out, (size_t)(w - out));
	put_u64(&w, *sum);
}

int stream_resume_get(const uint8_t *in, const struct stream_hdr *h, uint64_t *first,
		      uint64_t *sum)
{
	const uint8_t *r = in + 4;

	*first = get_u64(&r);
	*sum = hash64(in, (size_t)(r - in));
	if (get_u64(&r) != *sum)
		BAD(STOR_ECKSUM, "send stream resume part checksum mismatch: the stream is damaged");
	if (!(h->flags & STREAM_F_RESUME))
		BAD(STOR_ECORRUPT, "a send stream that is not resumed has a resume part");
	if (*first > h->volsize / h->recsize)
		BAD(STOR_ECORRUPT, "send stream resumes at record %llu, past the volume's end",
		    (unsigned long long)*first);
	return 0;
}

int stream_hdr_same(const struct stream_hdr *a, const struct stream_hdr *b)
{
	struct stream_hdr x = *a, y = *b;
	uint8_t ex[STREAM_HDR_LEN], ey[STREAM_HDR_LEN];
	uint64_t sum;

	x.flags &= ~STREAM_F_RESUME;
	y.flags &= ~STREAM_F_RESUME;
	x.comp = y.comp = 0;
	stream_hdr_put(&x, ex, &sum);
	stream_hdr_put(&y, ey, &sum);
	return memcmp(ex, ey, sizeof(ex)) == 0;
}

void stream_end_put(uint64_t parts, uint64_t chain, uint8_t *out)
{
	uint8_t *w = out;

	put_u32(&w, STREAM_END);
	put_u64(&w, parts);
	put_u64(&w, chain);
	put_u64(&w, hash64(out, (size_t)(w - out)));
}

int stream_end_get(const uint8_t *in, uint64_t *parts, uint64_t *chain)
{
	const uint8_t *r = in + 4;
	uint64_t sum;

	*parts = get_u64(&r);
	*chain = get_u64(&r);
	sum = hash64(in, (size_t)(r - in));
	if (get_u64(&r) != sum)
		BAD(STOR_ECKSUM, "send stream end checksum mismatch: the stream is damaged");
	return 0;
}
