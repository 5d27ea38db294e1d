/* SPDX-License-Identifier: MIT */
/*
 * The LUN set of a pool: p->luns[0, nluns) and what may join it. Import
 * attaches each LUN the pool record names and checks its label; an add
 * takes a path, labels it and publishes it; faults, error counters, clear,
 * per-LUN status and labelclear work on the set; a mirror's sides join it
 * as LUNs of their own that the allocator gives no space (mirror.c says
 * why), and a side that did not open at import joins as a stand-in
 * (lun_absent) that keeps its place, out of service; so does a side whose
 * file was truncated, while a truncated LUN of its own joins cut short
 * (pool_lun.cut). A detached side keeps its index for good as a stand-in
 * in no vdev's list of sides, never opened again (its path may be another
 * LUN's by now); the labels of its vdev's sides name it (format.h), and
 * their width counts only the sides in the list, so any order of detach,
 * attach and replace reads back as it was. Labels only widen before the
 * pool record does (attach) and narrow after (detach): a label wider than
 * its vdev is harmless, a narrower one would refuse a side. lun.c is one
 * LUN and knows no pool; the record naming the set is txg/pool_record.c's,
 * and pool.c orders an add around it (stor_pool_add_lun), so nothing here
 * writes metadata.
 *
 * A LUN of an open pool is claimed (lun.c) until the pool is freed; a
 * claim that must be kept alive (a RADOS LUN's lock) is renewed through
 * stor_pool_renew(). A path
 * becomes a LUN (lun_take) only if it is not a symbolic link, not inside
 * the state directory, and blank or a LUN of a pool with no metadata here;
 * STOR_FORCE lifts all but the state directory and a pool that has
 * metadata. At import one damaged label copy is rewritten from the other,
 * and labels active under another host id refuse the pool unless forced;
 * lunset_mark() then writes who has the pool now (import, create, add) or
 * that it was exported. Every refusal leaves its reason in pool_set_error().
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/events.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "dev/errlog.h"
#include "dev/lun_impl.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "kv/meta.h"
#include "kv/statedir.h"
#include "pool_impl.h"

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

	if (lun_open(path, LUN_PEEK, 0, &l) < 0 || lun_label_read(l, &lab, &bad) < 0)
		pool_set_error("lun %u (%s): in use (claimed by another pool or program, or a "
			       "mounted device)",
			       idx, path);
	else if (lun_path_is_rados(path))
		/* the RADOS lock: a cofferd on some host has the pool */
		pool_set_error("lun %u (%s): locked by a cofferd that has pool '%s' imported (host "
			       "%08x); it must export the pool, or stop and let its lock expire, "
			       "before an import here",
			       idx, path, lab.pool_name, (unsigned)lab.hostid);
	else
		pool_set_error("lun %u (%s): in use by pool '%s'", idx, path, lab.pool_name);
	lun_close(l);
}

/* Why lun_open() of @path failed, as the refusal's reason. */
static void open_error(unsigned idx, const char *path, int ret)
{
	const char *pool = path + strlen(LUN_RADOS_PREFIX);

	if (lun_path_is_rados(path) && ret == -ENOTCONN)
		pool_set_error("lun %u (%s): cannot reach the Ceph cluster (ceph_conf, ceph_user "
			       "and ceph_keyring in cofferd.conf)",
			       idx, path);
	else if (lun_path_is_rados(path) && ret == -ENXIO)
		pool_set_error("lun %u (%s): no pool '%.*s' in the Ceph cluster", idx, path,
			       (int)strcspn(pool, "/"), pool);
	else if (lun_path_is_rados(path) && ret == -EPROTONOSUPPORT)
		pool_set_error("lun %u (%s): this coffer was built without RADOS LUNs (librados)",
			       idx, path);
	else if (lun_path_is_rados(path) && ret == -ENOENT)
		pool_set_error("lun %u (%s): no such LUN in the Ceph pool", idx, path);
	else if (lun_path_is_rados(path) && ret == -EACCES)
		pool_set_error("lun %u (%s): the Ceph cluster refused (the user needs read-write "
			       "OSD caps on the pool, and mon caps to blocklist a holder that "
			       "never let go, as 'profile rbd' gives)",
			       idx, path);
	else
		pool_set_error("lun %u (%s): %s", idx, path, stor_strerror(ret));
}

/* Open an existing LUN @path as lun @idx of @p, the refusal's reason set;
 * a holder that never let go and was fenced off for it is said. */
static int open_lun(struct stor_pool *p, unsigned idx, const char *path, struct lun **l)
{
	char who[192], addr[192];
	const char *w = who, *a = addr; /* EV_STR takes pointers */
	int ret = lun_open(path, lun_flags(p), 0, l);

	if (ret == -EBUSY)
		in_use_error(idx, path);
	else if (ret < 0)
		open_error(idx, path, ret);
	else if (lun_took_over(*l, who, sizeof(who), addr, sizeof(addr)))
		EVENT(STOR_EV_POOL_TAKEOVER, p->name, EV_STR("lun", path),
		      EV_STR("blocklisted", a), EV_STR("previous", w));
	return ret;
}

int lunset_attach(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t end, int mirror)
{
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad = 0;
	uint64_t cut = 0;
	int ret;

	ret = open_lun(p, idx, path, &l);
	if (ret < 0)
		return ret;
	/* a LUN's data only grows: one that ends short of the record's end had its
	 * file truncated, and what lay past the cut (the end label too) is gone */
	if (end > lun_data_size(l) + LUN_DATA_OFF) {
		cut = end;
		if (mirror) {
			pool_set_error("lun %u (%s): truncated: %llu bytes, the pool record gives it "
				       "%llu; its other sides hold its data (replace it)",
				       idx, path, (unsigned long long)lun_size(l),
				       (unsigned long long)(end + LUN_LABEL_SIZE));
			ret = STOR_ECORRUPT;
			goto fail;
		}
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
	/* another host may have it open still: it did not export it */
	if (lab.state != LABEL_EXPORTED && lab.hostid && lab.hostid != stor_hostid() &&
	    !p->opts.force) {
		pool_set_error("pool was last used by host %08x (this host is %08x) and not "
			       "exported; use -f",
			       (unsigned)lab.hostid, (unsigned)stor_hostid());
		ret = STOR_EHOSTID;
		goto fail;
	}
	/* a mirror's sides follow its first LUN; only that one has space */
	if (lab.vdev != idx &&
	    (lab.vdev > idx || p->luns[lab.vdev].vdev != lab.vdev ||
	     p->luns[lab.vdev].nsides >= lab.sides || p->luns[lab.vdev].nsides >= STOR_MIRROR_MAX ||
	     lun_data_size(l) < lun_data_size(p->luns[lab.vdev].lun))) {
		pool_set_error("lun %u (%s): label names it a side of a mirror of %u LUNs from lun "
			       "%u, which the pool does not have",
			       idx, path, lab.sides, lab.vdev);
		ret = STOR_ECORRUPT;
		goto fail;
	}
	ret = alloc_add_lun(p->alloc, lab.vdev == idx ? lun_data_size(l) / STOR_SECTOR : 0);
	if (ret < 0)
		goto fail;
	if (cut)
		alloc_set_cut(p->alloc, idx, (cut - LUN_DATA_OFF) / STOR_SECTOR);
	p->luns[idx].cut = cut;
	mirror_join(p, idx, lab.vdev, lab.vdev == idx ? 0 : p->luns[lab.vdev].nsides);
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

int lunset_absent(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t size, unsigned vdev, const char *why)
{
	struct lun *l;
	int ret;

	/* a later side's place follows its vdev's first LUN, as in lunset_attach */
	if (vdev > idx || (vdev < idx && (p->luns[vdev].vdev != vdev ||
					  (why && p->luns[vdev].nsides >= STOR_MIRROR_MAX))))
		return STOR_ECORRUPT;
	l = lun_absent(path, size + LUN_LABEL_SIZE); /* the record has the data's end */
	if (!l)
		return -ENOMEM;
	/* a side may be larger than the first (lunset_new_side), never smaller */
	if (vdev < idx && lun_data_size(l) < lun_data_size(p->luns[vdev].lun)) {
		lun_close(l);
		return STOR_ECORRUPT;
	}
	p->luns[idx].absent = strdup(why ? why : "detached");
	ret = p->luns[idx].absent ? alloc_add_lun(p->alloc, vdev == idx ? lun_data_size(l) / STOR_SECTOR : 0)
				  : -ENOMEM;
	if (ret < 0) {
		free(p->luns[idx].absent);
		p->luns[idx].absent = NULL;
		lun_close(l);
		return ret;
	}
	/* detached: of its vdev still (the first LUN names it), a side of none */
	if (why)
		mirror_join(p, idx, vdev, vdev == idx ? 0 : p->luns[vdev].nsides);
	else
		p->luns[idx].vdev = vdev;
	p->luns[idx].lun = l;
	p->luns[idx].guid = guid;
	atomic_store(&p->luns[idx].out, SIDE_OUT);
	atomic_store(&p->luns[idx].state, why ? SIDE_FAULTED : SIDE_DETACHED);
	atomic_store(&p->nluns, idx + 1);
	return 0;
}

/*
 * The "sides" row of table "pool": u32 n | n x (u64 the first txg whose
 * writes LUN i may lack, 0 while it lacks none | u32 enum side_state).
 * Written with the txg that follows a change (txg.c calls
 * lunset_save_sides), or at once by a verb that must have it durable before
 * the pool record changes (lunset_write_sides), so the LUNs' log carries it
 * as any pool row. An import keeps out what it names, even when the LUN is
 * back and reads well: it missed writes. A LUN past the row's end is in
 * service (a vdev added since), as is every LUN of a pool without the row.
 */
static void sides_encode(struct stor_pool *p, unsigned n, uint8_t *buf, size_t *len)
{
	uint8_t *w = buf;

	put_u32(&w, n);
	for (unsigned i = 0; i < n; i++) {
		put_u64(&w, atomic_load(&p->luns[i].missing_since));
		put_u32(&w, (uint32_t)atomic_load(&p->luns[i].state));
	}
	*len = (size_t)(w - buf);
}

#define SIDES_ROW_MAX (4 + 12 * STOR_LUNS_MAX)

/* The sides row of @t: *r at its first entry and *n entries (0 without it). */
static int sides_row(struct meta_txn *t, const uint8_t **r, uint32_t *n)
{
	const void *v;
	size_t vlen;
	int ret = meta_get(t, META_POOL, "sides", 5, &v, &vlen);

	*r = NULL;
	*n = 0;
	if (ret == -ENOENT)
		return 0;
	if (ret < 0)
		return ret;
	*r = v;
	if (vlen < 4 || (*n = get_u32(r), vlen != 4 + 12 * (size_t)*n))
		return STOR_ECORRUPT;
	return 0;
}

int lunset_row_detached(struct meta_txn *t, unsigned n, uint8_t *detached)
{
	const uint8_t *r;
	uint32_t rn;
	int ret = sides_row(t, &r, &rn);

	for (unsigned i = 0; ret == 0 && i < n; i++) {
		if (i < rn) {
			get_u64(&r);
			detached[i] = get_u32(&r) == SIDE_DETACHED;
		} else {
			detached[i] = 0;
		}
	}
	return ret;
}

int lunset_load_sides(struct stor_pool *p, struct meta_txn *t, uint64_t txg)
{
	unsigned nluns = atomic_load(&p->nluns);
	const uint8_t *r = NULL;
	uint32_t n = 0;
	int ret = sides_row(t, &r, &n);

	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < nluns; i++) {
		uint64_t since = i < n ? get_u64(&r) : 0;
		uint32_t state = i < n ? get_u32(&r) : SIDE_ONLINE;

		if (state > SIDE_DETACHED)
			return STOR_ECORRUPT;
		if (state == SIDE_DETACHED)
			lunset_drop_side(p, i);
		if (p->luns[i].absent && (state == SIDE_ONLINE || state == SIDE_RESILVERING)) {
			/* in service until this import found it gone: it may lack
			 * the last txg, if that one's writes did not all land */
			state = SIDE_FAULTED;
			since = since ? since : txg ? txg : 1;
			atomic_store(&p->sides_dirty, 1);
		}
		atomic_store(&p->luns[i].missing_since, since);
		atomic_store(&p->luns[i].state, (int)state);
		atomic_store(&p->luns[i].out, state == SIDE_ONLINE	    ? SIDE_IN
					      : state == SIDE_RESILVERING ? SIDE_CATCHING_UP
									  : SIDE_OUT);
	}
	return 0;
}

int lunset_save_sides(struct stor_pool *p, struct meta_txn *t)
{
	uint8_t buf[SIDES_ROW_MAX];
	size_t len;
	int ret;

	if (!atomic_exchange(&p->sides_dirty, 0))
		return 0;
	sides_encode(p, atomic_load(&p->nluns), buf, &len);
	ret = meta_put(t, META_POOL, "sides", 5, buf, len);
	if (ret < 0)
		lunset_sides_undo(p);
	return ret < 0 ? ret : 1;
}

int lunset_write_sides(struct stor_pool *p, unsigned n)
{
	uint8_t buf[SIDES_ROW_MAX];
	struct meta_txn *t = NULL;
	size_t len;
	int ret;

	STOR_ASSERT_HELD(&p->commit_lock);
	sides_encode(p, n, buf, &len);
	ret = meta_txn_begin(p->meta, &t);
	if (ret == 0)
		ret = meta_put(t, META_POOL, "sides", 5, buf, len);
	if (ret == 0) {
		ret = meta_txn_commit(t);
		t = NULL;
	}
	meta_txn_abort(t);
	return ret;
}

void lunset_drop_side(struct stor_pool *p, unsigned idx)
{
	struct pool_lun *first = &p->luns[p->luns[idx].vdev];
	unsigned k = 0;

	for (unsigned s = 0; s < first->nsides; s++)
		if (first->side[s] != idx)
			first->side[k++] = first->side[s];
	first->nsides = k;
	atomic_store(&p->luns[idx].out, SIDE_OUT);
	atomic_store(&p->luns[idx].state, SIDE_DETACHED);
}

void lunset_sides_undo(struct stor_pool *p)
{
	atomic_store(&p->sides_dirty, 1);
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
		/* a RADOS LUN ("rados:...") is in no directory */
		ret = real[0] == '/' &&
		      (n == 1 || (!strncmp(real, rdir, n) && (real[n] == '/' || real[n] == '\0')));
	free(rdir);
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
	if (ret == -EINVAL) {
		pool_set_error("lun %u (%s): a LUN must be at least %lluM", idx, path,
			       (unsigned long long)((LUN_MIN_SIZE + (1u << 20) - 1) >> 20));
		return ret;
	}
	if (ret < 0) {
		open_error(idx, path, ret);
		return ret;
	}
	state = statedir_of(p->path, p->name);
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
		ret = statedir_has_pool(state, lab.pool_name);
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
		lun_discard(l); /* a file made for nothing goes again */
	} else {
		*out = l;
	}
	return ret;
}

int lunset_prepare(struct stor_pool *p, const char *path, uint64_t size, unsigned flags,
		   const struct lunset_new *prev, unsigned side, unsigned sides,
		   struct lunset_new *n)
{
	struct lun_label lab = { 0 };
	unsigned vdev;
	int ret;

	STOR_ASSERT_HELD(&p->admin);
	*n = (struct lunset_new){ .idx = prev ? prev->idx + 1 : atomic_load(&p->nluns) };
	ret = n->idx >= STOR_LUNS_MAX ? -E2BIG : lun_take(p, n->idx, path, size, flags, &n->lun);
	if (ret < 0)
		return ret;
	vdev = side ? p->luns[prev->idx].vdev : n->idx;
	if (side && lun_data_size(n->lun) != lun_data_size(p->luns[vdev].lun)) {
		pool_set_error("lun %u (%s): %llu bytes of data, but the mirror's first side (%s) "
			       "has %llu; the sides of a mirror are of one size",
			       n->idx, path, (unsigned long long)lun_data_size(n->lun),
			       lun_path(p->luns[vdev].lun),
			       (unsigned long long)lun_data_size(p->luns[vdev].lun));
		ret = -EINVAL;
		goto fail;
	}
	lab.vdev = vdev;
	lab.sides = sides;
	lab.index = n->idx;
	lab.pool_guid = p->guid;
	ret = keys_random(&lab.lun_guid, sizeof(lab.lun_guid));
	if (ret < 0)
		goto fail;
	lab.size = lun_size(n->lun);
	lab.nluns = n->idx + 1;
	snprintf(lab.pool_name, sizeof(lab.pool_name), "%s", p->name);
	lab.hostid = stor_hostid();
	lab.state = LABEL_ACTIVE;
	ret = alloc_lun_new(side ? 0 : lun_data_size(n->lun) / STOR_SECTOR, &n->free);
	if (ret == 0)
		ret = lun_label_write(n->lun, &lab);
	if (ret < 0)
		goto fail;
	n->labelled = 1;
	p->luns[n->idx].lun = n->lun; /* not visible before nluns says so */
	p->luns[n->idx].guid = lab.lun_guid;
	/* in service, whatever an attach that failed left in this slot */
	atomic_store(&p->luns[n->idx].missing_since, 0);
	atomic_store(&p->luns[n->idx].state, SIDE_ONLINE);
	atomic_store(&p->luns[n->idx].out, SIDE_IN);
	mirror_join(p, n->idx, vdev, side);
	return 0;
fail:
	lunset_abandon(p, n);
	return ret;
}

void lunset_publish(struct stor_pool *p, struct lunset_new *n)
{
	atomic_store(&p->nluns, n->idx + 1);
	alloc_publish_lun(p->alloc, n->free);
	*n = (struct lunset_new){ 0 };
}

void lunset_abandon(struct stor_pool *p, struct lunset_new *n)
{
	if (n->idx < STOR_LUNS_MAX) {
		struct pool_lun *l = &p->luns[n->idx];

		/* a vdev is abandoned whole: its first LUN forgets its sides */
		l->lun = NULL;
		if (l->vdev == n->idx)
			l->nsides = 0;
	}
	alloc_lun_free(n->free);
	if (n->lun && n->labelled)
		lun_label_wipe(n->lun);
	lun_close(n->lun);
	*n = (struct lunset_new){ 0 };
}

void lunset_close(struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		lun_close(p->luns[i].lun);
		free(p->luns[i].absent);
		p->luns[i].absent = NULL;
	}
	for (size_t i = 0; i < p->nretired; i++) {
		lun_close(p->retired[i]);
		free(p->retired_why[i]);
	}
	free(p->retired);
	free(p->retired_why);
	p->nretired = 0;
}

int lunset_retire(struct stor_pool *p, struct lun *l, char *why)
{
	struct lun **r = realloc(p->retired, (p->nretired + 1) * sizeof(*r));
	char **w;

	if (r)
		p->retired = r;
	w = r ? realloc(p->retired_why, (p->nretired + 1) * sizeof(*w)) : NULL;
	if (!w)
		return -ENOMEM;
	p->retired_why = w;
	p->retired[p->nretired] = l;
	p->retired_why[p->nretired++] = why;
	return 0;
}

/* The detached LUNs of vdev @vdev, as a label's bitmap (format.h). */
static void vdev_detached(struct stor_pool *p, unsigned vdev, uint8_t bits[LABEL_DETACHED_LEN])
{
	unsigned n = atomic_load(&p->nluns);

	memset(bits, 0, LABEL_DETACHED_LEN);
	for (unsigned j = 0; j < n; j++)
		if (p->luns[j].vdev == vdev && atomic_load(&p->luns[j].state) == SIDE_DETACHED)
			bits[j / 8] |= (uint8_t)(1u << j % 8);
}

/* The vdev of LUN @idx as its label says it: first LUN, width, detached. */
static void label_layout(struct stor_pool *p, unsigned idx, struct lun_label *lab)
{
	unsigned vdev = p->luns[idx].vdev;

	lab->vdev = vdev;
	lab->sides = p->luns[vdev].nsides ? p->luns[vdev].nsides : 1;
	vdev_detached(p, vdev, lab->detached);
}

int lunset_mark(struct stor_pool *p, unsigned state)
{
	unsigned n = atomic_load(&p->nluns);
	uint32_t host = stor_hostid();
	int ret = 0;

	for (unsigned i = 0; ret == 0 && i < n; i++) {
		struct lun_label lab;
		unsigned bad;

		if (p->luns[i].absent)
			continue; /* not there, or not ours to write */
		ret = lun_label_read(p->luns[i].lun, &lab, &bad);
		if (ret < 0) {
			pool_set_error("lun %u (%s): label: %s", i, lun_path(p->luns[i].lun),
				       stor_strerror(ret));
			break;
		}
		lab.hostid = host;
		lab.state = state;
		lab.nluns = n;
		/* the layout as the pool has it: an older label may be wider */
		label_layout(p, i, &lab);
		snprintf(lab.pool_name, sizeof(lab.pool_name), "%s", p->name);
		ret = lun_label_write(p->luns[i].lun, &lab);
		if (ret < 0)
			pool_set_error("lun %u (%s): label write: %s", i, lun_path(p->luns[i].lun),
				       stor_strerror(ret));
	}
	return ret;
}

int lunset_wipe(struct stor_pool *p)
{
	int ret = 0;

	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		int r = p->luns[i].absent ? 0 : lun_label_wipe(p->luns[i].lun);
		if (r < 0 && ret == 0)
			ret = r;
	}
	return ret;
}

struct remove_progress {
	struct stor_pool *p;
	uint64_t last_ns;
};

/* A lun.remove event at most once a second, and at the end. */
static void remove_progress(void *ctx, struct lun *l, uint64_t done, uint64_t total)
{
	struct remove_progress *rp = ctx;
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (done < total && now - rp->last_ns < 1000000000u)
		return;
	rp->last_ns = now;
	EVENT(STOR_EV_LUN_REMOVE, rp->p->name, EV_STR("lun", lun_path(l)),
	      EV_NUM("removed", done), EV_NUM("objects", total));
}

int lunset_remove(struct stor_pool *p)
{
	struct remove_progress rp = { .p = p };
	int ret = 0;

	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		int r = p->luns[i].absent ? 0 : lun_remove(p->luns[i].lun, remove_progress, &rp);

		if (r < 0 && ret == 0)
			ret = r;
	}
	return ret;
}

int stor_pool_renew(struct stor_pool *p)
{
	int failed = 0;
	char buf[256];
	const char *why = buf; /* EV_STR takes pointers */

	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		if (p->luns[i].absent)
			continue;
		failed += lun_renew(p->luns[i].lun) < 0;
		/* taken over: nothing written here may land any more, so say it
		 * now rather than at the next commit's failed flush */
		if (lun_fenced(p->luns[i].lun, buf, sizeof(buf)) &&
		    atomic_exchange(&p->suspended, STOR_SUSPEND_LUN) != STOR_SUSPEND_LUN) {
			atomic_store(&p->suspend_error, -ENOLCK);
			EVENT(STOR_EV_POOL_SUSPEND, p->name, EV_STR("reason", "fenced"),
			      EV_STR("lun", lun_path(p->luns[i].lun)), EV_STR("error", why));
		}
	}
	return failed;
}

int lunset_fenced(struct stor_pool *p, char *why, size_t len)
{
	char w[256];

	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (!p->luns[i].absent && lun_fenced(p->luns[i].lun, w, sizeof(w))) {
			snprintf(why, len, "%s: %s", lun_path(p->luns[i].lun), w);
			return 1;
		}
	return 0;
}

void lunset_check_gone(struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (atomic_load(&p->luns[i].out) != SIDE_OUT && lun_unlinked(p->luns[i].lun))
			mirror_side_gone(p, i); /* a side with a sound sibling goes out */
}

void lunset_note_health(struct stor_pool *p)
{
	unsigned n = atomic_load(&p->nluns);
	int degraded = 0, was;

	/* as pool status has it: a LUN faulted (a side out of service, or one
	 * past its error budget) that is still part of the pool */
	for (unsigned i = 0; i < n && !degraded; i++) {
		struct lun_counters c;

		if (atomic_load(&p->luns[i].state) == SIDE_DETACHED)
			continue;
		lun_counters(p->luns[i].lun, &c);
		degraded = atomic_load(&p->luns[i].out) != SIDE_IN ||
			   c.read_errors + c.write_errors >= STOR_LUN_FAULT_ERRORS;
	}
	was = atomic_exchange(&p->degraded, degraded);
	if (was != degraded)
		EVENT(STOR_EV_POOL_STATE, p->name, EV_STR("state", degraded ? "DEGRADED" : "ONLINE"),
		      EV_STR("old_state", was ? "DEGRADED" : "ONLINE"));
}

void lunset_failed(struct stor_pool *p, struct lun *l)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++) {
		struct lun_counters c;

		if (p->luns[i].lun != l)
			continue;
		/* a mirror side with a sound sibling goes out; the last one
		 * stops new data on its vdev as a LUN of its own does */
		if (mirror_side_failed(p, i, 0))
			return;
		lun_counters(l, &c);
		if (c.read_errors + c.write_errors >= STOR_LUN_FAULT_ERRORS &&
		    alloc_set_faulted(p->alloc, p->luns[i].vdev)) {
			/* once, as it goes: the errors past the budget say nothing new */
			EVENT(STOR_EV_LUN_FAULT, p->name, EV_STR("lun", lun_path(l)),
			      EV_NUM("vdev", p->luns[i].vdev), EV_STR("state", "FAULTED"),
			      EV_STR("old_state", "ONLINE"), EV_STR("reason", "too many I/O errors"),
			      EV_NUM("read_errors", c.read_errors),
			      EV_NUM("write_errors", c.write_errors));
			lunset_note_health(p);
		}
		return;
	}
}

int lunset_new_side(struct stor_pool *p, unsigned idx, const char *path, unsigned flags,
		    unsigned vdev, unsigned sides, struct lun **out, uint64_t *guid)
{
	struct lun_label lab = { 0 };
	uint64_t want = lun_data_size(p->luns[vdev].lun);
	struct lun *l = NULL;
	int ret;

	STOR_ASSERT_HELD(&p->admin);
	*out = NULL;
	/* a file made here is made the size of the side it joins */
	ret = lun_take(p, idx, path, want + LUN_DATA_OFF + LUN_LABEL_SIZE, flags, &l);
	if (ret < 0)
		return ret;
	if (lun_data_size(l) < want) {
		pool_set_error("lun %u (%s): %llu bytes of data, smaller than the mirror's %llu",
			       idx, path, (unsigned long long)lun_data_size(l),
			       (unsigned long long)want);
		ret = -EINVAL;
		goto fail;
	}
	lab.vdev = vdev;
	lab.sides = sides;
	vdev_detached(p, vdev, lab.detached);
	lab.index = idx;
	lab.pool_guid = p->guid;
	ret = keys_random(&lab.lun_guid, sizeof(lab.lun_guid));
	if (ret < 0)
		goto fail;
	lab.size = lun_size(l);
	lab.nluns = atomic_load(&p->nluns) > idx ? atomic_load(&p->nluns) : idx + 1;
	snprintf(lab.pool_name, sizeof(lab.pool_name), "%s", p->name);
	lab.hostid = stor_hostid();
	lab.state = LABEL_ACTIVE;
	ret = lun_label_write(l, &lab);
	if (ret < 0) {
		pool_set_error("lun %u (%s): label write: %s", idx, path, stor_strerror(ret));
		goto fail;
	}
	*out = l;
	*guid = lab.lun_guid;
	return 0;
fail:
	lun_discard(l);
	return ret;
}

int lunset_relabel_width(struct stor_pool *p, unsigned vdev, unsigned sides)
{
	const struct pool_lun *first = &p->luns[vdev];
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);
	for (unsigned s = 0; s < first->nsides && ret == 0; s++) {
		struct pool_lun *l = &p->luns[first->side[s]];
		struct lun_label lab;
		unsigned bad;

		if (l->absent || atomic_load(&l->state) == SIDE_DETACHED)
			continue;
		ret = lun_label_read(l->lun, &lab, &bad);
		if (ret == 0) {
			lab.vdev = vdev;
			lab.sides = sides;
			vdev_detached(p, vdev, lab.detached);
			ret = lun_label_write(l->lun, &lab);
		}
		if (ret < 0)
			pool_set_error("lun %u (%s): label: %s", first->side[s], lun_path(l->lun),
				       stor_strerror(ret));
	}
	return ret;
}

int lunset_reopen(struct stor_pool *p, unsigned idx, struct lun **out)
{
	struct pool_lun *pl = &p->luns[idx];
	const char *path = lun_path(pl->lun);
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad;
	int ret;

	*out = NULL;
	ret = open_lun(p, idx, path, &l);
	if (ret < 0)
		return ret;
	ret = lun_label_read(l, &lab, &bad);
	if (ret == 0 && (lab.pool_guid != p->guid || lab.lun_guid != pl->guid || lab.index != idx))
		ret = STOR_EFOREIGN;
	if (ret == 0 && lun_data_size(l) < lun_data_size(pl->lun))
		ret = -EINVAL;
	if (ret < 0) {
		pool_set_error("lun %u (%s): %s", idx, path,
			       ret == STOR_EFOREIGN ? "its label is not this LUN's (replace it)"
			       : ret == -EINVAL	    ? "smaller than the mirror's sides"
						    : stor_strerror(ret));
		lun_close(l);
		return ret;
	}
	if (bad)
		lun_label_repair(l, &lab, bad);
	*out = l;
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
	st->vdev = p->luns[idx].vdev;
	st->sides = p->luns[st->vdev].nsides ? p->luns[st->vdev].nsides : 1;
	for (unsigned s = 0; s < st->sides; s++)
		if (p->luns[st->vdev].side[s] == idx)
			st->side = s;
	st->repaired = atomic_load(&p->luns[idx].repaired);
	/* every side holds what its vdev's first LUN has allocated */
	alloc_usage(p->alloc, st->vdev, &used, &total);
	st->size = total * STOR_SECTOR;
	st->used = used * STOR_SECTOR;
	lun_counters(p->luns[idx].lun, &c);
	st->read_errors = c.read_errors;
	st->write_errors = c.write_errors;
	st->nospace_errors = c.nospace_errors;
	st->cksum_errors = atomic_load(&p->luns[idx].cksum_errors);
	st->faulted = c.read_errors + c.write_errors >= STOR_LUN_FAULT_ERRORS ||
		      atomic_load(&p->luns[idx].out);
	st->state = atomic_load(&p->luns[idx].state);
	st->missing_since = atomic_load(&p->luns[idx].missing_since);
	if (p->luns[idx].absent)
		snprintf(st->absent, sizeof(st->absent), "%s", p->luns[idx].absent);
	st->label_damaged = p->luns[idx].label_damaged;
	st->label_repaired = p->luns[idx].label_repaired;
	if (p->luns[idx].cut)
		st->truncated_from = p->luns[idx].cut - LUN_DATA_OFF;
	return 0;
}

const char *stor_lun_state_name(const struct stor_lun_stat *st)
{
	static const char *const side[] = { "ONLINE", "FAULTED", "OFFLINE", "RESILVERING",
					    "DETACHED" };

	if (st->absent[0] && st->state != STOR_SIDE_DETACHED)
		return "UNAVAIL";
	if (st->state == STOR_SIDE_ONLINE && st->faulted)
		return "FAULTED";
	return st->state >= 0 && st->state <= STOR_SIDE_DETACHED ? side[st->state] : "FAULTED";
}

int stor_pool_lun_iostat(struct stor_pool *p, unsigned idx, struct stor_lun_iostat *st)
{
	if (idx >= atomic_load(&p->nluns))
		return -ENOENT;
	lun_iostat(p->luns[idx].lun, st);
	return 0;
}

/* LUN @lun of @p by path or by index ("0", "1"...); -1 if none. */
int lunset_index(struct stor_pool *p, const char *lun)
{
	unsigned n = atomic_load(&p->nluns);
	char *end;
	unsigned long i;

	/* a detached LUN's file may have joined again, at another index */
	for (unsigned k = 0; k < n; k++)
		if (!strcmp(lun_path(p->luns[k].lun), lun) &&
		    atomic_load(&p->luns[k].state) != SIDE_DETACHED)
			return (int)k;
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
		only = lunset_index(p, lun);
		if (only < 0) {
			pool_set_error("pool %s: no LUN '%s'", p->name, lun);
			return -ENOENT;
		}
	}
	if (only < 0)
		errlog_clear(p); /* the pool's: records with errors are forgotten too */
	for (unsigned i = 0; i < n; i++) {
		if (only >= 0 && i != (unsigned)only)
			continue;
		/* counters first: a fault decided meanwhile sees them at zero */
		lun_counters_reset(p->luns[i].lun);
		atomic_store(&p->luns[i].cksum_errors, 0);
		atomic_store(&p->luns[i].repaired, 0);
		alloc_clear_faulted(p->alloc, i);
	}
	lunset_note_health(p);
	return 0;
}

int stor_lun_labelclear(const char *path, const struct stor_pool_opts *opts, unsigned flags)
{
	int force = (flags & STOR_FORCE) != 0;
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad;
	int ret;

	pool_clear_error();
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
		ret = statedir_has_pool(opts->state_dir, lab.pool_name);
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
	if (ret < 0 && !pool_error_set())
		pool_set_error("%s: %s", path, stor_strerror(ret));
out:
	lun_close(l);
	return ret;
}
