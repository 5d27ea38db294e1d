/* SPDX-License-Identifier: MIT */
/*
 * The block pointer codec (bp.h; the layout is in format.h). It owns the
 * byte order and the checks a decoded pointer passes before anyone uses
 * it; nothing here knows txgs, pools or datasets.
 */
#include "kv/bp.h"
#include "store.h"

void bp_key(uint64_t ds_id, uint64_t recno, uint8_t key[BP_KEY_LEN])
{
	uint8_t *w = key;

	put_u64(&w, ds_id);
	put_u64(&w, recno);
}

void bp_encode(const struct bp *bp, uint8_t out[BP_LEN])
{
	uint8_t *w = out;

	put_u16(&w, bp->lun);
	put_u8(&w, bp->flags);
	put_u8(&w, bp->comp);
	put_u32(&w, bp->psize);
	put_u32(&w, bp->lsize);
	put_u32(&w, bp->csize);
	put_u64(&w, bp->sector);
	put_u64(&w, bp->birth);
	put_u64(&w, bp->salt);
	put_bytes(&w, bp->nonce, sizeof(bp->nonce));
	put_bytes(&w, bp->mac, sizeof(bp->mac));
	put_u64(&w, bp->cksum);
}

int bp_decode(const uint8_t *in, size_t len, struct bp *bp)
{
	const uint8_t *r = in;

	if (len != BP_LEN)
		return STOR_ECORRUPT;
	bp->lun = get_u16(&r);
	bp->flags = get_u8(&r);
	bp->comp = get_u8(&r);
	bp->psize = get_u32(&r);
	bp->lsize = get_u32(&r);
	bp->csize = get_u32(&r);
	bp->sector = get_u64(&r);
	bp->birth = get_u64(&r);
	bp->salt = get_u64(&r);
	get_bytes(&r, bp->nonce, sizeof(bp->nonce));
	get_bytes(&r, bp->mac, sizeof(bp->mac));
	bp->cksum = get_u64(&r);
	if (bp->psize == 0 || bp->psize % STOR_SECTOR || bp->csize > bp->psize ||
	    bp->lsize > STOR_RECSIZE_MAX || (bp->flags & BP_F_HOLE))
		return STOR_ECORRUPT;
	return 0;
}
