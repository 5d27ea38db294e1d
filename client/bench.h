/* SPDX-License-Identifier: MIT */
/*
 * coffer bench: the load generator behind "coffer bench". See coffer-bench(8).
 */
#ifndef COFFER_BENCH_H
#define COFFER_BENCH_H

/**
 * Run "coffer bench" with its own argv (argv[0] is "bench").
 * @return the process exit status: 0 all runs done without errors, 1 I/O or
 * validation errors or a failure to run, 2 a usage error
 */
int bench_main(int argc, char **argv);

#endif
