# deploy/tls.sh — certificates for `local-cluster up --tls`: the routers'
# client port then speaks TLS (tls+tcp://) and accepts only clients whose
# certificate the cluster's CA signed (the config's "client_tls",
# deploy/README.md). Made once, with openssl, in DIR/tls:
#   ca.pem, ca.key          the cluster's CA (P-256, 10 years); keep ca.key
#                           secret: whoever holds it can admit clients
#   router.pem, router.key  the routers' certificate (serverAuth): names
#                           localhost, 127.0.0.1 and the router's address
#   client/                 what a client needs and nothing more: ca.pem,
#                           client.pem and client.key (clientAuth), which
#                           `shardex --tls DIR/tls/client` (or
#                           SHARDEX_TLS_DIR) presents
# Keys are written 0600. Sourced by deploy/local-cluster, which defines die.

# tls_sign NAME CN EXTFILE: NAME.key and NAME.pem signed by the CA (in $1's
# folder, the current directory of the caller's subshell).
tls_sign() {
    local n="$1" cn="$2" ext="$3"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$n.key" \
        -out "$n.csr" -subj "/CN=$cn" 2>/dev/null &&
        openssl x509 -req -in "$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out "$n.pem" -days 3650 -extfile "$ext" 2>/dev/null &&
        chmod 600 "$n.key" && rm -f "$n.csr"
}

# tls_make DIR HOST: makes DIR (CA, router and client certificates; the
# router's names HOST too). Fails, saying why, without openssl.
tls_make() {
    local d="$1" host="$2"
    command -v openssl >/dev/null 2>&1 || die "--tls needs openssl (run scripts/setup)"
    mkdir -p "$d" && chmod 700 "$d" || die "cannot make $d"
    (
        cd "$d" || exit 1
        umask 077
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout ca.key -out ca.pem -days 3650 -subj "/CN=shardex local CA" \
            2>/dev/null || exit 1
        # mbedTLS (under nng) matches the host dialed against DNS names, so
        # the addresses are listed as DNS names too
        printf 'subjectAltName=DNS:localhost,DNS:127.0.0.1,IP:127.0.0.1,DNS:%s,IP:%s\n%s\n' \
            "$host" "$host" "extendedKeyUsage=serverAuth" >router.ext
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        tls_sign router shardex-router router.ext && tls_sign client shardex-client client.ext &&
            rm -f router.ext client.ext ca.srl && chmod 644 ca.pem router.pem client.pem &&
            mkdir -p client && chmod 700 client && cp ca.pem client/ca.pem &&
            mv client.pem client.key client/
    ) || die "cannot make the TLS certificates in $d"
}
