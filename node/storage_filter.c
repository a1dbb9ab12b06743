/*
 * storage_filter.c — the storage store's absent-key filter (keyfilter.h):
 * created when the committer starts, filled by a background scan of the
 * fact keys on disk, told of every fact key a group writes, and asked by
 * the committer before it reads a fact it is about to replace.
 *
 * Until the scan has finished the filter answers "maybe" and every write
 * reads its fact, as it did without a filter; a scan that fails (or a
 * filter past its byte cap) leaves it so. The scan runs on its own thread
 * with leveldb's implicit snapshot; keys written after that snapshot are
 * added by the committer itself, so the filter misses none.
 *
 * SHARDEX_KEYFILTER_MB caps the filter's memory (default 256 MiB, ~1.25
 * bytes a key: ~200 million keys); 0 turns it off.
 */
#include <time.h>
#include "keyfilter.h"
#include "log.h"
#include "storage_part.h"
#include "sx_errors.h"

#define ST_FILTER_MB 256
#define ST_FILTER_MAX_MB (1 << 20)

/* The cap in MiB: SHARDEX_KEYFILTER_MB when set to 0..ST_FILTER_MAX_MB
 * (anything else is reported and ignored), else ST_FILTER_MB. */
static long filter_mb(void)
{
    return sx_env_long("SHARDEX_KEYFILTER_MB", 0, ST_FILTER_MAX_MB, ST_FILTER_MB);
}

typedef struct scan_ctx {
    st_store *s;
    uint64_t part;
    uint64_t n;
    bool stopped;             /* the store is stopping: the scan gave up */
} scan_ctx;

static int scan_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    scan_ctx *c = arg;

    kf_add(c->s->kf, c->part, k, kn);
    if ((++c->n & 4095) == 0 && __atomic_load_n(&c->s->kf_stop, __ATOMIC_RELAXED)) {
        c->stopped = true;
        return 1;             /* ldb_scan: stop, no error */
    }
    return 0;
}

static void *scan_main(void *arg)
{
    st_store *s = arg;
    static const uint8_t lo = ST_FACT_PREFIX, hi = ST_FACT_PREFIX + 1;
    scan_ctx c = { s, 0, 0, false };
    struct timespec t0, t1;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; rc == 0 && !c.stopped && i < s->nparts; i++) {
        c.part = s->parts[i]->id;
        rc = st_kscan(s->parts[i], NULL, &lo, 1, &hi, 1, false, scan_visit, &c);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0 && !c.stopped) {
        size_t bytes;
        bool on;

        kf_set_ready(s->kf);
        kf_stats(s->kf, NULL, &bytes, NULL, &on);
        LOG_INFO("store: absent-key filter %s: %llu fact keys scanned in %.1f s, %zu KiB",
                 on ? "ready" : "over its cap, off", (unsigned long long)c.n,
                 (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                 bytes / 1024);
    } else if (rc != 0) {
        LOG_WARN("store: the absent-key filter's scan failed (%s): every write reads "
                 "its fact", sx_strerror(rc));
    }
    return NULL;
}

int st_filter_start(st_store *s)
{
    long mb = filter_mb();
    uint64_t items = 0;
    int rc;

    if (mb == 0)
        return 0;
    for (int i = 0; i < s->nparts; i++)
        items += s->parts[i]->w_items;
    rc = kf_create(items, (size_t)mb << 20, &s->kf);
    if (rc != 0)
        return rc;
    __atomic_store_n(&s->kf_stop, 0, __ATOMIC_RELAXED);
    if (pthread_create(&s->kf_scan, NULL, scan_main, s) != 0) {
        kf_destroy(s->kf);
        s->kf = NULL;
        return SX_EINTERNAL;
    }
    s->kf_scanning = true;
    return 0;
}

void st_filter_stop(st_store *s)
{
    if (s->kf_scanning) {
        __atomic_store_n(&s->kf_stop, 1, __ATOMIC_RELAXED);
        pthread_join(s->kf_scan, NULL);
        s->kf_scanning = false;
    }
    kf_destroy(s->kf);
    s->kf = NULL;
}

bool st_fact_absent(st_part *p, const uint8_t *k, size_t kn)
{
    return p->store->kf != NULL && kf_absent(p->store->kf, p->id, k, kn);
}

void st_fact_written(st_part *p, const uint8_t *k, size_t kn)
{
    if (p->store->kf != NULL)
        kf_add(p->store->kf, p->id, k, kn);
}

void st_filter_status(st_store *s, mp_buf *b)
{
    uint64_t keys = 0;
    size_t bytes = 0;
    bool ready = false, on = false;

    if (s->kf != NULL)
        kf_stats(s->kf, &keys, &bytes, &ready, &on);
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
