/* SPDX-License-Identifier: MIT */
/*
 * The daemon's metrics in the Prometheus text exposition format 0.0.4: one
 * renderer (metrics.c), read by `coffer stats --prometheus` through the
 * stats command and by the optional HTTP listener (metrics_http.c) that
 * metrics_listen in cofferd.conf turns on.
 */
#ifndef COFFERD_METRICS_H
#define COFFERD_METRICS_H

#include <stddef.h>

#include "conf.h"

/** The media type of what metrics_render() writes. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/**
 * Render every pool's, LUN's and dataset's counters, gauges and latency
 * histograms, and the daemon's own. The caller holds the registry lock
 * (reg_lock, read), so it runs off the loop.
 * @return the text (the caller frees it), *@len its bytes; NULL: no memory
 */
char *metrics_render(size_t *len);

/**
 * Serve GET /metrics on @cfg->metrics_listen ("" = off: returns 0): a Unix
 * socket path, or HOST:PORT, which must be a loopback address unless
 * metrics_allow_remote is set. Runs on a thread of its own (libmicrohttpd).
 * @return 0, or -1 with @err set
 */
int metrics_http_start(const struct config *cfg, char *err, size_t errlen);
/** Stop the listener (none running: no-op) and remove its Unix socket. */
void metrics_http_stop(void);

#endif
