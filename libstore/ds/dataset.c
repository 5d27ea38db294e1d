/* SPDX-License-Identifier: MIT */
/*
 * Datasets: names, the dataset table of a pool, creation and destruction,
 * handles, and property resolution (local, inherited from the nearest
 * ancestor, default). Dataset records are written to LMDB at once, in their
 * own transaction; their block pointers go through txg.c.
 *
 * Dataset record ("ds"/<name>): u32 version | u64 id | u64 guid | u64 volsize |
 * u32 recordsize | u64 createtxg | u16 nprops x (u16 len | name | u16 len | value) |
 * crypto section (dskeys.c) [| u64 origin (a clone's: the id of its origin
 * snapshot's table, else 0) | u16 n | n x (u64 upto | u64 guid): a promoted
 * clone's sealers (clone.c) [| u64 creation (seconds since the epoch) |
 * user properties (userprops.c)]].
 *
 * The record's version is the pool's format, so what later versions add
 * goes at its end, and its length says what is there: a record written
 * before creation was stored ends after the sealers, and its dataset shows
 * creation "-" (the time is not known; its createtxg still orders it). Each
 * record written now carries the whole tail, so a binary older than this
 * one refuses such a record (STOR_ECORRUPT, naming it) rather than
 * misreading it: a pool goes forward, not back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/array.h"
#include "base/cache.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/crypt.h"
#include "ds/children.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/rekey.h"
#include "ds/keyfile.h"
#include "ds/props.h"
#include "ds/recv_state.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "ds/userprops.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/pool_record.h"

#define DS_VOLSIZE_DEFAULT (1ull << 30)

/* A dataset name (name.c's rule) whose first component is @p's name. */
static int ds_name_valid(const struct stor_pool *p, const char *name)
{
	size_t plen = strlen(p->name);

	return stor_name_check(name, STOR_NAME_DATASET) == 0 && strncmp(name, p->name, plen) == 0 &&
	       (name[plen] == '\0' || name[plen] == '/');
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(struct stor_ds *const *)a)->name, (*(struct stor_ds *const *)b)->name);
}

/* prop_find() for a name a client gave: the reason of a miss is the pool's error. */
static int prop_named(const char *name)
{
	char why[STOR_NAME_MAX + 96];
	int id = prop_find(name, why, sizeof(why));

	if (id < 0)
		pool_set_error("%s", why);
	return id;
}

struct stor_ds *ds_find_locked(struct stor_pool *p, const char *name)
{
	struct stor_ds key = { .name = (char *)name }, *kp = &key, **r;

	STOR_ASSERT_HELD(&p->admin);

	if (!p->nds)
		return NULL;
	r = bsearch(&kp, p->ds, p->nds, sizeof(*p->ds), cmp_name);
	return r ? *r : NULL;
}

struct stor_ds *ds_find_id_locked(struct stor_pool *p, uint64_t id)
{
	STOR_ASSERT_HELD(&p->admin);

	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->id == id)
			return p->ds[i];
	return NULL;
}

/* The parent of @ds in the table; a listing climbs to it for each inherited value. */
static struct stor_ds *parent_of(struct stor_pool *p, const struct stor_ds *ds)
{
	char buf[STOR_NAME_MAX + 1];
	const char *slash = strrchr(ds->name, '/');
	size_t n = slash ? (size_t)(slash - ds->name) : 0;

	if (!slash || n >= sizeof(buf))
		return NULL;
	memcpy(buf, ds->name, n);
	buf[n] = '\0';
	return ds_find_locked(p, buf);
}

const char *ds_prop_locked(struct stor_pool *p, struct stor_ds *ds, int id, struct stor_ds **from)
{
	STOR_ASSERT_HELD(&p->admin);

	for (struct stor_ds *d = ds; d; d = parent_of(p, d)) {
		if (d->local[id]) {
			if (from)
				*from = d;
			return d->local[id];
		}
		if (!(prop_table[id].flags & PROP_INHERIT))
			break;
	}
	if (from)
		*from = NULL;
	return prop_table[id].def;
}

/* The first index of the table whose name is not below @name: where it is or would go. */
static size_t lower_bound(struct stor_pool *p, const char *name)
{
	size_t lo = 0, hi = p->nds;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(p->ds[mid]->name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

size_t ds_lower_bound_locked(struct stor_pool *p, const char *name)
{
	STOR_ASSERT_HELD(&p->admin);

	return lower_bound(p, name);
}

size_t ds_parent_index_locked(struct stor_pool *p, const struct stor_ds *ds)
{
	struct stor_ds *pa;

	STOR_ASSERT_HELD(&p->admin);
	pa = parent_of(p, ds);
	return pa ? lower_bound(p, pa->name) : SIZE_MAX;
}

/* Cache the effective values of inherited properties that the I/O path reads. */
static void refresh_one(struct stor_pool *p, struct stor_ds *d)
{
	atomic_store(&d->sync_mode, prop_sync_mode(ds_prop_locked(p, d, PROP_SYNC, NULL)));
	atomic_store(&d->comp_level,
		     prop_compression_level(ds_prop_locked(p, d, PROP_COMPRESSION, NULL)));
	atomic_store(&d->checksum_on, strcmp(ds_prop_locked(p, d, PROP_CHECKSUM, NULL), "off") != 0);
	atomic_store(&d->cache_all,
		     strcmp(ds_prop_locked(p, d, PROP_PRIMARYCACHE, NULL), "all") == 0);
}

/*
 * refresh_one() for @ds and its descendants: the names that start with
 * "@ds/" sort together, so a create (no descendants yet) looks at no other
 * dataset of the table.
 */
static void refresh_effective(struct stor_pool *p, struct stor_ds *ds)
{
	char prefix[STOR_NAME_MAX + 2];
	size_t n = (size_t)snprintf(prefix, sizeof(prefix), "%s/", ds->name);

	refresh_one(p, ds);
	for (size_t i = lower_bound(p, prefix); i < p->nds && !strncmp(p->ds[i]->name, prefix, n);
	     i++)
		refresh_one(p, p->ds[i]);
}

void ds_table_renamed_locked(struct stor_pool *p, struct stor_ds *top)
{
	STOR_ASSERT_HELD(&p->admin);

	qsort(p->ds, p->nds, sizeof(*p->ds), cmp_name);
	if (top)
		refresh_effective(p, top);
}

void ds_free(struct stor_ds *ds)
{
	if (!ds)
		return;
	rekey_free(ds);
	dskeys_drop(ds);
	snap_free_all(ds);
	for (int i = 0; i < PROP_COUNT; i++)
		free(ds->local[i]);
	uprops_free(ds);
	free(atomic_load(&ds->stats.lat)); /* stats.c made it */
	free(ds->sealers);
	free(ds->name);
	free(ds);
}

static struct stor_ds *ds_new(struct stor_pool *p, const char *name)
{
	struct stor_ds *ds = calloc(1, sizeof(*ds));

	if (!ds)
		return NULL;
	ds->pool = p;
	ds->name = strdup(name);
	if (!ds->name) {
		free(ds);
		return NULL;
	}
	return ds;
}

static int table_insert(struct stor_pool *p, struct stor_ds *ds)
{
	struct stor_ds **t = array_grow(p->ds, p->nds, &p->capds, sizeof(*t), 16);
	size_t i;

	if (!t)
		return -ENOMEM;
	p->ds = t;
	i = lower_bound(p, ds->name);
	memmove(&p->ds[i + 1], &p->ds[i], (p->nds - i) * sizeof(*p->ds));
	p->ds[i] = ds;
	p->nds++;
	return 0;
}

static void table_remove(struct stor_pool *p, struct stor_ds *ds)
{
	for (size_t i = 0; i < p->nds; i++) {
		if (p->ds[i] != ds)
			continue;
		memmove(&p->ds[i], &p->ds[i + 1], (p->nds - i - 1) * sizeof(*p->ds));
		p->nds--;
		return;
	}
}

int ds_save(struct stor_pool *p, struct stor_ds *ds)
{
	struct meta_txn *t = NULL;
	int ret;

	if (ds->save_later)
		return 0; /* stor_ds_set_many() saves them all at once */
	ret = meta_txn_begin(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = ds_save_txn(t, ds);
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

int ds_save_txn(struct meta_txn *t, struct stor_ds *ds)
{
	uint8_t *buf;
	size_t len;
	int ret = ds_record(ds, &buf, &len);

	if (ret < 0)
		return ret;
	ret = meta_put(t, META_DS, ds->name, strlen(ds->name), buf, len);
	free(buf);
	return ret;
}

int ds_record(struct stor_ds *ds, uint8_t **out, size_t *outlen)
{
	size_t len = 4 + 8 + 8 + 8 + 4 + 8 + 2 + DSKEYS_RECORD_LEN + 8 + 2 + ds->nsealers * 16 + 8 +
		     uprops_record_len(ds);
	uint8_t *buf, *w;
	uint16_t nprops = 0;

	for (int i = 0; i < PROP_COUNT; i++)
		if (ds->local[i]) {
			len += 4 + strlen(prop_table[i].name) + strlen(ds->local[i]);
			nprops++;
		}
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	w = buf;
	put_u32(&w, FORMAT_VERSION);
	put_u64(&w, ds->id);
	put_u64(&w, ds->guid);
	put_u64(&w, atomic_load(&ds->volsize));
	put_u32(&w, ds->recsize);
	put_u64(&w, ds->createtxg);
	put_u16(&w, nprops);
	for (int i = 0; i < PROP_COUNT; i++) {
		if (!ds->local[i])
			continue;
		put_u16(&w, (uint16_t)strlen(prop_table[i].name));
		put_bytes(&w, prop_table[i].name, strlen(prop_table[i].name));
		put_u16(&w, (uint16_t)strlen(ds->local[i]));
		put_bytes(&w, ds->local[i], strlen(ds->local[i]));
	}
	dskeys_record(ds, &w);
	put_u64(&w, ds->origin_id);
	put_u16(&w, (uint16_t)ds->nsealers);
	for (size_t i = 0; i < ds->nsealers; i++) {
		put_u64(&w, ds->sealers[i].upto);
		put_u64(&w, ds->sealers[i].guid);
	}
	put_u64(&w, ds->creation);
	uprops_record(ds, &w);
	*out = buf;
	*outlen = (size_t)(w - buf);
	return 0;
}

/*
 * The record of a new dataset, the pool record with the next id past its
 * own, and, if encrypted, the root of its MACs, in one commit (one LMDB
 * sync, where two commits cost two); one being received is marked so in
 * the same transaction, so a receive cut short is found (recv.c) whatever
 * happens. Until this commits, nothing durable holds its id but its key
 * file entry, which names it by GUID: a crash before leaves an entry that
 * no record claims, which loading skips and the next save drops.
 */
/* The record of a new dataset, its MAC root and list of children, and its
 * place in its encrypted parent's list, in one commit (children.c). */
static int save_new(struct stor_pool *p, struct stor_ds *ds, const struct stor_ds *parent,
		    const struct recv_identity *as)
{
	struct ds_keys *k = atomic_load(&ds->keys), *pk = parent ? atomic_load(&parent->keys) : NULL;
	struct meta_txn *t = NULL;
	int ret = meta_txn_begin(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = ds_save_txn(t, ds);
	if (ret == 0)
		ret = pool_config_txn(p, t);
	if (ret == 0 && as)
		ret = recv_mark_txn(t, ds->id, RECV_RECEIVING);
	/* a raw stream's dataset gets its MACs from its first key */
	if (ret == 0 && !(as && as->raw))
		ret = dskeys_init_macs(t, ds);
	if (ret == 0 && ds->suite)
		ret = as && as->raw ? children_adopt(t, ds->id, as->kids_empty)
		      : k	    ? children_init(t, ds->id, k->mac)
				    : STOR_ENOKEY;
	if (ret == 0 && ds->suite && !as && parent && parent->suite)
		ret = pk ? children_change(t, parent->id, pk->mac, ds->guid, (unsigned)ds->suite, 1)
			 : STOR_ENOKEY;
	if (ret == STOR_EAUTH)
		pool_set_error("the list of encrypted children of %s does not verify: a child was "
			       "removed, added or made clear without its key",
			       parent ? parent->name : ds->name);
	if (ret < 0) {
		meta_txn_abort(t);
		return ret;
	}
	return meta_txn_commit(t);
}

static int ds_parse(struct stor_ds *ds, const uint8_t *r, size_t len)
{
	const uint8_t *end = r + len;
	uint16_t nprops;

	if (len < 4 + 8 + 8 + 8 + 4 + 8 + 2)
		return STOR_ECORRUPT;
	if (get_u32(&r) != FORMAT_VERSION)
		return STOR_EFORMAT;
	ds->id = get_u64(&r);
	ds->guid = get_u64(&r);
	atomic_store(&ds->volsize, get_u64(&r));
	ds->recsize = get_u32(&r);
	ds->createtxg = get_u64(&r);
	nprops = get_u16(&r);
	if (ds->recsize < STOR_RECSIZE_MIN || ds->recsize > STOR_RECSIZE_MAX ||
	    (ds->recsize & (ds->recsize - 1)))
		return STOR_ECORRUPT;
	for (uint16_t i = 0; i < nprops; i++) {
		char name[64], val[512];
		uint16_t n;
		int id;

		if (end - r < 2 || (n = get_u16(&r)) >= sizeof(name) || end - r < n)
			return STOR_ECORRUPT;
		get_bytes(&r, name, n);
		name[n] = '\0';
		if (end - r < 2 || (n = get_u16(&r)) >= sizeof(val) || end - r < n)
			return STOR_ECORRUPT;
		get_bytes(&r, val, n);
		val[n] = '\0';
		id = prop_lookup(name);
		if (id < 0)
			continue; /* a property this version does not know */
		free(ds->local[id]);
		ds->local[id] = strdup(val);
		if (!ds->local[id])
			return -ENOMEM;
	}
	if (end - r > (long)DSKEYS_RECORD_LEN) {
		const uint8_t *o = r + DSKEYS_RECORD_LEN;
		uint16_t n;

		if (end - o < 10)
			return STOR_ECORRUPT;
		ds->origin_id = get_u64(&o);
		n = get_u16(&o);
		if (end - o < (long)n * 16)
			return STOR_ECORRUPT;
		ds->sealers = n ? calloc(n, sizeof(*ds->sealers)) : NULL;
		if (n && !ds->sealers)
			return -ENOMEM;
		for (uint16_t i = 0; i < n; i++) {
			ds->sealers[i].upto = get_u64(&o);
			ds->sealers[i].guid = get_u64(&o);
		}
		ds->nsealers = n;
		/* nothing more: a record of before creation was stored */
		if (end - o >= 8) {
			int ret;

			ds->creation = get_u64(&o);
			ret = uprops_parse(ds, &o, end);
			if (ret < 0)
				return ret;
		}
		if (end != o)
			return STOR_ECORRUPT;
		end = r + DSKEYS_RECORD_LEN;
	}
	return dskeys_parse(ds, &r, end);
}

struct load_ctx {
	struct stor_pool *p;
};

static int load_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct stor_pool *p = ((struct load_ctx *)ctx)->p;
	char name[STOR_NAME_MAX + 1];
	struct stor_ds *ds;
	int ret;

	if (klen > STOR_NAME_MAX)
		return STOR_ECORRUPT;
	memcpy(name, key, klen);
	name[klen] = '\0';
	if (memchr(name, '@', klen)) {
		ret = snap_load_one(p, name, val, vlen);
		if (ret < 0 && !pool_error_set())
			pool_set_error("pool %s: snapshot record %s: %s", p->name, name,
				       stor_strerror(ret));
		return ret;
	}
	ds = ds_new(p, name);
	if (!ds)
		return -ENOMEM;
	ret = ds_parse(ds, val, vlen);
	if (ret == 0)
		ret = table_insert(p, ds);
	if (ret < 0) {
		pool_set_error("pool %s: dataset record %s: %s", p->name, name, stor_strerror(ret));
		ds_free(ds);
	}
	return ret;
}

/*
 * The suite byte is not under any MAC (no key is loaded at import), so what
 * else the metadata says about a dataset's encryption must agree with it:
 * its own encryption property, and its parent's suite (no clear dataset
 * under an encrypted one). The key file is checked the same way (keyfile.c).
 */
static int check_crypto(struct stor_pool *p, struct stor_ds *ds)
{
	const char *enc = ds->local[PROP_ENCRYPTION];
	char parent[STOR_NAME_MAX + 1], *slash;
	struct stor_ds *up = NULL;
	int want = enc ? crypt_suite_parse(enc) : -1;

	snprintf(parent, sizeof(parent), "%s", ds->name);
	slash = strrchr(parent, '/');
	if (slash) {
		*slash = '\0';
		up = ds_find_locked(p, parent);
	}
	if ((enc && want != ds->suite) || (up && up->suite && !ds->suite)) {
		pool_set_error("pool %s: dataset %s: its record says %s but %s; "
			       "the metadata was changed",
			       p->name, ds->name, crypt_suite_name((enum crypt_suite)ds->suite),
			       enc && want != ds->suite ? "its encryption property disagrees"
							: "its parent is encrypted");
		return STOR_ECORRUPT;
	}
	return 0;
}

int ds_load_all(struct stor_pool *p)
{
	struct meta_txn *t = NULL;
	struct load_ctx c = { p };
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_DS, NULL, 0, 0, load_one, &c);
	meta_rtxn_put(t);
	if (ret < 0)
		return ret;
	if (!ds_find_locked(p, p->name)) {
		pool_set_error("pool %s: no root dataset", p->name);
		return STOR_ECORRUPT;
	}
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->id >= p->next_ds_id)
			return STOR_ECORRUPT;
	for (size_t i = 0; i < p->nds; i++) {
		ret = check_crypto(p, p->ds[i]);
		if (ret < 0)
			return ret;
		space_props_locked(p, p->ds[i]);
	}
	ret = clone_link_all(p);
	if (ret < 0)
		return ret;
	refresh_effective(p, ds_find_locked(p, p->name));
	return space_sync_locked(p);
}

static int refuse_recsize(void)
{
	pool_set_error("recordsize must be a power of 2 from %u to %uM", STOR_RECSIZE_MIN,
		       STOR_RECSIZE_MAX >> 20);
	return -EINVAL;
}

/* volsize @v must be a whole number of records of @recsize, one at least. */
static int check_volsize(uint64_t v, uint32_t recsize)
{
	char rs[32];

	if (v % recsize == 0 && v >= recsize)
		return 0;
	stor_format_size(recsize, rs, sizeof(rs));
	pool_set_error(v < recsize ? "volsize must hold one record at least (recordsize %s)"
				   : "volsize must be a multiple of recordsize (%s)",
		       rs);
	return -EINVAL;
}

/* Apply "name=value" options of a create; volsize and recordsize are geometry. */
static int apply_create_props(struct stor_ds *ds, const struct stor_ds_opts *o, uint64_t *volsize,
			      uint32_t *recsize)
{
	for (size_t i = 0; i < o->nprops; i++) {
		char name[64], canon[256];
		const char *eq = strchr(o->props[i], '=');
		uint64_t n;
		int id, ret;

		if (!eq || (size_t)(eq - o->props[i]) >= sizeof(name))
			return STOR_EBADPROP;
		memcpy(name, o->props[i], (size_t)(eq - o->props[i]));
		name[eq - o->props[i]] = '\0';
		if (strcmp(name, "recordsize") == 0 || strcmp(name, "volblocksize") == 0) {
			if (stor_parse_size(eq + 1, &n) < 0 || n > STOR_RECSIZE_MAX)
				return refuse_recsize();
			*recsize = (uint32_t)n;
			continue;
		}
		if (strcmp(name, "volsize") == 0) {
			if (stor_parse_size(eq + 1, &n) < 0) {
				pool_set_error("'volsize' must be a size such as 64M or 10G");
				return -EINVAL;
			}
			*volsize = n;
			continue;
		}
		id = prop_named(name);
		if (id < 0)
			return STOR_EBADPROP;
		if (prop_table[id].flags & PROP_READONLY)
			return STOR_EREADONLY;
		ret = prop_validate(id, eq + 1, canon, sizeof(canon));
		if (ret < 0)
			return ret;
		free(ds->local[id]);
		ds->local[id] = strdup(canon);
		if (!ds->local[id])
			return -ENOMEM;
	}
	return 0;
}

/* A local refreservation that is "auto" becomes the size it stands for. */
static int resolve_auto(struct stor_ds *ds, uint64_t volsize)
{
	uint64_t n = space_auto_refres(volsize, ds->recsize);
	char num[32];

	if (!ds->local[PROP_REFRESERVATION] || strcmp(ds->local[PROP_REFRESERVATION], "auto") != 0)
		return 0;
	snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
	free(ds->local[PROP_REFRESERVATION]);
	ds->local[PROP_REFRESERVATION] = strdup(n ? num : "none");
	return ds->local[PROP_REFRESERVATION] ? 0 : -ENOMEM;
}

/*
 * Volumes are thick unless created sparse (-s: refreservation=none), as in
 * ZFS: a refreservation of every record the volume can hold, so that a
 * write into it never finds the pool full. A dataset created without a
 * size (a container of others, as a ZFS filesystem is) is not: its 1 GiB
 * default is no promise anyone asked for.
 */
static int thick_by_default(struct stor_ds *ds, int volume)
{
	if (volume && !ds->local[PROP_REFRESERVATION]) {
		ds->local[PROP_REFRESERVATION] = strdup("auto");
		if (!ds->local[PROP_REFRESERVATION])
			return -ENOMEM;
	}
	return resolve_auto(ds, atomic_load(&ds->volsize));
}

static int ds_create_as(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
			const struct recv_identity *as, struct snap *origin, struct stor_ds **out);

int ds_create_locked(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
		     struct snap *origin, struct stor_ds **out)
{
	STOR_ASSERT_HELD(&p->admin);

	return ds_create_as(p, name, o, NULL, origin, out);
}

int ds_create_received_locked(struct stor_pool *p, const char *name,
			      const struct stor_ds_opts *o, const struct recv_identity *id,
			      struct stor_ds **out)
{
	STOR_ASSERT_HELD(&p->admin);

	return ds_create_as(p, name, o, id, NULL, out);
}

/* A new dataset; @as marks it as being received, and for a raw stream gives
 * its GUID and wrapped key, else they are fresh; @origin makes it a clone
 * of that snapshot (clone.c). */
static int ds_create_as(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
			const struct recv_identity *as, struct snap *origin, struct stor_ds **out)
{
	static const struct stor_ds_opts none;
	struct stor_ds *ds = NULL, *parent = NULL;
	uint64_t volsize, promised = 0;
	uint32_t recsize;
	int ret, sized;

	if (!o)
		o = &none;
	if (!ds_name_valid(p, name))
		return STOR_EBADNAME;
	if (ds_find_locked(p, name))
		return -EEXIST;
	/* a tombstone: the destroy of that name is not committed yet */
	if (txg_name_gone(p, name)) {
		pool_set_error("dataset %s is being destroyed; create it again after the next commit",
			       name);
		return -EBUSY;
	}
	if (strcmp(name, p->name) != 0) {
		char buf[STOR_NAME_MAX + 1];
		snprintf(buf, sizeof(buf), "%s", name);
		*strrchr(buf, '/') = '\0';
		parent = ds_find_locked(p, buf);
		if (!parent) {
			pool_set_error("its parent %s does not exist; create that first", buf);
			return -ENOENT;
		}
		if (parent->suite && !atomic_load(&parent->keys)) {
			pool_set_error("the key of %s is not loaded: it authenticates the list of its "
				       "encrypted children (load the key of its encryption root first)",
				       buf);
			return STOR_ENOKEY;
		}
	}
	volsize = o->volsize ? o->volsize : origin ? origin->volsize : DS_VOLSIZE_DEFAULT;
	recsize = o->recordsize ? o->recordsize : origin ? origin->ds->recsize : STOR_RECSIZE_DEFAULT;
	ds = ds_new(p, name);
	if (!ds)
		return -ENOMEM;
	ret = apply_create_props(ds, o, &volsize, &recsize);
	if (ret < 0)
		goto fail;
	sized = o->volsize != 0;
	for (size_t i = 0; i < o->nprops; i++)
		sized |= strncmp(o->props[i], "volsize=", 8) == 0;
	/* a clone reads its origin's records: its geometry is theirs, and it
	 * is sparse, as zfs clone makes it */
	if (origin && (volsize != origin->volsize || recsize != origin->ds->recsize)) {
		pool_set_error("a clone has its origin's volsize and recordsize");
		ret = -EINVAL;
		goto fail;
	}
	if (origin)
		sized = 0;
	if (!parent)
		volsize = 0; /* the pool's root dataset holds properties, no data */
	ret = -EINVAL;
	if (recsize < STOR_RECSIZE_MIN || recsize > STOR_RECSIZE_MAX || (recsize & (recsize - 1))) {
		ret = refuse_recsize();
		goto fail;
	}
	if (parent && (ret = check_volsize(volsize, recsize)) < 0)
		goto fail; /* a volume holds one record at least */
	ret = -EINVAL;
	if (volsize % recsize)
		goto fail;
	atomic_store(&ds->volsize, volsize);
	ds->recsize = recsize;
	ret = thick_by_default(ds, parent != NULL && sized);
	if (ret < 0)
		goto fail;
	space_props_locked(p, ds);
	promised = atomic_load(&ds->refres) > atomic_load(&ds->res) ? atomic_load(&ds->refres)
								    : atomic_load(&ds->res);
	ret = space_promise_locked(p, parent, promised, "use -s for a sparse volume");
	if (ret < 0) {
		promised = 0;
		goto fail;
	}
	ds->id = p->next_ds_id;
	ds->createtxg = atomic_load(&p->synced_txg) + 1;
	ds->creation = (uint64_t)time(NULL);
	ret = as && as->raw ? 0 : keys_random(&ds->guid, sizeof(ds->guid));
	if (ret < 0)
		goto fail;
	if (origin) {
		ds->origin = origin;
		ds->origin_id = origin->id;
		atomic_store(&ds->shared_ref, (int64_t)origin->referenced);
	}
	if (origin)
		ret = dskeys_clone(p, ds, parent, origin->ds);
	else if (as && as->raw)
		ret = dskeys_adopt(ds, as);
	else
		ret = dskeys_create(p, ds, parent, o);
	if (ret < 0)
		goto fail;
	p->next_ds_id++;
	/* its wrapped key is durable before the dataset is */
	ret = ds->suite ? keyfile_save(p, ds) : 0;
	if (ret < 0)
		goto fail;
	ds->unlisted = as != NULL; /* it joins its parent's list when it is whole */
	ret = save_new(p, ds, parent, as);
	if (ret < 0)
		goto fail;
	atomic_store(&ds->receiving, as != NULL);
	ret = table_insert(p, ds);
	if (ret < 0)
		goto fail; /* the record is saved: it reappears at the next import */
	if (origin)
		origin->nclones++;
	refresh_effective(p, ds);
	space_insert_locked(p, ds); /* counts its reservation: the promise is kept */
	space_unpromise_locked(p, promised);
	if (out) {
		atomic_fetch_add(&ds->refs, 1);
		*out = ds;
	}
	return 0;
fail:
	space_unpromise_locked(p, promised);
	ds_free(ds);
	return ret;
}

int stor_ds_create(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
		   struct stor_ds **out)
{
	int ret;

	if (out)
		*out = NULL;
	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ret = ds_create_locked(p, name, o, NULL, out);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int pool_create_root(struct stor_pool *p)
{
	return stor_ds_create(p, p->name, NULL, NULL);
}

/* What a destroy takes: a work list over the table, each dataset once. */
struct doomed {
	struct stor_ds **v; /* in the order found; v[done..n) still to look at */
	size_t n;
	unsigned char *seen; /* by table index */
	struct stor_ds **leave; /* the parent whose list v[k] leaves, or NULL */
};

/* The encrypted parent whose list @ds leaves when the destroy @d takes it
 * (children.c), or NULL: it is clear, in no list yet, or the parent goes too. */
static struct stor_ds *leaves_list(struct stor_pool *p, const struct stor_ds *ds,
				   const struct doomed *d)
{
	struct stor_ds *pa = parent_of(p, ds);

	if (!ds->suite || ds->unlisted || !pa || !pa->suite)
		return NULL;
	return d->seen[lower_bound(p, pa->name)] ? NULL : pa;
}

/* Take @ds out of the table; txg_sync() then deletes it and its snapshots
 * from LMDB (each extent is in one table only, so each is freed once). */
static int destroy_one_locked(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *pa)
{
	struct kids_join leave = { 0 };
	struct txg_task task;
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);

	if (pa)
		leave = (struct kids_join){ .parent_id = pa->id, .guid = ds->guid,
					    .suite = (unsigned)ds->suite,
					    .mk = atomic_load(&pa->keys)->mac };
	if (ds->suite)
		ret = children_destroy_task(ds->id, &leave, &task);
	if (ret == 0)
		ret = txg_forget_ds(p, ds->id, ds->name, ds->suite ? &task : NULL);
	for (size_t i = 0; i < ds->nsnaps && ret == 0; i++)
		ret = txg_forget_ds(p, ds->snaps[i]->id, ds->snaps[i]->name, NULL);
	if (ret < 0)
		return ret;
	ds->destroyed = 1;
	if (ds->origin)
		ds->origin->nclones--;
	table_remove(p, ds);
	return 0;
}


static void take(struct doomed *d, struct stor_pool *p, size_t i)
{
	if (!d->seen[i]) {
		d->seen[i] = 1;
		d->v[d->n++] = p->ds[i];
	}
}

/*
 * Everything a destroy of @seeds takes, as zfs destroy defines it: each
 * seed; with -r its descendants and all their snapshots; with -R also every
 * clone of those snapshots, and what destroying that clone takes, and so
 * on. After a promote these relations loop (a clone made under its origin
 * and promoted is a child of the dataset that is now its clone), so this
 * is a work list over a visited set, never a recursion: each dataset is
 * taken once. Without -R, a clone of a doomed snapshot that is doomed
 * anyway (a descendant, with -r) is no obstacle, as in zfs; one outside
 * refuses the destroy. Nothing changes here; the reason of a refusal is
 * the pool error.
 */
static int doomed_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			 unsigned flags, struct doomed *d)
{
	char prefix[STOR_NAME_MAX + 2];

	STOR_ASSERT_HELD(&p->admin);

	d->v = calloc(p->nds + 1, sizeof(*d->v));
	d->seen = calloc(p->nds + 1, 1);
	if (!d->v || !d->seen)
		return -ENOMEM;
	for (size_t i = 0; i < nseeds; i++)
		take(d, p, lower_bound(p, seeds[i]->name));
	for (size_t k = 0; k < d->n; k++) {
		struct stor_ds *ds = d->v[k];
		size_t len = (size_t)snprintf(prefix, sizeof(prefix), "%s/", ds->name);
		size_t i = lower_bound(p, prefix);

		if (ds->nsnaps && !(flags & STOR_RECURSIVE)) {
			pool_set_error("%s: it has snapshots; use -r to destroy them too", ds->name);
			return -EBUSY;
		}
		/* the descendants sort together, right after "NAME/" */
		if (i < p->nds && !strncmp(p->ds[i]->name, prefix, len) &&
		    !(flags & STOR_RECURSIVE)) {
			pool_set_error("%s: it has children; use -r to destroy them too", ds->name);
			return -EBUSY;
		}
		for (; i < p->nds && !strncmp(p->ds[i]->name, prefix, len); i++)
			take(d, p, i);
		for (size_t s = 0; s < ds->nsnaps && (flags & STOR_DESTROY_CLONES); s++)
			for (i = 0; ds->snaps[s]->nclones && i < p->nds; i++)
				if (p->ds[i]->origin == ds->snaps[s])
					take(d, p, i);
	}
	for (size_t k = 0; k < d->n; k++) {
		struct stor_ds *ds = d->v[k];

		if (!strcmp(ds->name, p->name)) {
			/* the root goes with the pool only (it is never a clone:
			 * a guard, should that change) */
			pool_set_error("destroying %s would take the pool's root %s", seeds[0]->name,
				       p->name);
			return -EBUSY;
		}
		if (atomic_load(&ds->refs) > 0 && !(flags & STOR_DESTROY_OPEN_OK)) {
			pool_set_error("%s is open", ds->name);
			return -EBUSY;
		}
		for (size_t i = 0; i < p->nds; i++) {
			struct snap *o = p->ds[i]->origin;

			if (o && o->ds == ds && !d->seen[i]) {
				pool_set_error("%s: snapshot has dependent clones (%s); use -R to "
					       "destroy them too",
					       o->name, p->ds[i]->name);
				return -EBUSY;
			}
		}
	}
	/* each list a child leaves is changed under its parent's key */
	d->leave = calloc(d->n + 1, sizeof(*d->leave));
	if (!d->leave)
		return -ENOMEM;
	for (size_t k = 0; k < d->n; k++) {
		struct stor_ds *pa = leaves_list(p, d->v[k], d);

		if (pa && !atomic_load(&pa->keys)) {
			pool_set_error("%s: the key of %s is not loaded, and it authenticates the "
				       "list of its encrypted children (load the key of its "
				       "encryption root first)",
				       d->v[k]->name, pa->name);
			return STOR_ENOKEY;
		}
		d->leave[k] = pa;
	}
	return 0;
}

/*
 * Destroy @seeds and what that takes (doomed_locked), all in one txg: no
 * order of single destroys would do when the relations loop, and a crash
 * leaves all of them or none.
 */
int ds_destroy_set_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			  unsigned flags)
{
	struct doomed d = { 0 };
	size_t ngone = 0;
	int ret, enc = 0;

	STOR_ASSERT_HELD(&p->admin);

	ret = doomed_locked(p, seeds, nseeds, flags, &d);
	for (size_t k = 0; k < d.n && ret == 0; k++)
		rekey_halt(d.v[k]); /* its walk reads the dataset: it ends first */
	for (size_t k = 0; k < d.n && ret == 0; k++) {
		ret = destroy_one_locked(p, d.v[k], d.leave[k]);
		if (ret == 0)
			ngone++;
	}
	if (ngone) {
		int r;

		space_gone_locked(p, d.v, ngone);
		space_sync_locked(p); /* before they are freed: the write path reads it */
		/* under the admin lock: no dataset of the same name is created meanwhile */
		r = txg_sync(p, 0);
		space_gone_done_locked(p, r == 0);
		ret = ret ? ret : r;
		txg_read_synchronize(p);
	}
	for (size_t k = 0; k < ngone; k++) {
		if (d.v[k]->suite)
			enc = 1;
		cache_drop_ds(cache_data(), d.v[k]->guid);
		ds_free(d.v[k]);
	}
	/* no wrapped key of a destroyed dataset stays in the key file */
	if (enc && ret == 0)
		ret = keyfile_save(p, NULL);
	free(d.v);
	free(d.seen);
	free(d.leave);
	return ret;
}

int destroy_plan_add(struct destroy_plan *pl, const char *name)
{
	char **v = realloc(pl->names, (pl->n + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	pl->names = v;
	v[pl->n] = strdup(name);
	if (!v[pl->n])
		return -ENOMEM;
	pl->n++;
	return 0;
}

void destroy_plan_free(struct destroy_plan *pl)
{
	for (size_t i = 0; i < pl->n; i++)
		free(pl->names[i]);
	free(pl->names);
	memset(pl, 0, sizeof(*pl));
}

int ds_destroy_plan_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			   unsigned flags, struct destroy_plan *pl, struct stor_ds ***gone)
{
	struct doomed d = { 0 };
	int ret;

	STOR_ASSERT_HELD(&p->admin);

	if (gone)
		*gone = NULL;
	ret = doomed_locked(p, seeds, nseeds, flags, &d);
	/* found parents first: listed the other way, as zfs destroy -nv lists */
	for (size_t k = d.n; ret == 0 && k-- > 0;) {
		struct stor_ds *ds = d.v[k];
		struct space_view sv;

		for (size_t i = 0; i < ds->nsnaps && ret == 0; i++)
			ret = destroy_plan_add(pl, ds->snaps[i]->name);
		if (ret == 0)
			ret = destroy_plan_add(pl, ds->name);
		space_of_locked(p, ds, &sv);
		pl->bytes += sv.own + sv.rr + sv.snaps;
	}
	if (ret == 0 && gone) {
		d.v[d.n] = NULL; /* calloc'ed with room for it */
		*gone = d.v;
		d.v = NULL;
	}
	free(d.v);
	free(d.seen);
	free(d.leave);
	return ret;
}

int stor_destroy_plan(struct stor_pool *p, const char *name, unsigned flags,
		      int (*fn)(const char *name, void *ctx), void *ctx, uint64_t *reclaim)
{
	struct destroy_plan pl = { 0 };
	struct stor_ds *ds;
	int ret;

	*reclaim = 0;
	pool_clear_error();
	if (strchr(name, '@')) {
		ret = snap_destroy_plan(p, name, flags, &pl);
	} else {
		pthread_mutex_lock(&p->admin);
		ds = ds_find_locked(p, name);
		/* as ds_destroy_locked() refuses them */
		ret = !ds ? -ENOENT
		      : !strcmp(name, p->name) ? -EBUSY
					       : ds_destroy_plan_locked(p, &ds, 1, flags, &pl, NULL);
		pthread_mutex_unlock(&p->admin);
	}
	/* the names are copies: @fn may call into the pool */
	for (size_t i = 0; ret == 0 && i < pl.n; i++)
		ret = fn(pl.names[i], ctx);
	if (ret == 0)
		*reclaim = pl.bytes;
	destroy_plan_free(&pl);
	return ret;
}

int stor_ds_destroy(struct stor_pool *p, const char *name, unsigned flags)
{
	int ret;

	pool_clear_error();
	if (strchr(name, '@'))
		return stor_snap_destroy(p, name, flags);
	pthread_mutex_lock(&p->admin);
	ret = ds_destroy_locked(p, name, flags);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int ds_destroy_locked(struct stor_pool *p, const char *name, unsigned flags)
{
	struct stor_ds *ds;

	STOR_ASSERT_HELD(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds)
		return -ENOENT;
	if (strcmp(name, p->name) == 0)
		return -EBUSY; /* the root goes with the pool */
	return ds_destroy_set_locked(p, &ds, 1, flags);
}

int ds_list_join(struct stor_pool *p, struct stor_ds *ds, struct kids_join *join)
{
	struct stor_ds *pa;
	struct ds_keys *pk;
	int ret = 0;

	memset(join, 0, sizeof(*join));
	pthread_mutex_lock(&p->admin);
	pa = ds->unlisted && ds->suite ? parent_of(p, ds) : NULL;
	pk = pa && pa->suite ? atomic_load(&pa->keys) : NULL;
	if (pa && pa->suite && !pk) {
		pool_set_error("the key of %s is not loaded, and it authenticates the list of its "
			       "encrypted children: load it, then receive again", pa->name);
		ret = STOR_ENOKEY;
	} else if (pk) {
		*join = (struct kids_join){ .parent_id = pa->id, .guid = ds->guid,
					    .suite = (unsigned)ds->suite, .mk = mac_key_ref(pk->mac) };
	}
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int ds_rename_received(struct stor_pool *p, struct stor_ds *ds, const char *name, unsigned mark)
{
	struct meta_txn *t = NULL;
	char *to = strdup(name), *from = ds->name;
	int ret;

	if (!to)
		return -ENOMEM;
	pthread_mutex_lock(&p->admin);
	ret = ds_find_locked(p, name) || txg_name_gone(p, name) ? -EEXIST
								: meta_txn_begin(p->meta, &t);
	if (ret == 0) {
		/* the record moves and the mark changes in one commit */
		ret = meta_del(t, META_DS, from, strlen(from));
		ds->name = to;
		if (ret == 0)
			ret = ds_save_txn(t, ds);
		if (ret == 0)
			ret = recv_mark_txn(t, ds->id, mark);
		if (ret == 0)
			ret = meta_txn_commit(t);
		else
			meta_txn_abort(t);
		if (ret < 0)
			ds->name = from;
	}
	if (ret == 0) {
		table_remove(p, ds);
		table_insert(p, ds); /* cannot fail: the slot it left is there */
		space_sync_locked(p);
		free(from);
		to = NULL;
	}
	pthread_mutex_unlock(&p->admin);
	free(to);
	return ret;
}

int stor_ds_open(struct stor_pool *p, const char *name, struct stor_ds **out)
{
	struct stor_ds *ds;

	*out = NULL;
	if (strchr(name, '@'))
		return snap_open(p, name, out);
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (ds && atomic_load(&ds->receiving)) {
		pthread_mutex_unlock(&p->admin);
		recv_busy_error(ds);
		return -EBUSY;
	}
	if (ds)
		atomic_fetch_add(&ds->refs, 1);
	pthread_mutex_unlock(&p->admin);
	if (!ds)
		return -ENOENT;
	*out = ds;
	return 0;
}

void stor_ds_close(struct stor_ds *ds)
{
	if (ds && ds->snap)
		snap_close(ds);
	else if (ds)
		atomic_fetch_sub(&ds->refs, 1);
}

int stor_ds_list(struct stor_pool *p, int (*fn)(const char *name, void *ctx), void *ctx)
{
	char **names;
	size_t n;
	int ret = 0;

	/* copy the names so that @fn may call back into the pool */
	pthread_mutex_lock(&p->admin);
	n = p->nds;
	names = calloc(n ? n : 1, sizeof(*names));
	for (size_t i = 0; names && i < n; i++)
		names[i] = strdup(p->ds[i]->name);
	pthread_mutex_unlock(&p->admin);
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = names[i] ? fn(names[i], ctx) : -ENOMEM;
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ret;
}

const char *stor_ds_name(const struct stor_ds *ds)
{
	return ds->name;
}

uint64_t stor_ds_guid(const struct stor_ds *ds)
{
	return ds->guid;
}

uint64_t stor_ds_volsize(const struct stor_ds *ds)
{
	return atomic_load(&ds->volsize);
}

uint32_t stor_ds_recordsize(const struct stor_ds *ds)
{
	return ds->recsize;
}

int stor_ds_encrypted(const struct stor_ds *ds)
{
	return ds->suite != CRYPT_OFF;
}

/*
 * The encryption root of @ds: itself or an ancestor, as children inherit
 * it, so a walk up the names finds it without a scan of the table by id
 * (which a listing of every dataset's encryptionroot paid N times).
 */
static struct stor_ds *enc_root_of(struct stor_pool *p, struct stor_ds *ds)
{
	for (struct stor_ds *d = ds; d; d = parent_of(p, d))
		if (d->id == ds->enc_root_id)
			return d;
	return ds_find_id_locked(p, ds->enc_root_id);
}

/* @src into @dst of @len bytes, cut short if need be: snprintf's "%s" without its
 * format parsing, which a listing of every value of 10,000 datasets felt. */
static void set_str(char *dst, size_t len, const char *src)
{
	size_t n = strlen(src);

	if (n >= len)
		n = len - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* @v in decimal into @dst, which has room for any 64-bit number. */
static void set_u64(char *dst, uint64_t v)
{
	char tmp[24], *t = tmp + sizeof(tmp);

	*--t = '\0';
	do
		*--t = (char)('0' + v % 10);
	while (v /= 10);
	memcpy(dst, t, (size_t)(tmp + sizeof(tmp) - t));
}

/* Property @id of @ds into @v; its space from @sa when a listing summed it (else NULL). */
static void fill_value_of(struct stor_pool *p, struct stor_ds *ds, int id,
			  struct stor_prop_value *v, const struct space_all *sa)
{
	struct stor_ds *from = NULL, *root;
	const char *val;
	int64_t used, lused;

	/* every field set, none cleared whole: a value is 600 bytes, mostly unused */
	set_str(v->name, sizeof(v->name), prop_table[id].name);
	v->inherited_from[0] = '\0';
	v->source = STOR_SRC_NONE;
	switch (id) {
	case PROP_TYPE:
		set_str(v->value, sizeof(v->value),
			strcmp(ds->name, p->name) == 0 ? "filesystem" : "volume");
		return;
	case PROP_GUID:
		set_u64(v->value, ds->guid);
		return;
	case PROP_CREATETXG:
		set_u64(v->value, ds->createtxg);
		return;
	case PROP_CREATION:
		/* "-" for a dataset whose record predates the stored time */
		if (ds->creation)
			set_u64(v->value, ds->creation);
		else
			set_str(v->value, sizeof(v->value), "-");
		return;
	case PROP_VOLSIZE:
		set_u64(v->value, atomic_load(&ds->volsize));
		v->source = ds->local[id] ? STOR_SRC_LOCAL : STOR_SRC_NONE;
		return;
	case PROP_RECORDSIZE:
		set_u64(v->value, ds->recsize);
		v->source = STOR_SRC_FIXED;
		return;
	case PROP_USED:
	case PROP_AVAILABLE:
	case PROP_REFERENCED:
	case PROP_USEDBYDATASET:
	case PROP_USEDBYCHILDREN:
	case PROP_USEDBYSNAPSHOTS:
	case PROP_USEDBYREFRESERVATION: {
		struct space_view sv;
		uint64_t n;

		if (sa)
			space_of_all(p, sa, ds, &sv);
		else
			space_of_locked(p, ds, &sv);
		n = id == PROP_USED		 ? sv.used
		    : id == PROP_AVAILABLE	 ? sv.available
		    : id == PROP_USEDBYCHILDREN ? sv.children
		    : id == PROP_USEDBYREFRESERVATION ? sv.rr
		    : id == PROP_USEDBYSNAPSHOTS     ? sv.snaps
		    : id == PROP_REFERENCED	     ? sv.own + clone_shared_of(ds)
						 : sv.own;
		set_u64(v->value, n);
		return;
	}
	case PROP_WRITTEN:
		set_u64(v->value, snap_written_head(p, ds));
		return;
	case PROP_LOGICALUSED:
	case PROP_COMPRESSRATIO:
		used = atomic_load(&ds->used);
		lused = atomic_load(&ds->logical_used);
		if (id == PROP_LOGICALUSED)
			snprintf(v->value, sizeof(v->value), "%lld", (long long)lused);
		else
			snprintf(v->value, sizeof(v->value), "%.2fx",
				 used > 0 ? (double)lused / (double)used : 1.0);
		return;
	case PROP_ENCRYPTIONROOT:
		root = ds->suite ? enc_root_of(p, ds) : NULL;
		set_str(v->value, sizeof(v->value), root ? root->name : "-");
		return;
	case PROP_KEYSTATUS:
		set_str(v->value, sizeof(v->value),
			!ds->suite		   ? "-"
			: atomic_load(&ds->keys) ? "available"
						 : "unavailable");
		return;
	case PROP_REKEYSTATUS:
		rekey_status_text(p, ds, v->value, sizeof(v->value));
		return;
	case PROP_ORIGIN:
		set_str(v->value, sizeof(v->value), ds->origin ? ds->origin->name : "-");
		return;
	case PROP_RECEIVE_RESUME_TOKEN:
		recv_resume_token(p, ds, v->value, sizeof(v->value));
		return;
	}
	val = ds_prop_locked(p, ds, id, &from);
	set_str(v->value, sizeof(v->value), val ? val : "-");
	if (!from)
		v->source = STOR_SRC_DEFAULT;
	else if (from == ds)
		v->source = STOR_SRC_LOCAL;
	else {
		v->source = STOR_SRC_INHERITED;
		set_str(v->inherited_from, sizeof(v->inherited_from), from->name);
	}
}

void ds_value_none(struct stor_prop_value *v, const char *name)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", name);
	snprintf(v->value, sizeof(v->value), "-");
}

void ds_value_locked(struct stor_pool *p, struct stor_ds *ds, int id, struct stor_prop_value *v)
{
	fill_value_of(p, ds, id, v, NULL);
}

int stor_ds_list_props(struct stor_pool *p, const char *const *props, size_t n,
		       int (*fn)(const char *name, const struct stor_prop_value *v, size_t nv,
				 void *ctx),
		       void *ctx)
{
	size_t nv = props ? n : PROP_COUNT;
	struct stor_prop_value *vals = calloc(nv ? nv : 1, sizeof(*vals));
	int *ids = calloc(nv ? nv : 1, sizeof(*ids));
	struct space_all sa;
	int ret = 0;

	if (!vals || !ids) {
		free(vals);
		free(ids);
		return -ENOMEM;
	}
	for (size_t k = 0; k < nv; k++)
		ids[k] = props ? prop_named(props[k]) : (int)k;
	pthread_mutex_lock(&p->admin);
	space_all_begin(p, &sa);
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		for (size_t k = 0; k < nv; k++) {
			if (ids[k] >= 0)
				fill_value_of(p, p->ds[i], ids[k], &vals[k], &sa);
			else
				ds_value_none(&vals[k], props[k]);
		}
		ret = fn(p->ds[i]->name, vals, nv, ctx);
	}
	space_all_end(&sa);
	pthread_mutex_unlock(&p->admin);
	free(vals);
	free(ids);
	return ret;
}

struct one_prop {
	const char *name;
	struct stor_prop_value *out;
	int found;
};

static int pick_prop(const struct stor_prop_value *v, void *ctx)
{
	struct one_prop *o = ctx;

	if (strcmp(v->name, o->name))
		return 0;
	*o->out = *v;
	o->found = 1;
	return 1;
}

int stor_ds_get(struct stor_pool *p, const char *name, const char *prop,
		struct stor_prop_value *out)
{
	struct stor_ds *ds;
	int id = prop_named(prop), ret = 0;

	if (strchr(name, '@')) {
		struct one_prop o = { prop, out, 0 };

		ret = snap_get_all(p, name, prop, pick_prop, &o);
		if (ret < 0 || o.found)
			return ret < 0 ? ret : 0;
		if (id < 0)
			return STOR_EBADPROP;
		/* a dataset's property a snapshot has not: "-", as zfs get shows */
		ds_value_none(out, prop);
		return 0;
	}
	if (id < 0)
		return STOR_EBADPROP;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (ds)
		ds_value_locked(p, ds, id, out);
	else
		ret = -ENOENT;
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int stor_ds_get_all(struct stor_pool *p, const char *name,
		    int (*fn)(const struct stor_prop_value *v, void *ctx), void *ctx)
{
	struct stor_prop_value vals[PROP_COUNT];
	struct stor_ds *ds;
	int ret = 0;

	if (strchr(name, '@'))
		return snap_get_all(p, name, NULL, fn, ctx);
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (ds)
		for (int i = 0; i < PROP_COUNT; i++)
			ds_value_locked(p, ds, i, &vals[i]);
	pthread_mutex_unlock(&p->admin);
	if (!ds)
		return -ENOENT;
	for (int i = 0; i < PROP_COUNT && ret == 0; i++)
		ret = fn(&vals[i], ctx);
	return ret;
}

/* More bytes the pool must promise when @ds's reservations become @refres, @res. */
static uint64_t more_promised(struct stor_pool *p, struct stor_ds *ds, uint64_t refres,
			      uint64_t res)
{
	uint64_t had = atomic_load(&ds->refres), own, rr, more = 0;
	struct space_view sv;
	int64_t u = atomic_load(&ds->used);

	own = u > 0 ? (uint64_t)u : 0;
	rr = refres > own ? refres - own : 0;
	if (refres > had && rr > (had > own ? had - own : 0))
		more = rr - (had > own ? had - own : 0);
	if (res > atomic_load(&ds->res)) {
		space_of_locked(p, ds, &sv);
		/* the tree grows by @more first; the reservation covers beyond it */
		uint64_t tree = sv.used + more, was = atomic_load(&ds->res);
		uint64_t floor = tree > was ? tree : was;
		if (res > floor)
			more += res - floor;
	}
	return more;
}

/*
 * A change of volsize, refreservation or reservation: promised first, so
 * the pool never guarantees more than it has, and given back if the
 * record cannot be saved. A thick volume's refreservation grows with it.
 */
static int set_space_locked(struct stor_pool *p, struct stor_ds *ds, int id, const char *canon)
{
	uint64_t was = atomic_load(&ds->volsize), vol = was, more;
	char *old_rr = ds->local[PROP_REFRESERVATION], *old_r = ds->local[PROP_RESERVATION];
	char *nv = NULL, num[32];
	int ret, volume = strcmp(ds->name, p->name) != 0;

	STOR_ASSERT_HELD(&p->admin);

	if (id == PROP_VOLSIZE) {
		vol = canon ? strtoull(canon, NULL, 10) : 0;
		if (!volume) {
			pool_set_error("the pool's root dataset has no volsize");
			return -EINVAL;
		}
		if (canon && vol < was) {
			char is[32];

			stor_format_size(was, is, sizeof(is));
			pool_set_error("volsize cannot shrink (it is %s): that would drop data", is);
			return -EINVAL; /* volumes grow; shrinking would drop data */
		}
		if (!canon || check_volsize(vol, ds->recsize) < 0)
			return -EINVAL;
		if (atomic_load(&ds->refres) &&
		    atomic_load(&ds->refres) == space_auto_refres(was, ds->recsize)) {
			snprintf(num, sizeof(num), "%llu",
				 (unsigned long long)space_auto_refres(vol, ds->recsize));
			canon = num;
			id = PROP_REFRESERVATION;
		} else {
			canon = NULL;
		}
	} else if (canon && id == PROP_REFRESERVATION && strcmp(canon, "auto") == 0) {
		uint64_t n = volume ? space_auto_refres(vol, ds->recsize) : 0;
		snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
		canon = n ? num : "none";
	}
	if (canon) {
		nv = strdup(canon);
		if (!nv)
			return -ENOMEM;
	}
	more = more_promised(p, ds,
			     id == PROP_REFRESERVATION ? prop_reservation_bytes(canon, 0)
						       : atomic_load(&ds->refres),
			     id == PROP_RESERVATION ? prop_reservation_bytes(canon, 0)
						    : atomic_load(&ds->res));
	ret = space_promise_locked(p, id == PROP_RESERVATION ? parent_of(p, ds) : ds, more,
				   id == PROP_RESERVATION ? NULL
				   : vol != was ? "the volume is thick: set refreservation=none to "
						  "make it sparse"
						: NULL);
	if (ret < 0) {
		free(nv);
		return ret;
	}
	if (nv || !canon) {
		if (id == PROP_REFRESERVATION)
			ds->local[PROP_REFRESERVATION] = nv;
		else if (id == PROP_RESERVATION)
			ds->local[PROP_RESERVATION] = nv;
	}
	atomic_store(&ds->volsize, vol);
	ret = ds_save(p, ds);
	if (ret < 0) {
		/* not saved: not changed */
		atomic_store(&ds->volsize, was);
		ds->local[PROP_REFRESERVATION] = old_rr;
		ds->local[PROP_RESERVATION] = old_r;
		free(nv);
	} else {
		if (ds->local[PROP_REFRESERVATION] != old_rr)
			free(old_rr);
		if (ds->local[PROP_RESERVATION] != old_r)
			free(old_r);
	}
	space_props_locked(p, ds);
	space_sync_locked(p);
	space_unpromise_locked(p, more);
	return ret;
}

static int set_locked(struct stor_pool *p, struct stor_ds *ds, int id, const char *value)
{
	char canon[256] = "", *old;
	int ret;

	STOR_ASSERT_HELD(&p->admin);

	if (value) {
		ret = prop_validate(id, value, canon, sizeof(canon));
		if (ret < 0)
			return ret;
	}
	if (id == PROP_VOLSIZE || id == PROP_REFRESERVATION || id == PROP_RESERVATION)
		return set_space_locked(p, ds, id, value ? canon : NULL);
	old = ds->local[id];
	ds->local[id] = value ? strdup(canon) : NULL;
	if (value && !ds->local[id]) {
		ds->local[id] = old;
		return -ENOMEM;
	}
	/* keylocation of a root lives in the key file (keyfile.c), with its key */
	ret = id != PROP_KEYLOCATION ? ds_save(p, ds) : ds->save_later ? 0 : keyfile_save(p, NULL);
	if (ret < 0) {
		free(ds->local[id]);
		ds->local[id] = old;
		return ret;
	}
	free(old);
	refresh_effective(p, ds);
	return 0;
}

static int check_settable(int id)
{
	if (id < 0)
		return STOR_EBADPROP;
	if (prop_table[id].flags & (PROP_READONLY | PROP_CREATE))
		return STOR_EREADONLY;
	return 0;
}

/* set or inherit (@value NULL) of a user property: its own rule, no table row */
static int set_user(struct stor_pool *p, const char *name, const char *prop, const char *value)
{
	struct stor_ds *ds;
	int ret;

	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	ret = ds ? uprops_set_locked(p, ds, prop, value) : -ENOENT;
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int stor_ds_set(struct stor_pool *p, const char *name, const char *prop, const char *value)
{
	struct stor_ds *ds;
	int id, ret;

	if (prop_is_user(prop))
		return set_user(p, name, prop, value);
	id = prop_named(prop);

	ret = check_settable(id);
	if (ret < 0)
		return ret;
	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds)
		ret = -ENOENT;
	else if (id == PROP_KEYLOCATION && (!ds->suite || ds->enc_root_id != ds->id))
		ret = ds->suite ? STOR_ENOTROOT : STOR_ENOTENCRYPTED;
	else if (id == PROP_VOLSIZE && atomic_load(&ds->receiving))
		ret = -EBUSY; /* the stream's shape, which a resume needs too */
	else
		ret = set_locked(p, ds, id, value);
	if (ret == -EBUSY)
		recv_busy_error(ds);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/* What a set of several may have to put back: @ds's local values as they were. */
struct ds_locals {
	char *local[PROP_COUNT];
	struct stor_uprop *uprops;
	size_t nuprops;
	uint64_t volsize;
};

static void locals_free(struct ds_locals *l)
{
	for (int i = 0; i < PROP_COUNT; i++)
		free(l->local[i]);
	for (size_t i = 0; i < l->nuprops; i++) {
		free(l->uprops[i].name);
		free(l->uprops[i].value);
	}
	free(l->uprops);
	memset(l, 0, sizeof(*l));
}

static int locals_copy(const struct stor_ds *ds, struct ds_locals *l)
{
	memset(l, 0, sizeof(*l));
	l->volsize = atomic_load(&ds->volsize);
	for (int i = 0; i < PROP_COUNT; i++)
		if (ds->local[i] && !(l->local[i] = strdup(ds->local[i])))
			goto nomem;
	l->uprops = calloc(ds->nuprops + 1, sizeof(*l->uprops));
	if (!l->uprops)
		goto nomem;
	for (; l->nuprops < ds->nuprops; l->nuprops++) {
		struct stor_uprop *u = &l->uprops[l->nuprops];

		u->name = strdup(ds->uprops[l->nuprops].name);
		u->value = strdup(ds->uprops[l->nuprops].value);
		if (!u->name || !u->value) {
			l->nuprops++;
			goto nomem;
		}
	}
	return 0;
nomem:
	locals_free(l);
	return -ENOMEM;
}

/* Put @l back into @ds (it takes @l's strings) and what follows from them. */
static void locals_restore(struct stor_pool *p, struct stor_ds *ds, struct ds_locals *l)
{
	for (int i = 0; i < PROP_COUNT; i++) {
		free(ds->local[i]);
		ds->local[i] = l->local[i];
	}
	uprops_free(ds);
	ds->uprops = l->uprops;
	ds->nuprops = l->nuprops;
	atomic_store(&ds->volsize, l->volsize);
	memset(l, 0, sizeof(*l));
	space_props_locked(p, ds);
	space_sync_locked(p);
	refresh_effective(p, ds);
}

/* The checks of one assignment that need no dataset: the name, the value. */
static int set_check(const char *prop, const char *value)
{
	char canon[256], why[STOR_NAME_MAX + 160];
	int id, ret;

	if (prop_is_user(prop)) {
		if (prop_user_name_check(prop, why, sizeof(why)) < 0 ||
		    prop_user_value_check(value, why, sizeof(why)) < 0) {
			pool_set_error("%s", why);
			return STOR_EBADPROP;
		}
		return 0;
	}
	id = prop_named(prop);
	ret = check_settable(id);
	if (ret == 0)
		ret = prop_validate(id, value, canon, sizeof(canon));
	return ret;
}

int stor_ds_set_many(struct stor_pool *p, const char *name, size_t n, const char *const *props,
		     const char *const *values, int *bad)
{
	struct ds_locals was = { 0 };
	struct stor_ds *ds;
	int ret = 0, keyloc = 0;
	size_t i;

	*bad = -1;
	pool_set_error("%s", "");
	/* every assignment checked before any is made */
	for (i = 0; i < n && ret == 0; i++) {
		for (size_t j = 0; j < i && ret == 0; j++)
			if (!strcmp(props[i], props[j])) {
				pool_set_error("%s is given twice", props[i]);
				ret = STOR_EBADPROP;
			}
		if (ret == 0)
			ret = set_check(props[i], values[i]);
	}
	if (ret < 0) {
		*bad = (int)i - 1;
		return ret;
	}
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds) {
		ret = -ENOENT;
		goto out;
	}
	for (i = 0; i < n && ret == 0; i++) {
		int id = prop_is_user(props[i]) ? -1 : prop_named(props[i]);

		if (id == PROP_VOLSIZE && atomic_load(&ds->receiving))
			ret = -EBUSY; /* the stream's shape, which a resume needs too */
		if (id != PROP_KEYLOCATION)
			continue;
		keyloc = 1;
		if (!ds->suite || ds->enc_root_id != ds->id)
			ret = ds->suite ? STOR_ENOTROOT : STOR_ENOTENCRYPTED;
	}
	if (ret == -EBUSY)
		recv_busy_error(ds);
	if (ret < 0) {
		*bad = (int)i - 1;
		goto out;
	}
	ret = locals_copy(ds, &was);
	if (ret < 0)
		goto out;
	/* each made in memory (what one depends on, a reservation on the
	 * volsize before it, sees the ones before it), then one commit */
	ds->save_later = 1;
	for (i = 0; i < n && ret == 0; i++)
		ret = prop_is_user(props[i]) ? uprops_set_locked(p, ds, props[i], values[i])
					     : set_locked(p, ds, prop_named(props[i]), values[i]);
	ds->save_later = 0;
	if (ret < 0)
		*bad = (int)i - 1;
	if (ret == 0 && keyloc)
		ret = keyfile_save(p, NULL);
	if (ret == 0)
		ret = ds_save(p, ds);
	if (ret < 0) {
		locals_restore(p, ds, &was);
		if (keyloc)
			keyfile_save(p, NULL); /* as it was; it failed, or is unchanged */
	}
out:
	locals_free(&was);
	pthread_mutex_unlock(&p->admin);
	return ret;
}

int stor_ds_inherit(struct stor_pool *p, const char *name, const char *prop)
{
	struct stor_ds *ds;
	int id, ret;

	if (prop_is_user(prop))
		return set_user(p, name, prop, NULL);
	id = prop_named(prop);

	ret = check_settable(id);
	if (ret == 0 && (id == PROP_VOLSIZE || (prop_table[id].flags & PROP_KEY)))
		ret = STOR_EREADONLY;
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	ret = ds ? set_locked(p, ds, id, NULL) : -ENOENT;
	pthread_mutex_unlock(&p->admin);
	return ret;
}

/* ---- user properties: resolution (userprops.c keeps and stores them) ---- */

/* What stor_ds_user_props() found, copied out of the table under the lock. */
struct ufound {
	char *name, *value, *from;
	enum stor_prop_source source;
};

static int cmp_ufound(const void *a, const void *b)
{
	return strcmp(((const struct ufound *)a)->name, ((const struct ufound *)b)->name);
}

/* @name = @value as set on @d, seen from @asked (the head of a snapshot is a parent to it). */
static int ufound_add(struct ufound **f, size_t *n, const char *name, const char *value,
		      const struct stor_ds *d, const struct stor_ds *asked, int snap)
{
	struct ufound *t = realloc(*f, (*n + 1) * sizeof(*t));

	if (!t)
		return -ENOMEM;
	*f = t;
	t[*n] = (struct ufound){ strdup(name), strdup(value), strdup(d == asked && !snap ? ""
										       : d->name),
				 d == asked && !snap ? STOR_SRC_LOCAL : STOR_SRC_INHERITED };
	(*n)++;
	return t[*n - 1].name && t[*n - 1].value && t[*n - 1].from ? 0 : -ENOMEM;
}

int stor_ds_user_props(struct stor_pool *p, const char *name, const char *prop,
		       int (*fn)(const struct stor_uprop_value *v, void *ctx), void *ctx)
{
	char dsname[STOR_NAME_MAX + 1], why[STOR_NAME_MAX + 160];
	struct ufound *f = NULL;
	struct stor_ds *ds;
	size_t n = 0;
	int ret = 0, snap = strchr(name, '@') != NULL;

	if (prop && prop_user_name_check(prop, why, sizeof(why)) < 0) {
		pool_set_error("%s", why);
		return STOR_EBADPROP;
	}
	snprintf(dsname, sizeof(dsname), "%.*s", (int)strcspn(name, "@"), name);
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, dsname);
	if (!ds || (snap && !snap_find_locked(p, name)))
		ret = -ENOENT;
	for (struct stor_ds *d = ds; d && ret == 0; d = parent_of(p, d)) {
		if (prop) {
			const char *v = uprops_local(d, prop);

			if (v) {
				ret = ufound_add(&f, &n, prop, v, d, ds, snap);
				break;
			}
			continue;
		}
		/* the nearest value of each name wins */
		for (size_t i = 0; i < d->nuprops && ret == 0; i++) {
			size_t k = 0;

			while (k < n && strcmp(f[k].name, d->uprops[i].name))
				k++;
			if (k == n)
				ret = ufound_add(&f, &n, d->uprops[i].name, d->uprops[i].value, d,
						 ds, snap);
		}
	}
	pthread_mutex_unlock(&p->admin);
	if (ret == 0 && prop && !n) {
		struct stor_uprop_value v = { prop, "-", STOR_SRC_NONE, "" };

		ret = fn(&v, ctx);
	}
	if (n)
		qsort(f, n, sizeof(*f), cmp_ufound);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct stor_uprop_value v = { f[i].name, f[i].value, f[i].source, f[i].from };

		ret = fn(&v, ctx);
	}
	for (size_t i = 0; i < n; i++) {
		free(f[i].name);
		free(f[i].value);
		free(f[i].from);
	}
	free(f);
	return ret;
}
