// SPDX-License-Identifier: MIT
/*
 * The one shape of coffer's JSON output, modelled on OpenZFS 2.3's
 * `zfs list -j` and `zpool status -j`, so that scripts written for those
 * read ours: every document starts with
 *   "output_version": {"command": "coffer list", "vers_major": 0, "vers_minor": 1}
 * and objects of the same kind are keyed by name ("datasets", "pools"),
 * never listed in arrays whose order a script would have to trust. A
 * property is {"value": ..., "source": {"type": "LOCAL", "data": "-"}}.
 *
 * Numbers are strings unless --json-int, in every command alike: a
 * JSON number above 2^53 loses digits in jq and JavaScript, and a script
 * should not have to know which fields may grow that large. GUIDs are
 * strings even with --json-int, for the same reason. Reals print with
 * as many digits as they need to read back the same (1048576, 0.25,
 * 0.1), never rounded for display.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"

int jout_int;

json_t *jout_doc(const char *command, const char *key)
{
	json_t *doc = json_pack("{s:{s:s, s:i, s:i}}", "output_version", "command", command,
				"vers_major", 0, "vers_minor", 1);

	if (key)
		json_object_set_new(doc, key, json_object());
	return doc;
}

void jout_add(json_t *doc, const char *key, const char *name, json_t *entry)
{
	json_object_set_new(json_object_get(doc, key), name, entry);
}

/* A key whose value is a GUID: stays a string. */
static int is_guid_key(const char *k)
{
	size_t n = strlen(k);

	return n >= 4 && !strcmp(k + n - 4, "guid");
}

json_t *jout_prop(const char *name, const char *value, const char *exact, const char *source,
		  const char *from)
{
	const char *type = "NONE", *data = "-";
	json_t *v;

	if (!strcmp(source, "local"))
		type = "LOCAL";
	else if (!strcmp(source, "default"))
		type = "DEFAULT";
	else if (!strcmp(source, "inherited"))
		type = "INHERITED", data = from && from[0] ? from : "-";
	if (jout_int && exact && exact[0] && strspn(exact, "0123456789") == strlen(exact) &&
	    !is_guid_key(name))
		v = json_integer((json_int_t)strtoll(exact, NULL, 10));
	else
		v = json_string(value);
	return json_pack("{s:o, s:{s:s, s:s}}", "value", v, "source", "type", type, "data", data);
}

/* The shortest text of @d that reads back as @d. */
static json_t *real_text(double d)
{
	char buf[40];

	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	return json_string(buf);
}

json_t *jout_uint(unsigned long long v)
{
	return jout_int ? json_integer((json_int_t)v) : json_sprintf("%llu", v);
}

json_t *jout_numbers(json_t *j)
{
	const char *k;
	json_t *v;
	size_t i;

	if (json_is_object(j)) {
		json_object_foreach(j, k, v) {
			if (!strcmp(k, "output_version"))
				continue; /* its numbers are numbers, as in OpenZFS */
			if (json_is_integer(v) && (!jout_int || is_guid_key(k)))
				json_object_set_new(j, k,
						    json_sprintf("%lld", (long long)json_integer_value(v)));
			else if (json_is_real(v) && !jout_int)
				json_object_set_new(j, k, real_text(json_real_value(v)));
			else
				jout_numbers(v);
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v) {
			if (json_is_integer(v) && !jout_int)
				json_array_set_new(j, i,
						   json_sprintf("%lld", (long long)json_integer_value(v)));
			else if (json_is_real(v) && !jout_int)
				json_array_set_new(j, i, real_text(json_real_value(v)));
			else
				jout_numbers(v);
		}
	}
	return j;
}

void jout_print(json_t *doc)
{
	char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (s)
		puts(s);
	free(s);
	json_decref(doc);
}
