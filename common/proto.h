/* SPDX-License-Identifier: MIT */
/*
 * The cofferd wire protocol, shared by the daemon and the client library.
 *
 * A frame is a 16-byte header in network byte order followed by @len bytes of
 * payload:
 *
 *   offset size field
 *   0      4    len     payload bytes (not counting the header), <= max_frame
 *   4      2    opcode  one of enum proto_op (the reply echoes it)
 *   6      2    flags   PROTO_F_* bits
 *   8      4    req_id  chosen by the client, echoed in the reply
 *   12     4    status  0 in requests; 0 or a negative code in replies
 *                       (-errno or a STOR_E* code of libstore/store.h)
 *
 * HELLO must be the first request of a connection. Its body is binary:
 * u32 magic (PROTO_MAGIC), u16 lowest version, u16 highest version the
 * client speaks. The reply carries u32 magic, u16 the chosen version and
 * u32 max_frame, the largest payload the daemon accepts (so a client sizes
 * its WRITE and READ requests to fit).
 *
 * Record I/O (READ, WRITE, FLUSH, DISCARD) has a fixed 16-byte body:
 * u32 handle (from DS_OPEN), u64 offset (bytes), u32 length (bytes). WRITE
 * data follows the body; a READ reply carries exactly @length bytes. FLUSH
 * ignores offset and length.
 *
 * MAP says which parts of a range hold data. Its body is the I/O body and a
 * u32, the most runs wanted (over PROTO_MAP_RUNS: that many; 0: -EINVAL).
 * The reply lists the runs of the range in order from @offset, each a u32
 * length (bytes) and u32 flags (PROTO_MAP_HOLE: nothing is written there,
 * it reads as zeros); runs that end before the range does mean "ask again
 * from there". It is what the NBD front end answers BLOCK_STATUS with; no
 * verb of coffer sends it.
 *
 * Requests in flight at the same time are not ordered against each other
 * (as on a block device): wait for a WRITE's reply before reading what it
 * wrote, and for every WRITE's reply before a FLUSH that must cover it.
 *
 * Every other command carries a JSON object in both directions. An error
 * reply to a JSON command carries {"error": "text"}; an error reply to record
 * I/O has no payload. A CMD_DATA command (send, receive) carries bytes after
 * its object and a NUL byte, in the request, the reply or both: the chunks of
 * a send stream, which JSON would have to encode.
 *
 * Dry runs extend their command's object, no opcode of their own: send
 * with "dryrun": true sends no bytes and replies {"estimate": {"bytes",
 * "records", "frees"}}, the size of the stream the same arguments would
 * write (libstore's stor_send_estimate). ds_set takes either "prop" and
 * "value", or "props": ["PROP=VALUE", ...], made all or none
 * (stor_ds_set_many). ds_destroy with "dryrun": true destroys nothing and
 * replies {"destroy": [names], "reclaim": bytes}, what the same destroy
 * would take and free (stor_destroy_plan), or its refusal.
 *
 * rekey takes {"name", "pause", "stop", "recursive", "scrub_free", "rate"}:
 * with neither of the first two it starts or resumes the rekey of an
 * encrypted dataset (with "recursive" of each encrypted dataset below it
 * too; with "scrub_free" the pool's free space is written over before it
 * ends) at "rate" bytes per second (0: no limit; absent: PROTO_REKEY_RATE),
 * else pauses or stops it (stor_rekey). Its progress is the read-only
 * property rekeystatus. ds_encrypt takes {"name", "props": ["encryption=S",
 * "keyformat=F", ...], the key as key_change's, "rate", "scrub_free"}: the
 * clear dataset is encrypted in place, its records sealed by the same
 * background walk (stor_ds_encrypt), paused, stopped and resumed by rekey.
 *
 * A handle an administrator closed with -f (pool export, destroy, unload-key)
 * answers record I/O with -ESTALE until DS_CLOSE frees its number.
 *
 * Opcodes are append-only: a number, once given, is never reused or changed.
 */
#ifndef COFFER_PROTO_H
#define COFFER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_MAGIC 0x43464652u /* "CFFR" */
#define PROTO_VERSION 1u         /* highest version this build speaks */
#define PROTO_VERSION_MIN 1u     /* lowest version this build speaks */
#define PROTO_HDR_SIZE 16u
#define PROTO_IO_BODY 16u        /* handle u32, offset u64, length u32 */
#define PROTO_MAP_BODY (PROTO_IO_BODY + 4u) /* the I/O body, then u32 the most runs wanted */
#define PROTO_MAP_RUN 8u         /* a MAP reply's run: length u32, flags u32 */
#define PROTO_MAP_RUNS 1024u     /* the most runs of one MAP reply */
#define PROTO_MAP_HOLE 0x1u      /* a run's flag: no data written, reads as zeros */
#define PROTO_HELLO_BODY 8u      /* magic u32, vmin u16, vmax u16 */
#define PROTO_HELLO_REPLY 10u    /* magic u32, version u16, max_frame u32 */
/* default max_frame (cofferd.conf): a 16 MiB record write plus its I/O body */
#define PROTO_FRAME_DEFAULT ((16u << 20) + PROTO_IO_BODY)
#define PROTO_NAME_MAX 255u      /* pool/dataset names, as STOR_NAME_MAX */
#define PROTO_JSON_MAX (1u << 20) /* cap of a JSON request body */
#define PROTO_INFLIGHT_MAX 256u  /* requests in flight per connection */
/* rekey's bytes per second unless given: a background pace at which the
 * clients of a busy pool keep their IOPS (contrib/bench/rekey.sh, impact) */
#define PROTO_REKEY_RATE (16ull << 20)

/* Header flags. */
#define PROTO_F_REPLY 0x1u /* set by the daemon on replies */

/*
 * Command flags: what the dispatcher checks and resolves before a handler
 * runs, in this order (daemon/dispatch.c), and where the call runs.
 */
#define CMD_ADMIN 0x01u    /* needs uid 0, the daemon's uid or the admin group */
#define CMD_JSON 0x02u     /* JSON body */
#define CMD_IO 0x04u       /* on a handle (the I/O body): to the I/O workers, or the
			    * threadpool with CMD_BLOCKING (MAP reads no records) */
#define CMD_BLOCKING 0x08u /* may block in libstore: runs off the loop */
#define CMD_SECRET 0x10u   /* body holds key material: never logged */
#define CMD_PREHELLO 0x20u /* allowed before HELLO */
#define CMD_POOL 0x40u     /* "name" is a pool name (STOR_EBADNAME if not) */
#define CMD_DS 0x80u       /* "name" is a dataset name; its pool is the part before '/' */
#define CMD_CHILD 0x100u   /* with CMD_DS: POOL/NAME, never the pool's root dataset */
#define CMD_NAME_OPT 0x200u /* "name" may be absent (a value that is no string counts as absent) */
#define CMD_LOCK 0x400u    /* under the pool registry's read lock; the target's pool looked up */
#define CMD_LOCK_WR 0x800u /* under its write lock: the pool list changes */
#define CMD_KNOWN 0x1000u  /* the target's pool is on the list (faulted or not): -ENOENT */
#define CMD_ONLINE 0x2000u /* ... and imported: -ENOENT, STOR_EFAULTED */
#define CMD_NEW 0x4000u    /* the target pool is not on the list: -EEXIST */
#define CMD_OWNER 0x8000u  /* the peer is an admin or the dataset's owner: -EPERM */
#define CMD_SNAP 0x10000u  /* with CMD_DS: "name" may be a snapshot, DATASET@SNAP (or @A%B) */
#define CMD_DATA 0x20000u  /* with CMD_JSON: bytes follow the object and a NUL, both ways */

#define J (CMD_JSON)
#define JB (CMD_JSON | CMD_BLOCKING)
#define JA (CMD_JSON | CMD_BLOCKING | CMD_ADMIN)
#define ON_POOL (CMD_POOL | CMD_LOCK | CMD_ONLINE) /* an imported pool */
#define ON_DS (CMD_DS | CMD_LOCK | CMD_ONLINE)     /* a dataset of an imported pool */
#define LIST_POOL (CMD_POOL | CMD_NAME_OPT | CMD_LOCK | CMD_KNOWN)
#define ANY_POOL (CMD_POOL | CMD_LOCK_WR)          /* a pool on the list or not */
#define JMAX PROTO_JSON_MAX

/*
 * THE command table: XX(opcode, NAME, "name", handler, flags, min body, max body).
 * It generates enum proto_op, the names used by logs and by coffer_call(),
 * and the daemon's handler array. The client ignores the handler column;
 * HELLO and the calls on a handle (record I/O, MAP) have no handler: the
 * dispatcher answers them, and coffer_call() takes only the JSON rows.
 */
#define PROTO_CMDS(XX)                                                                       \
	XX(1, HELLO, "hello", NULL, CMD_PREHELLO, PROTO_HELLO_BODY, PROTO_HELLO_BODY)       \
	XX(2, PING, "ping", h_ping, J, 0, JMAX)                                              \
	XX(3, VERSION, "version", h_version, J, 0, JMAX)                                     \
	XX(4, STATS, "stats", h_stats, JB | ON_DS | CMD_NAME_OPT, 0, JMAX)                   \
	XX(5, IMPORT_PROGRESS, "import_progress", h_import_progress, J, 0, JMAX)             \
	XX(10, POOL_CREATE, "pool_create", h_pool_create, JA | ANY_POOL | CMD_NEW, 2, JMAX)  \
	XX(11, POOL_ADD, "pool_add", h_pool_add, JA | ON_POOL, 2, JMAX)                      \
	XX(12, POOL_LIST, "pool_list", h_pool_list, JB | LIST_POOL, 0, JMAX)                 \
	XX(13, POOL_STATUS, "pool_status", h_pool_status, JB | LIST_POOL, 0, JMAX)           \
	XX(14, POOL_EXPORT, "pool_export", h_pool_export, JA | ANY_POOL | CMD_KNOWN, 2, JMAX)\
	XX(15, POOL_IMPORT, "pool_import", h_pool_import, JA | ANY_POOL | CMD_NAME_OPT, 0, JMAX) \
	XX(16, POOL_DESTROY, "pool_destroy", h_pool_destroy, JA | ANY_POOL, 2, JMAX)         \
	XX(17, POOL_CHECK, "pool_check", h_pool_check, JA | ON_POOL, 2, JMAX)                \
	XX(18, POOL_CLEAR, "pool_clear", h_pool_clear, JA | ON_POOL, 2, JMAX)                \
	XX(60, POOL_SCRUB, "pool_scrub", h_pool_scrub, JA | ON_POOL, 2, JMAX)                \
	XX(61, POOL_OFFLINE, "pool_offline", h_pool_offline, JA | ON_POOL, 2, JMAX)          \
	XX(62, POOL_ONLINE, "pool_online", h_pool_online, JA | ON_POOL, 2, JMAX)             \
	XX(63, POOL_REPLACE, "pool_replace", h_pool_replace, JA | ON_POOL, 2, JMAX)          \
	XX(64, POOL_ATTACH, "pool_attach", h_pool_attach, JA | ON_POOL, 2, JMAX)             \
	XX(65, POOL_DETACH, "pool_detach", h_pool_detach, JA | ON_POOL, 2, JMAX)             \
	XX(66, POOL_EVENTS, "pool_events", h_pool_events, J | CMD_ADMIN | CMD_POOL | CMD_NAME_OPT, 0, JMAX) \
	XX(67, POOL_IOSTAT, "pool_iostat", h_pool_iostat, JB | LIST_POOL, 0, JMAX)           \
	XX(70, SNAPSHOT, "snapshot", h_snapshot, JA | ON_DS | CMD_SNAP, 2, JMAX)             \
	XX(71, ROLLBACK, "rollback", h_rollback, JA | ON_DS | CMD_SNAP, 2, JMAX)             \
	XX(72, SEND, "send", h_send, JA | ON_DS | CMD_SNAP | CMD_DATA, 2, JMAX)              \
	XX(73, RECEIVE, "receive", h_receive, JA | ON_DS | CMD_CHILD | CMD_DATA, 2, UINT32_MAX) \
	XX(74, CLONE, "clone", h_clone, JA | ON_DS | CMD_CHILD, 2, JMAX)                     \
	XX(75, PROMOTE, "promote", h_promote, JA | ON_DS | CMD_CHILD, 2, JMAX)               \
	XX(19, LABELCLEAR, "labelclear", h_labelclear, JA, 2, JMAX)                          \
	XX(20, DS_CREATE, "ds_create", h_ds_create, JA | CMD_SECRET | ON_DS | CMD_CHILD, 2, JMAX) \
	XX(21, DS_DESTROY, "ds_destroy", h_ds_destroy, JA | ON_DS | CMD_SNAP, 2, JMAX)       \
	XX(22, DS_LIST, "ds_list", h_ds_list, JB | CMD_DS | CMD_NAME_OPT | CMD_LOCK | CMD_DATA, 0, JMAX) \
	XX(23, DS_GET, "ds_get", h_ds_get, JB | ON_DS | CMD_SNAP, 2, JMAX)                   \
	XX(24, DS_SET, "ds_set", h_ds_set, JA | ON_DS, 2, JMAX)                              \
	XX(25, DS_INHERIT, "ds_inherit", h_ds_inherit, JA | ON_DS, 2, JMAX)                  \
	XX(26, DS_OPEN, "ds_open", h_ds_open, JB | ON_DS | CMD_OWNER | CMD_SNAP, 2, JMAX)    \
	XX(27, DS_CLOSE, "ds_close", h_ds_close, J, 2, JMAX)                                 \
	XX(28, DS_RENAME, "ds_rename", h_ds_rename, JA | ON_DS | CMD_SNAP, 2, JMAX)          \
	XX(30, KEY_LOAD, "key_load", h_key_load, JA | CMD_SECRET | ON_DS, 2, JMAX)           \
	XX(31, KEY_UNLOAD, "key_unload", h_key_unload, JA | ON_DS, 2, JMAX)                  \
	XX(32, KEY_CHANGE, "key_change", h_key_change, JA | CMD_SECRET | ON_DS, 2, JMAX)     \
	XX(33, KEY_HTTPS_CA, "key_https_ca", h_key_https_ca, JA, 0, JMAX)                    \
	XX(34, REKEY, "rekey", h_rekey, JA | ON_DS, 2, JMAX)                                 \
	XX(35, DS_ENCRYPT, "ds_encrypt", h_ds_encrypt, JA | CMD_SECRET | ON_DS, 2, JMAX)     \
	XX(40, READ, "read", NULL, CMD_IO, PROTO_IO_BODY, PROTO_IO_BODY)                    \
	XX(41, WRITE, "write", NULL, CMD_IO, PROTO_IO_BODY, UINT32_MAX)                     \
	XX(42, FLUSH, "flush", NULL, CMD_IO, PROTO_IO_BODY, PROTO_IO_BODY)                  \
	XX(43, DISCARD, "discard", NULL, CMD_IO, PROTO_IO_BODY, PROTO_IO_BODY)              \
	XX(44, MAP, "map", NULL, CMD_IO | CMD_BLOCKING, PROTO_MAP_BODY, PROTO_MAP_BODY)

enum proto_op {
#define XX(num, NAME, str, fn, flags, minb, maxb) PROTO_OP_##NAME = (num),
	PROTO_CMDS(XX)
#undef XX
};

/** Static facts of one command (the table without the handler column). */
struct proto_cmd {
	uint16_t op;
	const char *name;
	unsigned flags;
	uint32_t min_body;
	uint32_t max_body;
};

/** The command of opcode @op, or NULL if unknown. */
const struct proto_cmd *proto_cmd_by_op(unsigned op);
/** The command named @name ("ds_create"), or NULL if unknown. */
const struct proto_cmd *proto_cmd_by_name(const char *name);
/** Name of opcode @op for logs; "unknown" if not in the table. */
const char *proto_op_name(unsigned op);

/** Decoded frame header. */
struct proto_hdr {
	uint32_t len;
	uint16_t op;
	uint16_t flags;
	uint32_t req_id;
	int32_t status;
};

/** Record I/O body. */
struct proto_io {
	uint32_t handle;
	uint64_t off;
	uint32_t len;
};

/* Big-endian codecs of the wire, at a fixed place (wire_*: the on-disk codec,
 * libstore/base/bytes.h, moves a cursor instead); never memcpy a struct onto
 * the wire. */
static inline void wire_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static inline void wire_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static inline void wire_put_u64(uint8_t *p, uint64_t v)
{
	wire_put_u32(p, v >> 32);
	wire_put_u32(p + 4, (uint32_t)v);
}

static inline uint16_t wire_get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t wire_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t wire_get_u64(const uint8_t *p)
{
	return (uint64_t)wire_get_u32(p) << 32 | wire_get_u32(p + 4);
}

void proto_hdr_put(uint8_t *p, const struct proto_hdr *h);
void proto_hdr_get(const uint8_t *p, struct proto_hdr *h);
void proto_io_put(uint8_t *p, const struct proto_io *io);
void proto_io_get(const uint8_t *p, struct proto_io *io);

/**
 * Check a header against the table and @max_frame before any allocation.
 * @return 0, -EPROTO (unknown opcode, reply flag in a request, non-zero
 *         status), -EMSGSIZE (len over @max_frame or the command's limit)
 */
int proto_hdr_check(const struct proto_hdr *h, uint32_t max_frame);

/**
 * Is @name a valid pool (@pool_only) or dataset name: stor_name_check()
 * of common/name.c, the one rule (pools 1-63 bytes, one component;
 * datasets 1-255 bytes of [A-Za-z0-9_.:-] components separated by single
 * '/', starting with a letter, no empty, "." or ".." component).
 */
int proto_name_valid(const char *name, int pool_only);

/** Text for a status code of a reply (STOR_E* or -errno). Never NULL. */
const char *proto_strerror(int status);

#endif
