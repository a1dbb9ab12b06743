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
 *
 *   failover_test ROUTERS --stall PID
 *
 * A router that is connected but stalled (PID, the first of ROUTERS,
 * stopped with SIGSTOP) holds a put: the put times out there and is sent
 * again to the next router, which applies it; the caller's next put goes
 * there too. Once PID continues, the put it held reaches its storage node
 * past its deadline and is refused (the node's "writes_past_deadline"
 * grows), so it does not undo the caller's later put. Exits 0 when all of
 * that holds.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shardex.h"

/* Puts {"id": 9999, "v": v}. */
static int put_v(sx_client *c, int64_t v)
{
    sx_item *it = sx_item_new();
    int rc = !it ? SX_ENOMEM : sx_item_set_int(it, "id", 9999);

    if (!rc)
        rc = sx_item_set_int(it, "v", v);
    if (!rc)
        rc = sx_put(c, "fo", it, NULL);
    sx_item_free(it);
    return rc;
}

/* Reads v of id 9999 into *v. */
static int get_v(sx_client *c, int64_t *v)
{
    sx_item *k = sx_item_new(), *got = NULL;
    int rc = !k ? SX_ENOMEM : sx_item_set_int(k, "id", 9999);

    if (!rc)
        rc = sx_get(c, "fo", k, &got);
    if (!rc)
        rc = sx_item_get_int(got, "v", v);
    sx_item_free(got);
    sx_item_free(k);
    return rc;
}

/*
 * 1 when every thread of pid is in the stopped state ('T' in
 * /proc/PID/task/TID/stat), 0 while one still runs, -1 when it cannot tell.
 * kill(SIGSTOP) returns before the threads stop: one running on another
 * core can still take a request and forward it.
 */
static int all_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int rc = 1;
    struct dirent *e;
    while (rc == 1 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char stat[512], file[128];
        snprintf(file, sizeof file, "%s/%.32s/stat", path, e->d_name);
        FILE *f = fopen(file, "r");
        if (!f)
            continue; /* the thread has exited */
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *close = strrchr(stat, ')');
        if (!close || close[1] != ' ')
            rc = -1;
        else if (close[2] != 'T' && close[2] != 't')
            rc = 0;
    }
    closedir(d);
    return rc;
}

#define STALL_CHECK(cond, ...)                                      \
    do {                                                            \
        if (!(cond)) {                                              \
            fprintf(stderr, "failover_test --stall: " __VA_ARGS__); \
            fprintf(stderr, "\n");                                  \
            kill(pid, SIGCONT);                                     \
            return 1;                                               \
        }                                                           \
    } while (0)

/* The storage nodes' writes refused past their deadline, summed from the
 * status's "writes_past_deadline"; -1 when the status cannot be read. */
static long long past_deadline(sx_client *c)
{
    char *json = NULL;
    long long sum = 0;
    const char *key = "\"writes_past_deadline\":";

    if (sx_status(c, &json) != SX_OK)
        return -1;
    for (const char *p = strstr(json, key); p; p = strstr(p + 1, key))
        sum += strtoll(p + strlen(key), NULL, 10);
    sx_free(json);
    return sum;
}

static int stall(sx_client *c, pid_t pid)
{
    int64_t v = 0;
    int rc;

    rc = put_v(c, 1);
    STALL_CHECK(rc == SX_OK, "first put: %s (%s)", sx_strerror(rc), sx_client_errmsg(c));
    long long late0 = past_deadline(c);
    STALL_CHECK(late0 >= 0, "status: %s", sx_client_errmsg(c));
    STALL_CHECK(kill(pid, SIGSTOP) == 0, "cannot stop %d", (int)pid);
    int stopped = 0;
    for (int i = 0; i < 2000 && (stopped = all_stopped(pid)) == 0; i++) {
        struct timespec ts = { 0, 1000 * 1000 };
        nanosleep(&ts, NULL); /* poll the condition */
    }
    STALL_CHECK(stopped == 1, "router %d did not stop (%d)", (int)pid, stopped);
    sx_client_set_timeout(c, 2000); /* per attempt: r1's, then r2's */
    rc = put_v(c, 2);
    sx_client_set_timeout(c, 10000);
    STALL_CHECK(rc == SX_OK,
                "a put to the stalled router was not sent again to the "
                "next one: %s (%s)",
                sx_strerror(rc), sx_client_errmsg(c));
    rc = put_v(c, 3);
    STALL_CHECK(rc == SX_OK, "the next put: %s (%s)", sx_strerror(rc), sx_client_errmsg(c));
    rc = get_v(c, &v);
    STALL_CHECK(rc == SX_OK && v == 3, "a get during the stall: %s, v=%" PRId64 " (%s)",
                sx_strerror(rc), v, sx_client_errmsg(c));
    STALL_CHECK(kill(pid, SIGCONT) == 0, "cannot continue %d", (int)pid);
    long long late = late0;
    for (int i = 0; i < 200 && late == late0; i++) { /* the held put is refused */
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL); /* poll the condition */
        late = past_deadline(c);
        STALL_CHECK(late >= 0, "status after the stall: %s", sx_client_errmsg(c));
    }
    STALL_CHECK(late > late0,
                "no storage node refused the held put past its deadline "
                "(writes_past_deadline %lld)",
                late);
    rc = get_v(c, &v);
    STALL_CHECK(rc == SX_OK && v == 3,
                "after the held put: %s, v=%" PRId64 " (%s): it "
                "undid the later put",
                sx_strerror(rc), v, sx_client_errmsg(c));
    printf("failover_test --stall: the put timed out on the stalled router and went to "
           "the next; the one held was refused past its deadline (%lld)\n",
           late - late0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[2], "--stall") == 0) {
        sx_client *c = NULL;
        int rc = sx_client_open(argv[1], &c);
        if (rc) {
            fprintf(stderr, "failover_test: open: %s\n", sx_strerror(rc));
            return 1;
        }
        rc = sx_table_create(c, "fo", "id", NULL);
        if (rc && rc != SX_EEXIST) {
            fprintf(stderr, "failover_test: table create: %s\n", sx_client_errmsg(c));
            sx_client_close(c);
            return 1;
        }
        rc = stall(c, (pid_t)atol(argv[3]));
        sx_client_close(c);
        return rc;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: failover_test ROUTERS STOPFILE | ROUTERS --stall PID\n");
        return 2;
    }
    sx_client *c = NULL;
    int rc = sx_client_open(argv[1], &c);
    if (rc) {
        fprintf(stderr, "failover_test: open: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_client_set_timeout(c, 2000); /* a dead router costs at most this */
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
