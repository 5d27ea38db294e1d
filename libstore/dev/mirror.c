/* SPDX-License-Identifier: MIT */
/*
 * Mirror vdevs, after OpenZFS's vdev_mirror.c. A vdev is one LUN or a
 * mirror of 2..STOR_MIRROR_MAX LUNs whose data areas are of one size.
 * Block pointers and the metadata log name a vdev by its first LUN, so a
 * pool without mirrors is what it always was and every index on disk is a
 * LUN's. Only the first LUN of a vdev has space in the allocator (the other
 * sides get an empty map, lunset.c): an extent lies at the same sector on
 * every side.
 *
 * Writes go to every side in service. A side that fails a write or an
 * fsync while another succeeds goes out of service: it lacks that extent,
 * so it is neither read nor written again until it is resilvered (it stays
 * out across imports, from the txg lunset.c's "sides" row names); the
 * write fails only when no side took it, as on a LUN of its own. Reads turn
 * over the sides in service. A copy that fails its read or its check is
 * looked for on the other sides (mirror_recover) and every bad copy is
 * rewritten from the sound one. Sound is what the keyless checksum of the
 * stored bytes (or a clear record's checksum) says, so this works with the
 * dataset's key unloaded, and a copy nothing can vouch for is never served
 * in place of one that failed its check.
 *
 * Owns the sides' fields of struct pool_lun; never writes metadata.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/events.h"
#include "base/stor_assert.h"
#include "crypt/hash.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "kv/bp.h"
#include "pool_impl.h"

/* Taking a side out of service: two failing at once must not both go. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

void mirror_join(struct stor_pool *p, unsigned idx, unsigned vdev, unsigned side)
{
	struct pool_lun *first = &p->luns[vdev];

	p->luns[idx].vdev = vdev;
	first->side[side] = (uint16_t)idx;
	if (first->nsides < side + 1)
		first->nsides = side + 1;
}

int mirror_is_side(const struct stor_pool *p, unsigned idx)
{
	return p->luns[p->luns[idx].vdev].nsides > 1;
}

/* The sides of vdev @vdev whose out is at most @most: SIDE_IN to read
 * (sound), SIDE_CATCHING_UP to write (a resilver's target takes new
 * writes). A vdev of one LUN is that LUN, whatever its state; a detached
 * first LUN leaves its place in side[] to the next (resilver.c). */
static unsigned sides_upto(struct stor_pool *p, unsigned vdev, int most,
			   unsigned out[STOR_MIRROR_MAX])
{
	const struct pool_lun *first = &p->luns[vdev];
	unsigned n = 0;

	if (first->nsides <= 1) {
		out[0] = first->nsides ? first->side[0] : vdev;
		return 1;
	}
	for (unsigned s = 0; s < first->nsides; s++)
		if (atomic_load(&p->luns[first->side[s]].out) <= most)
			out[n++] = first->side[s];
	return n;
}

unsigned mirror_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX])
{
	return sides_upto(p, vdev, SIDE_CATCHING_UP, out);
}

unsigned mirror_sound_sides(struct stor_pool *p, unsigned vdev, unsigned out[STOR_MIRROR_MAX])
{
	return sides_upto(p, vdev, SIDE_IN, out);
}

int mirror_side_counts(struct stor_pool *p, unsigned idx)
{
	unsigned sides[STOR_MIRROR_MAX];

	if (!mirror_is_side(p, idx) || atomic_load(&p->luns[idx].out) == SIDE_IN)
		return 1;
	/* a vdev whose every side is catching up has nothing better */
	return mirror_sound_sides(p, p->luns[idx].vdev, sides) == 0;
}

unsigned mirror_read_side(struct stor_pool *p, unsigned vdev)
{
	unsigned sides[STOR_MIRROR_MAX], n;

	if (p->luns[vdev].nsides <= 1)
		return p->luns[vdev].nsides ? p->luns[vdev].side[0] : vdev;
	n = mirror_sound_sides(p, vdev, sides);
	if (n == 0)
		return vdev;
	return sides[atomic_fetch_add(&p->luns[vdev].turn, 1) % n];
}

static const char *const state_names[] = { "ONLINE", "FAULTED", "OFFLINE", "RESILVERING",
					   "DETACHED" };

static const char *state_name(int state)
{
	return state >= SIDE_ONLINE && state <= SIDE_DETACHED ? state_names[state] : "UNKNOWN";
}

void mirror_state_event(struct stor_pool *p, unsigned idx, int old, int state, const char *why)
{
	struct lun_counters c;

	if (old == state)
		return;
	lun_counters(p->luns[idx].lun, &c);
	if (state == SIDE_FAULTED)
		EVENT(STOR_EV_LUN_FAULT, p->name, EV_STR("lun", lun_path(p->luns[idx].lun)),
		      EV_NUM("vdev", p->luns[idx].vdev), EV_STR("state", state_name(state)),
		      EV_STR("old_state", state_name(old)), EV_STR("reason", why),
		      EV_NUM("read_errors", c.read_errors), EV_NUM("write_errors", c.write_errors));
	else
		EVENT(STOR_EV_LUN_STATE, p->name, EV_STR("lun", lun_path(p->luns[idx].lun)),
		      EV_NUM("vdev", p->luns[idx].vdev), EV_STR("state", state_name(state)),
		      EV_STR("old_state", state_name(old)));
	lunset_note_health(p);
}

/* Side @idx out of service, faulted: @why it went, for the event. */
static int side_fails(struct stor_pool *p, unsigned idx, int write, const char *why)
{
	unsigned sides[STOR_MIRROR_MAX], n, vdev = p->luns[idx].vdev;
	struct lun_counters c;
	int taken = 0, old = SIDE_FAULTED;

	if (!mirror_is_side(p, idx))
		return 0;
	if (atomic_load(&p->luns[idx].out) == SIDE_OUT)
		return 1; /* out already: its errors are no longer its vdev's */
	if (atomic_load(&p->luns[idx].out) == SIDE_CATCHING_UP) {
		/* a resilver's target that fails: out again, its vdev unharmed */
		pthread_mutex_lock(&out_lock);
		atomic_store(&p->luns[idx].out, SIDE_OUT);
		old = atomic_exchange(&p->luns[idx].state, SIDE_FAULTED);
		atomic_store(&p->sides_dirty, 1);
		pthread_mutex_unlock(&out_lock);
		mirror_state_event(p, idx, old, SIDE_FAULTED, why);
		return 1;
	}
	lun_counters(p->luns[idx].lun, &c);
	/* a missed write leaves a hole in the copy; read errors may pass */
	if (!write && c.read_errors + c.write_errors < STOR_LUN_FAULT_ERRORS)
		return 0;
	pthread_mutex_lock(&out_lock);
	n = mirror_sound_sides(p, vdev, sides);
	for (unsigned s = 0; s < n && !taken; s++)
		taken = sides[s] != idx;
	if (taken) {
		/* what it lacks begins no later than the txg not yet synced;
		 * the next commit makes that durable (lunset_save_sides) */
		uint64_t none = 0;

		atomic_compare_exchange_strong(&p->luns[idx].missing_since, &none,
					       atomic_load(&p->synced_txg) + 1);
		atomic_store(&p->luns[idx].out, SIDE_OUT);
		old = atomic_exchange(&p->luns[idx].state, SIDE_FAULTED);
		atomic_store(&p->sides_dirty, 1);
	}
	pthread_mutex_unlock(&out_lock);
	if (taken)
		mirror_state_event(p, idx, old, SIDE_FAULTED, why);
	return taken;
}

int mirror_side_failed(struct stor_pool *p, unsigned idx, int write)
{
	return side_fails(p, idx, write, write ? "a write or flush failed" : "too many read errors");
}

int mirror_side_gone(struct stor_pool *p, unsigned idx)
{
	return side_fails(p, idx, 1, "its file was deleted");
}

int mirror_flush(struct stor_pool *p, unsigned vdev)
{
	unsigned sides[STOR_MIRROR_MAX], n = mirror_sides(p, vdev, sides), ok = 0;
	int res[STOR_MIRROR_MAX] = { 0 }, first = -EIO;

	for (unsigned s = 0; s < n; s++) {
		res[s] = lun_flush(p->luns[sides[s]].lun);
		if (res[s] == 0)
			ok += mirror_side_counts(p, sides[s]);
		else if (first == -EIO)
			first = res[s];
	}
	if (n == 1)
		return res[0];
	if (!ok)
		return first;
	for (unsigned s = 0; s < n; s++)
		if (res[s] < 0)
			mirror_side_failed(p, sides[s], 1);
	return 0;
}

enum verdict { SOUND, BAD, UNKNOWN };

/* What the block pointer says of the stored bytes in @buf, keyless. */
static enum verdict judge(const struct mirror_ext *e, const uint8_t *buf)
{
	const struct bp *bp = e->bp;
	uint8_t mac[16];

	if (bp->flags & BP_F_ENCRYPTED) {
		if (!bp->cksum)
			return UNKNOWN;
		return hash64(buf, bp->psize) == bp->cksum ? SOUND : BAD;
	}
	if (!memcmp(bp->mac, (uint8_t[16]){ 0 }, sizeof(mac)))
		return UNKNOWN; /* checksum=off */
	record_checksum(e->guid, e->recno, bp->birth, buf, bp->csize, mac);
	return memcmp(mac, bp->mac, sizeof(mac)) ? BAD : SOUND;
}

void mirror_repair_event(struct stor_pool *p, unsigned idx, uint64_t sector, uint64_t size,
			 const char *via)
{
	EVENT(STOR_EV_IO_REPAIR, p->name, EV_STR("lun", lun_path(p->luns[idx].lun)),
	      EV_NUM("offset", sector * STOR_SECTOR), EV_NUM("size", size), EV_STR("via", via));
}

static int read_side(struct stor_pool *p, unsigned idx, const struct bp *bp, uint8_t *buf)
{
	struct lun_io io = { p->luns[idx].lun, bp->sector * STOR_SECTOR, buf, bp->psize, 0, 0, 0 };

	if (lun_read_batch(&io, 1) == 0)
		return 0;
	mirror_side_failed(p, idx, 0);
	return io.result;
}

int mirror_recover(struct stor_pool *p, const struct mirror_ext *e, unsigned bad, int err,
		   uint8_t *buf)
{
	unsigned sides[STOR_MIRROR_MAX], n, nbad = 0, badv[STOR_MIRROR_MAX];
	struct lun_io ios[STOR_MIRROR_MAX];
	int good = -1;
	enum verdict v;

	n = mirror_sound_sides(p, p->luns[bad].vdev, sides);
	if (p->luns[p->luns[bad].vdev].nsides <= 1)
		return err;
	/* the copy that failed, once more: sound bytes that failed to open
	 * mean the pointer is wrong, and no other side can help */
	if (read_side(p, bad, e->bp, buf) == 0) {
		v = judge(e, buf);
		if (v == SOUND || (v == UNKNOWN && err == -EIO))
			return err == -EIO ? 0 : err;
	}
	badv[nbad++] = bad;
	for (unsigned s = 0; s < n && good < 0; s++) {
		if (sides[s] == bad)
			continue;
		if (read_side(p, sides[s], e->bp, buf) < 0) {
			badv[nbad++] = sides[s];
			continue;
		}
		v = judge(e, buf);
		if (v == SOUND || (v == UNKNOWN && err == -EIO)) {
			good = (int)sides[s];
		} else {
			atomic_fetch_add(&p->luns[sides[s]].cksum_errors, 1);
			badv[nbad++] = sides[s];
		}
	}
	if (good < 0)
		return err;
	/* a side out of service is resilvered whole, not extent by extent */
	for (unsigned i = 0; i < nbad; i++)
		if (atomic_load(&p->luns[badv[i]].out))
			badv[i--] = badv[--nbad];
	for (unsigned i = 0; i < nbad; i++)
		ios[i] = (struct lun_io){ p->luns[badv[i]].lun, e->bp->sector * STOR_SECTOR, buf,
					  e->bp->psize, 0, 0, 0 };
	if (nbad)
		lun_write_batch(ios, nbad);
	for (unsigned i = 0; i < nbad; i++) {
		if (ios[i].result == 0) {
			atomic_fetch_add(&p->luns[badv[i]].repaired, 1);
			mirror_repair_event(p, badv[i], e->bp->sector, e->bp->psize, "read");
		} else {
			mirror_side_failed(p, badv[i], 1);
		}
	}
	return 0;
}

void mirror_write_copies(struct stor_pool *p, struct lun_io *ios, const uint16_t *vdev,
			 unsigned n)
{
	struct lun_io all[MLOG_COPIES * STOR_MIRROR_MAX];
	unsigned owner[MLOG_COPIES * STOR_MIRROR_MAX], at[MLOG_COPIES * STOR_MIRROR_MAX];
	unsigned sides[STOR_MIRROR_MAX], k = 0;

	STOR_ASSERT(n <= MLOG_COPIES);
	for (unsigned c = 0; c < n && c < MLOG_COPIES; c++) {
		unsigned ns = mirror_sides(p, vdev[c], sides);

		ios[c].result = -EIO;
		for (unsigned s = 0; s < ns; s++) {
			all[k] = ios[c];
			all[k].lun = p->luns[sides[s]].lun;
			owner[k] = c;
			at[k++] = sides[s];
		}
	}
	lun_write_batch(all, k);
	for (unsigned x = 0; x < k; x++)
		if (all[x].result == 0 && mirror_side_counts(p, at[x]))
			ios[owner[x]].result = 0;
	/* a copy no side took fails with a side's error, as on a LUN of its own */
	for (unsigned x = 0; x < k; x++) {
		if (all[x].result == 0)
			continue;
		if (ios[owner[x]].result < 0)
			ios[owner[x]].result = all[x].result;
		else
			mirror_side_failed(p, at[x], 1);
	}
}

int mirror_check_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *fixed)
{
	unsigned sides[STOR_MIRROR_MAX], n = mirror_sound_sides(p, e->bp->lun, sides), nbad = 0;
	unsigned bad[STOR_MIRROR_MAX], nread = 0;
	struct lun_io ios[STOR_MIRROR_MAX];
	uint8_t *good = NULL, *tmp = NULL, *swap;
	int have_good = 0, ret = 0;

	if (posix_memalign((void **)&good, STOR_SECTOR, e->bp->psize))
		return -ENOMEM;
	if (posix_memalign((void **)&tmp, STOR_SECTOR, e->bp->psize)) {
		free(good);
		return -ENOMEM;
	}
	for (unsigned s = 0; s < n; s++) {
		if (read_side(p, sides[s], e->bp, tmp) < 0) {
			bad[nbad++] = sides[s];
			continue;
		}
		nread++;
		if (judge(e, tmp) == BAD) {
			atomic_fetch_add(&p->luns[sides[s]].cksum_errors, 1);
			bad[nbad++] = sides[s];
		} else if (!have_good) {
			swap = good;
			good = tmp;
			tmp = swap;
			have_good = 1;
		}
	}
	if (!have_good) {
		ret = nread ? STOR_ECKSUM : -EIO;
	} else if (nbad) {
		for (unsigned i = 0; i < nbad; i++)
			ios[i] = (struct lun_io){ p->luns[bad[i]].lun, e->bp->sector * STOR_SECTOR,
						  good, e->bp->psize, 0, 0, 0 };
		lun_write_batch(ios, nbad);
		for (unsigned i = 0; i < nbad; i++) {
			if (ios[i].result == 0) {
				atomic_fetch_add(&p->luns[bad[i]].repaired, 1);
				*fixed += e->bp->psize;
				mirror_repair_event(p, bad[i], e->bp->sector, e->bp->psize,
						    "scrub");
			} else {
				mirror_side_failed(p, bad[i], 1);
			}
		}
	}
	free(good);
	free(tmp);
	return ret;
}

int mirror_resilver_extent(struct stor_pool *p, const struct mirror_ext *e, uint64_t *copied)
{
	const struct pool_lun *first = &p->luns[e->bp->lun];
	unsigned sides[STOR_MIRROR_MAX], n, to[STOR_MIRROR_MAX], nto = 0;
	struct lun_io ios[STOR_MIRROR_MAX];
	uint8_t *buf = NULL;
	int ret = -EIO;

	/* the targets: catching up, and missing writes from before this birth */
	for (unsigned s = 0; s < first->nsides && first->nsides > 1; s++) {
		const struct pool_lun *l = &p->luns[first->side[s]];
		uint64_t since = atomic_load(&l->missing_since);

		if (atomic_load(&l->out) == SIDE_CATCHING_UP && since && since <= e->bp->birth)
			to[nto++] = first->side[s];
	}
	if (!nto)
		return 0;
	if (posix_memalign((void **)&buf, STOR_SECTOR, e->bp->psize))
		return -ENOMEM;
	n = mirror_sound_sides(p, e->bp->lun, sides);
	for (unsigned s = 0; s < n && ret < 0; s++) {
		if (read_side(p, sides[s], e->bp, buf) < 0)
			continue;
		if (judge(e, buf) != BAD)
			ret = 0;
		else
			atomic_fetch_add(&p->luns[sides[s]].cksum_errors, 1);
	}
	if (ret == 0) {
		for (unsigned i = 0; i < nto; i++)
			ios[i] = (struct lun_io){ p->luns[to[i]].lun, e->bp->sector * STOR_SECTOR, buf,
						  e->bp->psize, 0, 0, 0 };
		lun_write_batch(ios, nto);
		for (unsigned i = 0; i < nto; i++) {
			if (ios[i].result == 0)
				*copied += e->bp->psize;
			else
				mirror_side_failed(p, to[i], 1);
		}
	} else if (n) {
		ret = STOR_ECKSUM; /* read, but no copy was sound */
	}
	free(buf);
	return ret;
}

int mirror_copy_raw(struct stor_pool *p, unsigned vdev, uint64_t sector, uint32_t nsect)
{
	const struct pool_lun *first = &p->luns[vdev];
	unsigned sides[STOR_MIRROR_MAX], n, to[STOR_MIRROR_MAX], nto = 0;
	struct lun_io ios[STOR_MIRROR_MAX];
	size_t len = (size_t)nsect * STOR_SECTOR;
	uint8_t *buf = NULL;
	int ret = -EIO;

	for (unsigned s = 0; s < first->nsides && first->nsides > 1; s++)
		if (atomic_load(&p->luns[first->side[s]].out) == SIDE_CATCHING_UP)
			to[nto++] = first->side[s];
	if (!nto)
		return 0;
	if (posix_memalign((void **)&buf, STOR_SECTOR, len))
		return -ENOMEM;
	n = mirror_sound_sides(p, vdev, sides);
	for (unsigned s = 0; s < n && ret < 0; s++) {
		struct lun_io io = { p->luns[sides[s]].lun, sector * STOR_SECTOR, buf, len, 0, 0, 0 };

		ret = lun_read_batch(&io, 1) ? io.result : 0;
	}
	for (unsigned i = 0; ret == 0 && i < nto; i++)
		ios[i] = (struct lun_io){ p->luns[to[i]].lun, sector * STOR_SECTOR, buf, len, 0, 0, 0 };
	if (ret == 0)
		lun_write_batch(ios, nto);
	for (unsigned i = 0; ret == 0 && i < nto; i++)
		if (ios[i].result < 0)
			mirror_side_failed(p, to[i], 1);
	free(buf);
	return ret;
}
