// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the config parser (daemon/conf.c): the input is
 * a cofferd.conf; it is loaded through config_load (libinih and the option
 * table) from a temp file, and a config that loads must dump and reload to
 * the same text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[256];

static int dump(const struct config *c, char **buf, size_t *len)
{
	FILE *f = open_memstream(buf, len);

	if (!f)
		return -1;
	config_dump(c, f);
	return fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c, c2;
	char err[512], *d1 = NULL, *d2 = NULL;
	size_t l1 = 0, l2 = 0;
	FILE *f;

	if (!path[0]) {
		snprintf(path, sizeof(path), "%s/fuzz-config.%d.conf",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	}
	f = fopen(path, "w");
	if (!f)
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	config_defaults(&c);
	if (config_load(&c, path, err, sizeof(err)) == 0) {
		if (dump(&c, &d1, &l1) == 0) {
			/*
			 * The dump is a config file too: it must load to the same
			 * values. config_dump() prints no section header, which
			 * config_load() requires, so the harness adds it.
			 */
			f = fopen(path, "w");
			fputs("[cofferd]\n", f);
			fwrite(d1, 1, l1, f);
			fclose(f);
			config_defaults(&c2);
			if (config_load(&c2, path, err, sizeof(err)) != 0) {
				fprintf(stderr, "dump does not load: %s\n%.*s", err, (int)l1, d1);
				abort();
			}
			dump(&c2, &d2, &l2);
			if (l1 != l2 || memcmp(d1, d2, l1))
				abort();
			config_free(&c2);
		}
	} else if (!err[0]) {
		abort(); /* an error without a message */
	}
	free(d1);
	free(d2);
	config_free(&c);
	unlink(path);
	return 0;
}
