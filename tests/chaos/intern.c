/*
 * intern.c — the chaos checker's interning table: a JSON value's canonical
 * text (compact, as jansson writes it) to a dense integer id and back, so
 * that keys, values and processes compare as integers.  Id 0 is null.
 */
#include <stdlib.h>
#include <string.h>

#include "chk.h"

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h ^ (h >> 31);
}

static int grow_slots(chk_intern *t)
{
    size_t ns = t->nslot ? t->nslot * 2 : 256;
    uint64_t *s = calloc(ns, sizeof *s);
    if (!s)
        return -1;
    for (size_t id = 0; id < t->n; id++) {
        size_t j = hash_text(t->text[id]) & (ns - 1);
        while (s[j])
            j = (j + 1) & (ns - 1);
        s[j] = id + 1;
    }
    free(t->slot);
    t->slot = s;
    t->nslot = ns;
    return 0;
}

/* chk_intern_init: contract in chk.h. */
int chk_intern_init(chk_intern *t)
{
    uint64_t id;
    memset(t, 0, sizeof *t);
    return chk_intern_text(t, "null", &id);
}

/* chk_intern_text: contract in chk.h. */
int chk_intern_text(chk_intern *t, const char *text, uint64_t *id)
{
    if ((t->n + 1) * 2 > t->nslot && grow_slots(t))
        return -1;
    size_t j = hash_text(text) & (t->nslot - 1);
    while (t->slot[j]) {
        if (!strcmp(t->text[t->slot[j] - 1], text)) {
            *id = t->slot[j] - 1;
            return 0;
        }
        j = (j + 1) & (t->nslot - 1);
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        char **nt = realloc(t->text, nc * sizeof *nt);
        if (!nt)
            return -1;
        t->text = nt;
        t->cap = nc;
    }
    char *copy = strdup(text);
    if (!copy)
        return -1;
    t->text[t->n] = copy;
    t->slot[j] = t->n + 1;
    *id = t->n++;
    return 0;
}

/* chk_intern_json: contract in chk.h. */
int chk_intern_json(chk_intern *t, const json_t *v, uint64_t *id)
{
    if (!v || json_is_null(v)) {
        *id = 0;
        return 0;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s)
        return -1;
    int rc = chk_intern_text(t, s, id);
    free(s);
    return rc;
}

/* chk_intern_name: contract in chk.h. */
const char *chk_intern_name(const chk_intern *t, uint64_t id)
{
    return id < t->n ? t->text[id] : "?";
}

/* chk_intern_free: contract in chk.h. */
void chk_intern_free(chk_intern *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->text[i]);
    free(t->text);
    free(t->slot);
    memset(t, 0, sizeof *t);
}
