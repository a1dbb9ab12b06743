/*
 * keyfilter_load.c — the background scan that fills an absent-key filter
 * from a leveldb (see keyfilter_load.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "keyfilter_load.h"
#include "log.h"
#include "sx_errors.h"

#define KF_DEFAULT_MB 256
#define KF_MAX_MB (1 << 20)
#define KF_CHUNK_KEYS 65536u

struct kf_loader {
    ldb *db;
    keyfilter *kf;
    kf_range *r;
    int n;
    int range; /* the range being scanned */
    uint64_t keys;
    uint32_t in_chunk; /* keys seen by the current chunk */
    uint8_t *last;     /* the last stored key seen, + room for a 0 byte */
    size_t last_n, last_cap;
    bool chunk_full; /* the chunk stopped: resume after `last` */
    int stop;        /* atomic: give up */
    bool stopped;    /* the scan gave up */
    char what[64];
    pthread_t t;
};

static int load_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    kf_loader *l = arg;
    const kf_range *r = &l->r[l->range];

    if (kn < r->skip)
        return SX_EIO;
    kf_add(l->kf, r->part, k + r->skip, kn - r->skip);
    l->keys++;
    if (++l->in_chunk < KF_CHUNK_KEYS)
        return 0;
    if (kn + 1 > l->last_cap) {
        uint8_t *nl = realloc(l->last, kn + 1);
        if (nl == NULL)
            return SX_ENOMEM;
        l->last = nl;
        l->last_cap = kn + 1;
    }
    memcpy(l->last, k, kn);
    l->last[kn] = 0; /* the least key after k */
    l->last_n = kn + 1;
    l->chunk_full = true;
    return 1; /* ldb_scan: stop, no error */
}

/* Scans range l->range chunk by chunk; before each chunk, gives up
 * (l->stopped) if asked to stop. */
static int load_range(kf_loader *l)
{
    const kf_range *r = &l->r[l->range];
    int rc = 0;

    for (bool first = true; rc == 0 && (first || l->chunk_full); first = false) {
        if (__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
            l->stopped = true;
            return 0;
        }
        l->chunk_full = false;
        l->in_chunk = 0;
        rc = first
                 ? ldb_scan_nocache(l->db, NULL, r->lo, r->lo_n, r->hi, r->hi_n, load_visit, l)
                 : ldb_scan_nocache(l->db, NULL, l->last, l->last_n, r->hi, r->hi_n, load_visit, l);
    }
    return rc;
}

static void *load_main(void *arg)
{
    kf_loader *l = arg;
    struct timespec t0, t1;
    int rc = 0;

    os_thread_name("sx-kf-load");

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (l->range = 0; rc == 0 && !l->stopped && l->range < l->n; l->range++)
        rc = load_range(l);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0 && !l->stopped) {
        size_t bytes;
        bool on;

        kf_set_ready(l->kf);
        kf_stats(l->kf, NULL, NULL, &bytes, NULL, &on);
        LOG_INFO("%s: absent-key filter %s: %llu stored keys scanned in %.1f s, %zu KiB", l->what,
                 on ? "ready" : "over its cap, off", (unsigned long long)l->keys,
                 (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                 bytes / 1024);
    } else if (rc != 0) {
        kf_disable(l->kf);
        LOG_WARN("%s: the absent-key filter's scan failed (%s): filter off, every write "
                 "reads what it replaces",
                 l->what, sx_strerror(rc));
    }
    free(l->last);
    l->last = NULL;
    return NULL;
}

void kf_load_start(ldb *db, const kf_range *ranges, int n, uint64_t expect, const char *what,
                   keyfilter **kf, kf_loader **out)
{
    long mb = os_env_long("SHARDEX_KEYFILTER_MB", 0, KF_MAX_MB, KF_DEFAULT_MB);
    kf_loader *l;

    *kf = NULL;
    *out = NULL;
    if (mb == 0 || n < 0)
        return;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        goto fail;
    l->r = malloc((size_t)(n > 0 ? n : 1) * sizeof(*l->r));
    if (l->r == NULL || kf_create(expect, (size_t)mb << 20, &l->kf) != 0)
        goto fail;
    if (n > 0)
        memcpy(l->r, ranges, (size_t)n * sizeof(*l->r));
    l->n = n;
    l->db = db;
    snprintf(l->what, sizeof(l->what), "%s", what);
    if (pthread_create(&l->t, NULL, load_main, l) != 0)
        goto fail;
    *kf = l->kf;
    *out = l;
    return;
fail:
    LOG_WARN("%s: cannot set up the absent-key filter (out of memory or threads): every "
             "write reads what it replaces",
             what);
    if (l != NULL) {
        kf_destroy(l->kf);
        free(l->r);
        free(l);
    }
}

void kf_load_stop(kf_loader *l)
{
    if (l == NULL)
        return;
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELAXED);
    pthread_join(l->t, NULL);
    free(l->r);
    free(l);
}

void kf_status(keyfilter *kf, mp_buf *b)
{
    uint64_t keys = 0, spared = 0;
    size_t bytes = 0;
    bool ready = false, on = false;

    if (kf != NULL)
        kf_stats(kf, &keys, &spared, &bytes, &ready, &on);
    mp_put_cstr(b, "keyfilter");
    mp_put_map(b, 5);
    mp_put_cstr(b, "on");
    mp_put_bool(b, on);
    mp_put_cstr(b, "ready");
    mp_put_bool(b, ready && on);
    mp_put_cstr(b, "keys");
    mp_put_u64(b, keys);
    mp_put_cstr(b, "spared");
    mp_put_u64(b, spared);
    mp_put_cstr(b, "bytes");
    mp_put_u64(b, bytes);
}
