/*
 * log.h — process logging: one line per event, with UTC time and level, to
 * the file a daemon is given (stderr until then). Thread-safe.
 */
#ifndef SX_LOG_H
#define SX_LOG_H

typedef enum sx_log_level { SX_LOG_DEBUG, SX_LOG_INFO, SX_LOG_WARN, SX_LOG_ERROR } sx_log_level;

/* Opens path for appending and sends later lines there. Returns 0 or
 * SX_EIO. Call once at start-up, before threads. */
int sx_log_open(const char *path);

/* Sets the lowest level written (default INFO). */
void sx_log_level_set(sx_log_level lvl);

/* Writes one line: "2026-11-29T23:59:59.123Z LEVEL message". */
void sx_log(sx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) sx_log(SX_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) sx_log(SX_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...) sx_log(SX_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) sx_log(SX_LOG_ERROR, __VA_ARGS__)

#endif
