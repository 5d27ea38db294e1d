/* SPDX-License-Identifier: MIT */
/* Levelled logging for cofferd: stderr (journald), syslog or a file; SIGHUP reopens. */
#ifndef COFFERD_LOG_H
#define COFFERD_LOG_H

#include <syslog.h>

extern int log_level;

/** Open the log target ("stderr", "syslog" or a file path). @return 0 or -errno */
int log_open(const char *target, int level);
/** Reopen the file target (SIGHUP); no-op for stderr and syslog. */
int log_reopen(void);
void log_close(void);
/** The daemon serves: from now on errors go to the log target only. */
void log_ready(void);
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Arguments are not evaluated when the level is off. */
#define log_err(...) do { if (log_level >= LOG_ERR) log_msg(LOG_ERR, __VA_ARGS__); } while (0)
#define log_warn(...) do { if (log_level >= LOG_WARNING) log_msg(LOG_WARNING, __VA_ARGS__); } while (0)
#define log_info(...) do { if (log_level >= LOG_INFO) log_msg(LOG_INFO, __VA_ARGS__); } while (0)
#define log_debug(...) do { if (log_level >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
