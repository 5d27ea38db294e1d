// SPDX-License-Identifier: MIT
/*
 * The pid file (pidfile.h): written whole, held by a lock, removed by its
 * own daemon only.
 *
 * Invariant: the file at the path, when it is ours, is the inode we locked
 * before it got there. A new file is filled and locked under a temporary
 * name, then link(2)ed to the path (which fails if a file is there) or,
 * over a stale file, rename(2)d onto it; the stale file is replaced only
 * while we hold its lock and the path still names it, so two daemons that
 * start at once cannot both take the path. At exit the path is unlinked
 * before the lock goes, and only if it still names our inode.
 *
 * Nothing here logs: main.c turns the result into its one line.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pidfile.h"

struct pidfile {
	int fd; /* locked; the inode at path while we run */
	char path[PATH_MAX];
};

/* Tries at replacing a stale file that others keep replacing too. */
#define CLAIM_TRIES 8

/* The pid in the file open on @fd, 0 if it holds none. */
static pid_t read_pid(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long v;
	char *end;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	v = strtol(buf, &end, 10);
	return end != buf && v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

static int same_file(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* A temp file beside @path holding "PID\n", locked, 0644. @return its fd or -errno */
static int write_temp(const char *path, char *tmp, size_t tmplen)
{
	char line[32];
	int fd, n, ret = 0;
	ssize_t w;

	if ((size_t)snprintf(tmp, tmplen, "%s.XXXXXX", path) >= tmplen)
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
	/* a new inode: nobody else can hold its lock yet */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, 0644) < 0)
		ret = -errno;
	else if ((w = write(fd, line, (size_t)n)) != n)
		ret = w < 0 ? -errno : -EIO;
	if (ret < 0) {
		unlink(tmp);
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Put the temp file @tmp where @path is: link it when the path is free,
 * rename it over a stale file whose lock we got. @return 0, -EBUSY with
 * *@holder, or -errno
 */
static int install(const char *tmp, const char *path, pid_t *holder)
{
	for (int tries = 0; tries < CLAIM_TRIES; tries++) {
		int fd, ret;

		if (link(tmp, path) == 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno == ENOENT)
			continue; /* removed meanwhile: the path is free again */
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
			*holder = read_pid(fd);
			close(fd);
			return ret;
		}
		/* stale, and ours to replace while the path still names it */
		ret = same_file(fd, path) ? (rename(tmp, path) == 0 ? 1 : -errno) : 0;
		close(fd);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	return -EAGAIN;
}

int pidfile_claim(const char *path, struct pidfile **out, pid_t *holder)
{
	struct pidfile *pf = NULL;
	char tmp[PATH_MAX + 8];
	int fd = -1, ret;

	*out = NULL;
	*holder = 0;
	if (strlen(path) >= sizeof(pf->path))
		return -ENAMETOOLONG;
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return -ENOMEM;
	fd = write_temp(path, tmp, sizeof(tmp));
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	ret = install(tmp, path, holder);
	/* linked (the temp name is left over) or not installed: either way it goes */
	unlink(tmp);
out:
	if (ret < 0) {
		if (fd >= 0)
			close(fd);
		free(pf);
		return ret;
	}
	pf->fd = fd;
	memcpy(pf->path, path, strlen(path) + 1);
	*out = pf;
	return 0;
}

void pidfile_release(struct pidfile *pf)
{
	if (!pf)
		return;
	/* while we still hold the lock nobody else may have replaced it: compare anyway */
	if (same_file(pf->fd, pf->path))
		unlink(pf->path);
	close(pf->fd);
	free(pf);
}
