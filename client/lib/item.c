/*
 * item.c — sx_item and sx_list: building, reading, copying, and their
 * msgpack form (encode for the wire; bounded decode of replies through
 * mp_cur, never msgpack-c's unpacker).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* ---- value views ---- */

sx_value sx_val_null(void)
{
    sx_value v = { 0 };
    v.type = SX_NULL;
    return v;
}
sx_value sx_val_bool(int b)
{
    sx_value v = { 0 };
    v.type = SX_BOOL;
    v.b = !!b;
    return v;
}
sx_value sx_val_int(int64_t i)
{
    sx_value v = { 0 };
    v.type = SX_INT;
    v.i = i;
    return v;
}
sx_value sx_val_double(double d)
{
    sx_value v = { 0 };
    v.type = SX_DOUBLE;
    v.d = d;
    return v;
}

sx_value sx_val_strn(const char *s, size_t len)
{
    sx_value v = { 0 };
    v.type = SX_STR;
    v.s = s;
    v.len = len;
    return v;
}

sx_value sx_val_str(const char *s)
{
    return sx_val_strn(s, s ? strlen(s) : 0);
}

sx_value sx_val_bin(const void *p, size_t len)
{
    sx_value v = { 0 };
    v.type = SX_BIN;
    v.s = p;
    v.len = len;
    return v;
}

/* ---- internal value storage ---- */

static void val_clear(cl_val *v)
{
    free(v->s);
    sx_list_free(v->list);
    sx_item_free(v->map);
    memset(v, 0, sizeof *v);
}

static char *dup_bytes(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Fills v (cleared) from a view, deep-copying lists and maps. */
static int val_from_view(cl_val *v, const sx_value *in)
{
    memset(v, 0, sizeof *v);
    if (!in)
        return SX_EINVAL;
    v->type = in->type;
    switch (in->type) {
    case SX_NULL: return SX_OK;
    case SX_BOOL: v->b = !!in->b; return SX_OK;
    case SX_INT: v->i = in->i; return SX_OK;
    case SX_DOUBLE: v->d = in->d; return SX_OK;
    case SX_STR:
    case SX_BIN:
        if (!in->s && in->len)
            return SX_EINVAL;
        v->s = dup_bytes(in->s, in->len);
        v->len = in->len;
        return v->s ? SX_OK : SX_ENOMEM;
    case SX_LIST: {
        if (!in->list)
            return SX_EINVAL;
        sx_list *l = sx_list_new();
        if (!l)
            return SX_ENOMEM;
        for (size_t k = 0; k < in->list->n; k++) {
            sx_value e;
            sx_list_at(in->list, k, &e);
            int rc = sx_list_append(l, &e);
            if (rc) {
                sx_list_free(l);
                return rc;
            }
        }
        v->list = l;
        v->len = l->n;
        return SX_OK;
    }
    case SX_MAP:
        if (!in->map)
            return SX_EINVAL;
        v->map = sx_item_clone(in->map);
        v->len = in->map->n;
        return v->map ? SX_OK : SX_ENOMEM;
    }
    return SX_EINVAL;
}

static void val_view(const cl_val *v, sx_value *out)
{
    memset(out, 0, sizeof *out);
    out->type = v->type;
    out->b = v->b;
    out->i = v->i;
    out->d = v->d;
    out->s = v->s;
    out->len = v->type == SX_LIST ? v->list->n : v->type == SX_MAP ? v->map->n : v->len;
    out->list = v->list;
    out->map = v->map;
}

/* ---- items ---- */

/* Whether p points into its decoded block (see sx_item.blob). */
static bool in_blob(const sx_item *it, const char *p)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)it->blob;
    return it->blob != NULL && a >= b && a < b + it->blob_n;
}

/* val_clear for a value of item it (its string may live in the block). */
static void item_val_clear(sx_item *it, cl_val *v)
{
    if (in_blob(it, v->s))
        v->s = NULL;
    val_clear(v);
}

/* Frees name nm of item it, unless it lives in the block. */
static void item_name_free(sx_item *it, char *nm)
{
    if (!in_blob(it, nm))
        free(nm);
}

sx_item *sx_item_new(void)
{
    return calloc(1, sizeof(sx_item));
}

void sx_item_free(sx_item *it)
{
    if (!it)
        return;
    for (size_t k = 0; k < it->n; k++) {
        item_name_free(it, it->names[k]);
        item_val_clear(it, &it->vals[k]);
    }
    free(it->blob);
    free(it->names);
    free(it->vals);
    free(it);
}

static long item_find(const sx_item *it, const char *name)
{
    for (size_t k = 0; k < it->n; k++)
        if (strcmp(it->names[k], name) == 0)
            return (long)k;
    return -1;
}

/* Returns the slot for name (existing: cleared; new: appended, zeroed), or
 * NULL on allocation failure. */
static cl_val *item_slot(sx_item *it, const char *name, size_t name_len, bool check)
{
    if (check) {
        long k = item_find(it, name);
        if (k >= 0) {
            item_val_clear(it, &it->vals[k]);
            return &it->vals[k];
        }
    }
    if (it->n == it->cap) {
        size_t cap = it->cap ? it->cap * 2 : 8;
        char **names = realloc(it->names, cap * sizeof *names);
        if (!names)
            return NULL;
        it->names = names;
        cl_val *vals = realloc(it->vals, cap * sizeof *vals);
        if (!vals)
            return NULL;
        it->vals = vals;
        it->cap = cap;
    }
    char *nm = dup_bytes(name, name_len);
    if (!nm)
        return NULL;
    it->names[it->n] = nm;
    memset(&it->vals[it->n], 0, sizeof(cl_val));
    return &it->vals[it->n++];
}

int sx_item_set_value(sx_item *it, const char *name, const sx_value *v)
{
    if (!it || !name || !*name || !v)
        return SX_EINVAL;
    cl_val tmp;
    int rc = val_from_view(&tmp, v);
    if (rc) {
        val_clear(&tmp);
        return rc;
    }
    cl_val *slot = item_slot(it, name, strlen(name), true);
    if (!slot) {
        val_clear(&tmp);
        return SX_ENOMEM;
    }
    *slot = tmp;
    return SX_OK;
}

int sx_item_set_null(sx_item *it, const char *name)
{
    sx_value v = sx_val_null();
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_bool(sx_item *it, const char *name, int b)
{
    sx_value v = sx_val_bool(b);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_int(sx_item *it, const char *name, int64_t i)
{
    sx_value v = sx_val_int(i);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_double(sx_item *it, const char *name, double d)
{
    sx_value v = sx_val_double(d);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_str(sx_item *it, const char *name, const char *s)
{
    if (!s)
        return SX_EINVAL;
    sx_value v = sx_val_str(s);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_strn(sx_item *it, const char *name, const char *s, size_t len)
{
    sx_value v = sx_val_strn(s, len);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_bin(sx_item *it, const char *name, const void *p, size_t len)
{
    sx_value v = sx_val_bin(p, len);
    return sx_item_set_value(it, name, &v);
}

int sx_item_set_map(sx_item *it, const char *name, sx_item **map)
{
    if (!it || !name || !*name || !map)
        return SX_EINVAL;
    sx_item *m = sx_item_new();
    if (!m)
        return SX_ENOMEM;
    cl_val *slot = item_slot(it, name, strlen(name), true);
    if (!slot) {
        sx_item_free(m);
        return SX_ENOMEM;
    }
    slot->type = SX_MAP;
    slot->map = m;
    *map = m;
    return SX_OK;
}

int sx_item_set_list(sx_item *it, const char *name, sx_list **list)
{
    if (!it || !name || !*name || !list)
        return SX_EINVAL;
    sx_list *l = sx_list_new();
    if (!l)
        return SX_ENOMEM;
    cl_val *slot = item_slot(it, name, strlen(name), true);
    if (!slot) {
        sx_list_free(l);
        return SX_ENOMEM;
    }
    slot->type = SX_LIST;
    slot->list = l;
    *list = l;
    return SX_OK;
}

int sx_item_remove(sx_item *it, const char *name)
{
    if (!it || !name)
        return SX_EINVAL;
    long k = item_find(it, name);
    if (k < 0)
        return SX_ENOTFOUND;
    item_name_free(it, it->names[k]);
    item_val_clear(it, &it->vals[k]);
    size_t rest = it->n - (size_t)k - 1;
    memmove(&it->names[k], &it->names[k + 1], rest * sizeof *it->names);
    memmove(&it->vals[k], &it->vals[k + 1], rest * sizeof *it->vals);
    it->n--;
    return SX_OK;
}

sx_item *sx_item_clone(const sx_item *it)
{
    if (!it)
        return NULL;
    sx_item *c = sx_item_new();
    if (!c)
        return NULL;
    for (size_t k = 0; k < it->n; k++) {
        sx_value v;
        val_view(&it->vals[k], &v);
        if (sx_item_set_value(c, it->names[k], &v)) {
            sx_item_free(c);
            return NULL;
        }
    }
    return c;
}

int sx_item_get(const sx_item *it, const char *name, sx_value *v)
{
    if (!it || !name || !v)
        return SX_EINVAL;
    long k = item_find(it, name);
    if (k < 0)
        return SX_ENOTFOUND;
    val_view(&it->vals[k], v);
    return SX_OK;
}

int sx_item_get_int(const sx_item *it, const char *name, int64_t *out)
{
    sx_value v;
    int rc = sx_item_get(it, name, &v);
    if (rc)
        return rc;
    if (v.type != SX_INT)
        return SX_EINVAL;
    *out = v.i;
    return SX_OK;
}

int sx_item_get_double(const sx_item *it, const char *name, double *out)
{
    sx_value v;
    int rc = sx_item_get(it, name, &v);
    if (rc)
        return rc;
    if (v.type != SX_DOUBLE)
        return SX_EINVAL;
    *out = v.d;
    return SX_OK;
}

int sx_item_get_bool(const sx_item *it, const char *name, int *out)
{
    sx_value v;
    int rc = sx_item_get(it, name, &v);
    if (rc)
        return rc;
    if (v.type != SX_BOOL)
        return SX_EINVAL;
    *out = v.b;
    return SX_OK;
}

int sx_item_get_str(const sx_item *it, const char *name, const char **s, size_t *len)
{
    sx_value v;
    int rc = sx_item_get(it, name, &v);
    if (rc)
        return rc;
    if (v.type != SX_STR)
        return SX_EINVAL;
    *s = v.s;
    if (len)
        *len = v.len;
    return SX_OK;
}

size_t sx_item_count(const sx_item *it)
{
    return it ? it->n : 0;
}

int sx_item_attr(const sx_item *it, size_t i, const char **name, sx_value *v)
{
    if (!it || i >= it->n)
        return SX_EINVAL;
    if (name)
        *name = it->names[i];
    if (v)
        val_view(&it->vals[i], v);
    return SX_OK;
}

/* ---- lists ---- */

sx_list *sx_list_new(void)
{
    return calloc(1, sizeof(sx_list));
}

void sx_list_free(sx_list *l)
{
    if (!l)
        return;
    for (size_t k = 0; k < l->n; k++)
        val_clear(&l->vals[k]);
    free(l->vals);
    free(l);
}

static cl_val *list_slot(sx_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        cl_val *vals = realloc(l->vals, cap * sizeof *vals);
        if (!vals)
            return NULL;
        l->vals = vals;
        l->cap = cap;
    }
    memset(&l->vals[l->n], 0, sizeof(cl_val));
    return &l->vals[l->n++];
}

int sx_list_append(sx_list *l, const sx_value *v)
{
    if (!l || !v)
        return SX_EINVAL;
    cl_val tmp;
    int rc = val_from_view(&tmp, v);
    if (rc) {
        val_clear(&tmp);
        return rc;
    }
    cl_val *slot = list_slot(l);
    if (!slot) {
        val_clear(&tmp);
        return SX_ENOMEM;
    }
    *slot = tmp;
    return SX_OK;
}

int sx_list_append_map(sx_list *l, sx_item **map)
{
    if (!l || !map)
        return SX_EINVAL;
    sx_item *m = sx_item_new();
    cl_val *slot = m ? list_slot(l) : NULL;
    if (!slot) {
        sx_item_free(m);
        return SX_ENOMEM;
    }
    slot->type = SX_MAP;
    slot->map = m;
    *map = m;
    return SX_OK;
}

int sx_list_append_list(sx_list *l, sx_list **list)
{
    if (!l || !list)
        return SX_EINVAL;
    sx_list *n = sx_list_new();
    cl_val *slot = n ? list_slot(l) : NULL;
    if (!slot) {
        sx_list_free(n);
        return SX_ENOMEM;
    }
    slot->type = SX_LIST;
    slot->list = n;
    *list = n;
    return SX_OK;
}

size_t sx_list_len(const sx_list *l)
{
    return l ? l->n : 0;
}

int sx_list_at(const sx_list *l, size_t i, sx_value *v)
{
    if (!l || i >= l->n || !v)
        return SX_EINVAL;
    val_view(&l->vals[i], v);
    return SX_OK;
}

/* ---- msgpack form ---- */

static void val_encode(const cl_val *v, mp_buf *b)
{
    sx_value view;
    val_view(v, &view);
    cl_value_encode(&view, b);
}

int cl_value_encode(const sx_value *v, mp_buf *b)
{
    switch (v->type) {
    case SX_NULL: mp_put_nil(b); return SX_OK;
    case SX_BOOL: mp_put_bool(b, v->b != 0); return SX_OK;
    case SX_INT: mp_put_i64(b, v->i); return SX_OK;
    case SX_DOUBLE: mp_put_double(b, v->d); return SX_OK;
    case SX_STR: mp_put_str(b, v->s, v->len); return SX_OK;
    case SX_BIN: mp_put_bin(b, v->s, v->len); return SX_OK;
    case SX_LIST:
        if (!v->list)
            return SX_EINVAL;
        mp_put_array(b, (uint32_t)v->list->n);
        for (size_t k = 0; k < v->list->n; k++)
            val_encode(&v->list->vals[k], b);
        return SX_OK;
    case SX_MAP:
        if (!v->map)
            return SX_EINVAL;
        cl_item_encode(v->map, b);
        return SX_OK;
    }
    return SX_EINVAL;
}

void cl_item_encode(const sx_item *it, mp_buf *b)
{
    mp_put_map(b, (uint32_t)it->n);
    for (size_t k = 0; k < it->n; k++) {
        mp_put_cstr(b, it->names[k]);
        val_encode(&it->vals[k], b);
    }
}

int cl_item_bytes(const sx_item *it, uint8_t **p, size_t *n)
{
    mp_buf b;
    mp_buf_init(&b);
    if (it)
        cl_item_encode(it, &b);
    else
        mp_put_nil(&b);
    int rc = mp_buf_take(&b, p, n);
    mp_buf_free(&b);
    return rc;
}

int cl_items_encode(const sx_item *const *items, size_t n, mp_buf *b, mp_span *out, size_t *bad)
{
    size_t at = b->sb.size;
    mp_buf_reserve(b, n * 192); /* a guess: it grows past it as needed */
    for (size_t k = 0; k < n; k++) {
        if (!items[k]) {
            *bad = k;
            return SX_EINVAL;
        }
        size_t from = b->sb.size;
        cl_item_encode(items[k], b);
        if (b->oom)
            return SX_ENOMEM;
        out[k] = (mp_span){ NULL, b->sb.size - from };
    }
    /* only now: the buffer may have moved while it grew */
    for (size_t k = 0; k < n; k++) {
        out[k].p = (const uint8_t *)b->sb.data + at;
        at += out[k].n;
    }
    return SX_OK;
}

static int item_decode_body(mp_cur *c, uint32_t count, sx_item *it, int depth);

static int list_decode_body(mp_cur *c, uint32_t count, sx_list *l, int depth);

/* Copies [p, p+n) and a NUL to the block's free end *at. */
static char *blob_put(char **at, const void *p, size_t n)
{
    char *s = *at;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    *at = s + n + 1;
    return s;
}

/* Decodes one value from c into the zeroed slot v; a string or binary
 * value goes to the block at *at when at is not NULL (see
 * item_decode_top), else to an allocation of its own. */
static int val_decode(mp_cur *c, cl_val *v, int depth, char **at)
{
    mp_val m;
    if (depth > MP_MAX_DEPTH || mp_read(c, &m))
        return SX_EPROTO;
    switch (m.kind) {
    case MP_NIL: v->type = SX_NULL; return SX_OK;
    case MP_BOOL:
        v->type = SX_BOOL;
        v->b = m.b;
        return SX_OK;
    case MP_INT:
        v->type = SX_INT;
        v->i = m.i;
        return SX_OK;
    case MP_UINT:
        if (m.u > (uint64_t)INT64_MAX) {
            v->type = SX_DOUBLE; /* beyond int64: nearest double */
            v->d = (double)m.u;
        } else {
            v->type = SX_INT;
            v->i = (int64_t)m.u;
        }
        return SX_OK;
    case MP_DOUBLE:
        v->type = SX_DOUBLE;
        v->d = m.d;
        return SX_OK;
    case MP_STR:
    case MP_BIN:
        v->type = m.kind == MP_STR ? SX_STR : SX_BIN;
        v->s = at ? blob_put(at, m.s.p, m.s.n) : dup_bytes(m.s.p, m.s.n);
        v->len = m.s.n;
        return v->s ? SX_OK : SX_ENOMEM;
    case MP_ARRAY:
        v->type = SX_LIST;
        v->list = sx_list_new();
        if (!v->list)
            return SX_ENOMEM;
        return list_decode_body(c, m.count, v->list, depth + 1);
    case MP_MAP:
        v->type = SX_MAP;
        v->map = sx_item_new();
        if (!v->map)
            return SX_ENOMEM;
        return item_decode_body(c, m.count, v->map, depth + 1);
    default: return SX_EPROTO;
    }
}

static int list_decode_body(mp_cur *c, uint32_t count, sx_list *l, int depth)
{
    for (uint32_t k = 0; k < count; k++) {
        cl_val *slot = list_slot(l);
        if (!slot)
            return SX_ENOMEM;
        int rc = val_decode(c, slot, depth, NULL);
        if (rc)
            return rc;
    }
    return SX_OK;
}

static int item_decode_body(mp_cur *c, uint32_t count, sx_item *it, int depth)
{
    for (uint32_t k = 0; k < count; k++) {
        mp_span name;
        if (mp_read_str(c, &name) || name.n == 0)
            return SX_EPROTO;
        cl_val *slot = item_slot(it, (const char *)name.p, name.n, false);
        if (!slot)
            return SX_ENOMEM;
        int rc = val_decode(c, slot, depth, NULL);
        if (rc)
            return rc;
    }
    return SX_OK;
}

/* item_decode_body for a whole item (depth 1) of n encoded bytes: its
 * names and its string and binary values go to one block of n bytes
 * (each, with its NUL, takes no more room than its encoding, a header
 * byte at least), its arrays are sized once (count is bounded by n:
 * mp_read_map refuses more pairs than the bytes left could hold); nested
 * lists and maps are decoded as item_decode_body does. */
static int item_decode_top(mp_cur *c, uint32_t count, size_t n, sx_item *it)
{
    it->blob = malloc(n ? n : 1);
    it->names = malloc((count ? count : 1) * sizeof *it->names);
    it->vals = malloc((count ? count : 1) * sizeof *it->vals);
    if (!it->blob || !it->names || !it->vals)
        return SX_ENOMEM;
    it->blob_n = n;
    it->cap = count;
    char *at = it->blob;
    for (uint32_t k = 0; k < count; k++) {
        mp_span name;
        if (mp_read_str(c, &name) || name.n == 0)
            return SX_EPROTO;
        it->names[k] = blob_put(&at, name.p, name.n);
        cl_val *v = &it->vals[k];
        memset(v, 0, sizeof *v);
        it->n = k + 1;
        int rc = val_decode(c, v, 1, &at);
        if (rc)
            return rc;
    }
    return SX_OK;
}

int cl_item_decode(const uint8_t *p, size_t n, sx_item **out)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;
    if (mp_read_map(&c, &count))
        return SX_EPROTO;
    sx_item *it = sx_item_new();
    if (!it)
        return SX_ENOMEM;
    int rc = item_decode_top(&c, count, n, it);
    if (rc) {
        sx_item_free(it);
        return rc;
    }
    *out = it;
    return SX_OK;
}
