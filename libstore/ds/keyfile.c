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
 * Two copies, <pool>.keys and <pool>.keys.1, each with a generation that
 * every save increments: one damaged byte must not lock every dataset of
 * the pool out. A save writes the first copy (the commit point), then the
 * second; an import takes the valid copy of the newest generation and
 * rewrites the other from it when it is missing, damaged or older, and
 * says so in pool status. Both copies bad refuse the import, naming both.
 *
 * The LUNs hold the key file too (metalog.c): each save hands its bytes to
 * the next txg's log record, and an import whose copies here are missing,
 * damaged or older than the LUNs' writes both from the LUNs' bytes
 * (keyfile_restore) before it loads them.
 *
 * Layout, big-endian: u64 magic "COFFKEYS" | u32 version | u64 generation |
 * u32 count | count x (u64 dataset guid | u64 root dataset id |
 * u8 keyformat | u32 iterations | salt | wrapped key | u8 key flags |
 * u8 suite | [u8 previous suite | wrapped previous key] | u16 length |
 * keylocation, empty but on a root) | u64 xxh64 of everything before it.
 * The suites (version 5; before, the dataset's) are those of the two
 * master keys, which differ during a change of suite (rekey.c); each is
 * in its key's wrapping AAD, so a changed one unwraps nothing. Key flags
 * (version 4; version 3 has none and reads as 0): KF_GEN1, the wrapped
 * key is of generation 1;
 * KF_OLD, a rekey's previous master key follows (rekey.c), which goes when
 * the rekey completes, with this file's whole replacement; KF_PENDING, the
 * key of a clear dataset being encrypted in place, saved before the commit
 * that makes its record encrypted: an import that finds its record still
 * clear (a crash between the two) leaves it clear and drops the entry.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/pool_error.h"
#include "crypt/crypt.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/keyfile.h"
#include "ds/props.h"
#include "kv/format.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "pool_impl.h"
#include "txg/metalog.h"

#define KEYFILE_MAGIC 0x434f46464b455953ull /* "COFFKEYS" */
#define KEYFILE_VERSION 5u /* its own number */
#define KEYFILE_VERSION_NOSUITE 4u /* before a change of suite: the dataset's */
#define KEYFILE_VERSION_NOGEN 3u /* before key generations: read as generation 0 */
#define KF_GEN1 0x1u
#define KF_OLD 0x2u
#define KF_PENDING 0x4u
#define KEYFILE_COPIES 2
#define HEAD_LEN (8 + 4 + 8 + 4)
#define ENTRY_LEN (8 + 8 + 1 + 4 + KEYS_SALT_LEN + KEYS_WRAPPED_LEN) /* fixed part */
#define LOC_MAX 255 /* prop_validate's bound of a value */

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

/* The keylocation an entry carries: a root's own, nothing for the others. */
static const char *entry_loc(const struct stor_ds *d)
{
	const char *loc = d->enc_root_id == d->id ? d->local[PROP_KEYLOCATION] : NULL;

	return loc && strlen(loc) <= LOC_MAX ? loc : "";
}

/* Replace @path with @buf: write a new file, fsync, rename, then wipe the old one's bytes. */
static int write_file(const char *path, const uint8_t *buf, size_t len)
{
	char tmp[4300];
	int fd, old = -1, ret;
	struct stat st;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
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
	ret = statedir_sync(path);
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
	close(fd);
	return ret;
}

int keyfile_save(struct stor_pool *p, struct stor_ds *extra)
{
	return keyfile_save_with(p, &extra, extra != NULL);
}

int keyfile_save_with(struct stor_pool *p, struct stor_ds *const *extra, size_t nextra)
{
	char path[4200];
	size_t n = 0, len = HEAD_LEN + 8;
	uint8_t *buf, *w;
	int ret;

	for (size_t i = 0; i < p->nds + nextra; i++) {
		struct stor_ds *d = i < p->nds ? p->ds[i] : extra[i - p->nds];

		if (d && d->suite) {
			n++;
			len += ENTRY_LEN + 2 + (d->has_old ? 1 + KEYS_WRAPPED_LEN : 0) + 2 +
			       strlen(entry_loc(d));
		}
	}
	/* the LUNs log it as one op, in a part of its own at most */
	if (len > (size_t)MLOG_PART_MAX_SECT * STOR_SECTOR - MLOG_HEAD_LEN - META_OP_HEAD - 4) {
		pool_set_error("pool %s: a key file of %zu encrypted datasets would outgrow the "
			       "%u KiB a metadata log record holds", p->name, n,
			       MLOG_PART_MAX_SECT * STOR_SECTOR / 1024);
		return -EFBIG;
	}
	buf = keys_secure_alloc(len);
	if (!buf)
		return -ENOMEM;
	w = buf;
	put_u64(&w, KEYFILE_MAGIC);
	put_u32(&w, KEYFILE_VERSION);
	put_u64(&w, p->keyfile_gen + 1);
	put_u32(&w, (uint32_t)n);
	for (size_t i = 0; i < p->nds + nextra; i++) {
		struct stor_ds *d = i < p->nds ? p->ds[i] : extra[i - p->nds];
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
		put_u8(&w, (uint8_t)((d->keygen ? KF_GEN1 : 0) | (d->has_old ? KF_OLD : 0) |
				     (d->key_pending ? KF_PENDING : 0)));
		put_u8(&w, (uint8_t)dskeys_suite_of(d, d->keygen));
		if (d->has_old) {
			put_u8(&w, (uint8_t)dskeys_suite_of(d, d->keygen ^ 1u));
			put_bytes(&w, d->wrapped_old, KEYS_WRAPPED_LEN);
		}
		put_u16(&w, (uint16_t)strlen(loc));
		put_bytes(&w, loc, strlen(loc));
	}
	put_u64(&w, XXH64(buf, len - 8, 0));

	/* the first copy is the commit point; the second follows it */
	statedir_keyfile_path(p->path, 0, path, sizeof(path));
	ret = write_file(path, buf, len);
	if (ret == 0) {
		/* the LUNs get it with the next txg; failing that, the next
		 * save or import offers it again */
		metalog_keys(p, buf, len);
		p->keyfile_gen++;
		statedir_keyfile_path(p->path, 1, path, sizeof(path));
		if (write_file(path, buf, len) < 0)
			snprintf(p->keyfile_note, sizeof(p->keyfile_note),
				 "copy %.400s could not be written: the next change rewrites it", path);
		else
			p->keyfile_note[0] = '\0';
	}
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

/* Read one copy and check its frame. @return 0, -ENOENT, STOR_ECORRUPT, STOR_EFORMAT */
static int read_file(const char *path, uint8_t **out, size_t *outlen, uint64_t *gen)
{
	uint8_t *buf = NULL;
	const uint8_t *r;
	struct stat st;
	size_t len;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = STOR_ECORRUPT;

	*out = NULL;
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if (fstat(fd, &st) < 0 || st.st_size < HEAD_LEN + 8 || st.st_size > (1 << 26))
		goto out;
	len = (size_t)st.st_size;
	buf = keys_secure_alloc(len);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (pread(fd, buf, len, 0) != (ssize_t)len)
		goto out;
	r = buf + len - 8;
	if (get_u64(&r) != XXH64(buf, len - 8, 0))
		goto out;
	r = buf;
	if (get_u64(&r) != KEYFILE_MAGIC)
		goto out;
	ret = (int)get_u32(&r);
	if (ret != KEYFILE_VERSION && ret != KEYFILE_VERSION_NOSUITE &&
	    ret != KEYFILE_VERSION_NOGEN) {
		ret = STOR_EFORMAT;
		goto out;
	}
	*gen = get_u64(&r);
	*out = buf;
	*outlen = len;
	buf = NULL;
	ret = 0;
out:
	if (buf)
		keys_secure_free(buf, (size_t)st.st_size);
	close(fd);
	return ret;
}

/* Fill the key fields of the pool's datasets from a checked copy. */
static int parse_entries(struct stor_pool *p, const uint8_t *buf, size_t len, const char *path)
{
	const uint8_t *r = buf + 8, *end = buf + len - 8;
	size_t nenc = 0, nfound = 0;
	uint32_t n, version = get_u32(&r);
	int ret = STOR_ECORRUPT;

	for (size_t i = 0; i < p->nds; i++)
		nenc += p->ds[i]->suite != 0;
	r = buf + HEAD_LEN - 4;
	n = get_u32(&r);
	for (uint32_t i = 0; i < n; i++) {
		struct stor_ds *d;
		char loc[LOC_MAX + 1], canon[LOC_MAX + 1];
		uint8_t kf = 0, suite = 0, old_suite = 0, old[KEYS_WRAPPED_LEN];
		uint16_t loclen = 0;
		const uint8_t *fixed, *ext;
		size_t extlen;

		if (end - r < ENTRY_LEN + 2)
			goto bad;
		fixed = r;
		r += ENTRY_LEN;
		ext = r;
		if (version != KEYFILE_VERSION_NOGEN) {
			if (end - r < 1 + 2)
				goto bad;
			kf = get_u8(&r);
			if (kf & ~(KF_GEN1 | KF_OLD | KF_PENDING))
				goto bad;
		}
		if (version >= 5) {
			if (end - r < 1 + ((kf & KF_OLD) ? 1 : 0) + 2)
				goto bad;
			suite = get_u8(&r);
			if (kf & KF_OLD)
				old_suite = get_u8(&r);
		}
		if (kf & KF_OLD) {
			if (end - r < KEYS_WRAPPED_LEN + 2)
				goto bad;
			get_bytes(&r, old, KEYS_WRAPPED_LEN);
		}
		extlen = (size_t)(r - ext);
		loclen = get_u16(&r);
		if (loclen > LOC_MAX || end - r < loclen)
			goto bad;
		r += loclen;
		d = by_guid(p, get_u64(&fixed));
		/* destroyed since, or an encryption in place cut before its commit */
		if (!d || (!d->suite && (kf & KF_PENDING)))
			continue;
		r = fixed;
		if (!d->suite) {
			/* its record lost its suite: someone turned it clear */
			pool_set_error("pool %s: dataset %s: the key file holds its key but its "
				       "record says unencrypted; the metadata was changed",
				       p->name, d->name);
			return STOR_ECORRUPT;
		}
		d->enc_root_id = get_u64(&r);
		d->keyformat = get_u8(&r);
		d->iters = get_u32(&r);
		get_bytes(&r, d->salt, KEYS_SALT_LEN);
		get_bytes(&r, d->wrapped, KEYS_WRAPPED_LEN);
		d->keygen = (kf & KF_GEN1) ? 1 : 0;
		d->has_old = (kf & KF_OLD) != 0;
		if (d->has_old)
			memcpy(d->wrapped_old, old, KEYS_WRAPPED_LEN);
		else
			memset(d->wrapped_old, 0, KEYS_WRAPPED_LEN);
		r += extlen;
		/* the suites of the keys: the record's, but where a change of
		 * suite's start was cut before its switch (the new key's is not the
		 * record's yet, the old one's is); the unwrap checks them */
		d->key_suite = suite && suite != d->suite ? suite : 0;
		d->old_suite = old_suite;
		if (suite >= CRYPT_NSUITES || old_suite >= CRYPT_NSUITES ||
		    (version >= 5 && !suite) || (d->has_old && version >= 5 && !old_suite) ||
		    (d->key_suite && (!d->has_old || old_suite != d->suite)))
			goto bad;
		/* iterations above the bound would hold load-key for hours: no key of
		 * ours has them, so the file is damaged */
		if (d->keyformat > STOR_KEY_PASSPHRASE || !d->enc_root_id ||
		    d->iters > KEYS_PBKDF2_MAX)
			goto bad;
		loclen = get_u16(&r);
		if (loclen > LOC_MAX || end - r < loclen)
			goto bad;
		get_bytes(&r, loc, loclen);
		loc[loclen] = '\0';
		if (loclen && prop_validate(PROP_KEYLOCATION, loc, canon, sizeof(canon)) < 0)
			goto bad;
		ret = set_local(d, PROP_KEYLOCATION, loclen ? loc : NULL);
		if (ret < 0)
			return ret;
		ret = STOR_ECORRUPT;
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
		return STOR_ECORRUPT;
	}
	for (size_t i = 0; i < p->nds; i++) {
		ret = p->ds[i]->suite ? entry_props(p->ds[i]) : 0;
		if (ret < 0)
			return ret;
	}
	return 0;
bad:
	pool_set_error("pool %s: key file %s is damaged", p->name, path);
	return ret;
}

static const char *copy_state(int rc)
{
	return rc == -ENOENT ? "missing" : rc == STOR_EFORMAT ? "of another format" : "damaged";
}

/* The generation of the key file bytes @buf, if their frame is sound. */
static int frame_gen(const uint8_t *buf, size_t len, uint64_t *gen)
{
	const uint8_t *r = buf + len - 8;
	uint32_t v;

	if (len < HEAD_LEN + 8 || get_u64(&r) != XXH64(buf, len - 8, 0))
		return STOR_ECORRUPT;
	r = buf;
	if (get_u64(&r) != KEYFILE_MAGIC)
		return STOR_ECORRUPT;
	v = get_u32(&r);
	if (v != KEYFILE_VERSION && v != KEYFILE_VERSION_NOGEN)
		return STOR_ECORRUPT;
	*gen = get_u64(&r);
	return 0;
}

int keyfile_restore(struct stor_pool *p, const uint8_t *buf, size_t len)
{
	char path[KEYFILE_COPIES][4200];
	uint64_t lgen = 0, gen, best_gen = 0;
	uint8_t *best = NULL;
	size_t best_len = 0;
	int newer, ret = 0;

	newer = buf && frame_gen(buf, len, &lgen) == 0;
	for (int i = 0; i < KEYFILE_COPIES; i++) {
		uint8_t *have = NULL;
		size_t hlen = 0;

		statedir_keyfile_path(p->path, i, path[i], sizeof(path[i]));
		if (read_file(path[i], &have, &hlen, &gen) == 0) {
			if (!best || gen > best_gen) {
				if (best)
					keys_secure_free(best, best_len);
				best = have;
				best_len = hlen;
				best_gen = gen;
			} else {
				keys_secure_free(have, hlen);
			}
		}
	}
	if (best && (!newer || best_gen > lgen)) {
		/* the copy here is newer than the LUNs' (they lagged, or hold
		 * none): the next commit logs it, not the older one */
		ret = metalog_keys(p, best, best_len);
		keys_secure_free(best, best_len);
		return ret;
	}
	if (best)
		keys_secure_free(best, best_len);
	if (!newer || best_gen == lgen)
		return 0; /* nothing sound on the LUNs, or the same here */
	for (int i = 0; i < KEYFILE_COPIES && ret == 0; i++)
		ret = write_file(path[i], buf, len);
	if (ret < 0)
		pool_set_error("pool %s: key file %s: rebuilding it from the LUNs: %s", p->name,
			       path[0], stor_strerror(ret));
	return ret < 0 ? ret : 1;
}

int keyfile_load(struct stor_pool *p)
{
	char path[KEYFILE_COPIES][4200];
	uint8_t *buf[KEYFILE_COPIES] = { NULL };
	size_t len[KEYFILE_COPIES] = { 0 }, nenc = 0;
	uint64_t gen[KEYFILE_COPIES] = { 0 };
	int rc[KEYFILE_COPIES], best = -1, other, ret;

	p->keyfile_note[0] = '\0';
	for (size_t i = 0; i < p->nds; i++)
		nenc += p->ds[i]->suite != 0;
	for (int i = 0; i < KEYFILE_COPIES; i++) {
		statedir_keyfile_path(p->path, i, path[i], sizeof(path[i]));
		rc[i] = read_file(path[i], &buf[i], &len[i], &gen[i]);
		if (rc[i] == 0 && (best < 0 || gen[i] > gen[best]))
			best = i;
	}
	if (best < 0) {
		if (rc[0] == -ENOENT && rc[1] == -ENOENT && nenc == 0)
			return 0; /* no encrypted dataset ever */
		pool_set_error("pool %s: key file %s is %s and its copy %s is %s: restore one of "
			       "them from a backup of the state directory",
			       p->name, path[0], copy_state(rc[0]), path[1], copy_state(rc[1]));
		return rc[0] == STOR_EFORMAT || rc[1] == STOR_EFORMAT ? STOR_EFORMAT
								     : STOR_ECORRUPT;
	}
	ret = parse_entries(p, buf[best], len[best], path[best]);
	other = 1 - best;
	if (ret == 0 && (rc[other] < 0 || gen[other] < gen[best])) {
		/* the other copy is missing, damaged or older: rewrite it from this one */
		const char *was = rc[other] < 0 ? copy_state(rc[other]) : "older";

		if (write_file(path[other], buf[best], len[best]) == 0)
			snprintf(p->keyfile_note, sizeof(p->keyfile_note),
				 "key file %.200s was %s; rewritten from %.200s", path[other], was,
				 path[best]);
		else
			snprintf(p->keyfile_note, sizeof(p->keyfile_note),
				 "key file %.400s is %s and could not be rewritten", path[other], was);
	}
	if (ret == 0)
		p->keyfile_gen = gen[best];
	for (int i = 0; i < KEYFILE_COPIES; i++)
		if (buf[i])
			keys_secure_free(buf[i], len[i]);
	return ret;
}
