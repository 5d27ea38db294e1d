/* SPDX-License-Identifier: MIT */
/*
 * cofferd's pid file (pid_file in cofferd.conf, -P): "PID\n", so that an
 * operator stops one daemon of several with kill $(cat FILE), as with
 * nbdkit --pidfile. The file holds its daemon's flock(2) for as long as it
 * runs: a locked file names a live daemon, an unlocked one is stale.
 */
#ifndef COFFERD_PIDFILE_H
#define COFFERD_PIDFILE_H

#include <sys/types.h>

struct pidfile;

/**
 * Write this process's pid to @path and keep it locked. The text is
 * written to a temporary file beside @path and linked or renamed into
 * place, so a reader sees no file or a whole one, never a partial line. A
 * stale file (its daemon died without removing it) is replaced. The file
 * is 0644 whatever the umask: anyone may read whom to signal.
 * @param[out] out     the claim, NULL on failure
 * @param[out] holder  on -EBUSY the pid the file names (0 if unreadable)
 * @return 0, -EBUSY (a live process holds @path), -ELOOP (@path is a
 *         symbolic link), or another -errno of creating or linking the file
 */
int pidfile_claim(const char *path, struct pidfile **out, pid_t *holder);

/**
 * Remove the pid file if @path still names the file this claim wrote (one
 * put there by someone else stays), then drop the lock. NULL-safe.
 */
void pidfile_release(struct pidfile *pf);

#endif
