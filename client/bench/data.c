/*
 * data.c — the customers data set (see data.h).
 */
#include <stdio.h>
#include <string.h>
#include "data.h"

uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ULL;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void data_fresh_pair(uint64_t p, char *t, char *l)
{
    data_pair(p, t, l);
    size_t n = strlen(l); /* 6 of l's 16 bytes */
    l[n] = 'w';
    l[n + 1] = '\0';
}

uint64_t data_npairs(uint64_t n)
{
    uint64_t p = n / DATA_PER_PAIR;
    return p ? p : 1;
}

/* "%c%05u" of x: its letter 'A' + x % 26, then x in at least 5 digits
 * (by hand: this runs twice per generated item, and snprintf would be ~8 %
 * of the benchmark client's CPU in a bulk load). */
static void code(char *out, unsigned x)
{
    char d[10];
    int n = 0;

    *out++ = (char)('A' + (int)(x % 26));
    do {
        d[n++] = (char)('0' + x % 10);
        x /= 10;
    } while (x != 0);
    while (n < 5)
        d[n++] = '0';
    while (n > 0)
        *out++ = d[--n];
    *out = '\0';
}

void data_pair(uint64_t p, char *t, char *l)
{
    code(t, (unsigned)((p / DATA_NAMES) % 10000000u));
    code(l, (unsigned)(p % DATA_NAMES));
}

void data_payload(uint64_t seed, uint64_t id, char *out)
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + id + 1, r = 0;
    /* eight letters from each 64-bit draw, one per byte */
    for (int k = 0; k < DATA_PAYLOAD; k++, r >>= 8) {
        if (k % 8 == 0)
            r = rng_next(&s);
        out[k] = al[(r & 0xff) % (sizeof al - 1)];
    }
    out[DATA_PAYLOAD] = '\0';
}

sx_item *data_item_with(uint64_t seed, uint64_t id, const char *town, const char *last)
{
    char pay[DATA_PAYLOAD + 1];
    sx_item *it = sx_item_new();
    if (!it)
        return NULL;
    data_payload(seed, id, pay);
    if (sx_item_set_int(it, "id", (int64_t)id) || sx_item_set_str(it, "town", town) ||
        sx_item_set_str(it, "lastname", last) || sx_item_set_str(it, "payload", pay)) {
        sx_item_free(it);
        return NULL;
    }
    return it;
}

sx_item *data_item(uint64_t seed, uint64_t n, uint64_t id)
{
    char t[16], l[16];
    data_pair(id % data_npairs(n), t, l);
    return data_item_with(seed, id, t, l);
}

int data_csv(FILE *f, uint64_t seed, uint64_t n)
{
    char t[16], l[16], pay[DATA_PAYLOAD + 1];
    uint64_t np = data_npairs(n);
    for (uint64_t id = 0; id < n; id++) {
        data_pair(id % np, t, l);
        data_payload(seed, id, pay);
        if (fprintf(f, "%llu,%s,%s,%s\n", (unsigned long long)id, t, l, pay) < 0)
            return -1;
    }
    return fflush(f) == 0 ? 0 : -1;
}
