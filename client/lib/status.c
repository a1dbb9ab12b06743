/*
 * status.c — sx_status: the router's STATUS reply (one msgpack value per
 * node) rendered as one JSON text, and the msgpack → JSON converter behind
 * it (bounded cursor, depth-limited; binaries as {"$bin":"<base64>"}).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

void cl_str_add(cl_str *s, const char *p, size_t n)
{
    if (s->oom)
        return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *q = realloc(s->p, cap);
        if (!q) {
            s->oom = true;
            return;
        }
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = '\0';
}

static void str_addz(cl_str *s, const char *z)
{
    cl_str_add(s, z, strlen(z));
}

/* Appends a JSON string literal (bytes escaped; invalid UTF-8 passes as is). */
static void json_quote(cl_str *s, const uint8_t *p, size_t n)
{
    cl_str_add(s, "\"", 1);
    for (size_t k = 0; k < n; k++) {
        uint8_t ch = p[k];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            cl_str_add(s, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            cl_str_add(s, esc, 6);
        } else {
            cl_str_add(s, (const char *)&p[k], 1);
        }
    }
    cl_str_add(s, "\"", 1);
}

int cl_json_from_mp(mp_cur *cur, cl_str *out, int depth)
{
    mp_val v;
    char num[48];
    if (depth > MP_MAX_DEPTH || mp_read(cur, &v))
        return SX_EPROTO;
    switch (v.kind) {
    case MP_NIL: str_addz(out, "null"); break;
    case MP_BOOL: str_addz(out, v.b ? "true" : "false"); break;
    case MP_INT:
        snprintf(num, sizeof num, "%" PRId64, v.i);
        str_addz(out, num);
        break;
    case MP_UINT:
        snprintf(num, sizeof num, "%" PRIu64, v.u);
        str_addz(out, num);
        break;
    case MP_DOUBLE:
        if (isfinite(v.d))
            snprintf(num, sizeof num, "%.17g", v.d);
        else
            snprintf(num, sizeof num, "null");
        str_addz(out, num);
        break;
    case MP_STR: json_quote(out, v.s.p, v.s.n); break;
    case MP_BIN: {
        char *b = cl_b64_encode(v.s.p, v.s.n);
        if (!b)
            return SX_ENOMEM;
        str_addz(out, "{\"$bin\":\"");
        str_addz(out, b);
        str_addz(out, "\"}");
        free(b);
        break;
    }
    case MP_ARRAY:
        cl_str_add(out, "[", 1);
        for (uint32_t k = 0; k < v.count; k++) {
            if (k)
                cl_str_add(out, ",", 1);
            int rc = cl_json_from_mp(cur, out, depth + 1);
            if (rc)
                return rc;
        }
        cl_str_add(out, "]", 1);
        break;
    case MP_MAP:
        cl_str_add(out, "{", 1);
        for (uint32_t k = 0; k < v.count; k++) {
            mp_val key;
            if (k)
                cl_str_add(out, ",", 1);
            if (mp_read(cur, &key))
                return SX_EPROTO;
            if (key.kind == MP_STR) {
                json_quote(out, key.s.p, key.s.n);
            } else if (key.kind == MP_UINT || key.kind == MP_INT) {
                snprintf(num, sizeof num, "\"%" PRId64 "\"",
                         key.kind == MP_INT ? key.i : (int64_t)key.u);
                str_addz(out, num);
            } else {
                return SX_EPROTO;
            }
            cl_str_add(out, ":", 1);
            int rc = cl_json_from_mp(cur, out, depth + 1);
            if (rc)
                return rc;
        }
        cl_str_add(out, "}", 1);
        break;
    default: return SX_EPROTO;
    }
    return out->oom ? SX_ENOMEM : SX_OK;
}

int sx_status(sx_client *c, char **json)
{
    if (!c || !json)
        return SX_EINVAL;
    msg_STATUS_req req = { 0 };
    msg_STATUS_rep rep = { 0 };
    uint8_t *frame = NULL;
    int rc = cl_call(c, MSG_STATUS, &req, &rep, &frame, 0);
    if (rc)
        return rc;
    cl_str s = { 0 };
    str_addz(&s, "{\"nodes\":[");
    for (uint32_t k = 0; k < rep.nodes.n && !rc; k++) {
        mp_cur cur = mp_cur_make(rep.nodes.v[k].p, rep.nodes.v[k].n);
        if (k)
            cl_str_add(&s, ",", 1);
        rc = cl_json_from_mp(&cur, &s, 0);
    }
    str_addz(&s, "]}");
    if (!rc && s.oom)
        rc = SX_ENOMEM;
    msg_free_rep(MSG_STATUS, &rep);
    free(frame);
    if (rc) {
        free(s.p);
        return cl_fail(c, rc, "malformed status reply: %s", sx_strerror(rc));
    }
    *json = s.p;
    return SX_OK;
}
