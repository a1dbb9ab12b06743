/*
 * rawbench.c — shardex-rawbench: the limits of the parts on this machine,
 * measured the way shardex uses them. Prints one JSON object per figure
 * (same fields as shardex-bench).
 *
 *   shardex-rawbench nng --clients N [--duration S] [--warmup S] [--port P]
 *       one nng REQ/REP hop over TCP loopback: a child process serves REP
 *       with 16 worker contexts (net_server_start, as the daemons do) and
 *       echoes a 64-byte request; the client keeps N requests in flight on
 *       one REQ socket (one context and aio each).
 *   shardex-rawbench link --clients N [--duration S] [--warmup S] [--port P]
 *       the same hop over a link (proto/runtime/link.h), what shardex's daemons
 *       speak to each other: the child serves it with 16 workers
 *       (net_server_open_link), the client keeps N calls in flight on one
 *       link peer, each its own frame (no batch window).
 *   shardex-rawbench link-auth --clients N [...]
 *       the same hop over an authenticated link (a random link key, as a
 *       local-cluster has one: hellos, a tag on every frame).
 *   shardex-rawbench leveldb --dir DIR [--items N] [--duration S]
 *       put (unsynced), get (random keys, 1 reader), synced single put,
 *       synced batch of 100 puts; 130-byte values.
 *   shardex-rawbench leveldb-w6 --dir DIR [--items N]
 *       the engine's floor under W6 with two indexes built after the load:
 *       the leveldb writes and the scan that load-then-build makes, and
 *       nothing else (no network, no encoding, no sort), on the daemons'
 *       own leveldb settings (node/engine/ldb.c), one thread per node of the
 *       local cluster; see raw_w6.c.
 */
#include <leveldb/c.h>
#include <nng/nng.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>
#include "hash.h"
#include "hist.h"
#include "link_auth.h"
#include "net.h"
#include "raw_w6.h"

/* One figure as a JSON line; the latencies are null when h is empty (a
 * figure timed as a whole, not per operation). */
static void emit(const char *name, const char *sys, int clients, double ops, const hist *h)
{
    printf("{\"name\":\"%s\",\"system\":\"%s\",\"clients\":%d,\"ops_per_s\":%.1f,", name, sys,
           clients, ops);
    if (h->count == 0)
        printf("\"p50_us\":null,\"p99_us\":null,\"p999_us\":null}\n");
    else
        printf("\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f}\n", hist_quantile_us(h, 0.5),
               hist_quantile_us(h, 0.99), hist_quantile_us(h, 0.999));
    fflush(stdout);
}

/* ---- nng ---- */

static void echo(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    (void)arg;
    mp_put_bin(out, req, n);
}

typedef struct hop {
    nng_ctx ctx;
    nng_aio *aio;
    int phase;
    uint64_t t0;
    struct hopbench *hb;
} hop;

typedef struct hopbench {
    uint64_t t_measure, t_end, ops, errors;
    hist h;
    int active;
    pthread_mutex_t lock;
    pthread_cond_t idle;
} hopbench;

/* A round trip begun at t0 ended (ok or not): counts it when inside the
 * measured window; true when the caller should send the next one, else
 * the caller is done (the last one wakes run's wait). */
static bool hop_done(hopbench *hb, bool ok, uint64_t t0)
{
    uint64_t t = now_ns();

    if (ok && t0 >= hb->t_measure && t0 < hb->t_end) {
        hist_add(&hb->h, t - t0);
        __atomic_fetch_add(&hb->ops, 1, __ATOMIC_RELAXED);
    }
    if (ok && t < hb->t_end)
        return true;
    pthread_mutex_lock(&hb->lock);
    if (--hb->active == 0)
        pthread_cond_broadcast(&hb->idle);
    pthread_mutex_unlock(&hb->lock);
    return false;
}

/* Starts the window: warm-up, then duration seconds measured. */
static void hop_window(hopbench *hb, int clients, double duration, double warmup)
{
    uint64_t t0 = now_ns();

    hb->active = clients;
    hist_init(&hb->h);
    pthread_mutex_init(&hb->lock, NULL);
    pthread_cond_init(&hb->idle, NULL);
    hb->t_measure = t0 + (uint64_t)(warmup * 1e9);
    hb->t_end = hb->t_measure + (uint64_t)(duration * 1e9);
}

/* Waits until every client's last round trip ended. */
static void hop_wait(hopbench *hb)
{
    pthread_mutex_lock(&hb->lock);
    while (hb->active > 0)
        pthread_cond_wait(&hb->idle, &hb->lock);
    pthread_mutex_unlock(&hb->lock);
}

/* Forks the echo server of a hop on url (link: a link server, else REP);
 * returns its pid once it listens, or -1. */
static pid_t hop_server(const char *url, bool link)
{
    int pfd[2];
    if (pipe(pfd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        nng_socket s;
        net_server *srv;
        net_server_opts o = { .workers = 16 };
        close(pfd[0]);
        if (link ? net_server_open_link(url, &o, echo, NULL, &srv) != 0
                 : (net_listen(url, &s) || net_server_start(s, 16, echo, NULL, &srv)))
            _exit(1);
        if (write(pfd[1], "r", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char ready;
    bool up = pid > 0 && read(pfd[0], &ready, 1) == 1;
    close(pfd[0]);
    if (!up) {
        fprintf(stderr, "rawbench: %s server did not start on %s\n", link ? "link" : "nng", url);
        if (pid > 0)
            waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void hop_send(hop *x)
{
    nng_msg *m;
    uint8_t body[64] = { 0 };
    if (nng_msg_alloc(&m, 0) || nng_msg_append(m, body, sizeof body)) {
        __atomic_fetch_add(&x->hb->errors, 1, __ATOMIC_RELAXED);
        (void)hop_done(x->hb, false, now_ns()); /* this client stops */
        return;
    }
    x->phase = 0;
    x->t0 = now_ns();
    nng_aio_set_msg(x->aio, m);
    nng_ctx_send(x->ctx, x->aio);
}

static void hop_cb(void *arg)
{
    hop *x = arg;
    hopbench *hb = x->hb;
    int rv = nng_aio_result(x->aio);
    if (rv == 0 && x->phase == 0) {
        x->phase = 1;
        nng_ctx_recv(x->ctx, x->aio);
        return;
    }
    if (rv != 0) {
        if (x->phase == 0)
            nng_msg_free(nng_aio_get_msg(x->aio));
        __atomic_fetch_add(&hb->errors, 1, __ATOMIC_RELAXED);
    } else {
        nng_msg_free(nng_aio_get_msg(x->aio));
    }
    if (hop_done(hb, rv == 0, x->t0))
        hop_send(x);
}

/* Gives up a hop run whose server child is up: stops the child (it
 * would wait in pause() for good) and says so; returns 1. */
static int hop_fail(pid_t pid, const char *what)
{
    fprintf(stderr, "rawbench: %s failed\n", what);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return 1;
}

static int run_nng(int clients, double duration, double warmup, int port)
{
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    pid_t pid = hop_server(url, false);
    if (pid < 0)
        return 1;
    nng_socket s;
    if (net_dial(url, &s))
        return hop_fail(pid, "dial");
    hopbench hb = { 0 };
    hop *x = calloc((size_t)clients, sizeof *x);
    if (!x)
        return hop_fail(pid, "allocation");
    hop_window(&hb, clients, duration, warmup);
    for (int k = 0; k < clients; k++) {
        x[k].hb = &hb;
        if (nng_ctx_open(&x[k].ctx, s) || nng_aio_alloc(&x[k].aio, hop_cb, &x[k]))
            return hop_fail(pid, "context setup");
        nng_aio_set_timeout(x[k].aio, 10000);
        hop_send(&x[k]);
    }
    hop_wait(&hb);
    for (int k = 0; k < clients; k++) {
        nng_aio_free(x[k].aio);
        nng_ctx_close(x[k].ctx);
    }
    nng_close(s);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    emit("nng-hop", "nng", clients, (double)hb.ops / duration, &hb.h);
    free(x);
    return hb.errors ? 1 : 0;
}

/* ---- a link hop ---- */

typedef struct lhop {
    net_peer *p;
    uint64_t t0;
    hopbench *hb;
} lhop;

static const uint8_t lhop_body[64];

static void lhop_send(lhop *x);

static void lhop_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    lhop *x = arg;

    (void)resp;
    (void)n;
    if (err != 0)
        __atomic_fetch_add(&x->hb->errors, 1, __ATOMIC_RELAXED);
    if (hop_done(x->hb, err == 0, x->t0))
        lhop_send(x);
}

static void lhop_send(lhop *x)
{
    x->t0 = now_ns();
    if (net_peer_submit(x->p, lhop_body, sizeof lhop_body, 10000, lhop_done, x) != 0) {
        __atomic_fetch_add(&x->hb->errors, 1, __ATOMIC_RELAXED);
        (void)hop_done(x->hb, false, x->t0);
    }
}

static int run_link(int clients, double duration, double warmup, int port, const char *name)
{
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    pid_t pid = hop_server(url, true);
    if (pid < 0)
        return 1;
    net_peer *p = NULL;
    hopbench hb = { 0 };
    lhop *x = calloc((size_t)clients, sizeof *x);
    if (!x || net_peer_open_link(url, NET_PEER_ALONE, &p) != 0) {
        free(x);
        return hop_fail(pid, "link setup");
    }
    hop_window(&hb, clients, duration, warmup);
    for (int k = 0; k < clients; k++) {
        x[k] = (lhop){ .p = p, .hb = &hb };
        lhop_send(&x[k]);
    }
    hop_wait(&hb);
    net_peer_close(p);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    emit(name, "nng", clients, (double)hb.ops / duration, &hb.h);
    free(x);
    return hb.errors ? 1 : 0;
}

/* ---- leveldb ---- */

static void key_of(uint64_t k, char *out)
{
    snprintf(out, 24, "F%016llx", (unsigned long long)(k * 0x9E3779B97F4A7C15ULL));
}

static int run_leveldb(const char *dir, uint64_t items, double duration)
{
    char *err = NULL, key[24], val[130];
    memset(val, 'v', sizeof val);
    leveldb_options_t *o = leveldb_options_create();
    leveldb_options_set_create_if_missing(o, 1);
    leveldb_t *db = leveldb_open(o, dir, &err);
    if (err) {
        fprintf(stderr, "rawbench: leveldb %s: %s\n", dir, err);
        return 1;
    }
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create(), *ws = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(ws, 1);
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    hist h;

    hist_init(&h); /* unsynced puts, the load itself */
    uint64_t t0 = now_ns();
    for (uint64_t k = 0; k < items && !err; k++) {
        uint64_t t = now_ns();
        key_of(k, key);
        leveldb_put(db, wo, key, strlen(key), val, sizeof val, &err);
        hist_add(&h, now_ns() - t);
    }
    emit("leveldb-put", "leveldb", 1, (double)items / ((double)(now_ns() - t0) / 1e9), &h);

    hist_init(&h); /* random gets */
    uint64_t s = 12345, n = 0;
    t0 = now_ns();
    for (; now_ns() - t0 < (uint64_t)(duration * 1e9) && !err; n++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t vl;
        uint64_t t = now_ns();
        key_of(s % items, key);
        char *v = leveldb_get(db, ro, key, strlen(key), &vl, &err);
        hist_add(&h, now_ns() - t);
        leveldb_free(v);
    }
    emit("leveldb-get", "leveldb", 1, (double)n / ((double)(now_ns() - t0) / 1e9), &h);

    hist_init(&h); /* synced single puts */
    t0 = now_ns();
    for (n = 0; now_ns() - t0 < (uint64_t)(duration * 1e9) && !err; n++) {
        uint64_t t = now_ns();
        key_of(items + n, key);
        leveldb_put(db, ws, key, strlen(key), val, sizeof val, &err);
        hist_add(&h, now_ns() - t);
    }
    emit("leveldb-sync-put", "leveldb", 1, (double)n / ((double)(now_ns() - t0) / 1e9), &h);

    hist_init(&h); /* synced batches of 100 (items per second) */
    t0 = now_ns();
    for (n = 0; now_ns() - t0 < (uint64_t)(duration * 1e9) && !err; n++) {
        leveldb_writebatch_t *wb = leveldb_writebatch_create();
        for (int j = 0; j < 100; j++) {
            key_of(items * 2 + n * 100 + (uint64_t)j, key);
            leveldb_writebatch_put(wb, key, strlen(key), val, sizeof val);
        }
        uint64_t t = now_ns();
        leveldb_write(db, ws, wb, &err);
        hist_add(&h, now_ns() - t);
        leveldb_writebatch_destroy(wb);
    }
    emit("leveldb-sync-batch100", "leveldb", 1, (double)n * 100 / ((double)(now_ns() - t0) / 1e9),
         &h);
    if (err)
        fprintf(stderr, "rawbench: leveldb: %s\n", err);
    leveldb_readoptions_destroy(ro);
    leveldb_writeoptions_destroy(wo);
    leveldb_writeoptions_destroy(ws);
    leveldb_close(db);
    leveldb_options_destroy(o);
    return err ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(
            stderr,
            "usage: shardex-rawbench nng|link|link-auth --clients N [--duration S] "
            "[--warmup S] [--port P]\n       shardex-rawbench leveldb --dir DIR "
            "[--items N] [--duration S]\n       shardex-rawbench leveldb-w6 --dir DIR [--items N]\n");
        return argc < 2 ? 2 : 0;
    }
    int clients = 1, port = 0;
    double duration = 5, warmup = 1;
    uint64_t items = 100000;
    const char *dir = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--clients") == 0)
            clients = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--duration") == 0)
            duration = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--items") == 0)
            items = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else {
            fprintf(stderr, "rawbench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (clients < 1 || duration <= 0 || items < 1)
        return 2;
    if (strcmp(argv[1], "nng") == 0 || strcmp(argv[1], "link") == 0 ||
        strcmp(argv[1], "link-auth") == 0) {
        if (port <= 0)
            port = 20000 + (int)(getpid() % 10000);
        if (strcmp(argv[1], "nng") == 0)
            return run_nng(clients, duration, warmup, port);
        if (strcmp(argv[1], "link") == 0)
            return run_link(clients, duration, warmup, port, "link-hop");
        uint8_t key[LINK_KEY_BYTES];
        if (proto_init() != 0)
            return 1;
        randombytes_buf(key, sizeof key);
        link_auth_set_key(key, "rawbench"); /* the forked server inherits it */
        return run_link(clients, duration, warmup, port, "link-auth-hop");
    }
    if (strcmp(argv[1], "leveldb") == 0 && dir)
        return run_leveldb(dir, items, duration);
    if (strcmp(argv[1], "leveldb-w6") == 0 && dir)
        return raw_w6_run(dir, items, emit);
    fprintf(stderr, "rawbench: unknown mode or missing --dir\n");
    return 2;
}
