/* SPDX-License-Identifier: MIT */
/*
 * What a dataset keeps of a receive (send/recv.c moves the stream): the
 * mark in the pool table that says how far a receive got ("recv/<id>":
 * RECV_RECEIVING, RECV_MACS, RECV_INCR; format.h), and the MAC tree a raw
 * receive's first load-key builds from the pointers received and checks
 * against the roots the stream carried (bpmac.c says why that is no off
 * switch). Here rather than in send/, as OpenZFS keeps the receive's
 * dataset state in dsl_*: dataset, snapshot and key code ask it, and they
 * sit below the stream's layer. So is the undoing of a receive cut short
 * (recv_cleanup), which an import runs before anything else may open the
 * dataset.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/recv_state.h"
#include "ds/snapshot.h"
#include "kv/bp.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/bpmac.h"


/* ---- the marks ---- */

static void mark_key(uint64_t id, char key[32])
{
	snprintf(key, 32, RECV_MARK_PREFIX "%016llx", (unsigned long long)id);
}

static void resume_key(uint64_t id, char key[32])
{
	snprintf(key, 32, RECV_RESUME_PREFIX "%016llx", (unsigned long long)id);
}

int recv_mark_txn(struct meta_txn *t, uint64_t id, unsigned state)
{
	char key[32];
	uint8_t v = (uint8_t)state;
	int ret;

	/* a resume state lives only beside a receive going in (recv_state.h) */
	if (state != RECV_RECEIVING && state != RECV_INCR) {
		resume_key(id, key);
		ret = meta_del(t, META_POOL, key, strlen(key));
		if (ret < 0 && ret != -ENOENT)
			return ret;
	}
	mark_key(id, key);
	if (state)
		return meta_put(t, META_POOL, key, strlen(key), &v, 1);
	ret = meta_del(t, META_POOL, key, strlen(key));
	return ret == -ENOENT ? 0 : ret;
}

/* ---- the resume state of a receive -s ---- */

#define RESUME_FIXED (1 + 1 + 5 * 8 + 2)

int recv_resume_save(struct stor_pool *p, struct meta_txn *t, uint64_t id,
		     const struct recv_resume *rs)
{
	uint8_t v[RESUME_FIXED + RECV_HDR_MAX], *w = v;
	struct meta_txn *own = NULL;
	char key[32];
	int ret;

	STOR_ASSERT(rs->hdr_len <= RECV_HDR_MAX);
	put_u8(&w, 1);
	put_u8(&w, (uint8_t)rs->id.flags);
	put_u64(&w, rs->id.guid);
	put_u64(&w, rs->id.to_guid);
	put_u64(&w, rs->id.from_guid);
	put_u64(&w, rs->id.to_txg);
	put_u64(&w, rs->id.next);
	put_u16(&w, (uint16_t)rs->hdr_len);
	put_bytes(&w, rs->hdr, rs->hdr_len);
	resume_key(id, key);
	if (!t) {
		ret = meta_txn_begin(p->meta, &own);
		if (ret < 0)
			return ret;
		t = own;
	}
	ret = meta_put(t, META_POOL, key, strlen(key), v, (size_t)(w - v));
	if (own && ret < 0)
		meta_txn_abort(own);
	else if (own)
		ret = meta_txn_commit(own);
	return ret;
}

int recv_resume_load(struct stor_pool *p, uint64_t id, struct recv_resume *rs)
{
	struct meta_txn *t = NULL;
	const void *v;
	const uint8_t *r;
	size_t vlen;
	char key[32];
	int ret = meta_rtxn_get(p->meta, &t);

	memset(rs, 0, sizeof(*rs));
	if (ret < 0)
		return ret;
	resume_key(id, key);
	ret = meta_get(t, META_POOL, key, strlen(key), &v, &vlen);
	r = v;
	if (ret == 0 && (vlen < RESUME_FIXED || r[0] != 1))
		ret = STOR_ECORRUPT;
	if (ret == 0) {
		r++;
		rs->id.flags = get_u8(&r);
		rs->id.guid = get_u64(&r);
		rs->id.to_guid = get_u64(&r);
		rs->id.from_guid = get_u64(&r);
		rs->id.to_txg = get_u64(&r);
		rs->id.next = get_u64(&r);
		rs->hdr_len = get_u16(&r);
		if (rs->hdr_len > RECV_HDR_MAX || vlen != RESUME_FIXED + rs->hdr_len)
			ret = STOR_ECORRUPT;
		else
			get_bytes(&r, rs->hdr, rs->hdr_len);
	}
	meta_rtxn_put(t);
	return ret;
}

void recv_resume_token(struct stor_pool *p, const struct stor_ds *ds, char *out, size_t len)
{
	struct recv_resume rs;

	snprintf(out, len, "-");
	if (atomic_load(&ds->partial) && recv_resume_load(p, ds->id, &rs) == 0)
		stor_resume_token_encode(&rs.id, out, len);
}

void recv_busy_error(const struct stor_ds *ds)
{
	if (atomic_load(&ds->partial))
		pool_set_error("%s holds a partial receive (a receive -s cut short): resume it "
			       "with 'coffer send -t TOKEN | coffer receive -s %s', TOKEN its "
			       "receive_resume_token property, or abandon it with 'coffer "
			       "receive -A %s'", ds->name, ds->name, ds->name);
	else
		pool_set_error("%s is being received; wait for the receive to end", ds->name);
}

int recv_mark(struct stor_pool *p, uint64_t id, unsigned state)
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

int recv_mark_of(struct stor_pool *p, uint64_t id)
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
	struct recv_resume rs;
	int m;

	/* a plain stream's partial state was written with its MACs, as any
	 * write: its key loads (a resume needs it); a raw one's waits */
	if (atomic_load(&ds->partial) && !atomic_load(&ds->macs_later) &&
	    recv_resume_load(p, ds->id, &rs) == 0 && !(rs.id.flags & STOR_RESUME_RAW))
		return 0;
	if (atomic_load(&ds->receiving))
		return -EBUSY;
	m = recv_mark_of(p, ds->id);
	return m < 0 ? m : m == RECV_MACS ? 1 : m == RECV_RECEIVING ? -EBUSY : 0;
}

/* ---- the MAC tree of a raw receive, at its first load-key ---- */

/* One group of a snapshot's view: the pointers born by its txg. */
struct view_group {
	uint64_t txg;
	int dup;
	uint8_t have[MAC_GROUP];
	uint8_t bp[MAC_GROUP][BP_LEN];
};

static int view_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct view_group *v = ctx;
	const uint8_t *k = (const uint8_t *)key + 8;
	struct bp bp;
	unsigned i;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (bp.birth > v->txg)
		return 0;
	i = (unsigned)(get_u64(&k) % MAC_GROUP);
	/* two versions of a record alive at one txg: never made by a commit */
	if (v->have[i]) {
		v->dup = 1;
		return 1;
	}
	v->have[i] = 1;
	memcpy(v->bp[i], val, BP_LEN);
	return 0;
}

int view_sum(struct meta_txn *t, const struct stor_ds *ds, size_t idx,
	     const struct mac_key *head_mk, uint64_t end, uint8_t acc[MAC_LEN])
{
	const struct snap *x = ds->snaps[idx];
	struct view_group *v;
	int ret = 0;

	memset(acc, 0, MAC_LEN);
	v = malloc(sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint64_t g = 0; g * MAC_GROUP < end && ret == 0; g++) {
		uint8_t gmac[MAC_LEN] = { 0 }, key[BP_KEY_LEN];

		memset(v->have, 0, sizeof(v->have));
		v->txg = x->txg;
		v->dup = 0;
		for (size_t j = ds->nsnaps + 1; j-- > idx && ret == 0;) {
			bp_key(j == ds->nsnaps ? ds->id : ds->snaps[j]->id, g * MAC_GROUP, key);
			/* the group's keys share all but their last byte (bpmac.c) */
			ret = meta_iter(t, META_BP, key, sizeof(key) - 1, 0, view_one, v);
			if (ret == 1)
				ret = STOR_EAUTH;
		}
		for (unsigned i = 0; i < MAC_GROUP && ret == 0; i++)
			if (v->have[i])
				ret = bpmac_leaf_xor(head_mk, g * MAC_GROUP + i, v->bp[i], gmac);
		if (ret == 0)
			ret = bpmac_sum_add(head_mk, g, gmac, acc);
	}
	free(v);
	return ret;
}

/* Does snapshot @idx of @ds read as the view root it was made with (or
 * received with)? */
static int check_view(struct meta_txn *t, const struct stor_ds *ds, size_t idx,
		      const struct mac_key *head_mk, uint64_t end)
{
	uint8_t root[MAC_ROOT_LEN], acc[MAC_LEN];
	int ret = bpmac_row_get(t, ds->snaps[idx]->id, MAC_VIEW, root);

	if (ret == -ENOENT)
		return STOR_EAUTH;
	if (ret == 0)
		ret = view_sum(t, ds, idx, head_mk, end, acc);
	return ret < 0 ? ret : bpmac_root_check(head_mk, acc, root);
}

int recv_build_macs(struct stor_pool *p, struct stor_ds *ds, const struct ds_keys *k,
		    const uint8_t *expect, unsigned flags)
{
	uint8_t want[MAC_ROOT_LEN], got[MAC_ROOT_LEN], view[MAC_ROOT_LEN];
	struct meta_txn *t = NULL;
	uint64_t end = 0;
	int ret;

	STOR_ASSERT_HELD(&p->admin);
	ret = meta_txn_begin(p->meta, &t);
	if (ret < 0)
		return ret;
	/* the root the head must come out with: the stream's, else the one it
	 * was left with, which is its newest snapshot's view (a dataset is only
	 * ever marked when its head reads as that snapshot) */
	if (expect) {
		memcpy(want, expect, sizeof(want));
	} else {
		ret = bpmac_row_get(t, ds->id, MAC_ROOT, want);
		if (ret == 0 && ds->nsnaps)
			ret = bpmac_row_get(t, ds->snaps[ds->nsnaps - 1]->id, MAC_VIEW, view);
		if (ret == -ENOENT || (ret == 0 && ds->nsnaps && memcmp(want, view, sizeof(view))))
			ret = STOR_EAUTH;
	}
	if (ret == 0)
		ret = bpmac_build_table(t, ds->id, k->mac, UINT64_MAX, 0, &end);
	if (ret == 0)
		ret = bpmac_row_get(t, ds->id, MAC_ROOT, got);
	/* the tag of @got is ours, under the key: equal bytes are a sound root */
	if (ret == 0 && memcmp(got, want, sizeof(got)))
		ret = STOR_EAUTH;
	/* each snapshot table under its own key (snapshot.c), its pointers
	 * born by its txg; then each snapshot's view as its root says */
	for (size_t i = 0; i < ds->nsnaps && ret == 0; i++) {
		struct snap *s = ds->snaps[i];
		struct mac_key *mk = mac_key_new(k->master, s->guid, (unsigned)ds->suite);

		ret = mk ? bpmac_build_table(t, s->id, mk, s->txg, 0, &end) : -ENOMEM;
		mac_key_put(mk);
	}
	for (size_t i = 0; i < ds->nsnaps && ret == 0; i++)
		ret = check_view(t, ds, i, k->mac, end);
	if (ret == 0 && !(flags & RECV_BUILD_KEEP_MARK))
		ret = recv_mark_txn(t, ds->id, 0);
	if (ret < 0 || (flags & RECV_BUILD_DRY)) {
		meta_txn_abort(t);
		if (ret == STOR_EAUTH)
			pool_set_error("dataset %s: its block pointers are not the set its MAC roots "
				       "were made over (a record dropped, replayed or added, or "
				       "not encrypted)", ds->name);
		return ret;
	}
	ret = meta_txn_commit(t);
	/* what was verified under the old tree is verified again under the new */
	if (ret == 0)
		snap_drop_keys(ds);
	return ret;
}

/* ---- cleanup ---- */

/* ---- what a receive cut short leaves, undone (at import, or by the receive) ---- */

struct leftovers {
	uint64_t *ids;
	unsigned *states;
	size_t n;
};

static int leftover_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct leftovers *l = ctx;
	char hex[17];
	uint64_t *ids;
	unsigned *states, state = vlen == 1 ? *(const uint8_t *)val : 0;

	if ((state != RECV_RECEIVING && state != RECV_INCR) || klen != strlen(RECV_MARK_PREFIX) + 16)
		return 0;
	ids = realloc(l->ids, (l->n + 1) * sizeof(*ids));
	if (ids)
		l->ids = ids;
	states = ids ? realloc(l->states, (l->n + 1) * sizeof(*states)) : NULL;
	if (!states)
		return -ENOMEM;
	l->states = states;
	l->states[l->n] = state;
	memcpy(hex, (const char *)key + strlen(RECV_MARK_PREFIX), 16);
	hex[16] = '\0';
	l->ids[l->n++] = strtoull(hex, NULL, 16);
	return 0;
}

/* Destroy dataset @id, cut short while being received, and its mark. */
int recv_discard(struct stor_pool *p, uint64_t id)
{
	char name[STOR_NAME_MAX + 1] = "";
	struct stor_ds *ds;
	int ret = 0;

	pthread_mutex_lock(&p->admin);
	ds = ds_find_id_locked(p, id);
	if (ds) {
		snprintf(name, sizeof(name), "%s", ds->name);
		atomic_store(&ds->receiving, 0);
		ds->unlisted = 1; /* never whole, so in no list */
	}
	pthread_mutex_unlock(&p->admin);
	if (name[0])
		ret = stor_ds_destroy(p, name, STOR_RECURSIVE);
	return ret < 0 && ret != -ENOENT ? ret : recv_mark(p, id, 0);
}

/*
 * @ds was rolled back to its newest snapshot without its MAC key (or with
 * pointers staged without MACs): its head reads as that snapshot, so its
 * root is that snapshot's view root, and its tree waits for a key
 * (RECV_MACS), in one commit.
 */
static int head_is_view(struct stor_pool *p, struct stor_ds *ds)
{
	uint8_t view[MAC_ROOT_LEN];
	struct meta_txn *t = NULL;
	int ret = ds->nsnaps ? meta_txn_begin(p->meta, &t) : STOR_EAUTH;

	if (ret < 0)
		return ret;
	ret = bpmac_row_get(t, ds->snaps[ds->nsnaps - 1]->id, MAC_VIEW, view);
	if (ret == -ENOENT)
		ret = STOR_EAUTH;
	if (ret == 0)
		ret = bpmac_row_put(t, ds->id, MAC_ROOT, view);
	if (ret == 0)
		ret = recv_mark_txn(t, ds->id, RECV_MACS);
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

/* A loaded key over a tree that does not verify goes: the dataset's next
 * load-key checks it again (admin lock held; no one else has it open, it
 * is being received, so no read holds the key). */
static void drop_key(struct stor_ds *ds)
{
	STOR_ASSERT_HELD(&ds->pool->admin);

	dskeys_drop(ds);
	cache_drop_ds(cache_data(), ds->guid);
	snap_drop_keys(ds);
}

/*
 * Dataset @id, cut short while an incremental went in, back to its newest
 * snapshot (the stream's FROM; the -F rollback, if any, is committed
 * already). The rollback moves no MAC when the key is not loaded, or when
 * the receive staged pointers without them (a raw one): the head then
 * reads as FROM and takes FROM's view root (head_is_view), and the tree is
 * built and checked against it under the key now if it is loaded, else at
 * the next load-key. The caller holds @held handles on it (0, or the
 * receive's 1).
 */
int recv_undo_incr(struct stor_pool *p, uint64_t id, int held)
{
	char name[STOR_NAME_MAX + 2] = "";
	struct stor_ds *ds;
	struct ds_keys *k;
	int ret = 0, nomacs;

	pthread_mutex_lock(&p->admin);
	ds = ds_find_id_locked(p, id);
	if (ds && ds->nsnaps)
		snprintf(name, sizeof(name), "%s", ds->snaps[ds->nsnaps - 1]->name);
	k = ds ? atomic_load(&ds->keys) : NULL;
	nomacs = ds && ds->suite && (!k || atomic_load(&ds->macs_later));
	pthread_mutex_unlock(&p->admin);
	if (!ds)
		return recv_mark(p, id, 0);
	if (name[0])
		ret = stor_snap_rollback(p, name, (held ? SNAP_HELD : 0) | (nomacs ? SNAP_NOMACS : 0));
	if (ret == 0 && nomacs) {
		pthread_mutex_lock(&p->admin);
		ret = head_is_view(p, ds);
		/* the key may have been unloaded while the admin lock was down */
		k = atomic_load(&ds->keys);
		if (ret == 0 && k && (ret = recv_build_macs(p, ds, k, NULL, 0)) < 0)
			drop_key(ds);
		pthread_mutex_unlock(&p->admin);
	} else if (ret == 0) {
		ret = recv_mark(p, id, 0);
	}
	atomic_store(&ds->macs_later, 0);
	/* a rollback that failed leaves the dataset half received: it stays
	 * closed to use, and its RECV_INCR mark has the next import undo it */
	if (ret == 0 || ret == STOR_EAUTH)
		atomic_store(&ds->receiving, 0);
	return ret;
}

/*
 * A receive -s cut short by a crash: its state is kept, as the receive
 * keeps it when the stream stops (recv.c), closed to every use but a
 * resume, a receive -A or a destroy. @return 1 kept, 0 it has none (undo it)
 */
static int keep_partial(struct stor_pool *p, uint64_t id, unsigned state)
{
	struct recv_resume rs;
	struct stor_ds *ds;
	int ret = recv_resume_load(p, id, &rs);

	if (ret == -ENOENT || ret == STOR_ECORRUPT)
		return 0;
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_id_locked(p, id);
	if (ds) {
		atomic_store(&ds->receiving, 1);
		atomic_store(&ds->partial, 1);
		/* a full stream's dataset joins its parent's list when it is whole */
		ds->unlisted = state == RECV_RECEIVING;
		/* a raw incremental's head holds pointers staged without MACs */
		atomic_store(&ds->macs_later,
			     state == RECV_INCR && (rs.id.flags & STOR_RESUME_RAW) != 0);
	}
	pthread_mutex_unlock(&p->admin);
	return ds ? 1 : 0;
}

int recv_cleanup(struct stor_pool *p)
{
	struct leftovers l = { 0 };
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_POOL, RECV_MARK_PREFIX, strlen(RECV_MARK_PREFIX), 0, leftover_one, &l);
	meta_rtxn_put(t);
	for (size_t i = 0; i < l.n && ret == 0; i++) {
		ret = keep_partial(p, l.ids[i], l.states[i]);
		if (ret == 1)
			ret = 0;
		else if (ret == 0)
			ret = l.states[i] == RECV_INCR ? recv_undo_incr(p, l.ids[i], 0)
						       : recv_discard(p, l.ids[i]);
	}
	free(l.ids);
	free(l.states);
	return ret;
}
