/*
 * lincheck.h — the linearizability checker for one read/write register
 * (lincheck.c), on its own so that more than the simulator can use it:
 * shardex-sim judges its client histories with it, and the chaos checker
 * (tests/chaos) judges recorded cluster histories.  Values are integers; the
 * register starts at 0.
 */
#ifndef SHARDEX_LINCHECK_H
#define SHARDEX_LINCHECK_H

#include <stddef.h>
#include <stdint.h>

#define SIM_INF UINT64_MAX

/* The kinds of a register operation (sim.h adds OP_BARRIER for its clients). */
enum { OP_PUT = 1, OP_GET = 2 };

/* One operation of a register history. */
typedef struct sim_hop {
    int client;
    int kind; /* OP_PUT / OP_GET */
    uint64_t in, out;
    uint64_t call, ret; /* ret SIM_INF: timed out (puts only) */
} sim_hop;

/* Returns 1 if ops (one register, initial value 0) are linearizable, 0 if
 * not, -1 if the search gave up (too large) or ran out of memory.  A put
 * writes in, a get read out; an operation may take effect at any time in
 * [call, ret] (touching intervals count as concurrent), a put with ret
 * SIM_INF at any time after its call or never.  ops is only read. */
int lincheck_register(const sim_hop *ops, size_t n);

#endif
