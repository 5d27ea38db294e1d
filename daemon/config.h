/* SPDX-License-Identifier: MIT */
/*
 * cofferd configuration: one option table (config.c) declares every key of
 * the [cofferd] section with its type, default and limits; the file is INI,
 * read with libinih. Command-line flags override the file.
 */
#ifndef COFFERD_CONFIG_H
#define COFFERD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct config {
	char *socket;           /* Unix socket path */
	unsigned socket_mode;   /* octal, e.g. 0660 */
	char *socket_group;     /* group owning the socket; NULL/"" = daemon's gid */
	char *admin_group;      /* members may administer; NULL/"" = none besides root and the daemon's uid */
	char *state_dir;        /* pools/<pool>.mdb and pools.conf live here */
	uint64_t cache_size;    /* data cache bytes, 0 = off */
	unsigned txg_timeout;   /* seconds between txg commits */
	unsigned workers;       /* worker threads for record I/O; 0 = number of CPUs */
	int log_level;          /* syslog priority: LOG_ERR .. LOG_DEBUG */
	char *log_target;       /* "stderr", "syslog" or a file path */
	unsigned max_connections;
	uint32_t max_frame;     /* bytes of one frame payload */
	int direct_io;          /* open LUNs with O_DIRECT */
};

/**
 * Fill @c with the embedded defaults. As root: state in /var/lib/coffer,
 * socket /run/coffer/cofferd.sock; otherwise under $XDG_RUNTIME_DIR/coffer
 * (or /tmp/coffer-<uid>) and $XDG_STATE_HOME/coffer (or ~/.local/state/coffer).
 */
void config_defaults(struct config *c);

/**
 * Read @path over @c. Unknown keys, bad values and duplicates are errors;
 * @err gets "FILE:LINE: message". @return 0 or -1
 */
int config_load(struct config *c, const char *path, char *err, size_t errlen);

/** Free the strings of @c. */
void config_free(struct config *c);

/** The default socket path for the calling user (used by the client too). */
const char *config_default_socket(void);

#endif
