/*
 * msg.h — every wire message, defined once.
 *
 * A frame is one msgpack array:
 *   request:  [PROTO_VERSION, type, field...]
 *   reply:    [PROTO_VERSION, type | MSG_REPLY, err, field...]   (err == 0)
 *             [PROTO_VERSION, type | MSG_REPLY, err, message]     (err != 0)
 * Fields are positional; each message's request and reply field lists below
 * (F(T, kind, name) entries; T is the struct type when a table is built)
 * yield its C struct, encoder and decoder (table-driven, see msg.c). Readers
 * ignore extra trailing fields (so later versions may append fields).
 * proto/PROTOCOL.md documents each message; keep both in step.
 *
 * Field kinds and their C types:
 *   U64  uint64_t          msgpack non-negative int
 *   STR  mp_span            msgpack str (borrowed from the frame)
 *   BIN  mp_span            msgpack bin (borrowed)
 *   OU64 uint64_t          msgpack non-negative int, optional (as OBIN):
 *                          0 when the frame ends before it
 *   OBIN mp_span            msgpack bin, optional: only at the end of a list,
 *                          and a frame that ends before it decodes with it
 *                          empty (shardex's senders always send it)
 *   RAW  mp_span            any one msgpack value, raw bytes (borrowed)
 *   U64S msg_u64s           array of non-negative ints (allocated)
 *   STRS msg_spans           array of str (allocated array, borrowed items)
 *   BINS msg_spans           array of bin
 *   RAWS msg_spans           array of any values
 */
#ifndef SX_MSG_H
#define SX_MSG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "mp.h"

#define PROTO_VERSION 1
#define MSG_REPLY 0x80

typedef struct msg_u64s {
    uint32_t n;
    uint64_t *v;
} msg_u64s;
typedef struct msg_spans {
    uint32_t n;
    mp_span *v;
} msg_spans;

#define MSG_CT_U64 uint64_t
#define MSG_CT_OU64 uint64_t
#define MSG_CT_STR mp_span
#define MSG_CT_BIN mp_span
#define MSG_CT_OBIN mp_span
#define MSG_CT_RAW mp_span
#define MSG_CT_U64S msg_u64s
#define MSG_CT_STRS msg_spans
#define MSG_CT_BINS msg_spans
#define MSG_CT_RAWS msg_spans

/* Query conditions, consistency levels, catalog operations. */
enum { Q_COND_NONE = 0, Q_COND_RANGE = 1, Q_COND_PREFIX = 2 };
enum { Q_EVENTUAL = 0, Q_VERIFIED = 1, Q_STRONG = 2 };
enum { CATOP_CREATE_TABLE = 1, CATOP_CREATE_INDEX = 2, CATOP_DROP_INDEX = 3 };
enum { OUT_PUT = 0, OUT_DEL = 1 };

/* clang-format off */
/* ---- client port (router) and shared ---- */
#define MSG_PING_REQ(F, T)
#define MSG_PING_REP(F, T) F(T, STR, role) F(T, STR, name)

/* rid: the caller's request id (16 random bytes, the same on every retry):
 * a catalog change the catalog node already made under that id is answered
 * with the version it made, not made again (so a retry after a lost reply
 * does not fail with "already exists" or "no such index"). */
#define MSG_TABLE_CREATE_REQ(F, T) F(T, STR, table) F(T, STR, pk) F(T, STR, sk) F(T, OBIN, rid)
#define MSG_TABLE_CREATE_REP(F, T) F(T, U64, catver)

#define MSG_INDEX_CREATE_REQ(F, T) F(T, STR, table) F(T, STR, index) F(T, STRS, attrs) \
    F(T, U64, proj) F(T, STRS, proj_attrs) F(T, OBIN, rid)
#define MSG_INDEX_CREATE_REP(F, T) F(T, U64, catver)

#define MSG_INDEX_DROP_REQ(F, T) F(T, STR, table) F(T, STR, index) F(T, OBIN, rid)
#define MSG_INDEX_DROP_REP(F, T) F(T, U64, catver)

#define MSG_INDEX_LIST_REQ(F, T) F(T, STR, table)
#define MSG_INDEX_LIST_REP(F, T) F(T, RAWS, indexes)

/* deadline_ms: when the caller stops waiting, in milliseconds of Unix
 * time (CLOCK_REALTIME), or 0 for no deadline. A storage node applies a
 * write only if, when its committer takes it, its own clock plus the
 * cluster's max_clock_skew_ms is still before it; else the write fails with
 * SX_EDEADLINE and was not applied. So a write the caller gave up on cannot
 * land after the caller's next writes. The client sets it on every attempt
 * (its send time plus its timeout), as the last field of the frame. */
#define MSG_PUT_REQ(F, T) F(T, STR, table) F(T, RAWS, items) F(T, OU64, deadline_ms)
#define MSG_PUT_REP(F, T) F(T, U64S, versions)

#define MSG_GET_REQ(F, T) F(T, STR, table) F(T, RAW, key)
#define MSG_GET_REP(F, T) F(T, RAW, item) F(T, U64, version)

#define MSG_DELETE_REQ(F, T) F(T, STR, table) F(T, RAW, key) F(T, OU64, deadline_ms)
#define MSG_DELETE_REP(F, T) F(T, U64, version)

#define MSG_QUERY_REQ(F, T) F(T, STR, table) F(T, STR, index) F(T, RAW, eq) F(T, U64, cond) \
    F(T, RAW, from) F(T, RAW, to) F(T, STR, prefix) F(T, U64, limit) F(T, U64, desc)         \
    F(T, STRS, attrs) F(T, U64, consistency) F(T, BIN, token) F(T, U64, timeout_ms)
#define MSG_QUERY_REP(F, T) F(T, RAWS, items) F(T, BIN, token) F(T, U64S, index_parts)  \
    F(T, U64S, fact_parts) F(T, U64, entries) F(T, U64, stale) F(T, U64, covering)

#define MSG_SCAN_REQ(F, T) F(T, STR, table) F(T, RAW, where) F(T, U64, limit) F(T, BIN, token)
#define MSG_SCAN_REP(F, T) F(T, RAWS, items) F(T, BIN, token)

#define MSG_STATUS_REQ(F, T)
#define MSG_STATUS_REP(F, T) F(T, RAWS, nodes)

/* since: 0 (or absent) asks for the catalog; v > 0 asks for it only if its
 * version is v or later: below v the reply's catalog is nil (a poll that
 * holds version v - 1 then costs a few bytes). */
#define MSG_CATALOG_REQ(F, T) F(T, OU64, since)
#define MSG_CATALOG_REP(F, T) F(T, U64, version) F(T, RAW, catalog)

/* ---- inter-node port ---- */
#define MSG_CAT_UPDATE_REQ(F, T) F(T, U64, op) F(T, STR, table) F(T, STR, index)        \
    F(T, STR, pk) F(T, STR, sk) F(T, STRS, attrs) F(T, U64, proj) F(T, STRS, proj_attrs) \
    F(T, OBIN, rid)
#define MSG_CAT_UPDATE_REP(F, T) F(T, U64, version)

#define MSG_CAT_BACKFILLED_REQ(F, T) F(T, U64, index_id) F(T, U64, part)
#define MSG_CAT_BACKFILLED_REP(F, T) F(T, U64, version)

/* deadline_ms: as PUT's (a router combining several PUTs sends the
 * earliest of their deadlines; 0 for none), checked for the whole request. */
#define MSG_S_WRITE_REQ(F, T) F(T, U64, part) F(T, U64, catver) F(T, U64, table_id)     \
    F(T, U64S, dels) F(T, RAWS, objs) F(T, OU64, deadline_ms)
#define MSG_S_WRITE_REP(F, T) F(T, U64S, versions) F(T, U64S, found)

#define MSG_S_GET_REQ(F, T) F(T, U64, part) F(T, U64, table_id) F(T, BINS, keys)
#define MSG_S_GET_REP(F, T) F(T, RAWS, items) F(T, U64S, versions)

#define MSG_S_RANGE_REQ(F, T) F(T, U64, part) F(T, U64, table_id) F(T, BIN, lo) F(T, BIN, hi) \
    F(T, U64, desc) F(T, U64, limit) F(T, RAW, where)
#define MSG_S_RANGE_REP(F, T) F(T, RAWS, items) F(T, BIN, next)

#define MSG_S_HEADS_REQ(F, T)
#define MSG_S_HEADS_REP(F, T) F(T, U64S, parts) F(T, U64S, heads)

/* A stream's records for one index partition (the fields I_BUILD shares),
 * then after and early:
 *   after  the seq the records follow: the partition refuses the request
 *          (SX_EUNAVAIL, applying nothing) while its watermark for the
 *          source is below it, i.e. when records it had applied were lost
 *          (a machine crash before their sync); 0 (or absent) checks nothing;
 *   early  1: answer once the records are applied (readable), before
 *          their sync; the reply's synced then says how far the source's
 *          records are durable, and only those may leave the outbox.
 *          0 (or absent): answer once they are synced.
 * The reply: the source's watermark (applied), and synced (what the
 * partition holds whatever a crash loses: the last synced 'S' record's,
 * node/index/index_part.h; it may lag watermark by a sync or two, even for a
 * request answered after its sync). */
#define MSG_I_APPLY_FIELDS(F, T) F(T, U64, part) F(T, U64, source) F(T, U64, upto)      \
    F(T, U64, hw) F(T, U64S, seqs) F(T, U64S, kinds) F(T, U64S, versions)               \
    F(T, BINS, keys) F(T, U64S, hashes) F(T, RAWS, projs)
#define MSG_I_APPLY_REQ(F, T) MSG_I_APPLY_FIELDS(F, T) F(T, OU64, after) F(T, OU64, early)
#define MSG_I_APPLY_REP(F, T) F(T, U64, watermark) F(T, OU64, synced)

/* A backfill's records, sent by the building storage partition itself
 * rather than through its outbox: I_APPLY's fields, with upto = the
 * source's outbox head when the records were checked against their facts
 * (under the partition's write lock, held until the reply), hw 0, seqs
 * empty and every kind a put. The index partition applies them by the
 * usual version rules, moves no watermark, and refuses the whole request
 * when its watermark for the source is already past upto (a later write's
 * records were applied first: these may be stale). An acknowledged
 * I_BUILD may not be durable yet: an I_BUILD without records (a seal, its
 * upto ignored) answers once every build record applied before it is.
 * The reply's epoch is the index node's, drawn at random when it starts:
 * a source that sees it change between its first round and its seal
 * builds again (the restarted node may have lost unsealed rounds). seals
 * must be 1: the sender promises to seal (a request without the field
 * cannot be decoded, and its build fails). */
#define MSG_I_BUILD_REQ(F, T) MSG_I_APPLY_FIELDS(F, T) F(T, U64, seals)
#define MSG_I_BUILD_REP(F, T) F(T, U64, watermark) F(T, U64, epoch)

#define MSG_I_RANGE_REQ(F, T) F(T, U64, part) F(T, BIN, lo) F(T, BIN, hi) F(T, U64, desc) F(T, U64, limit)
#define MSG_I_RANGE_REP(F, T) F(T, BINS, keys) F(T, U64S, hashes) F(T, U64S, versions) F(T, RAWS, projs) \
    F(T, U64S, sources) F(T, U64S, wms)

#define MSG_I_WATERMARKS_REQ(F, T) F(T, U64, part)
#define MSG_I_WATERMARKS_REP(F, T) F(T, U64S, sources) F(T, U64S, wms)

#define MSG_NODE_STATUS_REQ(F, T)
#define MSG_NODE_STATUS_REP(F, T) F(T, RAW, status)

/* Raft traffic between nodes: every Raft message one node sends another in
 * one round of its loop, all groups together. from: the sending node's
 * number; msgs: the batch (node/raft/raft_wire.h; PROTOCOL.md, "Raft (node
 * to node)"). The reply only acknowledges receipt: Raft tolerates lost
 * messages, and answers travel in the receiver's own RAFT frames. */
#define MSG_RAFT_REQ(F, T) F(T, U64, from) F(T, BIN, msgs)
#define MSG_RAFT_REP(F, T)

/* Does the receiver hold a replica of group (and know its leader)? A node
 * whose data folder is new asks its group's other nodes before it joins.
 * state: 0 the receiver holds none (or is itself waiting to learn), 1 it
 * does; leader: the leader's node id as it knows it (0: none known). */
#define MSG_R_PROBE_REQ(F, T) F(T, U64, group)
#define MSG_R_PROBE_REP(F, T) F(T, U64, state) F(T, U64, leader)

/* Asks the group's leader to add a new replica on node `node` (its id):
 * the leader adds it as a learner under a fresh replica id (never used in
 * the group before), or answers the id it added for that node already and
 * that is still a learner; it promotes the learner once caught up and then
 * removes the node's older replica. A non-leader answers SX_ENOTLEADER
 * with the leader's node id (msg_encode_err_hint). */
#define MSG_R_JOIN_REQ(F, T) F(T, U64, group) F(T, U64, node)
#define MSG_R_JOIN_REP(F, T) F(T, U64, id)

/* ---- every port ---- */
/* Several whole request frames for one server in one message (net_peer
 * coalesces concurrent calls into it); the reply holds one whole reply
 * frame per request, in order. A MULTI never nests. */
#define MSG_MULTI_REQ(F, T) F(T, BINS, frames)
#define MSG_MULTI_REP(F, T) F(T, BINS, frames)

/* X(NAME, number): numbers cross the wire; never renumber. */
#define SX_MESSAGES(X)                                                        \
    X(PING, 1) X(TABLE_CREATE, 2) X(INDEX_CREATE, 3) X(INDEX_DROP, 4)         \
    X(INDEX_LIST, 5) X(PUT, 6) X(GET, 7) X(DELETE, 8) X(QUERY, 9) X(SCAN, 10) \
    X(STATUS, 11) X(CATALOG, 12)                                              \
    X(CAT_UPDATE, 20) X(CAT_BACKFILLED, 21) X(S_WRITE, 22) X(S_GET, 23)      \
    X(S_RANGE, 24) X(S_HEADS, 25) X(I_APPLY, 26) X(I_RANGE, 27)              \
    X(I_WATERMARKS, 28) X(NODE_STATUS, 29) X(MULTI, 30) X(I_BUILD, 31)      \
    X(RAFT, 32) X(R_PROBE, 33) X(R_JOIN, 34)

typedef enum msg_type {
#define MSG__ENUM(name, num) MSG_##name = num,
    SX_MESSAGES(MSG__ENUM)
#undef MSG__ENUM
} msg_type;

/* Structs: msg_<NAME>_req and msg_<NAME>_rep, e.g. msg_PUT_req, msg_S_WRITE_rep. */
#define MSG__FIELD(T, kind, fname) MSG_CT_##kind fname;
#define MSG__STRUCTS(name, num)                                               \
    typedef struct { char _unused; MSG_##name##_REQ(MSG__FIELD, _) } msg_##name##_req; \
    typedef struct { char _unused; MSG_##name##_REP(MSG__FIELD, _) } msg_##name##_rep;
SX_MESSAGES(MSG__STRUCTS)
#undef MSG__STRUCTS
#undef MSG__FIELD
/* clang-format on */

/* Encodes a request of type t from its struct s into out (a fresh or empty
 * buffer). Returns 0 or SX_ENOMEM / SX_EINVAL (unknown type). */
int msg_encode_req(msg_type t, const void *s, mp_buf *out);

/* Encodes a request of type t from s as a frame of its own: on 0, *frame
 * (malloc'd, the caller frees it) holds *n bytes. Returns 0 or SX_ENOMEM /
 * SX_EINVAL, with *frame NULL. */
int msg_encode_req_bytes(msg_type t, const void *s, uint8_t **frame, size_t *n);

/* Encodes a successful reply. */
int msg_encode_rep(msg_type t, const void *s, mp_buf *out);

/* Encodes an error reply: err (non-zero) and a one-line message. */
int msg_encode_err(msg_type t, int err, const char *message, mp_buf *out);

/* Encodes an error reply that also names where to go instead: for
 * SX_ENOTLEADER, the node id ("id" in the config) of the group's leader as
 * the replying node knows it, 0 when it knows none.  The hint is a fifth
 * element after the message, which a reader of plain error replies skips. */
int msg_encode_err_hint(msg_type t, int err, const char *message, uint64_t hint, mp_buf *out);

/* The reply of a replica of partition `what` `id` (e.g. "index partition",
 * 101) that cannot serve a request of type t: for SX_ENOTLEADER "this
 * replica does not lead WHAT ID: retry at its leader" with hint (the
 * leader's node id, 0: unknown); for any other err, "WHAT ID: its replica
 * cannot serve now: REASON". Returns 0 or SX_ENOMEM. */
int msg_encode_not_served(msg_type t, const char *what, uint64_t id, int err, uint64_t hint,
                          mp_buf *out);

/* The hint of an error reply (msg_encode_err_hint): 0 when the frame is
 * not an error reply or carries none. */
uint64_t msg_err_hint(const uint8_t *p, size_t n);

/* Reads a frame's header: version, type (without MSG_REPLY) and whether it
 * is a reply. Returns 0, SX_EPROTO, or SX_EVERSION. */
int msg_peek(const uint8_t *p, size_t n, msg_type *t, int *is_reply);

/* Decodes a request frame of type t into s (zeroed first). Borrowed views
 * point into p, which must outlive s; lists are allocated: release with
 * msg_free_req. Returns 0, SX_EPROTO, SX_EVERSION, SX_ENOMEM. */
int msg_decode_req(msg_type t, const uint8_t *p, size_t n, void *s);

/* Decodes a reply frame of type t. Returns 0 and fills s; or returns the
 * peer's error code and copies its message into errmsg[errlen] (if not
 * NULL), for an error reply of any type (a peer that cannot parse a
 * request cannot know its type); or SX_EPROTO / SX_EVERSION / SX_ENOMEM
 * for a bad frame, a request, or a successful reply of another type.
 * Release with msg_free_rep. */
int msg_decode_rep(msg_type t, const uint8_t *p, size_t n, void *s, char *errmsg, size_t errlen);

/* Frees the lists a decode allocated; safe on a zeroed struct. */
void msg_free_req(msg_type t, void *s);
void msg_free_rep(msg_type t, void *s);

/* The message's name, e.g. "PUT", or "?" when unknown. */
const char *msg_name(msg_type t);

/* Whether a request of type t only reads: running it again is harmless
 * (it may be resent after a lost connection, or alone after a MULTI reply
 * had no room for its reply). */
bool msg_rerunnable(msg_type t);

/* Largest element count accepted in one list field. */
#define MSG_MAX_LIST 100000

#endif
