// SPDX-License-Identifier: MIT
/*
 * The transport of cofferd on its libuv loop (Unix sockets, and TCP with TLS): accept, frame
 * requests, hand each complete frame to the dispatcher (dispatch.h) and
 * write the replies it completes back, possibly out of order, with one
 * uv_write per burst. It knows no pool, handler or dataset handle: what a
 * frame means is the dispatcher's business, the bytes and the limits are
 * this file's.
 *
 * Each socket has a framing (rpc.h): the control protocol of proto.h, at
 * the end of this file, or NBD (nbd.c). The framing says where a frame ends
 * and turns it into calls; buffering, limits, timeouts and the write queue
 * are shared, so a limit is one limit over both sockets (per uid, in all).
 *
 * Loops (loops.c): the main loop accepts. It learns a local peer's
 * credentials and applies the connection limits there, in the order of the
 * accepts, then hands the socket to the loop serving the fewest
 * connections, where everything else of that connection happens; TCP
 * peers stay on the main loop, whose pool bounds them. The limits over all
 * connections are shared: a request moves atomic counters, a connection's
 * arrival and departure take uids_lock, and a loop that releases a limit
 * wakes the others whose connections it stopped.
 *
 * Invariants: only its loop's thread touches a connection. A connection lives
 * while its handle is open or any of its calls is in flight (refs); a call
 * whose connection closed is completed and dropped. Back-pressure: a
 * connection stops being read while PROTO_INFLIGHT_MAX requests or
 * INFLIGHT_BYTES_MAX bytes of them are in flight, or REPLY_QUEUE_MAX reply
 * bytes wait for the socket; nothing on the server grows without bound
 * because a client sends fast or does not read.
 *
 * Limits no local user can push past (cofferd.conf(5)): per uid, accepted
 * connections (max_connections_per_uid) and requests in flight
 * (max_requests_per_uid); the last admin_connections slots go to admins
 * only; over max_buffered (read buffers + calls in flight, srv.buffered)
 * every connection stops at its next frame boundary. Before HELLO a peer
 * gets a 4 KiB read buffer and any frame larger than a HELLO closes it;
 * hello_timeout and idle_timeout close silent ones. Fairness: a connection
 * parses PARSE_QUANTUM frames per turn, the rest waits for here->kick, so a
 * flood on some connections cannot starve root's ping on another.
 *
 * TCP (rpc_listen_tcp) is for a framing that starts TLS (rpc_conn_starttls,
 * tls.h): the TLS session sits between the stream and the read buffer, so
 * the framing sees plaintext frames and the limits and back-pressure are
 * the ones above. Until its handshake names a local user, a TCP peer is
 * the uid RPC_UID_UNKNOWN, may open nothing, and lives in a pool of its
 * own (srv.pa_head): it counts against no limit of local users
 * (max_connections, admin_connections, any uid's), only against
 * max_tls_handshakes over all addresses and max_tls_handshakes_per_address
 * from its address (an IPv6 one by its /64), and it has
 * tls_handshake_timeout to get named. A full pool never refuses: the
 * oldest peer of the newcomer's address goes, or the oldest of all, so
 * that a flood of idle peers (anyone can open them, from 127.0.0.1 too)
 * never turns away a client that completes its handshake; that one leaves
 * the pool for the limits of the user it names (uid, gid, the groups a
 * login gives it), admin or not by the same rule as a local peer. A
 * peer's bytes buffered after the frame that starts TLS are not taken as
 * TLS nor as plaintext: the connection closes (a man in the middle could
 * inject them before the handshake).
 *
 * The socket: a path a live daemon answers on is never taken over
 * (rpc_socket_probe), and at exit the path is unlinked only if it still
 * names the inode bound here, so a successor's socket survives our exit.
 *
 * Key material (CMD_SECRET frames: key text for create, load-key and
 * change-key) and data to write to an encrypted dataset (WRITE frames on
 * its handles) are wiped from the read buffer as soon as their frame has
 * been copied into a call, and the call wipes its copies when freed. Until then
 * such a frame may be moved (compaction) or the buffer grown: both wipe the
 * bytes they leave behind. A closing connection wipes what it still holds.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "counters.h"
#include "dispatch.h"
#include "log.h"
#include "loops.h"
#include "rpc.h"
#include "sendring.h"
#include "tls.h"

#define READ_CHUNK (256u << 10)
#define REPLY_QUEUE_MAX (8u << 20)
#define INFLIGHT_BYTES_MAX (64u << 20) /* request bodies + read buffers per connection */
#define RBUF_KEEP (1u << 20)           /* a bigger read buffer is freed once empty */
#define WRITE_BATCH 64u
#define PREHELLO_CHUNK 4096u  /* read buffer of a connection before its HELLO */
#define PARSE_QUANTUM 64u     /* frames of one connection per turn of the loop */
#define SWEEP_MS 1000u        /* how often HELLO and idle timeouts are checked */
#define SHUTDOWN_GRACE_MS 5000u /* then clients that do not read are cut off */
#define EVICT_LOG_MS 10000u   /* at most one warning per kind of eviction this often */
#define RPC_UID_UNKNOWN ((uid_t)-1) /* a TCP peer before its TLS handshake named it */
#define TLS_SLICE (256u << 10) /* plaintext put into a TLS session before its records go out */
/*
 * Connections the kernel holds until the loop accepts them: as many as
 * net.core.somaxconn allows (the kernel caps it), so that a burst of
 * clients (fio opening one NBD connection per job, 192 at once) is not
 * refused with EAGAIN while the loop is busy; max_connections still decides
 * who stays once accepted.
 */
#define LISTEN_BACKLOG 65535

/* A connection's or a listener's libuv handle: a Unix socket or TCP. */
union stream {
	uv_pipe_t pipe;
	uv_tcp_t tcp;
	uv_stream_t s;
	uv_handle_t h;
};

/* What one uid holds, for the per-uid limits. */
struct uid_ent {
	uid_t uid;
	unsigned refs;     /* connections pointing here, accepted or being refused */
	unsigned nconns;   /* accepted connections */
	atomic_uint inflight; /* requests in flight over all of them, on every loop */
	atomic_int paused; /* one of them stopped reading at max_requests_per_uid */
	int refused_logged;
	struct uid_ent *next;
};

struct rpc_conn {
	union stream io;
	const struct rpc_framing *fr;
	struct tls_ctx *tls_ctx; /* TCP: the credentials STARTTLS uses; NULL on a Unix socket */
	struct tls_conn *tls; /* the session once the framing started TLS */
	int tls_peer;        /* its handshake named the peer: dc.peer is that user */
	int tls_bye;         /* close_notify is queued */
	char addr[64];       /* TCP: the peer's address, for the log */
	char host[INET6_ADDRSTRLEN]; /* TCP: the address alone */
	uint8_t src[8];      /* TCP: what the pool's cap per address compares (IPv4, IPv6 /64) */
	uint8_t srclen;
	int preauth;         /* TCP, not named yet: in the pool of srv.pa_head, in no uid's count */
	struct rpc_conn *pa_prev, *pa_next; /* that pool, oldest first */
	void *priv;          /* the framing's */
	int held;            /* the framing waits for a reply before the next frame */
	int handshake;       /* the framing's negotiation goes on after dc.hello_done */
	struct disp_client dc; /* the peer, HELLO state, its dataset handles */
	gid_t *groups;       /* dc.peer.groups, owned: SO_PEERGROUPS */
	int closing;         /* handle closed or closing: no more replies */
	int close_after;     /* close once pending replies are written */
	int reading;
	int parsing;         /* conn_parse is on the stack: do not re-enter */
	int counted;         /* accepted: counted in ue->nconns */
	int in_nconns;       /* counted in srv.nconns */
	int backlog;         /* its turn is over; parses on in here->kick */
	struct uid_ent *ue;  /* NULL while preauth */
	uint64_t since;      /* uv_now() at accept, for hello_timeout */
	uint64_t last_active; /* uv_now() of the last byte read or written */
	size_t frame_need;   /* bytes of the frame being received, 0 between frames */
	size_t rcounted;     /* rlen as counted in srv.buffered */
	struct rpc_conn *backlog_next;
	unsigned refs;       /* 1 for the handle + 1 per call in flight */
	unsigned inflight;
	size_t inflight_bytes; /* memory the calls in flight hold */
	size_t queued_bytes; /* reply bytes handed to uv_write, not yet written */
	uint8_t *rbuf;
	size_t rpos, rlen, rcap;
	struct rpc_req *pend_head, *pend_tail; /* replies not yet given to uv_write */
	unsigned npend;
	int in_flush_list;
	struct rpc_conn *flush_next;
	struct rpc_conn *prev, *next;
};

struct wreq {
	uv_write_t req;
	struct rpc_conn *conn;
	struct rpc_req *calls;
	uint8_t *cipher;     /* TLS: the records written, instead of the calls' buffers */
	size_t bytes;
	unsigned nb;         /* bufs in use */
	struct wreq *next_free;
	uv_buf_t bufs[];
};

/* sendring.c takes a uv_buf_t array as the iovec array it is on Unix */
_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec) &&
		       offsetof(uv_buf_t, base) == offsetof(struct iovec, iov_base) &&
		       offsetof(uv_buf_t, len) == offsetof(struct iovec, iov_len),
	       "uv_buf_t is not an iovec");

/* One listening socket and its framing. */
struct listener {
	union stream io;
	const struct rpc_framing *fr;
	struct tls_ctx *tls; /* TCP */
	char *path;          /* the socket file, or TCP's HOST:PORT */
	int listening;
	int bound;           /* the socket file is ours: dev/ino are set */
	dev_t dev;           /* the inode we bound, so that exit removes no other */
	ino_t ino;
};

#define LISTENERS_MAX 3u

/*
 * What each event loop (loops.c) has of its own: the connections it serves
 * and the handles that serve them. Only its thread touches it, but for the
 * part under @lock, through which other threads reach it (new connections,
 * a limit released, the shutdown), waking it with @wake.
 */
struct rpc_loop {
	uv_loop_t *loop;
	unsigned idx;
	struct rpc_conn *conns;
	unsigned live_conns; /* allocated, not yet freed */
	atomic_uint load;    /* its connections, for the choice of a loop for the next */
	struct rpc_conn *flush_list;
	struct wreq *wreq_free;  /* of writes that went at once, for the next ones */
	unsigned nwreq_free;
	struct sendring *sends;  /* a turn's replies in one system call; NULL: a writev each */
	uv_check_t tick;     /* after each poll: hand I/O to the workers, write replies */
	uv_timer_t grace;
	int resume_all;      /* a limit was released: kick resumes every connection */
	struct rpc_conn *backlog_head; /* connections whose turn ended with frames left */
	uv_idle_t kick;      /* runs while there is deferred parsing: poll does not block */
	uv_timer_t sweep;    /* hello and idle timeouts */
	uv_async_t wake;
	pthread_mutex_t lock;
	struct arrival *incoming; /* connections the main loop accepted for it, under @lock */
	int stop_asked;      /* under @lock */
	int resume_asked;    /* under @lock */
	int stopping;        /* its shutdown began */
	int drained;         /* and ended: its handles are closed (set under @lock) */
	uint8_t cipher_in[READ_CHUNK]; /* TLS: what a read brought, till read_cb decrypts it */
};

/*
 * The loops share the listeners (on the main loop), the limits over all
 * connections and the TCP peers' pool (TCP stays on the main loop). The
 * counters a request moves are atomics; what a connection's arrival and
 * departure move is under uids_lock.
 */
static struct {
	const struct config *cfg;
	struct listener lst[LISTENERS_MAX];
	unsigned nlst;
	atomic_uint nconns;  /* on some loop's conns: local users' and the preauth pool's */
	struct rpc_conn *pa_head, *pa_tail; /* TCP peers not named yet, oldest first */
	atomic_uint npreauth;
	uint64_t addr_warn_at, pool_warn_at; /* uv_now() when an eviction may be logged again */
	atomic_ullong next_id;
	atomic_int stopping;
	void (*on_drained)(void);     /* on each loop, once its connections are gone */
	void (*on_all_drained)(void); /* on the main loop, once every loop's are */
	atomic_uint ndrained;
	pthread_mutex_t uids_lock;    /* uids, and each one's refs, nconns, refused_logged */
	struct uid_ent *uids;
	atomic_ullong buffered; /* read buffers + bodies and reply buffers of calls in flight */
	atomic_int mem_paused;  /* some connection stopped reading at max_buffered */
	struct rpc_loop *loops[CONFIG_LOOPS_MAX];
	unsigned nloops;
	unsigned next_loop;     /* where a tie in load sends the next connection */
} srv = { .uids_lock = PTHREAD_MUTEX_INITIALIZER };

/* The loop this thread runs (loops.c): every callback here runs on one. */
static _Thread_local struct rpc_loop *here;

static void conn_close(struct rpc_conn *conn);
static void conn_parse(struct rpc_conn *conn);
static void conn_maybe_resume(struct rpc_conn *conn);
static void check_drained(void);
static void conn_check_close(struct rpc_conn *conn);
static void kick_start(void);
static void rbuf_compact(struct rpc_conn *conn);
static int rbuf_grow(struct rpc_conn *conn, size_t cap);

static void req_free(struct rpc_req *r)
{
	dispatch_call_destroy(&r->dc);
}

/* ---- limits: per uid, and the bytes of all requests together ---- */

static struct uid_ent *uid_get(uid_t uid)
{
	struct uid_ent *ue;

	pthread_mutex_lock(&srv.uids_lock);
	for (ue = srv.uids; ue; ue = ue->next)
		if (ue->uid == uid)
			break;
	if (!ue) {
		ue = calloc(1, sizeof(*ue));
		if (ue) {
			ue->uid = uid;
			ue->next = srv.uids;
			srv.uids = ue;
		}
	}
	if (ue)
		ue->refs++;
	pthread_mutex_unlock(&srv.uids_lock);
	return ue;
}

static void uid_put(struct uid_ent *ue)
{
	struct uid_ent **pp;

	if (!ue)
		return;
	pthread_mutex_lock(&srv.uids_lock);
	if (--ue->refs == 0) {
		for (pp = &srv.uids; *pp != ue; pp = &(*pp)->next)
			;
		*pp = ue->next;
		free(ue);
	}
	pthread_mutex_unlock(&srv.uids_lock);
}

/*
 * May a peer of @ue, known (a local socket's, or a TCP peer its handshake
 * named) and @admin or not, be one of the connections of local users? They
 * are the ones on the loops outside the preauth pool, this one among them.
 * The last admin_connections slots, at most half of them, are for
 * administrators. If so, it counts in its uid's connections from now on.
 * @return 0, or -EUSERS with @why; *@quiet: its uid has been told already
 */
static int peer_admit(struct uid_ent *ue, int admin, char *why, size_t len, int *quiet)
{
	unsigned cap = srv.cfg->max_connections, reserve = srv.cfg->admin_connections;
	unsigned held = atomic_load(&srv.nconns) - atomic_load(&srv.npreauth);
	int ret = -EUSERS;

	*quiet = 0;
	if (reserve > cap / 2)
		reserve = cap / 2;
	pthread_mutex_lock(&srv.uids_lock);
	if (held > cap) {
		snprintf(why, len, "%u connections is the limit", cap);
	} else if (!admin && held > cap - reserve) {
		snprintf(why, len, "the last %u of %u connections are kept for administrators",
			 reserve, cap);
	} else if (ue->nconns >= srv.cfg->max_connections_per_uid) {
		snprintf(why, len, "%u connections per uid is the limit",
			 srv.cfg->max_connections_per_uid);
		*quiet = ue->refused_logged;
		ue->refused_logged = 1;
	} else {
		ue->nconns++;
		ret = 0;
	}
	pthread_mutex_unlock(&srv.uids_lock);
	return ret;
}

/* A connection of @ue admitted by peer_admit() is gone. */
static void uid_uncount(struct uid_ent *ue)
{
	pthread_mutex_lock(&srv.uids_lock);
	ue->nconns--;
	if (ue->nconns < srv.cfg->max_connections_per_uid)
		ue->refused_logged = 0;
	pthread_mutex_unlock(&srv.uids_lock);
}

/* @conn leaves the count of connections, and its uid's. */
static void conn_leave(struct rpc_conn *conn)
{
	if (conn->in_nconns) {
		conn->in_nconns = 0;
		srv.nconns--;
	}
	if (conn->counted) {
		conn->counted = 0;
		uid_uncount(conn->ue);
	}
}

/* ---- TCP peers not named yet: a pool of their own ---- */

static void preauth_unlink(struct rpc_conn *conn)
{
	if (!conn->preauth)
		return;
	conn->preauth = 0;
	if (conn->pa_prev)
		conn->pa_prev->pa_next = conn->pa_next;
	else
		srv.pa_head = conn->pa_next;
	if (conn->pa_next)
		conn->pa_next->pa_prev = conn->pa_prev;
	else
		srv.pa_tail = conn->pa_prev;
	conn->pa_prev = conn->pa_next = NULL;
	srv.npreauth--;
}

static int same_source(const struct rpc_conn *a, const struct rpc_conn *b)
{
	return a->srclen == b->srclen && memcmp(a->src, b->src, a->srclen) == 0;
}

/* Say why the pool closed a peer, at most once per EVICT_LOG_MS for each reason. */
static void evict_log(uint64_t *next_at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void evict_log(uint64_t *next_at, const char *fmt, ...)
{
	uint64_t now = uv_now(here->loop);
	char msg[160];
	va_list ap;

	if (now < *next_at)
		return;
	*next_at = now + EVICT_LOG_MS;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warn("%s", msg);
}

/*
 * Take @conn, a TCP peer just accepted, into the pool, the newest. At the
 * cap of its address the oldest peer of that address goes first, else in a
 * full pool the oldest of all: a newcomer is never refused, and a flood from
 * one address (at most the cap per address) pushes out only its own peers.
 * So a client is closed here only if that many newer peers came while it
 * did its handshake. The walk is over at most max_tls_handshakes peers.
 */
static void preauth_add(struct rpc_conn *conn)
{
	struct rpc_conn *c, *victim = NULL, *oldest_same = NULL;
	unsigned same = 0;

	for (c = srv.pa_head; c; c = c->pa_next)
		if (same_source(c, conn) && same++ == 0)
			oldest_same = c;
	if (same >= srv.cfg->max_tls_handshakes_per_address) {
		victim = oldest_same;
		evict_log(&srv.addr_warn_at,
			  "unauthenticated TCP peers of %s reached %u: the oldest is closed",
			  conn->host, srv.cfg->max_tls_handshakes_per_address);
	} else if (srv.npreauth >= srv.cfg->max_tls_handshakes) {
		victim = srv.pa_head;
		evict_log(&srv.pool_warn_at,
			  "unauthenticated TCP peers reached %u: the oldest is closed",
			  srv.cfg->max_tls_handshakes);
	}
	if (victim) {
		log_debug("conn %llu (%s): closed for a newer unauthenticated peer",
			  (unsigned long long)victim->dc.id, victim->addr);
		conn_close(victim); /* leaves the pool */
	}
	conn->preauth = 1;
	conn->pa_prev = srv.pa_tail;
	if (srv.pa_tail)
		srv.pa_tail->pa_next = conn;
	else
		srv.pa_head = conn;
	srv.pa_tail = conn;
	srv.npreauth++;
}

static int over_buffered(void)
{
	return srv.buffered >= srv.cfg->max_buffered;
}

/*
 * Ask every loop to try each of its connections again: a shared limit was
 * released, and the connections it stopped may be on any loop.
 */
static void loop_poke(struct rpc_loop *lp, int stop, int resume);

static void resume_everywhere(void)
{
	for (unsigned i = 0; i < srv.nloops; i++) {
		struct rpc_loop *lp = srv.loops[i];

		if (lp == here) {
			here->resume_all = 1;
			kick_start();
		} else {
			loop_poke(lp, 0, 1);
		}
	}
}

/*
 * Memory was given back or a uid's requests finished: connections that
 * stopped reading for max_buffered or max_requests_per_uid resume, from
 * each loop's kick (never from inside the call that released the limit).
 */
static void limits_released(struct uid_ent *ue)
{
	int resume = 0;

	/* sequentially consistent, with note_blocked(): one of the two sees the other */
	if (ue && atomic_load(&ue->paused) && ue->inflight < srv.cfg->max_requests_per_uid &&
	    atomic_exchange(&ue->paused, 0))
		resume = 1;
	if (atomic_load(&srv.mem_paused) && !over_buffered() && atomic_exchange(&srv.mem_paused, 0)) {
		log_debug("buffered requests below max_buffered again: reading resumes");
		resume = 1;
	}
	if (resume)
		resume_everywhere();
}

/* Count what the read buffer of @conn holds in srv.buffered. */
static void rbuf_account(struct rpc_conn *conn)
{
	size_t was = conn->rcounted;

	/* one atomic add of the difference: the loops share the counter */
	if (conn->rlen >= was)
		srv.buffered += conn->rlen - was;
	else
		srv.buffered -= was - conn->rlen;
	conn->rcounted = conn->rlen;
	if (conn->rlen < was)
		limits_released(NULL);
}

static void conn_unref(struct rpc_conn *conn)
{
	if (--conn->refs > 0)
		return;
	/* its handles lived until its calls in flight were done (registry.c) */
	dispatch_client_fini(&conn->dc);
	if (conn->fr && conn->fr->fini)
		conn->fr->fini(conn);
	tls_conn_free(conn->tls);
	if (conn->rbuf)
		/* a frame cut short at close may be key text */
		explicit_bzero(conn->rbuf, conn->rlen);
	free(conn->groups);
	free(conn->rbuf);
	srv.buffered -= conn->rcounted;
	uid_put(conn->ue);
	free(conn);
	here->live_conns--;
	atomic_fetch_sub(&here->load, 1);
	check_drained();
}

/* ---- replies ---- */

/* A connection marked close_after goes once everything owed to it is written. */
static int tls_send(struct rpc_conn *conn, struct rpc_req *calls);

static void conn_check_close(struct rpc_conn *conn)
{
	if (!conn->close_after || conn->closing || conn->inflight || conn->pend_head ||
	    conn->queued_bytes)
		return;
	if (conn->tls && conn->tls_peer && !conn->tls_bye) {
		/* an orderly end of the session; the connection goes once it is written */
		conn->tls_bye = 1;
		tls_conn_shutdown(conn->tls);
		if (tls_send(conn, NULL) == 1)
			return;
	}
	conn_close(conn);
}

static void flush_schedule(struct rpc_conn *conn)
{
	if (conn->in_flush_list)
		return;
	conn->in_flush_list = 1;
	conn->flush_next = here->flush_list;
	here->flush_list = conn;
	conn->refs++;
}

static void write_cb(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct rpc_conn *conn = w->conn;
	struct rpc_req *c = w->calls, *next;

	for (; c; c = next) {
		next = c->next;
		req_free(c);
	}
	conn->queued_bytes -= w->bytes;
	conn->last_active = uv_now(here->loop);
	free(w->cipher);
	free(w);
	if (status < 0 && !conn->closing) {
		log_debug("conn %llu: write: %s", (unsigned long long)conn->dc.id,
			  uv_strerror(status));
		conn_close(conn);
	}
	conn_check_close(conn);
	if (!conn->closing)
		conn_maybe_resume(conn);
	conn_unref(conn);
}

/*
 * Write what the TLS session of @conn has for the peer, as one uv_write
 * that frees @calls (their plaintext is in the records already) when done.
 * @return 1 written, 0 nothing to write, -1 the connection closed
 */
static int tls_send(struct rpc_conn *conn, struct rpc_req *calls)
{
	struct wreq *w;
	uint8_t *buf;
	size_t n = tls_conn_take_out(conn->tls, &buf);
	uv_buf_t b;
	struct rpc_req *c, *next;

	if (n == 0 && !calls)
		return 0;
	w = calloc(1, sizeof(*w) + sizeof(uv_buf_t));
	if (!w) {
		free(buf);
		for (c = calls; c; c = next) {
			next = c->next;
			req_free(c);
		}
		conn_close(conn);
		return -1;
	}
	w->conn = conn;
	w->calls = calls;
	w->cipher = buf;
	w->bytes = n;
	b = uv_buf_init((char *)buf, (unsigned)n);
	conn->queued_bytes += n;
	conn->refs++;
	if (uv_write(&w->req, &conn->io.s, &b, 1, write_cb) < 0) {
		w->bytes = 0;
		conn->queued_bytes -= n;
		write_cb(&w->req, UV_EPIPE); /* frees, closes, drops the ref */
		return -1;
	}
	return 1;
}

/*
 * Replies of @conn through its TLS session, once the handshake named the
 * peer: as many as fit TLS_SLICE bytes of records in one write. The
 * records go out whenever that much is due, even inside a reply, so the
 * session's output buffer (which never shrinks) stays that small. A write
 * frees the replies whose last byte it carries.
 */
static void conn_flush_tls(struct rpc_conn *conn)
{
	struct rpc_req *done = NULL, **tail = &done;

	while (conn->pend_head && !conn->closing && conn->tls_peer) {
		struct rpc_req *c = conn->pend_head;
		const uint8_t *parts[2] = { c->hdrbuf, c->dc.payload };
		size_t lens[2] = { c->hdr_len, c->dc.payload_len };

		conn->pend_head = c->next;
		if (!conn->pend_head)
			conn->pend_tail = NULL;
		conn->npend--;
		c->next = NULL;
		for (int i = 0; i < 2; i++) {
			for (size_t off = 0; off < lens[i];) {
				size_t n = lens[i] - off < TLS_SLICE ? lens[i] - off : TLS_SLICE;

				if (tls_conn_write(conn->tls, parts[i] + off, n) < 0) {
					log_info("conn %llu (%s): %s: closed",
						 (unsigned long long)conn->dc.id, conn->addr,
						 tls_conn_error(conn->tls));
					req_free(c);
					conn_close(conn);
					goto out;
				}
				off += n;
				if (tls_conn_pending(conn->tls) >= TLS_SLICE) {
					/* @c is not all written: it stays out of this write */
					int ret = tls_send(conn, done);

					done = NULL;
					tail = &done;
					if (ret < 0) {
						req_free(c);
						return;
					}
				}
			}
		}
		*tail = c;
		tail = &c->next;
	}
out:
	if (done && !conn->closing)
		tls_send(conn, done);
	else
		for (struct rpc_req *c = done, *next; c; c = next) {
			next = c->next;
			req_free(c);
		}
	if (!conn->closing)
		conn_check_close(conn);
}

/*
 * Write what @w holds at once if libuv has nothing of @conn queued (so the
 * order holds): a reply that fits the socket then costs one writev and
 * no request, where uv_write would also change the descriptor's epoll
 * watch twice (POLLOUT on and off: an epoll_ctl a reply).
 * @return bytes written (the first ones of w->bufs), or a libuv error
 */
static int write_now(struct rpc_conn *conn, struct wreq *w, unsigned nb)
{
	if (conn->queued_bytes)
		return 0;
	return uv_try_write((uv_stream_t *)&conn->io.s, w->bufs, nb);
}

/* Drop the first @n bytes of @w's @nb buffers. @return the buffers left */
static unsigned bufs_skip(struct wreq *w, unsigned nb, size_t n)
{
	unsigned i = 0;

	while (i < nb && n >= w->bufs[i].len)
		n -= w->bufs[i++].len;
	if (i < nb) {
		w->bufs[i].base += n;
		w->bufs[i].len -= n;
	}
	memmove(w->bufs, w->bufs + i, (nb - i) * sizeof(w->bufs[0]));
	return nb - i;
}

/*
 * Up to WRITE_BATCH pending replies of @conn, off its queue, into a write.
 * @return it, or NULL when out of memory (@conn is then closed)
 */
static struct wreq *wreq_take(struct rpc_conn *conn)
{
	unsigned n = conn->npend < WRITE_BATCH ? conn->npend : WRITE_BATCH;
	struct wreq *w = here->wreq_free;
	struct rpc_req *c, *last = NULL;

	if (w) {
		here->wreq_free = w->next_free;
		here->nwreq_free--;
	} else {
		w = malloc(sizeof(*w) + 2 * WRITE_BATCH * sizeof(uv_buf_t));
	}
	if (!w) {
		conn_close(conn);
		return NULL;
	}
	memset(w, 0, sizeof(*w));
	w->conn = conn;
	w->calls = conn->pend_head;
	for (unsigned i = 0; i < n; i++) {
		c = conn->pend_head;
		if (c->hdr_len)
			w->bufs[w->nb++] = uv_buf_init((char *)c->hdrbuf, c->hdr_len);
		if (c->dc.payload_len)
			w->bufs[w->nb++] = uv_buf_init((char *)c->dc.payload, c->dc.payload_len);
		w->bytes += c->hdr_len + c->dc.payload_len;
		last = c;
		conn->pend_head = c->next;
		conn->npend--;
	}
	last->next = NULL;
	if (!conn->pend_head)
		conn->pend_tail = NULL;
	return w;
}

/*
 * @w was written at once as far as @ret says (bytes, or a libuv error):
 * the rest goes to libuv's queue. @return 0, or -1 when @conn closed.
 */
static int wreq_wrote(struct wreq *w, int ret)
{
	struct rpc_conn *conn = w->conn;
	struct rpc_req *c, *next;

	if (ret >= 0 && (size_t)ret == w->bytes) {
		conn->last_active = uv_now(here->loop);
		for (c = w->calls; c; c = next) {
			next = c->next;
			req_free(c);
		}
		if (here->nwreq_free < WRITE_BATCH) {
			w->next_free = here->wreq_free;
			here->wreq_free = w;
			here->nwreq_free++;
		} else {
			free(w);
		}
		return 0;
	}
	if (ret > 0) {
		w->nb = bufs_skip(w, w->nb, (size_t)ret);
		w->bytes -= (size_t)ret;
	}
	conn->queued_bytes += w->bytes;
	conn->refs++;
	if (ret >= 0 || ret == UV_EAGAIN)
		ret = uv_write(&w->req, &conn->io.s, w->bufs, w->nb, write_cb);
	if (ret < 0) {
		conn->refs--;
		conn->queued_bytes -= w->bytes;
		for (c = w->calls; c; c = next) {
			next = c->next;
			req_free(c);
		}
		free(w);
		conn_close(conn);
		return -1;
	}
	return 0;
}

/* Hand every pending reply of @conn to the socket (up to WRITE_BATCH calls a write). */
static void conn_flush(struct rpc_conn *conn)
{
	if (conn->tls) {
		conn_flush_tls(conn);
		return;
	}
	while (conn->pend_head && !conn->closing) {
		struct wreq *w = wreq_take(conn);

		if (!w || wreq_wrote(w, write_now(conn, w, w->nb)) < 0)
			return;
	}
	conn_check_close(conn);
}

static void sent_cb(void *tag, int res)
{
	wreq_wrote(tag, res);
}

/*
 * Every connection with replies: the first write of each that can go at
 * once (no TLS, nothing queued in libuv) goes with the others' in one
 * system call (sendring.c), then conn_flush() does the rest as before.
 */
static void flush_all(void)
{
	while (here->flush_list) {
		struct rpc_conn *batch[WRITE_BATCH];
		unsigned nc = 0;

		while (here->flush_list && nc < WRITE_BATCH) {
			struct rpc_conn *conn = here->flush_list;
			struct wreq *w;
			uv_os_fd_t fd;

			here->flush_list = conn->flush_next;
			conn->in_flush_list = 0;
			if (!here->sends || !sendring_room(here->sends) || conn->tls ||
			    conn->closing || conn->queued_bytes || !conn->pend_head ||
			    uv_fileno((uv_handle_t *)&conn->io.s, &fd) < 0) {
				conn_flush(conn);
				conn_unref(conn);
				continue;
			}
			w = wreq_take(conn);
			if (!w) {
				conn_unref(conn);
				continue;
			}
			sendring_add(here->sends, fd, (const struct iovec *)w->bufs, w->nb, w);
			batch[nc++] = conn;
		}
		if (here->sends)
			sendring_run(here->sends, sent_cb);
		for (unsigned i = 0; i < nc; i++) {
			if (!batch[i]->closing)
				conn_flush(batch[i]);
			conn_unref(batch[i]);
		}
	}
}

/*
 * Runs once per loop iteration, right after the poll phase: everything the
 * read callbacks parsed goes to the workers in one hand-off (one lock, one
 * wake-up), and every connection with replies gets one uv_write.
 */
static void tick_cb(uv_check_t *h)
{
	(void)h;
	dispatch_flush();
	flush_all();
}

/* Queue the reply of @r on its connection. */
static void reply_queue(struct rpc_req *r)
{
	struct rpc_conn *conn = r->conn;

	r->next = NULL;
	if (conn->pend_tail)
		conn->pend_tail->next = r;
	else
		conn->pend_head = r;
	conn->pend_tail = r;
	conn->npend++;
	flush_schedule(conn);
}

void rpc_req_done(struct disp_call *dc)
{
	struct rpc_req *r = (struct rpc_req *)dc; /* dc is the first member */
	struct rpc_conn *conn = r->conn;

	conn->inflight--;
	conn->inflight_bytes -= r->charge;
	srv.buffered -= r->charge;
	r->charge = 0;
	if (conn->ue) {
		conn->ue->inflight--;
		limits_released(conn->ue);
	}
	if (dc->close_after)
		conn->close_after = 1;
	if (conn->closing || (!r->hdr_len && !dc->payload_len)) {
		/* nothing to write (a framing's step that owes no bytes): done here */
		req_free(r);
		if (!conn->closing) {
			conn_check_close(conn);
			conn_maybe_resume(conn);
		}
		conn_unref(conn);
		return;
	}
	reply_queue(r);
	conn_maybe_resume(conn);
	conn_unref(conn);
}

struct rpc_req *rpc_req_new(struct rpc_conn *conn, const struct proto_hdr *h, size_t charge)
{
	/* the dispatcher makes the call: its own part of it rides behind ours */
	struct rpc_req *r = (struct rpc_req *)dispatch_call_create(conn->fr->req_size);

	if (!r) {
		conn_close(conn);
		return NULL;
	}
	r->conn = conn;
	r->dc.cl = &conn->dc;
	r->dc.hdr = *h;
	r->dc.done = rpc_req_done;
	conn->refs++;
	conn->inflight++;
	if (conn->ue)
		conn->ue->inflight++;
	if (conn->inflight >
	    atomic_load_explicit(&daemon_stats.inflight_peak, memory_order_relaxed))
		atomic_store_explicit(&daemon_stats.inflight_peak, conn->inflight,
				      memory_order_relaxed);
	r->charge = charge;
	conn->inflight_bytes += charge;
	srv.buffered += charge;
	return r;
}

struct disp_client *rpc_conn_client(struct rpc_conn *conn)
{
	return &conn->dc;
}

void **rpc_conn_priv(struct rpc_conn *conn)
{
	return &conn->priv;
}

void rpc_conn_close_after(struct rpc_conn *conn)
{
	conn->close_after = 1;
	conn_check_close(conn);
}

void rpc_conn_handshake(struct rpc_conn *conn, int on)
{
	conn->handshake = on;
}

int rpc_conn_tls(const struct rpc_conn *conn)
{
	return conn->tls ? RPC_TLS_ON : conn->tls_ctx ? RPC_TLS_REQUIRED : RPC_TLS_NONE;
}

int rpc_conn_starttls(struct rpc_conn *conn)
{
	if (!conn->tls_ctx || conn->tls)
		return -EINVAL;
	if (conn->rlen > conn->rpos) {
		/* sent before our reply to STARTTLS could have been read: injected */
		log_info("conn %llu (%s): %zu bytes after STARTTLS, before the TLS handshake: "
			 "closed",
			 (unsigned long long)conn->dc.id, conn->addr, conn->rlen - conn->rpos);
		STATS_ADD(bad_frames, 1);
		conn_close(conn);
		return -EPROTO;
	}
	/* the framing's reply to STARTTLS goes out in the clear, then only TLS */
	conn_flush(conn);
	if (conn->closing)
		return -EPIPE;
	conn->tls = tls_conn_new(conn->tls_ctx);
	if (!conn->tls) {
		conn_close(conn);
		return -ENOMEM;
	}
	return 0;
}

/*
 * The handshake of @conn named a local user: it is that peer from now on,
 * counted under that uid (whose connection limit applies from here).
 * @return 0, or -1 and the connection closes
 */
static int conn_tls_peer(struct rpc_conn *conn)
{
	uid_t uid;
	gid_t gid;
	const char *name = tls_conn_peer(conn->tls, &uid, &gid);
	char why[128];
	int quiet = 0;

	/* out of the pool, into the user's counts: its calls so far are the user's from here */
	conn->ue = uid_get(uid);
	if (!conn->ue) {
		conn_close(conn);
		return -1;
	}
	atomic_fetch_add(&conn->ue->inflight, conn->inflight);
	preauth_unlink(conn);
	conn->dc.peer.uid = uid;
	conn->dc.peer.gid = gid;
	conn->dc.peer.ngroups = -1; /* the groups a login gives the user (registry.c) */
	conn->dc.peer.groups = NULL;
	/* its handles so far (none: nothing is opened before TLS) go with the unknown peer */
	dispatch_client_fini(&conn->dc);
	if (dispatch_client_init(&conn->dc) < 0) {
		conn_close(conn);
		return -1;
	}
	/* the user's limits, as if it had connected now (admin is known from here) */
	if (peer_admit(conn->ue, conn->dc.peer.admin, why, sizeof(why), &quiet) < 0) {
		if (!quiet)
			log_warn("conn %llu (%s, user %s): refused: %s",
				 (unsigned long long)conn->dc.id, conn->addr, name, why);
		conn_close(conn);
		return -1;
	}
	conn->counted = 1;
	conn->tls_peer = 1;
	log_info("conn %llu (%s): TLS peer is user %s (uid %u)%s, %s", (unsigned long long)conn->dc.id,
		 conn->addr, name, (unsigned)uid, conn->dc.peer.admin ? ", admin" : "",
		 tls_conn_cipher(conn->tls));
	return 0;
}

/*
 * @n bytes of TLS records arrived (in here->cipher_in): their plaintext goes
 * to the read buffer, whatever the handshake owes the peer goes out.
 * @return 0, or -1 and the connection closes
 */
static int conn_tls_in(struct rpc_conn *conn, size_t n)
{
	size_t chunk = conn->dc.hello_done && !conn->handshake ? READ_CHUNK : PREHELLO_CHUNK;
	long got;

	if (tls_conn_feed(conn->tls, here->cipher_in, n) < 0) {
		conn_close(conn);
		return -1;
	}
	do {
		if (conn->rcap - conn->rlen < chunk / 4 && conn->rpos) {
			rbuf_compact(conn);
			rbuf_account(conn);
		}
		if (conn->rcap - conn->rlen < chunk / 4 && rbuf_grow(conn, conn->rcap + chunk) < 0) {
			conn_close(conn);
			return -1;
		}
		got = tls_conn_read(conn->tls, conn->rbuf + conn->rlen, conn->rcap - conn->rlen);
		if (got > 0)
			conn->rlen += (size_t)got;
	} while (got > 0);
	/* the handshake's messages, or the alert that says why it failed */
	if (tls_send(conn, NULL) < 0)
		return -1;
	if (got < 0) {
		if (tls_conn_ended(conn->tls)) {
			log_debug("conn %llu (%s): TLS ended by the peer", (unsigned long long)conn->dc.id,
				  conn->addr);
		} else {
			log_info("conn %llu (%s): TLS: %s: closed", (unsigned long long)conn->dc.id,
				 conn->addr, tls_conn_error(conn->tls));
			STATS_ADD(bad_frames, 1);
		}
		conn->close_after = 1;
		conn->tls_bye = 1; /* the alert was the last word */
		conn->rpos = conn->rlen = 0;
		rbuf_account(conn);
		if (conn->reading) {
			uv_read_stop(&conn->io.s);
			conn->reading = 0;
		}
		conn_check_close(conn);
		return -1;
	}
	if (!conn->tls_peer && tls_conn_ready(conn->tls)) {
		if (conn_tls_peer(conn) < 0)
			return -1;
		conn_flush(conn); /* replies that waited for the handshake */
	}
	return 0;
}

void rpc_conn_hold(struct rpc_conn *conn, int hold)
{
	conn->held = hold;
	if (!hold)
		conn_maybe_resume(conn);
}

/* In the middle of a frame whose buffer is already there: it may be finished. */
static int conn_mid_frame(const struct rpc_conn *conn)
{
	return conn->frame_need && conn->rcap >= conn->frame_need;
}

static int uid_blocked(const struct rpc_conn *conn)
{
	return conn->ue && conn->ue->inflight >= srv.cfg->max_requests_per_uid;
}

/*
 * Over max_buffered, a connection stops at its next frame boundary. One in
 * the middle of a frame may finish it: its buffer exists, and if all of them
 * waited, memory that only those frames hold would never come back.
 */
static int mem_blocked(const struct rpc_conn *conn)
{
	return over_buffered() && !conn_mid_frame(conn);
}

static int conn_blocked(const struct rpc_conn *conn)
{
	return conn->inflight >= PROTO_INFLIGHT_MAX || conn->inflight_bytes >= INFLIGHT_BYTES_MAX ||
	       conn->queued_bytes >= REPLY_QUEUE_MAX || conn->close_after || srv.stopping ||
	       conn->backlog || conn->held || uid_blocked(conn) || mem_blocked(conn);
}

/*
 * @conn stops reading: remember which shared limit to wake it up from. A
 * loop that released the limit meanwhile may not have seen the mark: look
 * again after making it.
 */
static void note_blocked(const struct rpc_conn *conn)
{
	if (uid_blocked(conn)) {
		atomic_store(&conn->ue->paused, 1);
		if (!uid_blocked(conn))
			limits_released(conn->ue);
	}
	if (mem_blocked(conn) && !atomic_exchange(&srv.mem_paused, 1)) {
		log_debug("buffered requests reached max_buffered (%llu bytes): reading paused",
			  (unsigned long long)srv.cfg->max_buffered);
		if (!over_buffered())
			limits_released(NULL);
	}
}

/* Whether the frame at the read position of @conn is wiped once taken. */
static int frame_wiped(struct rpc_conn *conn)
{
	return conn->fr->wipe && conn->rbuf &&
	       conn->fr->wipe(conn, conn->rbuf + conn->rpos, conn->rlen - conn->rpos);
}

/* Move the unparsed bytes to the front; a frame to wipe leaves no copy behind. */
static void rbuf_compact(struct rpc_conn *conn)
{
	size_t left = conn->rlen - conn->rpos;
	int wipe = frame_wiped(conn);

	memmove(conn->rbuf, conn->rbuf + conn->rpos, left);
	if (wipe)
		explicit_bzero(conn->rbuf + left, conn->rlen - left);
	conn->rlen = left;
	conn->rpos = 0;
}

/* Grow the read buffer to @cap bytes; a frame to wipe is not left in the old one. @return 0 or -1 */
static int rbuf_grow(struct rpc_conn *conn, size_t cap)
{
	uint8_t *nb;

	if (frame_wiped(conn)) {
		nb = malloc(cap);
		if (!nb)
			return -1;
		memcpy(nb, conn->rbuf, conn->rlen);
		explicit_bzero(conn->rbuf, conn->rlen);
		free(conn->rbuf);
	} else {
		nb = realloc(conn->rbuf, cap);
		if (!nb)
			return -1;
	}
	conn->rbuf = nb;
	conn->rcap = cap;
	return 0;
}

/* Parse every complete frame in the read buffer, as long as back-pressure allows. */
static void conn_parse(struct rpc_conn *conn)
{
	unsigned turn = 0;

	conn->parsing = 1;
	while (!conn->closing && !conn_blocked(conn) && conn->rlen > conn->rpos) {
		uint8_t *p = conn->rbuf + conn->rpos;
		size_t need = 0;
		int ret, wipe;

		if (turn++ == PARSE_QUANTUM) {
			/* fairness: the others get their turn before the rest of ours */
			conn->backlog = 1;
			conn->backlog_next = here->backlog_head;
			here->backlog_head = conn;
			conn->refs++;
			kick_start();
			break;
		}
		ret = conn->fr->frame(conn, p, conn->rlen - conn->rpos, &need);
		if (ret != 0)
			break; /* more bytes needed, or refused */
		if (conn->rlen - conn->rpos < need) {
			conn->frame_need = need;
			/* over max_buffered a new frame waits for its buffer (conn_blocked) */
			if (need > conn->rcap && over_buffered())
				break;
			/* make room for the whole frame (the framing bounded it) */
			if (conn->rpos)
				rbuf_compact(conn);
			if (need > conn->rcap && rbuf_grow(conn, need) < 0) {
				conn_close(conn);
				break;
			}
			break;
		}
		conn->frame_need = 0;
		wipe = frame_wiped(conn);
		conn->rpos += need;
		ret = conn->fr->handle(conn, p, need);
		/* the call has its own copy (wiped when freed); none stays here */
		if (wipe)
			explicit_bzero(p, need);
		if (ret < 0)
			break;
	}
	if (conn->rpos == conn->rlen)
		conn->rpos = conn->rlen = 0;
	if (conn->rlen == conn->rpos)
		conn->frame_need = 0;
	if (conn->rlen == 0 && conn->rcap > RBUF_KEEP) {
		/* one big frame passed: do not keep its buffer per idle connection */
		free(conn->rbuf);
		conn->rbuf = NULL;
		conn->rcap = 0;
	}
	conn->parsing = 0;
	rbuf_account(conn);
}

/* Past HELLO (and any negotiation of the framing's): the limits of a served peer. */
static int negotiated(const struct rpc_conn *conn)
{
	return conn->dc.hello_done && !conn->handshake;
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	struct rpc_conn *conn = handle->data;
	/* before HELLO a peer gets a page: enough for HELLO and the frames after it */
	size_t chunk = negotiated(conn) ? READ_CHUNK : PREHELLO_CHUNK;

	(void)suggested;
	if (conn->tls) {
		/* records land here; read_cb decrypts them into the read buffer */
		*buf = uv_buf_init((char *)here->cipher_in, (unsigned)chunk);
		return;
	}
	if (conn->rcap - conn->rlen < chunk / 4 && conn->rpos) {
		rbuf_compact(conn);
		rbuf_account(conn);
	}
	if (conn->rcap - conn->rlen < chunk / 4 && rbuf_grow(conn, conn->rcap + chunk) < 0) {
		*buf = uv_buf_init(NULL, 0);
		return;
	}
	*buf = uv_buf_init((char *)conn->rbuf + conn->rlen, conn->rcap - conn->rlen);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct rpc_conn *conn = stream->data;

	(void)buf;
	if (nread < 0) {
		if (nread != UV_EOF)
			log_debug("conn %llu: read: %s", (unsigned long long)conn->dc.id,
				  uv_strerror((int)nread));
		/* a truncated frame at EOF is simply dropped */
		conn_close(conn);
		return;
	}
	if (nread > 0)
		conn->last_active = uv_now(here->loop);
	if (conn->tls) {
		if (nread > 0 && conn_tls_in(conn, (size_t)nread) < 0)
			return;
	} else {
		conn->rlen += (size_t)nread;
	}
	conn_parse(conn);
	if (!conn->closing && conn_blocked(conn) && conn->reading) {
		note_blocked(conn);
		uv_read_stop(stream);
		conn->reading = 0;
	}
}

static void conn_maybe_resume(struct rpc_conn *conn)
{
	if (conn->closing || conn->reading || conn->parsing)
		return;
	if (conn_blocked(conn)) {
		note_blocked(conn);
		return;
	}
	/* frames buffered while we were blocked go first */
	conn_parse(conn);
	if (conn->closing)
		return;
	if (conn_blocked(conn)) {
		note_blocked(conn);
		return;
	}
	/* time spent held back by us is not the peer's idleness */
	conn->last_active = uv_now(here->loop);
	if (uv_read_start(&conn->io.s, alloc_cb, read_cb) == 0)
		conn->reading = 1;
}

/*
 * The deferred work of the loop, once per turn while there is any: the rest
 * of the frames of connections whose turn ended (PARSE_QUANTUM), and every
 * connection again after a shared limit was released.
 */
static void kick_cb(uv_idle_t *h)
{
	struct rpc_conn *conn, *next;

	(void)h;
	if (here->resume_all) {
		here->resume_all = 0;
		for (conn = here->conns; conn; conn = next) {
			next = conn->next;
			conn_maybe_resume(conn);
		}
	}
	conn = here->backlog_head;
	here->backlog_head = NULL;
	for (; conn; conn = next) {
		next = conn->backlog_next;
		conn->backlog = 0;
		conn_maybe_resume(conn);
		conn_unref(conn);
	}
	if (!here->backlog_head && !here->resume_all)
		uv_idle_stop(&here->kick);
}

static void kick_start(void)
{
	/* also while stopping: connections on the backlog hold a reference */
	uv_idle_start(&here->kick, kick_cb);
}

/* HELLO and idle timeouts, checked every SWEEP_MS. */
static void sweep_cb(uv_timer_t *t)
{
	uint64_t now = uv_now(here->loop);
	uint64_t hello_ms = (uint64_t)srv.cfg->hello_timeout * 1000;
	uint64_t tls_ms = (uint64_t)srv.cfg->tls_handshake_timeout * 1000;
	uint64_t idle_ms = (uint64_t)srv.cfg->idle_timeout * 1000;
	struct rpc_conn *conn, *next;

	(void)t;
	for (conn = here->conns; conn; conn = next) {
		next = conn->next;
		if (conn->closing || conn->close_after)
			continue;
		if (conn->preauth && now - conn->since >= tls_ms) {
			/* debug: a flood would say this for every one of its peers */
			log_debug("conn %llu (%s): no TLS handshake within %u s: closed",
				  (unsigned long long)conn->dc.id, conn->addr,
				  srv.cfg->tls_handshake_timeout);
			conn_close(conn);
		} else if (!negotiated(conn) && now - conn->since >= hello_ms) {
			log_info("conn %llu (uid %u): no hello within %u s: closed",
				 (unsigned long long)conn->dc.id, (unsigned)conn->dc.peer.uid,
				 srv.cfg->hello_timeout);
			conn_close(conn);
		} else if (negotiated(conn) && idle_ms && !conn->fr->keep_idle && conn->reading &&
			   conn->inflight == 0 &&
			   !conn->pend_head && conn->queued_bytes == 0 &&
			   now - conn->last_active >= idle_ms) {
			log_info("conn %llu (uid %u): idle for %u s: closed",
				 (unsigned long long)conn->dc.id, (unsigned)conn->dc.peer.uid,
				 srv.cfg->idle_timeout);
			conn_close(conn);
		}
	}
}

static void close_cb(uv_handle_t *h)
{
	struct rpc_conn *conn = h->data;

	conn_unref(conn);
}

static void conn_close(struct rpc_conn *conn)
{
	struct rpc_req *r, *next;

	if (conn->closing)
		return;
	conn->closing = 1;
	dispatch_client_closed(&conn->dc);
	for (r = conn->pend_head; r; r = next) {
		next = r->next;
		req_free(r);
	}
	conn->pend_head = conn->pend_tail = NULL;
	conn->npend = 0;
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		here->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	conn->prev = conn->next = NULL;
	preauth_unlink(conn);
	conn_leave(conn);
	atomic_fetch_sub_explicit(&daemon_stats.conns_open, 1, memory_order_relaxed);
	log_debug("conn %llu: closed", (unsigned long long)conn->dc.id);
	uv_close(&conn->io.h, close_cb);
}

/* Close a connection that never made it onto the list. */
static void conn_close_early(struct rpc_conn *conn)
{
	conn_leave(conn);
	conn->closing = 1;
	uv_close(&conn->io.h, close_cb);
}

/*
 * The peer's supplementary groups (SO_PEERGROUPS) into a new array @out, for
 * admin_group and the group part of dataset owners. @return their number,
 * or -1 if the kernel does not say (then @out is NULL).
 */
static int peer_groups(int fd, gid_t **out)
{
	socklen_t len = 64 * sizeof(gid_t);
	gid_t *g = NULL;

	*out = NULL;
	for (int tries = 0; tries < 2; tries++) {
		free(g);
		g = malloc(len ? len : sizeof(gid_t));
		if (!g)
			return -1;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0) {
			*out = g;
			return (int)(len / sizeof(gid_t));
		}
		if (errno != ERANGE)
			break; /* ERANGE has set @len to what is needed */
	}
	free(g);
	return -1;
}

/*
 * The part of @ss the cap per address compares, into @conn: an IPv4 address
 * (also one mapped into IPv6), or the /64 of an IPv6 one, the least a
 * single host is given.
 */
static void source_key(const struct sockaddr_storage *ss, struct rpc_conn *conn)
{
	if (ss->ss_family == AF_INET) {
		memcpy(conn->src, &((const struct sockaddr_in *)ss)->sin_addr, 4);
		conn->srclen = 4;
	} else if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(conn->src, a->s6_addr + 12, 4);
			conn->srclen = 4;
		} else {
			memcpy(conn->src, a->s6_addr, 8);
			conn->srclen = 8;
		}
	}
}

/*
 * A local peer as the main loop accepts it, in the order of the accepts:
 * who it is and whether it may stay, decided there so that the limits
 * refuse the newest connection whichever loop then serves it.
 */
struct arrival {
	int fd;
	const struct listener *l;
	uint64_t id;
	struct ucred cred;
	gid_t *groups;       /* SO_PEERGROUPS, owned until a connection takes them */
	int ngroups;
	struct uid_ent *ue;
	int err;             /* refused: the framing says why in its first reply */
	char why[128];
	struct arrival *next; /* a loop's queue of them */
};

/* A connection of listener @l on this loop, its socket still to be given. */
static struct rpc_conn *conn_new(const struct listener *l, uint64_t id)
{
	struct rpc_conn *conn = calloc(1, sizeof(*conn));

	if (!conn)
		return NULL;
	if ((l->tls ? uv_tcp_init(here->loop, &conn->io.tcp)
		    : uv_pipe_init(here->loop, &conn->io.pipe, 0)) < 0) {
		free(conn);
		return NULL;
	}
	conn->io.h.data = conn;
	conn->fr = l->fr;
	conn->dc.front = l->fr->name;
	conn->tls_ctx = l->tls;
	conn->dc.id = id;
	conn->refs = 1;
	here->live_conns++;
	return conn;
}

/*
 * The loop that serves the next connection: the one with the fewest, the
 * next in turn on a tie (192 NBD connections opened at once spread evenly).
 * It counts the connection from now on.
 */
static struct rpc_loop *loop_pick(void)
{
	struct rpc_loop *best = NULL;
	unsigned best_load = 0;

	for (unsigned k = 0; k < srv.nloops; k++) {
		struct rpc_loop *lp = srv.loops[(srv.next_loop + k) % srv.nloops];
		unsigned load = atomic_load_explicit(&lp->load, memory_order_relaxed);

		if (!best || load < best_load) {
			best = lp;
			best_load = load;
		}
	}
	srv.next_loop = (best->idx + 1) % srv.nloops;
	atomic_fetch_add(&best->load, 1);
	return best;
}

/* @a goes without a connection: undo what its arrival counted. */
static void arrival_drop(struct arrival *a)
{
	if (a->ue && !a->err)
		uid_uncount(a->ue);
	srv.nconns--;
	uid_put(a->ue);
	free(a->groups);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
}

/*
 * The socket of the connection @server has ready, as a descriptor of our
 * own: a libuv handle belongs to its loop, a descriptor to no one.
 * @return it, or -1
 */
static int accept_fd(uv_stream_t *server)
{
	uv_pipe_t *tmp = malloc(sizeof(*tmp));
	uv_os_fd_t fd;
	int ret = -1;

	if (!tmp || uv_pipe_init(here->loop, tmp, 0) < 0) {
		free(tmp);
		return -1;
	}
	if (uv_accept(server, (uv_stream_t *)tmp) == 0 && uv_fileno((uv_handle_t *)tmp, &fd) == 0)
		ret = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	uv_close((uv_handle_t *)tmp, (uv_close_cb)free);
	return ret;
}

/* Who the local peer of @a is, and whether it may stay. @return 0, or -1 (@a is dropped) */
static int arrive(struct arrival *a)
{
	socklen_t clen = sizeof(a->cred);
	struct peer p;
	int quiet = 0;

	srv.nconns++;
	if (getsockopt(a->fd, SOL_SOCKET, SO_PEERCRED, &a->cred, &clen) < 0 ||
	    !(a->ue = uid_get(a->cred.uid))) {
		a->err = 1; /* nothing counted under a uid */
		arrival_drop(a);
		return -1;
	}
	a->ngroups = peer_groups(a->fd, &a->groups);
	p = (struct peer){ .uid = a->cred.uid, .gid = a->cred.gid, .pid = a->cred.pid,
			   .groups = a->groups, .ngroups = a->ngroups };
	if (srv.stopping) {
		snprintf(a->why, sizeof(a->why), "shutting down");
		a->err = -ESHUTDOWN;
	} else {
		a->err = peer_admit(a->ue, dispatch_peer_admin(&p), a->why, sizeof(a->why), &quiet);
	}
	if (a->err < 0 && !quiet)
		log_warn("conn %llu (uid %u, %s): refused: %s", (unsigned long long)a->id,
			 (unsigned)a->cred.uid, a->l->fr->name, a->why);
	return 0;
}

static void conn_begin(struct rpc_conn *conn, const struct listener *l, struct arrival *a);

/* A local peer that arrived, from now on served by this loop. */
static void adopt(struct arrival *a)
{
	struct rpc_conn *conn = here->drained ? NULL : conn_new(a->l, a->id);

	if (!conn || uv_pipe_open(&conn->io.pipe, a->fd) < 0) {
		if (conn)
			conn_close_early(conn); /* and the load with it */
		else
			atomic_fetch_sub(&here->load, 1);
		arrival_drop(a);
		return;
	}
	a->fd = -1; /* the connection's */
	conn_begin(conn, a->l, a);
	free(a);
}

static void on_connection(uv_stream_t *server, int status)
{
	const struct listener *l = server->data;
	struct rpc_loop *to;
	struct arrival *a;
	struct rpc_conn *conn;

	if (status < 0) {
		log_warn("accept: %s", uv_strerror(status));
		return;
	}
	if (l->tls) {
		/* TCP peers stay here: the pool that bounds them is the main loop's */
		conn = conn_new(l, ++srv.next_id);
		if (!conn)
			return;
		atomic_fetch_add(&here->load, 1);
		if (uv_accept(server, &conn->io.s) < 0) {
			conn_close_early(conn);
			return;
		}
		conn_begin(conn, l, NULL);
		return;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return;
	a->l = l;
	a->id = ++srv.next_id;
	a->fd = accept_fd(server);
	if (a->fd < 0) {
		free(a);
		return;
	}
	if (arrive(a) < 0)
		return;
	/* a refusal is said from here: it costs no other loop a wake-up */
	to = a->err ? here : loop_pick();
	if (to == here) {
		if (a->err)
			atomic_fetch_add(&here->load, 1);
		adopt(a);
		return;
	}
	pthread_mutex_lock(&to->lock);
	a->next = to->incoming;
	to->incoming = a;
	pthread_mutex_unlock(&to->lock);
	uv_async_send(&to->wake);
}

/*
 * The rest of an accept, on the loop that serves @conn: a TCP peer's
 * address, a local one's @a, the limits' verdict, the framing.
 */
static void conn_begin(struct rpc_conn *conn, const struct listener *l, struct arrival *a)
{
	struct ucred cred = { .uid = RPC_UID_UNKNOWN, .gid = (gid_t)-1, .pid = 0 };

	if (a) {
		cred = a->cred;
		conn->ue = a->ue;
		conn->counted = !a->err;
		conn->groups = a->groups;
		conn->dc.peer.ngroups = a->ngroups;
		a->ue = NULL;
		a->groups = NULL;
		snprintf(conn->addr, sizeof(conn->addr), "unix");
	} else {
		/* no kernel word on a TCP peer: unknown until its TLS handshake names it */
		struct sockaddr_storage ss;
		int sl = sizeof(ss);
		char host[INET6_ADDRSTRLEN], port[8];

		srv.nconns++;
		/* replies are small and many: Nagle would hold each for the peer's delayed ACK */
		uv_tcp_nodelay(&conn->io.tcp, 1);
		if (uv_tcp_getpeername(&conn->io.tcp, (struct sockaddr *)&ss, &sl) == 0 &&
		    getnameinfo((struct sockaddr *)&ss, (socklen_t)sl, host, sizeof(host), port,
				sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
			snprintf(conn->addr, sizeof(conn->addr), "tcp %s:%s", host, port);
			snprintf(conn->host, sizeof(conn->host), "%s", host);
			source_key(&ss, conn);
		} else {
			snprintf(conn->addr, sizeof(conn->addr), "tcp");
			snprintf(conn->host, sizeof(conn->host), "?");
		}
	}
	/* in srv.nconns from here: conn_close() or conn_close_early() takes it out */
	conn->in_nconns = 1;
	conn->since = conn->last_active = uv_now(here->loop);
	conn->dc.peer.uid = cred.uid;
	conn->dc.peer.gid = cred.gid;
	conn->dc.peer.pid = cred.pid;
	conn->dc.peer.groups = conn->groups;
	if (dispatch_client_init(&conn->dc) < 0) {
		conn_close_early(conn);
		return;
	}
	conn->next = here->conns;
	if (here->conns)
		here->conns->prev = conn;
	here->conns = conn;
	STATS_ADD(conns_total, 1);
	STATS_ADD(conns_open, 1);
	if (a && a->err < 0) {
		conn->close_after = 1;
		conn->fr->refuse(conn, a->err, a->why);
		return;
	}
	if (!a && srv.stopping) {
		conn->close_after = 1;
		conn->fr->refuse(conn, -ESHUTDOWN, "shutting down");
		return;
	}
	if (l->tls)
		preauth_add(conn);
	log_debug("conn %llu (%s): uid %u gid %u pid %d%s", (unsigned long long)conn->dc.id,
		  conn->fr->name, (unsigned)cred.uid, (unsigned)cred.gid, (int)cred.pid,
		  conn->dc.peer.admin ? " admin" : "");
	if (conn->fr->accepted && conn->fr->accepted(conn) < 0) {
		conn_close(conn);
		return;
	}
	/* a framing that spoke first may have had its reply resume reading already */
	if (conn->reading || conn->closing)
		return;
	if (uv_read_start(&conn->io.s, alloc_cb, read_cb) == 0)
		conn->reading = 1;
	else
		conn_close(conn);
}

int rpc_socket_probe(const char *path, pid_t *pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct stat st;
	int fd, ret;

	*pid = 0;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	/* non-blocking: a daemon whose backlog is full must not hang our start */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		/* the listener's credentials are the peer's from connect() on */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0)
			*pid = cred.pid;
		ret = -EADDRINUSE;
	} else if (errno == EAGAIN) {
		ret = -EADDRINUSE; /* alive, too busy to take us */
	} else if (errno == ECONNREFUSED) {
		/* nobody listens: a socket left by a daemon that died */
		ret = unlink(path) < 0 && errno != ENOENT ? -errno : 0;
	} else {
		ret = -errno;
	}
	close(fd);
	return ret;
}

/* Remove the socket file only if it is still the one we bound, not a successor's. */
static void unlink_own_socket(struct listener *l)
{
	struct stat st;

	if (!l->bound)
		return;
	l->bound = 0;
	if (lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
		unlink(l->path);
	else
		log_warn("socket %s: no longer the one this daemon bound; left in place", l->path);
}

/*
 * Bound here, not by uv_pipe_bind(): libuv unlinks the path of a pipe it
 * bound when the handle closes, whoever's socket the path names by then.
 */
static int listen_socket(struct listener *l)
{
	const struct config *cfg = srv.cfg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (strlen(l->path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, l->path, strlen(l->path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* rpc_socket_probe() removed a stale socket; a live one makes bind fail */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	ret = uv_pipe_open(&l->io.pipe, fd);
	if (ret < 0) {
		close(fd);
		unlink(l->path);
		return ret;
	}
	if (lstat(l->path, &st) < 0)
		return -errno;
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	l->bound = 1;
	if (chmod(l->path, cfg->socket_mode) < 0)
		return -errno;
	if (cfg->socket_group && cfg->socket_group[0]) {
		struct group *gr = getgrnam(cfg->socket_group);

		if (!gr)
			return -ESRCH;
		if (chown(l->path, (uid_t)-1, gr->gr_gid) < 0)
			return -errno;
	}
	return uv_listen(&l->io.s, LISTEN_BACKLOG, on_connection);
}

static const struct rpc_framing ctl_framing;

int rpc_listen_framing(const char *path, const struct rpc_framing *fr)
{
	struct listener *l;
	int ret;

	if (srv.nlst == LISTENERS_MAX)
		return -ENFILE;
	l = &srv.lst[srv.nlst];
	l->path = strdup(path);
	if (!l->path)
		return -ENOMEM;
	l->fr = fr;
	ret = uv_pipe_init(here->loop, &l->io.pipe, 0);
	if (ret < 0)
		return ret;
	l->io.h.data = l;
	srv.nlst++;
	l->listening = 1;
	ret = listen_socket(l);
	if (ret < 0)
		unlink_own_socket(l); /* a start that failed leaves no socket behind */
	return ret;
}

int rpc_listen_tcp(const char *hostport, const struct rpc_framing *fr, struct tls_ctx *tls,
		   unsigned *port)
{
	char host[CONFIG_HOSTPORT_MAX + 1], serv[8];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV },
			*ai = NULL;
	struct sockaddr_storage ss;
	int sl = sizeof(ss);
	struct listener *l;
	unsigned p;
	int ret;

	if (srv.nlst == LISTENERS_MAX)
		return -ENFILE;
	if (config_hostport_split(hostport, host, sizeof(host), &p) < 0)
		return -EINVAL;
	snprintf(serv, sizeof(serv), "%u", p);
	/* once, at start: a name resolves before the loop serves anyone */
	ret = getaddrinfo(host, serv, &hints, &ai);
	if (ret != 0)
		return ret == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	l = &srv.lst[srv.nlst];
	l->path = strdup(hostport);
	l->fr = fr;
	l->tls = tls;
	ret = l->path ? uv_tcp_init(here->loop, &l->io.tcp) : -ENOMEM;
	if (ret < 0) {
		free(l->path);
		l->path = NULL;
		freeaddrinfo(ai);
		return ret;
	}
	l->io.h.data = l;
	srv.nlst++;
	l->listening = 1;
	ret = uv_tcp_bind(&l->io.tcp, ai->ai_addr, 0);
	freeaddrinfo(ai);
	if (ret == 0)
		ret = uv_listen(&l->io.s, LISTEN_BACKLOG, on_connection);
	if (ret == 0 && port) {
		/* the port the kernel chose, for port 0 */
		ret = uv_tcp_getsockname(&l->io.tcp, (struct sockaddr *)&ss, &sl);
		*port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	}
	return ret;
}

static void loop_shutdown(void);
static void all_drained(void);

/* Tell loop @lp, from another thread, to stop or to resume its connections. */
static void loop_poke(struct rpc_loop *lp, int stop, int resume)
{
	pthread_mutex_lock(&lp->lock);
	/* a loop that drained has closed its wake-up (the main loop's stays till the end) */
	if (!lp->drained || lp->idx == 0) {
		lp->stop_asked |= stop;
		lp->resume_asked |= resume;
		uv_async_send(&lp->wake);
	}
	pthread_mutex_unlock(&lp->lock);
}

/* Other threads' news for this loop: connections handed over, limits released, the shutdown. */
static void wake_cb(uv_async_t *a)
{
	struct arrival *in, *fifo = NULL, *next;
	int stop, resume;

	(void)a;
	pthread_mutex_lock(&here->lock);
	in = here->incoming;
	here->incoming = NULL;
	stop = here->stop_asked;
	here->stop_asked = 0;
	resume = here->resume_asked;
	here->resume_asked = 0;
	pthread_mutex_unlock(&here->lock);
	for (; in; in = next) {
		next = in->next;
		in->next = fifo;
		fifo = in;
	}
	for (; fifo; fifo = next) {
		next = fifo->next;
		adopt(fifo);
	}
	if (resume && !here->drained) {
		here->resume_all = 1;
		kick_start();
	}
	if (stop)
		loop_shutdown();
	all_drained();
}

void rpc_init(const struct config *cfg)
{
	srv.cfg = cfg;
}

int rpc_loop_attach(uv_loop_t *loop)
{
	struct rpc_loop *lp = calloc(1, sizeof(*lp));
	int ret;

	if (!lp)
		return -ENOMEM;
	lp->loop = loop;
	lp->idx = loops_self();
	pthread_mutex_init(&lp->lock, NULL);
	ret = uv_async_init(loop, &lp->wake, wake_cb);
	if (ret < 0) {
		free(lp);
		return ret;
	}
	uv_check_init(loop, &lp->tick);
	uv_check_start(&lp->tick, tick_cb);
	uv_unref((uv_handle_t *)&lp->tick);
	uv_idle_init(loop, &lp->kick);
	uv_timer_init(loop, &lp->sweep);
	uv_timer_start(&lp->sweep, sweep_cb, SWEEP_MS, SWEEP_MS);
	uv_unref((uv_handle_t *)&lp->sweep);
	ret = sendring_init(&lp->sends);
	if (ret < 0)
		log_info("loop %u: no io_uring for replies (%s): a writev each", lp->idx,
			 strerror(-ret));
	here = lp;
	/* loops attach one after the other, before anything listens */
	srv.loops[lp->idx] = lp;
	if (lp->idx >= srv.nloops)
		srv.nloops = lp->idx + 1;
	return 0;
}

int rpc_listen(void)
{
	return rpc_listen_framing(srv.cfg->socket, &ctl_framing);
}

/*
 * This loop's connections are all gone: its handles close (its thread then
 * ends, loops.c), and once every loop is there the main loop says so.
 */
static void check_drained(void)
{
	if (!here->stopping || here->drained || here->live_conns)
		return;
	pthread_mutex_lock(&here->lock);
	here->drained = 1;
	pthread_mutex_unlock(&here->lock);
	while (here->wreq_free) {
		struct wreq *w = here->wreq_free;

		here->wreq_free = w->next_free;
		free(w);
	}
	here->nwreq_free = 0;
	sendring_free(here->sends);
	here->sends = NULL;
	uv_close((uv_handle_t *)&here->tick, NULL);
	uv_close((uv_handle_t *)&here->grace, NULL);
	uv_close((uv_handle_t *)&here->kick, NULL);
	uv_close((uv_handle_t *)&here->sweep, NULL);
	if (srv.on_drained)
		srv.on_drained();
	if (here->idx != 0)
		uv_close((uv_handle_t *)&here->wake, NULL);
	if (atomic_fetch_add(&srv.ndrained, 1) + 1 == srv.nloops && here->idx != 0)
		uv_async_send(&srv.loops[0]->wake);
	all_drained();
}

/* On the main loop, once: every loop has drained. */
static void all_drained(void)
{
	void (*done)(void) = srv.on_all_drained;

	if (here->idx != 0 || !here->drained || !done || atomic_load(&srv.ndrained) < srv.nloops)
		return;
	srv.on_all_drained = NULL;
	uv_close((uv_handle_t *)&here->wake, NULL);
	done();
}

/* Work in flight has had its time; replies nobody reads are dropped. */
static void grace_cb(uv_timer_t *t)
{
	struct rpc_conn *conn, *next;

	(void)t;
	for (conn = here->conns; conn; conn = next) {
		next = conn->next;
		log_warn("conn %llu: closed at shutdown with %u requests in flight, "
			 "%zu reply bytes unread",
			 (unsigned long long)conn->dc.id, conn->inflight, conn->queued_bytes);
		conn_close(conn);
	}
}

/* This loop stops reading; in-flight calls finish and their replies go out first. */
static void loop_shutdown(void)
{
	struct rpc_conn *conn, *next;

	if (here->stopping)
		return;
	here->stopping = 1;
	uv_timer_init(here->loop, &here->grace);
	uv_timer_start(&here->grace, grace_cb, SHUTDOWN_GRACE_MS, 0);
	uv_unref((uv_handle_t *)&here->grace);
	for (conn = here->conns; conn; conn = next) {
		next = conn->next;
		if (conn->reading) {
			uv_read_stop(&conn->io.s);
			conn->reading = 0;
		}
		conn->close_after = 1;
		flush_schedule(conn);
	}
	flush_all();
	for (conn = here->conns; conn; conn = next) {
		next = conn->next;
		conn_check_close(conn);
	}
	check_drained();
}

void rpc_shutdown(void (*each)(void), void (*all)(void))
{
	if (srv.stopping)
		return;
	srv.stopping = 1;
	for (unsigned i = 0; i < srv.nlst; i++) {
		struct listener *l = &srv.lst[i];

		if (!l->listening)
			continue;
		uv_close(&l->io.h, NULL);
		l->listening = 0;
		unlink_own_socket(l);
	}
	srv.on_drained = each;
	srv.on_all_drained = all;
	/* after the listeners: no connection is handed to a loop that stopped */
	for (unsigned i = 0; i < srv.nloops; i++) {
		struct rpc_loop *lp = srv.loops[i];

		if (lp != here)
			loop_poke(lp, 1, 0);
	}
	loop_shutdown();
}

/* ---- the control protocol (proto.h): a 16-byte header and its payload ---- */

/* The dispatcher's completion of a control request: the header, then the payload. */
static void ctl_done(struct disp_call *dc)
{
	struct rpc_req *r = (struct rpc_req *)dc; /* dc is the first member */

	dispatch_reply_hdr(dc, r->hdrbuf);
	r->hdr_len = PROTO_HDR_SIZE;
	rpc_req_done(dc);
}

static struct rpc_req *ctl_req_new(struct rpc_conn *conn, const struct proto_hdr *h,
				   size_t charge)
{
	struct rpc_req *r = rpc_req_new(conn, h, charge);

	if (r)
		r->dc.done = ctl_done;
	return r;
}

/* Reply to a frame that never became a call (bad header, a limit). */
static void reply_error(struct rpc_conn *conn, const struct proto_hdr *h, int status, int close)
{
	struct rpc_req *r;

	STATS_ADD(bad_frames, 1);
	if (close)
		conn->close_after = 1;
	r = ctl_req_new(conn, h, 0);
	if (r)
		dispatch_refuse(&r->dc, status);
}

static int ctl_frame(struct rpc_conn *conn, const uint8_t *p, size_t avail, size_t *need)
{
	struct proto_hdr h;
	int ret;

	if (avail < PROTO_HDR_SIZE)
		return 1;
	proto_hdr_get(p, &h);
	ret = proto_hdr_check(&h, srv.cfg->max_frame);
	if (ret < 0) {
		log_info("conn %llu: bad frame (op %u, len %u): %s", (unsigned long long)conn->dc.id,
			 h.op, h.len, proto_strerror(ret));
		reply_error(conn, &h, ret, 1);
		return -1;
	}
	if (!conn->dc.hello_done && h.len > PROTO_HELLO_BODY) {
		/* only a HELLO may come first: its body is not read, let alone kept */
		log_info("conn %llu (uid %u): %u-byte %s frame before hello: closed",
			 (unsigned long long)conn->dc.id, (unsigned)conn->dc.peer.uid, h.len,
			 proto_op_name(h.op));
		reply_error(conn, &h, -EPROTO, 1);
		return -1;
	}
	*need = PROTO_HDR_SIZE + (size_t)h.len;
	return 0;
}

/* Hand one complete frame to the dispatcher. Returns -1 if the connection is closing. */
static int ctl_handle(struct rpc_conn *conn, const uint8_t *p, size_t len)
{
	const uint8_t *body = p + PROTO_HDR_SIZE;
	struct proto_hdr h;
	struct rpc_req *r;
	size_t charge;

	(void)len;
	proto_hdr_get(p, &h);
	/* what this request will hold: its body, and for READ and MAP the reply buffer */
	charge = h.len;
	if (h.op == PROTO_OP_READ && h.len >= PROTO_IO_BODY)
		charge += wire_get_u32(body + 12);
	if (h.op == PROTO_OP_MAP)
		charge += (size_t)PROTO_MAP_RUN * PROTO_MAP_RUNS;
	r = ctl_req_new(conn, &h, charge);
	if (!r)
		return -1;
	if (h.len) {
		if (!dispatch_body_alloc(&r->dc, h.len)) {
			dispatch_refuse(&r->dc, -ENOMEM);
			return 0;
		}
		memcpy(r->dc.body, body, h.len);
	}
	dispatch_call(&r->dc);
	return conn->close_after ? -1 : 0;
}

/* Whether the frame starting at @p (@avail bytes buffered) carries key material or data. */
static int ctl_wipe(struct rpc_conn *conn, const uint8_t *p, size_t avail)
{
	struct proto_hdr h;
	struct proto_io pio;
	const struct proto_cmd *cmd;

	if (avail < PROTO_HDR_SIZE)
		return 0;
	proto_hdr_get(p, &h);
	if (h.op == PROTO_OP_WRITE) {
		/* a clear dataset's data is on its LUN anyway */
		if (avail < PROTO_HDR_SIZE + PROTO_IO_BODY)
			return 1;
		proto_io_get(p + PROTO_HDR_SIZE, &pio);
		return dispatch_write_wiped(rpc_conn_client(conn), pio.handle);
	}
	cmd = proto_cmd_by_op(h.op);
	return cmd && (cmd->flags & CMD_SECRET);
}

/* Said in the reply to the HELLO the client is about to send. */
static void ctl_refuse(struct rpc_conn *conn, int status, const char *why)
{
	struct proto_hdr h = { .op = PROTO_OP_HELLO };

	(void)why;
	reply_error(conn, &h, status, 1);
}

static const struct rpc_framing ctl_framing = {
	.name = "control",
	.req_size = sizeof(struct rpc_req),
	.refuse = ctl_refuse,
	.frame = ctl_frame,
	.handle = ctl_handle,
	.wipe = ctl_wipe,
};
