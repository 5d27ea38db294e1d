/* SPDX-License-Identifier: MIT */
/*
 * The default socket path (sockpath.h): the daemon's config defaults and
 * the client library both call it, so they cannot drift apart. Reads the
 * environment only; no allocation, no I/O.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sockpath.h"

void sockpath_default_uid(uid_t uid, char *buf, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	int n;

	if (uid == 0) {
		snprintf(buf, len, "/run/coffer/cofferd.sock");
		return;
	}
	/* the XDG spec says to ignore a relative runtime dir; one too deep for
	 * sun_path falls back to /tmp */
	if (rt && rt[0] == '/') {
		n = snprintf(buf, len, "%s/coffer/cofferd.sock", rt);
		if (n > 0 && (size_t)n < len && (size_t)n <= SOCKPATH_MAX)
			return;
	}
	snprintf(buf, len, "/tmp/coffer-%u/cofferd.sock", (unsigned)uid);
}

static char self_buf[PATH_MAX];
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

static void self_init(void)
{
	sockpath_default_uid(geteuid(), self_buf, sizeof(self_buf));
}

const char *sockpath_default(void)
{
	pthread_once(&self_once, self_init);
	return self_buf;
}
