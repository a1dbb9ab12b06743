/*
 * raft_dedup.h — client request deduplication for replicated state machines
 * built on the Raft core.  Contract: every client has a unique id and numbers
 * its requests 1, 2, 3, ... with at most one outstanding; a retried request
 * keeps its (client, seq).  A state machine applying a committed command
 * first asks raft_dedup_check: NEW → execute and raft_dedup_record the
 * result; DUP → do not execute, answer the recorded result; STALE → an older
 * request the client has given up on: do not execute.  The table is part of
 * the state machine: it is included in snapshots (encode/decode) so every
 * replica decides identically.
 */
#ifndef SHARDEX_RAFT_DEDUP_H
#define SHARDEX_RAFT_DEDUP_H

#include <stddef.h>
#include <stdint.h>

enum { RAFT_DEDUP_NEW = 0, RAFT_DEDUP_DUP = 1, RAFT_DEDUP_STALE = 2 };

typedef struct raft_dedup_slot {
    uint64_t client, seq, result;
} raft_dedup_slot;

typedef struct raft_dedup {
    raft_dedup_slot *v; /* sorted by client */
    size_t n, cap;
} raft_dedup;

/* Initialises an empty table (no allocation). */
void raft_dedup_init(raft_dedup *d);
/* Frees the table's memory; d may be reused after raft_dedup_init. */
void raft_dedup_free(raft_dedup *d);
/* Classifies (client, seq); on DUP, *result (may be NULL) gets the result. */
int raft_dedup_check(const raft_dedup *d, uint64_t client, uint64_t seq, uint64_t *result);
/* Records the result of executing (client, seq).  Returns 0 or -1 (NOMEM). */
int raft_dedup_record(raft_dedup *d, uint64_t client, uint64_t seq, uint64_t result);
/* Bytes raft_dedup_encode writes. */
size_t raft_dedup_encoded_size(const raft_dedup *d);
/* Writes the table to out (raft_dedup_encoded_size bytes). */
void raft_dedup_encode(const raft_dedup *d, uint8_t *out);
/* Replaces d's contents from p[0..len); *used gets the bytes consumed.
 * Returns 0, or -1 on malformed input or NOMEM (d is then empty). */
int raft_dedup_decode(raft_dedup *d, const uint8_t *p, size_t len, size_t *used);

#endif
