/* SPDX-License-Identifier: MIT */
/*
 * Memory scans for the key-hygiene tests (see memscan.h). Regions come from
 * /proc/PID/smaps (for the VmFlags), bytes from /proc/PID/mem in chunks that
 * overlap by the longest needle, so a secret across a chunk edge is found.
 * The scan's own buffer and the callers' vaults are subtracted from every
 * region, so that the copies the tests must hold never count as hits.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memscan.h"

#define CHUNK (1u << 20)
#define REGION_MAX (1ull << 30)
#define NVAULTS 16

static struct {
	uintptr_t lo, hi;
} vaults[NVAULTS];
static size_t nvaults, nfixed; /* vaults[0, nfixed) are vaults, the rest exclusions */
static uint8_t *scratch;

void *memscan_vault(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || nvaults == NVAULTS)
		abort();
	(void)madvise(p, len, MADV_DONTDUMP);
	/* vaults go first, before the exclusions, which memscan_exclude_clear() drops */
	memmove(&vaults[nfixed + 1], &vaults[nfixed], (nvaults - nfixed) * sizeof(vaults[0]));
	vaults[nfixed].lo = (uintptr_t)p;
	vaults[nfixed].hi = (uintptr_t)p + len;
	nfixed++;
	nvaults++;
	return p;
}

void memscan_exclude(const void *p, size_t len)
{
	if (nvaults == NVAULTS)
		abort();
	vaults[nvaults].lo = (uintptr_t)p;
	vaults[nvaults].hi = (uintptr_t)p + len;
	nvaults++;
}

void memscan_exclude_clear(void)
{
	nvaults = nfixed;
}

int memscan_open(pid_t pid)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static void scan_range(int memfd, uintptr_t lo, uintptr_t hi, const struct memscan_region *r,
		       const struct memscan_needle *needles, size_t n, struct memscan_hit *hits,
		       size_t maxhits, int *nhits)
{
	const size_t keep = MEMSCAN_NEEDLE_MAX - 1;
	size_t have = 0; /* bytes of the previous chunk kept at the start of scratch */
	uintptr_t at = lo;

	while (at < hi) {
		size_t want = hi - at < CHUNK ? hi - at : CHUNK;
		ssize_t got = pread(memfd, scratch + have, want, (off_t)at);

		if (got <= 0) {
			/* an unreadable page (a guard, I/O memory): go on after it */
			at = (at + 4096) & ~(uintptr_t)4095;
			have = 0;
			continue;
		}
		size_t len = have + (size_t)got;

		for (size_t i = 0; i < n; i++) {
			const uint8_t *p = scratch, *end = scratch + len, *f;

			while ((f = memmem(p, (size_t)(end - p), needles[i].bytes, needles[i].len))) {
				/* a hit wholly inside the kept tail was counted last round */
				if ((size_t)(f - scratch) + needles[i].len > have) {
					if ((size_t)*nhits < maxhits)
						hits[*nhits] = (struct memscan_hit){
							.what = needles[i].what,
							.addr = at - have + (uintptr_t)(f - scratch),
							.reg = *r,
						};
					(*nhits)++;
				}
				p = f + 1;
			}
		}
		at += (size_t)got;
		have = len < keep ? len : keep;
		memmove(scratch, scratch + len - have, have);
	}
	/* nothing read stays behind */
	explicit_bzero(scratch, CHUNK + MEMSCAN_NEEDLE_MAX);
}

/* Scan [lo, hi) minus every vault. */
static void scan_region(int memfd, const struct memscan_region *r,
			const struct memscan_needle *needles, size_t n, struct memscan_hit *hits,
			size_t maxhits, int *nhits)
{
	uintptr_t lo = r->lo;

	while (lo < r->hi) {
		uintptr_t hi = r->hi, next = r->hi;

		for (size_t i = 0; i < nvaults; i++) {
			if (vaults[i].hi <= lo || vaults[i].lo >= hi)
				continue;
			if (vaults[i].lo <= lo) {
				/* lo is inside a vault: start again after it */
				lo = vaults[i].hi;
				i = (size_t)-1;
				hi = r->hi;
				if (lo >= r->hi)
					return;
				continue;
			}
			hi = vaults[i].lo;
			next = vaults[i].hi;
		}
		scan_range(memfd, lo, hi, r, needles, n, hits, maxhits, nhits);
		lo = next;
	}
}

int memscan(pid_t pid, int memfd, const struct memscan_needle *needles, size_t n,
	    memscan_skip_fn skip, void *ctx, struct memscan_hit *hits, size_t maxhits)
{
	char path[64], line[512];
	struct memscan_region r = { 0 }, *regs = NULL;
	size_t nregs = 0, cap = 0;
	int nhits = 0, have = 0;
	FILE *f;

	for (size_t i = 0; i < n; i++)
		if (needles[i].len == 0 || needles[i].len > MEMSCAN_NEEDLE_MAX)
			return -EINVAL;
	if (!scratch)
		scratch = memscan_vault(CHUNK + MEMSCAN_NEEDLE_MAX);
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	/* read the whole list first: the scan itself must not change it under us */
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];
		int off = 0;

		if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, perms, &off) == 3) {
			if (have) {
				if (nregs == cap) {
					cap = cap ? 2 * cap : 256;
					regs = realloc(regs, cap * sizeof(*regs));
					if (!regs)
						abort();
				}
				regs[nregs++] = r;
			}
			r.lo = lo;
			r.hi = hi;
			memcpy(r.perms, perms, sizeof(r.perms));
			r.locked = r.dontdump = 0;
			snprintf(r.name, sizeof(r.name), "%s", off ? line + off : "");
			r.name[strcspn(r.name, "\n")] = '\0';
			have = 1;
		} else if (!strncmp(line, "VmFlags:", 8)) {
			r.locked = strstr(line, " lo") != NULL;
			r.dontdump = strstr(line, " dd") != NULL;
		}
	}
	fclose(f);
	if (have) {
		if (nregs == cap) {
			regs = realloc(regs, (cap + 1) * sizeof(*regs));
			if (!regs)
				abort();
		}
		regs[nregs++] = r;
	}
	for (size_t i = 0; i < nregs; i++) {
		const struct memscan_region *g = &regs[i];

		if (g->perms[0] != 'r' || g->hi - g->lo > REGION_MAX ||
		    !strcmp(g->name, "[vvar]") || !strcmp(g->name, "[vsyscall]"))
			continue;
		if (skip && skip(g, ctx))
			continue;
		scan_region(memfd, g, needles, n, hits, maxhits, &nhits);
	}
	free(regs);
	return nhits;
}

const char *memscan_hit_str(const struct memscan_hit *h)
{
	static char buf[512];

	snprintf(buf, sizeof(buf), "%s at %#lx in %#lx-%#lx %s%s%s '%s'", h->what,
		 (unsigned long)h->addr, (unsigned long)h->reg.lo, (unsigned long)h->reg.hi,
		 h->reg.perms, h->reg.locked ? " locked" : "", h->reg.dontdump ? " dontdump" : "",
		 h->reg.name);
	return buf;
}
