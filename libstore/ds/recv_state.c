/* SPDX-License-Identifier: MIT */
/*
 * What a dataset keeps of a receive (send/recv.c moves the stream): the
 * mark in the pool table that says how far a receive got ("recv/<id>":
 * RECV_RECEIVING, RECV_MACS, RECV_INCR; format.h), and the MAC tree a raw
 * receive's first load-key builds from the pointers received and checks
 * against the roots the stream carried (bpmac.c says why that is no off
 * switch). Here rather than in send/, as OpenZFS keeps the receive's
 * dataset state in dsl_*: dataset, snapshot and key code ask it, and they
 * sit below the stream's layer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
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
	int m;

	if (atomic_load(&ds->receiving))
		return -EBUSY;
	m = recv_mark_of(p, ds->id);
	return m < 0 ? m : m == RECV_MACS ? 1 : m == RECV_RECEIVING ? -EBUSY : 0;
}

/* ---- the MAC tree of a raw receive, at its first load-key ---- */

struct build {
	uint64_t id, max_birth; /* a snapshot table keeps pointers born by its txg */
	const struct mac_key *mk;
	struct bpmac_change *ch;
	size_t n, cap;
	uint64_t end; /* one past the highest record number seen */
	int clear;    /* a pointer without encryption: refused */
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
	if (bp.birth > b->max_birth)
		return STOR_EAUTH;
	k += 8;
	recno = get_u64(&k);
	g = recno / MAC_GROUP;
	if (recno >= b->end)
		b->end = recno + 1;
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

/* Table @id's group MACs and root under @mk, from its pointers, in @t; its
 * view root stays. *@end grows past its highest record number. */
static int build_table(struct meta_txn *t, uint64_t id, const struct mac_key *mk,
		       uint64_t max_birth, uint64_t *end)
{
	struct build b = { .id = id, .mk = mk, .max_birth = max_birth, .end = *end };
	uint8_t prefix[8], *w = prefix;
	int ret;

	put_u64(&w, id);
	ret = bpmac_forget_tree(t, id); /* what an earlier tree left, if any */
	if (ret == 0)
		ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, leaf_one, &b);
	if (ret == 0)
		ret = bpmac_root_init(t, id, mk);
	if (ret == 0 && b.n)
		ret = bpmac_apply(t, b.ch, b.n);
	free(b.ch);
	*end = b.end;
	return b.clear ? STOR_EAUTH : ret;
}

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

/*
 * Does snapshot @idx of @ds read as the view root it was made with (or
 * received with)? Its view is what snapshot.c's read rule gives: the
 * pointers born by its txg in the head and in its own and every newer
 * table, at most one per record; its leaves are the head's (the view root
 * was the head's root). Records [0, @end) in groups, in @t.
 */
static int check_view(struct meta_txn *t, const struct stor_ds *ds, size_t idx,
		      const struct mac_key *head_mk, uint64_t end)
{
	const struct snap *x = ds->snaps[idx];
	uint8_t root[MAC_ROOT_LEN], acc[MAC_LEN] = { 0 };
	struct view_group *v;
	int ret = bpmac_row_get(t, x->id, MAC_VIEW, root);

	if (ret == -ENOENT)
		return STOR_EAUTH;
	if (ret < 0)
		return ret;
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
	return ret < 0 ? ret : bpmac_root_check(head_mk, acc, root);
}

int recv_build_macs(struct stor_pool *p, struct stor_ds *ds, const struct ds_keys *k,
		    const uint8_t *expect, unsigned flags)
{
	uint8_t want[MAC_ROOT_LEN], got[MAC_ROOT_LEN], view[MAC_ROOT_LEN];
	struct meta_txn *t = NULL;
	uint64_t end = 0;
	int ret = meta_txn_begin(p->meta, &t);

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
		ret = build_table(t, ds->id, k->mac, UINT64_MAX, &end);
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

		ret = mk ? build_table(t, s->id, mk, s->txg, &end) : -ENOMEM;
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
