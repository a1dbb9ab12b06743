/*
 * net_tls.c — TLS on the client port (nng's tls+tcp://, mbedTLS beneath):
 * a router listens with its certificate and requires every client to show
 * one that the cluster's client CA signed; a client dials with that CA (to
 * check the router's certificate) and its own certificate. The inter-node
 * links do not use this: they carry their own MACs (link_auth.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include "net.h"
#include "sx_errors.h"

/* A PEM file is a few KiB; anything far larger is not one. */
#define PEM_MAX (1u << 20)

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Reads the regular file at path into *out (NUL-terminated; free it with
 * pem_free, which wipes it: it may hold a private key). */
static int read_pem(const char *path, char **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    struct stat st;
    size_t n = 0;

    *out = NULL;
    if (f == NULL)
        return fail(err, errlen, SX_EINVAL, "cannot read %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return fail(err, errlen, SX_EINVAL, "cannot read %s: not a regular file", path);
    }
    buf = malloc(PEM_MAX + 1);
    if (buf != NULL)
        n = fread(buf, 1, PEM_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL)
        return SX_ENOMEM;
    if (bad || n > PEM_MAX) {
        explicit_bzero(buf, n > PEM_MAX ? PEM_MAX : n);
        free(buf);
        return fail(err, errlen, SX_EINVAL, "cannot read %s: %s", path,
                    bad ? "read error" : "larger than 1 MiB, not a PEM file");
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static void pem_free(char *p)
{
    if (p != NULL) {
        explicit_bzero(p, strlen(p));
        free(p);
    }
}

/* A TLS configuration for mode from t's files: the CA to check the other
 * side against (required of it), our certificate and key when given, and
 * for a client the name the server's certificate must carry: t's
 * server_name, else the host of url (nng checks no name otherwise once a
 * configuration of our own replaces its default). */
static int tls_config(nng_tls_mode mode, const net_tls *t, const char *url, nng_tls_config **out,
                      char *err, size_t errlen)
{
    nng_url *u = NULL;
    const char *name = t->server_name;
    nng_tls_config *cfg = NULL;
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rv, rc;

    *out = NULL;
    if (t->ca == NULL || (mode == NNG_TLS_MODE_SERVER && (t->cert == NULL || t->key == NULL)))
        return fail(err, errlen, SX_EINVAL, "TLS needs a CA file%s",
                    mode == NNG_TLS_MODE_SERVER ? ", a certificate and a key" : "");
    if ((t->cert == NULL) != (t->key == NULL))
        return fail(err, errlen, SX_EINVAL,
                    "a TLS certificate needs its key, and a key its "
                    "certificate");
    rc = read_pem(t->ca, &ca, err, errlen);
    if (rc == 0 && t->cert != NULL)
        rc = read_pem(t->cert, &cert, err, errlen);
    if (rc == 0 && t->key != NULL)
        rc = read_pem(t->key, &key, err, errlen);
    if (rc == 0 && (rv = nng_tls_config_alloc(&cfg, mode)) != 0)
        rc = fail(err, errlen, SX_ENOMEM, "TLS: %s", nng_strerror(rv));
    if (rc == 0 && (rv = nng_tls_config_ca_chain(cfg, ca, NULL)) != 0)
        rc = fail(err, errlen, SX_EINVAL, "%s is not a usable CA certificate (PEM): %s", t->ca,
                  nng_strerror(rv));
    if (rc == 0 && cert != NULL && (rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0)
        rc = fail(err, errlen, SX_EINVAL,
                  "%s and its key are not a usable certificate and "
                  "private key (PEM, unencrypted): %s",
                  t->cert, nng_strerror(rv));
    if (rc == 0 && (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0)
        rc = fail(err, errlen, SX_EINVAL, "TLS: %s", nng_strerror(rv));
    if (rc == 0 && mode == NNG_TLS_MODE_CLIENT && name == NULL) {
        if (nng_url_parse(&u, url) != 0 || u->u_hostname == NULL || u->u_hostname[0] == '\0')
            rc = fail(err, errlen, SX_EINVAL,
                      "no host in %s to check the router's "
                      "certificate against",
                      url);
        else
            name = u->u_hostname;
    }
    if (rc == 0 && name != NULL && (rv = nng_tls_config_server_name(cfg, name)) != 0)
        rc = fail(err, errlen, SX_EINVAL, "TLS server name %s: %s", name, nng_strerror(rv));
    if (u != NULL)
        nng_url_free(u);
    pem_free(ca);
    pem_free(cert);
    pem_free(key);
    if (rc != 0) {
        if (cfg != NULL)
            nng_tls_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

int net_listen_tls(const char *url, const net_tls *tls, nng_socket *out, char *err, size_t errlen)
{
    nng_tls_config *cfg = NULL;
    nng_listener l;
    int rv, rc;

    if (tls == NULL)
        return net_listen(url, out);
    rc = tls_config(NNG_TLS_MODE_SERVER, tls, url, &cfg, err, errlen);
    if (rc != 0)
        return rc;
    rv = nng_rep0_open(out);
    if (rv != 0) {
        nng_tls_config_free(cfg);
        return fail(err, errlen, SX_ENET, "rep socket: %s", nng_strerror(rv));
    }
    rv = nng_socket_set_size(*out, NNG_OPT_RECVMAXSZ, SX_MAX_FRAME);
    if (rv == 0)
        rv = nng_listener_create(&l, *out, url);
    if (rv == 0)
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    nng_tls_config_free(cfg); /* the listener holds its own reference */
    if (rv != 0) {
        nng_close(*out);
        return fail(err, errlen, SX_ENET, "listen %s: %s", url, nng_strerror(rv));
    }
    return 0;
}

int net_dial_tls(const char *url, const net_tls *tls, nng_socket *out, char *err, size_t errlen)
{
    nng_tls_config *cfg = NULL;
    nng_dialer d;
    int rv, rc;

    if (tls == NULL)
        return net_dial(url, out);
    rc = tls_config(NNG_TLS_MODE_CLIENT, tls, url, &cfg, err, errlen);
    if (rc != 0)
        return rc;
    rv = nng_req0_open(out);
    if (rv != 0) {
        nng_tls_config_free(cfg);
        return fail(err, errlen, SX_ENET, "req socket: %s", nng_strerror(rv));
    }
    rv = net_req_options(*out);
    if (rv == 0)
        rv = nng_dialer_create(&d, *out, url);
    if (rv == 0)
        rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
    if (rv == 0)
        rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
    nng_tls_config_free(cfg); /* the dialer holds its own reference */
    if (rv != 0) {
        nng_close(*out);
        return fail(err, errlen, SX_ENET, "dial %s: %s", url, nng_strerror(rv));
    }
    return 0;
}
