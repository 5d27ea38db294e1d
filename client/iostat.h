/* SPDX-License-Identifier: MIT */
/* The reports of coffer pool iostat (iostat.c says how they are made). */
#ifndef COFFER_IOSTAT_H
#define COFFER_IOSTAT_H

#include <jansson.h>

struct iostat_opts {
	int verbose;   /* -v: a row per vdev and LUN */
	int latency;   /* -l: total_wait and disk_wait averages */
	int queue;     /* -q: extents in flight */
	int hist;      /* -w: latency histograms instead of the rates */
	int parsable;  /* -p: exact numbers */
	int scripted;  /* -H: no headers, tabs between fields */
};

/**
 * Print one report of @cur, a pool_iostat reply: with @prev (the reply of
 * the report before) what happened between the two, per second; without,
 * what happened since each LUN opened (the pool's import), per second.
 * @return the number of pools reported
 */
int iostat_report(const struct iostat_opts *o, json_t *cur, json_t *prev);

#endif
