/* SPDX-License-Identifier: MIT */
/*
 * The NBD wire format as cofferd speaks it (the NBD project's doc/proto.md):
 * fixed newstyle negotiation, simple and structured replies. Constants and
 * the pure parsers of what a peer sends, with no I/O and no allocation, so
 * the fuzz harness links this file alone (tests/fuzz/fuzz_nbd.c); nbd.c is
 * the framing that uses them.
 *
 * Bounds: an option's data is at most NBD_OPT_MAX bytes (a name is at most
 * NBD_NAME_MAX, as the spec caps strings at 4096); a larger one is refused
 * before it is buffered. A request's header is NBD_REQ_SIZE bytes; only
 * WRITE carries data, at most the export's maximum block size.
 */
#ifndef COFFERD_NBD_PROTO_H
#define COFFERD_NBD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define NBD_MAGIC 0x4e42444d41474943ull     /* "NBDMAGIC" */
#define NBD_IHAVEOPT 0x49484156454f5054ull  /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ull /* option replies */
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

#define NBD_GREETING_SIZE 18u /* NBDMAGIC, IHAVEOPT, u16 handshake flags */
#define NBD_OPT_HDR 16u       /* IHAVEOPT, u32 option, u32 length */
#define NBD_OPT_REPLY_HDR 20u /* magic, u32 option, u32 reply type, u32 length */
#define NBD_REQ_SIZE 28u      /* magic, u16 flags, u16 type, u64 cookie, u64 offset, u32 length */
#define NBD_SIMPLE_REPLY_SIZE 16u
#define NBD_CHUNK_HDR 20u     /* magic, u16 flags, u16 type, u64 cookie, u32 length */
#define NBD_NAME_MAX 4096u
#define NBD_OPT_MAX (NBD_NAME_MAX + 4096u)
#define NBD_INFO_REQ_MAX 64u  /* information requests of one INFO/GO we look at */
#define NBD_QUERIES_MAX 16u   /* meta context queries of one option we look at */

/* handshake flags (server), client flags */
#define NBD_FLAG_FIXED_NEWSTYLE 0x1u
#define NBD_FLAG_NO_ZEROES 0x2u
#define NBD_FLAG_C_FIXED_NEWSTYLE 0x1u
#define NBD_FLAG_C_NO_ZEROES 0x2u

/* options */
#define NBD_OPT_EXPORT_NAME 1u
#define NBD_OPT_ABORT 2u
#define NBD_OPT_LIST 3u
#define NBD_OPT_STARTTLS 5u
#define NBD_OPT_INFO 6u
#define NBD_OPT_GO 7u
#define NBD_OPT_STRUCTURED_REPLY 8u
#define NBD_OPT_LIST_META_CONTEXT 9u
#define NBD_OPT_SET_META_CONTEXT 10u

/* option replies */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR(n) (0x80000000u | (n))
#define NBD_REP_ERR_UNSUP NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID NBD_REP_ERR(3)
#define NBD_REP_ERR_PLATFORM NBD_REP_ERR(4)
#define NBD_REP_ERR_TLS_REQD NBD_REP_ERR(5)
#define NBD_REP_ERR_UNKNOWN NBD_REP_ERR(6)
#define NBD_REP_ERR_SHUTDOWN NBD_REP_ERR(7)
#define NBD_REP_ERR_TOO_BIG NBD_REP_ERR(9)

/* information items of INFO and GO */
#define NBD_INFO_EXPORT 0u
#define NBD_INFO_NAME 1u
#define NBD_INFO_DESCRIPTION 2u
#define NBD_INFO_BLOCK_SIZE 3u

/* transmission flags */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_CACHE (1u << 10)

/* commands and their flags */
#define NBD_CMD_READ 0u
#define NBD_CMD_WRITE 1u
#define NBD_CMD_DISC 2u
#define NBD_CMD_FLUSH 3u
#define NBD_CMD_TRIM 4u
#define NBD_CMD_CACHE 5u
#define NBD_CMD_WRITE_ZEROES 6u
#define NBD_CMD_BLOCK_STATUS 7u
#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)

/* structured reply chunks */
#define NBD_REPLY_FLAG_DONE (1u << 0)
#define NBD_REPLY_TYPE_NONE 0u
#define NBD_REPLY_TYPE_OFFSET_DATA 1u
#define NBD_REPLY_TYPE_OFFSET_HOLE 2u
#define NBD_REPLY_TYPE_BLOCK_STATUS 5u
#define NBD_REPLY_TYPE_ERROR 0x8001u
#define NBD_REPLY_TYPE_ERROR_OFFSET 0x8002u

/* base:allocation */
#define NBD_STATE_HOLE 0x1u
#define NBD_STATE_ZERO 0x2u
#define NBD_META_ALLOCATION "base:allocation"
#define NBD_META_ALLOCATION_ID 1u

/* errors on the wire (Linux numbers, whatever the host's) */
#define NBD_EPERM 1u
#define NBD_EIO 5u
#define NBD_ENOMEM 12u
#define NBD_EINVAL 22u
#define NBD_ENOSPC 28u
#define NBD_EOVERFLOW 75u
#define NBD_ENOTSUP 95u
#define NBD_ESHUTDOWN 108u

/** An option's header. */
struct nbd_opt {
	uint32_t opt;
	uint32_t len;
};

/**
 * The option header at @p (@avail >= NBD_OPT_HDR bytes).
 * @return 0, -EPROTO (not IHAVEOPT)
 */
int nbd_opt_get(const uint8_t *p, struct nbd_opt *o);

/** What an INFO or GO asks for. */
struct nbd_export_req {
	const uint8_t *name;  /* in the option's data, not NUL-terminated */
	uint32_t namelen;
	uint16_t ninfo;       /* information requests given */
	uint16_t info[NBD_INFO_REQ_MAX]; /* the first NBD_INFO_REQ_MAX of them */
};

/**
 * Parse the data of INFO or GO (@len bytes at @d).
 * @return 0, -EINVAL (lengths disagree), -ENAMETOOLONG (name over NBD_NAME_MAX)
 */
int nbd_export_req_parse(const uint8_t *d, uint32_t len, struct nbd_export_req *r);

/** What LIST_META_CONTEXT or SET_META_CONTEXT asks for. */
struct nbd_meta_req {
	const uint8_t *name; /* the export */
	uint32_t namelen;
	uint32_t nqueries;
	const uint8_t *query[NBD_QUERIES_MAX]; /* the first NBD_QUERIES_MAX */
	uint32_t querylen[NBD_QUERIES_MAX];
};

/**
 * Parse the data of a meta context option (@len bytes at @d).
 * @return 0, -EINVAL (lengths disagree), -ENAMETOOLONG
 */
int nbd_meta_req_parse(const uint8_t *d, uint32_t len, struct nbd_meta_req *r);

/** What an option gets on a connection that may still have to start TLS. */
enum nbd_gate {
	NBD_GATE_PASS,     /* handle it as the option it is */
	NBD_GATE_STARTTLS, /* start TLS */
	NBD_GATE_TLS_REQD, /* refuse it: NBD_REP_ERR_TLS_REQD */
	NBD_GATE_CLOSE,    /* EXPORT_NAME has no error reply: close */
};

/**
 * The TLS-only server's rule for option @opt: before TLS (@tls_required)
 * only STARTTLS and ABORT are taken; after it, or on a socket without TLS,
 * every option passes (STARTTLS then answers for itself).
 */
enum nbd_gate nbd_opt_gate(uint32_t opt, int tls_required);

/** A transmission request's header. */
struct nbd_request {
	uint16_t flags;
	uint16_t type;
	uint64_t cookie;
	uint64_t off;
	uint32_t len;
};

/** The request header at @p (NBD_REQ_SIZE bytes). @return 0, -EPROTO (bad magic) */
int nbd_request_get(const uint8_t *p, struct nbd_request *r);

/**
 * Check @r against an export of @size bytes and a maximum block of @max_len:
 * @return 0, or the NBD error to answer with (NBD_EINVAL for an unknown
 *         command or flag, a zero length or one over @max_len or past the
 *         end; NBD_ENOSPC for a write past the end)
 */
uint32_t nbd_request_check(const struct nbd_request *r, uint64_t size, uint32_t max_len,
			   int block_status);

/** Bytes of data that follow the header of @r on the wire (WRITE only). */
static inline uint32_t nbd_request_data(const struct nbd_request *r)
{
	return r->type == NBD_CMD_WRITE ? r->len : 0;
}

#endif
