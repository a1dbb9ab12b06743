/*
 * table.c — `shardex table create TABLE --key ATTR [--sort ATTR]`.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

static const char *USAGE = "usage: shardex table create TABLE --key ATTR [--sort ATTR]\n"
                           "  Creates TABLE with partition key ATTR and an optional sort key.\n";

int cli_table(cli_ctx *ctx)
{
    const char *key = NULL, *sort = NULL, *pos[3];
    cli_opt opts[] = { { "--key", true, &key }, { "--sort", true, &sort }, { NULL, 0, NULL } };
    int npos, r = cli_parse(ctx, opts, pos, 3, &npos, USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos < 1 || strcmp(pos[0], "create") != 0)
        return cli_usage_error(USAGE, "expected 'table create'");
    if (npos != 2)
        return cli_usage_error(USAGE, "table create needs exactly one TABLE");
    if (!key)
        return cli_usage_error(USAGE, "--key ATTR is required");
    if ((r = cli_connect(ctx)))
        return r;
    int rc = sx_table_create(ctx->client, pos[1], key, sort);
    if (rc)
        return cli_fail(ctx, rc);
    return CLI_OK;
}
