/*
 * failover_test.c — router failover through the public client API.
 *
 *   failover_test ROUTERS STOPFILE
 *
 * Opens one client on a comma-separated router list and writes until
 * STOPFILE exists: put {"id": i % 500, "v": i}, then get it back and check
 * v (read-your-writes through whichever router answers). Prints
 * "progress N" after every 20 successful rounds so a driver script can kill
 * and restart routers meanwhile (run_failover_test.sh). Every call must
 * succeed: the library retries on the next router when one fails. Exits 0
 * when no call failed, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "shardex.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: failover_test ROUTERS STOPFILE\n");
        return 2;
    }
    sx_client *c = NULL;
    int rc = sx_client_open(argv[1], &c);
    if (rc) {
        fprintf(stderr, "failover_test: open: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_client_set_timeout(c, 2000);   /* a dead router costs at most this */
    rc = sx_table_create(c, "fo", "id", NULL);
    if (rc && rc != SX_EEXIST) {
        fprintf(stderr, "failover_test: table create: %s\n", sx_client_errmsg(c));
        return 1;
    }
    long failures = 0;
    int64_t i = 0;
    for (; access(argv[2], F_OK) != 0; i++) {
        sx_item *it = sx_item_new(), *got = NULL;
        if (!it || sx_item_set_int(it, "id", i % 500) || sx_item_set_int(it, "v", i))
            return 1;
        rc = sx_put(c, "fo", it, NULL);
        if (rc) {
            fprintf(stderr, "failover_test: put %" PRId64 ": %s (%s)\n", i, sx_strerror(rc),
                    sx_client_errmsg(c));
            failures++;
        } else if ((rc = sx_get(c, "fo", it, &got)) != SX_OK) {
            fprintf(stderr, "failover_test: get %" PRId64 ": %s (%s)\n", i, sx_strerror(rc),
                    sx_client_errmsg(c));
            failures++;
        } else {
            int64_t v = -1;
            if (sx_item_get_int(got, "v", &v) || v != i) {
                fprintf(stderr, "failover_test: get %" PRId64 " returned v=%" PRId64 "\n", i, v);
                failures++;
            }
        }
        sx_item_free(got);
        sx_item_free(it);
        if (!rc && i % 20 == 0) {
            printf("progress %" PRId64 "\n", i);
            fflush(stdout);
        }
    }
    printf("failover_test: %" PRId64 " rounds, %ld failures\n", i, failures);
    sx_client_close(c);
    return failures ? 1 : 0;
}
