/*
 * catclient_test.c — calls to the catalog's leader among its replicas
 * (proto/cluster/catclient.c), against three in-process link servers that
 * play the replicas: a follower answers SX_ENOTLEADER naming the leader (or
 * no one), the leader answers. The call goes straight where a hint points,
 * remembers the leader for the next call, moves on past a replica that
 * names no one or that stopped, gives up at its deadline with
 * SX_ENOTLEADER when no replica leads, and with one replica passes any
 * reply (an error reply too) back as it is.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catclient.h"
#include "check.h"
#include "msg.h"
#include "net.h"
#include "sx_errors.h"

enum { LEADER = 1, FOLLOWER = 2 };

typedef struct replica {
    int mode;
    uint64_t hint; /* a follower's: the leader's node id, 0 none */
    int calls;
    net_server *srv;
    char url[64];
} replica;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static replica reps[3];

static void handle(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    replica *r = arg;
    (void)req;
    (void)n;
    pthread_mutex_lock(&mu);
    r->calls++;
    int mode = r->mode;
    uint64_t hint = r->hint;
    pthread_mutex_unlock(&mu);
    if (mode == FOLLOWER) {
        msg_encode_err_hint(MSG_CATALOG, SX_ENOTLEADER, "not the leader", hint, out);
        return;
    }
    msg_CATALOG_rep rep;
    memset(&rep, 0, sizeof rep);
    rep.version = 7;
    rep.catalog.p = (const uint8_t *)"\xc0";
    rep.catalog.n = 1;
    msg_encode_rep(MSG_CATALOG, &rep, out);
}

static void set(int i, int mode, uint64_t hint)
{
    pthread_mutex_lock(&mu);
    reps[i].mode = mode;
    reps[i].hint = hint;
    reps[i].calls = 0;
    pthread_mutex_unlock(&mu);
}

static int calls(int i)
{
    pthread_mutex_lock(&mu);
    int c = reps[i].calls;
    pthread_mutex_unlock(&mu);
    return c;
}

/* One CATALOG call; returns its code, and the reply's version (0: none). */
static int call(catclient *c, int timeout_ms, uint64_t *version, int *reply_err)
{
    msg_CATALOG_req q = { .since = 0 };
    mp_buf b;
    uint8_t *frame = NULL, *resp = NULL;
    size_t fn = 0, rn = 0;
    mp_buf_init(&b);
    msg_encode_req(MSG_CATALOG, &q, &b);
    mp_buf_take(&b, &frame, &fn);
    mp_buf_free(&b);
    int rc = catclient_call(c, frame, fn, timeout_ms, &resp, &rn);
    free(frame);
    *version = 0;
    *reply_err = 0;
    if (rc == 0) {
        msg_CATALOG_rep rep;
        *reply_err = msg_decode_rep(MSG_CATALOG, resp, rn, &rep, NULL, 0);
        if (*reply_err == 0)
            *version = rep.version;
        msg_free_rep(MSG_CATALOG, &rep);
        free(resp);
    }
    return rc;
}

static unsigned long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
}

int main(void)
{
    net_server_opts so = { .workers = 2 };
    cfg_node nodes[3];
    cfg_cluster cfg;
    memset(nodes, 0, sizeof nodes);
    memset(&cfg, 0, sizeof cfg);
    for (int i = 0; i < 3; i++) {
        int rc = -1;
        for (int k = 0; k < 20 && rc != 0; k++) {
            snprintf(reps[i].url, sizeof reps[i].url, "tcp://127.0.0.1:%d",
                     22000 + (getpid() * 13 + i * 977 + k * 197) % 28000);
            rc = net_server_open_link(reps[i].url, &so, handle, &reps[i], &reps[i].srv);
        }
        CHECK_RC(rc, 0);
        if (rc != 0)
            return CHECK_DONE();
        nodes[i].name = i == 0 ? "s1" : i == 1 ? "s2" : "s3";
        nodes[i].url = reps[i].url;
        nodes[i].role = SX_ROLE_STORAGE;
        nodes[i].id = i + 1;
        nodes[i].host = -1;
        cfg.catalog[i] = i;
    }
    cfg.nnodes = 3;
    cfg.nodes = nodes;
    cfg.ncatalog = 3;
    cfg.catalog_node = 0;
    catclient *c = NULL;
    CHECK_RC(catclient_new(&cfg, &c), 0);
    if (c == NULL)
        return CHECK_DONE();
    uint64_t v;
    int re;

    /* s1 and s2 follow and name s3: the call goes from s1 straight to s3 */
    set(0, FOLLOWER, 3);
    set(1, FOLLOWER, 3);
    set(2, LEADER, 0);
    CHECK_RC(call(c, 5000, &v, &re), 0);
    CHECK(re == 0 && v == 7);
    CHECK_INT(calls(0), 1);
    CHECK_INT(calls(1), 0);
    CHECK_INT(calls(2), 1);
    CHECK_INT(catclient_leader(c), 2);
    /* the next call goes to s3 at once */
    CHECK_RC(call(c, 5000, &v, &re), 0);
    CHECK_INT(calls(0), 1);
    CHECK_INT(calls(2), 2);

    /* leadership moved to s1; s3 knows no leader yet: on to the next */
    set(0, LEADER, 0);
    set(1, FOLLOWER, 1);
    set(2, FOLLOWER, 0);
    CHECK_RC(call(c, 5000, &v, &re), 0);
    CHECK(re == 0 && v == 7);
    CHECK_INT(catclient_leader(c), 0);
    CHECK_INT(calls(2), 1);
    CHECK_INT(calls(0), 1);

    /* nobody leads: the call gives up at its deadline, SX_ENOTLEADER */
    set(0, FOLLOWER, 0);
    set(1, FOLLOWER, 0);
    set(2, FOLLOWER, 0);
    unsigned long long t0 = now_ms();
    CHECK_RC(call(c, 400, &v, &re), SX_ENOTLEADER);
    unsigned long long took = now_ms() - t0;
    CHECKF(took >= 350 && took < 3000, "gave up after %llu ms", took);
    CHECK(calls(0) >= 1 && calls(1) >= 1 && calls(2) >= 1);

    /* the replica it knows as leader stops: the call moves past it */
    set(0, FOLLOWER, 2);
    set(1, LEADER, 0);
    set(2, FOLLOWER, 2);
    CHECK_RC(call(c, 5000, &v, &re), 0);
    CHECK_INT(catclient_leader(c), 1);
    net_server_stop(reps[1].srv);
    reps[1].srv = NULL;
    set(0, LEADER, 0);
    set(2, FOLLOWER, 1); /* stale: names the stopped one */
    CHECK_RC(call(c, 8000, &v, &re), 0);
    CHECK(re == 0 && v == 7);
    CHECK_INT(catclient_leader(c), 0);
    catclient_free(c);

    /* one replica: any reply comes back as it is, an error reply too */
    cfg_cluster one = cfg;
    one.ncatalog = 1;
    one.catalog[0] = 2;
    one.catalog_node = 2;
    CHECK_RC(catclient_new(&one, &c), 0);
    set(2, LEADER, 0);
    CHECK_RC(call(c, 5000, &v, &re), 0);
    CHECK_INT(v, 7);
    set(2, FOLLOWER, 0);
    CHECK_RC(call(c, 300, &v, &re), SX_ENOTLEADER);
    catclient_free(c);

    for (int i = 0; i < 3; i++)
        if (reps[i].srv)
            net_server_stop(reps[i].srv);
    return CHECK_DONE();
}
