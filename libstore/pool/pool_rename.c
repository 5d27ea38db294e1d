/* SPDX-License-Identifier: MIT */
/*
 * A pool renamed on import (zpool import POOL NEWNAME). The name is in
 * three places: the keys of the dataset records ("pool/a/b"), the names of
 * the pool's files in the state directory, and the LUN labels. A rename
 * runs once the pool has opened under its old name, every check passed:
 *   1. one LMDB transaction rewrites the dataset record keys;
 *   2. the state files get their new names (statedir_rename_pool: links
 *      first, then the old names go);
 *   3. the names in memory change; the open then writes the labels.
 * A crash after 1 leaves records named for the new pool in the old file:
 * the next open of either name brings the keys back in line with the name
 * it opens (pool_follow_name, before the datasets load). A crash after 2
 * leaves labels with the old name: the pool imports under its new name at
 * its recorded paths, which rewrites them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "ds/dataset.h"
#include "ds/snapshot.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "pool/pool_rename.h"
#include "pool_impl.h"

/* One dataset record under a name of another pool: key and value copies. */
struct stray {
	char *key;
	void *val;
	size_t klen, vlen;
};

struct strays {
	const char *pool;
	struct stray *v;
	size_t n, cap;
};

static int collect(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct strays *s = ctx;
	size_t plen = strlen(s->pool);
	const char *k = key;

	if (klen >= plen && !memcmp(k, s->pool, plen) && (klen == plen || k[plen] == '/'))
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct stray *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n] = (struct stray){ .key = malloc(klen + 1), .val = malloc(vlen ? vlen : 1),
				     .klen = klen, .vlen = vlen };
	if (!s->v[s->n].key || !s->v[s->n].val) {
		free(s->v[s->n].key);
		free(s->v[s->n].val);
		return -ENOMEM;
	}
	memcpy(s->v[s->n].key, key, klen);
	s->v[s->n].key[klen] = '\0';
	memcpy(s->v[s->n].val, val, vlen);
	s->n++;
	return 0;
}

int pool_follow_name(struct stor_pool *p)
{
	struct strays s = { .pool = p->name };
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_DS, NULL, 0, 0, collect, &s);
	meta_rtxn_put(t);
	t = NULL;
	if (ret == 0 && s.n)
		ret = meta_txn_begin(p->meta, &t);
	for (size_t i = 0; ret == 0 && i < s.n; i++) {
		/* "old/a/b" -> "new/a/b", "old@s" -> "new@s": the part after
		 * the first component stays */
		const char *rest = s.v[i].key + strcspn(s.v[i].key, "/@");
		char name[STOR_NAME_MAX + 1];

		if ((size_t)snprintf(name, sizeof(name), "%s%s", p->name, rest) >= sizeof(name)) {
			pool_set_error("pool %s: dataset %s: too long a name under the new pool name",
				       p->name, s.v[i].key);
			ret = STOR_EBADNAME;
			break;
		}
		ret = meta_del(t, META_DS, s.v[i].key, s.v[i].klen);
		if (ret == 0)
			ret = meta_put(t, META_DS, name, strlen(name), s.v[i].val, s.v[i].vlen);
	}
	if (ret == 0 && t) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	meta_txn_abort(t);
	for (size_t i = 0; i < s.n; i++) {
		free(s.v[i].key);
		free(s.v[i].val);
	}
	free(s.v);
	return ret;
}

int pool_rename(struct stor_pool *p, const char *name)
{
	size_t olen = strlen(p->name);
	char **names = calloc(p->nds + 1, sizeof(*names));
	char *state = statedir_of(p->path, p->name), *path = NULL, *pname = strdup(name);
	struct meta_txn *t = NULL;
	int ret = -ENOMEM;

	if (!names || !state || !pname || !(path = statedir_meta_path(state, name)))
		goto out;
	for (size_t i = 0; i < p->nds; i++) {
		if (asprintf(&names[i], "%s%s", name, p->ds[i]->name + olen) < 0) {
			names[i] = NULL;
			goto out;
		}
		if (strlen(names[i]) > STOR_NAME_MAX) {
			pool_set_error("pool %s: dataset %s: too long a name under %s", p->name,
				       p->ds[i]->name, name);
			ret = STOR_EBADNAME;
			goto out;
		}
	}
	ret = meta_txn_begin(p->meta, &t);
	for (size_t i = 0; ret == 0 && i < p->nds; i++) {
		char *old = p->ds[i]->name;

		ret = meta_del(t, META_DS, old, strlen(old));
		p->ds[i]->name = names[i]; /* the record goes under the new name */
		if (ret == 0)
			ret = ds_save_txn(t, p->ds[i]);
		p->ds[i]->name = old;
	}
	if (ret == 0)
		ret = snap_rename_txn(p, t, name);
	if (ret == 0) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	if (ret == 0)
		ret = statedir_rename_pool(p->path, path);
	if (ret < 0) {
		pool_set_error("pool %s: rename to %s: %s", p->name, name, stor_strerror(ret));
		goto out;
	}
	snap_rename_mem(p, name);
	/* the table stays sorted: every name had the same prefix, and has again */
	for (size_t i = 0; i < p->nds; i++) {
		free(p->ds[i]->name);
		p->ds[i]->name = names[i];
		names[i] = NULL;
	}
	free(p->name);
	p->name = pname;
	pname = NULL;
	free(p->path);
	p->path = path;
	path = NULL;
out:
	meta_txn_abort(t);
	for (size_t i = 0; names && i < p->nds; i++)
		free(names[i]);
	free(names);
	free(state);
	free(path);
	free(pname);
	return ret;
}
