/* SPDX-License-Identifier: MIT */
/*
 * The operator's list of encryption roots (encryption_roots in cofferd.conf):
 * the datasets that must be encrypted, in a file on the host, beyond the
 * reach of whoever holds the LUNs and the state directory.
 *
 * Why: what says a dataset is encrypted - its record's suite, its
 * encryption property, its key-file entry - carries no key (there is no key
 * before load-key to check it with). An attacker who edits all three
 * consistently turns an encrypted root under a clear parent into a clear
 * dataset, whose next writes would reach the LUNs in plaintext. A dataset
 * that still holds sealed records is caught at import (pool.c); an empty
 * or fully overwritten one only by something the attacker cannot edit:
 * this list. A listed root covers itself and every dataset below it; a
 * covered dataset that is clear is refused at open (handlers.c), so no
 * client write reaches a LUN, and `coffer load-key -a` names every listed
 * root that is missing or clear (ds_list's "roots").
 *
 * Read once, when cofferd starts: the list changes with the operator's
 * datasets, and a restart is how cofferd takes a changed configuration.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "roots.h"

static char *path;
static char **names;
static size_t nnames;

void roots_free(void)
{
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	free(path);
	names = NULL;
	nnames = 0;
	path = NULL;
}

static int add(const char *name)
{
	char **nv = realloc(names, (nnames + 1) * sizeof(*nv));

	if (!nv)
		return -1;
	names = nv;
	if (!(names[nnames] = strdup(name)))
		return -1;
	nnames++;
	return 0;
}

int roots_load(const char *file, char *why, size_t whylen)
{
	char line[PROTO_NAME_MAX + 64];
	unsigned no = 0;
	FILE *f;

	roots_free();
	if (!file || !file[0])
		return 0;
	if (!(path = strdup(file)) || !(f = fopen(file, "re"))) {
		snprintf(why, whylen, "encryption_roots %s: %s", file, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *s = line, *e;

		no++;
		s += strspn(s, " \t");
		e = s + strcspn(s, "#\r\n");
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		*e = '\0';
		if (!*s)
			continue;
		if (!proto_name_valid(s, 0) || strchr(s, '@') || !strchr(s, '/')) {
			snprintf(why, whylen, "%s:%u: '%.200s' is not a dataset name (pool/dataset)",
				 file, no, s);
			fclose(f);
			return -1;
		}
		if (add(s) < 0) {
			snprintf(why, whylen, "encryption_roots %s: out of memory", file);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

const char *roots_path(void)
{
	return path ? path : "";
}

size_t roots_count(void)
{
	return nnames;
}

const char *roots_at(size_t i)
{
	return i < nnames ? names[i] : NULL;
}

const char *roots_cover(const char *name)
{
	for (size_t i = 0; i < nnames; i++) {
		size_t n = strlen(names[i]);

		if (!strncmp(name, names[i], n) && (name[n] == '\0' || name[n] == '/'))
			return names[i];
	}
	return NULL;
}
