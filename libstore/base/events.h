/* SPDX-License-Identifier: MIT */
/* events.c inside libstore: how a unit reports a fault, a repair or a state change. */
#ifndef STOR_EVENTS_H
#define STOR_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/**
 * Hand event @cls (one of the STOR_EV_* of store.h) of pool @pool (NULL:
 * none) with its @n fields to the receiver stor_set_event_fn() registered;
 * nothing when there is none. Any thread, any lock held: the receiver may
 * not call back into libstore (store.h says so).
 */
void event_post(const char *cls, const char *pool, const struct stor_event_field *f, size_t n);

/* Fields for event_post(): a text (NULL reads as "") or a number. */
#define EV_STR(k, s) ((struct stor_event_field){ .name = (k), .str = (s) ? (s) : "" })
#define EV_NUM(k, v) ((struct stor_event_field){ .name = (k), .num = (uint64_t)(v) })

/** event_post() with the fields in place: EVENT(STOR_EV_X, p->name, EV_STR(..), EV_NUM(..)). */
#define EVENT(cls, pool, ...)                                                       \
	do {                                                                        \
		const struct stor_event_field ev_f_[] = { __VA_ARGS__ };            \
		event_post((cls), (pool), ev_f_, sizeof(ev_f_) / sizeof(ev_f_[0])); \
	} while (0)

#endif
