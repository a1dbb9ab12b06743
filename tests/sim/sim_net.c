/*
 * sim_net.c — the simulator's event queue (a binary heap ordered by time,
 * then insertion order, so runs are deterministic) and its network: every
 * Raft message is deep-copied and delivered after a random delay, unless a
 * fault drops it.  Faults: random drop, duplication, delay (which also
 * reorders), full partitions (two sides), partial partitions (random links
 * cut both ways), one-way links, isolating a node.  Messages come from the
 * nodes' hosts (rhost_env.send), snapshot chunks with their bytes filled in.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static int ev_less(const sim_event *a, const sim_event *b)
{
    if (a->time != b->time)
        return a->time < b->time;
    return a->order < b->order;
}

/* Pushes a copy of *e (ownership of e->msg moves to the queue).  Allocation
 * failure aborts the run: the simulator is a test program. */
void sim_ev_push(sim *s, sim_event *e)
{
    if (s->n_ev == s->cap_ev) {
        size_t ncap = s->cap_ev ? s->cap_ev * 2 : 1024;
        sim_event *n = realloc(s->ev, ncap * sizeof *n);
        if (!n)
            abort();
        s->ev = n;
        s->cap_ev = ncap;
    }
    e->order = s->ev_order++;
    size_t i = s->n_ev++;
    s->ev[i] = *e;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&s->ev[i], &s->ev[p]))
            break;
        sim_event t = s->ev[i];
        s->ev[i] = s->ev[p];
        s->ev[p] = t;
        i = p;
    }
}

/* Pops the earliest event due at or before now into *out; 0 if none. */
int sim_ev_pop_due(sim *s, uint64_t now, sim_event *out)
{
    if (s->n_ev == 0 || s->ev[0].time > now)
        return 0;
    *out = s->ev[0];
    s->ev[0] = s->ev[--s->n_ev];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->n_ev && ev_less(&s->ev[l], &s->ev[m]))
            m = l;
        if (r < s->n_ev && ev_less(&s->ev[r], &s->ev[m]))
            m = r;
        if (m == i)
            break;
        sim_event t = s->ev[i];
        s->ev[i] = s->ev[m];
        s->ev[m] = t;
        i = m;
    }
    return 1;
}

/* Frees every queued event. */
void sim_ev_free_all(sim *s)
{
    for (size_t i = 0; i < s->n_ev; i++)
        free(s->ev[i].msg);
    free(s->ev);
    s->ev = NULL;
    s->n_ev = s->cap_ev = 0;
}

/* Returns the slot of node id, or -1. */
int sim_slot_of(const sim *s, uint64_t id)
{
    for (int i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].used && s->nodes[i].id == id)
            return i;
    return -1;
}

static raft_msg *copy_msg(const raft_msg *m, const uint8_t *chunk)
{
    size_t bytes = sizeof *m + (size_t)m->n_entries * sizeof(raft_entry);
    for (uint32_t i = 0; i < m->n_entries; i++)
        bytes += m->entries[i].len;
    if (m->type == RAFT_MSG_SNAP)
        bytes += m->len;
    raft_msg *c = malloc(bytes);
    if (!c)
        abort();
    *c = *m;
    raft_entry *es = (raft_entry *)(c + 1);
    uint8_t *p = (uint8_t *)(es + m->n_entries);
    c->entries = m->n_entries ? es : NULL;
    for (uint32_t i = 0; i < m->n_entries; i++) {
        es[i] = m->entries[i];
        es[i].data = m->entries[i].len ? p : NULL;
        if (m->entries[i].len)
            memcpy(p, m->entries[i].data, m->entries[i].len);
        p += m->entries[i].len;
    }
    c->data = NULL;
    if (m->type == RAFT_MSG_SNAP && m->len) {
        memcpy(p, chunk, m->len);
        c->data = p;
    }
    return c;
}

/* Sends m (borrowed; a SNAP carries its chunk's bytes) from the node in
 * from_slot to the node of m->to: applies the network faults, then queues a
 * delivery (or two, if duplicated). */
void sim_net_send(sim *s, int from_slot, const raft_msg *m)
{
    s->st_msgs++;
    int to = sim_slot_of(s, rhost_node_of(m->to));
    if (to < 0)
        return;
    const uint8_t *chunk = NULL;
    if (m->type == RAFT_MSG_SNAP) {
        if (m->len && !m->data) {
            sim_fail(s, "host sent a snapshot chunk without its bytes");
            return;
        }
        chunk = m->data;
    }
    if (s->faults_on) {
        if (s->cut[from_slot][to])
            return;
        if (sim_chance(&s->rng, s->p_drop))
            return;
    }
    int copies = s->faults_on && sim_chance(&s->rng, s->p_dup) ? 2 : 1;
    for (int k = 0; k < copies; k++) {
        sim_event e;
        memset(&e, 0, sizeof e);
        e.type = EV_MSG;
        e.node = to;
        e.time = s->now + 1 + sim_range(&s->rng, 0, s->faults_on ? s->delay_max : 8);
        e.msg = copy_msg(m, chunk);
        sim_ev_push(s, &e);
    }
}

/* Clears every partition. */
void sim_net_heal(sim *s)
{
    memset(s->cut, 0, sizeof s->cut);
}

/* Applies one random network fault (or heals). */
void sim_net_fault(sim *s)
{
    int n = s->n_nodes;
    switch (sim_range(&s->rng, 0, 7)) {
    case 0:
    case 1:
        sim_net_heal(s);
        sim_log(s, "net: heal");
        break;
    case 2: { /* full partition into two sides */
        sim_net_heal(s);
        uint64_t side = sim_rand(&s->rng);
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                if (((side >> a) & 1) != ((side >> b) & 1))
                    s->cut[a][b] = 1;
        sim_log(s, "net: partition %llx", (unsigned long long)side);
        break;
    }
    case 3: { /* isolate one node */
        sim_net_heal(s);
        int x = (int)sim_range(&s->rng, 0, (uint64_t)n - 1);
        for (int b = 0; b < n; b++)
            s->cut[x][b] = s->cut[b][x] = 1;
        sim_log(s, "net: isolate slot %d", x);
        break;
    }
    case 4: { /* partial: random links cut both ways */
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++)
                if (sim_chance(&s->rng, 0.3))
                    s->cut[a][b] = s->cut[b][a] = 1;
        sim_log(s, "net: partial");
        break;
    }
    case 5: { /* one-way links */
        for (int k = 0; k < 2; k++) {
            int a = (int)sim_range(&s->rng, 0, (uint64_t)n - 1);
            int b = (int)sim_range(&s->rng, 0, (uint64_t)n - 1);
            s->cut[a][b] = 1;
        }
        sim_log(s, "net: one-way");
        break;
    }
    case 6: /* link quality */
        s->p_drop = sim_chance(&s->rng, 0.5) ? 0 : (double)sim_range(&s->rng, 1, 30) / 100.0;
        s->p_dup = (double)sim_range(&s->rng, 0, 5) / 100.0;
        s->delay_max = (uint32_t)sim_range(&s->rng, 2, sim_chance(&s->rng, 0.3) ? 150 : 60);
        sim_log(s, "net: drop %.2f dup %.2f delay %u", s->p_drop, s->p_dup, s->delay_max);
        break;
    default: { /* isolate the current leader of a random group */
        int slot;
        int g = (int)sim_range(&s->rng, 0, (uint64_t)s->o.groups - 1);
        if (sim_leader(s, g, &slot)) {
            sim_net_heal(s);
            for (int b = 0; b < n; b++)
                s->cut[slot][b] = s->cut[b][slot] = 1;
            sim_log(s, "net: isolate leader slot %d of group %d", slot, g);
        }
        break;
    }
    }
}
