/* SPDX-License-Identifier: MIT */
#ifndef COFFERD_ROOTS_H
#define COFFERD_ROOTS_H

#include <stddef.h>

/**
 * Read the operator's list of encryption roots (encryption_roots of
 * cofferd.conf): one dataset name a line, '#' comments and blank lines
 * skipped. @path "" lists none.
 * @return 0, or -1 with the reason in @why
 */
int roots_load(const char *path, char *why, size_t whylen);
/** The list's file, "" when none. */
const char *roots_path(void);
/** How many roots are listed, and the @i-th. */
size_t roots_count(void);
const char *roots_at(size_t i);
/** The listed root that covers dataset @name (itself or an ancestor), or NULL. */
const char *roots_cover(const char *name);
void roots_free(void);

#endif
