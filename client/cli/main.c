/*
 * main.c — the `shardex` command-line tool: global options, dispatch to the
 * command groups, and the helpers every command shares (option parsing,
 * error reporting, connecting).
 */
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "heap.h" /* proto/ */

static const char *USAGE =
    "usage: shardex [-r URL[,URL...]] [--timeout MS] [--tls DIR] COMMAND [ARGS] [--help]\n"
    "\n"
    "The router URL(s) come from -r or the SHARDEX_ROUTER environment variable.\n"
    "--timeout (or SHARDEX_TIMEOUT_MS): how long a call waits for its router's\n"
    "answer, in milliseconds (default 10000; a query may add its own wait).\n"
    "--tls (or SHARDEX_TLS_DIR): for tls+tcp:// routers, a folder holding ca.pem\n"
    "(the cluster's CA), client.pem and client.key (this client's certificate\n"
    "and key), as `local-cluster up --tls` makes in DIR/tls/client.\n"
    "\n"
    "commands:\n"
    "  table create TABLE --key ATTR [--sort ATTR]\n"
    "  index create TABLE INDEX --on ATTR[,ATTR...] [--project keys|all|ATTR[,ATTR...]]\n"
    "  index drop TABLE INDEX\n"
    "  index list TABLE\n"
    "  put TABLE 'JSON-OBJECT'\n"
    "  get TABLE 'JSON-KEY-OBJECT'\n"
    "  delete TABLE 'JSON-KEY-OBJECT'\n"
    "  load TABLE [FILE] [--batch N] [--inflight N]\n"
    "  query TABLE INDEX [--eq 'JSON-ARRAY'] [--from 'JSON' --to 'JSON' | --prefix STRING]\n"
    "        [--limit N] [--desc] [--attrs A,B,...] [--consistency eventual|verified|strong]\n"
    "        [--explain]\n"
    "  scan TABLE [--where 'JSON-OBJECT']\n"
    "  status\n"
    "\n"
    "exit codes: 0 success, 1 not found, 2 usage error, 3 any other error\n";

int cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("shardex: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_ERROR;
}

int cli_usage_error(const char *usage, const char *fmt, ...)
{
    va_list ap;
    (void)usage; /* one line only; --help prints the usage */
    fputs("shardex: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    return CLI_USAGE;
}

int cli_fail(cli_ctx *ctx, int rc)
{
    const char *m = ctx->client ? sx_client_errmsg(ctx->client) : "";
    cli_error("%s", m && *m ? m : sx_strerror(rc));
    return rc == SX_ENOTFOUND ? CLI_NOTFOUND : CLI_ERROR;
}

int cli_connect(cli_ctx *ctx)
{
    if (ctx->client)
        return CLI_OK;
    if (!ctx->routers || !*ctx->routers)
        return cli_usage_error(USAGE, "no router: give -r URL or set SHARDEX_ROUTER");
    char ca[4096], cert[4096], key[4096], why[512] = "";
    sx_client_tls tls = { ca, cert, key, NULL };
    if (ctx->tls_dir && *ctx->tls_dir) {
        snprintf(ca, sizeof ca, "%s/ca.pem", ctx->tls_dir);
        snprintf(cert, sizeof cert, "%s/client.pem", ctx->tls_dir);
        snprintf(key, sizeof key, "%s/client.key", ctx->tls_dir);
    }
    bool use_tls = ctx->tls_dir && *ctx->tls_dir;
    int rc = sx_client_open_tls(ctx->routers, use_tls ? &tls : NULL, &ctx->client, why, sizeof why);
    if (rc)
        return cli_error("cannot connect to %s: %s%s", ctx->routers, why[0] ? why : sx_strerror(rc),
                         !use_tls && strstr(ctx->routers, "tls+") ? " (give --tls DIR or set "
                                                                    "SHARDEX_TLS_DIR)"
                                                                  : "");
    if (ctx->timeout_ms > 0)
        sx_client_set_timeout(ctx->client, ctx->timeout_ms);
    return CLI_OK;
}

/* Matches "--name" or "--name=value" against arg; *eq gets the value part. */
static bool opt_match(const char *arg, const char *name, const char **eq)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return false;
    if (arg[n] == '\0') {
        *eq = NULL;
        return true;
    }
    if (arg[n] == '=') {
        *eq = arg + n + 1;
        return true;
    }
    return false;
}

int cli_parse(cli_ctx *ctx, const cli_opt *opts, const char **pos, int maxpos, int *npos,
              const char *usage)
{
    *npos = 0;
    for (int k = 0; k < ctx->argc; k++) {
        const char *a = ctx->argv[k], *eq = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return -1;
        }
        if (strcmp(a, "-r") == 0 || opt_match(a, "--router", &eq)) {
            if (!eq && k + 1 >= ctx->argc)
                return cli_usage_error(usage, "%s needs a URL", a);
            ctx->routers = eq ? eq : ctx->argv[++k];
            continue;
        }
        if (strcmp(a, "--") == 0) { /* everything after is positional */
            for (k++; k < ctx->argc; k++) {
                if (*npos >= maxpos)
                    return cli_usage_error(usage, "unexpected argument '%s'", ctx->argv[k]);
                pos[(*npos)++] = ctx->argv[k];
            }
            break;
        }
        const cli_opt *o = NULL;
        if (a[0] == '-' && a[1] == '-')
            for (o = opts; o && o->name && !opt_match(a, o->name, &eq); o++)
                ;
        if (o && o->name) {
            if (o->has_value) {
                if (!eq && k + 1 >= ctx->argc)
                    return cli_usage_error(usage, "%s needs a value", o->name);
                *o->value = eq ? eq : ctx->argv[++k];
            } else if (eq) {
                return cli_usage_error(usage, "%s takes no value", o->name);
            } else {
                *o->value = "1";
            }
            continue;
        }
        if (a[0] == '-' && a[1] == '-')
            return cli_usage_error(usage, "unknown option '%s'", a);
        if (*npos >= maxpos)
            return cli_usage_error(usage, "unexpected argument '%s'", a);
        pos[(*npos)++] = a;
    }
    return CLI_OK;
}

typedef struct cli_cmd {
    const char *name;
    int (*run)(cli_ctx *ctx);
} cli_cmd;

static const cli_cmd COMMANDS[] = { { "table", cli_table },   { "index", cli_index },
                                    { "put", cli_put },       { "get", cli_get },
                                    { "delete", cli_delete }, { "load", cli_load },
                                    { "query", cli_query },   { "scan", cli_scan },
                                    { "status", cli_status }, { NULL, NULL } };

bool cli_long_in(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;
    if (!s || !*s)
        return false;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A timeout in milliseconds from text (1 .. 24 h); 0 when it is not one. */
static int parse_timeout(const char *s)
{
    long v;
    return cli_long_in(s, 1, 86400000L, &v) ? (int)v : 0;
}

int main(int argc, char **argv)
{
    cli_ctx ctx = { 0 };
    int k = 1;
    const char *tmo = getenv("SHARDEX_TIMEOUT_MS"), *tmo_from = "SHARDEX_TIMEOUT_MS";
    heap_tune();
    ctx.routers = getenv("SHARDEX_ROUTER");
    ctx.tls_dir = getenv("SHARDEX_TLS_DIR");
    for (; k < argc && argv[k][0] == '-'; k++) {
        const char *a = argv[k];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (strcmp(a, "-r") == 0 || strcmp(a, "--router") == 0) {
            if (k + 1 >= argc)
                return cli_usage_error(USAGE, "%s needs a URL", a);
            ctx.routers = argv[++k];
        } else if (strncmp(a, "--router=", 9) == 0) {
            ctx.routers = a + 9;
        } else if (strcmp(a, "--timeout") == 0 || strcmp(a, "-t") == 0) {
            if (k + 1 >= argc)
                return cli_usage_error(USAGE, "%s needs a number of milliseconds", a);
            tmo = argv[++k];
            tmo_from = a;
        } else if (strncmp(a, "--timeout=", 10) == 0) {
            tmo = a + 10;
            tmo_from = "--timeout";
        } else if (strcmp(a, "--tls") == 0) {
            if (k + 1 >= argc)
                return cli_usage_error(USAGE, "%s needs a folder", a);
            ctx.tls_dir = argv[++k];
        } else if (strncmp(a, "--tls=", 6) == 0) {
            ctx.tls_dir = a + 6;
        } else {
            return cli_usage_error(USAGE, "unknown option '%s'", a);
        }
    }
    if (tmo && *tmo && (ctx.timeout_ms = parse_timeout(tmo)) == 0)
        return cli_usage_error(USAGE,
                               "%s must be a number of milliseconds from 1 to 86400000, "
                               "not '%s'",
                               tmo_from, tmo);
    if (k >= argc)
        return cli_usage_error(USAGE, "no command given");
    const cli_cmd *c = COMMANDS;
    while (c->name && strcmp(c->name, argv[k]) != 0)
        c++;
    if (!c->name)
        return cli_usage_error(USAGE, "unknown command '%s'", argv[k]);
    ctx.argc = argc - k - 1;
    ctx.argv = argv + k + 1;
    int rc = c->run(&ctx);
    sx_client_close(ctx.client);
    return rc;
}
