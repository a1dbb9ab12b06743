/*
 * raw_w6.c — shardex-rawbench leveldb-w6: the engine's floor under W6.
 *
 * What a load of N items followed by the build of two indexes writes and
 * reads in leveldb, and nothing else: no network, no encoding, no sort.
 * Sizes are the local cluster's own, read off its leveldbs after a W6 load
 * of 1,000,000 items: facts of 30-byte keys and 157-byte values; index
 * entries of 26-byte keys, whose values are 200 bytes for by_town (it
 * projects whole items) and 10 for by_last. One thread per node of the
 * local cluster (2 storage, 2 index nodes), each with its own database
 * opened as the daemons open theirs (node/engine/ldb.c), except that the four
 * share one process's block cache where the daemons have one each (no
 * difference here: the scan goes past the cache, the writes read
 * nothing). Three phases, one after
 * the other:
 *   load   each storage thread writes its half of the facts in placement
 *          order (hashed keys), in synced batches of 16,000 (what W6
 *          keeps in flight per storage node: 16 batches of 2,000 over 2
 *          nodes; the nodes' groups measure ~3,000, so this is the
 *          engine's best case);
 *   scan   each storage thread reads its facts back (the build's scan);
 *   write  each index thread writes its half of both indexes' entries,
 *          each index in ascending order (the build's best case), in
 *          unsynced batches of 1,000 taking turns between the indexes,
 *          then fsyncs the logs (the build's seal).
 * The daemons do all of this and more, so items / (the three phases'
 * seconds) bounds what W6 can reach on this engine and this machine.
 * CPU seconds are the process's: these threads and leveldb's compactions. */

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include "hash.h"
#include "ldb.h"
#include "raw_w6.h"
#include "sx_errors.h"

#define W6_NODES 2
#define W6_FACT_K 30
#define W6_FACT_V 157
#define W6_IX_K 26
#define W6_TOWN_V 200
#define W6_LAST_V 10
#define W6_LOAD_BATCH 16000
#define W6_IX_BATCH 1000
#define W6_POOL 4096 /* distinct values, drawn before the clock starts */

/* Values of random letters and digits, as the items' payloads are (zeros
 * would compress to nothing in leveldb's tables); item i takes value
 * i % W6_POOL, so a 4 KiB block holds no two alike. */
static uint8_t w6_vals[W6_POOL][W6_TOWN_V];

static void w6_fill(void)
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t s = 42;

    for (size_t i = 0; i < W6_POOL; i++)
        for (size_t j = 0; j < W6_TOWN_V; j++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            w6_vals[i][j] = (uint8_t)al[s % (sizeof al - 1)];
        }
}

typedef struct w6_node {
    ldb *st, *ix;
    uint64_t first, n; /* its items: [first, first + n) */
    int phase;         /* 0 load, 1 scan, 2 write */
    uint64_t seen;     /* scan: facts read */
    hist *h;           /* per batch (load, write); shared */
    int rc;
} w6_node;

/* Writes batch b into d (synced or not), timing the write into w's
 * histogram, and frees b. */
static int w6_commit(w6_node *w, ldb *d, bool sync, leveldb_writebatch_t *b)
{
    uint64_t t = now_ns();
    int rc = sync ? ldb_write_sync(d, b) : ldb_write_lazy(d, b);

    hist_add(w->h, now_ns() - t);
    leveldb_writebatch_destroy(b);
    return rc;
}

static int w6_load(w6_node *w)
{
    uint8_t k[W6_FACT_K] = { 'F' };

    for (uint64_t i = 0; i < w->n; i += W6_LOAD_BATCH) {
        leveldb_writebatch_t *b = leveldb_writebatch_create();
        if (b == NULL)
            return SX_ENOMEM;
        for (uint64_t j = i; j < w->n && j < i + W6_LOAD_BATCH; j++) {
            uint64_t id = w->first + j;
            be_put64(k + 5, id * 0x9E3779B97F4A7C15ULL); /* the placement hash */
            be_put64(k + 13, id);
            leveldb_writebatch_put(b, (const char *)k, sizeof k,
                                   (const char *)w6_vals[id % W6_POOL], W6_FACT_V);
        }
        int rc = w6_commit(w, w->st, true, b);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int w6_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    (void)k;
    (void)v;
    w6_node *w = arg;

    if (kn != W6_FACT_K || vn != W6_FACT_V)
        return SX_EPROTO;
    w->seen++;
    return 0;
}

static int w6_write(w6_node *w)
{
    uint8_t k[W6_IX_K] = { 'E' };
    unsigned synced = 0;

    for (uint64_t i = 0; i < w->n; i += W6_IX_BATCH) {
        for (int x = 0; x < 2; x++) { /* by_town, then by_last */
            leveldb_writebatch_t *b = leveldb_writebatch_create();
            if (b == NULL)
                return SX_ENOMEM;
            be_put64(k + 1, (uint64_t)x + 1);
            for (uint64_t j = i; j < w->n && j < i + W6_IX_BATCH; j++) {
                uint64_t id = w->first + j;
                be_put64(k + 9, id);
                leveldb_writebatch_put(b, (const char *)k, sizeof k,
                                       (const char *)w6_vals[(id + (uint64_t)x) % W6_POOL],
                                       x == 0 ? W6_TOWN_V : W6_LAST_V);
            }
            int rc = w6_commit(w, w->ix, false, b);
            if (rc != 0)
                return rc;
        }
    }
    return ldb_sync_logs(w->ix, &synced);
}

static void *w6_thread(void *arg)
{
    w6_node *w = arg;

    if (w->phase == 0)
        w->rc = w6_load(w);
    else if (w->phase == 1)
        w->rc = ldb_scan_nocache(w->st, NULL, "", 0, NULL, 0, w6_visit, w);
    else
        w->rc = w6_write(w);
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void report(const char *name, double secs, double cpu, uint64_t items)
{
    fprintf(stderr, "rawbench: %s: %.2f s, %.2f CPU-s (%.2f us an item)\n", name, secs, cpu,
            cpu * 1e6 / (double)items);
}

/* Runs one phase on every node's thread, batches timed into h; *secs is
 * its wall time, *cpu the process's CPU time over it. */
static int w6_phase(w6_node *nodes, int phase, hist *h, double *secs, double *cpu)
{
    pthread_t th[W6_NODES];
    int started = 0, rc = 0;
    double c0 = cpu_s();
    uint64_t t0 = now_ns();

    for (int i = 0; i < W6_NODES; i++) {
        nodes[i].phase = phase;
        nodes[i].rc = 0;
        nodes[i].h = h;
        if (pthread_create(&th[i], NULL, w6_thread, &nodes[i]) != 0) {
            rc = SX_ENOMEM;
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (rc == 0)
            rc = nodes[i].rc;
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    *cpu = cpu_s() - c0;
    return rc;
}

/* True when folder dir holds nothing (or cannot be listed: mkdir then
 * tells why). */
static bool dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool empty = true;

    if (d == NULL)
        return true;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

int raw_w6_run(const char *dir, uint64_t items, raw_emit_fn emit)
{
    static const char *phase_name[3] = { "leveldb-w6-load", "leveldb-w6-scan", "leveldb-w6-write" };
    w6_node nodes[W6_NODES];
    char path[4096];
    double secs[3], cpu[3];
    int rc = 0;

    memset(nodes, 0, sizeof nodes);
    if (mkdir(dir, 0700) != 0 && (errno != EEXIST || !dir_empty(dir))) {
        fprintf(stderr, "rawbench: leveldb-w6: %s must be a new or empty folder%s%s\n", dir,
                errno != EEXIST ? ": " : " (a load into earlier databases measures overwrites)",
                errno != EEXIST ? strerror(errno) : "");
        return 1;
    }
    w6_fill();
    for (int i = 0; i < W6_NODES && rc == 0; i++) {
        nodes[i].first = items / W6_NODES * (uint64_t)i;
        nodes[i].n = i + 1 < W6_NODES ? items / W6_NODES : items - nodes[i].first;
        if ((size_t)snprintf(path, sizeof path, "%s/s%d", dir, i + 1) >= sizeof path ||
            (rc = ldb_open(path, &nodes[i].st)) != 0)
            break;
        if ((size_t)snprintf(path, sizeof path, "%s/i%d", dir, i + 1) >= sizeof path)
            rc = SX_EINVAL;
        else
            rc = ldb_open(path, &nodes[i].ix);
    }
    for (int p = 0; p < 3 && rc == 0; p++) {
        hist all;
        hist_init(&all);
        rc = w6_phase(nodes, p, &all, &secs[p], &cpu[p]);
        if (rc != 0)
            break;
        emit(phase_name[p], "leveldb", W6_NODES, (double)items / secs[p], &all);
        report(phase_name[p], secs[p], cpu[p], items);
    }
    if (rc == 0) {
        uint64_t seen = 0;
        for (int i = 0; i < W6_NODES; i++)
            seen += nodes[i].seen;
        if (seen != items) {
            fprintf(stderr, "rawbench: leveldb-w6: the scan read %llu facts of %llu\n",
                    (unsigned long long)seen, (unsigned long long)items);
            rc = SX_EIO;
        }
    }
    if (rc == 0) {
        hist none;
        hist_init(&none);
        emit("leveldb-w6", "leveldb", W6_NODES, (double)items / (secs[0] + secs[1] + secs[2]),
             &none);
        report("leveldb-w6", secs[0] + secs[1] + secs[2], cpu[0] + cpu[1] + cpu[2], items);
    } else {
        fprintf(stderr, "rawbench: leveldb-w6: %s\n", sx_strerror(rc));
    }
    for (int i = 0; i < W6_NODES; i++) {
        ldb_close(nodes[i].st);
        ldb_close(nodes[i].ix);
    }
    return rc != 0;
}
