/* SPDX-License-Identifier: MIT */
/*
 * Key state of datasets: which dataset is an encryption root, creating the
 * master key of a new dataset, load-key, unload-key, change-key, the data
 * key of each key salt, the MAC key of the block pointers, and the nonce
 * blocks writes draw from (the scheme itself is documented in crypt.c).
 * change-key -i (stor_key_inherit) is the way back: a root's master keys
 * are rewrapped by its parent's encryption root, and it stops being one.
 *
 * Invariants: a master key exists in memory only between load (or create)
 * and unload; it is stored only wrapped by its root's wrapping key with the
 * dataset's GUID and crypto parameters as AAD. A nonce block lives only in
 * the key state that drew it: nothing about it is read back from metadata.
 * A load-key installs no key whose dataset's MAC root does not verify.
 *
 * Crypto section of a dataset record: u8 suite. The rest (encryption root,
 * keyformat, iterations, salt, wrapped key) is in the key file (keyfile.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache.h"
#include "base/events.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/crypt.h"
#include "ds/children.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/keyfile.h"
#include "ds/props.h"
#include "ds/recv_state.h"
#include "ds/rekey.h"
#include "ds/snapshot.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/txg.h"

/* ---- in-memory key state ---- */

static void (*_Atomic key_drop_fn)(void);

void stor_set_key_drop_fn(void (*fn)(void))
{
	atomic_store(&key_drop_fn, fn);
}

static void keys_state_free(struct ds_keys *k)
{
	void (*dropped)(void) = atomic_load(&key_drop_fn);

	if (!k)
		return;
	while (k->all) {
		struct salt_key *next = k->all->next;
		crypt_key_free(k->all->key);
		free(k->all);
		k->all = next;
	}
	mac_key_put(k->mac);
	seen_bits_free(&k->seen);
	keys_secure_free(k->master, KEYS_MASTER_LEN);
	keys_secure_free(k->old, KEYS_MASTER_LEN);
	keys_secure_free(k->wk, KEYS_WRAPKEY_LEN);
	pthread_mutex_destroy(&k->lock);
	pthread_mutex_destroy(&k->nonce_lock);
	free(k);
	if (dropped)
		dropped();
}

/*
 * The key state of @ds: @master of generation @ds->keygen, a rekey's
 * previous master @old (or NULL), the MAC key from the master of
 * generation @mac_gen (rekey.c says which one the tree is under).
 */
struct ds_keys *dskeys_state_new(const struct stor_ds *ds, const uint8_t *master,
				 const uint8_t *old, unsigned mac_gen, const uint8_t *wk)
{
	struct ds_keys *k = calloc(1, sizeof(*k));
	const uint8_t *mac_master = mac_gen == ds->keygen ? master : old;

	if (!k)
		return NULL;
	pthread_mutex_init(&k->lock, NULL);
	pthread_mutex_init(&k->nonce_lock, NULL);
	k->gen = ds->keygen;
	k->mac_gen = mac_gen;
	for (unsigned g = 0; g < 2; g++)
		k->suite[g] = dskeys_suite_of(ds, g);
	k->master = keys_secure_alloc(KEYS_MASTER_LEN);
	if (!k->master || (old && !(k->old = keys_secure_alloc(KEYS_MASTER_LEN))) ||
	    (wk && !(k->wk = keys_secure_alloc(KEYS_WRAPKEY_LEN))) || !mac_master ||
	    !(k->mac = mac_key_new(mac_master, ds->guid, (unsigned)ds->suite))) {
		keys_state_free(k);
		return NULL;
	}
	memcpy(k->master, master, KEYS_MASTER_LEN);
	if (old)
		memcpy(k->old, old, KEYS_MASTER_LEN);
	if (wk)
		memcpy(k->wk, wk, KEYS_WRAPKEY_LEN);
	return k;
}

void dskeys_drop(struct stor_ds *ds)
{
	keys_state_free(atomic_exchange(&ds->keys, NULL));
}

void dskeys_state_free(struct ds_keys *k)
{
	keys_state_free(k);
}

int dskeys_has_gen(struct ds_keys *k, unsigned gen)
{
	int has;

	pthread_mutex_lock(&k->lock);
	has = gen == k->gen || k->old;
	pthread_mutex_unlock(&k->lock);
	return has;
}

static unsigned hot_slot(uint64_t salt)
{
	return (unsigned)((salt * 0x9e3779b97f4a7c15ull) >> 60) % DSKEYS_HOT;
}

static struct crypt_key *derive_data_key(struct ds_keys *k, unsigned gen, uint64_t guid,
					 uint64_t salt)
{
	uint8_t raw[CRYPT_KEY_MAX];
	int suite = k->suite[gen & 1];
	size_t len = crypt_suite_keylen((enum crypt_suite)suite);
	const uint8_t *master = gen == k->gen ? k->master : k->old;
	struct crypt_key *key = NULL;

	/* ds->suite was checked when its record was read (dskeys_parse), and a
	 * clear dataset has no keys to derive from; the caller checked @gen */
	if (STOR_FAILS_ASSERT(len > 0) || STOR_FAILS_ASSERT(master))
		return NULL;
	if (keys_derive_data(master, guid, (unsigned)suite, salt, raw, len) < 0 ||
	    crypt_key_new((enum crypt_suite)suite, raw, len, NULL, &key) < 0)
		key = NULL;
	keys_cleanse(raw, sizeof(raw));
	return key;
}

const struct crypt_key *dskeys_data_key(struct ds_keys *k, unsigned gen, uint64_t guid,
					uint64_t salt, struct crypt_key **own)
{
	_Atomic(struct salt_key *) *slot = &k->hot[hot_slot(salt)];
	struct salt_key *e = atomic_load_explicit(slot, memory_order_acquire);

	*own = NULL;
	/* a clone's state also derives its origin's keys (under their GUID) */
	if (e && e->salt == salt && e->guid == guid && e->gen == gen)
		return e->key;
	pthread_mutex_lock(&k->lock);
	for (e = k->all; e && (e->salt != salt || e->guid != guid || e->gen != gen); e = e->next)
		;
	if (!e && k->nall < DSKEYS_MAX_SALTS && (e = calloc(1, sizeof(*e)))) {
		e->key = derive_data_key(k, gen, guid, salt);
		if (!e->key) {
			free(e);
			e = NULL;
		} else {
			e->salt = salt;
			e->guid = guid;
			e->gen = gen;
			e->next = k->all;
			k->all = e;
			k->nall++;
		}
	}
	if (e)
		atomic_store_explicit(slot, e, memory_order_release);
	pthread_mutex_unlock(&k->lock);
	if (e)
		return e->key;
	/* a dataset of very many nonce blocks: beyond the cache, a key per use */
	*own = derive_data_key(k, gen, guid, salt);
	return *own;
}

void dskeys_nonces(struct ds_keys *k, size_t n, uint64_t *salt, uint32_t *prefix, uint64_t *first)
{
	pthread_mutex_lock(&k->nonce_lock);
	while (!k->have_block || k->next + n > CRYPT_BLOCK_RECORDS) {
		/* a fresh block: its own random salt (so its own data key) and prefix */
		if (keys_random(&k->salt, sizeof(k->salt)) < 0 ||
		    keys_random(&k->prefix, sizeof(k->prefix)) < 0)
			abort(); /* no randomness: sealing anything now could repeat a nonce */
		k->next = 0;
		k->have_block = 1;
	}
	*salt = k->salt;
	*prefix = k->prefix;
	*first = k->next;
	k->next += n;
	pthread_mutex_unlock(&k->nonce_lock);
}

int dskeys_init_macs(struct meta_txn *t, struct stor_ds *ds)
{
	struct ds_keys *k = atomic_load(&ds->keys);

	if (!ds->suite)
		return 0;
	return k ? bpmac_root_init(t, ds->id, k->mac) : STOR_ENOKEY;
}

/* ---- records ---- */

void dskeys_record(struct stor_ds *ds, uint8_t **w)
{
	put_u8(w, (uint8_t)ds->suite);
}

int dskeys_parse(struct stor_ds *ds, const uint8_t **r, const uint8_t *end)
{
	if (end - *r != (long)DSKEYS_RECORD_LEN)
		return STOR_ECORRUPT;
	ds->suite = get_u8(r);
	if (ds->suite >= CRYPT_NSUITES)
		return STOR_ECORRUPT;
	return 0;
}

/* ---- create ---- */

unsigned dskeys_suite_of(const struct stor_ds *ds, unsigned gen)
{
	int s = gen == ds->keygen ? ds->key_suite : ds->old_suite;

	return (unsigned)(s ? s : ds->suite);
}

/* The AAD of @ds's master key of generation @gen, wrapped by @root's key:
 * its suite is that generation's (a suite change has two). */
static size_t wrap_aad_gen(const struct stor_ds *ds, unsigned gen, const struct stor_ds *root,
			   uint8_t aad[64])
{
	return keys_wrap_aad(ds->guid, dskeys_suite_of(ds, gen), (enum stor_keyformat)root->keyformat,
			     root->iters, root->salt, aad);
}

static size_t wrap_aad(const struct stor_ds *ds, const struct stor_ds *root, uint8_t aad[64])
{
	return keys_wrap_aad(ds->guid, (unsigned)ds->suite, (enum stor_keyformat)root->keyformat,
			     root->iters, root->salt, aad);
}

static int derive_wk(const struct stor_ds *root, const struct stor_key_material *m,
		     uint8_t wk[KEYS_WRAPKEY_LEN])
{
	if (!m || !m->data)
		return -EINVAL;
	return keys_derive_wrapping((enum stor_keyformat)root->keyformat, m, root->salt, root->iters,
				    wk);
}

/* derive_wk() for a key being set (create, change-key): refuse one that
 * cannot be random. load-key never checks, so nothing made before is lost. */
static int derive_new_wk(const struct stor_ds *root, const struct stor_key_material *m,
			 uint8_t wk[KEYS_WRAPKEY_LEN])
{
	int ret = derive_wk(root, m, wk);

	if (ret == 0)
		ret = keys_check_random((enum stor_keyformat)root->keyformat, wk);
	if (ret < 0)
		keys_cleanse(wk, KEYS_WRAPKEY_LEN);
	return ret;
}

/* Make @ds the encryption root of its own key from the local keyformat/pbkdf2iters. */
static int become_root(struct stor_ds *ds, const char *fmtname, const char *iters)
{
	int fmt = fmtname ? keys_format_parse(fmtname) : -1;

	if (fmt <= STOR_KEY_NONE) {
		pool_set_error("a new encryption root needs keyformat=raw, hex or passphrase");
		return -EINVAL;
	}
	ds->keyformat = fmt;
	ds->iters = fmt == STOR_KEY_PASSPHRASE ? (iters ? (uint32_t)strtoul(iters, NULL, 10)
							: KEYS_PBKDF2_DEFAULT)
					       : 0;
	ds->enc_root_id = ds->id;
	return keys_random(ds->salt, sizeof(ds->salt));
}

int dskeys_create(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *parent,
		  const struct stor_ds_opts *o)
{
	const char *enc = ds->local[PROP_ENCRYPTION], *fmt = ds->local[PROP_KEYFORMAT];
	uint8_t master[KEYS_MASTER_LEN], wk[KEYS_WRAPKEY_LEN], aad[64];
	struct stor_ds *root;
	struct ds_keys *pk, *k;
	int ret, suite;

	if (!enc && fmt)
		enc = "aes-256-ccm"; /* keyformat alone means encryption=on */
	suite = enc ? crypt_suite_parse(enc) : parent ? parent->suite : CRYPT_OFF;
	if (suite < 0)
		return STOR_EBADPROP;
	if (parent && parent->suite && suite == CRYPT_OFF) {
		pool_set_error("cannot create an unencrypted dataset under an encrypted parent");
		return -EINVAL;
	}
	ds->suite = suite;
	if (suite == CRYPT_OFF) {
		if (!fmt && !ds->local[PROP_PBKDF2ITERS])
			return 0;
		pool_set_error("keyformat and pbkdf2iters need encryption");
		return -EINVAL;
	}
	if (enc && !ds->local[PROP_ENCRYPTION]) {
		ds->local[PROP_ENCRYPTION] = strdup(crypt_suite_name((enum crypt_suite)suite));
		if (!ds->local[PROP_ENCRYPTION])
			return -ENOMEM;
	}
	if (fmt || !parent || !parent->suite) {
		ret = become_root(ds, fmt, ds->local[PROP_PBKDF2ITERS]);
		if (ret < 0)
			return ret;
		if (!ds->local[PROP_KEYLOCATION] && !(ds->local[PROP_KEYLOCATION] = strdup("prompt")))
			return -ENOMEM;
		if (ds->keyformat == STOR_KEY_PASSPHRASE && !ds->local[PROP_PBKDF2ITERS]) {
			char buf[16];
			snprintf(buf, sizeof(buf), "%u", ds->iters);
			if (!(ds->local[PROP_PBKDF2ITERS] = strdup(buf)))
				return -ENOMEM;
		}
		ret = derive_new_wk(ds, o->key, wk);
		if (ret < 0)
			return ret;
		root = ds;
	} else {
		if (o->key)
			return -EINVAL; /* a key makes sense only with keyformat */
		root = ds_find_id_locked(p, parent->enc_root_id);
		pk = root ? atomic_load(&root->keys) : NULL;
		if (!pk)
			return STOR_ENOKEY;
		ds->enc_root_id = root->id;
		memcpy(wk, pk->wk, sizeof(wk));
	}
	ret = keys_random(master, sizeof(master));
	if (ret == 0)
		ret = keys_wrap(wk, aad, wrap_aad(ds, root, aad), master, ds->wrapped);
	k = ret == 0 ? dskeys_state_new(ds, master, NULL, ds->keygen, root == ds ? wk : NULL) : NULL;
	if (ret == 0 && !k)
		ret = -ENOMEM;
	keys_cleanse(master, sizeof(master));
	keys_cleanse(wk, sizeof(wk));
	if (ret < 0)
		return ret;
	atomic_store(&ds->keys, k);
	return 0;
}

/* A raw stream's dataset (recv.c): the source's GUID and master key, wrapped
 * as its encryption root wrapped it, so that root's key unwraps it here; it
 * is a root of its own. No key is loaded: the MACs wait (recv_build_macs). */
int dskeys_adopt(struct stor_ds *ds, const struct recv_identity *id)
{
	const char *v[3] = { crypt_suite_name((enum crypt_suite)id->suite),
			     keys_format_name((enum stor_keyformat)id->keyformat), "prompt" };
	const int props[3] = { PROP_ENCRYPTION, PROP_KEYFORMAT, PROP_KEYLOCATION };
	char iters[16];

	ds->guid = id->guid;
	ds->suite = id->suite;
	ds->enc_root_id = ds->id;
	ds->keyformat = id->keyformat;
	ds->iters = id->iters;
	memcpy(ds->salt, id->salt, sizeof(ds->salt));
	memcpy(ds->wrapped, id->wrapped, sizeof(ds->wrapped));
	ds->keygen = id->keygen;
	for (int i = 0; i < 3; i++) {
		free(ds->local[props[i]]);
		if (!v[i] || !(ds->local[props[i]] = strdup(v[i])))
			return -ENOMEM;
	}
	if (id->keyformat == STOR_KEY_PASSPHRASE) {
		snprintf(iters, sizeof(iters), "%u", id->iters);
		free(ds->local[PROP_PBKDF2ITERS]);
		if (!(ds->local[PROP_PBKDF2ITERS] = strdup(iters)))
			return -ENOMEM;
	}
	return 0;
}

/* ---- load, unload, change ---- */

static int under(const struct stor_ds *d, const struct stor_ds *top)
{
	size_t n = strlen(top->name);

	return d == top || (strncmp(d->name, top->name, n) == 0 && d->name[n] == '/');
}

/* A dataset whose key change-key on @top rewraps: @top and the members of
 * its old encryption root below it. */
static int member(const struct stor_ds *d, const struct stor_ds *top, uint64_t old_root)
{
	return d == top || (d->suite && d->enc_root_id == old_root && under(d, top));
}

/*
 * A clone reads its origin's records, so it holds the same master key, as a
 * ZFS clone shares its origin's key: wrapped again by the root's wrapping
 * key with the clone's own GUID as AAD, so it is an entry of the key file
 * like any member's, loaded, unloaded and rewrapped with the root. It must
 * sit under that root: change-key rewraps the members below the root only.
 * Its own data keys are HKDF(master, its GUID, ...), never its origin's.
 */
int dskeys_clone(struct stor_pool *p, struct stor_ds *ds, const struct stor_ds *parent,
		 const struct stor_ds *origin)
{
	struct stor_ds *root;
	struct ds_keys *rk, *ok, *k;
	uint8_t aad[64];
	int ret;

	if (ds->local[PROP_ENCRYPTION] || ds->local[PROP_KEYFORMAT] ||
	    ds->local[PROP_KEYLOCATION] || ds->local[PROP_PBKDF2ITERS]) {
		pool_set_error("a clone has its origin's encryption and key: set neither");
		return -EINVAL;
	}
	ds->suite = origin->suite;
	if (!ds->suite) {
		if (parent && parent->suite) {
			pool_set_error("cannot create an unencrypted dataset under an encrypted parent");
			return -EINVAL;
		}
		return 0;
	}
	root = ds_find_id_locked(p, origin->enc_root_id);
	if (!root || !under(ds, root) || ds == root) {
		pool_set_error("a clone of %s goes under its encryption root %s, whose key it shares",
			       origin->name, root ? root->name : "-");
		return -EINVAL;
	}
	rk = atomic_load(&root->keys);
	ok = atomic_load(&origin->keys);
	if (!rk || !ok || !rk->wk) {
		pool_set_error("the key of %s is not loaded; load it to clone", root->name);
		return STOR_ENOKEY;
	}
	if (parent->suite != ds->suite &&
	    !(ds->local[PROP_ENCRYPTION] = strdup(crypt_suite_name((enum crypt_suite)ds->suite))))
		return -ENOMEM;
	if (rekey_under_way(origin)) {
		rekey_busy_error(origin, "clone it");
		return -EBUSY;
	}
	ds->enc_root_id = root->id;
	/* the clone reads its origin's records: the same master, of their generation */
	ds->keygen = origin->keygen;
	ret = keys_wrap(rk->wk, aad, wrap_aad(ds, root, aad), ok->master, ds->wrapped);
	k = ret == 0 ? dskeys_state_new(ds, ok->master, NULL, ds->keygen, NULL) : NULL;
	if (ret == 0 && !k)
		ret = -ENOMEM;
	if (ret < 0)
		return ret;
	atomic_store(&ds->keys, k);
	return 0;
}

/*
 * The list of encrypted children of each dataset whose key @states holds
 * (by table index), against the children the pool has (children.c).
 * @return 0, STOR_EAUTH (pool error set) or an error
 */
static int check_children(struct stor_pool *p, struct ds_keys *const *states)
{
	struct sum {
		uint64_t n;
		uint8_t acc[MAC_LEN];
	} *sum = calloc(p->nds + 1, sizeof(*sum));
	struct meta_txn *t = NULL;
	uint64_t listed = 0;
	int ret = sum ? 0 : -ENOMEM;

	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		const struct stor_ds *d = p->ds[i];
		size_t pi = ds_parent_index_locked(p, d);

		/* a clear one under an encrypted parent: the import refuses the pool */
		if (pi >= p->nds || !states[pi] || d->unlisted || !d->suite)
			continue;
		ret = children_sum_add(states[pi]->mac, d->guid, (unsigned)d->suite, sum[pi].acc);
		sum[pi].n++;
	}
	if (ret == 0)
		ret = meta_rtxn_get(p->meta, &t);
	for (size_t i = 0; i < p->nds && ret == 0 && t; i++) {
		if (!states[i])
			continue;
		ret = children_check(t, p->ds[i]->id, states[i]->mac, sum[i].n, sum[i].acc, &listed);
		if (ret == STOR_EAUTH)
			pool_set_error("dataset %s: its list of encrypted children does not verify "
				       "(%llu listed, %llu under it now): a child was removed, added, "
				       "moved or made unencrypted without its key",
				       p->ds[i]->name, (unsigned long long)listed,
				       (unsigned long long)sum[i].n);
	}
	if (t)
		meta_rtxn_put(t);
	free(sum);
	return ret;
}

static int find_root(struct stor_pool *p, const char *name, struct stor_ds **out)
{
	struct stor_ds *ds = ds_find_locked(p, name);

	if (!ds)
		return -ENOENT;
	if (!ds->suite)
		return STOR_ENOTENCRYPTED;
	if (ds->enc_root_id != ds->id)
		return STOR_ENOTROOT;
	*out = ds;
	return 0;
}

int stor_key_load(struct stor_pool *p, const char *name, const struct stor_key_material *key,
		  unsigned flags)
{
	uint8_t wk[KEYS_WRAPKEY_LEN], master[KEYS_MASTER_LEN], old[KEYS_MASTER_LEN], aad[64];
	struct ds_keys **states = NULL;
	struct stor_ds *root = NULL;
	size_t n = 0;
	int ret, mac_gen;

	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ret = find_root(p, name, &root);
	if (ret < 0)
		goto out;
	if (atomic_load(&root->keys)) {
		ret = -EEXIST;
		goto out;
	}
	ret = derive_wk(root, key, wk);
	if (ret < 0)
		goto out;
	states = calloc(p->nds, sizeof(*states));
	if (!states) {
		ret = -ENOMEM;
		goto out;
	}
	/* unwrap every member first; install only if all succeed */
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *d = p->ds[i];
		if (!d->suite || d->enc_root_id != root->id)
			continue;
		ret = keys_unwrap(wk, aad, wrap_aad_gen(d, d->keygen, root, aad), d->wrapped, master);
		if (ret < 0) {
			/* the root's key opens the root: a member that fails was tampered with */
			ret = d == root ? ret : STOR_ECORRUPT;
			goto out;
		}
		/* a rekey under way: its previous key too, and the tree's generation */
		if (d->has_old &&
		    keys_unwrap(wk, aad, wrap_aad_gen(d, d->keygen ^ 1u, root, aad), d->wrapped_old,
				old) < 0)
			ret = STOR_ECORRUPT;
		mac_gen = ret == 0 ? rekey_mac_gen(p, d) : ret;
		if (mac_gen < 0) {
			keys_cleanse(master, sizeof(master));
			ret = mac_gen;
			goto out;
		}
		states[i] = dskeys_state_new(d, master, d->has_old ? old : NULL, (unsigned)mac_gen,
					     d == root ? wk : NULL);
		keys_cleanse(master, sizeof(master));
		keys_cleanse(old, sizeof(old));
		if (!states[i]) {
			ret = -ENOMEM;
			goto out;
		}
		/* no key goes in for a dataset whose metadata does not verify; a
		 * raw receive's gets its MACs now, from its first key (recv.c) */
		ret = recv_macs_pending(p, d);
		if (ret == -EBUSY) {
			if (atomic_load(&d->partial))
				recv_busy_error(d);
			else
				pool_set_error("%s is being received; load its key once that is "
					       "done", d->name);
			goto out;
		}
		if (ret == 0)
			ret = bpmac_verify_root(p->meta, d->id, states[i]->mac);
		else if (ret == 1)
			ret = recv_build_macs(p, d, states[i], NULL,
					      flags & STOR_KEY_NOOP ? RECV_BUILD_DRY : 0);
		if (ret < 0) {
			pool_set_error("dataset %s: block pointer MACs do not verify (%s): "
				       "its metadata was changed without its key",
				       d->name, stor_strerror(ret));
			goto out;
		}
		n++;
	}
	ret = check_children(p, states);
	if (ret < 0)
		goto out;
	/* every key in before a rekey goes on: a clone's switches with its origin */
	for (size_t i = 0; i < p->nds && !(flags & STOR_KEY_NOOP); i++)
		if (states[i])
			atomic_store(&p->ds[i]->keys, states[i]);
	for (size_t i = 0; i < p->nds && !(flags & STOR_KEY_NOOP); i++)
		if (states[i]) {
			states[i] = NULL;
			rekey_resume(p, p->ds[i]); /* one that was running goes on */
		}
	ret = 0;
out:
	if (states)
		for (size_t i = 0; i < p->nds; i++)
			keys_state_free(states[i]);
	free(states);
	keys_cleanse(wk, sizeof(wk));
	pthread_mutex_unlock(&p->admin);
	if (ret == 0 && !(flags & STOR_KEY_NOOP))
		EVENT(STOR_EV_KEY_LOAD, p->name, EV_STR("dataset", name), EV_NUM("datasets", n));
	return ret;
}

/*
 * Without STOR_FORCE a key in use stays: every request on an open handle
 * would fail with STOR_ENOKEY from then on (tens of thousands a second
 * under load), so an open handle makes it -EBUSY, as for ZFS and
 * cryptsetup close.
 */
int stor_key_unload(struct stor_pool *p, const char *name, unsigned flags)
{
	struct ds_keys **old = NULL;
	struct stor_ds *root = NULL;
	int ret, refs = 0;
	size_t n = 0;

	pthread_mutex_lock(&p->admin);
	ret = find_root(p, name, &root);
	if (ret < 0)
		goto out;
	if (!atomic_load(&root->keys)) {
		ret = STOR_ENOKEY; /* nothing to unload: not "no such dataset" */
		goto out;
	}
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->suite && p->ds[i]->enc_root_id == root->id)
			refs += atomic_load(&p->ds[i]->refs);
	if (refs > 0 && !(flags & STOR_FORCE)) {
		ret = -EBUSY;
		goto out;
	}
	old = calloc(p->nds, sizeof(*old));
	if (!old) {
		ret = -ENOMEM;
		goto out;
	}
	/* a rekey stops where it is, and goes on at the next load-key */
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->suite && p->ds[i]->enc_root_id == root->id)
			rekey_halt(p->ds[i]);
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->suite && p->ds[i]->enc_root_id == root->id)
			n += (old[i] = atomic_exchange(&p->ds[i]->keys, NULL)) != NULL;
	/* records being sealed or opened with these keys finish first */
	txg_read_synchronize(p);
	for (size_t i = 0; i < p->nds; i++) {
		if (old[i]) {
			cache_drop_ds(cache_data(), p->ds[i]->guid); /* no plaintext stays */
			snap_drop_keys(p->ds[i]);
		}
		keys_state_free(old[i]);
	}
	free(old);
out:
	pthread_mutex_unlock(&p->admin);
	if (ret == 0)
		EVENT(STOR_EV_KEY_UNLOAD, p->name, EV_STR("dataset", name), EV_NUM("datasets", n));
	return ret;
}

static const int key_props[3] = { PROP_KEYFORMAT, PROP_KEYLOCATION, PROP_PBKDF2ITERS };

/* The values of key_props[] on @ds once it is the root of its new key:
 * keylocation @loc if given, else its own, else "prompt"; pbkdf2iters only
 * for a passphrase. @return 0 or -ENOMEM */
static int new_key_props(const struct stor_ds *ds, const char *loc, char *v[3])
{
	const char *l = loc ? loc : ds->local[PROP_KEYLOCATION] ? ds->local[PROP_KEYLOCATION]
								 : "prompt";
	char num[16];

	snprintf(num, sizeof(num), "%u", ds->iters);
	v[0] = strdup(keys_format_name((enum stor_keyformat)ds->keyformat));
	v[1] = strdup(l);
	v[2] = ds->keyformat == STOR_KEY_PASSPHRASE ? strdup(num) : NULL;
	if (v[0] && v[1] && (v[2] || ds->keyformat != STOR_KEY_PASSPHRASE))
		return 0;
	for (int j = 0; j < 3; j++) {
		free(v[j]);
		v[j] = NULL;
	}
	return -ENOMEM;
}

/*
 * A clone holds its origin's master key under the same root (clone_import
 * refuses a pool where they differ), so a key change that moves the
 * datasets @moved (one flag each, p->ds's order) to another root must move
 * each clone together with its origin, or neither. Under p->admin.
 * @return 0, or -EXDEV with the text
 */
static int keeps_clones_with_origins(struct stor_pool *p, const char *moved)
{
	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < p->nds; i++) {
		const struct stor_ds *d = p->ds[i];

		if (!d->origin || !d->suite)
			continue;
		for (size_t j = 0; j < p->nds; j++) {
			if (p->ds[j] != d->origin->ds || !moved[j] == !moved[i])
				continue;
			pool_set_error("this would give clone %s another encryption root than its "
				       "origin %s, whose key it shares; promote it or change the "
				       "key of their common root",
				       d->name, d->origin->ds->name);
			return -EXDEV;
		}
	}
	return 0;
}

/*
 * A rekey keeps two master keys of a dataset wrapped until it completes:
 * rewrapping one and not the other would lose records, so a key change
 * over a dataset being rekeyed waits for it. @return 0 or -EBUSY
 */
static int none_rekeying(struct stor_pool *p, const char *member_of)
{
	for (size_t i = 0; i < p->nds; i++)
		if (member_of[i] && rekey_under_way(p->ds[i])) {
			rekey_busy_error(p->ds[i], "change its key");
			return -EBUSY;
		}
	return 0;
}

int stor_key_change(struct stor_pool *p, const char *name, const char *const *props,
		    size_t nprops, const struct stor_key_material *key)
{
	struct stor_ds *ds, *oldroot;
	uint8_t wk[KEYS_WRAPKEY_LEN], aad[64], master[KEYS_MASTER_LEN];
	uint8_t (*wrapped)[KEYS_WRAPPED_LEN] = NULL, (*keep)[KEYS_WRAPPED_LEN] = NULL;
	uint64_t *keep_root = NULL, old_root_id;
	const char *fmt = NULL, *loc = NULL, *iters = NULL;
	char canon[3][256], *member_of = NULL, *newv[3] = { NULL }, *oldv[3] = { NULL };
	struct {
		int keyformat;
		uint32_t iters;
		uint8_t salt[KEYS_SALT_LEN];
	} saved;
	struct ds_keys *rk;
	int ret = 0;

	for (size_t i = 0; i < nprops && ret == 0; i++) {
		const char *v = strchr(props[i], '=');
		int id;
		char pn[32];
		if (!v || (size_t)(v - props[i]) >= sizeof(pn))
			return STOR_EBADPROP;
		memcpy(pn, props[i], (size_t)(v - props[i]));
		pn[v - props[i]] = '\0';
		id = prop_lookup(pn);
		if (id == PROP_KEYFORMAT)
			ret = prop_validate(id, v + 1, canon[0], sizeof(canon[0])), fmt = canon[0];
		else if (id == PROP_KEYLOCATION)
			ret = prop_validate(id, v + 1, canon[1], sizeof(canon[1])), loc = canon[1];
		else if (id == PROP_PBKDF2ITERS)
			ret = prop_validate(id, v + 1, canon[2], sizeof(canon[2])), iters = canon[2];
		else
			ret = STOR_EBADPROP;
	}
	if (ret < 0)
		return ret;
	if (fmt && keys_format_parse(fmt) <= STOR_KEY_NONE)
		return STOR_EBADPROP;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds) {
		ret = -ENOENT;
		goto out;
	}
	if (!ds->suite) {
		ret = STOR_ENOTENCRYPTED;
		goto out;
	}
	oldroot = ds_find_id_locked(p, ds->enc_root_id);
	if (!oldroot || !atomic_load(&oldroot->keys) || !atomic_load(&ds->keys)) {
		ret = STOR_ENOKEY;
		goto out;
	}
	wrapped = calloc(p->nds, sizeof(*wrapped));
	keep = calloc(p->nds, sizeof(*keep));
	keep_root = calloc(p->nds, sizeof(*keep_root));
	member_of = calloc(p->nds, 1);
	if (!wrapped || !keep || !keep_root || !member_of) {
		ret = -ENOMEM;
		goto out;
	}
	old_root_id = ds->enc_root_id;
	for (size_t i = 0; i < p->nds; i++)
		member_of[i] = (char)member(p->ds[i], ds, old_root_id);
	if (ds->id != old_root_id && (ret = keeps_clones_with_origins(p, member_of)) < 0)
		goto out;
	if ((ret = none_rekeying(p, member_of)) < 0)
		goto out;
	saved.keyformat = ds->keyformat;
	saved.iters = ds->iters;
	memcpy(saved.salt, ds->salt, sizeof(saved.salt));

	/* the new wrapping: @ds becomes (or stays) an encryption root */
	ds->keyformat = fmt ? keys_format_parse(fmt) : oldroot->keyformat;
	if (ds->keyformat == STOR_KEY_PASSPHRASE)
		ds->iters = iters ? (uint32_t)strtoul(iters, NULL, 10)
				  : oldroot->iters ? oldroot->iters : KEYS_PBKDF2_DEFAULT;
	else
		ds->iters = 0;
	ret = keys_random(ds->salt, sizeof(ds->salt));
	if (ret == 0)
		ret = derive_new_wk(ds, key, wk);
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct stor_ds *d = p->ds[i];
		struct ds_keys *k = atomic_load(&d->keys);

		if (!member_of[i])
			continue;
		if (!k) {
			ret = STOR_ENOKEY;
			break;
		}
		memcpy(master, k->master, sizeof(master));
		ret = keys_wrap(wk, aad, wrap_aad(d, ds, aad), master, wrapped[i]);
		keys_cleanse(master, sizeof(master));
	}
	if (ret == 0)
		ret = new_key_props(ds, loc, newv);
	if (ret < 0)
		goto restore;
	/* keyformat, keylocation and iterations show as local on the new root;
	 * the key file carries them, so they commit with the wrapped keys */
	for (int j = 0; j < 3; j++) {
		oldv[j] = ds->local[key_props[j]];
		ds->local[key_props[j]] = newv[j];
		newv[j] = NULL;
	}
	for (size_t i = 0; i < p->nds; i++) {
		if (!member_of[i])
			continue;
		memcpy(keep[i], p->ds[i]->wrapped, KEYS_WRAPPED_LEN);
		keep_root[i] = p->ds[i]->enc_root_id;
		memcpy(p->ds[i]->wrapped, wrapped[i], KEYS_WRAPPED_LEN);
		p->ds[i]->enc_root_id = ds->id;
	}
	/*
	 * The commit point: the key file is replaced whole, with the wrapped
	 * keys and the properties that say how to unwrap them. Nothing is
	 * written to LMDB: a crash after the rename cannot leave properties of
	 * the old key behind, and no later write can fail a change already made.
	 */
	ret = keyfile_save(p, NULL);
	if (ret < 0) {
		for (size_t i = 0; i < p->nds; i++) {
			if (!member_of[i])
				continue;
			memcpy(p->ds[i]->wrapped, keep[i], KEYS_WRAPPED_LEN);
			p->ds[i]->enc_root_id = keep_root[i];
		}
		for (int j = 0; j < 3; j++) {
			newv[j] = ds->local[key_props[j]];
			ds->local[key_props[j]] = oldv[j];
			oldv[j] = NULL;
		}
		goto restore;
	}
	/* the new root keeps its wrapping key for children created later */
	rk = atomic_load(&ds->keys);
	if (!rk->wk)
		rk->wk = keys_secure_alloc(KEYS_WRAPKEY_LEN);
	if (rk->wk)
		memcpy(rk->wk, wk, KEYS_WRAPKEY_LEN);
	goto out;
restore:
	ds->keyformat = saved.keyformat;
	ds->iters = saved.iters;
	memcpy(ds->salt, saved.salt, sizeof(ds->salt));
out:
	for (int j = 0; j < 3; j++) {
		free(newv[j]);
		free(oldv[j]);
	}
	keys_cleanse(wk, sizeof(wk));
	free(wrapped);
	free(keep);
	free(keep_root);
	free(member_of);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/*
 * change-key -i: the members of root @name (it and the datasets that use its
 * key) are rewrapped by the wrapping key of its parent's encryption root,
 * and join that root. Their master keys stay, so no data is touched. As for
 * change-key, the key file's replacement is the one commit point, and it
 * carries the key properties too: @name's local keyformat, keylocation and
 * pbkdf2iters go, and it inherits them from its new root.
 */
int stor_key_inherit(struct stor_pool *p, const char *name)
{
	uint8_t (*wrapped)[KEYS_WRAPPED_LEN] = NULL, (*keep)[KEYS_WRAPPED_LEN] = NULL;
	uint8_t aad[64];
	struct stor_ds *ds = NULL, *parent = NULL, *newroot = NULL;
	struct ds_keys *rk, *k;
	char pname[STOR_NAME_MAX + 1], *slash, *moved = NULL, *oldv[3] = { NULL };
	struct {
		int keyformat;
		uint32_t iters;
		uint8_t salt[KEYS_SALT_LEN];
	} saved;
	int ret = 0;

	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ret = find_root(p, name, &ds);
	if (ret == STOR_ENOTROOT) {
		struct stor_ds *d = ds_find_locked(p, name), *r;

		r = d ? ds_find_id_locked(p, d->enc_root_id) : NULL;
		pool_set_error("%s already uses the key of encryption root %s", name,
			       r ? r->name : "?");
		goto out;
	}
	if (ret < 0)
		goto out;
	snprintf(pname, sizeof(pname), "%s", name);
	slash = strrchr(pname, '/');
	if (slash) {
		*slash = '\0';
		parent = ds_find_locked(p, pname);
	}
	if (!parent) {
		pool_set_error("%s is a pool's root dataset: it has no parent to inherit a key from",
			       name);
		ret = -EINVAL;
		goto out;
	}
	if (!parent->suite) {
		pool_set_error("cannot inherit a key: the parent %s is not encrypted", pname);
		ret = -EINVAL;
		goto out;
	}
	newroot = ds_find_id_locked(p, parent->enc_root_id);
	rk = newroot ? atomic_load(&newroot->keys) : NULL;
	if (!rk || !rk->wk) {
		pool_set_error("the key of encryption root %s is not loaded; run 'coffer load-key "
			       "%s' first",
			       newroot ? newroot->name : pname, newroot ? newroot->name : pname);
		ret = STOR_ENOKEY;
		goto out;
	}
	k = atomic_load(&ds->keys);
	if (!k) {
		pool_set_error("the key of %s is not loaded; run 'coffer load-key %s' first, or "
			       "give change-key -l",
			       name, name);
		ret = STOR_ENOKEY;
		goto out;
	}
	wrapped = calloc(p->nds, sizeof(*wrapped));
	keep = calloc(p->nds, sizeof(*keep));
	moved = calloc(p->nds, 1);
	if (!wrapped || !keep || !moved) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < p->nds; i++)
		moved[i] = p->ds[i]->suite && p->ds[i]->enc_root_id == ds->id;
	ret = keeps_clones_with_origins(p, moved);
	if (ret == 0)
		ret = none_rekeying(p, moved);
	/* wrap every member first: nothing changes unless all of them can */
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		struct stor_ds *d = p->ds[i];
		struct ds_keys *dk = atomic_load(&d->keys);

		if (!d->suite || d->enc_root_id != ds->id)
			continue;
		if (!dk) {
			ret = STOR_ENOKEY;
			break;
		}
		/* straight from the locked key page: no copy of the master key on the stack */
		ret = keys_wrap(rk->wk, aad, wrap_aad(d, newroot, aad), dk->master, wrapped[i]);
	}
	if (ret < 0)
		goto out;
	saved.keyformat = ds->keyformat;
	saved.iters = ds->iters;
	memcpy(saved.salt, ds->salt, sizeof(saved.salt));
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *d = p->ds[i];

		if (!d->suite || d->enc_root_id != ds->id)
			continue;
		memcpy(keep[i], d->wrapped, KEYS_WRAPPED_LEN);
		memcpy(d->wrapped, wrapped[i], KEYS_WRAPPED_LEN);
		d->enc_root_id = newroot->id;
		moved[i] = 1;
	}
	/* a member's own wrapping parameters are its root's: none of its own now */
	ds->keyformat = STOR_KEY_NONE;
	ds->iters = 0;
	memset(ds->salt, 0, sizeof(ds->salt));
	for (int j = 0; j < 3; j++) {
		oldv[j] = ds->local[key_props[j]];
		ds->local[key_props[j]] = NULL;
	}
	ret = keyfile_save(p, NULL);
	if (ret < 0) {
		for (size_t i = 0; i < p->nds; i++) {
			if (moved[i]) {
				memcpy(p->ds[i]->wrapped, keep[i], KEYS_WRAPPED_LEN);
				p->ds[i]->enc_root_id = ds->id;
			}
		}
		ds->keyformat = saved.keyformat;
		ds->iters = saved.iters;
		memcpy(ds->salt, saved.salt, sizeof(ds->salt));
		for (int j = 0; j < 3; j++) {
			ds->local[key_props[j]] = oldv[j];
			oldv[j] = NULL;
		}
		goto out;
	}
	/* no longer a root: its wrapping key opens nothing, so it goes */
	keys_secure_free(k->wk, KEYS_WRAPKEY_LEN);
	k->wk = NULL;
out:
	for (int j = 0; j < 3; j++)
		free(oldv[j]);
	free(wrapped);
	free(keep);
	free(moved);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/* ---- key generations (rekey.c) ---- */

/* @ds as it was before dskeys_new_gen() changed it, which failed. */
static void undo_new_gen(struct stor_ds *ds, const uint8_t keep[KEYS_WRAPPED_LEN])
{
	memcpy(ds->wrapped, keep, KEYS_WRAPPED_LEN);
	memset(ds->wrapped_old, 0, sizeof(ds->wrapped_old));
	ds->keygen ^= 1u;
	ds->has_old = 0;
	ds->key_suite = ds->old_suite = 0;
}

int dskeys_new_gen(struct stor_pool *p, struct stor_ds *const *dss, size_t n, uint8_t *master,
		   unsigned suite)
{
	uint8_t aad[64], (*keep)[KEYS_WRAPPED_LEN] = calloc(n ? n : 1, sizeof(*keep));
	size_t i;
	int ret = keep ? keys_random(master, KEYS_MASTER_LEN) : -ENOMEM;

	STOR_ASSERT_HELD(&p->admin);
	for (i = 0; i < n && ret == 0; i++) {
		struct stor_ds *ds = dss[i];
		struct stor_ds *root = ds_find_id_locked(p, ds->enc_root_id);
		struct ds_keys *rk = root ? atomic_load(&root->keys) : NULL;

		if (!rk || !rk->wk) {
			ret = STOR_ENOKEY;
			break;
		}
		memcpy(keep[i], ds->wrapped, sizeof(keep[i]));
		memcpy(ds->wrapped_old, keep[i], sizeof(keep[i]));
		ds->keygen ^= 1u;
		ds->has_old = 1;
		/* a change of suite: the new key is of the new one, its records too */
		ds->old_suite = suite ? ds->suite : 0;
		ds->key_suite = suite ? (int)suite : 0;
		ret = keys_wrap(rk->wk, aad, wrap_aad_gen(ds, ds->keygen, root, aad), master,
				ds->wrapped);
		if (ret < 0) {
			undo_new_gen(ds, keep[i]);
			break;
		}
	}
	/* the commit point: both keys of every one are in the file, or no change is */
	if (ret == 0)
		ret = keyfile_save(p, NULL);
	if (ret < 0) {
		while (i-- > 0)
			undo_new_gen(dss[i], keep[i]);
		keys_cleanse(master, KEYS_MASTER_LEN);
	}
	free(keep);
	return ret;
}

/* The previous master key of @ds and every data key derived from it leave
 * memory: unlinked here, freed once no reader section can hold one. */
static void forget_old(struct stor_pool *p, struct stor_ds *ds)
{
	struct ds_keys *k = atomic_load(&ds->keys);
	struct salt_key *gone = NULL;
	uint8_t *old;

	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	old = k->old;
	k->old = NULL;
	for (struct salt_key **pp = &k->all; *pp;) {
		struct salt_key *e = *pp;

		if (e->gen == k->gen) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		e->next = gone;
		gone = e;
		k->nall--;
	}
	for (unsigned i = 0; i < DSKEYS_HOT; i++) {
		struct salt_key *e = atomic_load(&k->hot[i]);

		if (e && e->gen != k->gen)
			atomic_store(&k->hot[i], NULL);
	}
	pthread_mutex_unlock(&k->lock);
	txg_read_synchronize(p);
	while (gone) {
		struct salt_key *next = gone->next;

		crypt_key_free(gone->key);
		free(gone);
		gone = next;
	}
	keys_secure_free(old, KEYS_MASTER_LEN);
}

int dskeys_drop_old(struct stor_pool *p, struct stor_ds *const *dss, size_t n)
{
	uint8_t(*keep)[KEYS_WRAPPED_LEN] = calloc(n ? n : 1, sizeof(*keep));
	int ret;

	STOR_ASSERT_HELD(&p->admin);
	if (!keep)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		memcpy(keep[i], dss[i]->wrapped_old, sizeof(keep[i]));
		dss[i]->has_old = 0;
		memset(dss[i]->wrapped_old, 0, sizeof(dss[i]->wrapped_old));
	}
	/* the commit point; the replaced file's bytes are overwritten (keyfile.c) */
	ret = keyfile_save(p, NULL);
	for (size_t i = 0; i < n; i++) {
		if (ret < 0) {
			dss[i]->has_old = 1;
			memcpy(dss[i]->wrapped_old, keep[i], sizeof(keep[i]));
		} else {
			forget_old(p, dss[i]);
			dss[i]->key_suite = dss[i]->old_suite = 0; /* its suite is the new one */
		}
	}
	keys_cleanse(keep, n * sizeof(*keep));
	free(keep);
	return ret;
}

/* ---- encryption in place (rekey.c) ---- */

int dskeys_encrypt_prepare(struct stor_pool *p, struct stor_ds *const *dss, size_t n,
			   unsigned suite, const char *fmt, const char *iters, char *loc,
			   const struct stor_key_material *key, struct stor_ds *shadows,
			   struct ds_keys **out)
{
	uint8_t master[KEYS_MASTER_LEN], wk[KEYS_WRAPKEY_LEN], aad[64];
	struct stor_ds **extra = calloc(n, sizeof(*extra));
	struct stor_ds *root = &shadows[0];
	int ret = extra ? 0 : -ENOMEM;

	STOR_ASSERT_HELD(&p->admin);
	/* each as it will be: its record and key file entry are made from this
	 * copy, the dataset itself changes at the switch's commit */
	for (size_t i = 0; i < n; i++) {
		struct stor_ds *s = &shadows[i];

		out[i] = NULL;
		extra[i] = s;
		*s = *dss[i];
		s->suite = (int)suite;
		s->keygen = 0;
		s->has_old = 0;
		s->key_pending = 1;
		s->enc_root_id = dss[0]->id; /* the first is the root, its clones members */
	}
	root->local[PROP_KEYLOCATION] = loc; /* borrowed: the key file's entry has it */
	if (ret == 0)
		ret = become_root(root, fmt, iters);
	if (ret == 0)
		ret = derive_new_wk(root, key, wk);
	if (ret < 0) {
		free(extra);
		return ret;
	}
	ret = keys_random(master, sizeof(master));
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct stor_ds *s = &shadows[i];

		ret = keys_wrap(wk, aad, wrap_aad(s, root, aad), master, s->wrapped);
		if (ret == 0 &&
		    !(out[i] = dskeys_state_new(s, master, NULL, 0, s == root ? wk : NULL)))
			ret = -ENOMEM;
	}
	keys_cleanse(master, sizeof(master));
	keys_cleanse(wk, sizeof(wk));
	/* the commit point of the start's first half: entries marked pending */
	if (ret == 0)
		ret = keyfile_save_with(p, extra, n);
	for (size_t i = 0; i < n && ret < 0; i++) {
		keys_state_free(out[i]);
		out[i] = NULL;
	}
	free(extra);
	return ret;
}
