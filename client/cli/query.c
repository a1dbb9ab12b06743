/*
 * query.c — `shardex query` (an index or the primary key, following
 * continuation tokens) and `shardex scan`.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const char *QUERY_USAGE =
    "usage: shardex query TABLE INDEX [--eq 'JSON-ARRAY'] [--from 'JSON' --to 'JSON' | --prefix STRING]\n"
    "             [--limit N] [--desc] [--attrs A,B,...] [--consistency eventual|verified|strong]\n"
    "             [--explain]\n"
    "       shardex query TABLE primary --eq '[PK]' [--from 'JSON' --to 'JSON' | --prefix STRING]\n"
    "             [--limit N] [--desc]\n"
    "  Prints matching items as JSON lines in index order: equality on the first\n"
    "  indexed attributes, then a range (both ends inclusive) or a string prefix on\n"
    "  the next. Without --limit every match is printed. --attrs prints the keys and\n"
    "  the listed attributes only. --explain reports to stderr what the query touched.\n";

static const char *SCAN_USAGE =
    "usage: shardex scan TABLE [--where 'JSON-OBJECT']\n"
    "  Prints every item (equal to all attributes of --where) as JSON lines.\n";

/* Explain figures summed over pages. */
typedef struct explain_acc {
    uint64_t ip[64], fp[256];
    size_t nip, nfp;
    uint64_t entries, stale, pages;
    int covering;
} explain_acc;

static void add_ids(uint64_t *set, size_t *n, size_t max, const uint64_t *v, size_t nv)
{
    for (size_t k = 0; k < nv; k++) {
        size_t j = 0;
        while (j < *n && set[j] != v[k])
            j++;
        if (j == *n && *n < max)
            set[(*n)++] = v[k];
    }
}

static void explain_add(explain_acc *a, const sx_result *r)
{
    sx_explain e;
    sx_result_explain(r, &e);
    add_ids(a->ip, &a->nip, 64, e.index_parts, e.nindex_parts);
    add_ids(a->fp, &a->nfp, 256, e.fact_parts, e.nfact_parts);
    a->entries += e.entries;
    a->stale += e.stale;
    a->covering = a->pages == 0 ? e.covering : (a->covering && e.covering);
    a->pages++;
}

static void print_ids(const char *what, const uint64_t *v, size_t n)
{
    fprintf(stderr, "  %s:", what);
    if (n == 0)
        fprintf(stderr, " none");
    for (size_t k = 0; k < n; k++)
        fprintf(stderr, " %" PRIu64, v[k]);
    fputc('\n', stderr);
}

static void explain_print(const char *index, const explain_acc *a)
{
    fprintf(stderr, "explain: index %s\n", index);
    print_ids("index partitions", a->ip, a->nip);
    print_ids("fact partitions", a->fp, a->nfp);
    fprintf(stderr, "  entries read: %" PRIu64 "\n", a->entries);
    fprintf(stderr, "  stale hits dropped: %" PRIu64 "\n", a->stale);
    fprintf(stderr, "  covering: %s\n", a->covering ? "yes" : "no");
    fprintf(stderr, "  pages: %" PRIu64 "\n", a->pages);
}

/* Query arguments after parsing. */
typedef struct qargs {
    const char *eq, *from, *to, *prefix, *limit, *desc, *attrs, *cons, *explain;
} qargs;

/* JSON inputs turned into values; everything here is freed by qvals_free. */
typedef struct qvals {
    json_t *eqj, *fromj, *toj;
    sx_value *eq, from, to;
    void **keep;
    size_t neq, nkeep;
    char **attrs;
    size_t nattrs;
} qvals;

static void qvals_free(qvals *v)
{
    for (size_t k = 0; k < v->nkeep; k++)
        free(v->keep[k]);
    free(v->keep);
    free(v->eq);
    cli_split_free(v->attrs, v->nattrs);
    json_decref(v->eqj);
    json_decref(v->fromj);
    json_decref(v->toj);
}

/* Parses one JSON scalar option into *v. */
static int scalar_opt(qvals *qv, const char *opt, const char *text, json_t **j, sx_value *v)
{
    char err[256];
    void *keep;
    *j = cli_json_parse(text, err, sizeof err);
    if (!*j || cli_json_to_scalar(*j, v, &keep, err, sizeof err))
        return cli_usage_error(QUERY_USAGE, "%s: %s", opt, err);
    qv->keep[qv->nkeep++] = keep;
    return CLI_OK;
}

static int qvals_build(const qargs *a, qvals *qv, sx_query_opts *o)
{
    char err[256];
    int r;
    if (a->eq) {
        qv->eqj = cli_json_parse(a->eq, err, sizeof err);
        if (!qv->eqj)
            return cli_usage_error(QUERY_USAGE, "--eq: %s", err);
        if (!json_is_array(qv->eqj))
            return cli_usage_error(QUERY_USAGE, "--eq must be a JSON array");
        qv->neq = json_array_size(qv->eqj);
    }
    qv->eq = calloc(qv->neq + 1, sizeof *qv->eq);
    qv->keep = calloc(qv->neq + 2, sizeof *qv->keep);
    if (!qv->eq || !qv->keep)
        return cli_error("out of memory");
    for (size_t k = 0; k < qv->neq; k++) {
        void *keep;
        if (cli_json_to_scalar(json_array_get(qv->eqj, k), &qv->eq[k], &keep, err, sizeof err))
            return cli_usage_error(QUERY_USAGE, "--eq value %zu: %s", k + 1, err);
        qv->keep[qv->nkeep++] = keep;
    }
    o->eq = qv->eq;
    o->neq = qv->neq;
    if (a->from && (r = scalar_opt(qv, "--from", a->from, &qv->fromj, &qv->from)))
        return r;
    if (a->to && (r = scalar_opt(qv, "--to", a->to, &qv->toj, &qv->to)))
        return r;
    o->from = a->from ? &qv->from : NULL;
    o->to = a->to ? &qv->to : NULL;
    o->prefix = a->prefix;
    if (a->attrs) {
        if (cli_split(a->attrs, &qv->attrs, &qv->nattrs))
            return cli_usage_error(QUERY_USAGE, "bad --attrs list '%s'", a->attrs);
        o->attrs = (const char *const *)qv->attrs;
        o->nattrs = qv->nattrs;
    }
    return CLI_OK;
}

static int qargs_check(const qargs *a, sx_query_opts *o, uint64_t *limit)
{
    if (a->prefix && (a->from || a->to))
        return cli_usage_error(QUERY_USAGE, "--prefix cannot be combined with --from/--to");
    *limit = 0;
    if (a->limit) {
        char *end;
        unsigned long long n = strtoull(a->limit, &end, 10);
        if (!*a->limit || *end || a->limit[0] == '-')
            return cli_usage_error(QUERY_USAGE, "--limit needs a non-negative integer");
        *limit = n;
    }
    o->desc = a->desc != NULL;
    if (!a->cons || strcmp(a->cons, "verified") == 0)
        o->consistency = SX_VERIFIED;
    else if (strcmp(a->cons, "eventual") == 0)
        o->consistency = SX_EVENTUAL;
    else if (strcmp(a->cons, "strong") == 0)
        o->consistency = SX_STRONG;
    else
        return cli_usage_error(QUERY_USAGE, "--consistency is eventual, verified or strong");
    return CLI_OK;
}

/* Runs pages until the limit is reached or no token is left. */
static int query_run(cli_ctx *ctx, const char *table, const char *index, sx_query_opts *o,
                     uint64_t limit, bool explain)
{
    explain_acc acc = { 0 };
    uint64_t got = 0;
    char *token = NULL;
    int r = CLI_OK;
    for (;;) {
        sx_result *res = NULL;
        o->limit = limit ? limit - got : 0;
        o->token = token;
        int rc = sx_query(ctx->client, table, index, o, &res);
        if (rc) {
            r = cli_fail(ctx, rc);
            break;
        }
        explain_add(&acc, res);
        for (size_t k = 0; k < sx_result_count(res) && (!limit || got < limit); k++) {
            if ((r = cli_print_item(sx_result_item(res, k))))
                break;
            got++;
        }
        free(token);
        token = NULL;
        const char *t = sx_result_token(res);
        if (t && !r && (!limit || got < limit) && !(token = strdup(t)))
            r = cli_error("out of memory");
        sx_result_free(res);
        if (r || !token)
            break;
    }
    free(token);
    if (explain && acc.pages)
        explain_print(index, &acc);
    return r;
}

int cli_query(cli_ctx *ctx)
{
    qargs a = { 0 };
    const char *pos[2];
    cli_opt opts[] = { { "--eq", true, &a.eq },
                       { "--from", true, &a.from },
                       { "--to", true, &a.to },
                       { "--prefix", true, &a.prefix },
                       { "--limit", true, &a.limit },
                       { "--desc", false, &a.desc },
                       { "--attrs", true, &a.attrs },
                       { "--consistency", true, &a.cons },
                       { "--explain", false, &a.explain },
                       { NULL, 0, NULL } };
    int npos, r = cli_parse(ctx, opts, pos, 2, &npos, QUERY_USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos != 2)
        return cli_usage_error(QUERY_USAGE, "expected TABLE and INDEX");
    sx_query_opts o = { 0 };
    qvals qv = { 0 };
    uint64_t limit = 0;
    if (!(r = qargs_check(&a, &o, &limit)) && !(r = qvals_build(&a, &qv, &o)) &&
        !(r = cli_connect(ctx)) && !(a.limit && limit == 0))
        r = query_run(ctx, pos[0], pos[1], &o, limit, a.explain != NULL);
    qvals_free(&qv);
    return r;
}

int cli_scan(cli_ctx *ctx)
{
    const char *where = NULL, *pos[1];
    cli_opt opts[] = { { "--where", true, &where }, { NULL, 0, NULL } };
    char err[256];
    int npos, r = cli_parse(ctx, opts, pos, 1, &npos, SCAN_USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos != 1)
        return cli_usage_error(SCAN_USAGE, "expected TABLE");
    sx_item *w = NULL;
    if (where) {
        json_t *j = cli_json_parse(where, err, sizeof err);
        int rc = j ? cli_json_to_item(j, &w, err, sizeof err) : SX_EINVAL;
        json_decref(j);
        if (rc)
            return cli_usage_error(SCAN_USAGE, "--where: %s", err);
    }
    if ((r = cli_connect(ctx))) {
        sx_item_free(w);
        return r;
    }
    char *token = NULL;
    for (;;) {
        sx_result *res = NULL;
        int rc = sx_scan(ctx->client, pos[0], w, 0, token, &res);
        free(token);
        token = NULL;
        if (rc) {
            r = cli_fail(ctx, rc);
            break;
        }
        for (size_t k = 0; k < sx_result_count(res) && !r; k++)
            r = cli_print_item(sx_result_item(res, k));
        const char *t = sx_result_token(res);
        if (t && !r && !(token = strdup(t)))
            r = cli_error("out of memory");
        sx_result_free(res);
        if (r || !token)
            break;
    }
    free(token);
    sx_item_free(w);
    return r;
}
