/*
 * index.c — `shardex index create|drop|list`.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

static const char *USAGE =
    "usage: shardex index create TABLE INDEX --on ATTR[,ATTR...] [--project keys|all|ATTR[,ATTR...]]\n"
    "       shardex index drop TABLE INDEX\n"
    "       shardex index list TABLE\n"
    "  create: a composite index over the attributes, in order; the projection\n"
    "          (default keys) says which attributes the index entries carry.\n"
    "  drop:   the index stops answering at once; its entries are deleted from\n"
    "          the index nodes in the background (within seconds; a node that\n"
    "          is down does it once it is back). The name can be used again.\n"
    "  list:   one line per index: name, attributes, projection, state.\n";

static int index_create(cli_ctx *ctx, const char *table, const char *index, const char *on,
                        const char *project)
{
    char **attrs = NULL, **proj = NULL;
    size_t nattrs = 0, nproj = 0;
    sx_projection p = SX_PROJ_KEYS;
    int r = CLI_OK;
    if (cli_split(on, &attrs, &nattrs))
        return cli_usage_error(USAGE, "bad --on list '%s'", on);
    if (!project || strcmp(project, "keys") == 0) {
        p = SX_PROJ_KEYS;
    } else if (strcmp(project, "all") == 0) {
        p = SX_PROJ_ALL;
    } else if (cli_split(project, &proj, &nproj) == 0) {
        p = SX_PROJ_LIST;
    } else {
        r = cli_usage_error(USAGE, "bad --project '%s'", project);
        goto out;
    }
    if ((r = cli_connect(ctx)))
        goto out;
    int rc = sx_index_create(ctx->client, table, index, (const char *const *)attrs, nattrs, p,
                             (const char *const *)proj, nproj);
    if (rc)
        r = cli_fail(ctx, rc);
out:
    cli_split_free(attrs, nattrs);
    cli_split_free(proj, nproj);
    return r;
}

static void print_list(char **v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        printf("%s%s", k ? "," : "", v[k]);
}

static int index_list(cli_ctx *ctx, const char *table)
{
    sx_index_info *list;
    size_t n;
    int r = cli_connect(ctx);
    if (r)
        return r;
    int rc = sx_index_list(ctx->client, table, &list, &n);
    if (rc)
        return cli_fail(ctx, rc);
    for (size_t k = 0; k < n; k++) {
        printf("%s\t", list[k].name);
        print_list(list[k].attrs, list[k].nattrs);
        printf("\t");
        if (list[k].proj == SX_PROJ_ALL)
            printf("all");
        else if (list[k].proj == SX_PROJ_KEYS)
            printf("keys");
        else
            print_list(list[k].proj_attrs, list[k].nproj);
        printf("\t%s\n", list[k].ready ? "ready" : "building");
    }
    sx_index_list_free(list, n);
    return CLI_OK;
}

int cli_index(cli_ctx *ctx)
{
    const char *on = NULL, *project = NULL, *pos[4];
    cli_opt opts[] = { { "--on", true, &on }, { "--project", true, &project }, { NULL, 0, NULL } };
    int npos, r = cli_parse(ctx, opts, pos, 4, &npos, USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos < 1)
        return cli_usage_error(USAGE, "expected create, drop or list");
    if (strcmp(pos[0], "create") == 0) {
        if (npos != 3)
            return cli_usage_error(USAGE, "index create needs TABLE and INDEX");
        if (!on)
            return cli_usage_error(USAGE, "--on ATTR[,ATTR...] is required");
        return index_create(ctx, pos[1], pos[2], on, project);
    }
    if (on || project)
        return cli_usage_error(USAGE, "--on and --project go with index create");
    if (strcmp(pos[0], "drop") == 0) {
        if (npos != 3)
            return cli_usage_error(USAGE, "index drop needs TABLE and INDEX");
        if ((r = cli_connect(ctx)))
            return r;
        int rc = sx_index_drop(ctx->client, pos[1], pos[2]);
        return rc ? cli_fail(ctx, rc) : CLI_OK;
    }
    if (strcmp(pos[0], "list") == 0) {
        if (npos != 2)
            return cli_usage_error(USAGE, "index list needs TABLE");
        return index_list(ctx, pos[1]);
    }
    return cli_usage_error(USAGE, "unknown index command '%s'", pos[0]);
}
