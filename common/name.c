/* SPDX-License-Identifier: MIT */
/*
 * The one naming rule for pools and datasets, shared by libstore (create,
 * open, import), the daemon's frame checks and the client: a name valid in
 * one place is valid in all, and the limits are documented once, in coffer(8).
 *
 *   name      = pool *("/" component)      at most STOR_NAME_MAX bytes in all
 *   pool      = ALPHA *namechar            at most STOR_POOL_NAME_MAX bytes
 *   component = 1*namechar, but not "." or ".."
 *   namechar  = ALPHA | DIGIT | "_" | "-" | "." | ":"   (ASCII only)
 *
 *   snapshot  = name "@" snapname         (STOR_NAME_SNAPSHOT, at most STOR_NAME_MAX in all)
 *   snapname  = 1*namechar; destroy's also a list of names and ranges:
 *   snaplist  = snapspec *("," snapspec), snapspec = 1*namechar | [snapname] "%" [snapname]
 *               (@a%b, @a,c%e as zfs destroy takes them)
 *
 * A pool's name lives in every LUN label (format.h LABEL_NAME_LEN), hence its
 * own, shorter limit; STOR_NAME_DATASET checks the form only, the length of
 * its first component is the pool's business (it must name a pool that exists).
 */
#include <string.h>

#include "common.h"

static int name_char_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '-' || ch == '.' || ch == ':';
}

static int check_form(const char *name, enum stor_name_kind kind);

int stor_name_check(const char *name, enum stor_name_kind kind)
{
	const char *at;
	int pct = 0, len = 0;

	if (kind != STOR_NAME_SNAPSHOT)
		return check_form(name, kind);
	if (!name || !(at = strchr(name, '@')) || strnlen(name, STOR_NAME_MAX + 1) > STOR_NAME_MAX)
		return STOR_EBADNAME;
	if (at == name || at - name > STOR_NAME_MAX)
		return STOR_EBADNAME;
	/* each element of a list: a name, or one range whose ends may be left out */
	for (const char *c = at + 1;; c++) {
		if (*c == ',' || !*c) {
			if (!len && !pct)
				return STOR_EBADNAME;
			if (!*c)
				break;
			pct = len = 0;
		} else if (*c == '%' ? pct++ : !name_char_ok(*c)) {
			return STOR_EBADNAME;
		} else {
			len += *c != '%';
		}
	}
	{
		char ds[STOR_NAME_MAX + 1];

		memcpy(ds, name, (size_t)(at - name));
		ds[at - name] = '\0';
		return check_form(ds, STOR_NAME_DATASET);
	}
}

static int check_form(const char *name, enum stor_name_kind kind)
{
	size_t n, max = kind == STOR_NAME_POOL ? STOR_POOL_NAME_MAX : STOR_NAME_MAX;
	const char *start;

	if (!name)
		return STOR_EBADNAME;
	n = strnlen(name, max + 1);
	if (n == 0 || n > max)
		return STOR_EBADNAME;
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
		return STOR_EBADNAME;
	start = name;
	for (size_t i = 0; i <= n; i++) {
		char ch = name[i];

		if (ch == '/' || ch == '\0') {
			size_t len = (size_t)(name + i - start);

			if (len == 0 || (len == 1 && start[0] == '.') ||
			    (len == 2 && start[0] == '.' && start[1] == '.'))
				return STOR_EBADNAME;
			if (kind == STOR_NAME_POOL && ch == '/')
				return STOR_EBADNAME;
			start = name + i + 1;
			continue;
		}
		if (!name_char_ok(ch))
			return STOR_EBADNAME;
	}
	return 0;
}
