/* SPDX-License-Identifier: MIT */
/*
 * Sides of a mirror leaving service and coming back, after OpenZFS's DTLs
 * (vdev.c) and its resilver (dsl_scan.c), much reduced.
 *
 * What a side lacks is one number, missing_since: the first txg whose
 * writes it may not have (a DTL of one open range, "from txg X on"). It is
 * set when the side goes out (a failed write, an import without it,
 * offline) and kept in the sides row (lunset.c), so a side stays out across
 * imports however well it reads. Replace and attach bring a side that lacks
 * everything: missing since txg 1.
 *
 * Coming back (online, replace, attach), the side is catching up
 * (SIDE_CATCHING_UP, mirror.c): every new write goes to it, so what it
 * lacks can only shrink, and nothing reads it. It flips with the txg hold
 * taken for writing: each write chose its sides either before, and is in a
 * txg committed before the walk starts (its pointer is then in LMDB), or
 * after, and includes it. The resilver is scrub.c's walk with another
 * action: each extent born at or after missing_since is copied from a
 * sound side (mirror_resilver_extent), every extent when a rekey sealed
 * records again since (they keep their birth: rekey_sealed_since); then resilver_done() copies the
 * metadata log's extents and, under the commit lock, puts the sides in
 * service; the commit after writes their uberblocks. A side that fails
 * meanwhile goes out again. A restart goes on: the sides row says which
 * sides catch up, the scan row where the walk was (a walk starts over when
 * another side begins catching up, as ZFS's resilver restarts).
 *
 * Durable order for replace and attach: the sides row naming the side as
 * resilvering since txg 1 commits first, then the pool record naming the
 * new LUN; a crash between leaves an old LUN resilvered whole, never a new
 * one taken as sound. A detached side keeps its index (block pointers and
 * log copies name LUNs by index) as a stand-in, DETACHED, its label wiped;
 * the sides left are relabelled without it once the txg after the detach
 * has it on the LUNs (the sides row is what an import goes by).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "dev/alloc.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "ds/rekey.h"
#include "pool/resilver.h"
#include "pool/scrub.h"
#include "pool_impl.h"
#include "txg/metalog.h"
#include "txg/pool_record.h"
#include "txg/txg.h"

/* Sides of @idx's vdev other than @idx that hold every write. */
static unsigned sound_others(struct stor_pool *p, unsigned idx)
{
	unsigned sides[STOR_MIRROR_MAX], n = mirror_sound_sides(p, p->luns[idx].vdev, sides), k = 0;

	for (unsigned s = 0; s < n; s++)
		k += sides[s] != idx;
	return k;
}

/* Set side @idx's I/O and state with no write between choosing its sides
 * and staging (the hold taken for writing). */
static void flip(struct stor_pool *p, unsigned idx, int out, int state, uint64_t since)
{
	int old;

	pthread_rwlock_wrlock(&p->hold);
	atomic_store(&p->luns[idx].missing_since, since);
	old = atomic_exchange(&p->luns[idx].state, state);
	atomic_store(&p->luns[idx].out, out);
	atomic_store(&p->sides_dirty, 1);
	pthread_rwlock_unlock(&p->hold);
	mirror_state_event(p, idx, old, state, NULL);
}

/* Side @idx takes writes from now on and waits for the resilver; commit
 * lock held, so resilver_done() cannot put it in service unwalked. */
static void catch_up(struct stor_pool *p, unsigned idx, uint64_t since)
{
	STOR_ASSERT_HELD(&p->commit_lock);

	/* a rekey meanwhile wrote records of older births: they go too */
	if (since > 1 && rekey_sealed_since(p, since))
		since = 1;
	atomic_store(&p->resilver_asked, 1);
	flip(p, idx, SIDE_CATCHING_UP, SIDE_RESILVERING, since ? since : 1);
}

/* The txgs committed so far are on the sides that had them; start the walk. */
static int start(struct stor_pool *p)
{
	int ret = txg_sync(p, 0);

	if (ret == 0)
		ret = scan_resilver(p);
	return ret;
}

/* LUN @name as a side of a mirror; -errno with a text when it is none. */
static int side_of(struct stor_pool *p, const char *name, int need_mirror)
{
	int idx = lunset_index(p, name);

	if (idx < 0 || atomic_load(&p->luns[idx].state) == SIDE_DETACHED) {
		pool_set_error("pool %s: no LUN '%s'", p->name, name);
		return -ENOENT;
	}
	if (need_mirror && !mirror_is_side(p, (unsigned)idx)) {
		pool_set_error("pool %s: lun %d (%s) is no side of a mirror: it holds the only "
			       "copy of its data (attach a LUN to it first)",
			       p->name, idx, lun_path(p->luns[idx].lun));
		return -EINVAL;
	}
	return idx;
}

int resilver_wanted(struct stor_pool *p)
{
	for (unsigned i = 0; i < atomic_load(&p->nluns); i++)
		if (atomic_load(&p->luns[i].out) == SIDE_CATCHING_UP)
			return 1;
	return 0;
}

static int copy_log_extent(unsigned lun, uint64_t sector, uint32_t n, void *ctx)
{
	mirror_copy_raw(ctx, lun, sector, n); /* a copy it misses, the others hold */
	return 0;
}

void resilver_done(struct stor_pool *p)
{
	unsigned nluns = atomic_load(&p->nluns);
	int any = 0;

	/* no commit meanwhile: the log's extents stay where they are */
	pthread_mutex_lock(&p->commit_lock);
	if (atomic_load(&p->resilver_asked)) {
		pthread_mutex_unlock(&p->commit_lock);
		return; /* a side began catching up since the walk started */
	}
	metalog_extents(p, copy_log_extent, p);
	for (unsigned i = 0; i < nluns; i++) {
		if (atomic_load(&p->luns[i].out) != SIDE_CATCHING_UP)
			continue;
		if (lun_flush(p->luns[i].lun) < 0) {
			mirror_side_failed(p, i, 1);
			continue;
		}
		flip(p, i, SIDE_IN, SIDE_ONLINE, 0);
		any = 1;
	}
	pthread_mutex_unlock(&p->commit_lock);
	if (any)
		txg_sync(p, 0); /* the sides row, and their uberblocks */
}

/* A side in service that no other side backs is refused going out (-EBUSY). */
static int only_sound_side(struct stor_pool *p, int idx)
{
	if (atomic_load(&p->luns[idx].out) != SIDE_IN || sound_others(p, (unsigned)idx))
		return 0;
	pool_set_error("pool %s: lun %d (%s) is the only side of its mirror that holds every "
		       "write; bring another side online, or attach one, first",
		       p->name, idx, lun_path(p->luns[idx].lun));
	return -EBUSY;
}

int stor_pool_offline(struct stor_pool *p, const char *lun)
{
	int idx, ret = 0;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = side_of(p, lun, 1);
	ret = idx < 0 ? idx : only_sound_side(p, idx);
	if (ret == 0 && atomic_load(&p->luns[idx].state) != SIDE_OFFLINE) {
		uint64_t since = atomic_load(&p->luns[idx].missing_since);

		/* a write staged before the flip is in a txg after synced_txg */
		flip(p, (unsigned)idx, SIDE_OUT, SIDE_OFFLINE,
		     since ? since : atomic_load(&p->synced_txg) + 1);
	}
	pthread_mutex_unlock(&p->admin);
	return ret < 0 ? ret : txg_sync(p, 0);
}

int stor_pool_online(struct stor_pool *p, const char *lun)
{
	struct lun *l = NULL;
	int idx, ret = 0, state;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = side_of(p, lun, 0); /* a LUN of its own is always in service */
	if (idx < 0) {
		pthread_mutex_unlock(&p->admin);
		return idx;
	}
	state = atomic_load(&p->luns[idx].state);
	if (state == SIDE_ONLINE || state == SIDE_RESILVERING) {
		pthread_mutex_unlock(&p->admin);
		return 0;
	}
	/* not there at import, or its file deleted since: open its path again */
	if (p->luns[idx].absent || lun_unlinked(p->luns[idx].lun))
		ret = lunset_reopen(p, (unsigned)idx, &l);
	if (ret == 0) {
		struct pool_lun *pl = &p->luns[idx];

		pthread_mutex_lock(&p->commit_lock);
		if (l) {
			/* a status call may hold the stand-in: kept to the close */
			ret = lunset_retire(p, pl->lun, pl->absent);
			if (ret == 0) {
				pl->lun = l;
				pl->absent = NULL;
				l = NULL;
			}
		}
		if (ret == 0) {
			lun_counters_reset(pl->lun);
			atomic_store(&pl->cksum_errors, 0);
			catch_up(p, (unsigned)idx, atomic_load(&pl->missing_since));
		}
		pthread_mutex_unlock(&p->commit_lock);
	}
	lun_close(l);
	if (ret == 0)
		lunset_mark(p, LABEL_ACTIVE); /* its label: who has it now */
	pthread_mutex_unlock(&p->admin);
	return ret < 0 ? ret : start(p);
}

int stor_pool_replace(struct stor_pool *p, const char *old, const char *new_lun, unsigned flags)
{
	struct lun *l = NULL, *was;
	uint64_t guid, was_guid;
	char *why;
	int idx, ret, state;
	unsigned vdev;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = side_of(p, old, 1);
	if (idx < 0) {
		pthread_mutex_unlock(&p->admin);
		return idx;
	}
	if (!sound_others(p, (unsigned)idx)) {
		pool_set_error("pool %s: lun %d (%s) is the only side of its mirror that holds "
			       "every write; attach %s to it instead",
			       p->name, idx, lun_path(p->luns[idx].lun), new_lun);
		pthread_mutex_unlock(&p->admin);
		return -EBUSY;
	}
	vdev = p->luns[idx].vdev;
	ret = lunset_new_side(p, (unsigned)idx, new_lun, flags, vdev, p->luns[vdev].nsides, &l,
			      &guid);
	if (ret < 0) {
		pthread_mutex_unlock(&p->admin);
		return ret;
	}
	pthread_mutex_lock(&p->commit_lock);
	state = atomic_load(&p->luns[idx].state);
	/* out, and lacking everything, durable before the record names @new_lun */
	flip(p, (unsigned)idx, SIDE_OUT, SIDE_RESILVERING, 1);
	ret = lunset_write_sides(p, atomic_load(&p->nluns));
	was = p->luns[idx].lun;
	was_guid = p->luns[idx].guid;
	why = p->luns[idx].absent;
	if (ret == 0) {
		p->luns[idx].lun = l;
		p->luns[idx].guid = guid;
		p->luns[idx].absent = NULL;
		ret = pool_save_config(p);
		if (ret < 0) {
			p->luns[idx].lun = was;
			p->luns[idx].guid = was_guid;
			p->luns[idx].absent = why;
		}
	}
	if (ret < 0) {
		/* still out: it may have missed writes since the flip */
		flip(p, (unsigned)idx, SIDE_OUT, state == SIDE_ONLINE ? SIDE_FAULTED : state, 1);
		lun_label_wipe(l);
		lun_close(l);
		if (!pool_error_set())
			pool_set_error("pool %s: replace: %s", p->name, stor_strerror(ret));
	} else {
		if (!why)
			lun_label_wipe(was); /* no longer this pool's LUN */
		if (lunset_retire(p, was, why) < 0) {
			lun_close(was);
			free(why);
		}
		lun_counters_reset(l);
		atomic_store(&p->luns[idx].cksum_errors, 0);
		atomic_store(&p->luns[idx].repaired, 0);
		catch_up(p, (unsigned)idx, 1);
	}
	pthread_mutex_unlock(&p->commit_lock);
	pthread_mutex_unlock(&p->admin);
	return ret < 0 ? ret : start(p);
}

int stor_pool_attach(struct stor_pool *p, const char *existing, const char *new_lun,
		     unsigned flags)
{
	struct lunset_new n = { 0 };
	unsigned sides[STOR_MIRROR_MAX], vdev, width;
	int idx, ret;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = side_of(p, existing, 0);
	if (idx < 0) {
		pthread_mutex_unlock(&p->admin);
		return idx;
	}
	vdev = p->luns[idx].vdev;
	width = p->luns[vdev].nsides ? p->luns[vdev].nsides : 1;
	n.idx = atomic_load(&p->nluns);
	ret = width >= STOR_MIRROR_MAX || n.idx >= STOR_LUNS_MAX ? -E2BIG : 0;
	if (ret < 0)
		pool_set_error("pool %s: %s", p->name,
			       width >= STOR_MIRROR_MAX ? "a mirror has 3 sides at most"
							: "no room for another LUN");
	else if (!mirror_sound_sides(p, vdev, sides))
		ret = -EIO;
	if (ret == 0)
		ret = lunset_new_side(p, n.idx, new_lun, flags, vdev, width + 1, &n.lun,
				      &p->luns[n.idx].guid);
	if (ret == 0)
		ret = alloc_lun_new(0, &n.free);
	if (ret < 0) {
		if (n.lun) {
			lun_label_wipe(n.lun);
			lun_close(n.lun);
		}
		pthread_mutex_unlock(&p->admin);
		return ret;
	}
	n.labelled = 1;
	pthread_mutex_lock(&p->commit_lock);
	{
		struct pool_lun *pl = &p->luns[n.idx];

		pl->lun = n.lun;
		pl->absent = NULL;
		atomic_store(&pl->cksum_errors, 0);
		atomic_store(&pl->repaired, 0);
		/* out until the record names it; then it catches up */
		pthread_rwlock_wrlock(&p->hold);
		atomic_store(&pl->out, SIDE_OUT);
		atomic_store(&pl->state, SIDE_RESILVERING);
		atomic_store(&pl->missing_since, 1);
		mirror_join(p, n.idx, vdev, width);
		pthread_rwlock_unlock(&p->hold);
	}
	ret = lunset_write_sides(p, n.idx + 1);
	if (ret == 0)
		ret = pool_save_config_n(p, n.idx + 1);
	if (ret < 0) {
		pthread_rwlock_wrlock(&p->hold);
		p->luns[vdev].nsides = width; /* the side joined last goes */
		pthread_rwlock_unlock(&p->hold);
		lunset_abandon(p, &n);
		atomic_store(&p->sides_dirty, 1); /* a row that named it: rewritten */
		pthread_mutex_unlock(&p->commit_lock);
		pthread_mutex_unlock(&p->admin);
		if (!pool_error_set())
			pool_set_error("pool %s: attach: %s", p->name, stor_strerror(ret));
		return ret;
	}
	idx = (int)n.idx;
	lunset_publish(p, &n);
	/* a LUN of its own becomes a mirror: its label says so (version 5) */
	lunset_relabel_width(p, vdev, width + 1);
	catch_up(p, (unsigned)idx, 1);
	pthread_mutex_unlock(&p->commit_lock);
	lunset_mark(p, LABEL_ACTIVE); /* every label counts the new LUN */
	pthread_mutex_unlock(&p->admin);
	return start(p);
}

int stor_pool_detach(struct stor_pool *p, const char *lun)
{
	struct lun *stand = NULL;
	struct pool_lun *pl;
	char *why = NULL;
	int idx, ret = 0, old;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = side_of(p, lun, 1);
	if (idx < 0) {
		pthread_mutex_unlock(&p->admin);
		return idx;
	}
	pl = &p->luns[idx];
	ret = only_sound_side(p, idx);
	if (ret < 0) {
		pthread_mutex_unlock(&p->admin);
		return ret;
	}
	stand = lun_absent(lun_path(pl->lun), lun_size(pl->lun));
	why = strdup("detached");
	if (!stand || !why) {
		lun_close(stand);
		free(why);
		pthread_mutex_unlock(&p->admin);
		return -ENOMEM;
	}
	pthread_mutex_lock(&p->commit_lock);
	pthread_rwlock_wrlock(&p->hold);
	old = atomic_load(&pl->state);
	lunset_drop_side(p, (unsigned)idx);
	atomic_store(&pl->missing_since, 0);
	atomic_store(&p->sides_dirty, 1);
	pthread_rwlock_unlock(&p->hold);
	mirror_state_event(p, (unsigned)idx, old, SIDE_DETACHED, NULL);
	ret = lunset_write_sides(p, atomic_load(&p->nluns));
	if (ret == 0) {
		struct lun *was = pl->lun;
		char *was_why = pl->absent;

		if (!was_why)
			lun_label_wipe(was);
		pl->lun = stand;
		pl->absent = why;
		if (lunset_retire(p, was, was_why) < 0) {
			lun_close(was);
			free(was_why);
		}
		stand = NULL;
		why = NULL;
	}
	pthread_mutex_unlock(&p->commit_lock);
	lun_close(stand);
	free(why);
	/* the sides narrower, and naming the detached index, only once the
	 * sides row saying so is on the LUNs (lunset.c): a scan then tells it
	 * from a missing side, and an import never finds a side too many */
	if (ret == 0)
		ret = txg_sync(p, 0);
	if (ret == 0) {
		unsigned vdev = pl->vdev;

		lunset_relabel_width(p, vdev, p->luns[vdev].nsides);
	}
	pthread_mutex_unlock(&p->admin);
	return ret;
}
