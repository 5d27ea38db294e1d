/* SPDX-License-Identifier: MIT */
/* lunset.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_LUNSET_H
#define STOR_LUNSET_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct alloc_lun;
struct lun;
struct meta_txn;

/** Open LUN @idx of a pool being imported and check its label names this
 *  pool, @guid and @idx; then it joins the set and the allocator. @end is
 *  where the pool record says its data ends (bytes from the LUN's start):
 *  a file cut short of it is refused as a side of a @mirror (the other
 *  sides hold its data), else joins cut short (pool_lun.cut). */
int lunset_attach(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t end, int mirror);

/** A LUN being added: taken and labelled, not yet published. */
struct lunset_new {
	struct lun *lun;
	struct alloc_lun *free;
	unsigned idx;
	int labelled;
};

/** Take @path as the LUN after @prev (NULL: the next LUN of @p), refusing
 *  what must not be taken over, and label it as side @side of a vdev of
 *  @sides LUNs whose first is @prev's first (side 0: itself); p->luns[idx]
 *  is set but nluns does not count it. Admin lock held. On failure nothing
 *  is left behind. */
int lunset_prepare(struct stor_pool *p, const char *path, uint64_t size, unsigned flags,
		   const struct lunset_new *prev, unsigned side, unsigned sides,
		   struct lunset_new *n);

/** LUN @idx of the pool record did not open (@why): a stand-in (lun_absent)
 *  of @size bytes takes its place as a side of the mirror of lun @vdev, out
 *  of service; the import goes on while another side of it is there. With
 *  @why NULL, LUN @idx was detached: a stand-in in no vdev's list of sides
 *  (DETACHED), whose index stays taken, never opened. */
int lunset_absent(struct stor_pool *p, unsigned idx, const char *path, uint64_t guid,
		  uint64_t size, unsigned vdev, const char *why);

/** The sides' state from the pool's "sides" row of @t (after every LUN
 *  joined): which are out, and since which txg; a LUN absent that the row
 *  has in service is out since @txg, the last one committed. */
int lunset_load_sides(struct stor_pool *p, struct meta_txn *t, uint64_t txg);

/** Which of the first @n LUNs the "sides" row of @t has detached, before
 *  any joins: @detached[i] is 1 for each, else 0. @return 0 or an error */
int lunset_row_detached(struct meta_txn *t, unsigned n, uint8_t *detached);

/** Put the "sides" row into @t (the txg's transaction) if it changed.
 *  @return 1 put, 0 nothing to put, or an error (the change stays due);
 *  after 1, a commit that fails calls lunset_sides_undo() */
int lunset_save_sides(struct stor_pool *p, struct meta_txn *t);

/** Write the sides row of LUNs [0, @n) now, in a transaction of its own
 *  (@n may count a LUN not yet published). Commit lock held. */
int lunset_write_sides(struct stor_pool *p, unsigned n);

/** LUN @lun of the pool by path or by index ("0", "1"...); -1 if none. */
int lunset_index(struct stor_pool *p, const char *lun);

/** Take @path (as lun_take does for an add; a missing file is made the size
 *  of the vdev's sides) and label it LUN @idx, side of the vdev of lun
 *  @vdev, @sides wide, with a new LUN guid in @guid. Admin lock held. */
int lunset_new_side(struct stor_pool *p, unsigned idx, const char *path, unsigned flags,
		    unsigned vdev, unsigned sides, struct lun **out, uint64_t *guid);

/** Rewrite the labels of the sides of vdev @vdev as @sides wide, with its
 *  detached LUNs (format.h): wider before the pool record counts a side,
 *  narrower only after the record and sides row without it are on the LUNs.
 *  Admin lock held. */
int lunset_relabel_width(struct stor_pool *p, unsigned vdev, unsigned sides);

/** Open LUN @idx again at its path (it was absent) and check its label is
 *  that LUN's; the caller puts it in place. */
int lunset_reopen(struct stor_pool *p, unsigned idx, struct lun **out);

/** Put @l (and @why, either may be NULL) aside until the pool closes. */
int lunset_retire(struct stor_pool *p, struct lun *l, char *why);

/** Take LUN @idx out of its vdev's list of sides for good (detach). */
void lunset_drop_side(struct stor_pool *p, unsigned idx);

/** The commit that took lunset_save_sides() failed: the change is due again. */
void lunset_sides_undo(struct stor_pool *p);

/** Count the prepared LUN in nluns and give its space to the allocator. */
void lunset_publish(struct stor_pool *p, struct lunset_new *n);

/** Undo lunset_prepare(): wipe the label, close (the claim goes). */
void lunset_abandon(struct stor_pool *p, struct lunset_new *n);

void lunset_close(struct stor_pool *p);

/** Rewrite every LUN's label with this host's id, @state (LABEL_ACTIVE,
 *  LABEL_EXPORTED), the pool's name and its LUN count; the first error. */
int lunset_mark(struct stor_pool *p, unsigned state);

/** Wipe every LUN's label (destroy, a failed create); the first error. */
int lunset_wipe(struct stor_pool *p);

/** Remove the LUNs that go with their pool (RADOS objects; lun_remove),
 *  saying how far with lun.remove events; the first error. */
int lunset_remove(struct stor_pool *p);

/** A mirror side whose file was deleted goes out of service while another
 *  side holds every write: it would be gone at the next import anyway. */
void lunset_check_gone(struct stor_pool *p);

/**
 * Is any LUN of @p faulted (pool status's DEGRADED)? When that changed
 * since the last call, a pool.state event says so. After a side's state or
 * a LUN's fault changed, and once the pool has opened.
 */
void lunset_note_health(struct stor_pool *p);

/** Has another host taken a LUN of @p over? 1 with the LUN and who in @why. */
int lunset_fenced(struct stor_pool *p, char *why, size_t len);

/** Note that I/O on @lun failed; fault it when errors pile up. */
void lunset_failed(struct stor_pool *p, struct lun *lun);

#endif
