/* SPDX-License-Identifier: MIT */
/*
 * Giving the heap back: glibc keeps what is freed in its arenas, so a
 * daemon that peaked once (a stream of writes, an import reading a large
 * pool's log) would keep that peak for good. The callers choose the
 * moments (a worker gone idle, an import done, a large commit after the
 * writes stopped); this is the one place that knows how, and when not:
 * under ASan, whose allocator owns the heap, glibc's arenas may never have
 * been set up and malloc_trim() would read through a null one.
 */
#include <stdlib.h> /* says whether this is glibc */
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common.h"

void stor_heap_trim(void)
{
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
	malloc_trim(0);
#endif
}
