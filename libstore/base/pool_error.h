/* SPDX-License-Identifier: MIT */
/* pool_error.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_POOL_ERROR_H
#define STOR_POOL_ERROR_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

void pool_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void pool_clear_error(void);

/** 1 if a call of this thread set a text since the last pool_clear_error(). */
int pool_error_set(void);

#endif
