/* SPDX-License-Identifier: MIT */
/*
 * What an attacker with the files of a stopped daemon can do: open a pool's
 * LMDB file (<state_dir>/pools/<pool>.mdb) with the LMDB API itself and
 * read, replace or delete values of its named databases, and read or write
 * the bytes of an extent in a LUN file. Block pointers are decoded here by
 * the layout of the on-disk format, not by the engine's headers, so that a
 * change of layout in the engine shows as a failing test.
 *
 * Nothing here asserts: calls return 0, a positive count, or a negative
 * value (-MDB code or -errno); the tests decide what a failure means.
 */
#ifndef COFFER_E2E_TAMPER_H
#define COFFER_E2E_TAMPER_H

#include <stddef.h>
#include <stdint.h>

/* Format 2 block pointer: see tbp below; format 1 had 64 bytes. */
#define TBP_LEN 76
#define TBP_LEN_V1 64
#define TBP_F_ENCRYPTED 0x1u
#define TBP_KEY_LEN 16

/* The extent of sector S of a LUN file starts at this byte plus S * 4096. */
#define TLUN_DATA_OFF (1u << 20)
#define TLUN_SECTOR 4096u

/* Crypto suites as the last byte of a dataset record holds them. */
enum { TSUITE_OFF = 0, TSUITE_AES128_CCM, TSUITE_AES192_CCM, TSUITE_AES256_CCM,
       TSUITE_AES128_GCM, TSUITE_AES256_GCM };

struct tamper; /* an open LMDB environment */

/** Open the LMDB file @mdb (MDB_NOSUBDIR, the engine's 4 GiB map). @return 0 or -rc */
int tamper_open(const char *mdb, struct tamper **out);
void tamper_close(struct tamper *t);
/** Whether named database @db exists. */
int tamper_has_db(struct tamper *t, const char *db);

/** Copy the value of @key in @db into @val (at most @cap bytes). @return its length or -rc */
long tamper_get(struct tamper *t, const char *db, const void *key, size_t klen, void *val,
		size_t cap);
/** Replace (or add) the value of @key in @db, one committed transaction. */
int tamper_put(struct tamper *t, const char *db, const void *key, size_t klen, const void *val,
	       size_t vlen);
/** Delete @key from @db, one committed transaction. @return 0 or -rc (-MDB_NOTFOUND) */
int tamper_del(struct tamper *t, const char *db, const void *key, size_t klen);
/** Call @fn for every entry of @db in key order; stops on non-zero. @return entries seen */
long tamper_each(struct tamper *t, const char *db,
		 int (*fn)(const void *key, size_t klen, const void *val, size_t vlen, void *ctx),
		 void *ctx);

/* ---- dataset records ---- */

/** The dataset id of dataset @name (u64 at offset 4 of its "ds" record). @return 0 or -rc */
int tamper_ds_id(struct tamper *t, const char *name, uint64_t *id);

/* ---- block pointers ---- */

struct tbp {
	uint16_t lun;
	uint8_t flags, comp;
	uint32_t psize, lsize, csize;
	uint64_t sector, birth;
	uint64_t salt;     /* format 1: the key epoch (u32) */
	uint8_t nonce[12];
	uint8_t mac[16];
	uint64_t xxh;      /* XXH3-64 of the psize stored bytes; format 1: none */
	size_t len;        /* bytes of the value it came from: TBP_LEN or TBP_LEN_V1 */
};

void tbp_key(uint64_t ds_id, uint64_t recno, uint8_t key[TBP_KEY_LEN]);
void tbp_key_parse(const uint8_t key[TBP_KEY_LEN], uint64_t *ds_id, uint64_t *recno);
/** Decode @len bytes. @return 0, or -1 if @len is no known block pointer length */
int tbp_decode(const void *val, size_t len, struct tbp *bp);
/** Encode in the layout it was decoded from (bp->len bytes). @return bp->len */
size_t tbp_encode(const struct tbp *bp, uint8_t *val);

/** The block pointer of record @recno of dataset @ds_id. @return 0, -MDB_NOTFOUND, -1 */
int tamper_bp_get(struct tamper *t, uint64_t ds_id, uint64_t recno, struct tbp *bp);
int tamper_bp_put(struct tamper *t, uint64_t ds_id, uint64_t recno, const struct tbp *bp);

/* ---- LUN files ---- */

/** Read / write @len bytes at byte @off of the extent at @sector of LUN file @path. */
int tlun_read(const char *path, uint64_t sector, uint64_t off, void *buf, size_t len);
int tlun_write(const char *path, uint64_t sector, uint64_t off, const void *buf, size_t len);
/** Places where @len bytes of @pat occur in file @path. @return the count or -errno */
long tlun_find(const char *path, const void *pat, size_t len);

#endif
