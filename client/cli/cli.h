/*
 * cli.h — shared pieces of the `shardex` command-line tool: exit codes,
 * option parsing, error reporting, and JSON <-> item conversion.
 *
 * One file per command group (table.c, index.c, item.c, load.c, query.c,
 * status.c), and lines.c for load's input; main.c dispatches. Everything runs
 * on the main thread, but for the completion callbacks of load's batches
 * (load.c).
 */
#ifndef SX_CLI_H
#define SX_CLI_H

#include <stdbool.h>
#include <jansson.h>
#include "shardex.h"

/* Exit codes (the CLI's contract). */
#define CLI_OK 0
#define CLI_NOTFOUND 1
#define CLI_USAGE 2
#define CLI_ERROR 3

/* What every command gets: its arguments after the command words, the
 * router list from -r / SHARDEX_ROUTER (NULL if none was given) and the
 * call timeout. */
typedef struct cli_ctx {
    int argc;
    char **argv;
    const char *routers;
    int timeout_ms;      /* --timeout / SHARDEX_TIMEOUT_MS; 0: the library's */
    const char *tls_dir; /* --tls / SHARDEX_TLS_DIR: ca.pem, client.pem,
                          * client.key for tls+tcp:// routers; NULL: none */
    sx_client *client;   /* opened lazily by cli_connect */
} cli_ctx;

/* A command's option table entry: name ("--limit"), whether it takes a
 * value, and where the value (or "1" for flags) goes. */
typedef struct cli_opt {
    const char *name;
    bool has_value;
    const char **value;
} cli_opt;

/* Parses ctx->argv: options listed in opts (as "--name VALUE",
 * "--name=VALUE" or flags), -r/--router URL, and --help/-h; everything else
 * lands in pos[0..*npos) (at most maxpos). Returns CLI_OK, CLI_USAGE (after
 * printing a message and the usage text), or -1 when help was printed
 * (exit 0). */
int cli_parse(cli_ctx *ctx, const cli_opt *opts, const char **pos, int maxpos, int *npos,
              const char *usage);

/* Prints the one line "shardex: <message> (see --help)" to stderr; returns
 * CLI_USAGE. usage is the command's usage text (printed by --help). */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether s is a whole decimal number in [lo, hi]; if so it goes to *out. */
bool cli_long_in(const char *s, long lo, long hi, long *out);

/* Prints "shardex: <message>" to stderr; returns CLI_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Opens ctx->client if needed. Returns CLI_OK, or prints and returns
 * CLI_USAGE (no router given) / CLI_ERROR. */
int cli_connect(cli_ctx *ctx);

/* Reports a failed library call rc: prints "shardex: <server message or
 * strerror>" and returns CLI_NOTFOUND for SX_ENOTFOUND, else CLI_ERROR. */
int cli_fail(cli_ctx *ctx, int rc);

/* ---- json.c ---- */

/* Parses text as one JSON value. On failure returns NULL and writes a
 * one-line reason into err[errlen]. Caller json_decref()s the result. */
json_t *cli_json_parse(const char *text, char *err, size_t errlen);

/* Builds an item from a JSON object (integers -> int, reals -> double,
 * {"$bin":"<base64>"} -> binary, objects -> maps, arrays -> lists). On
 * success *out is the caller's (sx_item_free). Returns 0 or SX_EINVAL /
 * SX_ENOMEM with a reason in err. */
int cli_json_to_item(const json_t *obj, sx_item **out, char *err, size_t errlen);

/* A scalar JSON value as an sx_value. Binary bytes are allocated into
 * *keep (free() it when done with v; NULL otherwise); strings borrow from
 * j. Returns 0 or SX_EINVAL with a reason in err. */
int cli_json_to_scalar(const json_t *j, sx_value *v, void **keep, char *err, size_t errlen);

/* Prints an item as one compact JSON line on stdout (doubles in their
 * shortest exact form, binaries as {"$bin":"<base64>"}). Returns 0 or
 * CLI_ERROR. */
int cli_print_item(const sx_item *it);

/* Splits a comma-separated list into a malloc'd array of malloc'd strings
 * (*n entries). Returns 0 or SX_EINVAL (empty entry) / SX_ENOMEM. */
int cli_split(const char *s, char ***out, size_t *n);
void cli_split_free(char **v, size_t n);

/* ---- lines.c ---- */

/* Input read line by line from a file descriptor (any length of line). */
typedef struct cli_lines {
    int fd;
    char *buf;
    size_t cap, start, end; /* buf[start, end) read and not handed out */
    size_t scanned;         /* buf[start, scanned) holds no newline */
    bool eof;
    int err; /* errno of a failed read, 0 otherwise */
} cli_lines;

void cli_lines_init(cli_lines *r, int fd);
void cli_lines_free(cli_lines *r);

/* The next line: returns 1 with *line (NUL-terminated, without its
 * newline; valid until the next call) and *len, 0 at the end of the input
 * (a last line without a newline is still handed out), or -1 on a failed
 * read (r->err) or when idle returned false (r->err 0). While no whole
 * line is buffered and the input has nothing to read for idle_ms, idle(arg)
 * is called (NULL: none), again every idle_ms. */
int cli_lines_next(cli_lines *r, char **line, size_t *len, int idle_ms, bool (*idle)(void *arg),
                   void *arg);

/* ---- the command groups ---- */
int cli_table(cli_ctx *ctx); /* table create */
int cli_index(cli_ctx *ctx); /* index create|drop|list */
int cli_put(cli_ctx *ctx);
int cli_get(cli_ctx *ctx);
int cli_delete(cli_ctx *ctx);
int cli_load(cli_ctx *ctx);
int cli_query(cli_ctx *ctx);
int cli_scan(cli_ctx *ctx);
int cli_status(cli_ctx *ctx);

#endif
