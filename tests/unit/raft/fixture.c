/*
 * fixture.c — what the Raft tests share: a small key-value state machine
 * (NKEYS registers; an entry sets one and returns its previous value)
 * implementing the host's state machine contract (host.h), with its
 * snapshots kept "on disk" in the struct so a simulated crash keeps them.
 */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

static void enc(const kv *k, uint8_t *out)
{
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)(k->applied >> (8 * b));
    for (int i = 0; i < NKEYS; i++)
        for (int b = 0; b < 8; b++)
            out[8 + 8 * i + b] = (uint8_t)(k->vals[i] >> (8 * b));
}

static void dec(kv *k, const uint8_t *in)
{
    k->applied = 0;
    for (int b = 0; b < 8; b++)
        k->applied |= (uint64_t)in[b] << (8 * b);
    for (int i = 0; i < NKEYS; i++) {
        k->vals[i] = 0;
        for (int b = 0; b < 8; b++)
            k->vals[i] |= (uint64_t)in[8 + 8 * i + b] << (8 * b);
    }
}

static int kv_apply_(void *sm, const raft_entry *e, rhost_result *res)
{
    kv *k = sm;
    if (k->fail_apply)
        return -1;
    /* the host must apply in order, once; applied 0 is the bootstrap
     * snapshot's empty state (index 1) */
    if (e->index != (k->applied ? k->applied : 1) + 1)
        return -1;
    k->applied = e->index;
    if (e->type != RAFT_ENTRY_NORMAL)
        return 0;
    if (e->len != 9 || e->data[0] >= NKEYS) {
        res->code = 1; /* a bad command is an error result, not a failure */
        return 0;
    }
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)e->data[1 + b] << (8 * b);
    res->reply = malloc(8);
    if (!res->reply)
        return -1;
    memcpy(res->reply, &k->vals[e->data[0]], 8);
    res->reply_len = 8;
    k->vals[e->data[0]] = v;
    return 0;
}

static int kv_snap_make_(void *sm, uint64_t *index, uint64_t *size)
{
    kv *k = sm;
    enc(k, k->snap);
    k->snap_index = k->applied;
    *index = k->applied;
    *size = SNAPLEN;
    return 0;
}

static int kv_snap_read_(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    kv *k = sm;
    uint8_t empty[SNAPLEN];
    const uint8_t *src = k->snap;
    if (index == 1) {
        kv z = { .applied = 1 };
        enc(&z, empty);
        src = empty;
    } else if (index != k->snap_index) {
        return -1;
    }
    if (off > SNAPLEN || len > SNAPLEN - off)
        return -1;
    memcpy(buf, src + off, len);
    return 0;
}

static int kv_snap_stage_(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len)
{
    kv *k = sm;
    if (off == 0) {
        k->stage_n = 0;
        k->stage_index = index;
    }
    if (index != k->stage_index || off != k->stage_n || len > SNAPLEN - k->stage_n)
        return -1;
    memcpy(k->stage + k->stage_n, p, len);
    k->stage_n += len;
    return 0;
}

static int kv_snap_install_(void *sm, const raft_snap_meta *m)
{
    kv *k = sm;
    if (m->size != SNAPLEN)
        return -1;
    if (k->stage_index == m->index && k->stage_n == SNAPLEN) {
        memcpy(k->snap, k->stage, SNAPLEN);
        k->snap_index = m->index;
    } else if (k->snap_index != m->index) {
        return -1;
    }
    dec(k, k->snap);
    k->applied = m->index;
    k->installs++;
    return 0;
}

/* kv_ops: contract in fixture.h. */
const rhost_sm_ops kv_ops = { kv_apply_,        kv_snap_make_, kv_snap_read_, kv_snap_stage_,
                              kv_snap_install_, NULL,          NULL };

/* kv_crash: contract in fixture.h. */
void kv_crash(kv *k)
{
    if (k->snap_index) {
        dec(k, k->snap);
        k->applied = k->snap_index;
    } else {
        memset(k->vals, 0, sizeof k->vals);
        k->applied = 0;
    }
}

/* kv_cmd: contract in fixture.h. */
void kv_cmd(uint8_t out[KV_CMD_LEN], uint8_t key, uint64_t v)
{
    out[0] = key;
    for (int b = 0; b < 8; b++)
        out[1 + b] = (uint8_t)(v >> (8 * b));
}
