/* SPDX-License-Identifier: MIT */
/*
 * send: a snapshot as a stream (stream.h), in chunks, statelessly: the
 * caller keeps a cursor (the next record number, the chain, the parts so
 * far, the snapshot's GUID) and hands it back for the next chunk, so the
 * daemon holds nothing between two requests and a client that goes away
 * leaves nothing behind. The snapshot is opened for each chunk; one
 * destroyed, or replaced by another of the same name, ends the send.
 *
 * Which records: every record the snapshot sees, in record order, by
 * snapshot.c's rule (the head's pointer if born at or before the
 * snapshot's txg, else the newest kept one that is); a hole is not sent.
 * An incremental from an earlier snapshot FROM of the same dataset sends
 * the records whose version was born after FROM's txg, and frees those
 * FROM held that are holes now (classify): the same walk over every record
 * number, with one more lookup for a hole, so it costs what a full send's
 * walk does, and only what changed is read and sent. -I is the client's:
 * an incremental for each snapshot between, one after another (stream.h).
 *
 * Raw (STOR_SEND_RAW): the stored bytes as they are and the pointer fields
 * that open them, read with no key: the pointers are looked up, not opened,
 * and each extent is checked against its keyless checksum (the one scrub
 * uses), so a damaged copy is refused here rather than sent. What makes the
 * records trustworthy on the other side is their AEAD tags, which the
 * receiver's first load-key and every read check (stream.h, recv.c). The
 * stream carries the wrapped master key with the parameters of the
 * dataset's encryption root, and the snapshot's view root (bpmac.c), which
 * the receiver checks the set of records against.
 * Non-raw: the plaintext through the ordinary read path of the snapshot
 * (its key loaded, MACs checked), an all-zero record sent as a hole.
 *
 * Resumed (STOR_SEND_RESUME, send -t): the cursor comes from a resume
 * token; the first chunk checks the snapshot (and FROM) has the token's
 * GUID, so a snapshot destroyed and made anew under its name is refused,
 * marks the header resumed and puts the resume part after it (stream.h);
 * the walk then starts at the token's record. The header is made as for
 * a whole stream, so the receiver can compare it with the one it kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "crypt/hash.h"
#include "dev/lun.h"
#include "dev/mirror.h"
#include "ds/children.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/rekey.h"
#include "ds/snapshot.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "send/stream.h"
#include "txg/bpmac.h"

#define SEND_BATCH 256u

enum { CUR_HEADER = 0, CUR_RECORDS, CUR_DONE };

/* Append a part's checksum to the cursor's chain. */
static void chained(struct stor_send_cursor *cur, uint64_t sum)
{
	cur->chain = stream_chain(cur->chain, sum);
	cur->parts++;
}

/* The view root of snapshot @h (bpmac.c), which a raw stream carries so
 * the receiver's first load-key can tell the set of records is the one the
 * snapshot had, and the tag of its dataset's empty list of children
 * (children.c), the list the received dataset starts with. Stored bytes:
 * no key is needed to copy them. */
static int view_of(struct stor_pool *p, struct stor_ds *h, uint8_t view[MAC_ROOT_LEN],
		   uint8_t kids[MAC_LEN])
{
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = bpmac_row_get(t, h->snap->id, MAC_VIEW, view);
	if (ret == 0)
		ret = children_empty_tag(t, h->head->id, kids);
	meta_rtxn_put(t);
	if (ret == -ENOENT || ret == STOR_EAUTH) {
		pool_set_error("%s: the snapshot has no view root or its dataset no list of "
			       "children to send raw (its metadata was changed without its key)",
			       h->name);
		ret = STOR_EAUTH;
	}
	return ret;
}

static int header(struct stor_pool *p, struct stor_ds *h, struct stor_ds *f, unsigned raw,
		  unsigned resume, uint8_t *out, struct stor_send_cursor *cur)
{
	struct stor_ds *ds = h->head;
	struct stream_hdr sh = { .guid = ds->guid, .to_guid = h->snap->guid, .to_txg = h->snap->txg,
				 .recsize = h->recsize, .volsize = atomic_load(&h->volsize),
				 .comp = (uint8_t)atomic_load(&ds->comp_level),
				 .max_birth = h->snap->txg };
	const char *at = strchr(h->name, '@');
	uint64_t sum;
	int ret;

	snprintf(sh.snapname, sizeof(sh.snapname), "%s", at ? at + 1 : "");
	if (f) {
		sh.flags |= STREAM_F_INCREMENTAL;
		sh.from_guid = f->snap->guid;
		sh.from_txg = f->snap->txg;
	}
	if (raw) {
		struct stor_ds *root;

		sh.flags |= STREAM_F_RAW;
		sh.suite = (uint8_t)ds->suite;
		pthread_mutex_lock(&p->admin);
		root = ds_find_id_locked(p, ds->enc_root_id);
		if (root) {
			sh.keyformat = (uint8_t)root->keyformat;
			sh.iters = root->iters;
			memcpy(sh.salt, root->salt, sizeof(sh.salt));
			memcpy(sh.wrapped, ds->wrapped, sizeof(sh.wrapped));
			if (ds->keygen)
				sh.flags |= STREAM_F_KEYGEN1;
		}
		pthread_mutex_unlock(&p->admin);
		if (!root) {
			pool_set_error("%s: its encryption root is gone", ds->name);
			return STOR_ECORRUPT;
		}
		ret = view_of(p, h, sh.view, sh.kids);
		if (ret < 0)
			return ret;
	}
	if (resume)
		sh.flags |= STREAM_F_RESUME;
	stream_hdr_put(&sh, out, &sum);
	cur->chain = sum;
	cur->parts = 0;
	if (resume) {
		/* the resume part: the rest starts at the token's record number */
		stream_resume_put(cur->next, out + STREAM_HDR_LEN, &sum);
		chained(cur, sum);
	}
	cur->guid = h->snap->guid;
	cur->from_guid = f ? f->snap->guid : 0;
	return 0;
}

/*
 * The pointers of records [first, first + n) as snapshot @h sees them, with
 * no key: the head's, else the newest kept one born by the snapshot
 * (snapshot.c's rule, without the MAC checks a raw send cannot make).
 * Inside a reader section, so the tables walked stay.
 */
static int resolve(struct stor_pool *p, struct stor_ds *h, uint64_t first, size_t n,
		   struct bp *bps, int *found)
{
	struct stor_ds *ds = h->head;
	uint64_t ids[SEND_BATCH], recnos[SEND_BATCH], *tabs;
	size_t ntabs = 0;
	int ret;

	for (size_t i = 0; i < n; i++) {
		ids[i] = ds->id;
		recnos[i] = first + i;
	}
	ret = txg_lookup(p, n, ids, recnos, bps, found);
	pthread_mutex_lock(&p->snap_lock);
	tabs = malloc((ds->nsnaps + 1) * sizeof(*tabs));
	for (size_t i = ds->nsnaps; tabs && i-- > 0 && ds->snaps[i]->txg >= h->snap->txg;)
		tabs[ntabs++] = ds->snaps[i]->id;
	pthread_mutex_unlock(&p->snap_lock);
	if (!tabs)
		return -ENOMEM;
	for (size_t i = 0; i < n && ret == 0; i++) {
		if (found[i] && bps[i].birth <= h->snap->txg)
			continue;
		found[i] = 0;
		for (size_t t = 0; t < ntabs && ret == 0; t++) {
			ret = txg_lookup(p, 1, &tabs[t], &recnos[i], &bps[i], &found[i]);
			if (ret == 0 && found[i] && bps[i].birth <= h->snap->txg)
				break;
			found[i] = 0;
		}
	}
	free(tabs);
	return ret;
}

enum { SKIP = 0, SEND, FREE };

/*
 * What the stream says of records [first, first + n): each one the
 * snapshot @h holds is sent in a full stream (@f NULL); in an incremental
 * from @f, one whose version at @h was born after @f's txg is sent, and one
 * @h does not hold that @f does is freed. The pointers at @h in @bps.
 */
static int classify(struct stor_pool *p, struct stor_ds *h, struct stor_ds *f, uint64_t first,
		    size_t n, struct bp *bps, int *found, unsigned char *act)
{
	struct bp fbps[SEND_BATCH];
	int ffound[SEND_BATCH], holes = 0;
	int ret = resolve(p, h, first, n, bps, found);

	for (size_t i = 0; i < n && ret == 0; i++) {
		act[i] = found[i] && (!f || bps[i].birth > f->snap->txg) ? SEND : SKIP;
		holes |= !found[i];
	}
	if (ret == 0 && f && holes)
		ret = resolve(p, f, first, n, fbps, ffound);
	for (size_t i = 0; i < n && ret == 0 && f && holes; i++)
		if (!found[i] && ffound[i])
			act[i] = FREE;
	return ret;
}

/* The free of the run of FREE records starting at @i (of @n) into @out. */
static size_t put_free(uint64_t first, const unsigned char *act, size_t i, size_t n, uint8_t *out,
		       struct stor_send_cursor *cur)
{
	size_t end = i;
	uint64_t sum;

	while (end < n && act[end] == FREE)
		end++;
	stream_free_put(first + i, end - i, out, &sum);
	chained(cur, sum);
	return end - i;
}

/*
 * Raw records [first, first + n) into @out from @pos; how many were taken.
 * The stored bytes land in @out itself (read there, or copied from a mapped
 * LUN); only an O_DIRECT LUN needs an aligned buffer in between.
 */
static int raw_batch(struct stor_pool *p, struct stor_ds *h, struct stor_ds *f, uint64_t first,
		     size_t n, uint8_t *out, size_t cap, size_t *pos, struct stor_send_cursor *cur)
{
	struct bp bps[SEND_BATCH];
	int found[SEND_BATCH];
	unsigned char act[SEND_BATCH];
	struct lun_io ios[SEND_BATCH];
	size_t at[SEND_BATCH], end = *pos, nio = 0, take = 0;
	uint8_t *bounce[SEND_BATCH] = { NULL };
	unsigned slot = txg_read_enter(p);
	int ret = classify(p, h, f, first, n, bps, found, act);

	/* as many records as fit, the end's room kept; each part's place (a
	 * run of frees is one part, at its first) */
	for (; ret == 0 && take < n; take++) {
		size_t part = act[take] == SEND ? STREAM_REC_LEN + bps[take].psize
			      : act[take] == FREE && (!take || act[take - 1] != FREE)
				      ? STREAM_FREE_LEN
				      : 0;

		if (act[take] == SEND && (!(bps[take].flags & BP_F_ENCRYPTED) ||
				    bps[take].lun >= atomic_load(&p->nluns) ||
				    bps[take].psize > STOR_RECSIZE_MAX + STOR_SECTOR)) {
			pool_set_error("%s: record %llu has a pointer a raw send cannot carry",
				       h->name, (unsigned long long)(first + take));
			ret = STOR_ECORRUPT;
			break;
		}
		if (end + part + STREAM_END_LEN > cap)
			break;
		at[take] = act[take] == SEND ? end + STREAM_REC_LEN : end;
		end += part;
	}
	for (size_t i = 0; ret == 0 && i < take; i++) {
		struct lun *lun;
		const void *in;
		uint8_t *dst = out + at[i];

		if (act[i] != SEND)
			continue;
		lun = p->luns[mirror_read_side(p, bps[i].lun)].lun;
		in = lun_mapped(lun, bps[i].sector * STOR_SECTOR, bps[i].psize);
		if (in) {
			memcpy(dst, in, bps[i].psize);
			continue;
		}
		if (lun_is_direct(lun)) {
			if (posix_memalign((void **)&bounce[i], STOR_SECTOR, bps[i].psize)) {
				ret = -ENOMEM;
				break;
			}
			dst = bounce[i];
		}
		ios[nio++] = (struct lun_io){ lun, bps[i].sector * STOR_SECTOR, dst, bps[i].psize, 0, 0, 0 };
	}
	if (ret == 0 && nio && lun_read_batch(ios, nio))
		ret = -EIO;
	txg_read_exit(p, slot);
	for (size_t i = 0; ret == 0 && i < take; i++) {
		struct stream_rec r;
		uint64_t sum;

		if (act[i] == FREE && (!i || act[i - 1] != FREE))
			put_free(first, act, i, take, out + at[i], cur);
		if (act[i] != SEND)
			continue;
		if (bounce[i])
			memcpy(out + at[i], bounce[i], bps[i].psize);
		if (hash64(out + at[i], bps[i].psize) != bps[i].cksum) {
			pool_set_error("%s: record %llu fails its checksum; scrub the pool first",
				       h->name, (unsigned long long)(first + i));
			ret = STOR_ECKSUM;
			break;
		}
		r = (struct stream_rec){ .recno = first + i, .flags = bps[i].flags,
					 .comp = bps[i].comp, .psize = bps[i].psize,
					 .lsize = bps[i].lsize, .csize = bps[i].csize,
					 .birth = bps[i].birth, .salt = bps[i].salt,
					 .cksum = bps[i].cksum, .len = bps[i].psize };
		memcpy(r.nonce, bps[i].nonce, sizeof(r.nonce));
		memcpy(r.tag, bps[i].mac, sizeof(r.tag));
		stream_rec_put(&r, out + at[i], out + at[i] - STREAM_REC_LEN, &sum);
		chained(cur, sum);
	}
	if (ret == 0)
		*pos = end;
	for (size_t i = 0; i < n; i++)
		free(bounce[i]);
	return ret < 0 ? ret : (int)take;
}

static int all_zero(const uint8_t *b, size_t n)
{
	return n == 0 || (b[0] == 0 && memcmp(b, b + 1, n - 1) == 0);
}

/*
 * Plaintext records [first, first + n) through the read path; in an
 * incremental from @f, those classify() picks, one that reads as zeros
 * sent as a free.
 */
static int plain_batch(struct stor_pool *p, struct stor_ds *h, struct stor_ds *f, uint64_t first,
		       size_t n, uint8_t *out, size_t cap, size_t *pos, struct stor_send_cursor *cur)
{
	size_t rs = h->recsize, take = 0;
	struct bp bps[SEND_BATCH];
	int found[SEND_BATCH];
	unsigned char act[SEND_BATCH];
	uint8_t *buf;
	int ret = 0;

	while (take < n && *pos + (take + 1) * (STREAM_REC_LEN + rs) + STREAM_END_LEN <= cap)
		take++;
	if (!take)
		return 0;
	if (f) {
		unsigned slot = txg_read_enter(p);

		ret = classify(p, h, f, first, take, bps, found, act);
		txg_read_exit(p, slot);
		if (ret < 0)
			return ret;
	}
	buf = malloc(take * rs);
	if (!buf)
		return -ENOMEM;
	if (!f)
		ret = stor_ds_read(h, first * rs, buf, take * rs);
	/* an incremental reads only what it sends, a run at a time */
	for (size_t i = 0, j; f && ret == 0 && i < take; i = j) {
		for (j = i + 1; act[i] == SEND && j < take && act[j] == SEND; j++)
			;
		if (act[i] == SEND)
			ret = stor_ds_read(h, (first + i) * rs, buf + i * rs, (j - i) * rs);
	}
	for (size_t i = 0; f && ret == 0 && i < take; i++)
		if (act[i] == SEND && all_zero(buf + i * rs, rs))
			act[i] = FREE;
	for (size_t i = 0; ret == 0 && i < take; i++) {
		struct stream_rec r = { .recno = first + i, .len = (uint32_t)rs };
		uint64_t sum;

		if (f && act[i] == FREE) {
			size_t run = put_free(first, act, i, take, out + *pos, cur);

			*pos += STREAM_FREE_LEN;
			i += run - 1;
			continue;
		}
		if (f ? act[i] != SEND : all_zero(buf + i * rs, rs))
			continue;
		memcpy(out + *pos + STREAM_REC_LEN, buf + i * rs, rs);
		stream_rec_put(&r, out + *pos + STREAM_REC_LEN, out + *pos, &sum);
		*pos += STREAM_REC_LEN + rs;
		chained(cur, sum);
	}
	explicit_bzero(buf, take * rs);
	free(buf);
	return ret < 0 ? ret : (int)take;
}

/* Open @from, the snapshot an incremental of @h starts from, checked. */
static int open_from(struct stor_pool *p, struct stor_ds *h, const char *from, int resume,
		     const struct stor_send_cursor *cur, struct stor_ds **f)
{
	int ret = stor_ds_open(p, from, f);

	if (ret == -ENOENT || (ret == 0 && !(*f)->snap))
		pool_set_error("%s: no such snapshot to send an incremental from", from);
	if (ret == 0 && !(*f)->snap)
		ret = -ENOENT;
	if (ret < 0)
		return ret;
	if ((*f)->head != h->head || (*f)->snap->txg >= h->snap->txg) {
		pool_set_error("%s is not an earlier snapshot of the dataset of %s", from, h->name);
		return -EINVAL;
	}
	if (cur->state != CUR_HEADER && cur->from_guid != (*f)->snap->guid) {
		pool_set_error("%s was destroyed or replaced during the send", from);
		return -ESTALE;
	}
	if (cur->state == CUR_HEADER && resume && cur->from_guid != (*f)->snap->guid) {
		pool_set_error("%s is not the snapshot the resume token's incremental starts from "
			       "(guid %016llx there, %016llx here)", from,
			       (unsigned long long)cur->from_guid,
			       (unsigned long long)(*f)->snap->guid);
		return -ESTALE;
	}
	return 0;
}

/*
 * Open @snapshot (and @from) for a send, with every refusal a send makes
 * before its first record: the handles in *@h, *@f (NULL for a full
 * stream), and whether the stream is raw in *@raw. The cursor's checks
 * (a snapshot replaced since the first chunk) need @cur; NULL: a new one.
 */
static int send_open(struct stor_pool *p, const char *snapshot, const char *from,
		     unsigned flags, const struct stor_send_cursor *cur, struct stor_ds **h,
		     struct stor_ds **f, int *raw)
{
	static const struct stor_send_cursor fresh = { 0 };
	int ret, resume = !!(flags & STOR_SEND_RESUME);

	*h = *f = NULL;
	if (!cur)
		cur = &fresh;
	if (!strchr(snapshot, '@')) {
		pool_set_error("send takes a snapshot, DATASET@NAME");
		return -EINVAL;
	}
	ret = stor_ds_open(p, snapshot, h);
	if (ret == -ENOENT && cur->state != CUR_HEADER)
		pool_set_error("%s was destroyed or renamed during the send; send it again under "
			       "its name now", snapshot);
	if (ret < 0)
		return ret;
	/* a raw stream of a clear dataset is its plain stream, as in zfs */
	*raw = (flags & STOR_SEND_RAW) && (*h)->suite;
	if (cur->state != CUR_HEADER && cur->guid != (*h)->snap->guid) {
		pool_set_error("%s was destroyed or replaced during the send", snapshot);
		return -ESTALE;
	}
	/* send -t: the token names the snapshot by its GUID, and an
	 * incremental's FROM; a snapshot of that name made anew is another */
	if (cur->state == CUR_HEADER && resume &&
	    (cur->guid != (*h)->snap->guid || !cur->from_guid != !from ||
	     cur->next > atomic_load(&(*h)->volsize) / (*h)->recsize)) {
		pool_set_error("%s is not the snapshot the resume token was made for (guid "
			       "%016llx there, %016llx here%s): it was destroyed, or made anew",
			       snapshot, (unsigned long long)cur->guid,
			       (unsigned long long)(*h)->snap->guid,
			       !cur->from_guid != !from ? "; or the incremental's FROM differs" : "");
		return -ESTALE;
	}
	if (from) {
		ret = open_from(p, *h, from, resume, cur, f);
		if (ret < 0)
			return ret;
	}
	/* a raw stream keeps one GUID, the source's: records a clone reads from
	 * its origin, or that a promote brought over, were sealed under another,
	 * and the walk below sees only the dataset's own tables */
	if (*raw && ((*h)->head->origin || (*h)->head->nsealers)) {
		pool_set_error("%s: a raw send of a clone, or of a dataset made the origin by "
			       "promote, is not supported yet; send it without -w", snapshot);
		return -ENOTSUP;
	}
	/* its snapshots' view roots are made anew when the rekey ends */
	if (*raw && rekey_under_way((*h)->head)) {
		rekey_busy_error((*h)->head, "send it raw");
		return -EBUSY;
	}
	if (cur->state == CUR_HEADER && !*raw && (*h)->suite && !atomic_load(&(*h)->head->keys)) {
		pool_set_error("%s: its key is not loaded; load it, or send it raw (-w)", snapshot);
		return STOR_ENOKEY;
	}
	return 0;
}

int stor_send_chunk(struct stor_pool *p, const char *snapshot, const char *from, unsigned flags,
		    struct stor_send_cursor *cur, uint8_t *out, size_t cap, size_t *len)
{
	struct stor_ds *h = NULL, *f = NULL;
	uint64_t nrec;
	size_t pos = 0;
	int ret, raw = 0, resume = !!(flags & STOR_SEND_RESUME);

	*len = 0;
	pool_clear_error();
	if (cur->state == CUR_DONE)
		return 0;
	if (cap < STOR_SEND_CHUNK_MIN || cur->state > CUR_DONE)
		return -EINVAL;
	ret = send_open(p, snapshot, from, flags, cur, &h, &f, &raw);
	if (ret < 0)
		goto out;
	if (cur->state == CUR_HEADER) {
		if (!resume)
			cur->next = 0;
		ret = header(p, h, f, (unsigned)raw, (unsigned)resume, out, cur);
		if (ret < 0)
			goto out;
		pos = STREAM_HDR_LEN + (resume ? STREAM_RESUME_LEN : 0);
		cur->state = CUR_RECORDS;
	}
	nrec = atomic_load(&h->volsize) / h->recsize;
	while (cur->next < nrec) {
		size_t n = nrec - cur->next < SEND_BATCH ? (size_t)(nrec - cur->next) : SEND_BATCH;

		ret = raw ? raw_batch(p, h, f, cur->next, n, out, cap, &pos, cur)
			  : plain_batch(p, h, f, cur->next, n, out, cap, &pos, cur);
		if (ret < 0)
			goto out;
		if (ret == 0)
			break; /* the chunk is full */
		cur->next += (uint64_t)ret;
	}
	if (cur->next >= nrec) {
		stream_end_put(cur->parts, cur->chain, out + pos);
		pos += STREAM_END_LEN;
		cur->state = CUR_DONE;
	}
	*len = pos;
	ret = 0;
out:
	stor_ds_close(f);
	stor_ds_close(h);
	return ret;
}

/*
 * The dry run of a send: the same walk over record numbers and the same
 * classify() as the batches above, counting what each would write instead
 * of reading it. A raw record is its stored size (psize), a plain one the
 * record size; a run of frees is one part per batch, as put_free() makes.
 */
int stor_send_estimate(struct stor_pool *p, const char *snapshot, const char *from,
		       unsigned flags, struct stor_send_estimate *est)
{
	struct stor_ds *h = NULL, *f = NULL;
	struct bp *bps = NULL;
	int *found = NULL, ret, raw = 0;
	unsigned char act[SEND_BATCH];
	uint64_t nrec;

	memset(est, 0, sizeof(*est));
	pool_clear_error();
	ret = send_open(p, snapshot, from, flags, NULL, &h, &f, &raw);
	if (ret < 0)
		goto out;
	bps = malloc(SEND_BATCH * sizeof(*bps));
	found = malloc(SEND_BATCH * sizeof(*found));
	if (!bps || !found) {
		ret = -ENOMEM;
		goto out;
	}
	est->bytes = STREAM_HDR_LEN + STREAM_END_LEN;
	nrec = atomic_load(&h->volsize) / h->recsize;
	for (uint64_t first = 0; first < nrec && ret == 0; first += SEND_BATCH) {
		size_t n = nrec - first < SEND_BATCH ? (size_t)(nrec - first) : SEND_BATCH;
		unsigned slot = txg_read_enter(p);

		ret = classify(p, h, f, first, n, bps, found, act);
		/* a clone's full plain stream carries what it reads through its
		 * origin too, which none of its own tables holds */
		for (size_t i = 0; i < n && ret == 0 && !raw && !f && h->head->origin; i++)
			if (!found[i] && clone_shared_psize(p, h->head, first + i))
				act[i] = SEND;
		txg_read_exit(p, slot);
		for (size_t i = 0; i < n && ret == 0; i++) {
			if (act[i] == SEND) {
				est->records++;
				est->bytes += STREAM_REC_LEN + (raw ? bps[i].psize : h->recsize);
			} else if (act[i] == FREE && (!i || act[i - 1] != FREE)) {
				est->frees++;
				est->bytes += STREAM_FREE_LEN;
			}
		}
	}
out:
	if (ret < 0)
		memset(est, 0, sizeof(*est));
	free(bps);
	free(found);
	stor_ds_close(f);
	stor_ds_close(h);
	return ret;
}
