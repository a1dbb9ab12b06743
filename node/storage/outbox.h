/*
 * outbox.h — the outbox's stored format, shared by the writers (a storage
 * partition's group commit and its backfill, storage_part.c) and the
 * reader (the shipper, shipper.c).
 *
 * A group writes each destination's records of one partition as ONE
 * outbox value, a chunk, under the key 'O' | dest | seq of its LAST record:
 *   array32(n) of n records [seq, kind, version, key, h, proj|nil]
 * (msgpack; seqs strictly increasing; n at most OB_CHUNK_MAX_RECORDS, and
 * a chunk is closed once it holds OB_CHUNK_MAX_BYTES). One leveldb entry a
 * chunk, not one a record: a bulk group of 500 items with two indexes
 * writes a few outbox entries and, once shipped, a few deletions, instead
 * of ~1,000 of each. Keying by the last seq lets a reader that resumes at
 * seq s seek to s and still find the chunk that holds s.
 * Readers also accept a single-record value, [kind, version, key, h,
 * proj|nil], keyed by its own seq.
 */
#ifndef SX_OUTBOX_H
#define SX_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mp.h"

#define OB_CHUNK_MAX_RECORDS 512
#define OB_CHUNK_MAX_BYTES (1u << 20)

/* Records for one destination not yet written: a chunk being built. */
typedef struct ob_chunk {
    mp_buf buf;    /* header (5 bytes) + records */
    uint32_t n;    /* records */
    uint64_t last; /* seq of the last one */
} ob_chunk;

/* One record as read. key and proj borrow from the stored value; proj is
 * the raw msgpack (nil when the record has none). */
typedef struct ob_rec {
    uint64_t seq, kind, version, h;
    mp_span key, proj;
} ob_rec;

/* Reads the records of one stored value in order. */
typedef struct ob_reader {
    mp_cur c;
    uint32_t left; /* records not read yet */
    bool single;   /* a pre-chunk value: one record, seq from the key */
    uint64_t key_seq;
} ob_reader;

/* Initialises an empty chunk (allocation is lazy); never fails. */
void ob_chunk_init(ob_chunk *c);

/* Frees the chunk's buffer; it may be initialised again. */
void ob_chunk_free(ob_chunk *c);

/* Empties the chunk, keeping its buffer for the next one unless it grew
 * past 128 KiB (then freed: a partition holds a chunk per destination). */
void ob_chunk_reset(ob_chunk *c);

/* Appends a record (seq above the chunk's last; proj raw msgpack, NULL for
 * nil). Returns 0 or SX_ENOMEM (the chunk is then unusable until reset). */
int ob_chunk_add(ob_chunk *c, uint64_t seq, uint64_t kind, uint64_t version, const uint8_t *key,
                 size_t kn, uint64_t h, const uint8_t *proj, size_t pn);

/* Whether the chunk must be written before another record is added. */
bool ob_chunk_full(const ob_chunk *c);

/* The chunk's stored value (its header filled in); valid until the chunk
 * changes. The chunk must hold a record. */
const uint8_t *ob_chunk_value(ob_chunk *c, size_t *n);

/* Starts reading stored value v of key seq key_seq: *count is its number of
 * records. Returns 0, or SX_EIO for a value that is neither a chunk nor a
 * record. */
int ob_reader_open(ob_reader *r, const uint8_t *v, size_t vn, uint64_t key_seq, uint32_t *count);

/* The next record into *rec: 0, SX_ENOTFOUND when none is left, or SX_EIO
 * for a malformed one. */
int ob_reader_next(ob_reader *r, ob_rec *rec);

/* The number of records in stored value v (0 when it is malformed). */
uint32_t ob_value_count(const uint8_t *v, size_t vn);

#endif
