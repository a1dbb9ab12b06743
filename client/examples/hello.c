/*
 * hello.c — the smallest libshardex program: create a table and an index,
 * put an item, read it back, query the index.
 *
 *   cc hello.c $(pkg-config --cflags --libs shardex) -o hello
 *   ./hello tcp://127.0.0.1:7100
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include <shardex.h>

/* Prints the error of call `what` and returns 1. */
static int fail(sx_client *c, const char *what, int rc)
{
    fprintf(stderr, "%s: %s (%s)\n", what, sx_strerror(rc), sx_client_errmsg(c));
    return 1;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "tcp://127.0.0.1:7100";
    sx_client *c = NULL;
    sx_item *it = NULL, *got = NULL;
    sx_result *res = NULL;
    int rc, status = 1;

    if ((rc = sx_client_open(url, &c)))
        return fail(c, "open", rc);

    /* A table keyed by "id"; an index on town, projecting whole items.
     * Both calls fail with SX_EEXIST on a second run, which is fine. */
    rc = sx_table_create(c, "people", "id", NULL);
    if (rc && rc != SX_EEXIST) {
        fail(c, "table create", rc);
        goto out;
    }
    const char *on[] = { "town" };
    rc = sx_index_create(c, "people", "by_town", on, 1, SX_PROJ_ALL, NULL, 0);
    if (rc && rc != SX_EEXIST) {
        fail(c, "index create", rc);
        goto out;
    }

    /* Build and store an item; the item stays ours. */
    it = sx_item_new();
    if (!it)
        goto out;
    sx_item_set_int(it, "id", 1);
    sx_item_set_str(it, "name", "Ada");
    sx_item_set_str(it, "town", "Redmond");
    if ((rc = sx_put(c, "people", it, NULL))) {
        fail(c, "put", rc);
        goto out;
    }

    /* Read it back by key (extra attributes of the key item are ignored). */
    if ((rc = sx_get(c, "people", it, &got))) {
        fail(c, "get", rc);
        goto out;
    }
    const char *name;
    if (sx_item_get_str(got, "name", &name, NULL) == SX_OK)
        printf("got: %s\n", name);

    /* Everyone in Redmond, strongly consistent (sees the put above). The
     * index may still be building right after creation: retry then. */
    sx_value town = sx_val_str("Redmond");
    sx_query_opts q = { .eq = &town, .neq = 1, .consistency = SX_STRONG };
    for (int tries = 0; tries < 100; tries++) {
        rc = sx_query(c, "people", "by_town", &q, &res);
        if (rc != SX_ENOTREADY)
            break;
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (rc) {
        fail(c, "query", rc);
        goto out;
    }
    for (size_t i = 0; i < sx_result_count(res); i++) {
        int64_t id;
        if (sx_item_get_int(sx_result_item(res, i), "id", &id) == SX_OK)
            printf("in Redmond: id %lld\n", (long long)id);
    }
    status = 0;
out:
    sx_result_free(res);
    sx_item_free(got);
    sx_item_free(it);
    sx_client_close(c);
    return status;
}
