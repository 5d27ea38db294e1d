/* SPDX-License-Identifier: MIT */
/*
 * Pools: create, open (import), close (export), destroy, add a LUN, status.
 * A pool owns its LUN set, its LMDB environment and the allocator; it checks
 * every LUN label on open and refuses damaged, missing or foreign LUNs. The
 * free map is rebuilt here from the block pointers (see alloc.h). Freeing a
 * pool (close, destroy, a failed open) drops its datasets from the data
 * cache: nothing read before an export is served after the next import.
 *
 * A LUN of an open pool is claimed (lun.c) until the pool is freed. A path
 * becomes a LUN (lun_take) only if it is not a symbolic link, not inside
 * the state directory, and blank or a LUN of a pool with no metadata here;
 * STOR_FORCE lifts all but the state directory and a pool that has
 * metadata. At import one damaged label copy is rewritten from the other.
 *
 * Pool record ("pool"/"config"): u32 version | u64 guid | u64 next dataset id |
 * u32 nluns | nluns x (u64 lun guid | u64 size | u16 path length | path).
 * "pool"/"txg": u64 last committed txg.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "cache.h"
#include "lun.h"
#include "meta.h"
#include "store_impl.h"

static _Thread_local char last_error[512];

void pool_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

const char *stor_pool_last_error(void)
{
	return last_error;
}

/* stor_name_check's limit for a pool is what a LUN label can hold */
static_assert(STOR_POOL_NAME_MAX < LABEL_NAME_LEN, "a pool name fits the LUN label");

static int mkdirs(const char *dir)
{
	char buf[4096];
	size_t n = strlen(dir);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, n + 1);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static char *meta_path(const char *state_dir, const char *name)
{
	char *p = NULL;

	if (asprintf(&p, "%s/pools/%s.mdb", state_dir, name) < 0)
		return NULL;
	return p;
}

static struct stor_pool *pool_alloc(const char *name, const struct stor_pool_opts *opts)
{
	struct stor_pool *p = calloc(1, sizeof(*p));


	if (!p)
		return NULL;
	p->opts = *opts;
	p->opts.state_dir = NULL;
	p->lock_fd = -1;
	p->name = strdup(name);
	p->path = meta_path(opts->state_dir, name);
	pthread_mutex_init(&p->admin, NULL);
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_init(&p->stripes[i], NULL);
	if (!p->name || !p->path || alloc_create(&p->alloc) < 0) {
		free(p->name);
		free(p->path);
		free(p);
		return NULL;
	}
	return p;
}

static void pool_free(struct stor_pool *p)
{
	if (!p)
		return;
	/*
	 * The data cache is process-wide and keyed by dataset GUID: entries
	 * left behind would be served after the next import, though the LUNs
	 * may have been rewritten meanwhile (another host, a restored copy).
	 * Export and destroy both end here; dropping wipes the plaintext.
	 */
	for (size_t i = 0; i < p->nds; i++) {
		cache_drop_ds(record_cache(), p->ds[i]->guid);
		ds_free(p->ds[i]);
	}
	free(p->ds);
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		lun_close(p->luns[i].lun);
	meta_close(p->meta);
	alloc_destroy(p->alloc);
	if (p->lock_fd >= 0)
		close(p->lock_fd); /* releases the flock */
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_destroy(&p->stripes[i]);
	pthread_mutex_destroy(&p->admin);
	free(p->name);
	free(p->path);
	free(p);
}

/*
 * Two openers of one pool would allocate the same sectors. LMDB's own lock
 * file does not stop that, and a lock on the .mdb file itself would be lost
 * whenever LMDB closes a descriptor of it, so the pool has a lock file.
 */
static int pool_lock(struct stor_pool *p)
{
	char path[4200];

	snprintf(path, sizeof(path), "%.4090s.lock", p->path);
	p->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (p->lock_fd < 0)
		return -errno;
	if (flock(p->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		int err = errno == EWOULDBLOCK ? -EBUSY : -errno;

		pool_set_error("pool %s: open elsewhere (%s is locked)", p->name, path);
		return err;
	}
	return 0;
}

/* The pool record naming the first @n LUNs of p->luns. */
static int save_config(struct stor_pool *p, unsigned n)
{
	struct meta_txn *t = NULL;
	size_t len = 4 + 8 + 8 + 4;
	uint8_t *buf, *w;
	int ret;

	for (unsigned i = 0; i < n; i++)
		len += 8 + 8 + 2 + strlen(lun_path(p->luns[i].lun));
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	w = buf;
	put_u32(&w, FORMAT_VERSION);
	put_u64(&w, p->guid);
	put_u64(&w, p->next_ds_id);
	put_u32(&w, n);
	for (unsigned i = 0; i < n; i++) {
		const char *path = lun_path(p->luns[i].lun);
		put_u64(&w, p->luns[i].guid);
		put_u64(&w, lun_data_size(p->luns[i].lun) + LUN_DATA_OFF);
		put_u16(&w, (uint16_t)strlen(path));
		put_bytes(&w, path, strlen(path));
	}
	ret = meta_txn_begin(p->meta, &t);
	if (ret == 0)
		ret = meta_put(t, META_POOL, "config", 6, buf, len);
	if (ret == 0) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	meta_txn_abort(t);
	free(buf);
	return ret;
}

int pool_save_config(struct stor_pool *p)
{
	return save_config(p, atomic_load(&p->nluns));
}

static unsigned lun_flags(const struct stor_pool *p)
{
	return (p->opts.direct_io ? LUN_DIRECT : 0) | (p->opts.pread_only ? 0 : LUN_MAP);
}

/* The pool a claimed LUN's label names, for "in use" messages. */
static void in_use_error(unsigned idx, const char *path)
{
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad;

	if (lun_open(path, LUN_PEEK, 0, &l) == 0 && lun_label_read(l, &lab, &bad) == 0)
		pool_set_error("lun %u (%s): in use by pool '%s'", idx, path, lab.pool_name);
	else
		pool_set_error("lun %u (%s): in use (claimed by another pool or program, or a "
			       "mounted device)",
			       idx, path);
	lun_close(l);
}

/* Open one LUN of the pool and check its label against what the pool expects. */
static int lun_attach(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid)
{
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad = 0;
	int ret;

	ret = lun_open(path, lun_flags(p), 0, &l);
	if (ret < 0) {
		if (ret == -EBUSY)
			in_use_error(idx, path);
		else
			pool_set_error("lun %u (%s): %s", idx, path, stor_strerror(ret));
		return ret;
	}
	ret = lun_label_read(l, &lab, &bad);
	if (ret < 0) {
		if (ret == STOR_ELABEL)
			pool_set_error("lun %u (%s): label damaged in both copies (front and end)",
				       idx, path);
		else
			pool_set_error("lun %u (%s): %s", idx, path, stor_strerror(ret));
		goto fail;
	}
	if (lab.pool_guid != p->guid || lab.lun_guid != guid || lab.index != idx) {
		pool_set_error("lun %u (%s): label names pool '%s' (guid %016llx) lun %u, not this pool",
			       idx, path, lab.pool_name, (unsigned long long)lab.pool_guid,
			       lab.index);
		ret = STOR_EFOREIGN;
		goto fail;
	}
	ret = alloc_add_lun(p->alloc, lun_data_size(l) / STOR_SECTOR);
	if (ret < 0)
		goto fail;
	/* the sound copy is this pool's: rewrite the other as it is, so both
	 * read the same (a file grown since labelling gets its end copy at the
	 * new end; the old one is free space now) */
	p->luns[idx].label_damaged = bad;
	if (bad && lun_label_repair(l, &lab, bad) == 0)
		p->luns[idx].label_repaired = bad;
	p->luns[idx].lun = l;
	p->luns[idx].guid = guid;
	atomic_store(&p->nluns, idx + 1);
	return 0;
fail:
	lun_close(l);
	return ret;
}

/* The state directory of @p, from its metadata path <state>/pools/<name>.mdb. */
static char *state_dir_of(const struct stor_pool *p)
{
	size_t n = strlen(p->path), tail = strlen("/pools/") + strlen(p->name) + strlen(".mdb");

	return n > tail ? strndup(p->path, n - tail) : NULL;
}

/* Is the file @l has open inside directory @dir? 1, 0 or -errno */
static int lun_inside(const struct lun *l, const char *dir)
{
	char real[PATH_MAX], *rdir = realpath(dir, NULL);
	size_t n;
	int ret;

	if (!rdir)
		return -errno;
	n = strlen(rdir);
	ret = lun_real_path(l, real, sizeof(real));
	if (ret == 0)
		ret = n == 1 || (!strncmp(real, rdir, n) && (real[n] == '/' || real[n] == '\0'));
	free(rdir);
	return ret;
}

/* Does pool @name have metadata in @state_dir? 1, 0 or -ENOMEM */
static int pool_has_metadata(const char *state_dir, const char *name)
{
	char *path = meta_path(state_dir, name);
	int ret;

	if (!path)
		return -ENOMEM;
	ret = access(path, F_OK) == 0;
	free(path);
	return ret;
}

/*
 * Open @path to become LUN @idx of @p, and refuse what must not be taken
 * over: a symbolic link (but a link to a block device), a file inside the
 * state directory (our own metadata), one another opener claims, one with
 * a label of a pool that has metadata here, and - unless STOR_FORCE - a
 * label of a pool without metadata (a create that did not finish, a LUN of
 * another host) or an existing file or device that is not blank where the
 * labels go. A file lun_open creates is blank.
 */
static int lun_take(struct stor_pool *p, unsigned idx, const char *path, uint64_t size,
		    unsigned flags, struct lun **out)
{
	int force = (flags & STOR_FORCE) != 0;
	struct lun *l = NULL;
	struct lun_label lab;
	char *state = NULL;
	unsigned bad;
	int ret;

	*out = NULL;
	ret = lun_open(path, LUN_CREATE | LUN_NEW | (force ? LUN_FORCE : 0) | lun_flags(p), size,
		       &l);
	if (ret == -EBUSY) {
		in_use_error(idx, path);
		return ret;
	}
	if (ret == -ELOOP) {
		pool_set_error("lun %u (%s): a symbolic link, and not to a block device; give the "
			       "file it names, or force",
			       idx, path);
		return ret;
	}
	if (ret < 0) {
		pool_set_error("lun %u (%s): %s", idx, path, stor_strerror(ret));
		return ret;
	}
	state = state_dir_of(p);
	ret = state ? lun_inside(l, state) : -ENOMEM;
	if (ret != 0) {
		if (ret > 0)
			pool_set_error("lun %u (%s): inside the state directory %s", idx, path,
				       state);
		else
			pool_set_error("lun %u (%s): state directory: %s", idx, path,
				       stor_strerror(ret));
		ret = ret > 0 ? -EINVAL : ret;
		goto out;
	}
	ret = lun_label_read(l, &lab, &bad);
	if (ret == 0) {
		ret = pool_has_metadata(state, lab.pool_name);
		if (ret < 0)
			goto out;
		if (ret || lab.pool_guid == p->guid) {
			pool_set_error("lun %u (%s): already a LUN of pool '%s'", idx, path,
				       lab.pool_name);
			ret = STOR_EFOREIGN;
			goto out;
		}
		if (!force) {
			pool_set_error("lun %u (%s): labelled for pool '%s', which has no metadata "
				       "here (a create that did not finish, or another host's); "
				       "force to reuse it, or clear the label",
				       idx, path, lab.pool_name);
			ret = STOR_EFOREIGN;
			goto out;
		}
		ret = 0;
	} else if (ret == STOR_EFORMAT) {
		if (!force) {
			pool_set_error("lun %u (%s): labelled in another format version; force to "
				       "reuse it",
				       idx, path);
			ret = STOR_EFOREIGN;
			goto out;
		}
		ret = 0;
	} else if (ret == STOR_ELABEL) {
		ret = lun_created(l) || force ? 1 : lun_is_blank(l);
		if (ret == 0) {
			pool_set_error("lun %u (%s): not blank (it may hold a file system, a "
				       "partition table or other data); force to overwrite it",
				       idx, path);
			ret = STOR_ENOTBLANK;
			goto out;
		}
		ret = ret < 0 ? ret : 0;
	}
	if (ret < 0)
		pool_set_error("lun %u (%s): %s", idx, path, stor_strerror(ret));
out:
	free(state);
	if (ret < 0) {
		/* a file made for nothing goes again */
		if (lun_created(l) == LUN_MADE)
			unlink(path);
		lun_close(l);
	} else {
		*out = l;
	}
	return ret;
}

static int load_config(struct stor_pool *p, uint64_t *txg)
{
	struct meta_txn *t = NULL;
	const uint8_t *r, *end;
	const void *v;
	size_t vlen;
	uint32_t n;
	int ret;

	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	ret = meta_get(t, META_POOL, "txg", 3, &v, &vlen);
	*txg = 0;
	if (ret == 0 && vlen == 8) {
		r = v;
		*txg = get_u64(&r);
	}
	ret = meta_get(t, META_POOL, "config", 6, &v, &vlen);
	if (ret < 0) {
		pool_set_error("pool %s: no pool record in %s", p->name, p->path);
		ret = ret == -ENOENT ? STOR_ECORRUPT : ret;
		goto out;
	}
	r = v;
	end = r + vlen;
	ret = STOR_ECORRUPT;
	if (vlen < 24)
		goto out;
	if (get_u32(&r) != FORMAT_VERSION) {
		ret = STOR_EFORMAT;
		goto out;
	}
	p->guid = get_u64(&r);
	p->next_ds_id = get_u64(&r);
	n = get_u32(&r);
	if (n > STOR_LUNS_MAX)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		char path[4096];
		uint64_t guid;
		uint16_t plen;

		if (end - r < 18)
			goto out;
		guid = get_u64(&r);
		get_u64(&r);
		plen = get_u16(&r);
		if (end - r < plen || plen >= sizeof(path))
			goto out;
		get_bytes(&r, path, plen);
		path[plen] = '\0';
		ret = lun_attach(p, i, path, guid);
		if (ret < 0)
			goto out;
		ret = STOR_ECORRUPT;
	}
	ret = 0;
out:
	meta_rtxn_put(t);
	return ret;
}

struct rebuild {
	struct stor_pool *p;
	int err;
};

static int rebuild_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct rebuild *rb = ctx;
	struct stor_ds *ds;
	struct bp bp;
	const uint8_t *k = key;
	uint64_t id;
	int ret;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	id = get_u64(&k);
	ds = ds_find_id_locked(rb->p, id);
	if (!ds) {
		pool_set_error("pool %s: block pointer of unknown dataset %llu", rb->p->name,
			       (unsigned long long)id);
		return STOR_ECORRUPT;
	}
	ret = alloc_mark(rb->p->alloc, bp.lun, bp.sector, bp.psize / STOR_SECTOR);
	if (ret < 0) {
		pool_set_error("pool %s: dataset %s: block pointer to lun %u sector %llu overlaps or is out of range",
			       rb->p->name, ds->name, bp.lun, (unsigned long long)bp.sector);
		return ret;
	}
	atomic_fetch_add(&ds->used, bp.psize);
	atomic_fetch_add(&ds->logical_used, bp.lsize);
	return 0;
}

static int rebuild_space(struct stor_pool *p)
{
	struct meta_txn *t = NULL;
	struct rebuild rb = { p, 0 };
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	ret = meta_iter(t, META_BP, NULL, 0, 0, rebuild_one, &rb);
	meta_rtxn_put(t);
	return ret;
}

int stor_pool_open(const char *name, const struct stor_pool_opts *opts, struct stor_pool **out)
{
	struct stor_pool *p = NULL;
	uint64_t txg;
	int ret;

	*out = NULL;
	last_error[0] = '\0';
	if (!opts || !opts->state_dir)
		return -EINVAL;
	if (stor_name_check(name, STOR_NAME_POOL) < 0)
		return STOR_EBADNAME;
	p = pool_alloc(name, opts);
	if (!p)
		return -ENOMEM;
	if (access(p->path, F_OK) < 0) {
		ret = -errno;
		goto fail;
	}
	ret = pool_lock(p);
	if (ret < 0)
		goto fail;
	ret = meta_open(p->path, opts->map_size, 0, &p->meta);
	if (ret < 0) {
		if (ret != -ENOENT)
			pool_set_error("pool %s: metadata %s: %s", name, p->path, stor_strerror(ret));
		goto fail;
	}
	ret = load_config(p, &txg);
	if (ret < 0)
		goto fail;
	ret = ds_load_all(p);
	if (ret == 0)
		ret = keyfile_load(p);
	if (ret < 0) {
		if (!last_error[0])
			pool_set_error("pool %s: dataset records: %s", name, stor_strerror(ret));
		goto fail;
	}
	ret = rebuild_space(p);
	if (ret < 0)
		goto fail;
	ret = txg_init(p, txg);
	if (ret < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	pool_free(p);
	return ret;
}

int stor_pool_create(const char *name, const char *const *luns, unsigned nluns,
		     const struct stor_pool_opts *opts, struct stor_pool **out)
{
	struct stor_pool *p = NULL;
	char *dir = NULL;
	struct stat st;
	int ret;

	*out = NULL;
	last_error[0] = '\0';
	if (!opts || !opts->state_dir || nluns == 0 || nluns > STOR_LUNS_MAX)
		return -EINVAL;
	if (stor_name_check(name, STOR_NAME_POOL) < 0)
		return STOR_EBADNAME;
	if (asprintf(&dir, "%s/pools", opts->state_dir) < 0)
		return -ENOMEM;
	ret = mkdirs(dir);
	free(dir);
	if (ret < 0)
		return ret;
	p = pool_alloc(name, opts);
	if (!p)
		return -ENOMEM;
	/* exists before busy: the likelier mistake gets the clearer answer */
	if (stat(p->path, &st) == 0 || (ret = pool_lock(p)) < 0 || stat(p->path, &st) == 0) {
		if (ret == 0) {
			pool_set_error("pool %s: %s exists", name, p->path);
			ret = -EEXIST;
		}
		goto fail;
	}
	ret = keys_random(&p->guid, sizeof(p->guid));
	if (ret < 0)
		goto fail;
	p->next_ds_id = 1;
	for (unsigned i = 0; i < nluns; i++) {
		ret = stor_pool_add_lun(p, luns[i], opts->lun_size, opts->force ? STOR_FORCE : 0);
		if (ret < 0)
			goto fail;
	}
	ret = meta_open(p->path, opts->map_size, META_CREATE, &p->meta);
	if (ret < 0)
		goto fail;
	ret = pool_save_config(p);
	if (ret < 0)
		goto fail;
	ret = txg_init(p, 0);
	if (ret < 0)
		goto fail;
	ret = pool_create_root(p);
	if (ret < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	txg_fini(p);
	if (p->meta) {
		unlink(p->path);
		char lock[4200];
		snprintf(lock, sizeof(lock), "%s-lock", p->path);
		unlink(lock);
	}
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		lun_label_wipe(p->luns[i].lun);
	pool_free(p);
	return ret;
}

/*
 * A LUN joins in this order, under the admin lock (one add at a time): its
 * label, then the pool record naming it (durable), then the pool's table,
 * and last the allocator. No write can land on a LUN before the pool has
 * it, and no txg can commit a pointer to a LUN the durable record lacks;
 * on failure the label is wiped and nothing was published.
 */
int stor_pool_add_lun(struct stor_pool *p, const char *path, uint64_t size, unsigned flags)
{
	unsigned idx;
	struct lun *l = NULL;
	struct alloc_map *map = NULL;
	struct lun_label lab = { 0 };
	int ret, labelled = 0;

	pthread_mutex_lock(&p->admin);
	idx = atomic_load(&p->nluns);
	ret = idx >= STOR_LUNS_MAX ? -E2BIG : lun_take(p, idx, path, size, flags, &l);
	if (ret < 0)
		goto out;
	lab.index = idx;
	lab.pool_guid = p->guid;
	ret = keys_random(&lab.lun_guid, sizeof(lab.lun_guid));
	if (ret < 0)
		goto out;
	lab.size = lun_size(l);
	lab.nluns = idx + 1;
	snprintf(lab.pool_name, sizeof(lab.pool_name), "%s", p->name);
	ret = alloc_map_new(lun_data_size(l) / STOR_SECTOR, &map);
	if (ret == 0)
		ret = lun_label_write(l, &lab);
	if (ret < 0)
		goto out;
	labelled = 1;
	p->luns[idx].lun = l; /* not visible before nluns says so */
	p->luns[idx].guid = lab.lun_guid;
	ret = p->meta ? save_config(p, idx + 1) : 0;
	if (ret < 0) {
		p->luns[idx].lun = NULL;
		goto out;
	}
	atomic_store(&p->nluns, idx + 1);
	alloc_add_map(p->alloc, map);
	map = NULL;
	l = NULL;
out:
	pthread_mutex_unlock(&p->admin);
	alloc_map_free(map);
	if (l && labelled)
		lun_label_wipe(l);
	lun_close(l);
	return ret;
}

void pool_lun_failed(struct stor_pool *p, struct lun *l)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		struct lun_counters c;

		if (p->luns[i].lun != l)
			continue;
		lun_counters(l, &c);
		if (c.read_errors + c.write_errors >= STOR_LUN_FAULT_ERRORS)
			alloc_set_faulted(p->alloc, i);
		return;
	}
}

int stor_pool_sync(struct stor_pool *p)
{
	return txg_sync(p, 0);
}

int stor_pool_close(struct stor_pool *p)
{
	int ret;

	if (!p)
		return 0;
	ret = txg_fini(p);
	pool_free(p);
	return ret;
}

int stor_pool_destroy(const char *name, const struct stor_pool_opts *opts)
{
	struct stor_pool *p = NULL;
	char lock[4200];
	int ret;

	ret = stor_pool_open(name, opts, &p);
	if (ret == -EBUSY || ret == -EINVAL || ret == STOR_EBADNAME)
		return ret;
	if (ret < 0) {
		/* it no longer imports (a LUN missing, metadata damaged): forget
		 * it, and leave its LUNs as they are */
		char *path = meta_path(opts->state_dir, name);
		const char *const suffix[] = { "-lock", ".lock" };

		if (!path)
			return -ENOMEM;
		if (access(path, F_OK) < 0) {
			free(path);
			return -ENOENT; /* no such pool */
		}
		ret = unlink(path) < 0 ? -errno : 0;
		for (int i = 0; i < 2; i++) {
			snprintf(lock, sizeof(lock), "%s%s", path, suffix[i]);
			unlink(lock);
		}
		snprintf(lock, sizeof(lock), "%.*s.keys", (int)strlen(path) - 4, path);
		unlink(lock);
		snprintf(lock, sizeof(lock), "%.*s.keys.1", (int)strlen(path) - 4, path);
		unlink(lock);
		free(path);
		return ret;
	}
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		int r = lun_label_wipe(p->luns[i].lun);
		if (r < 0 && ret == 0)
			ret = r;
	}
	snprintf(lock, sizeof(lock), "%s-lock", p->path);
	if (unlink(p->path) < 0 && ret == 0)
		ret = -errno;
	unlink(lock);
	snprintf(lock, sizeof(lock), "%s.lock", p->path);
	unlink(lock);
	snprintf(lock, sizeof(lock), "%.*s.keys", (int)strlen(p->path) - 4, p->path);
	unlink(lock);
	snprintf(lock, sizeof(lock), "%.*s.keys.1", (int)strlen(p->path) - 4, p->path);
	unlink(lock);
	txg_fini(p);
	pool_free(p);
	return ret;
}

int stor_pool_stat(struct stor_pool *p, struct stor_pool_stat *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->name, sizeof(st->name), "%s", p->name);
	st->guid = p->guid;
	st->nluns = atomic_load(&p->nluns);
	for (unsigned i = 0; i < st->nluns; i++) {
		uint64_t used, total;
		alloc_usage(p->alloc, i, &used, &total);
		st->size += total * STOR_SECTOR;
		st->used += used * STOR_SECTOR;
	}
	st->txg = atomic_load(&p->synced_txg);
	st->suspended = atomic_load(&p->suspended);
	st->suspend_error = atomic_load(&p->suspend_error);
	snprintf(st->key_file, sizeof(st->key_file), "%s", p->keyfile_note);
	st->bad_frees = alloc_bad_frees(p->alloc);
	pthread_mutex_lock(&p->admin);
	st->ndatasets = (unsigned)p->nds;
	for (size_t i = 0; i < p->nds; i++)
		st->logical_used += (uint64_t)atomic_load(&p->ds[i]->logical_used);
	pthread_mutex_unlock(&p->admin);
	return 0;
}

int stor_pool_lun_stat(struct stor_pool *p, unsigned idx, struct stor_lun_stat *st)
{
	struct lun_counters c;
	uint64_t used, total;

	if (idx >= atomic_load(&p->nluns))
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	snprintf(st->path, sizeof(st->path), "%s", lun_path(p->luns[idx].lun));
	alloc_usage(p->alloc, idx, &used, &total);
	st->size = total * STOR_SECTOR;
	st->used = used * STOR_SECTOR;
	lun_counters(p->luns[idx].lun, &c);
	st->read_errors = c.read_errors;
	st->write_errors = c.write_errors;
	st->nospace_errors = c.nospace_errors;
	st->cksum_errors = atomic_load(&p->luns[idx].cksum_errors);
	st->faulted = c.read_errors + c.write_errors >= STOR_LUN_FAULT_ERRORS;
	st->label_damaged = p->luns[idx].label_damaged;
	st->label_repaired = p->luns[idx].label_repaired;
	return 0;
}

/* LUN @lun of @p by path or by index ("0", "1"...); -1 if none. */
static int lun_index(struct stor_pool *p, const char *lun)
{
	unsigned n = atomic_load(&p->nluns);
	char *end;
	unsigned long i;

	for (unsigned k = 0; k < n; k++)
		if (!strcmp(lun_path(p->luns[k].lun), lun))
			return (int)k;
	i = strtoul(lun, &end, 10);
	if (end != lun && !*end && i < n)
		return (int)i;
	return -1;
}

int stor_pool_clear(struct stor_pool *p, const char *lun)
{
	unsigned n = atomic_load(&p->nluns);
	int only = -1;

	if (lun) {
		only = lun_index(p, lun);
		if (only < 0) {
			pool_set_error("pool %s: no LUN '%s'", p->name, lun);
			return -ENOENT;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (only >= 0 && i != (unsigned)only)
			continue;
		/* counters first: a fault decided meanwhile sees them at zero */
		lun_counters_reset(p->luns[i].lun);
		atomic_store(&p->luns[i].cksum_errors, 0);
		alloc_clear_faulted(p->alloc, i);
	}
	return 0;
}

int stor_lun_labelclear(const char *path, const struct stor_pool_opts *opts, unsigned flags)
{
	int force = (flags & STOR_FORCE) != 0;
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad;
	int ret;

	last_error[0] = '\0';
	if (!opts || !opts->state_dir || !path)
		return -EINVAL;
	ret = lun_open(path, LUN_NEW | (force ? LUN_FORCE : 0) | (opts->direct_io ? LUN_DIRECT : 0),
		       0, &l);
	if (ret == -EBUSY) {
		in_use_error(0, path);
		return ret;
	}
	if (ret < 0) {
		pool_set_error("%s: %s", path,
			       ret == -ELOOP ? "a symbolic link, and not to a block device"
					     : stor_strerror(ret));
		return ret;
	}
	ret = lun_inside(l, opts->state_dir);
	if (ret != 0) {
		pool_set_error("%s: %s", path,
			       ret > 0 ? "inside the state directory" : stor_strerror(ret));
		ret = ret > 0 ? -EINVAL : ret;
		goto out;
	}
	/* only ever a label: never zero a file that does not carry one */
	ret = lun_label_read(l, &lab, &bad);
	if (ret == STOR_ELABEL) {
		pool_set_error("%s: no LUN label in either copy", path);
		goto out;
	}
	if (ret == 0 && !force) {
		ret = pool_has_metadata(opts->state_dir, lab.pool_name);
		if (ret > 0) {
			pool_set_error("%s: a LUN of pool '%s', which has metadata here; destroy "
				       "that pool, or force",
				       path, lab.pool_name);
			ret = STOR_EFOREIGN;
			goto out;
		}
	}
	if (ret == STOR_EFORMAT && !force) {
		pool_set_error("%s: a label of another format version; force to clear it", path);
		goto out;
	}
	if (ret >= 0 || ret == STOR_EFORMAT)
		ret = lun_label_wipe(l);
	if (ret < 0 && !last_error[0])
		pool_set_error("%s: %s", path, stor_strerror(ret));
out:
	lun_close(l);
	return ret;
}
