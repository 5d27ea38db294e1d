/* SPDX-License-Identifier: MIT */
/*
 * cofferd configuration: one option table (conf.c) declares every key of
 * the [cofferd] section with its type, default and limits; the file is INI,
 * read with libinih. Command-line flags override the file.
 */
#ifndef COFFERD_CONF_H
#define COFFERD_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "sockpath.h"

struct config {
	char *socket;           /* Unix socket path */
	unsigned socket_mode;   /* octal, e.g. 0660 */
	char *socket_group;     /* group owning the socket; NULL/"" = daemon's gid */
	char *nbd_socket;       /* NBD socket: "" = off, a bare name = beside socket */
	char *pid_file;         /* "PID\n" while running: "" = none, a bare name = beside socket */
	char *nbd_listen;       /* NBD over TCP with TLS, "HOST:PORT"; "" = off */
	char *metrics_listen;   /* GET /metrics: "HOST:PORT" or a Unix socket path; "" = off */
	int metrics_allow_remote; /* metrics_listen may be other than loopback */
	char *nbd_tls_psk;      /* psktool file: identity:hexkey per line; "" = none */
	char *nbd_tls_cert;     /* server certificate (PEM); "" = none */
	char *nbd_tls_key;      /* its private key (PEM) */
	char *nbd_tls_ca;       /* CA that signs the client certificates (PEM) */
	char *admin_group;      /* members may administer; NULL/"" = none besides root and the daemon's uid */
	char *key_https_ca;     /* CA certificates (PEM) keylocation=https:// servers must chain to; "" = the system's */
	char *encryption_roots; /* the operator's list of datasets that must be encrypted (roots.c); "" = none */
	char *state_dir;        /* pools/<pool>.mdb and pools.conf live here */
	char *lun_search;       /* directories pool import scans for LUNs, ':'-separated; "" = none */
	uint64_t cache_size;    /* data cache bytes, 0 = off */
	unsigned txg_timeout;   /* seconds between txg commits */
	uint64_t scrub_rate;    /* bytes per second a scrub reads at most; 0 = no limit */
	unsigned loops;         /* event loops, each with its connections; 0 = one per CPU */
	unsigned workers;       /* worker threads for record I/O; 0 = number of CPUs */
	unsigned max_events;    /* events the list keeps (pool events); older ones leave it */
	char *event_hook_dir;   /* executables run per event class (events.c); "" = none */
	int log_level;          /* syslog priority: LOG_ERR .. LOG_DEBUG */
	char *log_target;       /* "stderr", "syslog" or a file path */
	unsigned max_connections;
	unsigned admin_connections; /* of max_connections, kept for administrators */
	unsigned max_connections_per_uid;
	unsigned max_requests_per_uid; /* in flight, over all connections of a uid */
	uint32_t max_frame;     /* bytes of one frame payload */
	uint64_t max_buffered;  /* request bytes held at once; reading pauses above */
	unsigned hello_timeout; /* seconds a new connection has to say HELLO */
	unsigned tls_handshake_timeout; /* seconds a TCP peer has until its TLS handshake names it */
	unsigned max_tls_handshakes; /* TCP peers not yet named, over all addresses */
	unsigned max_tls_handshakes_per_address; /* of them, from one address (IPv6: one /64) */
	unsigned idle_timeout;  /* seconds a quiet connection is kept; 0 = for ever */
	int direct_io;          /* open LUNs with O_DIRECT */
	int io_inline;          /* run record I/O on the event loop, not on workers */
	int lun_mmap;           /* read LUN files on tmpfs in place, through a mapping */
	int allow_core_dumps;   /* stay dumpable (and ptrace-able by our uid); default no */
	char *ceph_conf;        /* ceph.conf of RADOS LUNs; "" = Ceph's own search */
	char *ceph_user;        /* client id RADOS LUNs connect as, without "client."; "" = admin */
	char *ceph_keyring;     /* its keyring; "" = what the ceph.conf says */
	unsigned ceph_lock_timeout; /* seconds a pool's RADOS lock lasts unrenewed */
};

/* Limits the option table enforces (conf.c); the daemon may rely on them. */
#define CONFIG_SOCKET_MAX SOCKPATH_MAX         /* sun_path minus the NUL */
#define CONFIG_LUN_SEARCH_MAX 4095u       /* bytes of the whole lun_search list */
#define CONFIG_HOSTPORT_MAX 300u          /* bytes of nbd_listen: a DNS name and a port */
/* the block devices, as ZFS scans them: stable names first (a LUN seen twice
 * keeps its first path), then every device node; only labels are read */
#define CONFIG_LUN_SEARCH_DEFAULT "/dev/disk/by-id:/dev"
#define CONFIG_TXG_TIMEOUT_DEFAULT 5u
#define CONFIG_TXG_TIMEOUT_MAX 300u
#define CONFIG_CEPH_LOCK_TIMEOUT_MIN 3u
#define CONFIG_CEPH_LOCK_TIMEOUT_MAX 3600u
#define CONFIG_SCRUB_RATE_DEFAULT (64ull << 20)
#define CONFIG_SCRUB_RATE_MAX (1ull << 40)
#define CONFIG_WORKERS_MAX 256u
#define CONFIG_LOOPS_MAX 64u
#define CONFIG_MAX_EVENTS_DEFAULT 1000u
#define CONFIG_MAX_EVENTS_MIN 8u
#define CONFIG_MAX_EVENTS_MAX 1000000u
#define CONFIG_MAX_CONNECTIONS_DEFAULT 1024u
#define CONFIG_MAX_CONNECTIONS_MAX 65536u
#define CONFIG_ADMIN_CONNECTIONS_DEFAULT 16u
#define CONFIG_CONNECTIONS_PER_UID_DEFAULT 256u
#define CONFIG_REQUESTS_PER_UID_DEFAULT 4096u
#define CONFIG_REQUESTS_PER_UID_MAX (1u << 20)
#define CONFIG_MAX_BUFFERED_DEFAULT (1ull << 30)
#define CONFIG_MAX_BUFFERED_MIN (1ull << 20)
#define CONFIG_MAX_BUFFERED_MAX (1ull << 40)
#define CONFIG_HELLO_TIMEOUT_DEFAULT 10u
#define CONFIG_HELLO_TIMEOUT_MAX 3600u
#define CONFIG_TLS_HANDSHAKE_TIMEOUT_DEFAULT 5u
#define CONFIG_TLS_HANDSHAKE_TIMEOUT_MAX 3600u
#define CONFIG_TLS_HANDSHAKES_DEFAULT 512u
#define CONFIG_TLS_HANDSHAKES_PER_ADDRESS_DEFAULT 256u
#define CONFIG_IDLE_TIMEOUT_DEFAULT 600u
#define CONFIG_IDLE_TIMEOUT_MAX 604800u    /* a week */
/* max_frame's default is proto.h's PROTO_FRAME_DEFAULT, which the client and tests see too */
#define CONFIG_MAX_FRAME_MIN (64u << 10)
#define CONFIG_MAX_FRAME_MAX (256u << 20)
#define CONFIG_CACHE_SIZE_MAX (1ull << 50)   /* 1 PiB: anything larger is a typo */

/**
 * Fill @c with the embedded defaults. As root: state in /var/lib/coffer,
 * socket /run/coffer/cofferd.sock; otherwise under $XDG_RUNTIME_DIR/coffer
 * (or /tmp/coffer-<uid>) and $XDG_STATE_HOME/coffer (or ~/.local/state/coffer).
 */
void config_defaults(struct config *c);

/**
 * config_defaults() for user @uid instead of the effective uid: uid 0 gets
 * the system paths, any other uid the per-user ones from the environment.
 * Aborts if memory for the default strings cannot be had (startup only).
 */
void config_defaults_uid(struct config *c, uid_t uid);

/**
 * Read @path over @c. Unknown keys, bad values and duplicates are errors;
 * @err gets "FILE:LINE: message". @return 0 or -1
 * Keys outside [cofferd], other sections, syntax errors and lines longer
 * than the parser's line limit are errors too. The first error is reported.
 * On failure @c is left exactly as it was (the file is applied all or nothing).
 */
int config_load(struct config *c, const char *path, char *err, size_t errlen);

/**
 * Set one option from text, validated as in the file (for command-line
 * overrides). @err gets "NAME: message". @return 0 or -1 (@c unchanged)
 */
int config_set(struct config *c, const char *name, const char *value, char *err, size_t errlen);

/**
 * Write @c as "name = value" lines in table order, loadable by config_load
 * (cofferd --check-config can print the effective configuration this way).
 * @return 0 or -errno
 */
int config_dump(const struct config *c, FILE *f);

/** Name of option @i in table order, or NULL past the last one. */
const char *config_option_name(size_t i);

/** Syslog priority of a log level name ("err" .. "debug"), or -1. */
int config_log_level_parse(const char *name);
/** Name of a syslog priority as config files spell it. Never NULL. */
const char *config_log_level_name(int prio);

/**
 * The NBD socket's path into @buf: nbd_socket itself, or a bare name put
 * in the directory of the control socket.
 * @return 1, 0 (NBD is off), -ENAMETOOLONG (over CONFIG_SOCKET_MAX)
 */
int config_nbd_socket(const struct config *c, char *buf, size_t len);
/**
 * The pid file's path into @buf, resolved as config_nbd_socket() resolves
 * nbd_socket. @return 1, 0 (no pid file), -ENAMETOOLONG (PATH_MAX or more)
 */
int config_pid_file(const struct config *c, char *buf, size_t len);
/**
 * Split nbd_listen's "HOST:PORT" ("[ADDR]:PORT" for IPv6) into @host (NULL:
 * only checked) and *@port (NULL: not wanted). @return 0 or -1: not that form
 */
int config_hostport_split(const char *s, char *host, size_t hostlen, unsigned *port);

/** Free the strings of @c. */
void config_free(struct config *c);

#endif
