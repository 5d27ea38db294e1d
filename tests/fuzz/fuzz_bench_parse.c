// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the vdbench-style parameter-file parser
 * (client/bench_parse.c) and its size and time parsers.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_parse.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bench_plan *p = NULL;
	char err[512], *text = malloc(size + 1);
	uint64_t bytes;
	double secs;
	int ret;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	err[0] = '\0';
	ret = bench_plan_parse_text("fuzz.vdb", text, &p, err, sizeof(err));
	if (ret < 0 && !err[0])
		abort(); /* an error without a message */
	bench_plan_free(p);
	if (size < 64) {
		stor_parse_size(text, &bytes);
		bench_parse_time(text, &secs);
	}
	free(text);
	return 0;
}
