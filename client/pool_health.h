/* SPDX-License-Identifier: MIT */
/* The status: and action: lines of pool status (pool_health.c says how they are chosen). */
#ifndef COFFER_POOL_HEALTH_H
#define COFFER_POOL_HEALTH_H

#include <jansson.h>

struct pool_health {
	char status[1100];
	char action[1100];
};

/** What needs @p's operator (a pool of a pool_status reply, with its LUNs):
 *  1 with @h filled, or 0 when the pool is healthy. */
int pool_health(json_t *p, struct pool_health *h);

#endif
