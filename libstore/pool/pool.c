/* SPDX-License-Identifier: MIT */
/*
 * Pools: create, open (import), close (export), destroy, add a LUN, status.
 * A pool owns its LUN set, its LMDB environment, the allocator and the pool
 * record naming its LUNs; on open every LUN the record names is attached,
 * and a damaged, missing or foreign one fails the import - unless it is a
 * side of a mirror another side of which opened: then it joins absent and
 * out of service, the mirror is degraded and the pool serves (ZFS imports
 * a pool whose every top-level vdev can serve the same way). A LUN of its
 * own whose file was truncated below the record's size joins cut short:
 * the records past its end are lost (errlog, pool status), the rest serves,
 * and the record keeps the old size so every later import knows. The free map
 * and every dataset's space come from LMDB's rows of them (txg/spacemap.c),
 * or from a walk of every block pointer where there are none (alloc.h). Freeing a pool
 * (close, destroy, a failed open) drops its datasets from the data cache:
 * nothing read before an export is served after the next import.
 *
 * Which paths may become LUNs, label checks, faults and per-LUN status are
 * the LUN set's (lunset.c); the pool's files in the state directory are
 * named in statedir.c.
 *
 * A pool opens by loading its datasets and then their keys from the key
 * file (ds/); nothing below calls back up into pool/: a dataset create puts
 * the pool record's next id in its own transaction (txg/pool_record.c).
 *
 * The labels say who has the pool (lunset_mark): active under this host's
 * id from open (import) and create, exported by stor_pool_export(); a pool
 * opened at LUN paths a scan found gets its record rewritten with them.
 *
 * Import and LMDB as a cache (metalog.c keeps the metadata on the LUNs):
 * the LUNs are looked for where the pool record in LMDB says, or when LMDB
 * is missing or does not open, where <pool>.luns (rewritten with every
 * pool record) says. Their newest log decides: an LMDB at the same txg is
 * used as it is, one behind gets the missing records replayed, a missing
 * or unreadable one is rebuilt whole into <pool>.mdb.rebuild and renamed
 * into place (a crash meanwhile leaves no half-built cache), and the key
 * file is rewritten from the LUNs when its copies here are gone or older.
 * An LMDB ahead of the LUNs (their uberblocks lost) is used, and the next
 * commit, made at once, writes a checkpoint of it; so is one at the LUNs'
 * txg that holds changes no log record took (meta_unlogged: an admin
 * change committed just before a crash).
 *
 * The pool record's codec and <pool>.luns are txg/pool_record.c's; an
 * import reads the sides row (lunset.c) before any LUN joins, so a
 * detached LUN never counts among its vdev's sides.
 * "pool"/"txg": u64 last committed txg.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cache.h"
#include "base/events.h"
#include "base/pool_error.h"
#include "dev/alloc.h"
#include "dev/errlog.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "ds/clone.h"
#include "ds/dataset.h"
#include "ds/keyfile.h"
#include "ds/owners.h"
#include "ds/recv_state.h"
#include "ds/rekey.h"
#include "ds/snapshot.h"
#include "ds/space.h"
#include "io/record.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "pool/pool_rename.h"
#include "pool/scrub.h"
#include "pool_impl.h"
#include "txg/metalog.h"
#include "txg/pool_record.h"
#include "txg/spacemap.h"

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

/* <state_dir>/pools, made when missing (a new or an emptied state directory) */
static int make_pools_dir(const char *state_dir)
{
	char *dir;
	int ret;

	if (asprintf(&dir, "%s/pools", state_dir) < 0)
		return -ENOMEM;
	ret = mkdirs(dir);
	free(dir);
	return ret;
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
	p->path = statedir_meta_path(opts->state_dir, name);
	pthread_mutex_init(&p->admin, NULL);
	pthread_mutex_init(&p->snap_lock, NULL);
	space_init(p);
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_init(&p->stripes[i], NULL);
	if (!p->name || !p->path || alloc_create(&p->alloc) < 0 || metalog_create(&p->mlog) < 0) {
		alloc_destroy(p->alloc);
		metalog_free(p->mlog);
		free(p->name);
		free(p->path);
		free(p);
		return NULL;
	}
	return p;
}

/* p->meta, opened with @flags (meta_open), and the free map's watcher on it. */
static int meta_attach(struct stor_pool *p, unsigned flags)
{
	int ret = meta_open(p->path, p->opts.map_size, flags, &p->meta);

	if (ret == 0 && (ret = spacemap_attach(p, p->meta, &p->smap)) < 0) {
		meta_close(p->meta);
		p->meta = NULL;
	}
	return ret;
}

static void meta_detach(struct stor_pool *p)
{
	spacemap_free(p->smap);
	p->smap = NULL;
	meta_close(p->meta);
	p->meta = NULL;
}

static void pool_free(struct stor_pool *p)
{
	if (!p)
		return;
	scrub_fini(p); /* it writes LMDB: first */
	/*
	 * The data cache is process-wide and keyed by dataset GUID: entries
	 * left behind would be served after the next import, though the LUNs
	 * may have been rewritten meanwhile (another host, a restored copy).
	 * Export and destroy both end here; dropping wipes the plaintext.
	 */
	for (size_t i = 0; i < p->nds; i++) {
		cache_drop_ds(cache_data(), p->ds[i]->guid);
		ds_free(p->ds[i]);
	}
	free(p->ds);
	lunset_close(p);
	meta_detach(p);
	metalog_free(p->mlog);
	alloc_destroy(p->alloc);
	if (p->lock_fd >= 0)
		close(p->lock_fd); /* releases the flock */
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_destroy(&p->stripes[i]);
	pthread_mutex_destroy(&p->admin);
	pthread_mutex_destroy(&p->snap_lock);
	space_fini(p);
	free(p->name);
	free(p->path);
	free(p);
}

/*
 * Two openers of one pool would allocate the same sectors. LMDB's own lock
 * file does not stop that, and a lock on the .mdb file itself would be lost
 * whenever LMDB closes a descriptor of it, so the pool has a lock file. A
 * refused create removes it, holding it: a lock taken on a file no longer
 * at its path is no lock, so it is taken again on the one there now.
 */
static int pool_lock(struct stor_pool *p)
{
	char path[4200];
	struct stat fd_st, path_st;

	snprintf(path, sizeof(path), "%.4090s.lock", p->path);
	for (;;) {
		p->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (p->lock_fd < 0)
			return -errno;
		if (flock(p->lock_fd, LOCK_EX | LOCK_NB) < 0) {
			int err = errno == EWOULDBLOCK ? -EBUSY : -errno;

			pool_set_error("pool %s: open elsewhere (%s is locked)", p->name, path);
			return err;
		}
		if (fstat(p->lock_fd, &fd_st) < 0)
			return -errno;
		if (stat(path, &path_st) == 0 && path_st.st_dev == fd_st.st_dev &&
		    path_st.st_ino == fd_st.st_ino)
			return 0;
		close(p->lock_fd);
	}
}

/* LUN paths an import looks at, before it knows which LUNs the pool has. */
struct lun_paths {
	char *path[STOR_LUNS_MAX];
	unsigned n;
};

static void paths_free(struct lun_paths *lp)
{
	for (unsigned i = 0; i < lp->n; i++)
		free(lp->path[i]);
	lp->n = 0;
}

static int paths_add(struct lun_paths *lp, const char *path)
{
	for (unsigned i = 0; i < lp->n; i++)
		if (!strcmp(lp->path[i], path))
			return 0;
	if (lp->n >= STOR_LUNS_MAX)
		return 0;
	lp->path[lp->n] = strdup(path);
	if (!lp->path[lp->n])
		return -ENOMEM;
	lp->n++;
	return 0;
}

/* The paths <pool>.luns lists; none if it is missing. */
static int read_hint(struct stor_pool *p, struct lun_paths *lp)
{
	char path[4200], line[4200];
	FILE *f;
	int ret = 0;

	statedir_luns_path(p->path, path, sizeof(path));
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (ret == 0 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0])
			ret = paths_add(lp, line);
	}
	fclose(f);
	return ret;
}

/* The vdevs the labels of the attached LUNs gave are the record's. */
static int check_layout(struct stor_pool *p, uint32_t n, const uint32_t *vdev)
{
	for (uint32_t i = 0; i < n; i++) {
		if (vdev[i] != p->luns[i].vdev) {
			pool_set_error("pool %s: lun %u (%s): its label puts it in the vdev of lun "
				       "%u, the pool record in that of lun %u",
				       p->name, i, lun_path(p->luns[i].lun), p->luns[i].vdev,
				       vdev[i]);
			return STOR_ECORRUPT;
		}
	}
	return 0;
}

/* Does the vdev of lun @vdev (@n LUNs in all) have more than one side? */
static int is_mirror(const uint32_t *vdevs, uint32_t n, uint32_t vdev)
{
	for (uint32_t i = vdev + 1; i < n; i++)
		if (vdevs[i] == vdev)
			return 1;
	return 0;
}

/*
 * Attach LUN @i of the record. A mirror side that does not open, or whose
 * label is not this pool's, joins as absent (lunset_absent) with the reason
 * attaching gave, so the mirror imports degraded; a LUN of its own, or one
 * another host has, fails the import as it always did.
 */
static int attach_one(struct stor_pool *p, unsigned i, const char *path, uint64_t guid,
		      uint64_t size, const uint32_t *vdevs, uint32_t n)
{
	char why[512];
	int ret;

	pool_clear_error();
	ret = lunset_attach(p, i, path, guid, size, is_mirror(vdevs, n, vdevs[i]));
	if (ret == 0 || ret == -ENOMEM || ret == STOR_EHOSTID || !is_mirror(vdevs, n, vdevs[i]))
		return ret;
	snprintf(why, sizeof(why), "%s", pool_error_set() ? stor_pool_last_error()
							  : stor_strerror(ret));
	pool_clear_error();
	ret = lunset_absent(p, i, path, guid, size, vdevs[i], why);
	if (ret < 0)
		pool_set_error("%s", why);
	return ret;
}

/* A mirror with no side that opened cannot serve: the import fails with
 * what its first side's attach said. That holds for one detached down to
 * a single side too, which joined absent as a mirror's side does. */
static int check_sides(struct stor_pool *p, uint32_t n)
{
	for (uint32_t v = 0; v < n; v++) {
		unsigned here = 0, first = p->luns[v].nsides ? p->luns[v].side[0] : v;

		if (p->luns[v].vdev != v)
			continue;
		for (unsigned s = 0; s < p->luns[v].nsides; s++)
			here += !p->luns[p->luns[v].side[s]].absent;
		if (!here) {
			pool_set_error("pool %s: no side of the mirror of lun %u opened: %s",
				       p->name, v,
				       p->luns[first].absent ? p->luns[first].absent : "none left");
			return -ENODEV;
		}
	}
	return 0;
}

/* A mirror whose sides all lack writes (the one that had them is gone)
 * would serve holes: the import fails. */
static int check_sound(struct stor_pool *p, uint32_t n)
{
	for (uint32_t v = 0; v < n; v++) {
		unsigned sides[STOR_MIRROR_MAX];

		if (p->luns[v].vdev != v || p->luns[v].nsides <= 1)
			continue;
		if (!mirror_sound_sides(p, v, sides)) {
			pool_set_error("pool %s: no side of the mirror of lun %u that opened holds "
				       "every write (the others are out of service since a txg)",
				       p->name, v);
			return -ENODEV;
		}
	}
	return 0;
}

/*
 * Read the pool record: guid, next dataset id, and every LUN, which is
 * attached - or with @lp only noted there, for the import to look at.
 */
static int load_config(struct stor_pool *p, uint64_t *txg, struct lun_paths *lp)
{
	struct meta_txn *t = NULL;
	struct pool_record *rec = calloc(1, sizeof(*rec));
	const uint8_t *r;
	const void *v;
	size_t vlen;
	uint8_t detached[STOR_LUNS_MAX];
	int ret = rec ? meta_rtxn_get(p->meta, &t) : -ENOMEM;

	if (ret < 0)
		goto out;
	ret = meta_get(t, META_POOL, "txg", 3, &v, &vlen);
	*txg = 0;
	if (ret == 0 && vlen == 8) {
		r = v;
		*txg = get_u64(&r);
	}
	ret = pool_record_read(t, rec);
	if (ret == -ENOENT) {
		if (!lp)
			pool_set_error("pool %s: no pool record in %s", p->name, p->path);
		ret = STOR_ECORRUPT;
	}
	if (ret == STOR_EFORMAT && (rec->version == FORMAT_VERSION || rec->version == 5))
		pool_set_error("pool %s: made by an older coffer (pool version %u, this "
			       "coffer reads %u: %s); read its volumes out with that coffer "
			       "and write them into a new pool",
			       p->name, rec->version, POOL_RECORD_VERSION,
			       rec->version == 5 ? "no dataset lists its encrypted children under "
						   "its key"
						 : "its block pointer MACs cover the pointers' place");
	if (ret < 0)
		goto out;
	p->guid = rec->guid;
	p->next_ds_id = rec->next_ds_id;
	for (uint32_t i = 0; i < rec->n; i++) {
		/* a LUN a scan found elsewhere: there, and the record follows */
		if (i < p->opts.nlun_paths && p->opts.lun_paths[i]) {
			free(rec->path[i]);
			rec->path[i] = strdup(p->opts.lun_paths[i]);
			if (!rec->path[i]) {
				ret = -ENOMEM;
				goto out;
			}
		}
		/* attaching, path i is LUN i's: a detached LUN's file may be a
		 * LUN of the pool again, so one path may come twice */
		if (lp && (ret = paths_add(lp, rec->path[i])) < 0)
			goto out;
	}
	if (lp)
		goto out;
	/* the layout first: a mirror side that is gone takes its place from it */
	ret = rec->layout;
	if (ret < 0)
		pool_set_error("pool %s: the pool record's vdev layout is damaged", p->name);
	/* a detached LUN joins no vdev's sides, so the others count as their
	 * labels do; its path is never opened (it may be a LUN again, elsewhere) */
	if (ret == 0)
		ret = lunset_row_detached(t, rec->n, detached);
	for (uint32_t i = 0; i < rec->n && ret == 0; i++)
		ret = detached[i] ? lunset_absent(p, i, rec->path[i], rec->lun_guid[i],
						  rec->size[i], rec->vdev[i], NULL)
				  : attach_one(p, i, rec->path[i], rec->lun_guid[i], rec->size[i],
					       rec->vdev, rec->n);
	if (ret == 0)
		ret = check_layout(p, rec->n, rec->vdev);
	if (ret == 0)
		ret = check_sides(p, rec->n);
	if (ret == 0)
		ret = lunset_load_sides(p, t, *txg);
	if (ret == 0)
		ret = check_sound(p, rec->n);
	if (ret == 0)
		ret = errlog_load(p, t);
out:
	if (rec)
		pool_record_free(rec);
	free(rec);
	meta_rtxn_put(t);
	return ret;
}

struct rebuild {
	struct stor_pool *p;
	int err;
	uint64_t *lost; /* per LUN: records past the end of one cut short */
	/* looked up once per run of pointers: they come in key order, an
	 * owner's all together */
	struct owners *owners;
	const struct owner *last;
	struct sm_sum *sums; /* by owner, in the index's order: the rows' base */
};

/*
 * A record on a LUN cut short (pool_lun.cut) that reaches past the file's
 * end is lost: counted, and a dataset's noted in the errlog for pool
 * status -v, as a read that found no sound copy would note it. Its extent
 * stays in the allocator's clipped view (alloc_set_cut) until freed.
 */
static void note_lost(struct rebuild *rb, const struct bp *bp, const struct stor_ds *ds,
		      uint64_t recno)
{
	struct stor_pool *p = rb->p;

	if (bp->lun >= atomic_load(&p->nluns) || !p->luns[bp->lun].cut ||
	    bp->sector * STOR_SECTOR + bp->psize <= lun_data_size(p->luns[bp->lun].lun))
		return;
	rb->lost[bp->lun]++;
	if (ds)
		errlog_note(p, ds->id, recno, ds->name, "import");
}

/*
 * A pointer sealed by a key in a dataset the metadata calls clear: the
 * dataset was encrypted and its record, properties and key-file entry were
 * edited to say otherwise, which would send its next writes to the LUNs in
 * plaintext. The pool is refused, naming it (the other way round, a clear
 * pointer in an encrypted dataset, is refused at its read).
 */
static int downgraded(struct stor_pool *p, const struct stor_ds *ds, const struct bp *bp,
		      const char *what)
{
	if (ds->suite || !(bp->flags & BP_F_ENCRYPTED))
		return 0;
	pool_set_error("pool %s: dataset %s is clear by its metadata but %s encrypted "
		       "records: its encryption was removed from the metadata, not by coffer",
		       p->name, ds->name, what);
	return STOR_ECORRUPT;
}

static int rebuild_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct rebuild *rb = ctx;
	struct stor_ds *ds;
	struct snap *s;
	struct sm_sum *sum;
	struct bp bp;
	const uint8_t *k = key;
	uint64_t id;
	int ret;

	if (klen != BP_KEY_LEN || bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	id = get_u64(&k);
	if (!rb->last || rb->last->id != id)
		rb->last = owners_find(rb->owners, id);
	ds = rb->last ? rb->last->ds : NULL;
	if (rb->last) {
		sum = &rb->sums[rb->last - owners_at(rb->owners, 0)];
		sum->id = id;
		sum->psize += bp.psize;
		sum->lsize += bp.lsize;
		sum->nenc += !!(bp.flags & BP_F_ENCRYPTED);
	}
	if (!ds && (s = rb->last ? rb->last->snap : NULL)) {
		/* a snapshot's kept pointer: its dataset's usedbysnapshots */
		if ((ret = downgraded(rb->p, s->ds, &bp, "a snapshot of it keeps")) < 0)
			return ret;
		atomic_fetch_add(&s->ds->snap_used, bp.psize);
		note_lost(rb, &bp, NULL, 0);
		ret = alloc_mark(rb->p->alloc, bp.lun, bp.sector, bp.psize / STOR_SECTOR);
		if (ret < 0)
			pool_set_error("pool %s: kept block pointer to lun %u sector %llu overlaps or is out of range",
				       rb->p->name, bp.lun, (unsigned long long)bp.sector);
		return ret;
	}
	if (!ds) {
		pool_set_error("pool %s: block pointer of unknown dataset %llu", rb->p->name,
			       (unsigned long long)id);
		return STOR_ECORRUPT;
	}
	if ((ret = downgraded(rb->p, ds, &bp, "it holds")) < 0)
		return ret;
	note_lost(rb, &bp, ds, get_u64(&k));
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

/* A table's sums as the free map's rows have them: its dataset's space. */
static int load_sum(void *ctx, const struct sm_sum *sum)
{
	struct rebuild *rb = ctx;
	const struct owner *o = owners_find(rb->owners, sum->id);
	struct bp enc = { .flags = BP_F_ENCRYPTED };

	if (!o) {
		pool_set_error("pool %s: block pointers of unknown dataset %llu", rb->p->name,
			       (unsigned long long)sum->id);
		return STOR_ECORRUPT;
	}
	if (o->snap) {
		atomic_fetch_add(&o->snap->ds->snap_used, sum->psize);
		return sum->nenc ? downgraded(rb->p, o->snap->ds, &enc, "a snapshot of it keeps") : 0;
	}
	atomic_fetch_add(&o->ds->used, sum->psize);
	atomic_fetch_add(&o->ds->logical_used, sum->lsize);
	return sum->nenc ? downgraded(rb->p, o->ds, &enc, "it holds") : 0;
}

static int first_sealed(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct bp bp;

	(void)key, (void)klen;
	if (bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	*(int *)ctx = !!(bp.flags & BP_F_ENCRYPTED);
	return 1;
}

/*
 * The downgrade check of an import that read the rows: their count of
 * sealed pointers is in the same LMDB file as the dataset records an
 * attacker would edit, so each table of a dataset its metadata calls clear
 * also has its first pointer looked at (one lookup per table, not per
 * record): a dataset whose encryption was taken out of its metadata had
 * only sealed pointers until a write of its own.
 */
static int clear_tables_unsealed(struct stor_pool *p, const struct owners *o)
{
	struct bp enc = { .flags = BP_F_ENCRYPTED };
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	for (size_t i = 0; ret == 0 && i < owners_count(o); i++) {
		const struct owner *w = owners_at(o, i);
		const struct stor_ds *ds = w->ds ? w->ds : w->snap->ds;
		uint8_t prefix[8], *pw = prefix;
		int sealed = 0;

		if (ds->suite)
			continue;
		put_u64(&pw, w->id);
		ret = meta_iter(t, META_BP, prefix, sizeof(prefix), 0, first_sealed, &sealed);
		if (ret == 1)
			ret = sealed ? downgraded(p, ds, &enc, w->ds ? "it holds" : "a snapshot of it keeps")
				     : 0;
	}
	meta_rtxn_put(t);
	return ret < 0 ? ret : 1;
}

static int any_cut(const struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (p->luns[i].cut)
			return 1;
	return 0;
}

/*
 * The free map and every dataset's space: from the rows LMDB keeps of the
 * block pointers (txg/spacemap.c), or, where it has none, or a LUN was cut
 * short (whose lost records only the pointers can name), by walking every
 * pointer; a walk writes the rows for the next import.
 */
static int rebuild_space(struct stor_pool *p)
{
	struct meta_txn *t = NULL;
	struct rebuild rb = { .p = p, .lost = calloc(STOR_LUNS_MAX, sizeof(uint64_t)) };
	int ret = rb.lost ? owners_index(p, &rb.owners) : -ENOMEM, cut = any_cut(p);

	if (ret == 0 && !cut) {
		ret = spacemap_load(p->smap, p->alloc, load_sum, &rb);
		if (ret > 0)
			ret = clear_tables_unsealed(p, rb.owners);
		if (ret != 0)
			goto out;
	}
	if (ret == 0 && !(rb.sums = calloc(owners_count(rb.owners) + 1, sizeof(*rb.sums))))
		ret = -ENOMEM;
	if (ret == 0)
		ret = meta_rtxn_get(p->meta, &t);
	if (ret == 0)
		ret = meta_iter(t, META_BP, NULL, 0, 0, rebuild_one, &rb);
	meta_rtxn_put(t);
	if (ret == 0 && !cut) {
		int r = spacemap_write_base(p->smap, p->alloc, rb.sums, owners_count(rb.owners));

		if (r < 0) /* the next import walks again */
			metalog_notef(p, "the free map's rows could not be written: %s",
				      stor_strerror(r));
	}
	/* pool status and the import's reply say so, with what is lost */
	for (unsigned i = 0; ret == 0 && i < atomic_load(&p->nluns); i++)
		if (p->luns[i].cut)
			metalog_notef(p, "lun %u (%s) truncated: %llu of %llu bytes left, %llu "
				      "records past its end lost (pool status -v names them)",
				      i, lun_path(p->luns[i].lun),
				      (unsigned long long)lun_size(p->luns[i].lun),
				      (unsigned long long)(p->luns[i].cut + LUN_LABEL_SIZE),
				      (unsigned long long)rb.lost[i]);
out:
	free(rb.lost);
	free(rb.sums);
	owners_free(rb.owners);
	return ret < 0 ? ret : 0;
}

/* Open for reading the LUNs among @lp whose label is this pool's, by index. */
static void peek_luns(struct stor_pool *p, const struct lun_paths *lp, struct metalog_luns *L)
{
	L->guid = p->guid;
	for (unsigned i = 0; i < lp->n; i++) {
		struct lun *l = NULL;
		struct lun_label lab;
		unsigned bad;

		if (lun_open(lp->path[i], LUN_PEEK, 0, &l) < 0)
			continue;
		if (lun_label_read(l, &lab, &bad) == 0 &&
		    (L->guid ? lab.pool_guid == L->guid : !strcmp(lab.pool_name, p->name)) &&
		    lab.index < STOR_LUNS_MAX && !L->lun[lab.index]) {
			L->guid = lab.pool_guid;
			L->lun[lab.index] = l;
			L->vdev[lab.index] = (uint16_t)lab.vdev;
			if (lab.index >= L->n)
				L->n = lab.index + 1;
			continue;
		}
		lun_close(l);
	}
}

static void unpeek_luns(struct metalog_luns *L)
{
	for (unsigned i = 0; i < L->n; i++)
		lun_close(L->lun[i]);
	L->n = 0;
}

/* Build <pool>.mdb anew from the log on the LUNs of @L, then put it in place. */
static int rebuild_meta(struct stor_pool *p, struct metalog_luns *L)
{
	char tmp[4200], lock[4300];
	struct meta *m = NULL;
	uint64_t log_txg;
	int ret;

	snprintf(tmp, sizeof(tmp), "%.4090s.rebuild", p->path);
	snprintf(lock, sizeof(lock), "%s-lock", tmp);
	unlink(tmp);
	unlink(lock);
	ret = meta_open(tmp, p->opts.map_size, META_CREATE, &m);
	if (ret == 0)
		ret = metalog_import(p, L, m, 0, &log_txg);
	meta_close(m);
	if (ret == 0) {
		pool_set_error("pool %s: no metadata in %s, and none on the %u LUNs found", p->name,
			       p->path, L->n);
		ret = -ENOENT;
	} else if (ret < 0 && !pool_error_set()) {
		pool_set_error("pool %s: rebuilding %s from the LUNs: %s", p->name, p->path,
			       stor_strerror(ret));
	}
	if (ret > 0) {
		ret = rename(tmp, p->path) < 0 ? -errno : statedir_sync(p->path);
		if (ret == 0)
			metalog_notef(p, "metadata rebuilt from the LUNs at txg %llu",
				      (unsigned long long)log_txg);
	}
	if (ret < 0)
		unlink(tmp);
	unlink(lock);
	return ret;
}

/*
 * Make p->meta the cache of the LUNs' newest txg (pool.c head comment).
 * On success the LUNs are known by their paths in the pool record.
 */
static int open_meta(struct stor_pool *p, int have)
{
	struct metalog_luns *L = calloc(1, sizeof(*L));
	struct lun_paths lp = { 0 };
	uint64_t txg = 0, log_txg = 0;
	int ret = L ? 0 : -ENOMEM, r;

	if (ret == 0 && have) {
		ret = meta_attach(p, 0);
		if (ret == 0)
			ret = load_config(p, &txg, &lp);
	}
	if (ret < 0 || !have) {
		int why = ret;

		paths_free(&lp);
		ret = L ? read_hint(p, &lp) : -ENOMEM;
		/* and the LUNs a scan found (pool import -d) */
		for (unsigned i = 0; ret == 0 && i < p->opts.nlun_paths; i++)
			if (p->opts.lun_paths[i])
				ret = paths_add(&lp, p->opts.lun_paths[i]);
		if (ret == 0 && lp.n == 0)
			ret = have ? why : -ENOENT; /* nowhere to look for the LUNs */
		if (ret < 0) {
			if (have && ret != -ENOENT && !pool_error_set())
				pool_set_error("pool %s: metadata %s: %s", p->name, p->path,
					       stor_strerror(ret));
			goto out;
		}
		if (have)
			metalog_notef(p, "%s did not open (%s)", p->path, stor_strerror(why));
		meta_detach(p);
		p->guid = 0;
	}
	peek_luns(p, &lp, L);
	if (p->meta) {
		r = metalog_import(p, L, p->meta, txg, &log_txg);
		if (r < 0)
			metalog_notef(p, "metadata on the LUNs does not verify (%s): LMDB at txg "
				      "%llu used, a checkpoint of it written",
				      stor_strerror(r), (unsigned long long)txg);
		else if (r > 0 && log_txg < txg)
			metalog_notef(p, "LMDB at txg %llu is ahead of the LUNs (txg %llu): a "
				      "checkpoint of it written",
				      (unsigned long long)txg, (unsigned long long)log_txg);
		else if (r > 0 && log_txg > txg)
			metalog_notef(p, "LMDB at txg %llu brought up to txg %llu from the LUNs",
				      (unsigned long long)txg, (unsigned long long)log_txg);
		if (r > 0 && meta_unlogged(p->meta) > 0) {
			/* changes committed to LMDB alone before a crash: the
			 * log's next delta would apply to a state without them */
			metalog_notef(p, "LMDB holds changes the LUNs lack (committed just "
				      "before a crash): a checkpoint of it written");
			metalog_force_checkpoint(p);
		}
		if (r <= 0 || log_txg < txg)
			metalog_force_checkpoint(p);
		if (r == 0)
			metalog_notef(p, "no metadata on the LUNs yet: a checkpoint written");
	} else {
		ret = rebuild_meta(p, L);
		if (ret == 0)
			ret = meta_attach(p, 0);
	}
	unpeek_luns(L);
out:
	paths_free(&lp);
	free(L);
	return ret;
}

/*
 * What an import found: each LUN that did not open (UNAVAIL, as status
 * says), then the pool's health (pool.state DEGRADED). Said at every
 * import, as OpenZFS reports a vdev that fails to open each time.
 */
static void open_events(struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (p->luns[i].absent && atomic_load(&p->luns[i].state) != SIDE_DETACHED)
			EVENT(STOR_EV_LUN_FAULT, p->name, EV_STR("lun", lun_path(p->luns[i].lun)),
			      EV_NUM("vdev", p->luns[i].vdev), EV_STR("state", "UNAVAIL"),
			      EV_STR("old_state", ""), EV_STR("reason", p->luns[i].absent),
			      EV_NUM("read_errors", 0), EV_NUM("write_errors", 0));
	lunset_note_health(p);
}

int stor_pool_open(const char *name, const struct stor_pool_opts *opts, struct stor_pool **out)
{
	struct stor_pool *p = NULL;
	uint64_t txg;
	const uint8_t *kb;
	size_t klen;
	int ret, have;

	*out = NULL;
	pool_clear_error();
	if (!opts || !opts->state_dir)
		return -EINVAL;
	if (stor_name_check(name, STOR_NAME_POOL) < 0)
		return STOR_EBADNAME;
	if (opts->new_name && (stor_name_check(opts->new_name, STOR_NAME_POOL) < 0))
		return STOR_EBADNAME;
	if (opts->new_name && statedir_has_pool(opts->state_dir, opts->new_name) > 0) {
		pool_set_error("pool %s: a pool of that name has metadata in %s", opts->new_name,
			       opts->state_dir);
		return -EEXIST;
	}
	p = pool_alloc(name, opts);
	if (!p)
		return -ENOMEM;
	have = access(p->path, F_OK) == 0;
	if (!have && !opts->lun_paths) {
		/* no metadata here: a pool only if <pool>.luns says where its LUNs are */
		char hint[4200];

		statedir_luns_path(p->path, hint, sizeof(hint));
		if (access(hint, F_OK) < 0) {
			ret = -ENOENT;
			goto fail;
		}
	}
	/* an import from the LUNs into a state directory that lost everything */
	ret = have ? 0 : make_pools_dir(opts->state_dir);
	if (ret == 0)
		ret = pool_lock(p);
	if (ret < 0)
		goto fail;
	ret = open_meta(p, have);
	if (ret < 0)
		goto fail;
	ret = load_config(p, &txg, NULL);
	if (ret == 0)
		ret = pool_follow_name(p);
	if (ret < 0)
		goto fail;
	/* the load reads and fills the dataset table through the *_locked
	 * functions, which want the admin lock: taken, though no other thread
	 * sees the pool yet (recv_cleanup below takes it itself) */
	pthread_mutex_lock(&p->admin);
	ret = ds_load_all(p);
	kb = metalog_keys_get(p, &klen);
	if (ret == 0 && (ret = keyfile_restore(p, kb, klen)) > 0)
		metalog_notef(p, "key file rebuilt from the LUNs");
	if (ret >= 0)
		ret = keyfile_load(p);
	if (ret < 0) {
		if (!pool_error_set())
			pool_set_error("pool %s: dataset records: %s", name, stor_strerror(ret));
		goto fail_locked;
	}
	ret = rebuild_space(p);
	if (ret == 0)
		ret = metalog_mark(p);
	/* the record names the LUNs where they are now; the labels say who has them */
	if (ret == 0 && opts->lun_paths)
		ret = pool_save_config(p);
	if (ret == 0 && opts->new_name && strcmp(opts->new_name, name))
		ret = pool_rename(p, opts->new_name);
	if (ret == 0)
		ret = lunset_mark(p, LABEL_ACTIVE);
	if (ret < 0)
		goto fail_locked;
	metalog_repair(p); /* what it could not repair, the checkpoint below replaces */
	p->reseal = record_reseal;
	ret = txg_init(p, txg, snap_mac);
	if (ret < 0)
		goto fail_locked;
	ret = clone_import(p); /* looks pointers up through the txg */
	pthread_mutex_unlock(&p->admin);
	if (ret < 0)
		goto fail;
	p->opts.lun_paths = NULL; /* the caller's */
	p->opts.nlun_paths = 0;
	p->opts.new_name = NULL;
	p->opts.progress = NULL;
	/* a checkpoint due (LMDB ahead of the LUNs, or they have none): now,
	 * not at the next write; a failure is retried with every commit */
	if (metalog_dirty(p) || atomic_load(&p->sides_dirty))
		txg_sync(p, 0);
	/* a scrub that was running goes on */
	ret = scrub_init(p);
	if (ret < 0)
		goto fail;
	open_events(p);
	/* a receive cut short by a crash leaves nothing (recv.c) */
	if (recv_cleanup(p) < 0)
		metalog_notef(p, "a dataset of a receive cut short could not be destroyed yet");
	*out = p;
	return 0;
fail_locked:
	pthread_mutex_unlock(&p->admin);
fail:
	scrub_fini(p);
	txg_fini(p);
	pool_free(p);
	return ret;
}

static int add_vdev(struct stor_pool *p, const char *const *paths, unsigned sides,
		    uint64_t size, unsigned flags);

int stor_pool_create(const char *name, const char *const *luns, unsigned nluns,
		     const struct stor_pool_opts *opts, struct stor_pool **out)
{
	struct stor_pool *p = NULL;
	struct stat st;
	int ret, ours = 0;

	*out = NULL;
	pool_clear_error();
	if (!opts || !opts->state_dir || nluns == 0 || nluns > STOR_LUNS_MAX)
		return -EINVAL;
	if (opts->vdev_sides) {
		unsigned sum = 0;

		for (unsigned v = 0; v < opts->nvdevs; v++) {
			if (opts->vdev_sides[v] < 1 || opts->vdev_sides[v] > STOR_MIRROR_MAX)
				return -EINVAL;
			sum += opts->vdev_sides[v];
		}
		if (sum != nluns)
			return -EINVAL;
	}
	if (stor_name_check(name, STOR_NAME_POOL) < 0)
		return STOR_EBADNAME;
	ret = make_pools_dir(opts->state_dir);
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
	ours = 1; /* every file of the pool's name in state_dir is ours to remove */
	ret = keys_random(&p->guid, sizeof(p->guid));
	if (ret < 0)
		goto fail;
	p->next_ds_id = 1;
	for (unsigned v = 0, i = 0; i < nluns; v++) {
		unsigned sides = opts->vdev_sides ? opts->vdev_sides[v] : 1;

		ret = add_vdev(p, luns + i, sides, opts->lun_size, opts->force ? STOR_FORCE : 0);
		if (ret < 0)
			goto fail;
		i += sides;
	}
	ret = meta_attach(p, META_CREATE);
	if (ret < 0)
		goto fail;
	/* nothing held yet: the free map's rows are kept from the start */
	ret = spacemap_write_base(p->smap, NULL, NULL, 0);
	if (ret == 0)
		ret = pool_save_config(p);
	if (ret < 0)
		goto fail;
	p->reseal = record_reseal;
	ret = txg_init(p, 0, snap_mac);
	if (ret < 0)
		goto fail;
	ret = pool_create_root(p);
	if (ret == 0)
		ret = lunset_mark(p, LABEL_ACTIVE); /* every label counts every LUN */
	if (ret < 0)
		goto fail;
	/* the first checkpoint: from now on the pool imports from its LUNs */
	ret = txg_sync(p, 0);
	if (ret == 0)
		ret = scrub_init(p);
	if (ret < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	txg_fini(p);
	/* a refused create leaves state_dir as it found it; the lock file
	 * goes while it is held (pool_lock) */
	if (ours)
		statedir_remove_pool(p->path);
	lunset_wipe(p);
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
static int add_vdev(struct stor_pool *p, const char *const *paths, unsigned sides,
		    uint64_t size, unsigned flags)
{
	struct lunset_new n[STOR_MIRROR_MAX];
	unsigned k = 0;
	int ret = 0;

	if (sides < 1 || sides > STOR_MIRROR_MAX)
		return -EINVAL;
	pthread_mutex_lock(&p->admin);
	/* a mirror joins whole: every side labelled before the record names any */
	for (; k < sides && ret == 0; k++)
		ret = lunset_prepare(p, paths[k], size, flags, k ? &n[k - 1] : NULL, k, sides,
				     &n[k]);
	if (ret < 0)
		k--; /* the failed one left nothing behind */
	else if (p->meta)
		ret = pool_save_config_n(p, n[sides - 1].idx + 1);
	for (unsigned i = 0; i < k; i++) {
		if (ret == 0)
			lunset_publish(p, &n[i]);
		else
			lunset_abandon(p, &n[k - 1 - i]);
	}
	/* the sides row counts the new LUNs too, in service */
	if (ret == 0)
		atomic_store(&p->sides_dirty, 1);
	/* the others' labels count it too, so a scan that misses it knows it
	 * is missing; a failure here costs only that hint (import rewrites them) */
	if (ret == 0 && p->meta)
		lunset_mark(p, LABEL_ACTIVE);
	pthread_mutex_unlock(&p->admin);
	/* the new LUN gets its uberblocks, and the LUNs the new pool record,
	 * now; a failure is retried with every commit */
	if (ret == 0 && p->open)
		txg_sync(p, 0);
	return ret;
}

int stor_pool_add_lun(struct stor_pool *p, const char *path, uint64_t size, unsigned flags)
{
	return add_vdev(p, &path, 1, size, flags);
}

int stor_pool_add_mirror(struct stor_pool *p, const char *const *paths, unsigned n,
			 uint64_t size, unsigned flags)
{
	if (n < 2 || n > STOR_MIRROR_MAX)
		return -EINVAL;
	pool_clear_error();
	return add_vdev(p, paths, n, size, flags);
}

int stor_pool_sync(struct stor_pool *p)
{
	return txg_sync(p, 0);
}

int stor_pool_sync_admin(struct stor_pool *p)
{
	if (!meta_pending(p->meta) && !metalog_dirty(p) && !atomic_load(&p->sides_dirty))
		return 0;
	return txg_sync(p, 0);
}

int stor_pool_close(struct stor_pool *p)
{
	int ret;

	if (!p)
		return 0;
	scrub_fini(p);
	rekey_fini(p);
	ret = txg_fini(p);
	pool_free(p);
	return ret;
}

int stor_pool_export(struct stor_pool *p)
{
	int ret;

	if (!p)
		return 0;
	scrub_fini(p);
	rekey_fini(p);
	ret = txg_fini(p);
	/* only a pool whose last txg is on the LUNs is cleanly exported */
	if (ret == 0)
		ret = lunset_mark(p, LABEL_EXPORTED);
	pool_free(p);
	return ret;
}

int stor_pool_destroy(const char *name, const struct stor_pool_opts *opts)
{
	struct stor_pool *p = NULL;
	int ret, r;

	ret = stor_pool_open(name, opts, &p);
	if (ret == -EBUSY || ret == -EINVAL || ret == STOR_EBADNAME)
		return ret;
	if (ret < 0) {
		/* it no longer imports (a LUN missing, metadata damaged): forget
		 * it, and leave its LUNs as they are */
		char *path = statedir_meta_path(opts->state_dir, name);

		if (!path)
			return -ENOMEM;
		ret = access(path, F_OK) < 0 ? -ENOENT /* no such pool */ : statedir_remove_pool(path);
		free(path);
		return ret;
	}
	scrub_fini(p);
	rekey_fini(p);
	ret = lunset_wipe(p);
	r = lunset_remove(p);
	ret = ret < 0 ? ret : r;
	r = statedir_remove_pool(p->path);
	txg_fini(p);
	pool_free(p);
	return ret < 0 ? ret : r;
}

/* The error list, named: the dataset of each entry is looked up here, a
 * layer above the list (dev/errlog.c). */
int stor_pool_errors(struct stor_pool *p, struct stor_pool_error *out, unsigned max,
		     uint64_t *more)
{
	struct errlog_ent e[ERRLOG_MAX];
	unsigned n = errlog_copy(p, e, more);

	if (n > max) {
		*more += n - max;
		n = max;
	}
	pthread_mutex_lock(&p->admin);
	for (unsigned i = 0; i < n; i++) {
		struct stor_ds *ds = ds_find_id_locked(p, e[i].ds_id);

		out[i] = (struct stor_pool_error){ .record = e[i].recno };
		if (ds) {
			snprintf(out[i].dataset, sizeof(out[i].dataset), "%s", ds->name);
			out[i].offset = e[i].recno * ds->recsize;
		} else {
			snprintf(out[i].dataset, sizeof(out[i].dataset), "<dataset %llu, destroyed>",
				 (unsigned long long)e[i].ds_id);
		}
	}
	pthread_mutex_unlock(&p->admin);
	return (int)n;
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
	/* the metadata log is not the datasets' space: counted apart */
	st->meta_used = metalog_sectors(p) * STOR_SECTOR;
	st->used -= st->meta_used < st->used ? st->meta_used : st->used;
	st->txg = atomic_load(&p->synced_txg);
	st->suspended = atomic_load(&p->suspended);
	st->suspend_error = atomic_load(&p->suspend_error);
	if (lunset_fenced(p, st->fenced_by, sizeof(st->fenced_by)))
		st->suspended = STOR_SUSPEND_FENCED;
	snprintf(st->key_file, sizeof(st->key_file), "%s", p->keyfile_note);
	st->bad_frees = alloc_bad_frees(p->alloc);
	metalog_status(p, st->meta_log, sizeof(st->meta_log));
	metalog_counters(p, &st->meta_bytes, &st->meta_records);
	pthread_mutex_lock(&p->admin);
	st->ndatasets = (unsigned)p->nds;
	for (size_t i = 0; i < p->nds; i++)
		st->logical_used += (uint64_t)atomic_load(&p->ds[i]->logical_used);
	pthread_mutex_unlock(&p->admin);
	return 0;
}

