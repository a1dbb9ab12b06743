/*
 * sim_disk.c — the simulated disk of one replica: the Raft log the host
 * persists (hard state, snapshot meta, log entries each with a hash chained
 * over its prefix) and the state machine's files (its latest snapshot,
 * older snapshots a transfer still streams, the staging area of a received
 * one).  Each persist call of a node's host (one round, every group, and
 * the compactions queued since the last one) is encoded as one CRC-framed
 * batch of records (raft_codec.h encodings); a crash may tear the batch at
 * any byte, and recovery (sim_disk_apply_batch) must then reject it whole.
 */
#include <stdlib.h>
#include <string.h>

#include "raft_codec.h"
#include "sim.h"

/* sim_disk_prune_old: contract in sim.h. */
void sim_disk_prune_old(sim_disk *d, uint64_t pinned)
{
    int k = 0;
    for (int i = 0; i < d->n_old; i++) {
        if (pinned && d->old[i].index >= pinned)
            d->old[k++] = d->old[i];
        else
            free(d->old[i].data);
    }
    d->n_old = k;
}

/* sim_disk_snapfile: contract in sim.h. */
const sim_snapfile *sim_disk_snapfile(const sim_disk *d, uint64_t index)
{
    if (d->sm.index == index && d->sm.data)
        return &d->sm;
    for (int i = 0; i < d->n_old; i++)
        if (d->old[i].index == index)
            return &d->old[i];
    return NULL;
}

/* sim_disk_snap_replace: contract in sim.h. */
void sim_disk_snap_replace(sim_disk *d, const sim_snapfile *f)
{
    if (d->sm.data) {
        if (d->n_old == 4) {
            free(d->old[0].data);
            memmove(&d->old[0], &d->old[1], 3 * sizeof d->old[0]);
            d->n_old--;
        }
        d->old[d->n_old++] = d->sm;
    }
    d->sm = *f;
}

/* sim_disk_free: contract in sim.h. */
void sim_disk_free(sim_disk *d)
{
    sim_disk_prune_old(d, 0);
    for (size_t i = 0; i < d->n; i++)
        free(d->log[i].e.data);
    free(d->log);
    free(d->sm.data);
    free(d->staging);
    memset(d, 0, sizeof *d);
}

/* sim_disk_last: contract in sim.h. */
uint64_t sim_disk_last(const sim_disk *d)
{
    return d->snap.index + d->n;
}

/* sim_disk_at: contract in sim.h. */
sim_dent *sim_disk_at(const sim_disk *d, uint64_t index)
{
    if (index <= d->snap.index || index > sim_disk_last(d))
        return NULL;
    return &d->log[index - d->snap.index - 1];
}

/* sim_disk_chain_at: contract in sim.h. */
uint64_t sim_disk_chain_at(const sim_disk *d, uint64_t index)
{
    if (index == d->snap.index)
        return d->snap_chain;
    sim_dent *x = sim_disk_at(d, index);
    return x ? x->chain : 0;
}

/* sim_disk_drop_prefix: contract in sim.h. */
void sim_disk_drop_prefix(sim_disk *d, uint64_t upto)
{
    size_t k = 0;
    while (k < d->n && d->log[k].e.index <= upto)
        free(d->log[k++].e.data);
    memmove(d->log, d->log + k, (d->n - k) * sizeof *d->log);
    d->n -= k;
}

/* sim_chain: contract (arguments, ownership, errors) in sim.h. */
uint64_t sim_chain(uint64_t prev, const raft_entry *e)
{
    uint64_t h = prev * 0x9e3779b97f4a7c15ull ^ e->term * 0xbf58476d1ce4e5b9ull;
    h ^= (uint64_t)e->type * 0x94d049bb133111ebull + e->index;
    h ^= raft_crc32c(0, e->data, e->len) * 0x2545f4914f6cdd1dull;
    h ^= h >> 31;
    return h * 0xff51afd7ed558ccdull;
}

/* ---- the persisted batch: CRC-framed records for every group ---- */

static void bb_put(sim_buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n)
            ncap *= 2;
        uint8_t *np = realloc(b->p, ncap);
        if (!np)
            abort();
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

enum { REC_HS = 1, REC_ENTRY, REC_SNAP = 4, REC_COMPACT };

static void bb_rec(sim_buf *b, int g, int kind, const uint8_t *p, size_t n)
{
    uint8_t h[6];
    h[0] = (uint8_t)g;
    h[1] = (uint8_t)kind;
    raft_put32(h + 2, (uint32_t)n);
    bb_put(b, h, 6);
    bb_put(b, p, n);
}

/* sim_disk_build_batch: contract in sim.h. */
void sim_disk_build_batch(sim *s, size_t n, const uint64_t *groups, raft_ready *const *rds,
                          size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps,
                          sim_buf *b)
{
    (void)s;
    uint8_t hdr[8] = { 0 };
    bb_put(b, hdr, 8); /* crc u32 | len u32, filled below */
    for (size_t k = 0; k < n; k++) {
        int g = (int)groups[k];
        const raft_ready *x = rds[k];
        /* a received snapshot's chunks are the state machine's (staged by
         * rhost_sm_ops.snap_stage before this write): only its meta is here */
        if (x->has_snap) {
            uint8_t m[RAFT_CODEC_SNAP_MAX];
            bb_rec(b, g, REC_SNAP, m, raft_codec_snap_encode(&x->snap, m));
        }
        for (size_t i = 0; i < x->n_entries; i++) {
            size_t len = raft_codec_entry_size(&x->entries[i]);
            uint8_t *e = malloc(len);
            if (!e)
                abort();
            raft_codec_entry_encode(&x->entries[i], e);
            bb_rec(b, g, REC_ENTRY, e, len);
            free(e);
        }
        if (x->hs_changed) {
            uint8_t h[RAFT_CODEC_HS_LEN];
            raft_codec_hs_encode(&x->hs, h);
            bb_rec(b, g, REC_HS, h, sizeof h);
        }
    }
    for (size_t k = 0; k < ncomp; k++) {
        uint8_t m[RAFT_CODEC_SNAP_MAX];
        bb_rec(b, (int)comp_groups[k], REC_COMPACT, m, raft_codec_snap_encode(&comps[k], m));
    }
    raft_put32(b->p + 4, (uint32_t)(b->n - 8));
    raft_put32(b->p, raft_crc32c(0, b->p + 4, b->n - 4));
}

static void disk_append(sim *s, int g, sim_node *nd, const raft_entry *e)
{
    sim_disk *d = &nd->rep[g].disk;
    if (e->index <= d->snap.index)
        return;                         /* covered by the snapshot */
    if (e->index <= sim_disk_last(d)) { /* overwrite: truncate the suffix */
        size_t keep = (size_t)(e->index - d->snap.index - 1);
        for (size_t i = keep; i < d->n; i++) {
            sim_check_truncate(s, g, nd->id, &d->log[i]);
            free(d->log[i].e.data);
        }
        d->n = keep;
    }
    if (e->index != sim_disk_last(d) + 1) {
        sim_fail(s, "node %llu group %d: log gap at %llu (last %llu)", (unsigned long long)nd->id,
                 g, (unsigned long long)e->index, (unsigned long long)sim_disk_last(d));
        return;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->log = realloc(d->log, d->cap * sizeof *d->log);
        if (!d->log)
            abort();
    }
    sim_dent *x = &d->log[d->n++];
    x->e = *e;
    x->e.data = NULL;
    if (e->len) {
        x->e.data = malloc(e->len);
        if (!x->e.data)
            abort();
        memcpy(x->e.data, e->data, e->len);
    }
    x->chain = sim_chain(sim_disk_chain_at(d, e->index - 1), e);
    sim_check_append(s, g, nd->id, x);
}

/* Recovers a batch: returns 0 and applies it if intact, -1 if torn. */
int sim_disk_apply_batch(sim *s, sim_node *nd, const uint8_t *p, size_t n)
{
    if (n < 8)
        return -1;
    uint32_t len = raft_get32(p + 4);
    if (len != n - 8 || raft_get32(p) != raft_crc32c(0, p + 4, n - 4))
        return -1;
    size_t off = 8;
    while (off + 6 <= n) {
        int g = p[off];
        int kind = p[off + 1];
        uint32_t rl = raft_get32(p + off + 2);
        const uint8_t *r = p + off + 6;
        off += 6 + rl;
        if (off > n || g >= s->o.groups)
            return -1;
        sim_disk *d = &nd->rep[g].disk;
        if (!nd->rep[g].hosted) {
            /* a compaction of a group decommissioned since: the node
             * erases its state separately (the host still persists it) */
            if (kind != REC_COMPACT)
                sim_fail(s, "node %llu: persists group %d it does not host",
                         (unsigned long long)nd->id, g);
            continue;
        }
        if (kind == REC_HS) {
            if (raft_codec_hs_decode(r, rl, &d->hs))
                return -1;
        } else if (kind == REC_ENTRY) {
            raft_entry e;
            if (raft_codec_entry_decode(r, rl, &e))
                return -1;
            disk_append(s, g, nd, &e);
        } else if (kind == REC_SNAP) {
            raft_snap_meta m;
            if (raft_codec_snap_decode(r, rl, &m))
                return -1;
            /* the host stages every chunk before the round's write */
            if (d->staging_index != m.index || d->staging_len != m.size) {
                sim_fail(s, "node %llu: snapshot meta persisted without its bytes staged",
                         (unsigned long long)nd->id);
                return 0;
            }
            uint64_t chain;
            if (!sim_committed_chain(s, g, m.index, &chain)) {
                sim_fail_as(s, SIM_V_COMMIT, "group %d: snapshot at uncommitted index %llu", g,
                            (unsigned long long)m.index);
                return 0;
            }
            sim_dent *keep = sim_disk_at(d, m.index);
            if (keep && keep->e.term == m.term) {
                sim_disk_drop_prefix(d, m.index);
            } else {
                for (size_t i = 0; i < d->n; i++)
                    free(d->log[i].e.data);
                d->n = 0;
            }
            d->snap = m;
            d->snap_chain = chain;
            s->st_snaps++;
        } else if (kind == REC_COMPACT) {
            raft_snap_meta m;
            if (raft_codec_snap_decode(r, rl, &m))
                return -1;
            if (m.index < d->snap.index) {
                sim_fail(s,
                         "node %llu group %d: a compaction at %llu overwrites the snapshot "
                         "meta at %llu",
                         (unsigned long long)nd->id, g, (unsigned long long)m.index,
                         (unsigned long long)d->snap.index);
                return 0;
            }
            sim_dent *x = sim_disk_at(d, m.index);
            if (m.index > d->snap.index && (!x || x->e.term != m.term)) {
                sim_fail(s, "node %llu group %d: compaction at %llu (term %llu) not in its log",
                         (unsigned long long)nd->id, g, (unsigned long long)m.index,
                         (unsigned long long)m.term);
                return 0;
            }
            uint64_t chain = x ? x->chain : d->snap_chain;
            const sim_snapfile *f = sim_disk_snapfile(d, m.index);
            if (f && (f->chain != chain || f->size != m.size)) {
                sim_fail(s, "node %llu group %d: compaction at %llu differs from its snapshot",
                         (unsigned long long)nd->id, g, (unsigned long long)m.index);
                return 0;
            }
            sim_disk_drop_prefix(d, m.index);
            d->snap = m;
            d->snap_chain = chain;
        } else {
            return -1;
        }
    }
    return 0;
}
