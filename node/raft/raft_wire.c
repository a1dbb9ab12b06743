/*
 * raft_wire.c — the wire form of a batch of Raft messages (raft_wire.h;
 * byte layout in proto/PROTOCOL.md, "Raft (node to node)").
 *
 * Each message type's fields are listed once, in the table `types` below;
 * one encoder and one decoder walk it.  A message is a msgpack array
 *   [type, group, from, to, term, <its type's fields in table order>]
 * and a batch an array of messages.  Decoding goes through the bounded
 * cursor (mp.h) in two passes: the first checks the whole input and counts
 * messages and entries without allocating; the second, after one
 * allocation sized from those counts, fills the messages in.  So no count
 * read from the input sizes an allocation before the bytes behind it have
 * been seen.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft_wire.h"
#include "sx_errors.h"

/* The fields a message type may carry, in wire order within a type. */
enum {
    F_INDEX,      /* u64 index */
    F_LOG_TERM,   /* u64 log_term */
    F_COMMIT,     /* u64 commit */
    F_HINT,       /* u64 hint */
    F_CTX,        /* u64 ctx */
    F_OFFSET,     /* u64 offset */
    F_SNAP_INDEX, /* u64 snap.index */
    F_SNAP_TERM,  /* u64 snap.term */
    F_SNAP_SIZE,  /* u64 snap.size */
    F_MAX_ID,     /* u64 snap.conf.max_id */
    F_REJECT,     /* 0|1 reject */
    F_FORCE,      /* 0|1 force */
    F_DONE,       /* 0|1 done */
    F_ENTRIES,    /* [[term, index, type, data bin], ...] entries, n_entries */
    F_MEMBERS,    /* [[id, voter 0|1], ...] snap.conf.m, snap.conf.n */
    F_DATA        /* bin: data, len */
};

static const char *const field_names[] = {
    [F_INDEX] = "index",
    [F_LOG_TERM] = "log_term",
    [F_COMMIT] = "commit",
    [F_HINT] = "hint",
    [F_CTX] = "ctx",
    [F_OFFSET] = "offset",
    [F_SNAP_INDEX] = "snap.index",
    [F_SNAP_TERM] = "snap.term",
    [F_SNAP_SIZE] = "snap.size",
    [F_MAX_ID] = "conf.max_id",
    [F_REJECT] = "reject",
    [F_FORCE] = "force",
    [F_DONE] = "done",
    [F_ENTRIES] = "entries",
    [F_MEMBERS] = "conf.members",
    [F_DATA] = "data",
};

/* Fields every message starts with: type, group, from, to, term. */
#define COMMON_FIELDS 5
#define MAX_TYPE_FIELDS 8

typedef struct type_desc {
    const char *name;
    uint8_t n;
    uint8_t f[MAX_TYPE_FIELDS];
} type_desc;

/* What each type carries after the common fields (docs/RAFT.md,
 * "Messages"); PROTOCOL.md documents the same lists: keep them in step. */
/* clang-format off */
static const type_desc types[RAFT_MSG_TYPE_MAX] = {
    [RAFT_MSG_PREVOTE]        = { "PREVOTE",        3, { F_INDEX, F_LOG_TERM, F_FORCE } },
    [RAFT_MSG_PREVOTE_RESP]   = { "PREVOTE_RESP",   1, { F_REJECT } },
    [RAFT_MSG_VOTE]           = { "VOTE",           3, { F_INDEX, F_LOG_TERM, F_FORCE } },
    [RAFT_MSG_VOTE_RESP]      = { "VOTE_RESP",      1, { F_REJECT } },
    [RAFT_MSG_APPEND]         = { "APPEND",         4, { F_INDEX, F_LOG_TERM, F_COMMIT, F_ENTRIES } },
    [RAFT_MSG_APPEND_RESP]    = { "APPEND_RESP",    4, { F_INDEX, F_REJECT, F_HINT, F_LOG_TERM } },
    [RAFT_MSG_HEARTBEAT]      = { "HEARTBEAT",      2, { F_COMMIT, F_CTX } },
    [RAFT_MSG_HEARTBEAT_RESP] = { "HEARTBEAT_RESP", 1, { F_CTX } },
    [RAFT_MSG_SNAP]           = { "SNAP",           8, { F_SNAP_INDEX, F_SNAP_TERM, F_SNAP_SIZE,
                                                         F_MEMBERS, F_MAX_ID, F_OFFSET, F_DONE,
                                                         F_DATA } },
    [RAFT_MSG_SNAP_RESP]      = { "SNAP_RESP",      3, { F_SNAP_INDEX, F_OFFSET, F_REJECT } },
    [RAFT_MSG_TIMEOUT_NOW]    = { "TIMEOUT_NOW",    0, { 0 } },
};
/* clang-format on */

/* Smallest encodings, for bounding counts by the bytes left: a message
 * (TIMEOUT_NOW: fixarray + 5 fixints), an entry (fixarray + 3 fixints + an
 * empty bin8), a member (fixarray + 2 fixints). */
#define MIN_MSG_BYTES 6u
#define MIN_ENTRY_BYTES 6u
#define MIN_MEMBER_BYTES 3u

/* The batch's array header as the encoder writes it: array 32, the count
 * patched in by raft_wire_enc_end. */
#define BATCH_HDR 5u

static const type_desc *desc_of(int type)
{
    if (type <= 0 || type >= RAFT_MSG_TYPE_MAX)
        return NULL;
    return &types[type];
}

/* raft_wire_type_name: contract in raft_wire.h. */
const char *raft_wire_type_name(int type)
{
    const type_desc *d = desc_of(type);

    return d ? d->name : "?";
}

/* Writes "fmt..." into err[errlen] (if any) and returns rc. */
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* The u64 field f of m, or NULL if f is not one. */
static const uint64_t *u64_of(const raft_msg *m, int f)
{
    switch (f) {
    case F_INDEX: return &m->index;
    case F_LOG_TERM: return &m->log_term;
    case F_COMMIT: return &m->commit;
    case F_HINT: return &m->hint;
    case F_CTX: return &m->ctx;
    case F_OFFSET: return &m->offset;
    case F_SNAP_INDEX: return &m->snap.index;
    case F_SNAP_TERM: return &m->snap.term;
    case F_SNAP_SIZE: return &m->snap.size;
    case F_MAX_ID: return &m->snap.conf.max_id;
    default: return NULL;
    }
}

/* The 0|1 field f of m, or NULL if f is not one. */
static const uint8_t *flag_of(const raft_msg *m, int f)
{
    switch (f) {
    case F_REJECT: return &m->reject;
    case F_FORCE: return &m->force;
    case F_DONE: return &m->done;
    default: return NULL;
    }
}

/* The same, writable, for the decoder (m is its own message). */
static uint64_t *u64_field(raft_msg *m, int f)
{
    return (uint64_t *)(uintptr_t)u64_of(m, f);
}

static uint8_t *flag_field(raft_msg *m, int f)
{
    return (uint8_t *)(uintptr_t)flag_of(m, f);
}

/* Whether type d carries field f. */
static int carries(const type_desc *d, int f)
{
    for (int i = 0; i < d->n; i++)
        if (d->f[i] == f)
            return 1;
    return 0;
}

/* ---- encoding ---- */

/* The rules raft_wire_enc_add states for m (whose type is d): NULL when m
 * may be encoded, else the reason. */
static const char *check_msg(const raft_msg *m, const type_desc *d)
{
    for (int i = 0; i < d->n; i++) {
        const uint8_t *fl = flag_of(m, d->f[i]);
        if (fl && *fl > 1)
            return "a flag (reject, force, done) is neither 0 nor 1";
    }
    if (carries(d, F_ENTRIES)) {
        if (m->n_entries && !m->entries)
            return "n_entries > 0 with entries NULL";
        if (m->index > UINT64_MAX - m->n_entries)
            return "index + n_entries passes 2^64 - 1";
        for (uint32_t i = 0; i < m->n_entries; i++) {
            if (m->entries[i].type > RAFT_ENTRY_CONF)
                return "an entry of unknown type";
            if (m->entries[i].len && !m->entries[i].data)
                return "an entry with len > 0 and data NULL";
        }
    }
    if (carries(d, F_MEMBERS)) {
        if (m->snap.conf.n > RAFT_MAX_MEMBERS)
            return "conf.n > RAFT_MAX_MEMBERS";
        for (uint32_t i = 0; i < m->snap.conf.n; i++)
            if (m->snap.conf.m[i].voter > 1)
                return "a member's voter is neither 0 nor 1";
    }
    if (carries(d, F_DATA)) {
        if (m->len && !m->data)
            return "len > 0 with data NULL (the host fills the chunk in)";
        if (m->offset > UINT64_MAX - m->len)
            return "offset + len passes 2^64 - 1";
    }
    return NULL;
}

static void put_field(mp_buf *b, const raft_msg *m, int f)
{
    const uint64_t *u = u64_of(m, f);
    const uint8_t *fl = flag_of(m, f);

    if (u) {
        mp_put_u64(b, *u);
    } else if (fl) {
        mp_put_u64(b, *fl);
    } else if (f == F_ENTRIES) {
        mp_put_array(b, m->n_entries);
        for (uint32_t i = 0; i < m->n_entries; i++) {
            const raft_entry *e = &m->entries[i];
            mp_put_array(b, 4);
            mp_put_u64(b, e->term);
            mp_put_u64(b, e->index);
            mp_put_u64(b, e->type);
            mp_put_bin(b, e->data, e->len);
        }
    } else if (f == F_MEMBERS) {
        mp_put_array(b, m->snap.conf.n);
        for (uint32_t i = 0; i < m->snap.conf.n; i++) {
            mp_put_array(b, 2);
            mp_put_u64(b, m->snap.conf.m[i].id);
            mp_put_u64(b, m->snap.conf.m[i].voter);
        }
    } else if (f == F_DATA) {
        mp_put_bin(b, m->data, m->len);
    }
}

/* raft_wire_enc_begin: contract in raft_wire.h. */
void raft_wire_enc_begin(raft_wire_enc *e, mp_buf *out)
{
    static const uint8_t hdr[BATCH_HDR] = { 0xdd, 0, 0, 0, 0 };

    e->out = out;
    e->start = out->sb.size;
    e->n_msgs = 0;
    e->n_entries = 0;
    mp_put_raw(out, hdr, sizeof hdr);
}

/* raft_wire_enc_add: contract in raft_wire.h. */
int raft_wire_enc_add(raft_wire_enc *e, const raft_msg *m, char *err, size_t errlen)
{
    const type_desc *d = desc_of(m->type);
    const char *why;
    uint32_t n_entries;

    if (d == NULL)
        return fail(err, errlen, SX_EINVAL, "raft message type %d is unknown", m->type);
    if ((why = check_msg(m, d)) != NULL)
        return fail(err, errlen, SX_EINVAL, "raft %s to %llu: %s", d->name,
                    (unsigned long long)m->to, why);
    n_entries = carries(d, F_ENTRIES) ? m->n_entries : 0;
    if (e->n_msgs >= RAFT_WIRE_MAX_MSGS)
        return fail(err, errlen, SX_ETOOBIG, "a raft batch holds at most %u messages",
                    RAFT_WIRE_MAX_MSGS);
    if (n_entries > RAFT_WIRE_MAX_ENTRIES - e->n_entries)
        return fail(err, errlen, SX_ETOOBIG, "a raft batch holds at most %u entries",
                    RAFT_WIRE_MAX_ENTRIES);
    mp_put_array(e->out, (uint32_t)(COMMON_FIELDS + d->n));
    mp_put_u64(e->out, m->type);
    mp_put_u64(e->out, m->group);
    mp_put_u64(e->out, m->from);
    mp_put_u64(e->out, m->to);
    mp_put_u64(e->out, m->term);
    for (int i = 0; i < d->n; i++)
        put_field(e->out, m, d->f[i]);
    if (e->out->oom)
        return fail(err, errlen, SX_ENOMEM, "out of memory encoding a raft batch");
    e->n_msgs++;
    e->n_entries += n_entries;
    return 0;
}

/* raft_wire_enc_end: contract in raft_wire.h. */
int raft_wire_enc_end(raft_wire_enc *e)
{
    uint8_t *h;

    if (e->out->oom || e->out->sb.size - e->start < BATCH_HDR)
        return SX_ENOMEM;
    h = (uint8_t *)e->out->sb.data + e->start;
    h[1] = (uint8_t)(e->n_msgs >> 24);
    h[2] = (uint8_t)(e->n_msgs >> 16);
    h[3] = (uint8_t)(e->n_msgs >> 8);
    h[4] = (uint8_t)e->n_msgs;
    return 0;
}

/* raft_wire_encode: contract in raft_wire.h. */
int raft_wire_encode(const raft_msg *msgs, size_t n, mp_buf *out, char *err, size_t errlen)
{
    raft_wire_enc e;
    size_t before = out->sb.size;
    int rc = 0;

    if (n > RAFT_WIRE_MAX_MSGS)
        return fail(err, errlen, SX_ETOOBIG, "a raft batch holds at most %u messages, not %zu",
                    RAFT_WIRE_MAX_MSGS, n);
    raft_wire_enc_begin(&e, out);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = raft_wire_enc_add(&e, &msgs[i], err, errlen);
    if (rc == 0)
        return raft_wire_enc_end(&e);
    if (rc != SX_ENOMEM && !out->oom)
        out->sb.size = before; /* drop the partial batch */
    return rc;
}

/* Bytes of a msgpack uint (at most 9), a bin header plus n, an array
 * header. */
#define U64_MAX_BYTES 9u
#define BIN_HDR_MAX 5u
#define ARRAY_HDR_MAX 5u

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* raft_wire_msg_bound: contract in raft_wire.h. */
size_t raft_wire_msg_bound(const raft_msg *m)
{
    const type_desc *d = desc_of(m->type);
    size_t n = ARRAY_HDR_MAX + COMMON_FIELDS * U64_MAX_BYTES;

    if (d == NULL)
        return n;
    for (int i = 0; i < d->n; i++) {
        switch (d->f[i]) {
        case F_ENTRIES:
            n = add_sat(n, ARRAY_HDR_MAX);
            for (uint32_t k = 0; k < m->n_entries && m->entries; k++)
                n = add_sat(n, ARRAY_HDR_MAX + 3 * U64_MAX_BYTES + BIN_HDR_MAX +
                                   (size_t)m->entries[k].len);
            break;
        case F_MEMBERS:
            n = add_sat(n, ARRAY_HDR_MAX +
                               (size_t)RAFT_MAX_MEMBERS * (ARRAY_HDR_MAX + 2 * U64_MAX_BYTES));
            break;
        case F_DATA: n = add_sat(n, BIN_HDR_MAX + (size_t)m->len); break;
        default: n = add_sat(n, U64_MAX_BYTES); break;
        }
    }
    return n;
}

/* ---- decoding ---- */

/* Where a decode is, for its error messages. */
typedef struct dec {
    const uint8_t *base; /* the input, for byte offsets */
    char *err;
    size_t errlen;
    uint32_t msg;     /* the message being read (0-based) */
    const char *type; /* its type's name, once known */
} dec;

static int bad(const dec *x, const mp_cur *c, int rc, const char *field, const char *why)
{
    return fail(x->err, x->errlen, rc, "raft batch: message %u (%s), %s at byte %zu: %s",
                (unsigned)x->msg, x->type ? x->type : "?", field, (size_t)(c->p - x->base), why);
}

/* Reads a 0|1 field into *out. */
static int read_flag(mp_cur *c, uint8_t *out)
{
    uint64_t v;

    if (mp_read_u64(c, &v) != 0 || v > 1)
        return SX_EPROTO;
    *out = (uint8_t)v;
    return 0;
}

/* Reads a bin field as (data, len): data NULL when empty. */
static int read_chunk(mp_cur *c, const uint8_t **data, uint32_t *len)
{
    mp_span s;

    if (mp_read_bin(c, &s) != 0 || s.n > UINT32_MAX)
        return SX_EPROTO;
    *data = s.n ? s.p : NULL;
    *len = (uint32_t)s.n;
    return 0;
}

/* Reads an APPEND's entries into m->n_entries and, when ents is not NULL,
 * into ents[0..n_entries) (m->entries = ents). */
static int read_entries(const dec *x, mp_cur *c, raft_msg *m, raft_entry *ents)
{
    uint32_t n;

    if (mp_read_array(c, &n) != 0)
        return bad(x, c, SX_EPROTO, "entries", "not an array (or longer than the bytes left)");
    if (n > RAFT_WIRE_MAX_ENTRIES)
        return bad(x, c, SX_ETOOBIG, "entries", "more entries than a batch may hold");
    if (n > mp_left(c) / MIN_ENTRY_BYTES)
        return bad(x, c, SX_EPROTO, "entries", "more entries than the bytes left could hold");
    m->n_entries = n;
    m->entries = n && ents ? ents : NULL;
    for (uint32_t i = 0; i < n; i++) {
        raft_entry e;
        uint32_t k;
        uint64_t type;
        const uint8_t *data;

        memset(&e, 0, sizeof e);
        if (mp_read_array(c, &k) != 0 || k != 4)
            return bad(x, c, SX_EPROTO, "entries", "an entry is not an array of 4");
        if (mp_read_u64(c, &e.term) != 0 || mp_read_u64(c, &e.index) != 0)
            return bad(x, c, SX_EPROTO, "entries", "an entry's term or index is not a u64");
        if (mp_read_u64(c, &type) != 0 || type > RAFT_ENTRY_CONF)
            return bad(x, c, SX_EPROTO, "entries", "an entry's type is unknown");
        e.type = (uint8_t)type;
        if (read_chunk(c, &data, &e.len) != 0)
            return bad(x, c, SX_EPROTO, "entries", "an entry's data is not a bin");
        e.data = (uint8_t *)(uintptr_t)data; /* borrowed; raft_wire.h: never written */
        if (ents)
            ents[i] = e;
    }
    if (m->index > UINT64_MAX - n)
        return bad(x, c, SX_EPROTO, "entries", "index + n_entries passes 2^64 - 1");
    return 0;
}

/* Reads a SNAP's members into m->snap.conf. */
static int read_members(const dec *x, mp_cur *c, raft_msg *m)
{
    uint32_t n;

    if (mp_read_array(c, &n) != 0)
        return bad(x, c, SX_EPROTO, "conf.members", "not an array");
    if (n > RAFT_MAX_MEMBERS)
        return bad(x, c, SX_EPROTO, "conf.members", "more than RAFT_MAX_MEMBERS members");
    if (n > mp_left(c) / MIN_MEMBER_BYTES)
        return bad(x, c, SX_EPROTO, "conf.members", "more members than the bytes left could hold");
    m->snap.conf.n = n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k;
        if (mp_read_array(c, &k) != 0 || k != 2 || mp_read_u64(c, &m->snap.conf.m[i].id) != 0 ||
            read_flag(c, &m->snap.conf.m[i].voter) != 0)
            return bad(x, c, SX_EPROTO, "conf.members", "a member is not [id u64, voter 0|1]");
    }
    return 0;
}

/* Reads one message into *m (zeroed first).  ents: where its entries go,
 * or NULL to check and count them only. */
static int read_msg(dec *x, mp_cur *c, raft_msg *m, raft_entry *ents)
{
    const type_desc *d;
    uint32_t count;
    uint64_t type;

    memset(m, 0, sizeof *m);
    x->type = NULL;
    if (mp_read_array(c, &count) != 0)
        return bad(x, c, SX_EPROTO, "header", "not an array");
    if (count < 1 || mp_read_u64(c, &type) != 0)
        return bad(x, c, SX_EPROTO, "type", "not a u64");
    if ((d = desc_of(type > INT32_MAX ? 0 : (int)type)) == NULL)
        return bad(x, c, SX_EPROTO, "type", "unknown message type");
    x->type = d->name;
    if (count != (uint32_t)(COMMON_FIELDS + d->n))
        return bad(x, c, SX_EPROTO, "header", "not as many fields as its type has");
    m->type = (uint8_t)type;
    if (mp_read_u64(c, &m->group) != 0 || mp_read_u64(c, &m->from) != 0 ||
        mp_read_u64(c, &m->to) != 0 || mp_read_u64(c, &m->term) != 0)
        return bad(x, c, SX_EPROTO, "group, from, to or term", "not a u64");
    for (int i = 0; i < d->n; i++) {
        int f = d->f[i];
        uint64_t *u = u64_field(m, f);
        uint8_t *fl = flag_field(m, f);
        int rc = 0;

        if (u) {
            if (mp_read_u64(c, u) != 0)
                return bad(x, c, SX_EPROTO, field_names[f], "not a u64");
        } else if (fl) {
            if (read_flag(c, fl) != 0)
                return bad(x, c, SX_EPROTO, field_names[f], "not 0 or 1");
        } else if (f == F_ENTRIES) {
            rc = read_entries(x, c, m, ents);
        } else if (f == F_MEMBERS) {
            rc = read_members(x, c, m);
        } else if (f == F_DATA) {
            if (read_chunk(c, &m->data, &m->len) != 0)
                return bad(x, c, SX_EPROTO, "data", "not a bin");
            if (m->offset > UINT64_MAX - m->len)
                return bad(x, c, SX_EPROTO, "data", "offset + len passes 2^64 - 1");
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* raft_wire_decode: contract in raft_wire.h. */
int raft_wire_decode(const uint8_t *p, size_t n, const raft_alloc *alloc, raft_wire_batch *out,
                     char *err, size_t errlen)
{
    dec x = { p, err, errlen, 0, NULL };
    mp_cur c = mp_cur_make(p, n), body;
    uint32_t count;
    uint64_t n_entries = 0;
    raft_msg tmp;
    raft_entry *ents;
    size_t size, used = 0;
    int rc, use_alloc;

    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = '\0';
    if (mp_read_array(&c, &count) != 0)
        return fail(err, errlen, SX_EPROTO,
                    "raft batch: not a msgpack array (or longer than the bytes present)");
    if (count > RAFT_WIRE_MAX_MSGS)
        return fail(err, errlen, SX_ETOOBIG, "raft batch: %u messages, at most %u allowed",
                    (unsigned)count, RAFT_WIRE_MAX_MSGS);
    if (count > mp_left(&c) / MIN_MSG_BYTES)
        return fail(err, errlen, SX_EPROTO,
                    "raft batch: %u messages cannot fit in the %zu bytes present", (unsigned)count,
                    mp_left(&c));
    /* pass 1: check everything, count the entries; nothing allocated */
    body = c;
    for (x.msg = 0; x.msg < count; x.msg++) {
        if ((rc = read_msg(&x, &c, &tmp, NULL)) != 0)
            return rc;
        n_entries += tmp.n_entries;
        if (n_entries > RAFT_WIRE_MAX_ENTRIES)
            return bad(&x, &c, SX_ETOOBIG, "entries", "more entries than a batch may hold");
    }
    if (mp_left(&c) != 0)
        return fail(err, errlen, SX_EPROTO, "raft batch: %zu bytes after its last message",
                    mp_left(&c));
    if (count == 0)
        return 0;
    /* one allocation; the limits keep the size far from overflow */
    size = (size_t)count * sizeof(raft_msg) + (size_t)n_entries * sizeof(raft_entry);
    use_alloc = alloc && alloc->alloc && alloc->free;
    out->mem = use_alloc ? alloc->alloc(alloc->ctx, size) : malloc(size);
    if (out->mem == NULL)
        return fail(err, errlen, SX_ENOMEM, "raft batch: out of memory for %u messages",
                    (unsigned)count);
    if (use_alloc)
        out->alloc = *alloc;
    out->mem_size = size;
    memset(out->mem, 0, size);
    out->msgs = out->mem;
    ents = (raft_entry *)(void *)(out->msgs + count);
    /* pass 2: fill in (cannot fail on what pass 1 accepted) */
    c = body;
    for (x.msg = 0; x.msg < count; x.msg++) {
        if ((rc = read_msg(&x, &c, &out->msgs[x.msg], ents + used)) != 0) {
            raft_wire_batch_free(out);
            return rc;
        }
        used += out->msgs[x.msg].n_entries;
    }
    out->n_msgs = count;
    return 0;
}

/* raft_wire_batch_free: contract in raft_wire.h. */
void raft_wire_batch_free(raft_wire_batch *b)
{
    if (b == NULL)
        return;
    if (b->mem) {
        if (b->alloc.free)
            b->alloc.free(b->alloc.ctx, b->mem, b->mem_size);
        else
            free(b->mem);
    }
    memset(b, 0, sizeof *b);
}
