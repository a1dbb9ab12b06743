/*
 * dedup.c — the (client id, sequence) deduplication table of raft_dedup.h:
 * a sorted array of the last request executed per client.
 */
#include <stdlib.h>
#include <string.h>

#include "raft_dedup.h"

/* raft_dedup_init: contract (arguments, ownership, errors) in raft_dedup.h. */
void raft_dedup_init(raft_dedup *d)
{
    memset(d, 0, sizeof *d);
}

/* raft_dedup_free: contract (arguments, ownership, errors) in raft_dedup.h. */
void raft_dedup_free(raft_dedup *d)
{
    free(d->v);
    memset(d, 0, sizeof *d);
}

static size_t lower(const raft_dedup *d, uint64_t client)
{
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->v[mid].client < client)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* raft_dedup_check: contract (arguments, ownership, errors) in raft_dedup.h. */
int raft_dedup_check(const raft_dedup *d, uint64_t client, uint64_t seq, uint64_t *result)
{
    size_t i = lower(d, client);
    if (i == d->n || d->v[i].client != client)
        return RAFT_DEDUP_NEW;
    if (seq > d->v[i].seq)
        return RAFT_DEDUP_NEW;
    if (seq == d->v[i].seq) {
        if (result)
            *result = d->v[i].result;
        return RAFT_DEDUP_DUP;
    }
    return RAFT_DEDUP_STALE;
}

/* raft_dedup_record: contract (arguments, ownership, errors) in raft_dedup.h. */
int raft_dedup_record(raft_dedup *d, uint64_t client, uint64_t seq, uint64_t result)
{
    size_t i = lower(d, client);
    if (i < d->n && d->v[i].client == client) {
        d->v[i].seq = seq;
        d->v[i].result = result;
        return 0;
    }
    if (d->n == d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 16;
        raft_dedup_slot *nv = realloc(d->v, ncap * sizeof *nv);
        if (!nv)
            return -1;
        d->v = nv;
        d->cap = ncap;
    }
    memmove(&d->v[i + 1], &d->v[i], (d->n - i) * sizeof *d->v);
    d->v[i].client = client;
    d->v[i].seq = seq;
    d->v[i].result = result;
    d->n++;
    return 0;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* raft_dedup_encoded_size: contract (arguments, ownership, errors) in raft_dedup.h. */
size_t raft_dedup_encoded_size(const raft_dedup *d)
{
    return 8 + d->n * 24;
}

/* raft_dedup_encode: contract (arguments, ownership, errors) in raft_dedup.h. */
void raft_dedup_encode(const raft_dedup *d, uint8_t *out)
{
    put64(out, d->n);
    for (size_t i = 0; i < d->n; i++) {
        put64(out + 8 + i * 24, d->v[i].client);
        put64(out + 16 + i * 24, d->v[i].seq);
        put64(out + 24 + i * 24, d->v[i].result);
    }
}

/* raft_dedup_decode: contract (arguments, ownership, errors) in raft_dedup.h. */
int raft_dedup_decode(raft_dedup *d, const uint8_t *p, size_t len, size_t *used)
{
    raft_dedup_free(d);
    if (len < 8)
        return -1;
    uint64_t n = get64(p);
    if (n > (len - 8) / 24)
        return -1; /* count checked against bytes left */
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *q = p + 8 + i * 24;
        uint64_t c = get64(q);
        if (d->n && c <= d->v[d->n - 1].client) { /* must be sorted, unique */
            raft_dedup_free(d);
            return -1;
        }
        if (raft_dedup_record(d, c, get64(q + 8), get64(q + 16))) {
            raft_dedup_free(d);
            return -1;
        }
    }
    *used = 8 + (size_t)n * 24;
    return 0;
}
