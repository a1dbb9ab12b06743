/*
 * item.c — items as msgpack maps: validation, attribute lookup, key and
 * index-tuple derivation, projections and equality filters (see item.h).
 */
#include <stdlib.h>
#include <string.h>
#include "item.h"
#include "sx_errors.h"

#define ITEM_MAX_ATTRS 4096

/* Orders attribute names by length, then bytes (qsort). */
static int name_cmp(const void *a, const void *b)
{
    const mp_span *x = a, *y = b;

    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->p, y->p, x->n);
}

int item_validate(const uint8_t *p, size_t n)
{
    mp_cur c = mp_cur_make(p, n);
    mp_span *names;
    uint32_t count;
    int rc = 0;

    if (n > SX_MAX_ITEM)
        return SX_ETOOBIG;
    if (mp_validate(p, n) || mp_read_map(&c, &count))
        return SX_EPROTO;
    if (count > ITEM_MAX_ATTRS)
        return SX_ETOOBIG;
    names = calloc(count ? count : 1, sizeof(mp_span));
    if (names == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < count && rc == 0; i++) {
        if (mp_read_str(&c, &names[i]) || names[i].n == 0 || names[i].n > CAT_MAX_NAME)
            rc = SX_EPROTO;
        else
            rc = mp_skip(&c);
    }
    /* a name twice: neighbours once sorted (not pairwise: an item of 4,096
     * attributes would cost the router ~8 million comparisons) */
    if (rc == 0 && count > 1) {
        qsort(names, count, sizeof(*names), name_cmp);
        for (uint32_t i = 1; i < count && rc == 0; i++)
            if (name_cmp(&names[i - 1], &names[i]) == 0)
                rc = SX_EPROTO;
    }
    free(names);
    return rc;
}

int item_get(const uint8_t *p, size_t n, const char *name, mp_span *val)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;

    if (mp_read_map(&c, &count))
        return SX_EPROTO;
    for (uint32_t i = 0; i < count; i++) {
        mp_span k;
        if (mp_read_str(&c, &k))
            return SX_EPROTO;
        if (mp_span_eq_cstr(k, name))
            return mp_read_raw(&c, val);
        if (mp_skip(&c))
            return SX_EPROTO;
    }
    return SX_ENOTFOUND;
}

int item_view_parse(item_view *v, const uint8_t *p, size_t n)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;

    v->p = p;
    v->n = n;
    v->count = 0;
    v->attr = v->inl;
    if (mp_read_map(&c, &count))
        return SX_EPROTO;
    if (count > ITEM_MAX_ATTRS)
        return SX_ETOOBIG;
    if (count > ITEM_VIEW_INLINE) {
        if (count > v->heap_cap) {
            mp_span *h = realloc(v->heap, 2 * (size_t)count * sizeof(*h));

            if (h == NULL)
                return SX_ENOMEM;
            v->heap = h;
            v->heap_cap = count;
        }
        v->attr = v->heap;
    }
    for (uint32_t i = 0; i < count; i++)
        if (mp_read_str(&c, &v->attr[2 * i]) || mp_read_raw(&c, &v->attr[2 * i + 1]))
            return SX_EPROTO;
    if (mp_left(&c) != 0)
        return SX_EPROTO;
    v->count = count;
    return 0;
}

void item_view_free(item_view *v)
{
    free(v->heap);
    v->heap = NULL;
    v->heap_cap = 0;
    v->attr = v->inl;
    v->count = 0;
}

/* Where an item's attributes are looked up: its bytes (item_get, which
 * stops at the attribute found) or a view read before (v). */
typedef struct attr_src {
    const item_view *v;
    const uint8_t *p;
    size_t n;
} attr_src;

static int src_get(const attr_src *s, const char *name, mp_span *val)
{
    if (s->v == NULL)
        return item_get(s->p, s->n, name, val);
    for (uint32_t i = 0; i < s->v->count; i++)
        if (mp_span_eq_cstr(s->v->attr[2 * i], name)) {
            *val = s->v->attr[2 * i + 1];
            return 0;
        }
    return SX_ENOTFOUND;
}

/* Encodes the scalar value of attribute name into key. Missing → SX_ENOTFOUND,
 * non-scalar or null → SX_EKEY. */
static int encode_attr(const attr_src *s, const char *name, tup_bytes *key)
{
    mp_span v;
    mp_cur c;
    int rc = src_get(s, name, &v);

    if (rc)
        return rc;
    c = mp_cur_make(v.p, v.n);
    if (mp_try_nil(&c))
        return SX_EKEY;
    return tup_encode_mp(key, &c);
}

static int primary_key(const cat_table *t, const attr_src *s, tup_bytes *pk, size_t *pk_len)
{
    size_t start = pk->n;
    int rc = encode_attr(s, t->pk, pk);

    if (rc == SX_ENOTFOUND)
        return SX_EKEY;
    if (rc)
        return rc;
    *pk_len = pk->n - start;
    if (t->sk) {
        rc = encode_attr(s, t->sk, pk);
        if (rc == SX_ENOTFOUND)
            return SX_EKEY;
        if (rc)
            return rc;
    }
    return pk->n - start > SX_MAX_KEY ? SX_EKEY : 0;
}

int item_primary_key(const cat_table *t, const uint8_t *p, size_t n, tup_bytes *pk, size_t *pk_len)
{
    attr_src s = { NULL, p, n };

    return primary_key(t, &s, pk, pk_len);
}

static int index_tuple(const cat_table *t, const cat_index *ix, const attr_src *s, tup_bytes *key)
{
    size_t start = key->n, pk_len;
    int rc;

    for (uint32_t i = 0; i < ix->nattrs; i++) {
        rc = encode_attr(s, ix->attrs[i], key);
        if (rc == SX_EKEY)
            return SX_ENOTFOUND; /* null, list or map: not in the index */
        if (rc)
            return rc;
    }
    rc = primary_key(t, s, key, &pk_len);
    if (rc)
        return rc;
    return key->n - start > SX_MAX_KEY ? SX_EKEY : 0;
}

int item_index_tuple(const cat_table *t, const cat_index *ix, const uint8_t *p, size_t n,
                     tup_bytes *key)
{
    attr_src s = { NULL, p, n };

    return index_tuple(t, ix, &s, key);
}

int item_index_tuple_view(const cat_table *t, const cat_index *ix, const item_view *v,
                          tup_bytes *key)
{
    attr_src s = { v, NULL, 0 };

    return index_tuple(t, ix, &s, key);
}

static bool name_in(mp_span name, char *const *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (mp_span_eq_cstr(name, v[i]))
            return true;
    return false;
}

static bool is_key_attr(const cat_table *t, mp_span name)
{
    return mp_span_eq_cstr(name, t->pk) || (t->sk && mp_span_eq_cstr(name, t->sk));
}

/* Writes a map of the item's attributes accepted by keep(). */
typedef bool (*keep_fn)(const void *ctx, mp_span name);

static int filter_map(const item_view *v, keep_fn keep, const void *ctx, mp_buf *out)
{
    uint32_t kept = 0;

    for (uint32_t i = 0; i < v->count; i++)
        kept += keep(ctx, v->attr[2 * i]);
    mp_put_map(out, kept);
    for (uint32_t i = 0; i < v->count; i++)
        if (keep(ctx, v->attr[2 * i])) {
            mp_put_str(out, v->attr[2 * i].p, v->attr[2 * i].n);
            mp_put_raw(out, v->attr[2 * i + 1].p, v->attr[2 * i + 1].n);
        }
    return out->oom ? SX_ENOMEM : 0;
}

/* filter_map on the item p..n, read into a view first. */
static int filter_item(const uint8_t *p, size_t n, keep_fn keep, const void *ctx, mp_buf *out)
{
    item_view v = { 0 };
    int rc = item_view_parse(&v, p, n);

    if (rc == 0)
        rc = filter_map(&v, keep, ctx, out);
    item_view_free(&v);
    return rc == SX_ETOOBIG ? SX_EPROTO : rc;
}

typedef struct proj_ctx {
    const cat_table *t;
    const cat_index *ix;
    char *const *names;
    uint32_t nnames;
} proj_ctx;

static bool keep_proj(const void *vctx, mp_span name)
{
    const proj_ctx *x = vctx;

    return is_key_attr(x->t, name) || name_in(name, x->ix->attrs, x->ix->nattrs) ||
           (x->ix->proj == CAT_PROJ_LIST && name_in(name, x->ix->proj_attrs, x->ix->nproj));
}

static bool keep_names(const void *vctx, mp_span name)
{
    const proj_ctx *x = vctx;

    return is_key_attr(x->t, name) || name_in(name, x->names, x->nnames);
}

int item_project_view(const cat_table *t, const cat_index *ix, const item_view *v, mp_buf *out)
{
    proj_ctx x = { t, ix, NULL, 0 };

    if (ix->proj == CAT_PROJ_ALL) {
        mp_put_raw(out, v->p, v->n); /* read whole by item_view_parse */
        return out->oom ? SX_ENOMEM : 0;
    }
    return filter_map(v, keep_proj, &x, out);
}

int item_project(const cat_table *t, const cat_index *ix, const uint8_t *p, size_t n, mp_buf *out)
{
    item_view v = { 0 };
    int rc = item_view_parse(&v, p, n);

    if (rc == 0)
        rc = item_project_view(t, ix, &v, out);
    item_view_free(&v);
    return rc == SX_ETOOBIG ? SX_EPROTO : rc;
}

int item_select(const cat_table *t, const uint8_t *p, size_t n, char *const *names, uint32_t nnames,
                mp_buf *out)
{
    proj_ctx x = { t, NULL, names, nnames };

    return filter_item(p, n, keep_names, &x, out);
}

bool item_covers(const cat_table *t, const cat_index *ix, char *const *names, uint32_t nnames)
{
    if (ix->proj == CAT_PROJ_ALL)
        return true;
    if (nnames == 0)
        return false;
    for (uint32_t i = 0; i < nnames; i++) {
        mp_span name = { (const uint8_t *)names[i], strlen(names[i]) };
        proj_ctx x = { t, ix, NULL, 0 };
        if (!keep_proj(&x, name))
            return false;
    }
    return true;
}

int item_matches(const uint8_t *item, size_t n, const uint8_t *where, size_t wn)
{
    mp_cur c = mp_cur_make(where, wn);
    attr_src src = { NULL, item, n };
    uint32_t count;
    int result = 1;

    if (mp_read_map(&c, &count))
        return -SX_EINVAL;
    for (uint32_t i = 0; i < count; i++) {
        tup_bytes want = { 0 }, have = { 0 };
        char name[CAT_MAX_NAME + 1];
        mp_span k;
        int rc;

        if (mp_read_str(&c, &k) || k.n == 0 || k.n > CAT_MAX_NAME)
            return -SX_EINVAL;
        memcpy(name, k.p, k.n);
        name[k.n] = '\0';
        rc = tup_encode_mp(&want, &c);
        if (rc) {
            tup_bytes_free(&want);
            return -(rc == SX_ENOMEM ? SX_ENOMEM : SX_EINVAL);
        }
        rc = encode_attr(&src, name, &have);
        if (rc == 0 && (want.n != have.n || memcmp(want.p, have.p, want.n) != 0))
            result = 0;
        else if (rc == SX_ENOTFOUND || rc == SX_EKEY)
            result = 0;
        else if (rc) {
            tup_bytes_free(&want);
            tup_bytes_free(&have);
            return -rc;
        }
        tup_bytes_free(&want);
        tup_bytes_free(&have);
    }
    return result;
}
