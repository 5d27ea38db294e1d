/* SPDX-License-Identifier: MIT */
/*
 * Data validation for coffer bench (-v): every unit (one dataset record) that
 * bench writes starts with a header naming the dataset GUID, the record
 * number and the write generation, and ends a pattern derived from them; a
 * checksum covers the whole unit. Reads compare against the generation last
 * written, so a record that is corrupt, misplaced, from another dataset or
 * older than the last acknowledged write (a lost write) is caught. The
 * generation table is saved to a journal so that -vr can verify again after
 * the daemon restarts.
 */
#ifndef COFFER_BENCH_VERIFY_H
#define COFFER_BENCH_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERIFY_HDR_SIZE 64    /* bytes of header at the start of each unit */
#define VERIFY_MIN_UNIT 128   /* a unit holds the header and some pattern */
#define VERIFY_GEN_NONE 0u    /* never written by bench: not checked */
#define VERIFY_GEN_UNKNOWN UINT32_MAX /* a write failed or was cut short: either is fine */

enum verify_status {
	VERIFY_OK = 0,
	VERIFY_UNCHECKED,     /* no generation known for this unit */
	VERIFY_ZERO,          /* all zeros although a generation was written (lost write) */
	VERIFY_BAD_MAGIC,     /* no header where one was written */
	VERIFY_BAD_CHECKSUM,  /* header or data changed */
	VERIFY_WRONG_DATASET, /* a valid unit of another dataset */
	VERIFY_WRONG_RECORD,  /* a valid unit of another record */
	VERIFY_STALE,         /* an older generation: a lost write */
	VERIFY_FUTURE,        /* a newer generation than bench ever acknowledged */
};

/* One dataset's generation table, owned by one engine thread at a time. */
struct verify_ds {
	char *name;
	uint8_t guid[16];
	uint32_t unit;   /* bytes per unit: the dataset's recordsize */
	uint64_t nunits; /* units in the volume */
	uint32_t *gen;   /* last acknowledged generation per unit */
	uint8_t *busy;   /* 1 while an I/O on the unit is in flight */
};

/** A table for @nunits units of @unit bytes; all generations VERIFY_GEN_NONE. */
int verify_ds_new(const char *name, const uint8_t guid[16], uint32_t unit, uint64_t nunits,
		  struct verify_ds **out);
void verify_ds_free(struct verify_ds *v);

/** 16 bytes that stand for a dataset: its GUID if the daemon gave one (hex), else a hash of its name. */
void verify_guid(const char *name, const char *guid_hex, uint8_t out[16]);

/** Fill the unit @buf (@unit bytes) as record @record, generation @gen of dataset @guid. */
void verify_fill(void *buf, uint32_t unit, const uint8_t guid[16], uint64_t record,
		 uint32_t gen);

/**
 * Check the unit @buf read from record @record against the last acknowledged
 * generation @expect. @got: the generation found in a valid header (else 0).
 */
enum verify_status verify_check(const void *buf, uint32_t unit, const uint8_t guid[16],
				uint64_t record, uint32_t expect, uint32_t *got);
const char *verify_status_str(enum verify_status s);

/** Write every table to @path (a temp file, fsync, rename). @return 0 or -errno */
int verify_journal_save(const char *path, struct verify_ds *const *ds, unsigned n);
/**
 * Read a journal written by verify_journal_save.
 * @return 0, -errno, or -EBADMSG (not a journal, truncated, checksum mismatch)
 */
int verify_journal_load(const char *path, struct verify_ds ***out, unsigned *n);

#endif
