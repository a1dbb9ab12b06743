/*
 * token.c — sealing and opening continuation tokens (see token.h for the
 * format and what the MAC binds).
 */
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "token.h"
#include "sx_errors.h"

_Static_assert(crypto_auth_BYTES == 32, "token MAC is 32 bytes");
_Static_assert(crypto_auth_KEYBYTES == RT_TOKEN_KEYBYTES, "token key size");

/* Computes the MAC over ctx and body into mac. Returns 0 or SX_ENOMEM. */
static int token_mac(const uint8_t key[RT_TOKEN_KEYBYTES], const rt_tokctx *ctx,
                     const uint8_t *body, size_t bn, uint8_t mac[crypto_auth_BYTES])
{
    crypto_auth_hmacsha512256_state st;
    mp_buf hdr;

    mp_buf_init(&hdr);
    mp_put_array(&hdr, 6);
    mp_put_u64(&hdr, ctx->kind);
    mp_put_u64(&hdr, ctx->table_id);
    mp_put_u64(&hdr, ctx->index_id);
    mp_put_u64(&hdr, ctx->desc);
    mp_put_bin(&hdr, ctx->lo.p, ctx->lo.n);
    mp_put_bin(&hdr, ctx->hi.p, ctx->hi.n);
    if (hdr.oom) {
        mp_buf_free(&hdr);
        return SX_ENOMEM;
    }
    /* crypto_auth is HMAC-SHA-512-256; the streaming form avoids a copy. */
    crypto_auth_hmacsha512256_init(&st, key, RT_TOKEN_KEYBYTES);
    crypto_auth_hmacsha512256_update(&st, (const uint8_t *)hdr.sb.data, hdr.sb.size);
    crypto_auth_hmacsha512256_update(&st, body, bn);
    crypto_auth_hmacsha512256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
    mp_buf_free(&hdr);
    return 0;
}

int rt_token_seal(const uint8_t key[RT_TOKEN_KEYBYTES], const rt_tokctx *ctx, const mp_span *pos,
                  uint32_t npos, uint8_t **tok, size_t *tokn)
{
    mp_buf b;
    uint8_t mac[crypto_auth_BYTES];
    uint8_t *p = NULL;
    size_t n = 0;
    uint32_t i;
    int rc;

    if (npos > RT_TOKEN_MAX_POS)
        return SX_EINVAL;
    mp_buf_init(&b);
    mp_put_array(&b, npos);
    for (i = 0; i < npos; i++)
        mp_put_bin(&b, pos[i].p, pos[i].n);
    rc = mp_buf_take(&b, &p, &n);
    mp_buf_free(&b);
    if (rc != 0)
        return SX_ENOMEM;
    rc = token_mac(key, ctx, p, n, mac);
    if (rc != 0) {
        free(p);
        return rc;
    }
    {
        uint8_t *t = realloc(p, n + sizeof(mac));
        if (t == NULL) {
            free(p);
            return SX_ENOMEM;
        }
        p = t;
    }
    memcpy(p + n, mac, sizeof(mac));
    *tok = p;
    *tokn = n + sizeof(mac);
    return 0;
}

int rt_token_open(const uint8_t key[RT_TOKEN_KEYBYTES], const rt_tokctx *ctx, const uint8_t *tok,
                  size_t n, mp_span **pos, uint32_t *npos)
{
    uint8_t mac[crypto_auth_BYTES];
    size_t bn;
    mp_cur c;
    uint32_t cnt, i;
    mp_span *v;
    int rc;

    if (tok == NULL || n <= sizeof(mac))
        return SX_ETOKEN;
    bn = n - sizeof(mac);
    rc = token_mac(key, ctx, tok, bn, mac);
    if (rc != 0)
        return rc;
    if (sodium_memcmp(mac, tok + bn, sizeof(mac)) != 0)
        return SX_ETOKEN;
    /* Authentic: the body was written by rt_token_seal, but parse it as
     * carefully as any input. */
    c = mp_cur_make(tok, bn);
    if (mp_read_array(&c, &cnt) != 0 || cnt > RT_TOKEN_MAX_POS)
        return SX_ETOKEN;
    v = calloc((size_t)cnt + 1, sizeof(*v));
    if (v == NULL)
        return SX_ENOMEM;
    for (i = 0; i < cnt; i++) {
        if (mp_read_bin(&c, &v[i]) != 0) {
            free(v);
            return SX_ETOKEN;
        }
    }
    if (mp_left(&c) != 0) {
        free(v);
        return SX_ETOKEN;
    }
    *pos = v;
    *npos = cnt;
    return 0;
}
