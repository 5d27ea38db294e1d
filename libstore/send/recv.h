/* SPDX-License-Identifier: MIT */
/* recv.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_RECV_H
#define STOR_RECV_H

#include <stddef.h>
#include <stdint.h>

#include "ds/recv_state.h"
#include "pool_impl.h"

struct meta_txn;
struct stor_recv;

/** A receive of no pool: every check of the stream, nothing stored (the
 *  fuzz harness); stor_recv_feed() and stor_recv_close() as for any. */
struct stor_recv *recv_parser_new(void);

#endif
