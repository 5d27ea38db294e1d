/* SPDX-License-Identifier: MIT */
/*
 * Block pointer MACs: authenticity and freshness of an encrypted dataset's
 * metadata against someone who holds the LMDB file and the LUNs.
 *
 * The AEAD tag of a record binds its ciphertext to its place (dataset GUID,
 * record number, birth txg, sizes, compression), but every input of that
 * AAD sits in the block pointer itself, so an older pointer put back with
 * its older extent would open fine. Here every block pointer of an encrypted
 * dataset is covered by a MAC tree keyed by its table's MAC key (HKDF of
 * the master key, with the table's GUID and suite: keys_derive_mac; a
 * table is the head or a snapshot's kept pointers), after OpenZFS's objset
 * and indirect-block MACs:
 *
 *   leaf(r)   = PRF(K, 'L' | table GUID | recno | the pointer but its place)
 *   group g   = records [g * MAC_GROUP, (g + 1) * MAC_GROUP)
 *   gmac(g)   = XOR of leaf(r) over the group's pointers   ("mac": id | g)
 *   acc       = XOR of PRF(K, 'G' | g | gmac(g)) over groups with a MAC
 *   root      = acc | PRF(K, 'R' | acc)                    ("mac": id | MAC_ROOT)
 *
 * PRF is keys_prf128 (truncated SHA-256 of a key block and a fixed-length
 * message, from a keyed state kept in the key's secure page).
 * The XOR sums make a commit cost proportional to what it changes (XMAC):
 * each changed pointer XORs leaf(old) ^ leaf(new) into its group, each
 * changed group swaps its term in acc, and the root gets a new tag; a txg
 * touching 300k pointers of a huge dataset recomputes no whole group.
 * Groups are checked lazily: the root at load-key (reading every group MAC
 * once), a group when one of its records is first read after that (its
 * pointers from one LMDB snapshot), then a bit in memory says so until the
 * key is unloaded, so steady-state reads pay nothing per record.
 * The checker (verify.c, pool check) walks a whole table instead: every
 * group against all its pointers and every stored group MAC against the
 * pointers under it (bpmac_check_table), with the root as at load-key.
 *
 * A leaf covers every field of a pointer but its place (u16 lun, u64
 * sector): flags, compression, the three sizes, birth, key salt, nonce, tag
 * and the keyless checksum of the stored bytes. The place is policed by
 * the others: the AEAD tag opens only the ciphertext it was made over and
 * the checksum names the stored bytes, so a pointer sent elsewhere reads
 * its own record or fails. Leaving it out makes the tree portable: a raw
 * copy on another pool, in other places, has the same leaves and roots.
 *
 * View roots: the commit that makes a snapshot copies its dataset's root,
 * as it stands with that txg's pointers, into the snapshot's MAC_VIEW row
 * (bpmac_view_save; a copy, no key needed). It is the root of the set of
 * pointers the snapshot reads (snapshot.c's read rule), under the head's
 * key. A raw stream carries it (stream.h), and the receiver's first
 * load-key builds the tree from the pointers received and requires it to
 * come out with that root (recv.c: recv_build_macs), so a stream that
 * drops, adds or replays a record is refused. The mark that says a tree
 * waits for that build (RECV_MACS) chooses how the tree is checked, never
 * whether: on a dataset that was never received the build must come out
 * with the dataset's own root and its newest snapshot's view root.
 *
 * What an attacker without the key cannot do undetected: change any field
 * of a pointer (a clear flag, another extent, sizes, compression, salt,
 * nonce, tag), move or copy a pointer to another record or dataset, drop or
 * add one, or put back an older pointer of a record (replay) while the rest
 * of the dataset is newer. The sums are linear, so a stored gmac reveals
 * XORs of leaves; the root's terms are PRF outputs of whole group MACs and
 * the root itself is tagged, so a group can only be replaced by a state
 * whose root term and tag nobody without K can compute.
 * A group MAC cannot tell which of its pointers lied: one forged pointer
 * makes every record of its group (MAC_GROUP records) read as EAUTH, which
 * is detection, never wrong data; rewriting them does not heal the group.
 * The documented limit, as in ZFS: the metadata of a whole dataset (every
 * pointer, group MAC and its root) put back to an older consistent state,
 * or a whole pool rolled back, is not detected; with the mark, the head put
 * back to its newest snapshot (its view root is a root of the head's) is
 * such a state. Clear datasets are not
 * authenticated (their checksums are unkeyed); the dataset table is checked
 * against the key file at import (dataset.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "crypt/keys.h"
#include "kv/bp.h"
#include "kv/meta.h"
#include "store.h"
#include "txg/bpmac.h"

struct mac_key *mac_key_new(const uint8_t *master, uint64_t guid, unsigned suite)
{
	struct mac_key *mk = calloc(1, sizeof(*mk));

	if (!mk)
		return NULL;
	uint8_t key[KEYS_MAC_LEN];
	int ret;

	mk->k = keys_secure_alloc(KEYS_PRF_STATE_LEN);
	ret = mk->k ? keys_derive_mac(master, guid, suite, key) : -ENOMEM;
	if (ret == 0)
		ret = keys_prf_key(key, mk->k);
	keys_cleanse(key, sizeof(key));
	if (ret < 0) {
		keys_secure_free(mk->k, KEYS_PRF_STATE_LEN);
		free(mk);
		return NULL;
	}
	atomic_init(&mk->refs, 1);
	mk->staged_txg = 0;
	mk->guid = guid;
	return mk;
}

struct mac_key *mac_key_ref(struct mac_key *mk)
{
	atomic_fetch_add(&mk->refs, 1);
	return mk;
}

void mac_key_put(struct mac_key *mk)
{
	if (!mk || atomic_fetch_sub(&mk->refs, 1) != 1)
		return;
	keys_secure_free(mk->k, KEYS_PRF_STATE_LEN);
	free(mk);
}

static void mac_key_id(uint64_t ds_id, uint64_t g, uint8_t key[16])
{
	uint8_t *w = key;

	put_u64(&w, ds_id);
	put_u64(&w, g);
}

static void xor16(uint8_t *a, const uint8_t *b)
{
	for (int i = 0; i < MAC_LEN; i++)
		a[i] ^= b[i];
}

static int is_zero(const uint8_t *a)
{
	uint8_t v = 0;

	for (int i = 0; i < MAC_LEN; i++)
		v |= a[i];
	return v == 0;
}

/* Where the placement of a pointer sits in its BP_LEN bytes (format.h):
 * u16 lun first, then u8 flags, u8 compression, three u32 sizes, u64 sector. */
#define BP_PLACE_LUN 2
#define BP_PLACE_AT (2 + 1 + 1 + 4 + 4 + 4)
#define BP_PLACE_SECTOR 8

int bpmac_leaf_xor(const struct mac_key *mk, uint64_t recno, const uint8_t bp[BP_LEN],
		   uint8_t acc[MAC_LEN])
{
	uint8_t msg[1 + 8 + 8 + BP_LEN - BP_PLACE_LUN - BP_PLACE_SECTOR], leaf[MAC_LEN], *w = msg;
	int ret;

	put_u8(&w, 'L');
	put_u64(&w, mk->guid);
	put_u64(&w, recno);
	/* every field but the place: a raw copy elsewhere has the same leaves */
	put_bytes(&w, bp + BP_PLACE_LUN, BP_PLACE_AT - BP_PLACE_LUN);
	put_bytes(&w, bp + BP_PLACE_AT + BP_PLACE_SECTOR, BP_LEN - BP_PLACE_AT - BP_PLACE_SECTOR);
	ret = keys_prf128(mk->k, msg, sizeof(msg), leaf);
	xor16(acc, leaf);
	return ret;
}

int bpmac_prf(const struct mac_key *mk, uint8_t domain, uint64_t n, const uint8_t v[MAC_LEN],
	      uint8_t out[MAC_LEN])
{
	uint8_t msg[1 + 8 + MAC_LEN], *w = msg;

	put_u8(&w, domain);
	put_u64(&w, n);
	put_bytes(&w, v, MAC_LEN);
	return keys_prf128(mk->k, msg, sizeof(msg), out);
}

/* The term of group @g in the root's accumulator. */
static int group_term(const struct mac_key *mk, uint64_t g, const uint8_t gmac[MAC_LEN],
		      uint8_t out[MAC_LEN])
{
	return bpmac_prf(mk, 'G', g, gmac, out);
}

static int root_tag(const struct mac_key *mk, const uint8_t acc[MAC_LEN], uint8_t out[MAC_LEN])
{
	uint8_t msg[1 + MAC_LEN], *w = msg;

	put_u8(&w, 'R');
	put_bytes(&w, acc, MAC_LEN);
	return keys_prf128(mk->k, msg, sizeof(msg), out);
}

static int put_row(struct meta_txn *t, uint64_t id, uint64_t which, const struct mac_key *mk,
		   const uint8_t acc[MAC_LEN])
{
	uint8_t key[16], val[MAC_ROOT_LEN];
	int ret;

	memcpy(val, acc, MAC_LEN);
	ret = root_tag(mk, acc, val + MAC_LEN);
	if (ret < 0)
		return ret;
	mac_key_id(id, which, key);
	return meta_put(t, META_MAC, key, sizeof(key), val, sizeof(val));
}

static int put_root(struct meta_txn *t, uint64_t ds_id, const struct mac_key *mk,
		    const uint8_t acc[MAC_LEN])
{
	return put_row(t, ds_id, MAC_ROOT, mk, acc);
}

int bpmac_view_put(struct meta_txn *t, uint64_t snap_id, const struct mac_key *mk,
		   const uint8_t acc[MAC_LEN])
{
	return put_row(t, snap_id, MAC_VIEW, mk, acc);
}

int bpmac_root_init(struct meta_txn *t, uint64_t ds_id, const struct mac_key *mk)
{
	static const uint8_t zero[MAC_LEN];

	return put_root(t, ds_id, mk, zero);
}

struct root_walk {
	const struct mac_key *mk;
	uint8_t acc[MAC_LEN];
	uint8_t root[MAC_ROOT_LEN];
	int have_root, bad;
};

static int walk_group(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct root_walk *w = ctx;
	const uint8_t *r = (const uint8_t *)key + 8;
	uint8_t term[MAC_LEN];
	uint64_t g;

	if (klen != 16) {
		w->bad = 1;
		return 0;
	}
	g = get_u64(&r);
	if (g == MAC_VIEW)
		return 0; /* a snapshot's view root: not a group of its table */
	if (g == MAC_ROOT) {
		if (vlen != MAC_ROOT_LEN)
			w->bad = 1;
		else
			memcpy(w->root, val, MAC_ROOT_LEN);
		w->have_root = 1;
		return 0;
	}
	if (vlen != MAC_LEN || is_zero(val)) {
		w->bad = 1; /* an empty group is never stored */
		return 0;
	}
	if (group_term(w->mk, g, val, term) < 0)
		return -EIO;
	xor16(w->acc, term);
	return 0;
}

int bpmac_verify_root(struct meta *m, uint64_t ds_id, const struct mac_key *mk)
{
	struct root_walk w = { .mk = mk };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *p = prefix, tag[MAC_LEN];
	int ret;

	put_u64(&p, ds_id);
	ret = meta_rtxn_get(m, &t);
	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_MAC, prefix, sizeof(prefix), 0, walk_group, &w);
	meta_rtxn_put(t);
	if (ret < 0)
		return ret;
	if (w.bad || !w.have_root)
		return STOR_EAUTH;
	ret = root_tag(mk, w.root, tag);
	if (ret < 0)
		return ret;
	/* both comparisons always run: no early exit on secret-dependent data */
	if ((memcmp(tag, w.root + MAC_LEN, MAC_LEN) != 0) | (memcmp(w.acc, w.root, MAC_LEN) != 0))
		return STOR_EAUTH;
	return 0;
}

struct group_walk {
	const struct mac_key *mk;
	uint8_t acc[MAC_LEN];
	int err;
};

static int walk_bp(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct group_walk *w = ctx;
	const uint8_t *r = (const uint8_t *)key + 8;
	int ret;

	if (klen != BP_KEY_LEN || vlen != BP_LEN) {
		w->err = STOR_EAUTH;
		return 1;
	}
	ret = bpmac_leaf_xor(w->mk, get_u64(&r), val, w->acc);
	if (ret < 0) {
		w->err = ret;
		return 1;
	}
	return 0;
}

int bpmac_check_group(struct meta *m, uint64_t ds_id, const struct mac_key *mk,
		      struct seen_bits *seen, uint64_t recno)
{
	static const uint8_t zero[MAC_LEN];
	uint64_t g = recno / MAC_GROUP;
	struct group_walk w = { .mk = mk };
	struct meta_txn *t = NULL;
	uint8_t prefix[BP_KEY_LEN], key[16], *p = prefix, bit = 0;
	_Atomic uint8_t *b = seen_bits_at(seen, g, 0, &bit);
	const void *v;
	size_t vlen;
	int ret;

	static_assert(MAC_GROUP == 256, "a group is the records sharing all but the last key byte");
	if (b && (atomic_load_explicit(b, memory_order_acquire) & bit))
		return 0;
	put_u64(&p, ds_id);
	put_u64(&p, g * MAC_GROUP);
	ret = meta_rtxn_get(m, &t);
	if (ret < 0)
		return ret;
	/* the group's keys share all but their last byte */
	ret = meta_iter(t, META_BP, prefix, sizeof(prefix) - 1, 0, walk_bp, &w);
	if (ret == 1)
		ret = w.err;
	if (ret == 0) {
		mac_key_id(ds_id, g, key);
		ret = meta_get(t, META_MAC, key, sizeof(key), &v, &vlen);
		if (ret == -ENOENT) {
			ret = memcmp(w.acc, zero, MAC_LEN) ? STOR_EAUTH : 0;
		} else if (ret == 0) {
			ret = vlen != MAC_LEN || memcmp(v, w.acc, MAC_LEN) ? STOR_EAUTH : 0;
		}
	}
	meta_rtxn_put(t);
	if (ret == 0 && (b = seen_bits_at(seen, g, 1, &bit)))
		atomic_fetch_or_explicit(b, bit, memory_order_release);
	return ret;
}

/* ---- the whole tree of one table, for the checker (verify.c) ---- */

struct group_sum {
	uint64_t g;
	uint8_t acc[MAC_LEN];
	int broken; /* a pointer of it is no pointer at all */
};

struct table_walk {
	const struct mac_key *mk;
	struct group_sum *v;
	size_t n, cap, i; /* i: the merge's place in v while the stored MACs are walked */
	void (*bad)(void *ctx, uint64_t g);
	void *ctx;
	int err;
};

static int sum_bp(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct table_walk *w = ctx;
	const uint8_t *r = (const uint8_t *)key + 8;
	uint64_t recno, g;

	if (klen != BP_KEY_LEN)
		return 0; /* the keyless walk counts it */
	recno = get_u64(&r);
	g = recno / MAC_GROUP;
	if (!w->n || w->v[w->n - 1].g != g) {
		if (w->n == w->cap) {
			size_t cap = w->cap ? w->cap * 2 : 64;
			struct group_sum *v = realloc(w->v, cap * sizeof(*v));

			if (!v) {
				w->err = -ENOMEM;
				return 1;
			}
			w->v = v;
			w->cap = cap;
		}
		w->v[w->n++] = (struct group_sum){ .g = g };
	}
	if (vlen != BP_LEN) {
		w->v[w->n - 1].broken = 1;
		return 0;
	}
	if (bpmac_leaf_xor(w->mk, recno, val, w->v[w->n - 1].acc) < 0) {
		w->err = -EIO;
		return 1;
	}
	return 0;
}

/* Groups before @g that have pointers but no stored MAC: each sums to zero or lies. */
static void unstored_before(struct table_walk *w, uint64_t g)
{
	for (; w->i < w->n && w->v[w->i].g < g; w->i++)
		if (w->v[w->i].broken || !is_zero(w->v[w->i].acc))
			w->bad(w->ctx, w->v[w->i].g);
}

static int match_stored(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct table_walk *w = ctx;
	const uint8_t *r = (const uint8_t *)key + 8;
	uint64_t g;

	if (klen != 16)
		return 0; /* bpmac_verify_root fails the root for it */
	g = get_u64(&r);
	if (g == MAC_ROOT || g == MAC_VIEW)
		return 0; /* roots, not groups: bpmac_verify_root and the load-key check */
	unstored_before(w, g);
	if (w->i < w->n && w->v[w->i].g == g) {
		const struct group_sum *s = &w->v[w->i++];

		if (s->broken || vlen != MAC_LEN || memcmp(val, s->acc, MAC_LEN))
			w->bad(w->ctx, g);
	} else {
		w->bad(w->ctx, g); /* a MAC over pointers that are gone */
	}
	return 0;
}

int bpmac_check_table(struct meta *m, uint64_t ds_id, const struct mac_key *mk,
		      void (*bad)(void *ctx, uint64_t g), void *ctx)
{
	struct table_walk w = { .mk = mk, .bad = bad, .ctx = ctx };
	struct meta_txn *t = NULL;
	uint8_t prefix[8], *p = prefix;
	int ret;

	put_u64(&p, ds_id);
	ret = meta_rtxn_get(m, &t);
	if (ret < 0)
		return ret;
	/* both walks in one snapshot, in key order: groups ascending */
	ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, sum_bp, &w);
	if (ret == 1)
		ret = w.err;
	if (ret == 0)
		ret = meta_iter(t, META_MAC, prefix, sizeof(prefix), 0, match_stored, &w);
	meta_rtxn_put(t);
	if (ret == 0)
		unstored_before(&w, MAC_ROOT);
	free(w.v);
	return ret;
}

static int cmp_change(const void *a, const void *b)
{
	const struct bpmac_change *x = a, *y = b;

	if (x->ds_id != y->ds_id)
		return x->ds_id < y->ds_id ? -1 : 1;
	if (x->recno != y->recno)
		return x->recno < y->recno ? -1 : 1;
	return 0;
}

/* Read the root of @ds_id into @acc; a missing or malformed one fails the commit. */
static int get_root(struct meta_txn *t, uint64_t ds_id, uint8_t acc[MAC_LEN])
{
	uint8_t key[16];
	const void *v;
	size_t vlen;
	int ret;

	mac_key_id(ds_id, MAC_ROOT, key);
	ret = meta_get(t, META_MAC, key, sizeof(key), &v, &vlen);
	if (ret == -ENOENT || (ret == 0 && vlen != MAC_ROOT_LEN))
		return STOR_EAUTH;
	if (ret == 0)
		memcpy(acc, v, MAC_LEN);
	return ret;
}

/* Apply the summed delta of group @g of @ds_id; swaps its term in @acc. */
static int apply_group(struct meta_txn *t, const struct mac_key *mk, uint64_t ds_id, uint64_t g,
		       const uint8_t delta[MAC_LEN], uint8_t acc[MAC_LEN])
{
	uint8_t key[16], old[MAC_LEN] = { 0 }, nw[MAC_LEN], term[MAC_LEN];
	const void *v;
	size_t vlen;
	int ret;

	if (is_zero(delta))
		return 0;
	mac_key_id(ds_id, g, key);
	ret = meta_get(t, META_MAC, key, sizeof(key), &v, &vlen);
	if (ret == 0 && vlen == MAC_LEN)
		memcpy(old, v, MAC_LEN);
	else if (ret == 0)
		return STOR_EAUTH;
	else if (ret != -ENOENT)
		return ret;
	memcpy(nw, old, MAC_LEN);
	xor16(nw, delta);
	if (!is_zero(old)) {
		ret = group_term(mk, g, old, term);
		if (ret < 0)
			return ret;
		xor16(acc, term);
	}
	if (is_zero(nw)) {
		ret = meta_del(t, META_MAC, key, sizeof(key));
		return ret == -ENOENT ? 0 : ret;
	}
	ret = group_term(mk, g, nw, term);
	if (ret < 0)
		return ret;
	xor16(acc, term);
	return meta_put(t, META_MAC, key, sizeof(key), nw, MAC_LEN);
}

int bpmac_apply(struct meta_txn *t, struct bpmac_change *ch, size_t n)
{
	size_t i = 0;
	int ret = 0;

	qsort(ch, n, sizeof(*ch), cmp_change);
	while (i < n && ret == 0) {
		uint64_t id = ch[i].ds_id;
		const struct mac_key *mk = ch[i].mk;
		uint8_t acc[MAC_LEN];

		ret = get_root(t, id, acc);
		while (ret == 0 && i < n && ch[i].ds_id == id) {
			uint64_t g = ch[i].recno / MAC_GROUP;
			uint8_t delta[MAC_LEN] = { 0 };

			for (; i < n && ch[i].ds_id == id && ch[i].recno / MAC_GROUP == g; i++)
				xor16(delta, ch[i].delta);
			ret = apply_group(t, mk, id, g, delta, acc);
		}
		if (ret == 0)
			ret = put_root(t, id, mk, acc);
	}
	return ret;
}

static int none(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	(void)key, (void)klen, (void)val, (void)vlen, (void)ctx;
	return 0;
}

int bpmac_forget(struct meta_txn *t, uint64_t ds_id)
{
	uint8_t prefix[8], *p = prefix;

	put_u64(&p, ds_id);
	return meta_iter(t, META_MAC, prefix, sizeof(prefix), 1, none, NULL);
}

int bpmac_forget_tree(struct meta_txn *t, uint64_t id)
{
	uint8_t view[MAC_ROOT_LEN];
	int have = bpmac_row_get(t, id, MAC_VIEW, view) == 0;
	int ret = bpmac_forget(t, id);

	return ret == 0 && have ? bpmac_row_put(t, id, MAC_VIEW, view) : ret;
}

int bpmac_row_get(struct meta_txn *t, uint64_t id, uint64_t which, uint8_t out[MAC_ROOT_LEN])
{
	uint8_t key[16];
	const void *v;
	size_t vlen;
	int ret;

	mac_key_id(id, which, key);
	ret = meta_get(t, META_MAC, key, sizeof(key), &v, &vlen);
	if (ret == 0 && vlen != MAC_ROOT_LEN)
		return STOR_EAUTH;
	if (ret == 0)
		memcpy(out, v, MAC_ROOT_LEN);
	return ret;
}

int bpmac_row_put(struct meta_txn *t, uint64_t id, uint64_t which, const uint8_t in[MAC_ROOT_LEN])
{
	uint8_t key[16];

	mac_key_id(id, which, key);
	return meta_put(t, META_MAC, key, sizeof(key), in, MAC_ROOT_LEN);
}

int bpmac_view_save(struct meta_txn *t, uint64_t ds_id, uint64_t snap_id)
{
	uint8_t root[MAC_ROOT_LEN];
	int ret = bpmac_row_get(t, ds_id, MAC_ROOT, root);

	if (ret == -ENOENT)
		return STOR_EAUTH;
	return ret < 0 ? ret : bpmac_row_put(t, snap_id, MAC_VIEW, root);
}

int bpmac_sum_add(const struct mac_key *mk, uint64_t g, const uint8_t gmac[MAC_LEN],
		  uint8_t acc[MAC_LEN])
{
	uint8_t term[MAC_LEN];
	int ret;

	if (is_zero(gmac))
		return 0; /* an empty group has no term */
	ret = group_term(mk, g, gmac, term);
	xor16(acc, term);
	return ret;
}

int bpmac_root_check(const struct mac_key *mk, const uint8_t acc[MAC_LEN],
		     const uint8_t root[MAC_ROOT_LEN])
{
	uint8_t tag[MAC_LEN];
	int ret = root_tag(mk, root, tag);

	if (ret < 0)
		return ret;
	/* both comparisons always run: no early exit on secret-dependent data */
	if ((memcmp(tag, root + MAC_LEN, MAC_LEN) != 0) | (memcmp(acc, root, MAC_LEN) != 0))
		return STOR_EAUTH;
	return 0;
}

/* ---- a whole table's tree at once (a raw receive's first load-key, a rekey) ---- */

struct build {
	uint64_t id, max_birth; /* a snapshot table keeps pointers born by its txg */
	const struct mac_key *mk;
	struct bpmac_change *ch;
	size_t n, cap;
	uint64_t end; /* one past the highest record number seen */
	int clear;    /* a pointer without encryption: refused, */
	int clear_ok; /* unless a dataset being encrypted in place (rekey.c) */
};

static int leaf_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct build *b = ctx;
	const uint8_t *k = key;
	uint64_t recno, g;
	struct bp bp;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	if (!(bp.flags & BP_F_ENCRYPTED) && !b->clear_ok) {
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

int bpmac_build_table(struct meta_txn *t, uint64_t id, const struct mac_key *mk,
		      uint64_t max_birth, int clear_ok, uint64_t *end)
{
	struct build b = { .id = id, .mk = mk, .max_birth = max_birth, .end = *end,
			   .clear_ok = clear_ok };
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
