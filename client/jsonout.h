/* SPDX-License-Identifier: MIT */
/*
 * The JSON documents coffer prints with -j, one shape for every command
 * (jsonout.c).
 */
#ifndef COFFER_JSONOUT_H
#define COFFER_JSONOUT_H

#include <jansson.h>

/** --json-int: numbers as JSON numbers; else every number is a string. */
extern int jout_int;

/**
 * A new document of @command ("coffer list"): output_version, and, when
 * @key is not NULL, an empty object under it ("datasets", "pools") to
 * which jout_add() adds entries keyed by name. The caller jout_print()s it.
 */
json_t *jout_doc(const char *command, const char *key);

/** Add @entry (stolen) to @doc's object @key under @name. */
void jout_add(json_t *doc, const char *key, const char *name, json_t *entry);

/**
 * A property as {"value": V, "source": {"type": T, "data": D}}. @value is
 * the value as shown; @exact its exact digits when it is a number (NULL if
 * not), which --json-int prints as a number. @source is the daemon's word
 * (local, default, inherited, fixed, "-"), @from the dataset it is
 * inherited from.
 */
json_t *jout_prop(const char *name, const char *value, const char *exact, const char *source,
		  const char *from);

/** @v as the document's numbers are: an integer with --json-int, else its digits. */
json_t *jout_uint(unsigned long long v);

/**
 * Every number in @j, recursively, in the document's form: strings (reals
 * with all their digits) unless --json-int. Keys naming a GUID are strings
 * in any case; output_version is left as it is. Returns @j.
 */
json_t *jout_numbers(json_t *j);

/** Print @doc (stolen) on stdout, indented. */
void jout_print(json_t *doc);

#endif
