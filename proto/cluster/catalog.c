/*
 * catalog.c — the catalog's in-memory form, its msgpack encoding and its
 * mutations (see catalog.h for the wire layout).
 */
#include <stdlib.h>
#include <string.h>
#include "catalog.h"
#include "sx_errors.h"

static char *dupn(const void *p, size_t n)
{
    char *s = malloc(n + 1);

    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static char *dups(const char *s)
{
    return s ? dupn(s, strlen(s)) : NULL;
}

bool cat_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    if (n == 0 || n > CAT_MAX_NAME || strcmp(name, "primary") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static void free_strs(char **v, uint32_t n)
{
    if (v == NULL)
        return;
    for (uint32_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void index_free(cat_index *ix)
{
    free(ix->name);
    free_strs(ix->attrs, ix->nattrs);
    free_strs(ix->proj_attrs, ix->nproj);
    free(ix->done_parts);
    memset(ix, 0, sizeof(*ix));
}

static void table_free(cat_table *t)
{
    free(t->name);
    free(t->pk);
    free(t->sk);
    for (uint32_t i = 0; i < t->nindexes; i++)
        index_free(&t->indexes[i]);
    free(t->indexes);
    memset(t, 0, sizeof(*t));
}

void cat_free(cat_catalog *cat)
{
    if (cat == NULL)
        return;
    for (uint32_t i = 0; i < cat->ntables; i++)
        table_free(&cat->tables[i]);
    free(cat->tables);
    free(cat);
}

cat_catalog *cat_new(void)
{
    cat_catalog *c = calloc(1, sizeof(*c));

    if (c)
        c->next_id = 1;
    return c;
}

/* ---- encoding ---- */

static void put_strs(mp_buf *b, char *const *v, uint32_t n)
{
    mp_put_array(b, n);
    for (uint32_t i = 0; i < n; i++)
        mp_put_cstr(b, v[i]);
}

static const char *proj_name(cat_proj p)
{
    return p == CAT_PROJ_ALL ? "all" : p == CAT_PROJ_LIST ? "list" : "keys";
}

void cat_encode_index(const cat_index *ix, mp_buf *b)
{
    mp_put_map(b, 7);
    mp_put_cstr(b, "id");
    mp_put_u64(b, ix->id);
    mp_put_cstr(b, "name");
    mp_put_cstr(b, ix->name);
    mp_put_cstr(b, "attrs");
    put_strs(b, ix->attrs, ix->nattrs);
    mp_put_cstr(b, "proj");
    mp_put_cstr(b, proj_name(ix->proj));
    mp_put_cstr(b, "proj_attrs");
    put_strs(b, ix->proj_attrs, ix->nproj);
    mp_put_cstr(b, "state");
    mp_put_cstr(b, ix->state == CAT_READY ? "ready" : "building");
    mp_put_cstr(b, "done_parts");
    mp_put_array(b, ix->ndone);
    for (uint32_t i = 0; i < ix->ndone; i++)
        mp_put_u64(b, ix->done_parts[i]);
}

int cat_encode(const cat_catalog *cat, mp_buf *b)
{
    mp_put_map(b, 3);
    mp_put_cstr(b, "version");
    mp_put_u64(b, cat->version);
    mp_put_cstr(b, "next_id");
    mp_put_u64(b, cat->next_id);
    mp_put_cstr(b, "tables");
    mp_put_array(b, cat->ntables);
    for (uint32_t i = 0; i < cat->ntables; i++) {
        const cat_table *t = &cat->tables[i];
        mp_put_map(b, 5);
        mp_put_cstr(b, "id");
        mp_put_u64(b, t->id);
        mp_put_cstr(b, "name");
        mp_put_cstr(b, t->name);
        mp_put_cstr(b, "pk");
        mp_put_cstr(b, t->pk);
        mp_put_cstr(b, "sk");
        if (t->sk)
            mp_put_cstr(b, t->sk);
        else
            mp_put_nil(b);
        mp_put_cstr(b, "indexes");
        mp_put_array(b, t->nindexes);
        for (uint32_t j = 0; j < t->nindexes; j++)
            cat_encode_index(&t->indexes[j], b);
    }
    return b->oom ? SX_ENOMEM : 0;
}

/* ---- decoding ---- */

static int read_name(mp_cur *c, char **out)
{
    mp_span s;

    if (mp_read_str(c, &s) || s.n == 0 || s.n > CAT_MAX_NAME)
        return SX_EPROTO;
    *out = dupn(s.p, s.n);
    return *out ? 0 : SX_ENOMEM;
}

static int read_names(mp_cur *c, char ***out, uint32_t *n)
{
    uint32_t k;
    int rc;

    if (mp_read_array(c, &k) || k > CAT_MAX_ATTRS)
        return SX_EPROTO;
    *out = calloc(k ? k : 1, sizeof(char *));
    if (*out == NULL)
        return SX_ENOMEM;
    *n = k;
    for (uint32_t i = 0; i < k; i++)
        if ((rc = read_name(c, &(*out)[i])) != 0)
            return rc;
    return 0;
}

/* Marks map key number bit as seen; a repeated key is malformed (and would
 * leak the first value). Returns 0 or SX_EPROTO. */
static int key_once(uint32_t *seen, int bit)
{
    if (*seen & (1u << bit))
        return SX_EPROTO;
    *seen |= 1u << bit;
    return 0;
}

static int read_u32(mp_cur *c, uint32_t *out)
{
    uint64_t v;

    if (mp_read_u64(c, &v) || v > UINT32_MAX)
        return SX_EPROTO;
    *out = (uint32_t)v;
    return 0;
}

static int decode_index(mp_cur *c, cat_index *ix)
{
    uint32_t n, seen = 0;
    int rc = 0;

    if (mp_read_map(c, &n))
        return SX_EPROTO;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        mp_span k, s;
        if (mp_read_str(c, &k))
            return SX_EPROTO;
        if (mp_span_eq_cstr(k, "id"))
            rc = key_once(&seen, 0) ? SX_EPROTO : read_u32(c, &ix->id);
        else if (mp_span_eq_cstr(k, "name"))
            rc = key_once(&seen, 1) ? SX_EPROTO : read_name(c, &ix->name);
        else if (mp_span_eq_cstr(k, "attrs"))
            rc = key_once(&seen, 2) ? SX_EPROTO : read_names(c, &ix->attrs, &ix->nattrs);
        else if (mp_span_eq_cstr(k, "proj_attrs"))
            rc = key_once(&seen, 3) ? SX_EPROTO : read_names(c, &ix->proj_attrs, &ix->nproj);
        else if (mp_span_eq_cstr(k, "proj")) {
            if ((rc = mp_read_str(c, &s)) == 0)
                ix->proj = mp_span_eq_cstr(s, "all")    ? CAT_PROJ_ALL
                           : mp_span_eq_cstr(s, "list") ? CAT_PROJ_LIST
                                                        : CAT_PROJ_KEYS;
        } else if (mp_span_eq_cstr(k, "state")) {
            if ((rc = mp_read_str(c, &s)) == 0)
                ix->state = mp_span_eq_cstr(s, "ready") ? CAT_READY : CAT_BUILDING;
        } else if (mp_span_eq_cstr(k, "done_parts")) {
            uint32_t m;
            if (key_once(&seen, 4) || mp_read_array(c, &m))
                return SX_EPROTO;
            ix->done_parts = calloc(m ? m : 1, sizeof(uint64_t));
            if (ix->done_parts == NULL)
                return SX_ENOMEM;
            ix->ndone = m;
            for (uint32_t j = 0; j < m && rc == 0; j++)
                rc = mp_read_u64(c, &ix->done_parts[j]);
        } else
            rc = mp_skip(c);
    }
    if (rc == 0 && (ix->name == NULL || ix->nattrs == 0 || ix->id == 0))
        rc = SX_EPROTO;
    return rc;
}

static int decode_table(mp_cur *c, cat_table *t)
{
    uint32_t n, seen = 0;
    int rc = 0;

    if (mp_read_map(c, &n))
        return SX_EPROTO;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        mp_span k;
        if (mp_read_str(c, &k))
            return SX_EPROTO;
        if (mp_span_eq_cstr(k, "id"))
            rc = key_once(&seen, 0) ? SX_EPROTO : read_u32(c, &t->id);
        else if (mp_span_eq_cstr(k, "name"))
            rc = key_once(&seen, 1) ? SX_EPROTO : read_name(c, &t->name);
        else if (mp_span_eq_cstr(k, "pk"))
            rc = key_once(&seen, 2) ? SX_EPROTO : read_name(c, &t->pk);
        else if (mp_span_eq_cstr(k, "sk")) {
            if (key_once(&seen, 3))
                rc = SX_EPROTO;
            else if (!mp_try_nil(c))
                rc = read_name(c, &t->sk);
        } else if (mp_span_eq_cstr(k, "indexes")) {
            uint32_t m;
            if (key_once(&seen, 4) || mp_read_array(c, &m))
                return SX_EPROTO;
            t->indexes = calloc(m ? m : 1, sizeof(cat_index));
            if (t->indexes == NULL)
                return SX_ENOMEM;
            for (uint32_t j = 0; j < m && rc == 0; j++) {
                rc = decode_index(c, &t->indexes[j]);
                t->nindexes = j + 1;
            }
        } else
            rc = mp_skip(c);
    }
    if (rc == 0 && (t->name == NULL || t->pk == NULL || t->id == 0))
        rc = SX_EPROTO;
    return rc;
}

int cat_decode(const uint8_t *p, size_t n, cat_catalog **out)
{
    mp_cur c = mp_cur_make(p, n);
    cat_catalog *cat = cat_new();
    uint32_t m, seen = 0;
    int rc = 0;

    if (cat == NULL)
        return SX_ENOMEM;
    if (mp_read_map(&c, &m)) {
        cat_free(cat);
        return SX_EPROTO;
    }
    for (uint32_t i = 0; i < m && rc == 0; i++) {
        mp_span k;
        if (mp_read_str(&c, &k)) {
            rc = SX_EPROTO;
            break;
        }
        if (mp_span_eq_cstr(k, "version"))
            rc = key_once(&seen, 0) ? SX_EPROTO : mp_read_u64(&c, &cat->version);
        else if (mp_span_eq_cstr(k, "next_id"))
            rc = key_once(&seen, 1) ? SX_EPROTO : read_u32(&c, &cat->next_id);
        else if (mp_span_eq_cstr(k, "tables")) {
            uint32_t t;
            if (key_once(&seen, 2) || mp_read_array(&c, &t)) {
                rc = SX_EPROTO;
                break;
            }
            cat->tables = calloc(t ? t : 1, sizeof(cat_table));
            if (cat->tables == NULL) {
                rc = SX_ENOMEM;
                break;
            }
            for (uint32_t j = 0; j < t && rc == 0; j++) {
                rc = decode_table(&c, &cat->tables[j]);
                cat->ntables = j + 1;
            }
        } else
            rc = mp_skip(&c);
    }
    /* a catalog missing a field is corrupt, not empty (next_id must never
     * restart: ids are never reused) */
    if (rc == 0 && seen != 7u)
        rc = SX_EPROTO;
    if (rc) {
        cat_free(cat);
        return rc == SX_ENOMEM ? rc : SX_EPROTO;
    }
    *out = cat;
    return 0;
}

cat_catalog *cat_clone(const cat_catalog *cat)
{
    mp_buf b;
    cat_catalog *copy = NULL;

    mp_buf_init(&b);
    if (cat_encode(cat, &b) == 0 && cat_decode((const uint8_t *)b.sb.data, b.sb.size, &copy) != 0)
        copy = NULL;
    mp_buf_free(&b);
    return copy;
}

/* ---- lookups ---- */

static bool name_eq(const char *a, const char *name, size_t n)
{
    return strlen(a) == n && memcmp(a, name, n) == 0;
}

cat_table *cat_table_by_name(const cat_catalog *cat, const char *name, size_t n)
{
    for (uint32_t i = 0; i < cat->ntables; i++)
        if (name_eq(cat->tables[i].name, name, n))
            return &cat->tables[i];
    return NULL;
}

cat_table *cat_table_by_id(const cat_catalog *cat, uint32_t id)
{
    for (uint32_t i = 0; i < cat->ntables; i++)
        if (cat->tables[i].id == id)
            return &cat->tables[i];
    return NULL;
}

cat_index *cat_index_by_name(const cat_table *t, const char *name, size_t n)
{
    for (uint32_t i = 0; i < t->nindexes; i++)
        if (name_eq(t->indexes[i].name, name, n))
            return &t->indexes[i];
    return NULL;
}

cat_index *cat_index_by_id(const cat_catalog *cat, uint32_t id, cat_table **table)
{
    for (uint32_t i = 0; i < cat->ntables; i++)
        for (uint32_t j = 0; j < cat->tables[i].nindexes; j++)
            if (cat->tables[i].indexes[j].id == id) {
                if (table)
                    *table = &cat->tables[i];
                return &cat->tables[i].indexes[j];
            }
    return NULL;
}

/* ---- mutations ---- */

int cat_create_table(cat_catalog *cat, const char *name, const char *pk, const char *sk)
{
    cat_table *t, *v;

    if (!cat_name_ok(name) || !cat_name_ok(pk) || (sk && *sk && !cat_name_ok(sk)))
        return SX_EINVAL;
    if (sk && *sk && strcmp(sk, pk) == 0)
        return SX_EINVAL;
    if (cat_table_by_name(cat, name, strlen(name)))
        return SX_EEXIST;
    v = realloc(cat->tables, (cat->ntables + 1) * sizeof(cat_table));
    if (v == NULL)
        return SX_ENOMEM;
    cat->tables = v;
    t = &cat->tables[cat->ntables];
    memset(t, 0, sizeof(*t));
    t->name = dups(name);
    t->pk = dups(pk);
    t->sk = (sk && *sk) ? dups(sk) : NULL;
    if (!t->name || !t->pk || (sk && *sk && !t->sk)) {
        table_free(t);
        return SX_ENOMEM;
    }
    t->id = cat->next_id++;
    cat->ntables++;
    cat->version++;
    return 0;
}

static int copy_names(char ***out, const char *const *v, uint32_t n)
{
    *out = calloc(n ? n : 1, sizeof(char *));
    if (*out == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (((*out)[i] = dups(v[i])) == NULL)
            return SX_ENOMEM;
    return 0;
}

static bool names_ok(const char *const *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!cat_name_ok(v[i]))
            return false;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(v[i], v[j]) == 0)
                return false;
    }
    return true;
}

int cat_create_index(cat_catalog *cat, const char *table, const char *name,
                     const char *const *attrs, uint32_t nattrs, cat_proj proj,
                     const char *const *proj_attrs, uint32_t nproj)
{
    cat_table *t = cat_table_by_name(cat, table, strlen(table));
    cat_index *ix, *v;

    if (t == NULL)
        return SX_ENOTABLE;
    if (!cat_name_ok(name) || nattrs == 0 || nattrs > CAT_MAX_ATTRS || nproj > CAT_MAX_ATTRS ||
        !names_ok(attrs, nattrs) || !names_ok(proj_attrs, nproj) ||
        (proj == CAT_PROJ_LIST && nproj == 0))
        return SX_EINVAL;
    if (cat_index_by_name(t, name, strlen(name)))
        return SX_EEXIST;
    v = realloc(t->indexes, (t->nindexes + 1) * sizeof(cat_index));
    if (v == NULL)
        return SX_ENOMEM;
    t->indexes = v;
    ix = &t->indexes[t->nindexes];
    memset(ix, 0, sizeof(*ix));
    ix->name = dups(name);
    ix->proj = proj;
    ix->state = CAT_BUILDING;
    if (ix->name == NULL || copy_names(&ix->attrs, attrs, nattrs) ||
        copy_names(&ix->proj_attrs, proj == CAT_PROJ_LIST ? proj_attrs : NULL,
                   proj == CAT_PROJ_LIST ? nproj : 0)) {
        ix->nattrs = nattrs;
        ix->nproj = proj == CAT_PROJ_LIST ? nproj : 0;
        index_free(ix);
        return SX_ENOMEM;
    }
    ix->nattrs = nattrs;
    ix->nproj = proj == CAT_PROJ_LIST ? nproj : 0;
    ix->id = cat->next_id++;
    t->nindexes++;
    cat->version++;
    return 0;
}

int cat_drop_index(cat_catalog *cat, const char *table, const char *name)
{
    cat_table *t = cat_table_by_name(cat, table, strlen(table));
    cat_index *ix;
    uint32_t pos;

    if (t == NULL)
        return SX_ENOTABLE;
    ix = cat_index_by_name(t, name, strlen(name));
    if (ix == NULL)
        return SX_ENOINDEX;
    pos = (uint32_t)(ix - t->indexes);
    index_free(ix);
    memmove(&t->indexes[pos], &t->indexes[pos + 1], (t->nindexes - pos - 1) * sizeof(cat_index));
    t->nindexes--;
    cat->version++;
    return 0;
}

int cat_mark_backfilled(cat_catalog *cat, uint32_t index_id, uint64_t part, const uint64_t *parts,
                        uint32_t nparts)
{
    cat_index *ix = cat_index_by_id(cat, index_id, NULL);
    uint32_t done = 0;
    bool have = false;

    if (ix == NULL)
        return SX_ENOINDEX;
    for (uint32_t i = 0; i < ix->ndone; i++)
        have |= ix->done_parts[i] == part;
    if (!have) {
        uint64_t *v = realloc(ix->done_parts, (ix->ndone + 1) * sizeof(uint64_t));
        if (v == NULL)
            return SX_ENOMEM;
        ix->done_parts = v;
        ix->done_parts[ix->ndone++] = part;
    }
    for (uint32_t i = 0; i < nparts; i++)
        for (uint32_t j = 0; j < ix->ndone; j++)
            if (ix->done_parts[j] == parts[i]) {
                done++;
                break;
            }
    if (done == nparts)
        ix->state = CAT_READY;
    cat->version++;
    return 0;
}
