// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the send stream parser: libstore/send/recv.c's
 * stor_recv_feed() on a receive of no pool (recv_parser_new), so every
 * check a real receive makes of the header, the records and the end runs,
 * on chunks cut where the input's first byte says. An error must come
 * with a reason, and nothing after an error may be accepted.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ds/clone.h"
#include "pool_impl.h"
#include "send/recv.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stor_recv *r;
	size_t step, pos = 1;
	int ret = 0;

	if (size < 1)
		return 0;
	step = (size_t)data[0] * 97 + 1;
	r = recv_parser_new();
	if (!r)
		return 0;
	while (pos < size && ret >= 0) {
		size_t n = size - pos < step ? size - pos : step;

		ret = stor_recv_feed(r, data + pos, n);
		pos += n;
		if (ret < 0 && !stor_pool_last_error()[0])
			abort(); /* refused without saying why */
	}
	if (ret < 0 && stor_recv_feed(r, data, 1) >= 0)
		abort(); /* a failed receive takes nothing more */
	stor_recv_close(r);
	return 0;
}
