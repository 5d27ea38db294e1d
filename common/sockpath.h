/* SPDX-License-Identifier: MIT */
/*
 * Where cofferd listens when nothing says otherwise, and so where coffer
 * looks: the one default both sides compute (sockpath.c, in libcommon.a and libcoffer.a), so
 * the client need not link the daemon's config parser to find the daemon.
 * As root /run/coffer/cofferd.sock; for another user
 * $XDG_RUNTIME_DIR/coffer/cofferd.sock, or /tmp/coffer-<uid>/cofferd.sock
 * when that is unset, relative or too long for a socket address.
 */
#ifndef COFFER_SOCKPATH_H
#define COFFER_SOCKPATH_H

#include <stddef.h>
#include <sys/types.h>

#define SOCKPATH_MAX 107u /* sun_path minus the NUL */

/** The default socket of user @uid into @buf (PATH_MAX is always enough). */
void sockpath_default_uid(uid_t uid, char *buf, size_t len);

/**
 * The default socket for the calling process: computed once from the
 * effective uid and the environment, then returned from static storage.
 * Thread-safe.
 */
const char *sockpath_default(void);

#endif
