/* SPDX-License-Identifier: MIT */
/*
 * The LUN backend interface: open, label, read and write a batch of extents,
 * flush, size, close. Nothing above lun.c may assume a file descriptor; a
 * backend is a struct lun_ops, so a remote object store can slot in later.
 */
#ifndef STOR_LUN_H
#define STOR_LUN_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

struct lun;

struct lun_label {
	uint32_t version;
	uint32_t index;
	uint64_t pool_guid;
	uint64_t lun_guid;
	uint64_t size;
	uint32_t nluns;
	char pool_name[LABEL_NAME_LEN];
};

/** One extent of a batch: @off is a byte offset into the LUN's data area. */
struct lun_io {
	struct lun *lun;
	uint64_t off;
	void *buf;
	size_t len;
	int result; /* 0 or -errno; a short read is -EIO */
};

#define LUN_CREATE 0x1u /* create a sparse file of the given size if missing */
#define LUN_DIRECT 0x2u /* O_DIRECT: buffers, offsets and lengths 4 KiB aligned */
#define LUN_MAP 0x4u    /* a file on tmpfs is also mapped, for lun_mapped() */

/**
 * Open the LUN at @path. With LUN_CREATE a missing file is created sparse
 * at @size bytes. @return 0, -errno, -EINVAL (smaller than label + 1 sector)
 */
int lun_open(const char *path, unsigned flags, uint64_t size, struct lun **out);
void lun_close(struct lun *l);
const char *lun_path(const struct lun *l);
/** Bytes in the data area. */
uint64_t lun_data_size(const struct lun *l);

/** Read and check the label. @return 0, STOR_ELABEL (magic or checksum), STOR_EFORMAT */
int lun_label_read(struct lun *l, struct lun_label *lab);
/** Write and fsync a label. */
int lun_label_write(struct lun *l, const struct lun_label *lab);
/** Overwrite the label with zeros (pool destroy). */
int lun_label_wipe(struct lun *l);

int lun_is_direct(const struct lun *l);
/** The extent at @off of a LUN opened with LUN_MAP whose file is on tmpfs,
 *  readable in place; NULL otherwise (read it with lun_read_batch). */
const void *lun_mapped(const struct lun *l, uint64_t off, size_t len);

/** Run a batch of reads or writes, possibly over several LUNs.
 *  @return the number of extents that failed */
int lun_read_batch(struct lun_io *ios, size_t n);
int lun_write_batch(struct lun_io *ios, size_t n);
/** Make all written data durable. */
int lun_flush(struct lun *l);

/** Error counters, for pool status. */
struct lun_counters {
	uint64_t read_errors, write_errors;
};
void lun_counters(const struct lun *l, struct lun_counters *c);

#endif
