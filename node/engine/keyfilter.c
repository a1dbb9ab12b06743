/*
 * keyfilter.c — the absent-key filter (see keyfilter.h).
 *
 * A segment is an array of 64-byte blocks; a key sets KF_PROBES bits in one
 * block, chosen by its hash, so a lookup reads one cache line per segment.
 * With 10 bits a key and 7 probes a full segment answers "maybe" for ~1-2 %
 * of absent keys. Keys go to the newest segment; when it holds its
 * capacity a new one is added with twice the capacity of all before it, so
 * a filter of n keys has O(log n) segments (one, when the store's item
 * count sized the first). Memory: 10 bits a key at a segment's capacity;
 * ~1.9 bytes a key when sized at 1.5 x the stored count, up to ~3.75 just
 * after a growth step.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "keyfilter.h"
#include "sx_errors.h"

#define KF_BITS_PER_KEY 10
#define KF_PROBES 7 /* 9 bits of the second hash each */
#define KF_MIN_KEYS 65536u
#define KF_MAX_SEGS 40

typedef struct kf_seg {
    uint64_t *blocks; /* nblocks * 8 words */
    size_t nblocks;
    uint64_t cap, nkeys;
} kf_seg;

struct keyfilter {
    pthread_mutex_t mu;
    kf_seg seg[KF_MAX_SEGS];
    int nseg;
    size_t bytes, max_bytes;
    uint64_t keys, spared;
    bool ready, off;
};

static uint64_t fmix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

#define KF_MUL 0xc6a4a7935bd1e995ULL

/* Folds 64-bit word w into h: w mixed by multiply and shift, then h
 * multiplied, so every bit of w reaches every bit of the result. */
static uint64_t fold(uint64_t h, uint64_t w)
{
    w *= KF_MUL;
    w ^= w >> 47;
    w *= KF_MUL;
    return (h ^ w) * KF_MUL;
}

/* Eight bytes at a time (host order: the filter is never stored, only
 * rebuilt from the keys), the key's length and partition first: a
 * byte-wise hash such as FNV-1a would take a multiply per byte, in one
 * dependent chain, on 26-40-byte keys. */
kf_key kf_key_of(uint64_t part, const uint8_t *k, size_t kn)
{
    uint64_t h = fold((uint64_t)kn * KF_MUL, part), w;
    size_t i = 0;

    for (; i + 8 <= kn; i += 8) {
        memcpy(&w, k + i, 8);
        h = fold(h, w);
    }
    if (i < kn) {
        w = 0;
        memcpy(&w, k + i, kn - i);
        h = fold(h, w);
    }
    return (kf_key){ fmix64(h), fmix64(h ^ 0x9e3779b97f4a7c15ULL) };
}

/* Adds a segment for cap keys. Call with mu held. */
static int seg_add(keyfilter *f, uint64_t cap)
{
    kf_seg *s;
    size_t nblocks = (size_t)((cap * KF_BITS_PER_KEY + 511) / 512);
    size_t bytes = nblocks * 64;

    if (f->nseg == KF_MAX_SEGS || f->bytes + bytes > f->max_bytes ||
        (uint64_t)nblocks > UINT32_MAX) /* block_of scales 32 bits */
        return SX_ENOMEM;
    s = &f->seg[f->nseg];
    s->blocks = calloc(nblocks * 8, sizeof(uint64_t));
    if (s->blocks == NULL)
        return SX_ENOMEM;
    s->nblocks = nblocks;
    s->cap = cap;
    s->nkeys = 0;
    f->nseg++;
    f->bytes += bytes;
    return 0;
}

/* Turns the filter off for good and frees its segments. Call with mu held. */
static void kf_turn_off(keyfilter *f)
{
    for (int i = 0; i < f->nseg; i++)
        free(f->seg[i].blocks);
    f->nseg = 0;
    f->bytes = 0;
    f->off = true;
}

int kf_create(uint64_t expect, size_t max_bytes, keyfilter **out)
{
    keyfilter *f = calloc(1, sizeof(*f));
    uint64_t fit = (uint64_t)max_bytes / 64 * 512 / KF_BITS_PER_KEY;
    /* 1.5 x expect, but no more than the cap holds (the scan may still
     * overflow it, and the filter then turns off) */
    uint64_t cap = expect >= fit / 3 * 2 ? fit : expect + expect / 2;

    if (f == NULL)
        return SX_ENOMEM;
    pthread_mutex_init(&f->mu, NULL);
    f->max_bytes = max_bytes;
    if (cap < KF_MIN_KEYS)
        cap = KF_MIN_KEYS;
    if (seg_add(f, cap) != 0 && seg_add(f, KF_MIN_KEYS) != 0)
        kf_turn_off(f); /* not even the smallest segment: off from the start */
    *out = f;
    return 0;
}

void kf_destroy(keyfilter *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->nseg; i++)
        free(f->seg[i].blocks);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Key (a, b)'s block in segment s (a's top 32 bits scaled to the block
 * count: a multiply, not a division), and its probe i's bit in that block. */
static uint64_t *block_of(const kf_seg *s, uint64_t a)
{
    return s->blocks + (((a >> 32) * (uint64_t)s->nblocks) >> 32) * 8;
}

static unsigned probe_bit(uint64_t b, int i)
{
    return (unsigned)(b >> (9 * i)) & 511u;
}

static bool blk_has(const uint64_t *blk, uint64_t b)
{
    for (int i = 0; i < KF_PROBES; i++) {
        unsigned bit = probe_bit(b, i);
        if (!(blk[bit >> 6] & (1ULL << (bit & 63))))
            return false;
    }
    return true;
}

void kf_add_key(keyfilter *f, kf_key h)
{
    uint64_t total = 0;
    kf_seg *s;

    pthread_mutex_lock(&f->mu);
    if (f->off)
        goto out;
    s = &f->seg[f->nseg - 1];
    if (s->nkeys >= s->cap) {
        for (int i = 0; i < f->nseg; i++)
            total += f->seg[i].cap;
        if (seg_add(f, 2 * total) != 0) {
            kf_turn_off(f);
            goto out;
        }
        s = &f->seg[f->nseg - 1];
    }
    uint64_t *blk = block_of(s, h.a);
    for (int i = 0; i < KF_PROBES; i++) {
        unsigned bit = probe_bit(h.b, i);
        blk[bit >> 6] |= 1ULL << (bit & 63);
    }
    s->nkeys++;
    f->keys++;
out:
    pthread_mutex_unlock(&f->mu);
}

void kf_add(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn)
{
    kf_add_key(f, kf_key_of(part, k, kn));
}

/* An absent key is looked up in every segment, each a cache miss on a
 * large filter: all its blocks are fetched at once, then tested, so the
 * misses overlap instead of following one another. */
bool kf_absent_key(keyfilter *f, kf_key h)
{
    const uint64_t *blk[KF_MAX_SEGS];
    bool absent;

    pthread_mutex_lock(&f->mu);
    absent = f->ready && !f->off;
    if (absent) {
        for (int i = 0; i < f->nseg; i++) {
            blk[i] = block_of(&f->seg[i], h.a);
            __builtin_prefetch(blk[i]);
        }
        for (int i = 0; absent && i < f->nseg; i++)
            if (blk_has(blk[i], h.b))
                absent = false;
    }
    f->spared += absent;
    pthread_mutex_unlock(&f->mu);
    return absent;
}

bool kf_absent(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn)
{
    return kf_absent_key(f, kf_key_of(part, k, kn));
}

void kf_set_ready(keyfilter *f)
{
    pthread_mutex_lock(&f->mu);
    f->ready = true;
    pthread_mutex_unlock(&f->mu);
}

void kf_disable(keyfilter *f)
{
    pthread_mutex_lock(&f->mu);
    kf_turn_off(f);
    pthread_mutex_unlock(&f->mu);
}

void kf_stats(keyfilter *f, uint64_t *keys, uint64_t *spared, size_t *bytes, bool *ready, bool *on)
{
    pthread_mutex_lock(&f->mu);
    if (keys)
        *keys = f->keys;
    if (spared)
        *spared = f->spared;
    if (bytes)
        *bytes = f->bytes;
    if (ready)
        *ready = f->ready;
    if (on)
        *on = !f->off;
    pthread_mutex_unlock(&f->mu);
}
