/*
 * outbox.c — building and reading outbox values (see outbox.h): a chunk
 * of a destination's records, or a single-record value.
 */
#include <string.h>
#include "hash.h"
#include "outbox.h"
#include "sx_errors.h"

#define OB_CHUNK_TAG 0xdd  /* msgpack array32: every chunk's first byte */
#define OB_SINGLE_TAG 0x95 /* fixarray(5): a single-record value */
#define OB_HDR 5
/* A reset chunk keeps a buffer up to this size for the next one (a
 * partition holds one per destination; 1 MiB chunks would pin ~2 MiB each) */
#define OB_CHUNK_KEEP_BYTES (128u * 1024u)

void ob_chunk_init(ob_chunk *c)
{
    mp_buf_init(&c->buf);
    c->n = 0;
    c->last = 0;
}

void ob_chunk_free(ob_chunk *c)
{
    mp_buf_free(&c->buf);
    ob_chunk_init(c);
}

void ob_chunk_reset(ob_chunk *c)
{
    if (c->buf.sb.alloc > OB_CHUNK_KEEP_BYTES) {
        ob_chunk_free(c); /* a large chunk's buffer is not kept for good */
        return;
    }
    c->buf.sb.size = 0;
    c->buf.oom = false;
    c->n = 0;
    c->last = 0;
}

int ob_chunk_add(ob_chunk *c, uint64_t seq, uint64_t kind, uint64_t version, const uint8_t *key,
                 size_t kn, uint64_t h, const uint8_t *proj, size_t pn)
{
    static const uint8_t hdr[OB_HDR] = { OB_CHUNK_TAG, 0, 0, 0, 0 };

    if (c->n == 0)
        mp_put_raw(&c->buf, hdr, sizeof(hdr));
    mp_put_array(&c->buf, 6);
    mp_put_u64(&c->buf, seq);
    mp_put_u64(&c->buf, kind);
    mp_put_u64(&c->buf, version);
    mp_put_bin(&c->buf, key, kn);
    mp_put_u64(&c->buf, h);
    if (proj != NULL)
        mp_put_raw(&c->buf, proj, pn);
    else
        mp_put_nil(&c->buf);
    if (c->buf.oom)
        return SX_ENOMEM;
    c->n++;
    c->last = seq;
    return 0;
}

bool ob_chunk_full(const ob_chunk *c)
{
    return c->n >= OB_CHUNK_MAX_RECORDS || c->buf.sb.size >= OB_CHUNK_MAX_BYTES;
}

const uint8_t *ob_chunk_value(ob_chunk *c, size_t *n)
{
    uint8_t *p = (uint8_t *)c->buf.sb.data;

    be_put32(p + 1, c->n);
    *n = c->buf.sb.size;
    return p;
}

int ob_reader_open(ob_reader *r, const uint8_t *v, size_t vn, uint64_t key_seq, uint32_t *count)
{
    r->c = mp_cur_make(v, vn);
    r->key_seq = key_seq;
    r->single = vn > 0 && v[0] == OB_SINGLE_TAG;
    r->left = 0;
    if (r->single)
        r->left = 1;
    else if (vn == 0 || v[0] != OB_CHUNK_TAG || mp_read_array(&r->c, &r->left) != 0)
        r->left = 0;
    *count = r->left;
    return r->left > 0 ? 0 : SX_EIO;
}

int ob_reader_next(ob_reader *r, ob_rec *rec)
{
    uint32_t cnt;

    if (r->left == 0)
        return SX_ENOTFOUND;
    if (mp_read_array(&r->c, &cnt) != 0 || cnt != (r->single ? 5u : 6u))
        return SX_EIO;
    if (r->single)
        rec->seq = r->key_seq;
    else if (mp_read_u64(&r->c, &rec->seq) != 0)
        return SX_EIO;
    if (mp_read_u64(&r->c, &rec->kind) != 0 || mp_read_u64(&r->c, &rec->version) != 0 ||
        mp_read_bin(&r->c, &rec->key) != 0 || mp_read_u64(&r->c, &rec->h) != 0 ||
        mp_read_raw(&r->c, &rec->proj) != 0)
        return SX_EIO;
    r->left--;
    return 0;
}

uint32_t ob_value_count(const uint8_t *v, size_t vn)
{
    ob_reader r;
    uint32_t n;

    return ob_reader_open(&r, v, vn, 0, &n) == 0 ? n : 0;
}
