// SPDX-License-Identifier: MIT
/*
 * Offline tampering with a stopped daemon's pool: its LMDB file through the
 * LMDB API, opened the way libstore/kv/meta_lmdb.c opens it (one file,
 * MDB_NOSUBDIR, a 4 GiB map, named databases), and its LUN files with
 * pread/pwrite at the place the format puts an extent. A change to "bp"
 * also empties "space", the free map's rows derived from it
 * (txg/spacemap.c), as an attacker who wants the forged pointers taken
 * whole would: the import then walks them. LMDB must not have
 * one environment open twice in a process: close the tamper handle before
 * opening the pool with libstore.
 */

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tamper.h"

struct tamper {
	MDB_env *env;
};

int tamper_open(const char *mdb, struct tamper **out)
{
	struct tamper *t = calloc(1, sizeof(*t));
	int rc;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	rc = mdb_env_create(&t->env);
	if (rc)
		goto fail;
	mdb_env_set_maxdbs(t->env, 16);
	/* the engine's map (meta_open with map_size 0); LMDB takes the file's if larger */
	mdb_env_set_mapsize(t->env, (size_t)4 << 30);
	/* a missing file must not be created empty */
	if (access(mdb, F_OK) < 0) {
		rc = errno;
		goto fail;
	}
	rc = mdb_env_open(t->env, mdb, MDB_NOSUBDIR | MDB_NOTLS, 0600);
	if (rc)
		goto fail;
	*out = t;
	return 0;
fail:
	if (t->env)
		mdb_env_close(t->env);
	free(t);
	return -rc;
}

void tamper_close(struct tamper *t)
{
	if (!t)
		return;
	mdb_env_close(t->env);
	free(t);
}

static int begin(struct tamper *t, const char *db, unsigned flags, MDB_txn **txn, MDB_dbi *dbi)
{
	int rc = mdb_txn_begin(t->env, NULL, flags, txn);

	if (rc)
		return rc;
	rc = mdb_dbi_open(*txn, db, 0, dbi);
	if (rc) {
		mdb_txn_abort(*txn);
		*txn = NULL;
	}
	return rc;
}

int tamper_has_db(struct tamper *t, const char *db)
{
	MDB_txn *txn;
	MDB_dbi dbi;

	if (begin(t, db, MDB_RDONLY, &txn, &dbi))
		return 0;
	mdb_txn_abort(txn);
	return 1;
}

long tamper_get(struct tamper *t, const char *db, const void *key, size_t klen, void *val,
		size_t cap)
{
	MDB_val k = { klen, (void *)key }, v;
	MDB_txn *txn;
	MDB_dbi dbi;
	long ret;
	int rc = begin(t, db, MDB_RDONLY, &txn, &dbi);

	if (rc)
		return -rc;
	rc = mdb_get(txn, dbi, &k, &v);
	if (rc) {
		ret = -rc;
	} else {
		memcpy(val, v.mv_data, v.mv_size < cap ? v.mv_size : cap);
		ret = (long)v.mv_size;
	}
	mdb_txn_abort(txn);
	return ret;
}

/* In @txn, drop the rows derived from "bp" if @db is "bp". */
static int forget_rows(MDB_txn *txn, const char *db)
{
	MDB_dbi dbi;

	if (strcmp(db, "bp") || mdb_dbi_open(txn, "space", 0, &dbi))
		return 0;
	return mdb_drop(txn, dbi, 0);
}

int tamper_put(struct tamper *t, const char *db, const void *key, size_t klen, const void *val,
	       size_t vlen)
{
	MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val };
	MDB_txn *txn;
	MDB_dbi dbi;
	int rc = begin(t, db, 0, &txn, &dbi);

	if (rc)
		return -rc;
	rc = mdb_put(txn, dbi, &k, &v, 0);
	if (rc == 0)
		rc = forget_rows(txn, db);
	if (rc) {
		mdb_txn_abort(txn);
		return -rc;
	}
	return -mdb_txn_commit(txn);
}

int tamper_del(struct tamper *t, const char *db, const void *key, size_t klen)
{
	MDB_val k = { klen, (void *)key };
	MDB_txn *txn;
	MDB_dbi dbi;
	int rc = begin(t, db, 0, &txn, &dbi);

	if (rc)
		return -rc;
	rc = mdb_del(txn, dbi, &k, NULL);
	if (rc == 0)
		rc = forget_rows(txn, db);
	if (rc) {
		mdb_txn_abort(txn);
		return -rc;
	}
	return -mdb_txn_commit(txn);
}

long tamper_each(struct tamper *t, const char *db,
		 int (*fn)(const void *key, size_t klen, const void *val, size_t vlen, void *ctx),
		 void *ctx)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	MDB_txn *txn;
	MDB_dbi dbi;
	long n = 0;
	int rc = begin(t, db, MDB_RDONLY, &txn, &dbi);

	if (rc)
		return -rc;
	rc = mdb_cursor_open(txn, dbi, &cur);
	for (int op = MDB_FIRST; rc == 0; op = MDB_NEXT) {
		rc = mdb_cursor_get(cur, &k, &v, (MDB_cursor_op)op);
		if (rc)
			break;
		n++;
		if (fn(k.mv_data, k.mv_size, v.mv_data, v.mv_size, ctx))
			break;
	}
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc && rc != MDB_NOTFOUND ? -rc : n;
}

static uint64_t be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

int tamper_ds_id(struct tamper *t, const char *name, uint64_t *id)
{
	uint8_t rec[4096];
	long n = tamper_get(t, "ds", name, strlen(name), rec, sizeof(rec));

	if (n < 0)
		return (int)n;
	if (n < 12)
		return -EINVAL;
	*id = be(rec + 4, 8);
	return 0;
}

void tbp_key(uint64_t ds_id, uint64_t recno, uint8_t key[TBP_KEY_LEN])
{
	put_be(key, ds_id, 8);
	put_be(key + 8, recno, 8);
}

void tbp_key_parse(const uint8_t key[TBP_KEY_LEN], uint64_t *ds_id, uint64_t *recno)
{
	*ds_id = be(key, 8);
	*recno = be(key + 8, 8);
}

/*
 * Format 2, TBP_LEN bytes: u16 lun | u8 flags | u8 comp | u32 psize |
 * u32 lsize | u32 csize | u64 sector | u64 birth | u64 key salt |
 * u8[12] nonce | u8[16] mac | u64 xxh3-64 of the stored bytes.
 * Format 1 had a u32 key epoch for the salt and no stored-bytes checksum.
 */
int tbp_decode(const void *val, size_t len, struct tbp *bp)
{
	const uint8_t *p = val;
	int saltlen;

	if (len == TBP_LEN)
		saltlen = 8;
	else if (len == TBP_LEN_V1)
		saltlen = 4;
	else
		return -1;
	memset(bp, 0, sizeof(*bp));
	bp->len = len;
	bp->lun = (uint16_t)be(p, 2);
	bp->flags = p[2];
	bp->comp = p[3];
	bp->psize = (uint32_t)be(p + 4, 4);
	bp->lsize = (uint32_t)be(p + 8, 4);
	bp->csize = (uint32_t)be(p + 12, 4);
	bp->sector = be(p + 16, 8);
	bp->birth = be(p + 24, 8);
	bp->salt = be(p + 32, saltlen);
	memcpy(bp->nonce, p + 32 + saltlen, 12);
	memcpy(bp->mac, p + 44 + saltlen, 16);
	if (len == TBP_LEN)
		bp->xxh = be(p + 68, 8);
	return 0;
}

size_t tbp_encode(const struct tbp *bp, uint8_t *val)
{
	int saltlen = bp->len == TBP_LEN_V1 ? 4 : 8;

	put_be(val, bp->lun, 2);
	val[2] = bp->flags;
	val[3] = bp->comp;
	put_be(val + 4, bp->psize, 4);
	put_be(val + 8, bp->lsize, 4);
	put_be(val + 12, bp->csize, 4);
	put_be(val + 16, bp->sector, 8);
	put_be(val + 24, bp->birth, 8);
	put_be(val + 32, bp->salt, saltlen);
	memcpy(val + 32 + saltlen, bp->nonce, 12);
	memcpy(val + 44 + saltlen, bp->mac, 16);
	if (saltlen == 8)
		put_be(val + 68, bp->xxh, 8);
	return saltlen == 8 ? TBP_LEN : TBP_LEN_V1;
}

int tamper_bp_get(struct tamper *t, uint64_t ds_id, uint64_t recno, struct tbp *bp)
{
	uint8_t key[TBP_KEY_LEN], val[256];
	long n;

	tbp_key(ds_id, recno, key);
	n = tamper_get(t, "bp", key, sizeof(key), val, sizeof(val));
	if (n < 0)
		return (int)n;
	return tbp_decode(val, (size_t)n, bp);
}

int tamper_bp_put(struct tamper *t, uint64_t ds_id, uint64_t recno, const struct tbp *bp)
{
	uint8_t key[TBP_KEY_LEN], val[TBP_LEN];

	tbp_key(ds_id, recno, key);
	return tamper_put(t, "bp", key, sizeof(key), val, tbp_encode(bp, val));
}

static int lun_rw(const char *path, uint64_t sector, uint64_t off, void *buf, size_t len, int wr)
{
	off_t at = (off_t)(TLUN_DATA_OFF + sector * TLUN_SECTOR + off);
	int fd = open(path, wr ? O_WRONLY : O_RDONLY);
	size_t done = 0;
	int ret = 0;

	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t n = wr ? pwrite(fd, (const char *)buf + done, len - done, at + (off_t)done)
			       : pread(fd, (char *)buf + done, len - done, at + (off_t)done);

		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)n;
	}
	if (ret == 0 && wr && fsync(fd) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

int tlun_read(const char *path, uint64_t sector, uint64_t off, void *buf, size_t len)
{
	return lun_rw(path, sector, off, buf, len, 0);
}

int tlun_write(const char *path, uint64_t sector, uint64_t off, const void *buf, size_t len)
{
	return lun_rw(path, sector, off, (void *)buf, len, 1);
}

long tlun_find(const char *path, const void *pat, size_t len)
{
	enum { CHUNK = 4 << 20 };
	uint8_t *buf = malloc(CHUNK + len);
	int fd = open(path, O_RDONLY);
	size_t have = 0;
	long found = 0;

	if (!buf || fd < 0 || !len) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return fd < 0 ? -errno : -EINVAL;
	}
	for (;;) {
		ssize_t n = read(fd, buf + have, CHUNK);
		const uint8_t *p, *end;

		if (n <= 0)
			break;
		have += (size_t)n;
		end = buf + have;
		for (p = buf; (p = memmem(p, (size_t)(end - p), pat, len)); p++)
			found++;
		/* keep a tail shorter than the pattern: a match across chunks is seen once */
		if (have >= len) {
			memmove(buf, end - (len - 1), len - 1);
			have = len - 1;
		}
	}
	close(fd);
	free(buf);
	return found;
}
