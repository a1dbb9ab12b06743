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
#define KF_MAX_RANGES 1024

struct kf_loader {
    ldb *db;
    keyfilter *kf;
    kf_range *r;
    int n;
    int range;                /* the range being scanned */
    uint64_t keys;
    int stop;                 /* atomic: give up */
    bool stopped;             /* the scan gave up */
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
    if ((++l->keys & 4095) == 0 && __atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
        l->stopped = true;
        return 1;             /* ldb_scan: stop, no error */
    }
    return 0;
}

static void *load_main(void *arg)
{
    kf_loader *l = arg;
    struct timespec t0, t1;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (l->range = 0; rc == 0 && !l->stopped && l->range < l->n; l->range++) {
        const kf_range *r = &l->r[l->range];
        rc = ldb_scan(l->db, NULL, r->lo, r->lo_n, r->hi, r->hi_n, false, load_visit, l);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0 && !l->stopped) {
        size_t bytes;
        bool on;

        kf_set_ready(l->kf);
        kf_stats(l->kf, NULL, &bytes, NULL, &on);
        LOG_INFO("%s: absent-key filter %s: %llu stored keys scanned in %.1f s, %zu KiB",
                 l->what, on ? "ready" : "over its cap, off", (unsigned long long)l->keys,
                 (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                 bytes / 1024);
    } else if (rc != 0) {
        LOG_WARN("%s: the absent-key filter's scan failed (%s): every write reads what "
                 "it replaces", l->what, sx_strerror(rc));
    }
    return NULL;
}

int kf_load_start(ldb *db, const kf_range *ranges, int n, uint64_t expect,
                  const char *what, keyfilter **kf, kf_loader **out)
{
    long mb = sx_env_long("SHARDEX_KEYFILTER_MB", 0, KF_MAX_MB, KF_DEFAULT_MB);
    kf_loader *l;

    *kf = NULL;
    *out = NULL;
    if (mb == 0)
        return 0;
    if (n < 0 || n > KF_MAX_RANGES)
        return SX_EINVAL;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return SX_ENOMEM;
    l->r = malloc((size_t)(n > 0 ? n : 1) * sizeof(*l->r));
    if (l->r == NULL || kf_create(expect, (size_t)mb << 20, &l->kf) != 0) {
        free(l->r);
        free(l);
        return SX_ENOMEM;
    }
    if (n > 0)
        memcpy(l->r, ranges, (size_t)n * sizeof(*l->r));
    l->n = n;
    l->db = db;
    snprintf(l->what, sizeof(l->what), "%s", what);
    if (pthread_create(&l->t, NULL, load_main, l) != 0) {
        kf_destroy(l->kf);
        free(l->r);
        free(l);
        return SX_EINTERNAL;
    }
    *kf = l->kf;
    *out = l;
    return 0;
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
    uint64_t keys = 0;
    size_t bytes = 0;
    bool ready = false, on = false;

    if (kf != NULL)
        kf_stats(kf, &keys, &bytes, &ready, &on);
    mp_put_cstr(b, "keyfilter");
    mp_put_map(b, 4);
    mp_put_cstr(b, "on");
    mp_put_bool(b, on);
    mp_put_cstr(b, "ready");
    mp_put_bool(b, ready && on);
    mp_put_cstr(b, "keys");
    mp_put_u64(b, keys);
    mp_put_cstr(b, "bytes");
    mp_put_u64(b, bytes);
}
