/* SPDX-License-Identifier: MIT */
/* mirror.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_MIRROR_H
#define STOR_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct bp;
struct lun_io;

/** Make LUN @idx side @side of the vdev whose first LUN is @vdev. */
void mirror_join(struct stor_pool *p, unsigned idx, unsigned vdev, unsigned side);

/** Is LUN @idx a side of a mirror? */
int mirror_is_side(const struct stor_pool *p, unsigned idx);

/** The sides of the vdev whose first LUN is @vdev that are in service, into
 *  @out; a LUN of its own is its one side, whatever its state. */
unsigned mirror_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX]);

/** Does a write or flush that side @idx took count for its vdev? A side
 *  catching up does not while a sound side is there: data it alone holds
 *  is not read until the resilver is done, so it is not acknowledged. */
int mirror_side_counts(struct stor_pool *p, unsigned idx);

/** The sides of vdev @vdev that hold every extent (SIDE_IN): those to read. */
unsigned mirror_sound_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX]);

/** The side a read of an extent of vdev @vdev goes to, turning over them. */
unsigned mirror_read_side(struct stor_pool *p, unsigned vdev);

/** I/O on LUN @idx failed (@write: it missed a write): a mirror side with
 *  a sound sibling goes out of service. @return 1 if it did */
int mirror_side_failed(struct stor_pool *p, unsigned idx, int write);
/** mirror_side_failed() of a side whose file was deleted (lunset_check_gone). */
int mirror_side_gone(struct stor_pool *p, unsigned idx);

/** A bad copy of @size bytes at @sector of side @idx was rewritten, found
 *  by @via ("read", "scrub"): an io.repair event, one per copy. */
void mirror_repair_event(struct stor_pool *p, unsigned idx, uint64_t sector, uint64_t size,
			 const char *via);

/**
 * Side @idx went from state @old to @state (enum side_state): the event
 * (lun.fault for FAULTED, with @why; lun.state else), then the pool's
 * health (lunset_note_health). Nothing when they are equal.
 */
void mirror_state_event(struct stor_pool *p, unsigned idx, int old, int state, const char *why);

/** fsync every side in service of vdev @vdev; a side whose fsync fails goes
 *  out while one succeeded. @return 0, or the error when none did */
int mirror_flush(struct stor_pool *p, unsigned vdev);

/** Write each of @ios (@n <= MLOG_COPIES; the metadata log's copies, on
 *  vdevs @vdev) to every side in service of its vdev; its result is 0 when
 *  any side took it, and a side that missed it then goes out of service. */
void mirror_write_copies(struct stor_pool *p, struct lun_io *ios, const uint16_t *vdev,
			 unsigned n);

/** The extent a read is repairing: where, and how to tell sound bytes. */
struct mirror_ext {
	const struct bp *bp;
	uint64_t guid, recno; /* dataset GUID and record: a clear record's checksum */
};

/**
 * Sound stored bytes of @e into @buf (bp->psize bytes, sector-aligned) from a
 * side other than @bad, whose copy failed (read error, checksum, tag):
 * every side whose copy is bad is rewritten from the sound one and counted
 * as repaired. Sound means the keyless checksum of the stored bytes (or a
 * clear record's checksum) matches; without either only a read error is
 * recoverable. @return 0, or @err when @bad's own copy is sound (the
 * pointer, not the bytes, is wrong) or no side has a sound copy
 */
int mirror_recover(struct stor_pool *p, const struct mirror_ext *e, unsigned bad, int err,
		   uint8_t *buf);

/** Read the extent of @e on every side in service of its vdev and rewrite
 *  the bad copies from a sound one (scrub); @fixed grows by the bytes
 *  rewritten. @return 0, STOR_ECKSUM or -EIO (no sound copy), -ENOMEM */
int mirror_check_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *fixed);

/** Copy the extent of @e from a sound side to every side of its vdev that
 *  is catching up and lacks it (missing since its birth txg or before);
 *  @copied grows by the bytes written. @return 0, STOR_ECKSUM or -EIO (no
 *  sound copy), -ENOMEM */
int mirror_resilver_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *copied);

/** Copy @nsect sectors at @sector of vdev @vdev as they are (metadata log
 *  extents, whose records carry their own checksums) from a sound side to
 *  the sides catching up. @return 0 or the read's error */
int mirror_copy_raw(struct stor_pool *p, unsigned vdev, uint64_t sector, uint32_t nsect);

#endif
