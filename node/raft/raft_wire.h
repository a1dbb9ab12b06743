/*
 * raft_wire.h — the wire form of Raft messages: a batch of raft_msg (any
 * types, any groups) as the bytes of a RAFT frame's `msgs` field.
 *
 * Why a batch: a node runs many Raft groups and sends another node, in one
 * round of its loop, every message of every group bound for it (heartbeats
 * of all groups coalesced) in one RAFT frame (proto/wire/msg.h).  The
 * encoding is msgpack, written with mp_buf and read with the bounded cursor
 * (proto/wire/mp.h); proto/PROTOCOL.md ("Raft (node to node)") specifies it
 * byte for byte, and docs/RAFT.md ("Messages") lists what each type carries.
 * Each message carries exactly its type's fields, nothing more.
 *
 * Errors are sx_err codes (include/sx_errors.h): SX_EINVAL (an argument the
 * encoder cannot encode), SX_EPROTO (malformed input), SX_ETOOBIG (a batch
 * past the limits below), SX_ENOMEM.
 *
 * Threading: no shared state; encoders and batches are owned by one thread
 * at a time.
 */
#ifndef SHARDEX_RAFT_WIRE_H
#define SHARDEX_RAFT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "mp.h"
#include "raft.h"

/* Most messages in one batch.  A batch of this many needs ~27 MB decoded
 * (sizeof(raft_msg) each); a sender with more starts another frame. */
#define RAFT_WIRE_MAX_MSGS 65536u
/* Most log entries, summed over the messages of one batch (32 MiB decoded). */
#define RAFT_WIRE_MAX_ENTRIES 1048576u

/*
 * An encoder appending messages one at a time to a batch in an mp_buf.
 * The batch starts with a 5-byte array header whose count is written by
 * raft_wire_enc_end, so a host can encode each message as it is handed one
 * (a raft_msg with SNAP chunk bytes may be borrowed only for that moment).
 * Fields are private to raft_wire.c.
 */
typedef struct raft_wire_enc {
    mp_buf *out;        /* borrowed */
    size_t start;       /* offset of the batch's array header in out */
    uint32_t n_msgs;    /* messages added */
    uint64_t n_entries; /* entries added, over all messages */
} raft_wire_enc;

/*
 * Starts a batch at the end of out (an initialised mp_buf; what it already
 * holds is kept before the batch).  out is borrowed until raft_wire_enc_end
 * and must not be written otherwise meanwhile.  Never fails (a lack of
 * memory is sticky in out->oom and reported by add or end).
 */
void raft_wire_enc_begin(raft_wire_enc *e, mp_buf *out);

/*
 * Appends message m (borrowed for the call: every byte it points to is
 * copied).  m must be one the decoder accepts: type PREVOTE..TIMEOUT_NOW;
 * the flags its type carries (reject, force, done) 0 or 1; an APPEND's
 * entries non-NULL when n_entries > 0, each of type NORMAL, NOOP or CONF
 * with data non-NULL when len > 0, and index + n_entries within uint64; a
 * SNAP's conf.n <= RAFT_MAX_MEMBERS with each voter 0 or 1, data non-NULL
 * when len > 0 (the host fills the chunk bytes in) and offset + len within
 * uint64.  Fields the type does not carry are not read.
 * Returns 0; SX_EINVAL (m breaks a rule above; err says which) or
 * SX_ETOOBIG (the batch already holds RAFT_WIRE_MAX_MSGS messages, or m's
 * entries would pass RAFT_WIRE_MAX_ENTRIES: end this batch and start
 * another), both with nothing appended; SX_ENOMEM (out->oom: the batch is
 * lost).  err[errlen] (may be NULL) receives a one-line reason on failure.
 */
int raft_wire_enc_add(raft_wire_enc *e, const raft_msg *m, char *err, size_t errlen);

/*
 * Ends the batch: writes its message count.  The batch is then the bytes of
 * out from the offset where begin found it to the end.  Returns 0, or
 * SX_ENOMEM if any append failed (the caller discards out's contents).
 */
int raft_wire_enc_end(raft_wire_enc *e);

/*
 * Encodes msgs[0..n) as one batch at the end of out (raft_wire_enc_begin,
 * _add for each, _end).  Returns what those return; on SX_EINVAL or
 * SX_ETOOBIG out is left as it was before the call (err names the message
 * at fault), on SX_ENOMEM its contents are to be discarded.
 */
int raft_wire_encode(const raft_msg *msgs, size_t n, mp_buf *out, char *err, size_t errlen);

/*
 * An upper bound on the bytes raft_wire_enc_add appends for m (any m the
 * encoder accepts), for a host that splits batches to fit a frame: a batch
 * is 5 bytes plus its messages.  Never fails; saturates at SIZE_MAX.
 */
size_t raft_wire_msg_bound(const raft_msg *m);

/*
 * A decoded batch.  msgs[i].entries (APPEND) point into one array the batch
 * owns; entry data and SNAP chunk data point into the decoded input, which
 * must outlive the batch and must not be written through these pointers
 * (raft_entry.data is not const).  An empty entry or chunk has data NULL.
 * Fields a message's type does not carry are 0.  Release with
 * raft_wire_batch_free.
 */
typedef struct raft_wire_batch {
    raft_msg *msgs;
    size_t n_msgs;
    /* private: the one allocation behind msgs and their entries */
    void *mem;
    size_t mem_size;
    raft_alloc alloc;
} raft_wire_batch;

/*
 * Decodes the batch in p[0..n) into *out (overwritten; zeroed on failure).
 * The input is checked whole before anything is allocated: counts are
 * bounded by the bytes present (and by RAFT_WIRE_MAX_MSGS and
 * RAFT_WIRE_MAX_ENTRIES), then the messages and their entries get one
 * allocation, through alloc (NULL: malloc/free; a raft_alloc whose
 * functions are NULL means the same).  Never asserts on input.
 * Returns 0; SX_EPROTO (malformed: truncated, not msgpack of the batch's
 * form, an unknown message or entry type, a field of the wrong kind or out
 * of range, a message with more or fewer fields than its type has, more
 * than RAFT_MAX_MEMBERS members, index + n_entries or offset + len past
 * uint64, bytes after the batch); SX_ETOOBIG (more than RAFT_WIRE_MAX_MSGS
 * messages or RAFT_WIRE_MAX_ENTRIES entries); SX_ENOMEM.  err[errlen] (may
 * be NULL) receives a one-line reason on failure (the message and the field
 * at fault).  Messages are not checked against each other nor against the
 * frame's sender: the receiver checks that (PROTOCOL.md).
 */
int raft_wire_decode(const uint8_t *p, size_t n, const raft_alloc *alloc, raft_wire_batch *out,
                     char *err, size_t errlen);

/* Frees what raft_wire_decode allocated and zeroes *b.  Accepts NULL and a
 * zeroed or already freed batch. */
void raft_wire_batch_free(raft_wire_batch *b);

/* The name of a message type ("APPEND"), or "?" for an unknown one. */
const char *raft_wire_type_name(int type);

#endif
