// SPDX-License-Identifier: MIT
/* Placeholder for `coffer bench` until the load generator is built in. */
#include <stdio.h>

#include "bench.h"

int bench_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "coffer bench: not built\n");
	return 2;
}
