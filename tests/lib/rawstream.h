/*
 * rawstream.h — a raw nng byte stream for the link tests (link_test,
 * link_auth_test): the test's side speaks bytes itself, not through a
 * link. Header-only; needs check.h's CHECK_INT.
 */
#ifndef SX_RAWSTREAM_H
#define SX_RAWSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <nng/nng.h>
#include "check.h"

/* Dials url. Sets *d, *aio (timeout ms) and returns the stream, or NULL
 * with what was made left in *d and *aio for the caller to free. */
static inline nng_stream *raw_dial(const char *url, int ms, nng_stream_dialer **d, nng_aio **aio)
{
    CHECK_INT(nng_stream_dialer_alloc(d, url), 0);
    CHECK_INT(nng_aio_alloc(aio, NULL, NULL), 0);
    if (*d == NULL || *aio == NULL)
        return NULL;
    nng_aio_set_timeout(*aio, ms);
    nng_stream_dialer_dial(*d, *aio);
    nng_aio_wait(*aio);
    CHECK_INT(nng_aio_result(*aio), 0);
    return nng_aio_get_output(*aio, 0);
}

/* Writes (write) or reads exactly n bytes of p on s with aio; 0 or an
 * nng error (aio's timeout applies to each step). */
static inline int raw_io(nng_stream *s, nng_aio *aio, uint8_t *p, size_t n, bool write)
{
    while (n > 0) {
        nng_iov iov = { p, n };
        nng_aio_set_iov(aio, 1, &iov);
        if (write)
            nng_stream_send(s, aio);
        else
            nng_stream_recv(s, aio);
        nng_aio_wait(aio);
        int rv = nng_aio_result(aio);
        if (rv != 0)
            return rv;
        size_t got = nng_aio_count(aio);
        p += got;
        n -= got;
    }
    return 0;
}

#endif
