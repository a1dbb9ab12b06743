/*
 * storage_store.c — the storage node's shared leveldb: open, close, and the
 * one-time copy of a partition directory of the per-partition layout. See
 * storage_store.h; the committer is in storage_write.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hash.h"
#include "ixroute.h"
#include "storage_store.h"
#include "sx_errors.h"

#define MIGRATE_BATCH_BYTES (4u << 20)

int st_store_open(const char *dir, st_store **out)
{
    st_store *s = calloc(1, sizeof(*s));
    int rc;

    if (s == NULL)
        return SX_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    rc = ldb_open_mem(dir, ST_MEMTABLE_BYTES, &s->db);
    if (rc != 0) {
        st_store_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void st_store_close(st_store *s)
{
    if (s == NULL)
        return;
    ixroute_free(s->ixr);
    ldb_close(s->db);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* State of one migration copy. */
typedef struct mig {
    st_store *s;
    uint64_t id;
    leveldb_writebatch_t *b;
    size_t bytes;
    uint64_t records;
    uint8_t *key; /* prefix | key, grown as needed */
    size_t cap;
} mig;

static int mig_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    mig *m = arg;
    int rc;

    if (kn + 8 > m->cap) {
        uint8_t *nk = realloc(m->key, kn + 8);

        if (nk == NULL)
            return SX_ENOMEM;
        m->key = nk;
        m->cap = kn + 8;
    }
    be_put64(m->key, m->id);
    memcpy(m->key + 8, k, kn);
    leveldb_writebatch_put(m->b, (const char *)m->key, kn + 8, (const char *)v, vn);
    m->bytes += kn + 8 + vn;
    m->records++;
    if (m->bytes < MIGRATE_BATCH_BYTES)
        return 0;
    rc = ldb_write_sync(m->s->db, m->b);
    leveldb_writebatch_clear(m->b);
    m->bytes = 0;
    return rc;
}

int st_store_migrate(st_store *s, const char *old_dir, uint64_t id)
{
    char dst[4200];
    ldb *old = NULL;
    mig m;
    int rc;

    memset(&m, 0, sizeof(m));
    m.s = s;
    m.id = id;
    if (snprintf(dst, sizeof(dst), "%s.migrated", old_dir) >= (int)sizeof(dst))
        return SX_EINVAL;
    LOG_INFO("partition %llu: copying %s (the layout before the shared store) into the "
             "node's store",
             (unsigned long long)id, old_dir);
    rc = ldb_open_ex(old_dir, false, &old); /* never a new, empty one */
    if (rc != 0)
        return rc;
    m.b = leveldb_writebatch_create();
    if (m.b == NULL) {
        ldb_close(old);
        return SX_ENOMEM;
    }
    rc = ldb_scan_nocache(old, NULL, "", 0, NULL, 0, mig_visit, &m); /* a sweep */
    if (rc == 0 && m.bytes > 0)
        rc = ldb_write_sync(s->db, m.b);
    leveldb_writebatch_destroy(m.b);
    free(m.key);
    ldb_close(old);
    if (rc != 0) {
        LOG_ERROR("partition %llu: copying %s failed: %s", (unsigned long long)id, old_dir,
                  sx_strerror(rc));
        return rc;
    }
    if (rename(old_dir, dst) != 0) {
        LOG_ERROR("partition %llu: copied %s but cannot rename it to %s: %s",
                  (unsigned long long)id, old_dir, dst, strerror(errno));
        return SX_EIO;
    }
    /* durable before the partition takes writes: a rename lost in a crash
     * would copy the old records over newer ones at the next start */
    if (ldb_sync_parent(old_dir) != 0) {
        LOG_ERROR("partition %llu: cannot sync the rename of %s (see above)",
                  (unsigned long long)id, old_dir);
        return SX_EIO;
    }
    LOG_INFO("partition %llu: copied %llu records; the old directory is now %s",
             (unsigned long long)id, (unsigned long long)m.records, dst);
    return 0;
}
