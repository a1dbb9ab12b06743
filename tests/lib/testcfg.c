/*
 * testcfg.c — the cluster config a unit test runs under (testcfg.h).
 */
#include "testcfg.h"
#include <stdio.h>
#include "config.h"

static const char *const storage_parts[2] = {
    "{\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"ffffffffffffffff\"}",
    "{\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"7fffffffffffffff\"},\n"
    "   {\"id\": 2, \"lo\": \"8000000000000000\", \"hi\": \"ffffffffffffffff\"}",
};

static const char *const index_parts[2] = {
    "{\"id\": 101, \"lo\": null, \"hi\": null}",
    "{\"id\": 101, \"lo\": null, \"hi\": [\"M\"]},\n"
    "   {\"id\": 102, \"lo\": [\"M\"], \"hi\": null}",
};

/* Writes the config to path; 0 or -1 (said on stderr). */
static int write_config(const char *path, const char *dir, const testcfg *c)
{
    char s1[4200], i1[4200];
    FILE *f;
    int n, closed;

    if (c->nstorage < 1 || c->nstorage > 2 || c->nindex < 1 || c->nindex > 2) {
        fprintf(stderr, "%s: config: %d storage and %d index partitions: 1 or 2 each\n", c->cluster,
                c->nstorage, c->nindex);
        return -1;
    }
    if (c->ipc) {
        snprintf(s1, sizeof(s1), "ipc://%s/s1.sock", dir);
        snprintf(i1, sizeof(i1), "ipc://%s/i1.sock", dir);
    } else {
        snprintf(s1, sizeof(s1), "tcp://127.0.0.1:2");
        snprintf(i1, sizeof(i1), "tcp://127.0.0.1:3");
    }
    if ((f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "%s: scratch dir unusable: %s\n", c->cluster, dir);
        return -1;
    }
    n = fprintf(f,
                "{\"cluster\": \"%s\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
                " \"token_key\": \"%s\",\n"
                " \"catalog_node\": \"s1\",\n"
                " \"routers\": [{\"name\": \"r1\", \"url\": \"%s\"}],\n"
                " \"storage\": [{\"name\": \"s1\", \"url\": \"%s\", \"partitions\": [\n"
                "   %s]}],\n"
                " \"index\": [{\"name\": \"i1\", \"url\": \"%s\", \"partitions\": [\n"
                "   %s]}]}\n",
                c->cluster,
                c->token_key != NULL
                    ? c->token_key
                    : "000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f",
                c->router_url != NULL ? c->router_url : "tcp://127.0.0.1:1", s1,
                storage_parts[c->nstorage - 1], i1, index_parts[c->nindex - 1]);
    closed = fclose(f);
    if (n < 0 || closed != 0) {
        fprintf(stderr, "%s: could not write %s\n", c->cluster, path);
        return -1;
    }
    return 0;
}

struct cfg_cluster *testcfg_load(const char *dir, const testcfg *c)
{
    char path[4200], err[300];
    cfg_cluster *cfg = NULL;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path)) {
        fprintf(stderr, "%s: scratch dir unusable: %s\n", c->cluster, dir);
        return NULL;
    }
    if (write_config(path, dir, c) != 0)
        return NULL;
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: config: %s\n", c->cluster, err);
        return NULL;
    }
    return cfg;
}
