/*
 * commit_stats.c — a committer's cumulative figures (see commit_stats.h).
 */
#include "commit_stats.h"

static void add(uint64_t *f, uint64_t v)
{
    __atomic_store_n(f, __atomic_load_n(f, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

void cstats_add(commit_stats *s, uint64_t ops, uint64_t apply_us, uint64_t sync_us)
{
    add(&s->groups, 1);
    add(&s->ops, ops);
    add(&s->apply_us, apply_us);
    add(&s->sync_us, sync_us);
    if (sync_us > __atomic_load_n(&s->max_sync_us, __ATOMIC_RELAXED))
        __atomic_store_n(&s->max_sync_us, sync_us, __ATOMIC_RELAXED);
}

void cstats_put(const commit_stats *s, mp_buf *b)
{
    static const char *const names[] = { "groups", "ops", "apply_us", "sync_us", "max_sync_us" };
    const uint64_t *const fields[] = { &s->groups, &s->ops, &s->apply_us, &s->sync_us,
                                       &s->max_sync_us };

    mp_put_cstr(b, "commits");
    mp_put_map(b, 5);
    for (int i = 0; i < 5; i++) {
        mp_put_cstr(b, names[i]);
        mp_put_u64(b, __atomic_load_n(fields[i], __ATOMIC_RELAXED));
    }
}
