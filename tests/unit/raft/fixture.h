/*
 * fixture.h — the Raft tests' shared key-value state machine (fixture.c):
 * NKEYS registers of 64 bits.  A command (kv_cmd, KV_CMD_LEN bytes) sets one
 * register; applying it yields the register's previous value as an 8-byte
 * reply, or result code 1 for a malformed command.  Snapshots are SNAPLEN
 * bytes (applied index, then the registers); the bootstrap snapshot
 * (index 1) is the empty state.  The "disk" is the struct: kv_crash drops
 * what was applied since the last snapshot, as a lazy state machine loses
 * it in a crash (the Raft log replays it).
 */
#ifndef SX_RAFT_FIXTURE_H
#define SX_RAFT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "host.h"

#define NKEYS 8
#define SNAPLEN (8 + 8 * NKEYS)
#define KV_CMD_LEN 9

typedef struct kv {
    uint64_t applied;
    uint64_t vals[NKEYS];
    /* "on disk": the last snapshot made or installed, and the staging */
    uint8_t snap[SNAPLEN];
    uint64_t snap_index;
    uint8_t stage[SNAPLEN];
    size_t stage_n;
    uint64_t stage_index;
    int installs;
    int fail_apply;
} kv;

/* The state machine's functions, for rhost_group_add (sm: a kv *). */
extern const rhost_sm_ops kv_ops;

/* Reverts k to its last snapshot (or the empty state). */
void kv_crash(kv *k);

/* Encodes "set register key to v" into out. */
void kv_cmd(uint8_t out[KV_CMD_LEN], uint8_t key, uint64_t v);

#endif
