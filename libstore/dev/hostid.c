/* SPDX-License-Identifier: MIT */
/*
 * This host's id, as LUN labels carry it: the host that last imported a
 * pool. ZFS keeps gethostid() in its vdev labels and refuses to import a
 * pool another host may still have open; so do we. glibc's gethostid()
 * reads /etc/hostid and otherwise derives an id from the host name's
 * address, which changes with the network; we derive the fallback from
 * /etc/machine-id instead, which is stable. $COFFER_HOSTID overrides both
 * so that tests can play two hosts on one machine. Nothing here writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "store.h"

/* Up to @len bytes of @path into @buf; the count, or -1. */
static ssize_t read_small(const char *path, void *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len);
	close(fd);
	return n;
}

uint32_t stor_hostid(void)
{
	const char *env = getenv("COFFER_HOSTID");
	char id[64];
	uint32_t v;
	ssize_t n;

	if (env && env[0]) {
		char *end;
		unsigned long x = strtoul(env, &end, 16);

		if (!*end && x <= UINT32_MAX)
			return (uint32_t)x;
	}
	/* sethostid() writes it in host byte order, and gethostid() reads it so */
	if (read_small("/etc/hostid", &v, sizeof(v)) == (ssize_t)sizeof(v))
		return v;
	n = read_small("/etc/machine-id", id, sizeof(id));
	if (n <= 0)
		return 0;
	while (n > 0 && (id[n - 1] == '\n' || id[n - 1] == ' '))
		n--;
	if (n == 0)
		return 0;
	v = (uint32_t)XXH64(id, (size_t)n, 0);
	return v ? v : 1; /* 0 means "no id" */
}
