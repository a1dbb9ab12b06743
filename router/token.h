/*
 * token.h — the router's opaque continuation tokens.
 *
 * A token carries a list of resume positions (byte strings) and a MAC
 * (libsodium crypto_auth, keyed by the cluster's token_key) over those
 * positions AND the query they belong to (kind, table id, index id,
 * direction, the query's lo/hi bounds). The query itself is not carried:
 * the router recomputes it from the request, so a token altered, forged,
 * or replayed against another query fails the MAC.
 *
 *   token = body || mac[32]
 *   body  = msgpack array of bin positions
 *   mac   = crypto_auth(msgpack [kind, table, index, desc, bin lo, bin hi] || body)
 *
 * Pure functions: no I/O, thread-safe.
 */
#ifndef SX_RT_TOKEN_H
#define SX_RT_TOKEN_H

#include <stdint.h>
#include <stddef.h>
#include "mp.h"

#define RT_TOKEN_KEYBYTES 32
#define RT_TOKEN_MAX_POS 4096

enum { RT_TOK_QUERY = 1, RT_TOK_SCAN = 2 };

/* What a token is bound to. lo/hi are borrowed byte spans. */
typedef struct rt_tokctx {
    uint64_t kind; /* RT_TOK_* */
    uint64_t table_id;
    uint64_t index_id; /* 0 for the primary key and for scans */
    uint64_t desc;
    mp_span lo, hi;
} rt_tokctx;

/* Seals npos positions into a token bound to ctx. On success *tok
 * (malloc'd, caller frees) and *tokn are set. Returns 0, SX_EINVAL (too
 * many positions) or SX_ENOMEM. */
int rt_token_seal(const uint8_t key[RT_TOKEN_KEYBYTES], const rt_tokctx *ctx, const mp_span *pos,
                  uint32_t npos, uint8_t **tok, size_t *tokn);

/* Opens tok..n against ctx. On success *pos (malloc'd array, caller frees;
 * its spans borrow from tok) and *npos are set. Returns 0, or SX_ETOKEN
 * when the token is malformed, altered, forged or belongs to another
 * query; SX_ENOMEM. */
int rt_token_open(const uint8_t key[RT_TOKEN_KEYBYTES], const rt_tokctx *ctx, const uint8_t *tok,
                  size_t n, mp_span **pos, uint32_t *npos);

#endif
