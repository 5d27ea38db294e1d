/* SPDX-License-Identifier: MIT */
/*
 * The key file of a pool, <state_dir>/pools/<pool>.keys: the wrapped master
 * key of every encrypted dataset and the parameters of its wrapping (its
 * encryption root, keyformat, PBKDF2 iterations, salt, and on a root its
 * keylocation). It lives outside LMDB because LMDB leaves old record bytes
 * in page gaps and free pages, and a wrapped key replaced by change-key must
 * not stay behind in live metadata: the file is replaced whole (write,
 * fsync, rename) and the bytes of the old one are overwritten once the new
 * one is in place.
 *
 * The rename is the one commit point of change-key, so this file is the
 * only source of keyformat, pbkdf2iters and keylocation of an encrypted
 * dataset: keyfile_load() sets them (locally on a root, unset on the others)
 * over whatever the LMDB dataset record holds, and nothing that changes them
 * has to write LMDB as well.
 *
 * Layout, big-endian: u64 magic "COFFKEYS" | u32 version | u32 count |
 * count x (u64 dataset guid | u64 root dataset id | u8 keyformat |
 * u32 iterations | salt | wrapped key | u16 length | keylocation, empty
 * but on a root) | u64 xxh64 of everything before it. Version 1 entries end
 * at the wrapped key; their keylocation stays the one of the LMDB record.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_impl.h"

#define KEYFILE_MAGIC 0x434f46464b455953ull /* "COFFKEYS" */
#define KEYFILE_VERSION 2u /* its own: 1 was FORMAT_VERSION at the time */
#define KEYFILE_V1 1u
#define ENTRY_LEN (8 + 8 + 1 + 4 + KEYS_SALT_LEN + KEYS_WRAPPED_LEN) /* fixed part */
#define LOC_MAX 255 /* prop_validate's bound of a value */

static void keyfile_path(const struct stor_pool *p, char *out, size_t len)
{
	size_t n = strlen(p->path);

	/* pools/<pool>.mdb -> pools/<pool>.keys */
	snprintf(out, len, "%.*s.keys", (int)(n > 4 ? n - 4 : n), p->path);
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

int fsync_dir(const char *path)
{
	char dir[4200];
	int fd, ret = 0;

	snprintf(dir, sizeof(dir), "%s", path);
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* The keylocation an entry carries: a root's own, nothing for the others. */
static const char *entry_loc(const struct stor_ds *d)
{
	const char *loc = d->enc_root_id == d->id ? d->local[PROP_KEYLOCATION] : NULL;

	return loc && strlen(loc) <= LOC_MAX ? loc : "";
}

int keyfile_save(struct stor_pool *p, struct stor_ds *extra)
{
	char path[4200], tmp[4300];
	size_t n = 0, len = 8 + 4 + 4 + 8;
	uint8_t *buf, *w;
	int fd = -1, old = -1, ret;
	struct stat st;

	for (size_t i = 0; i <= p->nds; i++) {
		struct stor_ds *d = i < p->nds ? p->ds[i] : extra;

		if (d && d->suite) {
			n++;
			len += ENTRY_LEN + 2 + strlen(entry_loc(d));
		}
	}
	buf = keys_secure_alloc(len);
	if (!buf)
		return -ENOMEM;
	w = buf;
	put_u64(&w, KEYFILE_MAGIC);
	put_u32(&w, KEYFILE_VERSION);
	put_u32(&w, (uint32_t)n);
	for (size_t i = 0; i <= p->nds; i++) {
		struct stor_ds *d = i < p->nds ? p->ds[i] : extra;
		const char *loc;

		if (!d || !d->suite)
			continue;
		loc = entry_loc(d);
		put_u64(&w, d->guid);
		put_u64(&w, d->enc_root_id);
		put_u8(&w, (uint8_t)d->keyformat);
		put_u32(&w, d->iters);
		put_bytes(&w, d->salt, KEYS_SALT_LEN);
		put_bytes(&w, d->wrapped, KEYS_WRAPPED_LEN);
		put_u16(&w, (uint16_t)strlen(loc));
		put_bytes(&w, loc, strlen(loc));
	}
	put_u64(&w, XXH64(buf, len - 8, 0));

	keyfile_path(p, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		goto out;
	}
	ret = write_all(fd, buf, len);
	if (ret == 0 && fsync(fd) < 0)
		ret = -errno;
	if (ret < 0) {
		unlink(tmp);
		goto out;
	}
	old = open(path, O_WRONLY | O_CLOEXEC);
	if (rename(tmp, path) < 0) {
		ret = -errno;
		unlink(tmp);
		goto out;
	}
	ret = fsync_dir(path);
	/* the new file is in place: overwrite the bytes of the one it replaced */
	if (ret == 0 && old >= 0 && fstat(old, &st) == 0 && st.st_size > 0) {
		uint8_t zero[4096] = { 0 };
		for (off_t o = 0; o < st.st_size; o += (off_t)sizeof(zero))
			if (pwrite(old, zero, sizeof(zero), o) < 0)
				break;
		fdatasync(old);
	}
out:
	if (old >= 0)
		close(old);
	if (fd >= 0)
		close(fd);
	keys_secure_free(buf, len);
	return ret;
}

static struct stor_ds *by_guid(struct stor_pool *p, uint64_t guid)
{
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i]->guid == guid)
			return p->ds[i];
	return NULL;
}

/* Set (or with @v NULL, unset) the local value of property @id of @d. */
static int set_local(struct stor_ds *d, int id, const char *v)
{
	char *copy = v ? strdup(v) : NULL;

	if (v && !copy)
		return -ENOMEM;
	free(d->local[id]);
	d->local[id] = copy;
	return 0;
}

/* The key properties of @d as its entry says: local on a root, unset
 * (inherited from the root above) on the others. */
static int entry_props(struct stor_ds *d)
{
	char num[16];
	int ret;

	if (d->enc_root_id != d->id) {
		for (int id = 0; id < PROP_COUNT; id++)
			if (prop_table[id].flags & PROP_KEY)
				set_local(d, id, NULL); /* unsetting allocates nothing */
		return 0;
	}
	snprintf(num, sizeof(num), "%u", d->iters);
	ret = set_local(d, PROP_KEYFORMAT, keys_format_name((enum stor_keyformat)d->keyformat));
	if (ret == 0)
		ret = set_local(d, PROP_PBKDF2ITERS,
				d->keyformat == STOR_KEY_PASSPHRASE ? num : NULL);
	return ret;
}

int keyfile_load(struct stor_pool *p)
{
	char path[4200];
	uint8_t *buf = NULL;
	const uint8_t *r, *end;
	size_t len = 0, nenc = 0, nfound = 0;
	uint32_t n, version;
	struct stat st;
	int fd, ret = STOR_ECORRUPT;

	for (size_t i = 0; i < p->nds; i++)
		nenc += p->ds[i]->suite != 0;
	keyfile_path(p, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT && nenc == 0)
			return 0;
		pool_set_error("pool %s: key file %s: %s", p->name, path, strerror(errno));
		return errno == ENOENT ? STOR_ECORRUPT : -errno;
	}
	if (fstat(fd, &st) < 0 || st.st_size < 24 || st.st_size > (1 << 26))
		goto bad;
	len = (size_t)st.st_size;
	buf = keys_secure_alloc(len);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (pread(fd, buf, len, 0) != (ssize_t)len)
		goto bad;
	r = buf + len - 8;
	if (get_u64(&r) != XXH64(buf, len - 8, 0))
		goto bad;
	r = buf;
	end = buf + len - 8;
	if (get_u64(&r) != KEYFILE_MAGIC)
		goto bad;
	version = get_u32(&r);
	if (version != KEYFILE_VERSION && version != KEYFILE_V1) {
		ret = STOR_EFORMAT;
		goto out;
	}
	n = get_u32(&r);
	for (uint32_t i = 0; i < n; i++) {
		struct stor_ds *d;
		char loc[LOC_MAX + 1], canon[LOC_MAX + 1];
		uint16_t loclen = 0;

		if (end - r < ENTRY_LEN + (version == KEYFILE_V1 ? 0 : 2))
			goto bad;
		d = by_guid(p, get_u64(&r));
		if (!d) { /* destroyed since: not ours */
			r += ENTRY_LEN - 8;
			if (version != KEYFILE_V1) {
				loclen = get_u16(&r);
				if (end - r < loclen)
					goto bad;
				r += loclen;
			}
			continue;
		}
		if (!d->suite) {
			/* its record lost its suite: someone turned it clear */
			pool_set_error("pool %s: dataset %s: the key file holds its key but its "
				       "record says unencrypted; the metadata was changed",
				       p->name, d->name);
			ret = STOR_ECORRUPT;
			goto out;
		}
		d->enc_root_id = get_u64(&r);
		d->keyformat = get_u8(&r);
		d->iters = get_u32(&r);
		get_bytes(&r, d->salt, KEYS_SALT_LEN);
		get_bytes(&r, d->wrapped, KEYS_WRAPPED_LEN);
		/* iterations above the bound would hold load-key for hours: no key of
		 * ours has them, so the file is damaged */
		if (d->keyformat > STOR_KEY_PASSPHRASE || !d->enc_root_id ||
		    d->iters > KEYS_PBKDF2_MAX)
			goto bad;
		if (version != KEYFILE_V1) {
			loclen = get_u16(&r);
			if (loclen > LOC_MAX || end - r < loclen)
				goto bad;
			get_bytes(&r, loc, loclen);
			loc[loclen] = '\0';
			if (loclen && prop_validate(PROP_KEYLOCATION, loc, canon, sizeof(canon)) < 0)
				goto bad;
			ret = set_local(d, PROP_KEYLOCATION, loclen ? loc : NULL);
			if (ret < 0)
				goto out;
			ret = STOR_ECORRUPT;
		}
		nfound++;
	}
	if (r != end)
		goto bad;
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *d = p->ds[i], *root;

		if (!d->suite)
			continue;
		root = ds_find_id_locked(p, d->enc_root_id);
		if (!root || !root->suite || root->enc_root_id != root->id ||
		    root->keyformat == STOR_KEY_NONE)
			goto bad;
	}
	if (nfound != nenc) {
		pool_set_error("pool %s: key file %s lacks the keys of %zu encrypted datasets",
			       p->name, path, nenc - nfound);
		goto out;
	}
	for (size_t i = 0; i < p->nds; i++) {
		ret = p->ds[i]->suite ? entry_props(p->ds[i]) : 0;
		if (ret < 0)
			goto out;
	}
	ret = 0;
	goto out;
bad:
	pool_set_error("pool %s: key file %s is damaged", p->name, path);
out:
	if (buf)
		keys_secure_free(buf, len);
	close(fd);
	return ret;
}
