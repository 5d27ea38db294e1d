/* SPDX-License-Identifier: MIT */
/*
 * Memory scans for the key-hygiene tests: look for secret bytes in the
 * mappings of a live process (this one, or a daemon of the same uid)
 * through /proc/PID/smaps and /proc/PID/mem, as an attacker holding a core
 * dump or ptrace access would. Shared by tests/unit and tests/e2e.
 */
#ifndef COFFER_TESTS_MEMSCAN_H
#define COFFER_TESTS_MEMSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct memscan_region {
	uintptr_t lo, hi;
	char perms[5];
	char name[256]; /* "[heap]", "[stack]", a path, or "" (anonymous) */
	int locked;     /* VmFlags "lo": mlock'ed */
	int dontdump;   /* VmFlags "dd": MADV_DONTDUMP */
};

/* Where a needle was found; @what names the needle. */
struct memscan_hit {
	const char *what;
	uintptr_t addr;
	struct memscan_region reg;
};

/* Return nonzero to leave @r out of the scan. */
typedef int (*memscan_skip_fn)(const struct memscan_region *r, void *ctx);

struct memscan_needle {
	const char *what;
	const void *bytes;
	size_t len; /* 1 .. MEMSCAN_NEEDLE_MAX */
};

#define MEMSCAN_NEEDLE_MAX 256

/**
 * Open /proc/@pid/mem for reading. @return the fd, or -errno (-EACCES or
 * -EPERM when ptrace access is refused: the caller skips).
 */
int memscan_open(pid_t pid);

/**
 * Scan every readable region of @pid not left out by @skip for each of the
 * @n needles. The scratch buffer lives in a private MADV_DONTDUMP mapping
 * that the scan leaves out, so that the scan itself adds no copies. Regions
 * over 1 GiB (sanitizer shadow and reserves) and [vvar]/[vsyscall] are
 * left out too. @return the number of hits (the first @maxhits are stored in
 * @hits), or -errno if /proc/@pid could not be read.
 */
int memscan(pid_t pid, int memfd, const struct memscan_needle *needles, size_t n,
	    memscan_skip_fn skip, void *ctx, struct memscan_hit *hits, size_t maxhits);

/** One line describing @h, for assertion messages (static buffer). */
const char *memscan_hit_str(const struct memscan_hit *h);

/**
 * A private vault for the tests' own copies of secrets: an anonymous
 * MADV_DONTDUMP mapping of @len bytes that every scan leaves out.
 */
void *memscan_vault(size_t len);
/** Leave [@p, @p + @len) out of every scan, as a vault (e.g. a live key's own mapping). */
void memscan_exclude(const void *p, size_t len);
/** Forget every exclusion made with memscan_exclude() (vaults stay). */
void memscan_exclude_clear(void);

#endif
