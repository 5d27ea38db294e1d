/* SPDX-License-Identifier: MIT */
/*
 * The encrypted children of an encrypted dataset, authenticated under its
 * key: the policy an attacker who holds the LMDB file and the LUNs cannot
 * remove without a key.
 *
 * Whether a dataset is encrypted is said by unkeyed metadata (the suite
 * byte of its record, its properties, the key file). The import refuses a
 * dataset called clear that owns sealed pointers (pool.c), but a dataset
 * with nothing written yet, moved out from under its encrypted parent and
 * called clear, would take every later write in plaintext. So each
 * encrypted dataset P keeps, under its MAC key (bpmac.c's, with tags of its
 * own), the set of its encrypted children and their suites:
 *
 *   term(c) = PRF(K_P, 'K' | c's GUID | c's suite)
 *   acc     = XOR of term(c) over the children
 *   tag     = PRF(K_P, 'N' | n | acc)
 *   row "kids/<P's id>" = u64 n | acc | tag | the tag of the empty list
 *
 * Every change of P's children (create, clone, a receive's end, destroy)
 * needs P's key and updates the row in the LMDB transaction that changes
 * the children; load-key of a root checks the row of each member against
 * the children the pool has (an encrypted root and its members: the chain
 * from a root down to every encrypted dataset below it). A child removed,
 * added, moved out, or given another suite makes its parent's load-key fail.
 * Suites of members are bound a second time by their wrapped keys (dskeys.c).
 *
 * A raw stream's dataset arrives with no key: it gets the empty list's tag
 * its sender stored (the same master key, GUID and suite give the same K),
 * carried in the stream (stream.h). A dataset being received (mark 1, recv.c)
 * joins its parent's list in the commit that ends its receive; cut short, it
 * is destroyed without ever having joined.
 *
 * Not covered: snapshots (dropping one loses old versions, never turns a
 * write clear), and encryption roots under a clear parent: the operator's
 * list of roots covers those (encryption_roots, daemon/roots.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypt/keys.h"
#include "ds/children.h"
#include "kv/meta.h"
#include "store.h"

#define ROW_LEN (8 + 3 * MAC_LEN)

static void row_key(uint64_t id, char key[32])
{
	snprintf(key, 32, "kids/%016llx", (unsigned long long)id);
}

static int term(const struct mac_key *mk, uint64_t guid, unsigned suite, uint8_t out[MAC_LEN])
{
	uint8_t msg[1 + 8 + 1], *w = msg;

	put_u8(&w, 'K');
	put_u64(&w, guid);
	put_u8(&w, (uint8_t)suite);
	return keys_prf128(mk->k, msg, sizeof(msg), out);
}

static int tag(const struct mac_key *mk, uint64_t n, const uint8_t acc[MAC_LEN],
	       uint8_t out[MAC_LEN])
{
	return bpmac_prf(mk, 'N', n, acc, out);
}

static int put_row(struct meta_txn *t, uint64_t id, uint64_t n, const uint8_t acc[MAC_LEN],
		   const uint8_t tg[MAC_LEN], const uint8_t empty[MAC_LEN])
{
	uint8_t row[ROW_LEN], *w = row;
	char key[32];

	put_u64(&w, n);
	put_bytes(&w, acc, MAC_LEN);
	put_bytes(&w, tg, MAC_LEN);
	put_bytes(&w, empty, MAC_LEN);
	row_key(id, key);
	return meta_put(t, META_POOL, key, strlen(key), row, sizeof(row));
}

/* The row of @id: n, acc, tag, empty. @return 0, STOR_EAUTH (missing or malformed) or an error */
static int get_row(struct meta_txn *t, uint64_t id, uint64_t *n, uint8_t acc[MAC_LEN],
		   uint8_t tg[MAC_LEN], uint8_t empty[MAC_LEN])
{
	const uint8_t *r;
	const void *v;
	size_t vlen;
	char key[32];
	int ret;

	row_key(id, key);
	ret = meta_get(t, META_POOL, key, strlen(key), &v, &vlen);
	if (ret == -ENOENT || (ret == 0 && vlen != ROW_LEN))
		return STOR_EAUTH;
	if (ret < 0)
		return ret;
	r = v;
	*n = get_u64(&r);
	get_bytes(&r, acc, MAC_LEN);
	get_bytes(&r, tg, MAC_LEN);
	get_bytes(&r, empty, MAC_LEN);
	return 0;
}

int children_init(struct meta_txn *t, uint64_t id, const struct mac_key *mk)
{
	uint8_t zero[MAC_LEN] = { 0 }, empty[MAC_LEN];
	int ret = tag(mk, 0, zero, empty);

	return ret < 0 ? ret : put_row(t, id, 0, zero, empty, empty);
}

int children_adopt(struct meta_txn *t, uint64_t id, const uint8_t empty[MAC_LEN])
{
	uint8_t zero[MAC_LEN] = { 0 };

	return put_row(t, id, 0, zero, empty, empty);
}

int children_empty_tag(struct meta_txn *t, uint64_t id, uint8_t out[MAC_LEN])
{
	uint8_t acc[MAC_LEN], tg[MAC_LEN];
	uint64_t n;

	return get_row(t, id, &n, acc, tg, out);
}

int children_change(struct meta_txn *t, uint64_t parent_id, const struct mac_key *pmk,
		    uint64_t guid, unsigned suite, int add)
{
	uint8_t acc[MAC_LEN], tg[MAC_LEN], want[MAC_LEN], empty[MAC_LEN], d[MAC_LEN];
	uint64_t n;
	int ret = get_row(t, parent_id, &n, acc, tg, empty);

	/* a list that does not verify is never signed again with a change */
	if (ret == 0)
		ret = tag(pmk, n, acc, want);
	if (ret == 0 && (memcmp(want, tg, MAC_LEN) || (!add && n == 0)))
		ret = STOR_EAUTH;
	if (ret == 0)
		ret = term(pmk, guid, suite, d);
	if (ret < 0)
		return ret;
	for (int i = 0; i < MAC_LEN; i++)
		acc[i] ^= d[i];
	n = add ? n + 1 : n - 1;
	ret = tag(pmk, n, acc, tg);
	return ret < 0 ? ret : put_row(t, parent_id, n, acc, tg, empty);
}

int children_forget(struct meta_txn *t, uint64_t id)
{
	char key[32];
	int ret;

	row_key(id, key);
	ret = meta_del(t, META_POOL, key, strlen(key));
	return ret == -ENOENT ? 0 : ret;
}

int children_sum_add(const struct mac_key *pmk, uint64_t guid, unsigned suite,
		     uint8_t acc[MAC_LEN])
{
	uint8_t d[MAC_LEN];
	int ret = term(pmk, guid, suite, d);

	for (int i = 0; ret == 0 && i < MAC_LEN; i++)
		acc[i] ^= d[i];
	return ret;
}

int children_check(struct meta_txn *t, uint64_t id, const struct mac_key *mk, uint64_t n,
		   const uint8_t acc[MAC_LEN], uint64_t *listed)
{
	uint8_t racc[MAC_LEN], tg[MAC_LEN], want[MAC_LEN], empty[MAC_LEN];
	uint64_t rn = 0;
	int ret = get_row(t, id, &rn, racc, tg, empty);

	*listed = rn;
	if (ret == 0)
		ret = tag(mk, rn, racc, want);
	if (ret == 0 && (memcmp(want, tg, MAC_LEN) || rn != n ||
			 memcmp(racc, acc, MAC_LEN)))
		ret = STOR_EAUTH;
	return ret;
}

struct destroy_task {
	uint64_t id;
	struct kids_join leave;
};

static int destroy_commit(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage)
{
	struct destroy_task *d = arg;
	int ret = children_forget(t, d->id);

	(void)free_extent;
	(void)stage;
	if (ret == 0 && d->leave.mk)
		ret = children_change(t, d->leave.parent_id, d->leave.mk, d->leave.guid,
				      d->leave.suite, 0);
	/* a list that did not verify stays so: its load-key says it, never the commit */
	return ret == STOR_EAUTH ? 0 : ret;
}

static void destroy_release(void *arg)
{
	struct destroy_task *d = arg;

	mac_key_put(d->leave.mk);
	free(d);
}

int children_destroy_task(uint64_t id, const struct kids_join *leave, struct txg_task *out)
{
	struct destroy_task *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->id = id;
	if (leave && leave->mk) {
		d->leave = *leave;
		mac_key_ref(d->leave.mk);
	}
	*out = (struct txg_task){ destroy_commit, destroy_release, d };
	return 0;
}
