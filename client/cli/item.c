/*
 * item.c — `shardex put|get|delete|load`: point operations on items given
 * as JSON, and bulk loading of JSON lines in batches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define LOAD_BATCH 200               /* items per PUT request */
#define LOAD_BATCH_BYTES (4u << 20)  /* ... and at most about this much JSON,
                                        well under the 16 MiB frame limit */

static const char *PUT_USAGE =
    "usage: shardex put TABLE 'JSON-OBJECT'\n"
    "  Stores the item (it must hold the table's key attributes).\n"
    "  Numbers: integers are int64, others double; binary as {\"$bin\":\"<base64>\"}.\n";
static const char *GET_USAGE =
    "usage: shardex get TABLE 'JSON-KEY-OBJECT'\n"
    "  Prints the item as one JSON line; exits 1 when absent.\n";
static const char *DELETE_USAGE =
    "usage: shardex delete TABLE 'JSON-KEY-OBJECT'\n"
    "  Deletes the item with that key.\n";
static const char *LOAD_USAGE =
    "usage: shardex load TABLE [FILE]\n"
    "  Stores one JSON object per line from FILE (or stdin), in batches, and\n"
    "  prints how many items were stored. Bad lines are reported with their\n"
    "  number; the command then exits 3 (the good lines are still stored).\n";

/* Parses "TABLE JSON" arguments into *table and a new item. */
static int table_and_item(cli_ctx *ctx, const char *usage, const char **table, sx_item **it)
{
    const char *pos[2];
    char err[256];
    int npos, r = cli_parse(ctx, NULL, pos, 2, &npos, usage);
    if (r < 0)
        return -1;
    if (r)
        return r;
    if (npos != 2)
        return cli_usage_error(usage, "expected TABLE and a JSON object");
    json_t *j = cli_json_parse(pos[1], err, sizeof err);
    if (!j)
        return cli_usage_error(usage, "%s", err);
    int rc = cli_json_to_item(j, it, err, sizeof err);
    json_decref(j);
    if (rc)
        return cli_usage_error(usage, "%s", err);
    *table = pos[0];
    return cli_connect(ctx);
}

int cli_put(cli_ctx *ctx)
{
    const char *table;
    sx_item *it = NULL;
    int r = table_and_item(ctx, PUT_USAGE, &table, &it);
    if (r == 0) {
        int rc = sx_put(ctx->client, table, it, NULL);
        r = rc ? cli_fail(ctx, rc) : CLI_OK;
    }
    sx_item_free(it);
    return r < 0 ? CLI_OK : r;
}

int cli_get(cli_ctx *ctx)
{
    const char *table;
    sx_item *key = NULL, *got = NULL;
    int r = table_and_item(ctx, GET_USAGE, &table, &key);
    if (r == 0) {
        int rc = sx_get(ctx->client, table, key, &got);
        if (rc == SX_ENOTFOUND)
            r = CLI_NOTFOUND;    /* absent: no message, just the exit code */
        else if (rc)
            r = cli_fail(ctx, rc);
        else
            r = cli_print_item(got);
    }
    sx_item_free(got);
    sx_item_free(key);
    return r < 0 ? CLI_OK : r;
}

int cli_delete(cli_ctx *ctx)
{
    const char *table;
    sx_item *key = NULL;
    int r = table_and_item(ctx, DELETE_USAGE, &table, &key);
    if (r == 0) {
        int rc = sx_delete(ctx->client, table, key);
        r = rc ? cli_fail(ctx, rc) : CLI_OK;
    }
    sx_item_free(key);
    return r < 0 ? CLI_OK : r;
}

/* A batch of parsed lines waiting to be sent. */
typedef struct load_state {
    cli_ctx *ctx;
    const char *table;
    sx_item *items[LOAD_BATCH];
    long lines[LOAD_BATCH];
    size_t n;
    size_t bytes;        /* JSON bytes of the queued lines */
    long stored;
    long refused;        /* lines the store refused (bad items) */
    long stopped_at;     /* > 0: the first line of the batch that could not be
                          * sent (the store or the cluster failed): stop */
} load_state;

/* Errors that are an item's own (its key, its size, its form): the other
 * items of its batch can still be stored. */
static bool item_error(int rc)
{
    return rc == SX_EKEY || rc == SX_EPROTO || rc == SX_ETOOBIG || rc == SX_EINVAL;
}

/* Sends the queued items: in one batch, or, when the store refuses an item
 * of it, one by one, so that each refused line is reported with its number
 * and the others are stored. Any other failure stops the load. */
static void load_flush(load_state *ls)
{
    sx_client *c = ls->ctx->client;

    if (ls->n && !ls->stopped_at) {
        int rc = sx_put_batch(c, ls->table, (const sx_item *const *)ls->items, ls->n, NULL);
        if (rc == SX_OK) {
            ls->stored += (long)ls->n;
        } else if (!item_error(rc)) {
            cli_error("lines %ld-%ld: %s", ls->lines[0], ls->lines[ls->n - 1],
                      sx_client_errmsg(c));
            ls->stopped_at = ls->lines[0];
        } else {
            for (size_t k = 0; k < ls->n && !ls->stopped_at; k++) {
                rc = sx_put(c, ls->table, ls->items[k], NULL);
                if (rc == SX_OK) {
                    ls->stored++;
                } else if (item_error(rc)) {
                    cli_error("line %ld: %s", ls->lines[k], sx_client_errmsg(c));
                    ls->refused++;
                } else {
                    cli_error("line %ld: %s", ls->lines[k], sx_client_errmsg(c));
                    ls->stopped_at = ls->lines[k];
                }
            }
        }
    }
    for (size_t k = 0; k < ls->n; k++)
        sx_item_free(ls->items[k]);
    ls->n = 0;
    ls->bytes = 0;
}

/* Parses one line; returns 0 (queued or blank) or 1 (bad line, reported). */
static int load_line(load_state *ls, char *line, long lineno)
{
    char err[256];
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    if (strspn(line, " \t") == len)
        return 0;
    json_t *j = cli_json_parse(line, err, sizeof err);
    sx_item *it = NULL;
    int rc = j ? cli_json_to_item(j, &it, err, sizeof err) : SX_EINVAL;
    json_decref(j);
    if (rc) {
        cli_error("line %ld: %s", lineno, err);
        return 1;
    }
    if (ls->n && ls->bytes + len > LOAD_BATCH_BYTES)
        load_flush(ls);
    ls->items[ls->n] = it;
    ls->lines[ls->n++] = lineno;
    ls->bytes += len;
    if (ls->n == LOAD_BATCH)
        load_flush(ls);
    return 0;
}

int cli_load(cli_ctx *ctx)
{
    const char *pos[2];
    int npos, r = cli_parse(ctx, NULL, pos, 2, &npos, LOAD_USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos < 1)
        return cli_usage_error(LOAD_USAGE, "expected TABLE [FILE]");
    FILE *f = stdin;
    if (npos == 2 && strcmp(pos[1], "-") != 0) {
        f = fopen(pos[1], "r");
        if (!f)
            return cli_error("cannot open %s", pos[1]);
    }
    if ((r = cli_connect(ctx))) {
        if (f != stdin)
            fclose(f);
        return r;
    }
    load_state ls = { .ctx = ctx, .table = pos[0] };
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, bad = 0;
    while (!ls.stopped_at && getline(&line, &cap, f) >= 0)
        bad += load_line(&ls, line, ++lineno);
    load_flush(&ls);
    int read_err = ferror(f);
    free(line);
    if (f != stdin)
        fclose(f);
    printf("%ld\n", ls.stored);
    bad += ls.refused;
    if (read_err)
        return cli_error("read error after line %ld; %ld items stored", lineno, ls.stored);
    if (ls.stopped_at)
        return cli_error("load stopped at line %ld: %ld items stored before it, %ld bad "
                         "line%s; the lines from %ld on were not all stored", ls.stopped_at,
                         ls.stored, bad, bad == 1 ? "" : "s", ls.stopped_at);
    if (bad)
        return cli_error("%ld bad line%s; %ld items stored", bad, bad == 1 ? "" : "s",
                         ls.stored);
    return CLI_OK;
}
