/* SPDX-License-Identifier: MIT */
/*
 * cofferd's events (events.c): what libstore reports (faults, repairs,
 * lost records, scans, suspends, keys; store.h lists the classes) and the
 * daemon's own administrative changes (admin.<command>), each a log line,
 * an entry of a bounded list that `coffer pool events` reads (the
 * pool_events command) and a run of the hooks of event_hook_dir.
 */
#ifndef COFFERD_EVENTS_H
#define COFFERD_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "conf.h"
#include "store.h"

/** A pool that did not import stays listed FAULTED (registry.c): error. */
#define EVENTS_POOL_FAULT "pool.fault"

/** Most hooks that run at once; more wait, up to EVENTS_HOOK_QUEUE runs. */
#define EVENTS_HOOKS_MAX 8u
#define EVENTS_HOOK_QUEUE 256u
/** Seconds a hook may run before it is killed. */
#define EVENTS_HOOK_TIMEOUT_S 60u
/** Limited classes (io.*): each (class, pool) passes EVENTS_BURST at once,
 *  then EVENTS_RATE a second; the rest are counted ("suppressed"). */
#define EVENTS_BURST 20u
#define EVENTS_RATE 10u
/** Most events one pool_events reply carries. */
#define EVENTS_REPLY_MAX 1000u

/**
 * Keep the last cfg->max_events events, and receive libstore's from now on
 * (stor_set_event_fn): call before any pool is imported. Events posted
 * before events_loop_start() wait in the list for their log line and hooks.
 * @return 0 or -ENOMEM
 */
int events_init(const struct config *cfg);
/** Log, run hooks and flush suppressed counts on @loop from now on. @return 0 or a libuv error */
int events_loop_start(uv_loop_t *loop);
/** Close the loop's handles (a shutdown: hooks still running are left to finish alone). */
void events_loop_stop(void);
/** Free the list; libstore's events go nowhere after it. */
void events_fini(void);

/**
 * Post event @cls of @pool (NULL or "": none) with @n fields; any thread,
 * never blocks on I/O (its log line and hooks follow on the loop).
 */
void events_post(const char *cls, const char *pool, const struct stor_event_field *f, size_t n);

/**
 * The events after eid @since, of pool @pool only (NULL: all), at most
 * @max, as the reply of pool_events: {"events": [{eid, time, time_ns,
 * class, pool, fields}], "next": the eid to ask after next, "first": the
 * oldest eid still held, "lost": events after @since that fell off the
 * list, "more": true when @max cut the reply short}. NULL: no memory.
 */
json_t *events_list(uint64_t since, const char *pool, size_t max);

#endif
