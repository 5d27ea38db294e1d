/* SPDX-License-Identifier: MIT */
/*
 * The pool record: what names a pool's LUNs, kept in LMDB ("pool"/"config")
 * and so logged to the LUNs with every other row a commit writes.
 *
 *   u32 version | u64 guid | u64 next dataset id |
 *   u32 nluns | nluns x (u64 lun guid | u64 size | u16 path length | path)
 *
 * and in a pool with mirrors: u32 nluns | nluns x u32 vdev (the index of
 * the first LUN of each LUN's vdev, mirror.c). A pool without mirrors has
 * no such tail, as before mirrors; with one, the labels must agree with it.
 * A detached LUN stays in the record (its index is taken for good); the
 * sides row says it is detached (lunset.c).
 *
 * <pool>.luns in the state directory lists the LUNs' paths, a line each,
 * rewritten with every record that changes them: where an import looks
 * when LMDB is gone (pool.c). Here, below the datasets, so that a dataset
 * create can put the next id in its own transaction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev/lun.h"
#include "dev/mirror.h"
#include "kv/format.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "pool_impl.h"
#include "txg/pool_record.h"

/* <pool>.luns: the paths of the first @n LUNs, replaced whole. Best effort:
 * LMDB's pool record is what an import reads while LMDB is there. */
static void save_hint(struct stor_pool *p, unsigned n)
{
	char path[4200], tmp[4300];
	FILE *f;
	int ok;

	statedir_luns_path(p->path, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(tmp, "we");
	if (!f)
		return;
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%s\n", lun_path(p->luns[i].lun));
	ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, path) < 0)
		unlink(tmp);
	else
		statedir_sync(path);
}

/* The pool record naming the first @n LUNs of p->luns, put in @t. */
static int put_config(struct stor_pool *p, unsigned n, struct meta_txn *t)
{
	size_t len = 4 + 8 + 8 + 4;
	uint8_t *buf, *w;
	int ret;

	int mirrors = 0;

	for (unsigned i = 0; i < n; i++) {
		len += 8 + 8 + 2 + strlen(lun_path(p->luns[i].lun));
		/* a mirror detached down to one side keeps its layout too */
		mirrors |= mirror_is_side(p, i) || p->luns[i].vdev != i;
	}
	if (mirrors)
		len += 4 + 4 * (size_t)n;
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	w = buf;
	put_u32(&w, POOL_RECORD_VERSION);
	put_u64(&w, p->guid);
	put_u64(&w, p->next_ds_id);
	put_u32(&w, n);
	for (unsigned i = 0; i < n; i++) {
		const char *path = lun_path(p->luns[i].lun);
		uint64_t end = lun_data_size(p->luns[i].lun) + LUN_DATA_OFF;

		put_u64(&w, p->luns[i].guid);
		/* a LUN cut short keeps its end: the next import knows it again */
		put_u64(&w, end < p->luns[i].cut ? p->luns[i].cut : end);
		put_u16(&w, (uint16_t)strlen(path));
		put_bytes(&w, path, strlen(path));
	}
	if (mirrors) {
		put_u32(&w, n);
		for (unsigned i = 0; i < n; i++)
			put_u32(&w, p->luns[i].vdev);
	}
	ret = meta_put(t, META_POOL, "config", 6, buf, len);
	free(buf);
	return ret;
}

/* The pool record naming the first @n LUNs of p->luns, committed, and
 * <pool>.luns with them. */
static int save_config(struct stor_pool *p, unsigned n)
{
	struct meta_txn *t = NULL;
	int ret = meta_txn_begin(p->meta, &t);

	if (ret == 0)
		ret = put_config(p, n, t);
	if (ret == 0) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	meta_txn_abort(t);
	if (ret == 0)
		save_hint(p, n);
	return ret;
}

int pool_save_config(struct stor_pool *p)
{
	return save_config(p, atomic_load(&p->nluns));
}

int pool_config_txn(struct stor_pool *p, struct meta_txn *t)
{
	return put_config(p, atomic_load(&p->nluns), t);
}

int pool_save_config_n(struct stor_pool *p, unsigned n)
{
	return save_config(p, n);
}

/* The vdev of each of the @n LUNs the record's tail at @r names (the LUN
 * itself where there is no tail: a pool without mirrors). */
static int layout_of(uint32_t n, const uint8_t *r, const uint8_t *end, uint32_t *vdev)
{
	int tail = end - r >= 4;

	if (tail && ((size_t)(end - r) < 4 + 4 * (size_t)n || get_u32(&r) != n))
		return STOR_ECORRUPT;
	for (uint32_t i = 0; i < n; i++) {
		vdev[i] = tail ? get_u32(&r) : i;
		if (vdev[i] > i || vdev[vdev[i]] != vdev[i])
			return STOR_ECORRUPT;
	}
	return 0;
}

int pool_record_read(struct meta_txn *t, struct pool_record *rec)
{
	const uint8_t *r, *end;
	const void *v;
	size_t vlen;
	int ret;

	memset(rec, 0, sizeof(*rec));
	ret = meta_get(t, META_POOL, "config", 6, &v, &vlen);
	if (ret < 0)
		return ret;
	r = v;
	end = r + vlen;
	if (vlen < 24)
		return STOR_ECORRUPT;
	rec->version = get_u32(&r);
	if (rec->version != POOL_RECORD_VERSION)
		return STOR_EFORMAT;
	rec->guid = get_u64(&r);
	rec->next_ds_id = get_u64(&r);
	rec->n = get_u32(&r);
	if (rec->n > STOR_LUNS_MAX)
		goto corrupt;
	for (uint32_t i = 0; i < rec->n; i++) {
		uint16_t plen;

		if (end - r < 18)
			goto corrupt;
		rec->lun_guid[i] = get_u64(&r);
		rec->size[i] = get_u64(&r);
		plen = get_u16(&r);
		if (end - r < plen || plen >= 4096)
			goto corrupt;
		rec->path[i] = malloc(plen + 1u);
		if (!rec->path[i]) {
			pool_record_free(rec);
			return -ENOMEM;
		}
		get_bytes(&r, rec->path[i], plen);
		rec->path[i][plen] = '\0';
	}
	rec->layout = layout_of(rec->n, r, end, rec->vdev);
	return 0;
corrupt:
	pool_record_free(rec);
	return STOR_ECORRUPT;
}

void pool_record_free(struct pool_record *rec)
{
	for (uint32_t i = 0; i < STOR_LUNS_MAX && i < rec->n; i++) {
		free(rec->path[i]);
		rec->path[i] = NULL;
	}
}
