/*
 * catalog_cache_test.c — the catalog cache (proto/cluster/catalog_cache.c) against a
 * fake catalog node on a real link: a refresh called while an older fetch
 * is in flight ends with a catalog at least as new as the catalog node's
 * when the refresh began (the older fetch was answered from before a DDL
 * the caller may already have been told of), and callers at once share a
 * fetch instead of each sending their own.
 *
 * The fake node reads its version when a CATALOG arrives and, while the
 * gate is closed, holds its reply: the test decides what each fetch sees.
 * It ignores `since` (as a catalog node from before it did) until told to
 * honour it; then a poll while nothing changed is answered with a nil
 * catalog, which leaves the cache as it was, and a nil catalog the cache
 * did not ask for is refused.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "catalog.h"
#include "catalog_cache.h"
#include "check.h"
#include "config.h"
#include "msg.h"
#include "net.h"
#include "sx_errors.h"

#define WAIT_MS 10000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static uint64_t version = 1; /* the fake node's catalog: 2 adds table "t" */
static bool gate_open = true;
static unsigned arrived;    /* CATALOG requests received */
static int since_mode;      /* 0 ignore since, 1 honour it, 2 always nil */
static uint64_t last_since; /* the last request's since */

/* Answers CATALOG with the version current on arrival, once the gate opens. */
static void handle(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    cat_catalog *c = cat_new();
    msg_CATALOG_rep rep;
    mp_buf b;
    uint64_t v;

    msg_CATALOG_req rq;
    int mode;

    (void)arg;
    memset(&rq, 0, sizeof(rq));
    if (msg_decode_req(MSG_CATALOG, req, n, &rq) != 0) {
        msg_encode_err(MSG_CATALOG, SX_EPROTO, "malformed", out);
        cat_free(c);
        return;
    }
    msg_free_req(MSG_CATALOG, &rq);
    pthread_mutex_lock(&mu);
    v = version;
    mode = since_mode;
    last_since = rq.since;
    arrived++;
    pthread_cond_broadcast(&cv);
    while (!gate_open)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    mp_buf_init(&b);
    if (c == NULL || (v >= 2 && cat_create_table(c, "t", "id", NULL) != 0)) {
        msg_encode_err(MSG_CATALOG, SX_ENOMEM, "out of memory", out);
        cat_free(c);
        return;
    }
    c->version = v;
    memset(&rep, 0, sizeof(rep));
    if (cat_encode(c, &b) != 0 || b.oom) {
        msg_encode_err(MSG_CATALOG, SX_ENOMEM, "out of memory", out);
    } else {
        rep.version = v;
        if (mode == 0 || (mode == 1 && (rq.since == 0 || v >= rq.since)))
            rep.catalog = (mp_span){ (const uint8_t *)b.sb.data, b.sb.size };
        msg_encode_rep(MSG_CATALOG, &rep, out); /* else nil */
    }
    mp_buf_free(&b);
    cat_free(c);
}

/* The since of the last CATALOG the fake node received. */
static uint64_t got_since(void)
{
    uint64_t v;

    pthread_mutex_lock(&mu);
    v = last_since;
    pthread_mutex_unlock(&mu);
    return v;
}

static uint64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Waits (bounded) until the fake node has received `want` requests. */
static bool wait_arrived(unsigned want)
{
    uint64_t end = now_ms() + WAIT_MS;
    bool ok;

    pthread_mutex_lock(&mu);
    while (arrived < want && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    ok = arrived >= want;
    pthread_mutex_unlock(&mu);
    return ok;
}

/* Waits (bounded) until `want` callers wait for the fetch in flight. */
static bool wait_waiting(catcache *cc, unsigned want)
{
    uint64_t end = now_ms() + WAIT_MS;
    unsigned w = 0;

    for (;;) {
        catcache_counts(cc, NULL, &w);
        if (w >= want || now_ms() >= end)
            return w >= want;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL); /* poll the condition */
    }
}

static void set_gate(bool open)
{
    pthread_mutex_lock(&mu);
    gate_open = open;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

typedef struct caller {
    catcache *cc;
    int rc;
} caller;

static void *refresh_main(void *arg)
{
    caller *c = arg;

    c->rc = catcache_refresh(c->cc);
    return NULL;
}

int main(void)
{
    char url[64];
    net_server *srv = NULL;
    net_server_opts so = { .workers = 4 };
    cfg_node node = { .name = "cat", .role = 0, .url = url };
    cfg_cluster cfg;
    catcache *cc = NULL;
    const cat_catalog *cat = NULL;
    pthread_t th[3];
    caller a = { 0 }, b[2] = { { 0 }, { 0 } };
    uint64_t started = 0;
    int i, rc = -1;

    for (i = 0; i < 20 && rc != 0; i++) {
        snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 22000 + (getpid() * 13 + i * 197) % 28000);
        rc = net_server_open_link(url, &so, handle, NULL, &srv);
    }
    CHECK(rc == 0);
    if (rc != 0)
        return CHECK_DONE();
    memset(&cfg, 0, sizeof(cfg));
    cfg.nnodes = 1;
    cfg.nodes = &node;
    cfg.catalog_node = 0;
    CHECK(catcache_new(&cfg, &cc) == 0);
    if (cc == NULL)
        return CHECK_DONE();

    /* a fetch in flight (the router's refresher, say), answered as of v1 */
    set_gate(false);
    a.cc = cc;
    CHECK(pthread_create(&th[0], NULL, refresh_main, &a) == 0);
    CHECK(wait_arrived(1));
    /* then a DDL is acknowledged elsewhere (v2), and two callers refresh */
    pthread_mutex_lock(&mu);
    version = 2;
    pthread_mutex_unlock(&mu);
    for (i = 0; i < 2; i++) {
        b[i].cc = cc;
        CHECK(pthread_create(&th[1 + i], NULL, refresh_main, &b[i]) == 0);
    }
    CHECK(wait_waiting(cc, 2)); /* both wait for the fetch begun before them */
    set_gate(true);
    for (i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK(a.rc == 0 && b[0].rc == 0 && b[1].rc == 0);
    /* the refreshes saw what the node held when they began: v2, table t */
    CHECK(catcache_peek(cc, 2, &cat) == 0 && cat != NULL && cat_table_by_name(cat, "t", 1) != NULL);
    /* and they shared one fetch: the first, and one more for both */
    catcache_counts(cc, &started, NULL);
    CHECK(started == 2);
    printf("fetches: %llu (the one in flight, then one shared by two callers)\n",
           (unsigned long long)started);

    /* catcache_get of a version the node does not have yet: SX_ESTALECAT
     * after one fetch started on its behalf */
    CHECK(catcache_get(cc, 3, &cat) == SX_ESTALECAT);
    catcache_counts(cc, &started, NULL);
    CHECK(started == 3);

    /* polls ask for what is newer than the cache holds (since = 3); while
     * nothing changed the node answers nil and the cache keeps v2 */
    pthread_mutex_lock(&mu);
    since_mode = 1;
    pthread_mutex_unlock(&mu);
    CHECK(catcache_refresh(cc) == 0 && got_since() == 3);
    CHECK(catcache_peek(cc, 2, &cat) == 0 && cat->version == 2 &&
          cat_table_by_name(cat, "t", 1) != NULL);
    /* a change is fetched whole */
    pthread_mutex_lock(&mu);
    version = 3;
    pthread_mutex_unlock(&mu);
    CHECK(catcache_refresh(cc) == 0 && got_since() == 3);
    CHECK(catcache_peek(cc, 3, &cat) == 0 && cat->version == 3);
    /* a nil catalog for a version the cache asked for is a bad reply */
    pthread_mutex_lock(&mu);
    version = 4;
    since_mode = 2;
    pthread_mutex_unlock(&mu);
    CHECK(catcache_refresh(cc) == SX_EPROTO && got_since() == 4);
    CHECK(catcache_peek(cc, 3, &cat) == 0 && cat->version == 3);
    catcache_free(cc);
    net_server_stop(srv);
    return CHECK_DONE();
}
