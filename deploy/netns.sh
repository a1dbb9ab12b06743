# deploy/netns.sh — "hosts" on one machine for `local-cluster up --netns`:
# every process of the cluster runs in a Linux network namespace of its own
# (its own network stack, loopback and address), all of them plugged into a
# private bridge, so the cluster's processes talk over a real (virtual)
# network, not loopback — as on several hosts. The config then lists
# non-loopback URLs, so the processes refuse to start without the cluster's
# link_key, and every link between them is authenticated.
#
# Addresses: 10.200.SLOT.I/24, one per process (local-cluster writes them
# in its config; each namespace takes the address its process's URL names), the bridge
# "sxSLOTbr" at 10.200.SLOT.254 in the calling namespace, so that clients
# here reach the router. Namespaces are named "sxSLOT-NAME". SLOT (1–250)
# is chosen once per cluster folder, kept in DIR/netns, and claimed in
# /run/shardex-netns/SLOT (the owning folder): a slot owned by another
# folder, or whose bridge, addresses or routes exist on this host, is not
# taken, and a folder touches only the slot it owns (teardown releases it;
# a later `up` claims it again if it is still free). Slots are claimed,
# built and removed under /run/shardex-netns/lock. Needs root and iproute2.
#
# Sourced by deploy/local-cluster, which defines die, procs and dir.

NETNS_NET=10.200
NETNS_RUN=/run/shardex-netns      # SLOT files: the cluster folder owning each slot

netns_enabled() { [ -f "$dir/netns" ]; }
netns_slot() { cat "$dir/netns"; }
netns_name() { echo "sx$(netns_slot)-$1"; }     # process name -> namespace

netns_check() {
    [ "$(id -u)" = 0 ] || die "--netns needs root (it makes network namespaces and a bridge)"
    command -v ip >/dev/null 2>&1 || die "--netns needs iproute2's ip (apt-get install iproute2)"
    mkdir -p "$NETNS_RUN" || die "cannot make $NETNS_RUN"
}

# netns_lock: holds $NETNS_RUN/lock (fd 8) until the script exits, so that
# two local-clusters never claim, build or remove slots at once.
netns_lock() {
    exec 8>"$NETNS_RUN/lock"
    flock -w 120 8 || die "another local-cluster holds $NETNS_RUN/lock for too long"
}

# netns_has NS: true when the network namespace NS exists.
netns_has() { [ -e "/run/netns/$1" ]; }

# netns_free SLOT: true when nothing on this host uses SLOT: no owner, no
# bridge of that name, no address or route in its /24.
netns_free() {
    [ ! -e "$NETNS_RUN/$1" ] && ! ip link show "sx${1}br" >/dev/null 2>&1 &&
        [ -z "$(ip -4 addr show to "$NETNS_NET.$1.0/24" 2>/dev/null)" ] &&
        [ -z "$(ip -4 route show root "$NETNS_NET.$1.0/24" 2>/dev/null)" ]
}

# netns_claim SLOT: records this folder as SLOT's owner.
netns_claim() { printf '%s\n' "$dir" >"$NETNS_RUN/$1" || die "cannot write $NETNS_RUN/$1"; }

# netns_owned: true when this folder owns its slot.
netns_owned() { [ "$(cat "$NETNS_RUN/$(netns_slot)" 2>/dev/null)" = "$dir" ]; }

# netns_pick: chooses a free slot for a new cluster and claims it
# (caller holds the lock).
netns_pick() {
    local sum slot try
    sum="$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
    slot=$((sum % 250 + 1))
    for ((try = 0; try < 250; try++)); do
        if netns_free "$slot"; then
            netns_claim "$slot"
            echo "$slot" >"$dir/netns"
            return 0
        fi
        slot=$((slot % 250 + 1))
    done
    die "no free network slot: 10.200.1.0/24 to 10.200.250.0/24 are all in use"
}

# netns_addr I: the address of the I-th process.
netns_addr() { echo "$NETNS_NET.$(netns_slot).$1"; }

# netns_wired NS ADDR: true when NS's eth0 holds ADDR (a namespace left
# half-made by an interrupted `up` is not).
netns_wired() {
    local a
    a="$(ip netns exec "$1" ip -4 addr show dev eth0 2>/dev/null)" || return 1
    [[ "$a" == *"inet $2/24 "* ]]
}

# netns_up: the bridge and every process's namespace, those missing or
# half-made (idempotent: `up` after a reboot or a teardown makes them
# again, claiming the slot again if it is still free).
netns_up() {
    local slot br i=0 role n url ns veth addr
    netns_check
    netns_lock
    slot="$(netns_slot)"
    if ! netns_owned; then
        if [ -e "$NETNS_RUN/$slot" ]; then
            die "network slot $slot belongs to the cluster in $(cat "$NETNS_RUN/$slot"); this folder cannot use it (make a new one)"
        fi
        netns_free "$slot" || die "network slot $slot ($NETNS_NET.$slot.0/24) is in use on this host; this folder cannot use it (make a new one)"
        netns_claim "$slot"
    fi
    br="sx${slot}br"
    if ! ip link show "$br" >/dev/null 2>&1; then
        ip link add "$br" type bridge || die "cannot make bridge $br"
        ip addr add "$NETNS_NET.$slot.254/24" dev "$br" || die "cannot address bridge $br"
        ip link set "$br" up || die "cannot bring up bridge $br"
    fi
    while read -r role n url; do
        i=$((i + 1))
        ns="sx$slot-$n"
        veth="sx${slot}v$i"
        addr="${url#*://}"
        addr="${addr%:*}"
        if netns_has "$ns"; then
            netns_wired "$ns" "$addr" && continue
            ip netns del "$ns" || die "cannot remove the half-made namespace $ns"
        fi
        ip link del "$veth" >/dev/null 2>&1 || true     # a half-made one
        ip netns add "$ns" || die "cannot make network namespace $ns"
        if ! { ip link add "$veth" type veth peer name eth0 netns "$ns" &&
               ip link set "$veth" master "$br" up &&
               ip netns exec "$ns" ip addr add "$addr/24" dev eth0 &&
               ip netns exec "$ns" ip link set eth0 up &&
               ip netns exec "$ns" ip link set lo up; }; then
            ip netns del "$ns" >/dev/null 2>&1 || true
            die "cannot wire network namespace $ns ($role $n)"
        fi
    done < <(procs)
}

# netns_teardown: removes the namespaces, their veths and the bridge of
# this folder's slot, and releases the slot (the processes must be stopped
# first); the folder's config and data stay. A slot this folder does not
# own is left alone (and the function fails, saying so).
netns_teardown() {
    local slot i=0 role n url
    netns_check
    netns_lock
    slot="$(netns_slot)"
    if ! netns_owned; then
        if [ -e "$NETNS_RUN/$slot" ]; then
            echo "local-cluster: network slot $slot belongs to the cluster in" \
                 "$(cat "$NETNS_RUN/$slot"): left alone" >&2
        fi
        return 1                # (or released already: nothing to remove)
    fi
    while read -r role n url; do
        i=$((i + 1))
        if netns_has "sx$slot-$n"; then
            ip netns del "sx$slot-$n" || echo "local-cluster: cannot remove namespace sx$slot-$n" >&2
        fi
        # (a namespace held by a socket still closing keeps its veth: drop it)
        ip link del "sx${slot}v$i" >/dev/null 2>&1 || true
    done < <(procs)
    if ip link show "sx${slot}br" >/dev/null 2>&1; then
        ip link del "sx${slot}br" || echo "local-cluster: cannot remove bridge sx${slot}br" >&2
    fi
    rm -f "$NETNS_RUN/$slot"
}
