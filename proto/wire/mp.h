/*
 * mp.h — bounded msgpack reading and convenient msgpack writing.
 *
 * Reading: a cursor over a byte span that never reads past its end and
 * rejects element counts larger than the bytes left *before* anything is
 * allocated (msgpack-c's own unpacker reserves count x 16 bytes from a 5-byte
 * array header, so network input never goes through it). Strings and binaries
 * are returned as borrowed views into the input buffer.
 *
 * Writing: a growable buffer (mp_buf) with typed append helpers built on
 * msgpack-c's packer.
 */
#ifndef SX_MP_H
#define SX_MP_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <msgpack.h>

/* Nesting deeper than this is rejected as malformed. */
#define MP_MAX_DEPTH 32

/* A borrowed byte span. */
typedef struct mp_span {
    const uint8_t *p;
    size_t n;
} mp_span;

/* Kinds of msgpack values as the cursor sees them. */
typedef enum mp_kind {
    MP_NIL,
    MP_BOOL,
    MP_INT,
    MP_UINT,
    MP_DOUBLE,
    MP_STR,
    MP_BIN,
    MP_ARRAY,
    MP_MAP,
    MP_BAD
} mp_kind;

/* A read position within a span; plain value, copy freely. */
typedef struct mp_cur {
    const uint8_t *p;
    const uint8_t *end;
} mp_cur;

/* A decoded scalar or container header. For MP_STR/MP_BIN `s` borrows from
 * the cursor's buffer; for MP_ARRAY/MP_MAP `count` is the element (pair)
 * count, already checked against the bytes left. */
typedef struct mp_val {
    mp_kind kind;
    bool b;
    int64_t i;  /* MP_INT (negative or any signed encoding that fits) */
    uint64_t u; /* MP_UINT */
    double d;
    mp_span s;
    uint32_t count;
} mp_val;

/* Starts a cursor over [p, p+n). */
mp_cur mp_cur_make(const void *p, size_t n);

/* Bytes left in the cursor. */
size_t mp_left(const mp_cur *c);

/* Reads one value header (scalars whole, containers just their header).
 * Returns 0, or SX_EPROTO on truncation, unknown type byte, ext types, or a
 * container count larger than the bytes left. Advances the cursor only on
 * success. */
int mp_read(mp_cur *c, mp_val *out);

/* Skips one complete value (containers recursively, depth-limited).
 * Returns 0 or SX_EPROTO. */
int mp_skip(mp_cur *c);

/* Reads one complete value and returns its raw bytes as a span. */
int mp_read_raw(mp_cur *c, mp_span *raw);

/* Typed readers: each returns 0, or SX_EPROTO when the next value is of
 * another type or out of range. */
int mp_read_u64(mp_cur *c, uint64_t *out);
int mp_read_i64(mp_cur *c, int64_t *out);
int mp_read_str(mp_cur *c, mp_span *out);
int mp_read_bin(mp_cur *c, mp_span *out);
int mp_read_array(mp_cur *c, uint32_t *count);
int mp_read_map(mp_cur *c, uint32_t *count);
/* True (and consumes it) when the next value is nil. */
bool mp_try_nil(mp_cur *c);

/* Validates that [p, p+n) is exactly one well-formed msgpack value.
 * Returns 0 or SX_EPROTO. */
int mp_validate(const void *p, size_t n);

/* A growable output buffer with a msgpack packer writing into it. The
 * packer points at the buffer's own sbuffer: never copy an initialised
 * mp_buf by value; pass pointers. */
typedef struct mp_buf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    bool oom; /* set when an append failed for lack of memory */
} mp_buf;

/* Initialises an empty buffer. Never fails (allocation is lazy). */
void mp_buf_init(mp_buf *b);
/* Frees the buffer's memory; accepts a zeroed or already-freed buffer. */
void mp_buf_free(mp_buf *b);
/* Makes room for at least n more bytes at once (one allocation instead of
 * a chain of doublings, each a copy into fresh memory, when the size is
 * known ahead). Failure is sticky in b->oom, as for an append. */
void mp_buf_reserve(mp_buf *b, size_t n);
/* Detaches the bytes: caller owns *out and frees it with free(). Returns
 * SX_ENOMEM if any append failed, else 0. The buffer is left empty. */
int mp_buf_take(mp_buf *b, uint8_t **out, size_t *n);

/* Append helpers; failures are sticky in b->oom. */
void mp_put_nil(mp_buf *b);
void mp_put_bool(mp_buf *b, bool v);
void mp_put_u64(mp_buf *b, uint64_t v);
void mp_put_i64(mp_buf *b, int64_t v);
void mp_put_double(mp_buf *b, double v);
void mp_put_str(mp_buf *b, const void *p, size_t n);
void mp_put_cstr(mp_buf *b, const char *s);
void mp_put_bin(mp_buf *b, const void *p, size_t n);
void mp_put_array(mp_buf *b, uint32_t n);
void mp_put_map(mp_buf *b, uint32_t n);
/* Appends already-encoded msgpack bytes as they are. */
void mp_put_raw(mp_buf *b, const void *p, size_t n);

/* True when span equals the NUL-terminated string s. */
bool mp_span_eq_cstr(mp_span s, const char *cs);

#endif
