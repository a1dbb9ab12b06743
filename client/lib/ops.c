/*
 * ops.c — catalog calls (tables, indexes) and point operations (put, get,
 * delete) of libshardex.
 */
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include "catalog.h"
#include "internal.h"

/* A catalog change's request id (msg.h: rid): random, and the same bytes on
 * every retry of the call (cl_call sends one encoding to each router). */
#define RID_BYTES 16

/* Fills an allocated array of string views from C strings. */
static int bufs_from(const char *const *v, size_t n, msg_spans *out)
{
    out->n = 0;
    out->v = NULL;
    if (n == 0)
        return SX_OK;
    if (!v || n > MSG_MAX_LIST)
        return SX_EINVAL;
    out->v = calloc(n, sizeof *out->v);
    if (!out->v)
        return SX_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        if (!v[k])
            return SX_EINVAL;
        out->v[k] = cl_cstr_buf(v[k]);
    }
    out->n = (uint32_t)n;
    return SX_OK;
}

int sx_table_create(sx_client *c, const char *table, const char *pk, const char *sk)
{
    if (!c)
        return SX_EINVAL;
    if (!table || !*table || !pk || !*pk)
        return cl_fail(c, SX_EINVAL, "table name and partition key are required");
    msg_TABLE_CREATE_req req = { 0 };
    msg_TABLE_CREATE_rep rep = { 0 };
    uint8_t *frame, rid[RID_BYTES];
    randombytes_buf(rid, sizeof rid);
    req.rid = (mp_span){ rid, sizeof rid };
    req.table = cl_cstr_buf(table);
    req.pk = cl_cstr_buf(pk);
    req.sk = cl_cstr_buf(sk);
    int rc = cl_call(c, MSG_TABLE_CREATE, &req, &rep, &frame, 0);
    if (!rc)
        msg_free_rep(MSG_TABLE_CREATE, &rep);
    free(frame);
    return rc;
}

int sx_table_key(sx_client *c, const char *table, char **pk, char **sk)
{
    if (!c)
        return SX_EINVAL;
    if (!table || !*table || !pk || !sk)
        return cl_fail(c, SX_EINVAL, "table name and both outputs are required");
    *pk = *sk = NULL;
    msg_CATALOG_req req = { 0 };
    msg_CATALOG_rep rep = { 0 };
    cat_catalog *cat = NULL;
    uint8_t *frame;
    int rc = cl_call(c, MSG_CATALOG, &req, &rep, &frame, 0);
    if (rc)
        return rc;
    if (cat_decode(rep.catalog.p, rep.catalog.n, &cat) != 0) {
        rc = cl_fail(c, SX_EPROTO, "malformed catalog from the router");
        goto out;
    }
    const cat_table *t = cat_table_by_name(cat, table, strlen(table));
    if (!t) {
        rc = cl_fail(c, SX_ENOTABLE, "no such table: %s", table);
        goto out;
    }
    *pk = strdup(t->pk);
    *sk = t->sk ? strdup(t->sk) : NULL;
    if (!*pk || (t->sk && !*sk)) {
        free(*pk);
        free(*sk);
        *pk = *sk = NULL;
        rc = cl_fail(c, SX_ENOMEM, "out of memory");
    }
out:
    cat_free(cat);
    msg_free_rep(MSG_CATALOG, &rep);
    free(frame);
    return rc;
}

int sx_index_create(sx_client *c, const char *table, const char *index, const char *const *attrs,
                    size_t nattrs, sx_projection proj, const char *const *proj_attrs, size_t nproj)
{
    if (!c)
        return SX_EINVAL;
    if (!table || !index || nattrs == 0)
        return cl_fail(c, SX_EINVAL, "table, index and at least one attribute are required");
    msg_INDEX_CREATE_req req = { 0 };
    msg_INDEX_CREATE_rep rep = { 0 };
    uint8_t *frame = NULL, rid[RID_BYTES];
    randombytes_buf(rid, sizeof rid);
    req.rid = (mp_span){ rid, sizeof rid };
    req.table = cl_cstr_buf(table);
    req.index = cl_cstr_buf(index);
    req.proj = (uint64_t)proj;
    int rc = bufs_from(attrs, nattrs, &req.attrs);
    if (!rc && proj == SX_PROJ_LIST)
        rc = bufs_from(proj_attrs, nproj, &req.proj_attrs);
    if (rc) {
        cl_fail(c, rc, "bad index attributes");
        goto out;
    }
    rc = cl_call(c, MSG_INDEX_CREATE, &req, &rep, &frame, 0);
    if (!rc)
        msg_free_rep(MSG_INDEX_CREATE, &rep);
out:
    free(req.attrs.v);
    free(req.proj_attrs.v);
    free(frame);
    return rc;
}

int sx_index_drop(sx_client *c, const char *table, const char *index)
{
    if (!c)
        return SX_EINVAL;
    if (!table || !index)
        return cl_fail(c, SX_EINVAL, "table and index are required");
    msg_INDEX_DROP_req req = { 0 };
    msg_INDEX_DROP_rep rep = { 0 };
    uint8_t *frame, rid[RID_BYTES];
    randombytes_buf(rid, sizeof rid);
    req.rid = (mp_span){ rid, sizeof rid };
    req.table = cl_cstr_buf(table);
    req.index = cl_cstr_buf(index);
    int rc = cl_call(c, MSG_INDEX_DROP, &req, &rep, &frame, 0);
    if (!rc)
        msg_free_rep(MSG_INDEX_DROP, &rep);
    free(frame);
    return rc;
}

void sx_index_list_free(sx_index_info *list, size_t n)
{
    if (!list)
        return;
    for (size_t k = 0; k < n; k++) {
        free(list[k].name);
        for (size_t j = 0; j < list[k].nattrs; j++)
            free(list[k].attrs[j]);
        for (size_t j = 0; j < list[k].nproj; j++)
            free(list[k].proj_attrs[j]);
        free(list[k].attrs);
        free(list[k].proj_attrs);
    }
    free(list);
}

/* Reads an array of strings into a malloc'd array of C strings. */
static int read_strs(mp_cur *cur, char ***out, size_t *n)
{
    uint32_t count;
    if (mp_try_nil(cur)) {
        *n = 0;
        return SX_OK;
    }
    if (mp_read_array(cur, &count))
        return SX_EPROTO;
    char **v = calloc(count ? count : 1, sizeof *v);
    if (!v)
        return SX_ENOMEM;
    *out = v;
    for (uint32_t k = 0; k < count; k++) {
        mp_span s;
        if (mp_read_str(cur, &s))
            return SX_EPROTO;
        v[k] = strndup((const char *)s.p, s.n);
        if (!v[k])
            return SX_ENOMEM;
        *n = k + 1;
    }
    return SX_OK;
}

/* Decodes one index descriptor map (catalog form) into ix. */
static int index_info_decode(mp_span raw, sx_index_info *ix)
{
    mp_cur cur = mp_cur_make(raw.p, raw.n);
    uint32_t count;
    if (mp_read_map(&cur, &count))
        return SX_EPROTO;
    for (uint32_t k = 0; k < count; k++) {
        mp_span key;
        mp_val v;
        int rc = SX_OK;
        if (mp_read_str(&cur, &key))
            return SX_EPROTO;
        if (mp_span_eq_cstr(key, "name") || mp_span_eq_cstr(key, "proj") ||
            mp_span_eq_cstr(key, "state")) {
            if (mp_read(&cur, &v) || v.kind == MP_ARRAY || v.kind == MP_MAP)
                return SX_EPROTO; /* these are scalars */
            if (mp_span_eq_cstr(key, "name") && v.kind == MP_STR) {
                if (ix->name)
                    return SX_EPROTO; /* repeated key */
                ix->name = strndup((const char *)v.s.p, v.s.n);
                if (!ix->name)
                    return SX_ENOMEM;
            } else if (mp_span_eq_cstr(key, "proj")) {
                if (v.kind == MP_STR)
                    ix->proj = mp_span_eq_cstr(v.s, "all")    ? SX_PROJ_ALL
                               : mp_span_eq_cstr(v.s, "list") ? SX_PROJ_LIST
                                                              : SX_PROJ_KEYS;
                else if (v.kind == MP_UINT && v.u <= SX_PROJ_LIST)
                    ix->proj = (sx_projection)v.u;
            } else if (mp_span_eq_cstr(key, "state")) {
                ix->ready = (v.kind == MP_STR && mp_span_eq_cstr(v.s, "ready")) ||
                            (v.kind == MP_UINT && v.u == 1);
            }
        } else if (mp_span_eq_cstr(key, "attrs")) {
            rc = ix->attrs ? SX_EPROTO : read_strs(&cur, &ix->attrs, &ix->nattrs);
        } else if (mp_span_eq_cstr(key, "proj_attrs")) {
            rc = ix->proj_attrs ? SX_EPROTO : read_strs(&cur, &ix->proj_attrs, &ix->nproj);
        } else if (mp_skip(&cur)) {
            return SX_EPROTO;
        }
        if (rc)
            return rc;
    }
    if (!ix->name)
        return SX_EPROTO;
    return SX_OK;
}

int sx_index_list(sx_client *c, const char *table, sx_index_info **out, size_t *n)
{
    if (!c || !out || !n)
        return SX_EINVAL;
    if (!table)
        return cl_fail(c, SX_EINVAL, "table is required");
    msg_INDEX_LIST_req req = { 0 };
    msg_INDEX_LIST_rep rep = { 0 };
    uint8_t *frame;
    req.table = cl_cstr_buf(table);
    int rc = cl_call(c, MSG_INDEX_LIST, &req, &rep, &frame, 0);
    if (rc)
        return rc;
    sx_index_info *list = calloc(rep.indexes.n ? rep.indexes.n : 1, sizeof *list);
    if (!list) {
        rc = cl_fail(c, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < rep.indexes.n; k++) {
        rc = index_info_decode(rep.indexes.v[k], &list[k]);
        if (rc) {
            sx_index_list_free(list, rep.indexes.n);
            cl_fail(c, rc, "malformed index description from the router");
            goto out;
        }
    }
    *out = list;
    *n = rep.indexes.n;
out:
    msg_free_rep(MSG_INDEX_LIST, &rep);
    free(frame);
    return rc;
}

int sx_put_batch(sx_client *c, const char *table, const sx_item *const *items, size_t n,
                 uint64_t *versions)
{
    if (!c)
        return SX_EINVAL;
    if (!table || (n && !items) || n > MSG_MAX_LIST)
        return cl_fail(c, SX_EINVAL, "bad put arguments");
    if (n == 0) {
        c->errmsg[0] = '\0';
        return SX_OK;
    }
    msg_PUT_req req = { 0 };
    msg_PUT_rep rep = { 0 };
    mp_buf ib;
    uint8_t *frame = NULL;
    size_t bad = 0;
    req.table = cl_cstr_buf(table);
    req.deadline_ms = CL_DEADLINE_UNSET;
    req.items.v = calloc(n, sizeof *req.items.v);
    if (!req.items.v)
        return cl_fail(c, SX_ENOMEM, "out of memory");
    req.items.n = (uint32_t)n;
    mp_buf_init(&ib);
    int rc = cl_items_encode(items, n, &ib, req.items.v, &bad);
    if (rc) {
        if (rc == SX_EINVAL)
            cl_fail(c, rc, "item %zu is NULL", bad);
        else
            cl_fail(c, rc, "out of memory");
        goto out;
    }
    rc = cl_call(c, MSG_PUT, &req, &rep, &frame, 0);
    if (rc)
        goto out;
    if (rep.versions.n != n)
        rc = cl_fail(c, SX_EPROTO, "router acknowledged %u of %zu items", rep.versions.n, n);
    else if (versions)
        memcpy(versions, rep.versions.v, n * sizeof *versions);
    msg_free_rep(MSG_PUT, &rep);
out:
    mp_buf_free(&ib);
    free(req.items.v);
    free(frame);
    return rc;
}

int sx_put(sx_client *c, const char *table, const sx_item *item, uint64_t *version)
{
    return sx_put_batch(c, table, &item, 1, version);
}

int sx_get(sx_client *c, const char *table, const sx_item *key, sx_item **out)
{
    if (!c || !out)
        return SX_EINVAL;
    if (!table || !key)
        return cl_fail(c, SX_EINVAL, "table and key are required");
    msg_GET_req req = { 0 };
    msg_GET_rep rep = { 0 };
    uint8_t *frame = NULL, *kb = NULL;
    size_t kn;
    int rc = cl_item_bytes(key, &kb, &kn);
    if (rc)
        return cl_fail(c, rc, "out of memory");
    req.table = cl_cstr_buf(table);
    req.key.p = kb;
    req.key.n = kn;
    rc = cl_call(c, MSG_GET, &req, &rep, &frame, 0);
    if (rc)
        goto out;
    if (rep.item.n == 0 || rep.item.p[0] == 0xc0) { /* nil: absent */
        rc = cl_fail(c, SX_ENOTFOUND, "not found");
    } else {
        rc = cl_item_decode(rep.item.p, rep.item.n, out);
        if (rc)
            cl_fail(c, rc, "malformed item from the router");
    }
    msg_free_rep(MSG_GET, &rep);
out:
    free(kb);
    free(frame);
    return rc;
}

int sx_delete(sx_client *c, const char *table, const sx_item *key)
{
    if (!c)
        return SX_EINVAL;
    if (!table || !key)
        return cl_fail(c, SX_EINVAL, "table and key are required");
    msg_DELETE_req req = { 0 };
    msg_DELETE_rep rep = { 0 };
    uint8_t *frame = NULL, *kb = NULL;
    size_t kn;
    int rc = cl_item_bytes(key, &kb, &kn);
    if (rc)
        return cl_fail(c, rc, "out of memory");
    req.deadline_ms = CL_DEADLINE_UNSET;
    req.table = cl_cstr_buf(table);
    req.key.p = kb;
    req.key.n = kn;
    rc = cl_call(c, MSG_DELETE, &req, &rep, &frame, 0);
    if (!rc)
        msg_free_rep(MSG_DELETE, &rep);
    free(kb);
    free(frame);
    return rc;
}
