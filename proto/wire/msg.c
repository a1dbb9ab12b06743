/*
 * msg.c — the table-driven codec for every message in msg.h.
 *
 * Each message's field list expands (X-macros) into a descriptor table of
 * {kind, offset}; one encoder and one decoder walk those tables. Decoding
 * goes through the bounded cursor (mp.h), so list counts are checked against
 * the bytes left before any allocation.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "msg.h"
#include "sx_errors.h"

/* (the lists last: struct_size and free_fields test kind >= K_STRS) */
typedef enum {
    K_U64,
    K_OU64,
    K_STR,
    K_BIN,
    K_OBIN,
    K_RAW,
    K_U64S,
    K_STRS,
    K_BINS,
    K_RAWS
} field_kind;

typedef struct field_desc {
    field_kind kind;
    size_t off;
} field_desc;

typedef struct msg_desc {
    const char *name;
    const field_desc *req, *rep;
    int nreq, nrep; /* counts exclude the leading placeholder */
} msg_desc;

/* Tables start with a placeholder entry so that messages without fields
 * still make valid arrays; walkers skip index 0. */
/* clang-format off */
#define FD_ENTRY(T, kind, fname) { K_##kind, offsetof(T, fname) },
#define FD_TABLES(name, num)                                                  \
    static const field_desc req_##name[] = {                                  \
        { K_U64, 0 }, MSG_##name##_REQ(FD_ENTRY, msg_##name##_req) };         \
    static const field_desc rep_##name[] = {                                  \
        { K_U64, 0 }, MSG_##name##_REP(FD_ENTRY, msg_##name##_rep) };
SX_MESSAGES(FD_TABLES)
#undef FD_TABLES
#undef FD_ENTRY
/* clang-format on */

static const msg_desc *desc_of(msg_type t)
{
/* clang-format off */
#define FD_CASE(name, num)                                                    \
    case MSG_##name: {                                                        \
        static const msg_desc d = {                                           \
            #name, req_##name, rep_##name,                                    \
            (int)(sizeof(req_##name) / sizeof(req_##name[0])) - 1,            \
            (int)(sizeof(rep_##name) / sizeof(rep_##name[0])) - 1 };          \
        return &d;                                                            \
    }
    /* clang-format on */
    switch (t) {
        SX_MESSAGES(FD_CASE)
    default: return NULL;
    }
#undef FD_CASE
}

const char *msg_name(msg_type t)
{
    const msg_desc *d = desc_of(t);

    return d ? d->name : "?";
}

/* ---- encoding ---- */

static void put_bufs(mp_buf *out, const msg_spans *l, field_kind each)
{
    mp_put_array(out, l->n);
    for (uint32_t i = 0; i < l->n; i++) {
        const mp_span *b = &l->v[i];
        if (each == K_STR)
            mp_put_str(out, b->p, b->n);
        else if (each == K_BIN)
            mp_put_bin(out, b->p, b->n);
        else if (b->n == 0)
            mp_put_nil(out); /* an empty RAW is sent as nil */
        else
            mp_put_raw(out, b->p, b->n);
    }
}

static void encode_fields(const field_desc *f, int n, const void *s, mp_buf *out)
{
    const char *base = s;

    for (int i = 1; i <= n; i++) {
        const void *fp = base + f[i].off;
        switch (f[i].kind) {
        case K_U64:
        case K_OU64: mp_put_u64(out, *(const uint64_t *)fp); break;
        case K_STR: mp_put_str(out, ((const mp_span *)fp)->p, ((const mp_span *)fp)->n); break;
        case K_BIN:
        case K_OBIN: mp_put_bin(out, ((const mp_span *)fp)->p, ((const mp_span *)fp)->n); break;
        case K_RAW:
            if (((const mp_span *)fp)->n == 0)
                mp_put_nil(out);
            else
                mp_put_raw(out, ((const mp_span *)fp)->p, ((const mp_span *)fp)->n);
            break;
        case K_U64S: {
            const msg_u64s *l = fp;
            mp_put_array(out, l->n);
            for (uint32_t j = 0; j < l->n; j++)
                mp_put_u64(out, l->v[j]);
            break;
        }
        case K_STRS: put_bufs(out, fp, K_STR); break;
        case K_BINS: put_bufs(out, fp, K_BIN); break;
        case K_RAWS: put_bufs(out, fp, K_RAW); break;
        }
    }
}

int msg_encode_req(msg_type t, const void *s, mp_buf *out)
{
    const msg_desc *d = desc_of(t);

    if (d == NULL)
        return SX_EINVAL;
    mp_put_array(out, (uint32_t)(2 + d->nreq));
    mp_put_u64(out, PROTO_VERSION);
    mp_put_u64(out, (uint64_t)t);
    encode_fields(d->req, d->nreq, s, out);
    return out->oom ? SX_ENOMEM : 0;
}

int msg_encode_rep(msg_type t, const void *s, mp_buf *out)
{
    const msg_desc *d = desc_of(t);

    if (d == NULL)
        return SX_EINVAL;
    mp_put_array(out, (uint32_t)(3 + d->nrep));
    mp_put_u64(out, PROTO_VERSION);
    mp_put_u64(out, (uint64_t)t | MSG_REPLY);
    mp_put_u64(out, 0);
    encode_fields(d->rep, d->nrep, s, out);
    return out->oom ? SX_ENOMEM : 0;
}

int msg_encode_err(msg_type t, int err, const char *message, mp_buf *out)
{
    mp_put_array(out, 4);
    mp_put_u64(out, PROTO_VERSION);
    mp_put_u64(out, ((uint64_t)t & 0x7f) | MSG_REPLY);
    mp_put_u64(out, (uint64_t)(err > 0 ? err : SX_EINTERNAL));
    mp_put_cstr(out, message ? message : sx_strerror(err));
    return out->oom ? SX_ENOMEM : 0;
}

int msg_encode_req_bytes(msg_type t, const void *s, uint8_t **frame, size_t *n)
{
    mp_buf b;
    *frame = NULL;
    *n = 0;
    mp_buf_init(&b);
    int rc = msg_encode_req(t, s, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, frame, n);
    mp_buf_free(&b);
    return rc;
}

int msg_encode_err_hint(msg_type t, int err, const char *message, uint64_t hint, mp_buf *out)
{
    mp_put_array(out, 5);
    mp_put_u64(out, PROTO_VERSION);
    mp_put_u64(out, ((uint64_t)t & 0x7f) | MSG_REPLY);
    mp_put_u64(out, (uint64_t)(err > 0 ? err : SX_EINTERNAL));
    mp_put_cstr(out, message ? message : sx_strerror(err));
    mp_put_u64(out, hint);
    return out->oom ? SX_ENOMEM : 0;
}

int msg_encode_not_served(msg_type t, const char *what, uint64_t id, int err, uint64_t hint,
                          mp_buf *out)
{
    char msg[160];

    if (err == SX_ENOTLEADER) {
        snprintf(msg, sizeof(msg), "this replica does not lead %s %llu: retry at its leader", what,
                 (unsigned long long)id);
        return msg_encode_err_hint(t, err, msg, hint, out);
    }
    snprintf(msg, sizeof(msg), "%s %llu: its replica cannot serve now: %s", what,
             (unsigned long long)id, sx_strerror(err));
    return msg_encode_err(t, err, msg, out);
}

/* ---- decoding ---- */

static int read_header(mp_cur *c, uint32_t *count, uint64_t *type)
{
    uint64_t ver;

    if (mp_read_array(c, count) || *count < 2)
        return SX_EPROTO;
    if (mp_read_u64(c, &ver))
        return SX_EPROTO;
    if (ver != PROTO_VERSION)
        return SX_EVERSION;
    if (mp_read_u64(c, type))
        return SX_EPROTO;
    return 0;
}

int msg_peek(const uint8_t *p, size_t n, msg_type *t, int *is_reply)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;
    uint64_t type;
    int rc = read_header(&c, &count, &type);

    if (rc)
        return rc;
    *is_reply = (type & MSG_REPLY) != 0;
    *t = (msg_type)(type & ~(uint64_t)MSG_REPLY);
    if (desc_of(*t) == NULL)
        return SX_EPROTO;
    return 0;
}

static int read_list(mp_cur *c, field_kind kind, void *fp)
{
    uint32_t n;
    int rc = mp_read_array(c, &n);

    if (rc)
        return rc;
    if (n > MSG_MAX_LIST)
        return SX_ETOOBIG;
    if (kind == K_U64S) {
        msg_u64s *l = fp;
        l->v = calloc(n ? n : 1, sizeof(uint64_t));
        if (l->v == NULL)
            return SX_ENOMEM;
        l->n = n;
        for (uint32_t i = 0; i < n; i++)
            if ((rc = mp_read_u64(c, &l->v[i])) != 0)
                return rc;
        return 0;
    }
    msg_spans *l = fp;
    l->v = calloc(n ? n : 1, sizeof(mp_span));
    if (l->v == NULL)
        return SX_ENOMEM;
    l->n = n;
    for (uint32_t i = 0; i < n; i++) {
        if (kind == K_STRS)
            rc = mp_read_str(c, &l->v[i]);
        else if (kind == K_BINS)
            rc = mp_read_bin(c, &l->v[i]);
        else
            rc = mp_read_raw(c, &l->v[i]);
        if (rc)
            return rc;
    }
    return 0;
}

/* Whether a field may be missing from a frame (it only ends a list). */
static bool optional(field_kind k)
{
    return k == K_OBIN || k == K_OU64;
}

/* Fields of f[1..n] a frame must hold: all but the optional ones, which
 * only end a list. */
static int required_fields(const field_desc *f, int n)
{
    while (n > 0 && optional(f[n].kind))
        n--;
    return n;
}

/* Decodes f[1..n] from c, whose array holds avail of them (the optional
 * ones beyond it stay empty). */
static int decode_fields(mp_cur *c, const field_desc *f, int n, uint32_t avail, void *s)
{
    char *base = s;
    int rc = 0;

    for (int i = 1; i <= n && rc == 0; i++) {
        void *fp = base + f[i].off;
        if (optional(f[i].kind) && (uint32_t)i > avail)
            break;
        switch (f[i].kind) {
        case K_U64:
        case K_OU64: rc = mp_read_u64(c, fp); break;
        case K_STR: rc = mp_read_str(c, fp); break;
        case K_BIN:
        case K_OBIN: rc = mp_read_bin(c, fp); break;
        case K_RAW: rc = mp_read_raw(c, fp); break;
        case K_U64S:
        case K_STRS:
        case K_BINS:
        case K_RAWS: rc = read_list(c, f[i].kind, fp); break;
        }
    }
    return rc;
}

static void free_fields(const field_desc *f, int n, void *s)
{
    char *base = s;

    for (int i = 1; i <= n; i++) {
        void *fp = base + f[i].off;
        if (f[i].kind == K_U64S) {
            free(((msg_u64s *)fp)->v);
            ((msg_u64s *)fp)->v = NULL;
            ((msg_u64s *)fp)->n = 0;
        } else if (f[i].kind >= K_STRS) {
            free(((msg_spans *)fp)->v);
            ((msg_spans *)fp)->v = NULL;
            ((msg_spans *)fp)->n = 0;
        }
    }
}

static size_t struct_size(const field_desc *f, int n)
{
    size_t end = 1;

    for (int i = 1; i <= n; i++) {
        size_t sz = f[i].kind == K_U64 || f[i].kind == K_OU64 ? sizeof(uint64_t)
                    : f[i].kind == K_U64S                     ? sizeof(msg_u64s)
                    : f[i].kind >= K_STRS                     ? sizeof(msg_spans)
                                                              : sizeof(mp_span);
        if (f[i].off + sz > end)
            end = f[i].off + sz;
    }
    return end;
}

int msg_decode_req(msg_type t, const uint8_t *p, size_t n, void *s)
{
    const msg_desc *d = desc_of(t);
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;
    uint64_t type;
    int rc;

    if (d == NULL)
        return SX_EINVAL;
    memset(s, 0, struct_size(d->req, d->nreq));
    rc = read_header(&c, &count, &type);
    if (rc)
        return rc;
    if (type != (uint64_t)t || count < (uint32_t)(2 + required_fields(d->req, d->nreq)))
        return SX_EPROTO;
    rc = decode_fields(&c, d->req, d->nreq, count - 2, s);
    if (rc)
        free_fields(d->req, d->nreq, s);
    return rc;
}

int msg_decode_rep(msg_type t, const uint8_t *p, size_t n, void *s, char *errmsg, size_t errlen)
{
    const msg_desc *d = desc_of(t);
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;
    uint64_t type, err;
    int rc;

    if (errmsg && errlen)
        errmsg[0] = '\0';
    if (d == NULL)
        return SX_EINVAL;
    memset(s, 0, struct_size(d->rep, d->nrep));
    rc = read_header(&c, &count, &type);
    if (rc)
        return rc;
    if (!(type & MSG_REPLY) || count < 3 || mp_read_u64(&c, &err))
        return SX_EPROTO;
    /* An error reply is the node's error even when typed otherwise (a
     * request it could not parse is answered as a PING): its code and
     * text reach the caller instead of a bare "malformed message". */
    if (type != ((uint64_t)t | MSG_REPLY) && err == 0)
        return SX_EPROTO;
    if (err != 0) {
        mp_span m = { NULL, 0 };
        if (count >= 4 && mp_read_str(&c, &m) == 0 && errmsg && errlen) {
            size_t k = m.n < errlen - 1 ? m.n : errlen - 1;
            memcpy(errmsg, m.p, k);
            errmsg[k] = '\0';
        }
        return err < SX__ERR_LIMIT ? (int)err : SX_EINTERNAL;
    }
    if (count < (uint32_t)(3 + required_fields(d->rep, d->nrep)))
        return SX_EPROTO;
    rc = decode_fields(&c, d->rep, d->nrep, count - 3, s);
    if (rc)
        free_fields(d->rep, d->nrep, s);
    return rc;
}

uint64_t msg_err_hint(const uint8_t *p, size_t n)
{
    mp_cur c = mp_cur_make(p, n);
    uint32_t count;
    uint64_t type, err, hint;
    mp_span m;

    if (read_header(&c, &count, &type) || !(type & MSG_REPLY) || count < 5 ||
        mp_read_u64(&c, &err) || err == 0 || mp_read_str(&c, &m) || mp_read_u64(&c, &hint))
        return 0;
    return hint;
}

void msg_free_req(msg_type t, void *s)
{
    const msg_desc *d = desc_of(t);

    if (d)
        free_fields(d->req, d->nreq, s);
}

void msg_free_rep(msg_type t, void *s)
{
    const msg_desc *d = desc_of(t);

    if (d)
        free_fields(d->rep, d->nrep, s);
}

bool msg_rerunnable(msg_type t)
{
    switch (t) {
    case MSG_PING:
    case MSG_GET:
    case MSG_QUERY:
    case MSG_SCAN:
    case MSG_STATUS:
    case MSG_CATALOG:
    case MSG_INDEX_LIST:
    case MSG_S_GET:
    case MSG_S_RANGE:
    case MSG_S_HEADS:
    case MSG_I_RANGE:
    case MSG_I_WATERMARKS:
    case MSG_NODE_STATUS: return true;
    default: return false;
    }
}
