/*
 * item.c — `shardex put|get|delete`: point operations on items given as
 * JSON (bulk loading is load.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const char *PUT_USAGE =
    "usage: shardex put TABLE 'JSON-OBJECT'\n"
    "  Stores the item (it must hold the table's key attributes).\n"
    "  Numbers: integers are int64, others double; binary as {\"$bin\":\"<base64>\"}.\n";
static const char *GET_USAGE = "usage: shardex get TABLE 'JSON-KEY-OBJECT'\n"
                               "  Prints the item as one JSON line; exits 1 when absent.\n";
static const char *DELETE_USAGE = "usage: shardex delete TABLE 'JSON-KEY-OBJECT'\n"
                                  "  Deletes the item with that key.\n";
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
            r = CLI_NOTFOUND; /* absent: no message, just the exit code */
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
