/* SPDX-License-Identifier: MIT */
/*
 * receive: a send stream (stream.h) into a new dataset, all or nothing.
 *
 * - The stream is parsed part by part from chunks cut anywhere; a part is
 *   gathered in a buffer of one part at most (STREAM_PART_MAX), and raw
 *   records wait for their batch write up to RECV_BATCH_BYTES, so memory
 *   stays bounded (about 6 MiB) whatever the stream's size. Every field is checked
 *   before use (stream.c): sizes and record numbers against the header's
 *   shape, records in increasing order, each part's checksum, and at the
 *   end the count and chain of every part.
 * - The dataset is created when the header has been checked (receive -F
 *   over an existing one: under a name of its own beside it, which it
 *   takes, the old one destroyed, only once the stream is whole), marked as
 *   being received in the same LMDB transaction as its record (a
 *   "recv/<id>" row of the pool table) and closed to every other opener.
 *   Its records are staged as they come, over as many txgs as the timer
 *   makes. Any failure, a close before the end, or a crash (the import
 *   finds the mark: recv_cleanup) destroys it again: nothing is left
 *   half-received. Only a stream read to its end, checked whole and
 *   committed (txg_sync) clears the mark.
 * - Non-raw: plaintext written through the ordinary write path, so the
 *   dataset compresses and encrypts as its properties say; under an
 *   encrypted parent it inherits that encryption root (and needs its key).
 * - Raw: the dataset takes the source's GUID (its AADs and data keys are
 *   bound to it) and its wrapped key and becomes an encryption root of its
 *   own; records are written as stored (record_write_stored) and staged
 *   with no MAC key. The mark then says RECV_MACS: the first load-key,
 *   which alone can compute them, builds the MAC tree from the pointers
 *   (recv_build_macs) before the key is installed, and clears the mark.
 *   Each pointer must be encrypted then (a clear one is EAUTH), and every
 *   read checks its record's tag. stream.h says what this does not cover
 *   (the set of records is taken as received) and why no nonce repeats.
 *   A pool holds one dataset of a GUID: a second raw copy is refused.
 *   The open txg is moved past the stream's newest birth first, so every
 *   snapshot taken here later is newer than every record received.
 *   A side of a mirror out of service at the start or the end of a raw
 *   receive fails it: a resilver copies what was born since the side went
 *   out, and these records were born elsewhere, earlier.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpmac.h"
#include "hash.h"
#include "meta.h"
#include "store_impl.h"
#include "stream.h"

#define RECV_BATCH 32u
#define RECV_BATCH_BYTES (4u << 20) /* or fewer records of a large recordsize */
#define MARK_PREFIX "recv/"

struct stor_recv {
	struct stor_pool *p;
	char name[STOR_NAME_MAX + 1];
	unsigned flags;
	struct stor_ds *ds; /* created, open, marked */
	char tmp[STOR_NAME_MAX + 1]; /* -F over an existing dataset: the name received under */
	struct stream_hdr h;
	int have_hdr, done, failed;
	uint64_t chain, parts, next; /* next: the lowest record number still allowed */
	uint8_t *part;               /* the part being gathered */
	size_t plen;
	struct stream_rec rec; /* the fixed part of the record being gathered */
	/* raw: records to write in one batch */
	size_t nb, nbytes;
	uint64_t recnos[RECV_BATCH];
	struct bp bps[RECV_BATCH];
	uint8_t *bufs[RECV_BATCH];
};

/* ---- the marks ---- */

static void mark_key(uint64_t id, char key[32])
{
	snprintf(key, 32, MARK_PREFIX "%016llx", (unsigned long long)id);
}

int recv_mark_txn(struct meta_txn *t, uint64_t id, unsigned state)
{
	char key[32];
	uint8_t v = (uint8_t)state;
	int ret;

	mark_key(id, key);
	if (state)
		return meta_put(t, META_POOL, key, strlen(key), &v, 1);
	ret = meta_del(t, META_POOL, key, strlen(key));
	return ret == -ENOENT ? 0 : ret;
}

static int mark(struct stor_pool *p, uint64_t id, unsigned state)
{
	struct meta_txn *t = NULL;
	int ret = meta_txn_begin(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = recv_mark_txn(t, id, state);
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

static int mark_of(struct stor_pool *p, uint64_t id)
{
	struct meta_txn *t = NULL;
	const void *v;
	size_t vlen;
	char key[32];
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	mark_key(id, key);
	ret = meta_get(t, META_POOL, key, strlen(key), &v, &vlen);
	ret = ret == -ENOENT ? 0 : ret < 0 ? ret : vlen == 1 ? *(const uint8_t *)v : STOR_ECORRUPT;
	meta_rtxn_put(t);
	return ret;
}

int recv_macs_pending(struct stor_pool *p, const struct stor_ds *ds)
{
	int m;

	if (atomic_load(&ds->receiving))
		return -EBUSY;
	m = mark_of(p, ds->id);
	return m < 0 ? m : m == RECV_MACS ? 1 : m == RECV_RECEIVING ? -EBUSY : 0;
}

/* ---- the MAC tree of a raw receive, at its first load-key ---- */

struct build {
	uint64_t id;
	const struct mac_key *mk;
	struct bpmac_change *ch;
	size_t n, cap;
	int clear; /* a pointer without encryption: refused */
};

static int leaf_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct build *b = ctx;
	const uint8_t *k = key;
	uint64_t recno, g;
	struct bp bp;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (!(bp.flags & BP_F_ENCRYPTED)) {
		b->clear = 1;
		return STOR_EAUTH;
	}
	k += 8;
	recno = get_u64(&k);
	g = recno / MAC_GROUP;
	/* pointers come in record order: one change per group, appended */
	if (!b->n || b->ch[b->n - 1].recno / MAC_GROUP != g) {
		if (b->n == b->cap) {
			size_t cap = b->cap ? b->cap * 2 : 64;
			struct bpmac_change *c = realloc(b->ch, cap * sizeof(*c));
			if (!c)
				return -ENOMEM;
			b->ch = c;
			b->cap = cap;
		}
		b->ch[b->n++] = (struct bpmac_change){ .ds_id = b->id, .recno = recno, .mk = b->mk };
	}
	return bpmac_leaf_xor(b->mk, recno, val, b->ch[b->n - 1].delta);
}

int recv_build_macs(struct stor_pool *p, struct stor_ds *ds, const struct mac_key *mk)
{
	struct build b = { .id = ds->id, .mk = mk };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *w = prefix;
	int ret = meta_txn_begin(p->meta, &t);

	if (ret < 0)
		return ret;
	put_u64(&w, ds->id);
	ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, leaf_one, &b);
	if (ret == 0)
		ret = bpmac_root_init(t, ds->id, mk);
	if (ret == 0 && b.n)
		ret = bpmac_apply(t, b.ch, b.n);
	if (ret == 0)
		ret = recv_mark_txn(t, ds->id, 0);
	free(b.ch);
	if (ret < 0) {
		meta_txn_abort(t);
		if (b.clear)
			pool_set_error("dataset %s: a received block pointer is not encrypted",
				       ds->name);
		return ret;
	}
	return meta_txn_commit(t);
}

/* ---- cleanup ---- */

struct leftovers {
	uint64_t *ids;
	size_t n;
};

static int leftover_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct leftovers *l = ctx;
	char hex[17];
	uint64_t *ids;

	if (vlen != 1 || *(const uint8_t *)val != RECV_RECEIVING ||
	    klen != strlen(MARK_PREFIX) + 16)
		return 0;
	ids = realloc(l->ids, (l->n + 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	l->ids = ids;
	memcpy(hex, (const char *)key + strlen(MARK_PREFIX), 16);
	hex[16] = '\0';
	l->ids[l->n++] = strtoull(hex, NULL, 16);
	return 0;
}

/* Destroy dataset @id, cut short while being received, and its mark. */
static int discard(struct stor_pool *p, uint64_t id)
{
	char name[STOR_NAME_MAX + 1] = "";
	struct stor_ds *ds;
	int ret = 0;

	pthread_mutex_lock(&p->admin);
	ds = ds_find_id_locked(p, id);
	if (ds) {
		snprintf(name, sizeof(name), "%s", ds->name);
		atomic_store(&ds->receiving, 0);
	}
	pthread_mutex_unlock(&p->admin);
	if (name[0])
		ret = stor_ds_destroy(p, name, STOR_RECURSIVE);
	return ret < 0 && ret != -ENOENT ? ret : mark(p, id, 0);
}

int recv_cleanup(struct stor_pool *p)
{
	struct leftovers l = { 0 };
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_POOL, MARK_PREFIX, strlen(MARK_PREFIX), 0, leftover_one, &l);
	meta_rtxn_put(t);
	for (size_t i = 0; i < l.n && ret == 0; i++)
		ret = discard(p, l.ids[i]);
	free(l.ids);
	return ret;
}

/* ---- the receive ---- */

static int fail(struct stor_recv *r, int err)
{
	r->failed = err;
	return err;
}

int stor_recv_begin(struct stor_pool *p, const char *name, unsigned flags, struct stor_recv **out)
{
	struct stor_recv *r;
	size_t plen = strlen(p->name);
	int exists;

	*out = NULL;
	pool_clear_error();
	if (stor_name_check(name, STOR_NAME_DATASET) < 0 || strncmp(name, p->name, plen) ||
	    name[plen] != '/') {
		pool_set_error("receive needs a dataset of pool %s, POOL/NAME", p->name);
		return STOR_EBADNAME;
	}
	pthread_mutex_lock(&p->admin);
	exists = ds_find_locked(p, name) != NULL;
	pthread_mutex_unlock(&p->admin);
	if (exists && !(flags & STOR_FORCE)) {
		pool_set_error("%s exists; use -F to replace it", name);
		return -EEXIST;
	}
	r = calloc(1, sizeof(*r));
	if (!r || !(r->part = malloc(STREAM_PART_MAX))) {
		free(r);
		return -ENOMEM;
	}
	r->p = p;
	r->flags = flags;
	snprintf(r->name, sizeof(r->name), "%s", name);
	*out = r;
	return 0;
}

struct stor_recv *recv_parser_new(void)
{
	struct stor_recv *r = calloc(1, sizeof(*r));

	if (r && !(r->part = malloc(STREAM_PART_MAX))) {
		free(r);
		r = NULL;
	}
	return r;
}

static int sides_sound(struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (atomic_load(&p->luns[i].out) != SIDE_IN || atomic_load(&p->luns[i].missing_since))
			return 0;
	return 1;
}

static int create(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	struct recv_identity as = { .raw = !!(r->h.flags & STREAM_F_RAW), .guid = r->h.guid,
				    .suite = r->h.suite, .keyformat = r->h.keyformat,
				    .iters = r->h.iters };
	char vs[32], rs[32];
	const char *props[] = { vs, rs, "refreservation=none" };
	struct stor_ds_opts o = { .props = props, .nprops = 3 };
	struct stor_ds *old;
	int ret = 0;

	if (!p)
		return 0; /* recv_parser_new: the stream only */

	snprintf(vs, sizeof(vs), "volsize=%llu", (unsigned long long)r->h.volsize);
	snprintf(rs, sizeof(rs), "recordsize=%u", r->h.recsize);
	memcpy(as.salt, r->h.salt, sizeof(as.salt));
	memcpy(as.wrapped, r->h.wrapped, sizeof(as.wrapped));
	if (as.raw && !sides_sound(p)) {
		pool_set_error("a mirror side of pool %s is out of service; a raw receive waits "
			       "for the resilver", p->name);
		return -EBUSY;
	}
	pthread_mutex_lock(&p->admin);
	/* -F: received beside the dataset it replaces, which stays until the
	 * stream is whole; one that could not be destroyed then is refused now */
	if (r->flags & STOR_FORCE && (old = ds_find_locked(p, r->name))) {
		uint32_t tag;
		size_t n = strlen(r->name);

		ret = atomic_load(&old->refs) > 0 || old->nsnaps ? -EBUSY : 0;
		for (size_t i = 0; ret == 0 && i < p->nds; i++)
			if (!strncmp(p->ds[i]->name, r->name, n) && p->ds[i]->name[n] == '/')
				ret = -EBUSY;
		if (ret < 0)
			pool_set_error("%s is open, or has snapshots or children: receive -F "
				       "replaces a dataset without them", r->name);
		if (ret == 0 && keys_random(&tag, sizeof(tag)) == 0 &&
		    (size_t)snprintf(r->tmp, sizeof(r->tmp), "%s-recv-%08x", r->name, tag) >=
			    sizeof(r->tmp)) {
			pool_set_error("%s: too long a name for receive -F", r->name);
			ret = STOR_EBADNAME;
		}
	}
	for (size_t i = 0; as.raw && i < p->nds; i++)
		if (p->ds[i]->guid == as.guid) {
			pool_set_error("%s is this stream's dataset already (the same GUID); a pool "
				       "holds one copy of a raw stream", p->ds[i]->name);
			ret = -EEXIST;
		}
	if (ret == 0)
		ret = ds_create_received_locked(p, r->tmp[0] ? r->tmp : r->name, &o, &as, &r->ds);
	pthread_mutex_unlock(&p->admin);
	explicit_bzero(&as, sizeof(as));
	if (ret < 0)
		return ret;
	if (r->h.flags & STREAM_F_RAW)
		txg_advance(p, r->h.max_birth + 1);
	return 0;
}

/* Write the raw records gathered; the buffers are ours again after. */
static int flush_raw(struct stor_recv *r)
{
	int ret = r->nb ? record_write_stored(r->ds, r->nb, r->recnos, r->bps, r->bufs) : 0;

	for (size_t i = 0; i < r->nb; i++) {
		free(r->bufs[i]);
		r->bufs[i] = NULL;
	}
	r->nb = 0;
	r->nbytes = 0;
	return ret;
}

static int take_record(struct stor_recv *r, const uint8_t *payload)
{
	const struct stream_rec *s = &r->rec;
	uint8_t *buf;

	if (r->h.flags & STREAM_F_RAW && hash64(payload, s->len) != s->cksum) {
		pool_set_error("raw record %llu does not match its stored checksum",
			       (unsigned long long)s->recno);
		return STOR_ECKSUM;
	}
	if (!r->p)
		return 0;
	if (!(r->h.flags & STREAM_F_RAW))
		return stor_ds_write(r->ds, s->recno * r->h.recsize, payload, s->len);
	if (posix_memalign((void **)&buf, STOR_SECTOR, s->len))
		return -ENOMEM;
	memcpy(buf, payload, s->len);
	r->recnos[r->nb] = s->recno;
	r->bps[r->nb] = (struct bp){ .flags = s->flags, .comp = s->comp, .psize = s->psize,
				     .lsize = s->lsize, .csize = s->csize, .birth = s->birth,
				     .salt = s->salt, .cksum = s->cksum };
	memcpy(r->bps[r->nb].nonce, s->nonce, sizeof(s->nonce));
	memcpy(r->bps[r->nb].mac, s->tag, sizeof(s->tag));
	r->bufs[r->nb++] = buf;
	r->nbytes += s->len;
	return r->nb == RECV_BATCH || r->nbytes >= RECV_BATCH_BYTES ? flush_raw(r) : 0;
}

/* The stream is whole: write what is left, commit, clear the mark. */
static int finish(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	int raw = !!(r->h.flags & STREAM_F_RAW), ret;

	if (!p) {
		r->done = 1;
		return 1;
	}
	ret = flush_raw(r);
	if (ret == 0)
		ret = txg_sync(p, 0);
	if (ret == 0 && raw && !sides_sound(p)) {
		pool_set_error("a mirror side of pool %s went out of service during the receive",
			       p->name);
		ret = -EIO;
	}
	if (ret == 0 && r->tmp[0]) {
		/* the stream is whole: now the dataset it replaces goes */
		ret = stor_ds_destroy(p, r->name, 0);
		if (ret == 0 || ret == -ENOENT)
			ret = ds_rename_received(p, r->ds, r->name, raw ? RECV_MACS : 0);
	} else if (ret == 0) {
		ret = mark(p, r->ds->id, raw ? RECV_MACS : 0);
	}
	if (ret < 0)
		return ret;
	atomic_store(&r->ds->receiving, 0);
	r->done = 1;
	return 1;
}

/* One whole part is in r->part (r->plen bytes). */
static int part_done(struct stor_recv *r)
{
	uint64_t sum, parts, chain;
	int ret;

	if (!r->have_hdr) {
		ret = stream_hdr_get(r->part, &r->h, &sum);
		if (ret == 0)
			ret = create(r);
		if (ret < 0)
			return ret;
		r->have_hdr = 1;
		r->chain = sum;
		return 0;
	}
	switch (stream_kind(r->part)) {
	case STREAM_REC:
		ret = stream_rec_check(r->part, r->part + STREAM_REC_LEN, r->rec.len, &sum);
		if (ret < 0)
			return ret;
		if (r->rec.recno < r->next) {
			pool_set_error("send stream record %llu is out of order",
				       (unsigned long long)r->rec.recno);
			return STOR_ECORRUPT;
		}
		r->next = r->rec.recno + 1;
		r->chain = stream_chain(r->chain, sum);
		r->parts++;
		return take_record(r, r->part + STREAM_REC_LEN);
	case STREAM_END:
		ret = stream_end_get(r->part, &parts, &chain);
		if (ret == 0 && (parts != r->parts || chain != r->chain)) {
			pool_set_error("send stream is damaged: %llu records read, its end counts "
				       "%llu, or they were changed or reordered",
				       (unsigned long long)r->parts, (unsigned long long)parts);
			ret = STOR_ECKSUM;
		}
		return ret < 0 ? ret : finish(r);
	default:
		pool_set_error("send stream has a part of unknown kind %u", stream_kind(r->part));
		return STOR_ECORRUPT;
	}
}

/* How many bytes the part being gathered has in all, once its head is in. */
static int part_size(struct stor_recv *r, size_t *need)
{
	if (!r->have_hdr) {
		*need = STREAM_HDR_LEN;
		return 0;
	}
	if (r->plen < 4) {
		*need = 4;
		return 0;
	}
	switch (stream_kind(r->part)) {
	case STREAM_REC:
		if (r->plen < STREAM_REC_LEN) {
			*need = STREAM_REC_LEN;
			return 0;
		}
		*need = STREAM_REC_LEN + r->rec.len;
		return 0;
	case STREAM_END:
		*need = STREAM_END_LEN;
		return 0;
	case STREAM_FREE:
		pool_set_error("a full send stream has no frees");
		return STOR_ECORRUPT;
	default:
		pool_set_error("send stream has a part of unknown kind %u", stream_kind(r->part));
		return STOR_ECORRUPT;
	}
}

int stor_recv_feed(struct stor_recv *r, const uint8_t *buf, size_t len)
{
	int ret = 0;

	pool_clear_error();
	if (r->failed)
		return r->failed;
	if (r->done) {
		if (!len)
			return 1;
		r->done = 0; /* not the stream it claimed to be: undone on close */
		pool_set_error("send stream goes on after its end");
		return fail(r, STOR_ECORRUPT);
	}
	while (len) {
		size_t need, n;

		ret = part_size(r, &need);
		if (ret < 0)
			return fail(r, ret);
		n = need - r->plen < len ? need - r->plen : len;
		memcpy(r->part + r->plen, buf, n);
		r->plen += n;
		buf += n;
		len -= n;
		if (r->plen < need)
			continue;
		/* the kind: part_size() knows how long the part is now */
		if (r->have_hdr && r->plen == 4)
			continue;
		/* a record's fixed part: check it and learn its payload's length */
		if (r->have_hdr && need == STREAM_REC_LEN && stream_kind(r->part) == STREAM_REC) {
			ret = stream_rec_get(r->part, &r->h, &r->rec);
			if (ret < 0)
				return fail(r, ret);
			if (r->rec.len)
				continue;
		}
		ret = part_done(r);
		r->plen = 0;
		if (ret < 0)
			return fail(r, ret);
		if (ret == 1) {
			if (len) {
				r->done = 0;
				pool_set_error("send stream goes on after its end");
				return fail(r, STOR_ECORRUPT);
			}
			return 1;
		}
	}
	return 0;
}

void stor_recv_close(struct stor_recv *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nb; i++)
		free(r->bufs[i]);
	if (r->ds) {
		uint64_t id = r->ds->id;

		stor_ds_close(r->ds);
		if (!r->done) {
			char why[512];

			/* the reason the receive failed stays the one the caller sees */
			snprintf(why, sizeof(why), "%s", stor_pool_last_error());
			discard(r->p, id);
			pool_set_error("%s", why);
		}
	}
	free(r->part);
	free(r);
}
