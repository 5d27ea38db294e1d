/* SPDX-License-Identifier: MIT */
/*
 * receive: a send stream (stream.h) into a new dataset, or an incremental
 * onto the one it continues, all or nothing.
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
 *   with no MAC key. The stream's view root becomes the snapshot's view
 *   root and the head's root, and the mark says RECV_MACS: the first
 *   load-key, which alone can compute MACs, builds the tree from the
 *   pointers (recv_build_macs) before the key is installed, refuses the
 *   dataset unless the head comes out with that root and every snapshot
 *   reads as its view root, and clears the mark. Each pointer must be
 *   encrypted then (a clear one is EAUTH), and every read checks its
 *   record's tag. stream.h says why no nonce repeats. The mark itself is
 *   unauthenticated and needs no authentication: added to any dataset, it
 *   makes the load-key check the whole tree against the roots it has,
 *   which a changed pointer fails as the lazy checks would.
 *   A pool holds one dataset of a GUID: a second raw copy is refused.
 *   The open txg is moved past the stream's newest birth first, so every
 *   snapshot taken here later is newer than every record received; a
 *   stream that would move it more than STREAM_TXG_AHEAD is refused, as
 *   is one whose snapshot has a GUID of a dataset of the pool (fits_pool).
 *   A side of a mirror out of service at the start or the end of a raw
 *   receive fails it: a resilver copies what was born since the side went
 *   out, and these records were born elsewhere, earlier.
 * - The snapshot: a receive ends by making the stream's snapshot, with the
 *   stream's guid, in the commit that sets the mark to what it ends as
 *   (snap_create_received), so the data and the snapshot come together or
 *   not at all. A raw stream's snapshot takes the source's txg, so that its
 *   records (the source's births) are exactly those born by it.
 * - Incremental: onto the existing dataset, whose newest snapshot must be
 *   the stream's FROM (its guid) and which must not have changed since (no
 *   pointer born after FROM, none FROM keeps, the same volsize); -F rolls
 *   it back to FROM first, newer snapshots too, as zfs receive -F does.
 *   The dataset is claimed (receiving: no one else opens it or its
 *   snapshots) and marked RECV_INCR before anything in it changes; records
 *   and frees are staged on its head, so an overwrite keeps FROM's version
 *   in FROM's table as any write does. A failure, a close before the end or
 *   a crash (recv_cleanup at the import) rolls it back to its newest
 *   snapshot, FROM, which frees everything the stream staged; nothing of
 *   the stream stays and the snapshot was never made. Limit: with -F a
 *   receive that then fails leaves the target at FROM, not as it was before
 *   the rollback (zfs receives beside, into a clone; clone.c's clones of a
 *   raw dataset would be sealed under another GUID).
 * - A raw incremental is refused when the target is another dataset (its
 *   GUID), its FROM was not received raw (its txg is not the stream's), or
 *   its key changed on either side since FROM: the target's wrapped key and
 *   key parameters must be the stream's. Applying records and a wrapped
 *   key that disagree is where OpenZFS lost datasets (#12614, #12000): the
 *   copy must stay openable by the one passphrase it was received with.
 * - The MAC tree of a raw incremental is built from the pointers and
 *   checked, as after a full raw receive: the records come with no MAC
 *   (the sender has no key), so the receive stages them with none
 *   (macs_later, which also keeps txg.c from MACing FROM's kept pointers
 *   without a key) and ends with the mark RECV_MACS and the stream's view
 *   root as the head's root and the new snapshot's; the first load-key
 *   checks it all (recv_build_macs). When the key is loaded on the receiver
 *   the tree is built and checked against the stream's root at once,
 *   before the snapshot is made: a stream that does not match is refused
 *   and undone as any failed receive. A rollback made without MACs (a
 *   failed or cut raw incremental) leaves the head reading as its newest
 *   snapshot, so it takes that snapshot's view root (head_is_view).
 * - A package (-I) is its streams one after another: each is received as
 *   above, on its own, and the next begins where one ends. Bytes after a
 *   full stream are refused, and undo it, as before.
 * - Resumable (STOR_RECV_RESUMABLE, zfs receive -s): once the header is
 *   checked and the target made or claimed, its resume state is saved
 *   beside its mark (recv_state.h: the header as it came and the record
 *   number the rest starts at). A cut (a close before the end, a failure
 *   past the header) then writes and commits what was applied, saves that
 *   number and keeps the dataset, marked as before and "partial": closed
 *   to every opener, snapshot, clone, rollback and new stream, each
 *   refusal naming the token and -A (recv_busy_error). A crash keeps it
 *   too: the import finds the state beside the mark (recv_cleanup). While
 *   the stream goes, the state follows the commits (checkpoint), so after
 *   a crash it names nothing the pool lacks. The receive_resume_token (the
 *   property, common/resume_token.c) is that state's identity and number.
 *   A resumed stream (stream.h: STREAM_F_RESUME and a resume part) is
 *   taken only onto a partial target whose saved header is its own
 *   (stream_hdr_same) and only at the saved number; what came before it is
 *   not sent again. stor_recv_abandon (receive -A) undoes the state as a
 *   cut without -s would have.
 * - Why a resumed stream cannot splice in records of another snapshot
 *   (an attacker holding the stream and the token): the token is no
 *   credential, only a name; the receiver never trusts it, but compares
 *   the resumed header with the one it kept, all of it (dataset and
 *   snapshot GUIDs, txgs, FROM, raw or not, sizes, the wrapped key and key
 *   parameters, the view root), and wants the rest to start at its own
 *   number. A raw stream's records are then bound as in a whole stream:
 *   each record's tag to the dataset GUID, record number and birth, and
 *   the set of records of both parts to the view root of the kept header,
 *   which the first load-key checks the whole tree against (or the end of
 *   a raw incremental under a loaded key): records of another snapshot,
 *   one dropped or an older one fail it, exactly as in a stream received
 *   whole, and a header forged to match another snapshot's would carry
 *   that snapshot's root, not the kept one, and is refused. A plain stream
 *   is as sound as a whole plain stream: its checksums catch damage and
 *   mix-ups (a token of another snapshot, a resumed stream of another
 *   send), never a forger, who can rewrite a whole plain stream too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/cache.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/hash.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/recv_state.h"
#include "ds/snapshot.h"
#include "io/record.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "send/recv.h"
#include "send/stream.h"
#include "txg/bpmac.h"

#define RECV_BATCH 32u
#define RECV_BATCH_BYTES (4u << 20) /* or fewer records of a large recordsize */

struct stor_recv {
	struct stor_pool *p;
	char name[STOR_NAME_MAX + 1];
	unsigned flags;
	struct stor_ds *ds; /* created, open, marked */
	char tmp[STOR_NAME_MAX + 1]; /* -F over an existing dataset: the name received under */
	struct stream_hdr h;
	int have_hdr, done, failed;
	int incr; /* r->ds is an incremental's target: a failure rolls it back */
	uint64_t chain, parts, next; /* next: the lowest record number still allowed */
	/* receive -s (the head comment's "Resumable") */
	int resumable;  /* a cut keeps the state (-s, or a resumed stream) */
	int resumed;    /* a resumed stream: 1 its resume part is due, 2 it was read */
	int have_state; /* the resume state is saved, so a cut can keep it */
	uint64_t applied; /* every record below it is applied (staged or batched) */
	uint64_t saved;   /* the next record number the saved state names */
	uint64_t ck_txg, ck_next; /* a checkpoint waiting for txg ck_txg to commit */
	uint8_t hdr[STREAM_HDR_LEN]; /* the stream's header as first sent (no resume flag) */
	uint8_t *part;               /* the part being gathered */
	size_t plen;
	struct stream_rec rec; /* the fixed part of the record being gathered */
	/* raw: records to write in one batch */
	size_t nb, nbytes;
	uint64_t recnos[RECV_BATCH];
	struct bp bps[RECV_BATCH];
	uint8_t *bufs[RECV_BATCH];
};

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

	*out = NULL;
	pool_clear_error();
	if ((flags & STOR_RECV_RESUMABLE) && (flags & STOR_FORCE)) {
		pool_set_error("receive -s does not go with -F: receive the stream with one of them");
		return -EINVAL;
	}
	if (stor_name_check(name, STOR_NAME_DATASET) < 0 || strncmp(name, p->name, plen) ||
	    name[plen] != '/') {
		pool_set_error("receive needs a dataset of pool %s, POOL/NAME", p->name);
		return STOR_EBADNAME;
	}
	r = calloc(1, sizeof(*r));
	if (!r || !(r->part = malloc(STREAM_PART_MAX))) {
		free(r);
		return -ENOMEM;
	}
	r->p = p;
	r->flags = flags;
	r->resumable = !!(flags & STOR_RECV_RESUMABLE);
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
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		if (atomic_load(&p->luns[i].state) == SIDE_DETACHED)
			continue; /* an index kept, no side: nothing to resilver */
		if (atomic_load(&p->luns[i].out) != SIDE_IN || atomic_load(&p->luns[i].missing_since))
			return 0;
	}
	return 1;
}

/* A stream that is not the rest of the one @ds holds part of. */
static void partial_refused(const struct stor_ds *ds)
{
	pool_set_error("%s holds a partial receive (a receive -s cut short); a new stream is "
		       "refused: resume it with 'coffer send -t TOKEN | coffer receive -s %s', "
		       "TOKEN its receive_resume_token property, or abandon it with 'coffer "
		       "receive -A %s'", ds->name, ds->name, ds->name);
}

static int create(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	struct recv_identity as = { .raw = !!(r->h.flags & STREAM_F_RAW), .guid = r->h.guid,
				    .suite = r->h.suite, .keyformat = r->h.keyformat,
				    .iters = r->h.iters,
				    .keygen = (r->h.flags & STREAM_F_KEYGEN1) ? 1u : 0u };
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
	memcpy(as.kids_empty, r->h.kids, sizeof(as.kids_empty));
	if (as.raw && !sides_sound(p)) {
		pool_set_error("a mirror side of pool %s is out of service; a raw receive waits "
			       "for the resilver", p->name);
		return -EBUSY;
	}
	pthread_mutex_lock(&p->admin);
	old = ds_find_locked(p, r->name);
	if (old && atomic_load(&old->partial)) {
		partial_refused(old);
		ret = -EBUSY;
	} else if (old && !(r->flags & STOR_FORCE)) {
		pool_set_error("%s exists; use -F to replace it", r->name);
		ret = -EEXIST;
	}
	/* -F: received beside the dataset it replaces, which stays until the
	 * stream is whole; one that could not be destroyed then is refused now */
	if (ret == 0 && old && r->flags & STOR_FORCE) {
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
	for (size_t i = 0; ret == 0 && as.raw && i < p->nds; i++)
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
		txg_advance(p, r->h.to_txg + 1);
	return 0;
}

/* Does the target's key differ from the stream's (a change-key since FROM,
 * on either side)? Admin lock held. */
static int key_changed(struct stor_pool *p, const struct stor_ds *ds, const struct stream_hdr *h)
{
	const struct stor_ds *root;

	STOR_ASSERT_HELD(&p->admin);
	root = ds_find_id_locked(p, ds->enc_root_id);
	return root != ds || memcmp(ds->wrapped, h->wrapped, sizeof(h->wrapped)) ||
	       ds->keygen != ((h->flags & STREAM_F_KEYGEN1) ? 1u : 0u) ||
	       root->keyformat != h->keyformat || root->iters != h->iters ||
	       memcmp(root->salt, h->salt, sizeof(h->salt));
}

/*
 * Which of the target's snapshots the stream starts from, checked (admin
 * lock held): it must be there, the stream's snapshot not, and a raw
 * stream must be of this very dataset, under the same key.
 */
static int check_target(struct stor_recv *r, struct stor_ds *ds, struct snap **from)
{
	struct stor_pool *p = r->p;
	const struct stream_hdr *h = &r->h;
	struct snap *newest;
	size_t n = strlen(ds->name);

	STOR_ASSERT_HELD(&p->admin);
	newest = ds->nsnaps ? ds->snaps[ds->nsnaps - 1] : NULL;
	*from = NULL;
	if (atomic_load(&ds->partial)) {
		partial_refused(ds);
		return -EBUSY;
	}
	if (atomic_load(&ds->receiving) || atomic_load(&ds->refs) > 0) {
		pool_set_error("%s is open or being received", ds->name);
		return -EBUSY;
	}
	for (size_t i = 0; i < ds->nsnaps; i++) {
		if (ds->snaps[i]->guid == h->from_guid)
			*from = ds->snaps[i];
		if (!strcmp(ds->snaps[i]->name + n + 1, h->snapname)) {
			pool_set_error("%s@%s exists already", ds->name, h->snapname);
			return -EEXIST;
		}
	}
	if (!*from) {
		pool_set_error("%s has no snapshot this incremental stream starts from (guid "
			       "%016llx); its newest is %s", ds->name,
			       (unsigned long long)h->from_guid, newest ? newest->name : "none");
		return -ENOENT;
	}
	if (h->flags & STREAM_F_RAW) {
		if (!ds->suite || ds->guid != h->guid) {
			pool_set_error("%s is not this raw stream's dataset (guid %016llx here, "
				       "%016llx in the stream)", ds->name,
				       (unsigned long long)ds->guid, (unsigned long long)h->guid);
			return -EINVAL;
		}
		if ((*from)->txg != h->from_txg) {
			pool_set_error("%s was not received raw from this stream's source (txg %llu "
				       "here, %llu in the stream)", (*from)->name,
				       (unsigned long long)(*from)->txg,
				       (unsigned long long)h->from_txg);
			return -EINVAL;
		}
		if (key_changed(p, ds, h)) {
			pool_set_error("%s: its key was changed or rekeyed since %s, here or on the "
				       "source: its wrapped key or key parameters are not the "
				       "stream's; a raw incremental needs the same key, send a full "
				       "stream",
				       ds->name, (*from)->name);
			return -EPERM;
		}
	} else if (ds->suite && !atomic_load(&ds->keys)) {
		pool_set_error("%s: its key is not loaded; load it to receive a plain stream",
			       ds->name);
		return STOR_ENOKEY;
	}
	if (h->recsize != ds->recsize || h->volsize != (*from)->volsize) {
		pool_set_error("%s: the stream's recordsize %u or volsize %llu is not %s's; an "
			       "incremental does not change them", ds->name, h->recsize,
			       (unsigned long long)h->volsize, (*from)->name);
		return -EINVAL;
	}
	return 0;
}

/* Has the target moved on since @from (newer snapshots, or its head)?
 * Refused unless -F. Admin lock held, the target claimed, all committed. */
static int check_unchanged(struct stor_recv *r, struct snap *from, int *changed)
{
	struct stor_ds *ds = r->ds;
	int newer;

	STOR_ASSERT_HELD(&r->p->admin);
	newer = from != ds->snaps[ds->nsnaps - 1];
	*changed = newer || snap_head_changed(r->p, ds, from);
	if (*changed && !(r->flags & STOR_FORCE)) {
		pool_set_error(newer ? "%s has snapshots newer than %s; use -F to roll it back"
				     : "%s was changed since %s; use -F to roll it back",
			       ds->name, from->name);
		return -EEXIST;
	}
	return 0;
}

/* Let go of a target nothing was changed in. */
static void release(struct stor_recv *r)
{
	atomic_store(&r->ds->receiving, 0);
	stor_ds_close(r->ds);
	r->ds = NULL;
	r->incr = 0;
}

/*
 * An incremental's header is checked: its target takes it. The target is
 * claimed (receiving, a handle of ours) and marked RECV_INCR before
 * anything changes in it, so a failure, a close before the end or a crash
 * rolls it back to FROM (undo_incr); with -F a target that moved on is
 * rolled back to FROM first, as zfs receive -F does.
 */
static int attach(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	int raw = !!(r->h.flags & STREAM_F_RAW), changed = 0, prev, ret;
	char fromname[STOR_NAME_MAX + 2];
	struct stor_ds *ds;
	struct snap *from;

	if (!p)
		return 0;
	if (raw && !sides_sound(p)) {
		pool_set_error("a mirror side of pool %s is out of service; a raw receive waits "
			       "for the resilver", p->name);
		return -EBUSY;
	}
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, r->name);
	ret = ds ? check_target(r, ds, &from) : -ENOENT;
	if (!ds)
		pool_set_error("%s does not exist; an incremental stream goes onto the dataset "
			       "that holds the snapshot it starts from", r->name);
	if (ret == 0) {
		/* no one opens it from here, so what is staged now is all there is */
		snprintf(fromname, sizeof(fromname), "%s", from->name);
		atomic_store(&ds->receiving, 1);
		atomic_fetch_add(&ds->refs, 1);
		r->ds = ds;
		r->incr = 1;
	}
	pthread_mutex_unlock(&p->admin);
	if (ret < 0)
		return ret;
	ret = txg_sync(p, 0); /* the check reads what is committed */
	if (ret == 0) {
		pthread_mutex_lock(&p->admin);
		from = NULL;
		for (size_t i = 0; i < ds->nsnaps; i++)
			if (!strcmp(ds->snaps[i]->name, fromname))
				from = ds->snaps[i];
		ret = from ? check_unchanged(r, from, &changed) : -ENOENT;
		if (!from)
			pool_set_error("%s was destroyed as the receive began", fromname);
		pthread_mutex_unlock(&p->admin);
	}
	/* the mark it had (RECV_MACS: a raw copy whose tree waits), kept if
	 * the receive lets go of it before changing anything */
	prev = ret == 0 ? recv_mark_of(p, ds->id) : 0;
	if (prev < 0)
		ret = prev;
	if (ret == 0)
		ret = recv_mark(p, ds->id, RECV_INCR);
	if (ret == 0 && changed) {
		unsigned nomacs = ds->suite && !atomic_load(&ds->keys) ? SNAP_NOMACS : 0;

		/* refused (a newer snapshot has clones, say): nothing was rolled back */
		ret = stor_snap_rollback(p, fromname, STOR_RECURSIVE | SNAP_HELD | nomacs);
		if (ret < 0)
			recv_mark(p, ds->id, (unsigned)prev);
		else if (nomacs)
			atomic_store(&ds->macs_later, 1);
	}
	if (ret < 0) {
		release(r);
		return ret;
	}
	if (raw) {
		/* the raw pointers carry no MAC: the tree is built at the end */
		atomic_store(&ds->macs_later, 1);
		txg_advance(p, r->h.to_txg + 1);
	}
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

struct present {
	uint64_t id, end, *recnos;
	size_t n, cap;
};

static int present_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct present *pr = ctx;
	const uint8_t *k = key;
	uint64_t id, recno;
	uint64_t *a;

	(void)val, (void)vlen;
	if (klen != BP_KEY_LEN)
		return STOR_ECORRUPT;
	id = get_u64(&k);
	recno = get_u64(&k);
	if (id != pr->id || recno >= pr->end)
		return 1; /* past the range */
	a = array_grow(pr->recnos, pr->n, &pr->cap, sizeof(*a), 256);
	if (!a)
		return -ENOMEM;
	pr->recnos = a;
	pr->recnos[pr->n++] = recno;
	return 0;
}

/*
 * A free of records [first, first + count): each one the target holds
 * becomes a hole. Only those it holds are looked at (its committed
 * pointers in the range: the stream's own records come in a strictly
 * increasing order, so none of them is in it), never every number of the
 * range, which the stream's count could make as large as the volume.
 */
static int take_free(struct stor_recv *r, uint64_t first, uint64_t count)
{
	struct present pr = { .id = r->ds ? r->ds->id : 0, .end = first + count };
	struct meta_txn *t = NULL;
	uint8_t from[BP_KEY_LEN];
	int ret;

	if (!r->p)
		return 0;
	bp_key(r->ds->id, first, from);
	ret = meta_rtxn_get(r->p->meta, &t);
	if (ret < 0)
		return ret;
	ret = meta_iter_from(t, META_BP, from, sizeof(from), present_one, &pr);
	meta_rtxn_put(t);
	for (size_t i = 0; i < pr.n && ret >= 0; i++) {
		if (!(r->h.flags & STREAM_F_RAW)) {
			ret = stor_ds_discard(r->ds, pr.recnos[i] * r->h.recsize, r->h.recsize);
			continue;
		}
		r->recnos[r->nb] = pr.recnos[i];
		r->bps[r->nb] = (struct bp){ .flags = BP_F_HOLE };
		r->bufs[r->nb++] = NULL; /* record_write_stored: a hole */
		ret = r->nb == RECV_BATCH ? flush_raw(r) : 0;
	}
	free(pr.recnos);
	return ret < 0 ? ret : 0;
}

/* The snapshot the stream names, in the commit that sets the mark to
 * @mark (its state once received); a raw stream's view root becomes the
 * snapshot's and the head's (snapshot.c). */
static int make_snapshot(struct stor_recv *r, unsigned mark)
{
	struct snap_recv as = { .guid = r->h.to_guid,
				.txg = r->h.flags & STREAM_F_RAW ? r->h.to_txg : 0,
				.nomacs = atomic_load(&r->ds->macs_later) ||
					  (r->h.flags & STREAM_F_RAW && !r->incr),
				.mark_id = r->ds->id, .mark = mark,
				.have_view = !!(r->h.flags & STREAM_F_RAW) };

	int ret;

	memcpy(as.view, r->h.view, sizeof(as.view));
	ret = ds_list_join(r->p, r->ds, &as.join);
	if (ret == 0)
		ret = snap_create_received(r->p, r->ds, r->h.snapname, &as);
	mac_key_put(as.join.mk);
	if (ret == 0)
		r->ds->unlisted = 0;
	return ret;
}

/*
 * An incremental is in: its snapshot. A raw one's pointers came without
 * MACs: under a loaded key the tree is built and checked against the
 * stream's view root first, so a stream that does not match it is refused
 * (and undone) before its snapshot is made; without the key the tree
 * waits for the next load-key (RECV_MACS), which checks the same.
 */
static int finish_incr(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	struct stor_ds *ds = r->ds;
	int later = atomic_load(&ds->macs_later), ret = 0;
	struct ds_keys *k;

	pthread_mutex_lock(&p->admin);
	k = atomic_load(&ds->keys);
	if (later && k) {
		/* the mark stays RECV_INCR: a crash before the snapshot undoes it */
		ret = recv_build_macs(p, ds, k, r->h.view, RECV_BUILD_KEEP_MARK);
		if (ret == 0)
			later = 0;
	}
	pthread_mutex_unlock(&p->admin);
	if (ret < 0)
		return ret;
	atomic_store(&ds->macs_later, later);
	ret = make_snapshot(r, later ? RECV_MACS : 0);
	if (ret < 0)
		return ret;
	r->done = 1;
	atomic_store(&ds->macs_later, 0);
	atomic_store(&ds->receiving, 0);
	return 1;
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
	if (ret == 0 && r->incr)
		return finish_incr(r);
	if (ret == 0 && r->tmp[0]) {
		/* the stream is whole: now the dataset it replaces goes */
		ret = stor_ds_destroy(p, r->name, 0);
		if (ret == 0 || ret == -ENOENT)
			ret = ds_rename_received(p, r->ds, r->name, RECV_RECEIVING);
	}
	/* its snapshot, and the mark it ends with, in one commit */
	if (ret == 0)
		ret = make_snapshot(r, raw ? RECV_MACS : 0);
	if (ret < 0)
		return ret;
	atomic_store(&r->ds->receiving, 0);
	r->done = 1;
	return 1;
}

/*
 * What no stream may do to this pool, whatever its checksums: give its
 * snapshot the GUID of a dataset here (a snapshot's MAC table is keyed by
 * its GUID, as a head's by its dataset's), or, raw, move the pool's txg
 * (which it advances past the stream's) further than STREAM_TXG_AHEAD.
 */
static int fits_pool(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	const struct stream_hdr *h = &r->h;
	uint64_t txg;
	int ret = 0;

	if (!p)
		return 0;
	txg = atomic_load(&p->synced_txg);
	if (h->flags & STREAM_F_RAW && h->to_txg > txg + STREAM_TXG_AHEAD) {
		pool_set_error("send stream's snapshot is at txg %llu, more than 2^40 past pool "
			       "%s's txg %llu, which a raw receive would move there",
			       (unsigned long long)h->to_txg, p->name, (unsigned long long)txg);
		return -ERANGE;
	}
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds && ret == 0; i++)
		if (p->ds[i]->guid == h->to_guid) {
			pool_set_error("send stream's snapshot has the GUID of dataset %s",
				       p->ds[i]->name);
			ret = STOR_ECORRUPT;
		}
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/* ---- receive -s: the state a cut keeps, and a resumed stream ---- */

static_assert(STREAM_HDR_LEN <= RECV_HDR_MAX, "the resume state keeps a whole header");

/* Save the resume state: the stream's header and @next, the record number
 * the rest starts at (nothing below it may be missing from what is
 * committed: the callers make sure). */
static int save_state(struct stor_recv *r, uint64_t next)
{
	struct recv_resume rs = {
		.id = { .flags = (r->h.flags & STREAM_F_RAW ? STOR_RESUME_RAW : 0) |
				 (r->h.flags & STREAM_F_INCREMENTAL ? STOR_RESUME_INCR : 0),
			.guid = r->h.guid, .to_guid = r->h.to_guid, .from_guid = r->h.from_guid,
			.to_txg = r->h.to_txg, .next = next },
		.hdr_len = STREAM_HDR_LEN,
	};
	int ret;

	memcpy(rs.hdr, r->hdr, STREAM_HDR_LEN);
	ret = recv_resume_save(r->p, NULL, r->ds->id, &rs);
	if (ret == 0) {
		r->have_state = 1;
		r->saved = next;
	}
	return ret;
}

/*
 * The saved state follows what is durable, at the txgs' pace and never
 * ahead: when nothing waits in the batch, the open txg and the record
 * number reached are taken as a candidate (every record below it is in
 * that txg or an earlier one), and saved once that txg has committed. A
 * crash then loses at most what came since; what was committed past the
 * saved number is sent again and overwritten with the same records.
 */
static int checkpoint(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	int ret;

	if (!p || !r->have_state || r->nb)
		return 0;
	if (r->ck_txg && atomic_load(&p->synced_txg) >= r->ck_txg) {
		ret = save_state(r, r->ck_next);
		if (ret < 0)
			return ret;
		r->ck_txg = 0;
	}
	if (!r->ck_txg && r->applied > r->saved) {
		r->ck_txg = txg_hold(p);
		txg_rele(p);
		r->ck_next = r->applied;
	}
	return 0;
}

/*
 * A receive -s stops before its end: what was applied is committed and the
 * state names where the rest starts; the dataset stays closed to use, as a
 * partial receive (recv_busy_error says what to do). A failure to write
 * or commit the last records keeps the state saved before them.
 */
static void keep(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	int ret;

	ret = flush_raw(r);
	if (ret == 0)
		ret = txg_sync(p, 0);
	if (ret == 0 && r->applied > r->saved)
		save_state(r, r->applied);
	/* the state's own row reaches the LUNs with a commit */
	txg_sync(p, 0);
	atomic_store(&r->ds->partial, 1);
	stor_ds_close(r->ds);
	r->ds = NULL;
}

/* A resumed stream gave up its target before anything changed: it stays partial. */
static void unclaim(struct stor_recv *r)
{
	atomic_store(&r->ds->partial, 1);
	stor_ds_close(r->ds);
	r->ds = NULL;
	r->incr = 0;
}

/*
 * A resumed stream's header is checked: the target must hold the partial
 * state of a stream with this very header (bar the resume flag), whose
 * record number the resume part must then name. The target is claimed
 * (partial no more, still receiving: no one else opens it) for the rest.
 */
static int resume(struct stor_recv *r)
{
	struct stor_pool *p = r->p;
	int raw = !!(r->h.flags & STREAM_F_RAW), ret = 0;
	struct recv_resume rs;
	struct stream_hdr kept;
	struct stor_ds *ds;
	uint64_t sum;

	r->resumed = 1;
	if (!p)
		return 0;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, r->name);
	if (!ds) {
		pool_set_error("%s does not exist: a resumed stream (send -t) goes on with the "
			       "partial receive it was sent for, into the same dataset", r->name);
		ret = -ENOENT;
	} else if (atomic_load(&ds->receiving) && !atomic_load(&ds->partial)) {
		pool_set_error("%s is being received; wait for the receive to end", r->name);
		ret = -EBUSY;
	} else if (!atomic_load(&ds->partial)) {
		pool_set_error("%s holds no partial receive to resume (it was finished or "
			       "abandoned, or never cut short): send the whole stream", r->name);
		ret = -ENOENT;
	} else {
		atomic_store(&ds->partial, 0);
		atomic_fetch_add(&ds->refs, 1);
		r->ds = ds;
	}
	pthread_mutex_unlock(&p->admin);
	if (ret < 0)
		return ret;
	ret = recv_resume_load(p, ds->id, &rs);
	if (ret == 0 && (rs.hdr_len != STREAM_HDR_LEN || stream_hdr_get(rs.hdr, &kept, &sum) < 0)) {
		pool_set_error("%s: its resume state is damaged; abandon it with 'coffer receive "
			       "-A %s'", r->name, r->name);
		ret = STOR_ECORRUPT;
	}
	if (ret == 0 && !stream_hdr_same(&kept, &r->h)) {
		pool_set_error("this stream is not the rest of the one %s holds part of (snapshot "
			       "guid %016llx, %s%s there; %016llx, %s%s in the stream): send -t "
			       "with %s's receive_resume_token", r->name,
			       (unsigned long long)kept.to_guid, kept.flags & STREAM_F_RAW ? "raw" : "plain",
			       kept.flags & STREAM_F_INCREMENTAL ? " incremental" : "",
			       (unsigned long long)r->h.to_guid, raw ? "raw" : "plain",
			       r->h.flags & STREAM_F_INCREMENTAL ? " incremental" : "", r->name);
		ret = -EINVAL;
	}
	if (ret == 0 && !raw && ds->suite && !atomic_load(&ds->keys)) {
		pool_set_error("%s: its key is not loaded; load it to resume a plain stream",
			       r->name);
		ret = STOR_ENOKEY;
	}
	if (ret == 0 && raw && !sides_sound(p)) {
		pool_set_error("a mirror side of pool %s is out of service; a raw receive waits "
			       "for the resilver", p->name);
		ret = -EBUSY;
	}
	if (ret < 0) {
		unclaim(r);
		return ret;
	}
	memcpy(r->hdr, rs.hdr, STREAM_HDR_LEN);
	r->incr = !!(r->h.flags & STREAM_F_INCREMENTAL);
	r->resumable = r->have_state = 1;
	r->next = r->applied = r->saved = rs.id.next;
	if (raw) {
		if (r->incr)
			atomic_store(&ds->macs_later, 1);
		txg_advance(p, r->h.to_txg + 1);
	}
	return 0;
}

/* The resume part: where the resumed stream starts, which must be where
 * the saved state says the rest starts. */
static int resume_part(struct stor_recv *r, uint64_t *sum)
{
	uint64_t first;
	int ret = stream_resume_get(r->part, &r->h, &first, sum);

	if (ret < 0)
		return ret;
	if (r->resumed != 1) {
		pool_set_error("send stream has a resume part out of place");
		return STOR_ECORRUPT;
	}
	if (r->p && first != r->next) {
		pool_set_error("this stream resumes at record %llu, but the partial receive of %s "
			       "is at record %llu: send -t with its receive_resume_token as it is "
			       "now", (unsigned long long)first, r->name,
			       (unsigned long long)r->next);
		return -ESTALE;
	}
	r->next = r->applied = first;
	r->resumed = 2;
	return 0;
}

/* One whole part is in r->part (r->plen bytes). */
static int part_done(struct stor_recv *r)
{
	uint64_t sum, parts, chain, first, count;
	int ret;

	if (!r->have_hdr) {
		ret = stream_hdr_get(r->part, &r->h, &sum);
		/* the snapshot is made last: a name it cannot take is refused before
		 * anything is received, rolled back or destroyed */
		if (ret == 0 && strlen(r->name) + 1 + strlen(r->h.snapname) > STOR_NAME_MAX) {
			pool_set_error("%s@%s: the snapshot's name would be longer than %d bytes",
				       r->name, r->h.snapname, STOR_NAME_MAX);
			ret = STOR_EBADNAME;
		}
		if (ret == 0 && r->h.flags & STREAM_F_RESUME) {
			ret = resume(r);
		} else {
			if (ret == 0)
				ret = fits_pool(r);
			if (ret == 0)
				ret = r->h.flags & STREAM_F_INCREMENTAL ? attach(r) : create(r);
			/* receive -s: the state a cut keeps, from the start */
			if (ret == 0 && r->p && r->resumable) {
				memcpy(r->hdr, r->part, STREAM_HDR_LEN);
				ret = save_state(r, 0);
			}
		}
		if (ret < 0)
			return ret;
		r->have_hdr = 1;
		r->chain = sum;
		return 0;
	}
	if (r->resumed == 1 && stream_kind(r->part) != STREAM_RESUME) {
		pool_set_error("resumed send stream has no resume part after its header");
		return STOR_ECORRUPT;
	}
	switch (stream_kind(r->part)) {
	case STREAM_RESUME:
		ret = resume_part(r, &sum);
		if (ret < 0)
			return ret;
		r->chain = stream_chain(r->chain, sum);
		r->parts++;
		return 0;
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
		ret = take_record(r, r->part + STREAM_REC_LEN);
		if (ret == 0)
			r->applied = r->next;
		return ret < 0 ? ret : checkpoint(r);
	case STREAM_FREE:
		ret = stream_free_get(r->part, &r->h, &first, &count, &sum);
		if (ret == 0 && first < r->next) {
			pool_set_error("send stream free of record %llu is out of order",
				       (unsigned long long)first);
			ret = STOR_ECORRUPT;
		}
		if (ret < 0)
			return ret;
		r->next = first + count;
		r->chain = stream_chain(r->chain, sum);
		r->parts++;
		ret = take_free(r, first, count);
		if (ret == 0)
			r->applied = r->next;
		return ret < 0 ? ret : checkpoint(r);
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
	case STREAM_RESUME:
		if (!(r->h.flags & STREAM_F_RESUME)) {
			pool_set_error("a send stream that is not resumed has a resume part");
			return STOR_ECORRUPT;
		}
		*need = STREAM_RESUME_LEN;
		return 0;
	case STREAM_FREE:
		if (!(r->h.flags & STREAM_F_INCREMENTAL)) {
			pool_set_error("a full send stream has no frees");
			return STOR_ECORRUPT;
		}
		*need = STREAM_FREE_LEN;
		return 0;
	default:
		pool_set_error("send stream has a part of unknown kind %u", stream_kind(r->part));
		return STOR_ECORRUPT;
	}
}

/* Bytes after a full stream: not the stream it claimed to be, undone on close. */
static int after_end(struct stor_recv *r)
{
	r->done = 0;
	pool_set_error("send stream goes on after its end");
	return fail(r, STOR_ECORRUPT);
}

/* An incremental came whole and more follows: the next stream of a package
 * (stream.h), received on its own into the same name. */
static void next_stream(struct stor_recv *r)
{
	stor_ds_close(r->ds);
	r->ds = NULL;
	r->tmp[0] = '\0';
	r->have_hdr = r->done = r->incr = 0;
	r->chain = r->parts = r->next = 0;
	r->plen = 0;
	r->resumable = !!(r->flags & STOR_RECV_RESUMABLE);
	r->resumed = r->have_state = 0;
	r->applied = r->saved = r->ck_txg = r->ck_next = 0;
}

int stor_recv_feed(struct stor_recv *r, const uint8_t *buf, size_t len)
{
	int ret = 0;

	pool_clear_error();
	if (r->failed)
		return r->failed;
	if (r->done && !len)
		return 1;
	if (r->done && !(r->h.flags & STREAM_F_INCREMENTAL))
		return after_end(r);
	if (r->done)
		next_stream(r);
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
			if (!len)
				return 1;
			if (!(r->h.flags & STREAM_F_INCREMENTAL))
				return after_end(r);
			next_stream(r);
		}
	}
	return 0;
}

void stor_recv_close(struct stor_recv *r)
{
	if (!r)
		return;
	if (r->ds && !r->done && r->resumable && r->have_state) {
		char why[512];

		/* kept (receive -s); the reason it stopped stays the one the caller sees */
		snprintf(why, sizeof(why), "%s", stor_pool_last_error());
		keep(r);
		pool_set_error("%s", why);
	}
	for (size_t i = 0; i < r->nb; i++)
		free(r->bufs[i]);
	if (r->ds) {
		uint64_t id = r->ds->id;

		if (!r->done) {
			char why[512];

			/* the reason the receive failed stays the one the caller sees */
			snprintf(why, sizeof(why), "%s", stor_pool_last_error());
			if (r->incr) {
				recv_undo_incr(r->p, id, 1);
			} else {
				stor_ds_close(r->ds);
				recv_discard(r->p, id);
			}
			pool_set_error("%s", why);
		}
		if (r->done || r->incr)
			stor_ds_close(r->ds);
	}
	free(r->part);
	free(r);
}

int stor_recv_keeps(const struct stor_recv *r)
{
	return r && r->ds && !r->done && r->resumable && r->have_state;
}

int stor_recv_abandon(struct stor_pool *p, const char *name)
{
	struct stor_ds *ds;
	uint64_t id = 0;
	int ret = 0, mark;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds) {
		ret = -ENOENT;
	} else if (!atomic_load(&ds->partial)) {
		if (atomic_load(&ds->receiving))
			pool_set_error("%s is being received (a resume, or a receive going on); "
				       "stop it first", name);
		else
			pool_set_error("%s holds no partial receive to abandon", name);
		ret = atomic_load(&ds->receiving) ? -EBUSY : -ENOENT;
	} else {
		/* claimed: no resume begins from here (receiving stays set) */
		atomic_store(&ds->partial, 0);
		id = ds->id;
	}
	pthread_mutex_unlock(&p->admin);
	if (ret < 0)
		return ret;
	mark = recv_mark_of(p, id);
	if (mark < 0) {
		atomic_store(&ds->partial, 1);
		return mark;
	}
	/* as a receive cut short without -s: a full stream's dataset goes, an
	 * incremental's target goes back to the snapshot it started from */
	ret = mark == RECV_INCR ? recv_undo_incr(p, id, 0) : recv_discard(p, id);
	if (ret == 0)
		ret = txg_sync(p, 0);
	return ret;
}
