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
# is chosen once per cluster folder, kept in DIR/netns, and skips slots
# whose bridge exists. Needs root and iproute2.
#
# Sourced by deploy/local-cluster, which defines die, procs and dir.

NETNS_NET=10.200

netns_enabled() { [ -f "$dir/netns" ]; }
netns_slot() { cat "$dir/netns"; }
netns_name() { echo "sx$(netns_slot)-$1"; }     # process name -> namespace

netns_check() {
    [ "$(id -u)" = 0 ] || die "--netns needs root (it makes network namespaces and a bridge)"
    command -v ip >/dev/null 2>&1 || die "--netns needs iproute2's ip (apt-get install iproute2)"
}

# netns_pick: chooses a free slot for a new cluster and records it.
netns_pick() {
    local sum slot try
    sum="$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
    slot=$((sum % 250 + 1))
    for ((try = 0; try < 250; try++)); do
        if ! ip link show "sx${slot}br" >/dev/null 2>&1; then
            echo "$slot" >"$dir/netns"
            return 0
        fi
        slot=$((slot % 250 + 1))
    done
    die "no free network slot: 250 bridges sx1br..sx250br exist"
}

# netns_addr I: the address of the I-th process.
netns_addr() { echo "$NETNS_NET.$(netns_slot).$1"; }

# netns_has NS: true when the network namespace NS exists.
netns_has() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

# netns_up: the bridge and every process's namespace, those missing
# (idempotent: `up` after a reboot or a teardown makes them again).
netns_up() {
    local slot br i=0 role n url ns veth addr
    netns_check
    slot="$(netns_slot)"
    br="sx${slot}br"
    if ! ip link show "$br" >/dev/null 2>&1; then
        ip link add "$br" type bridge || die "cannot make bridge $br"
        ip addr add "$NETNS_NET.$slot.254/24" dev "$br" || die "cannot address bridge $br"
        ip link set "$br" up || die "cannot bring up bridge $br"
    fi
    while read -r role n url; do
        i=$((i + 1))
        ns="sx$slot-$n"
        netns_has "$ns" && continue
        veth="sx${slot}v$i"
        addr="${url#*://}"
        addr="${addr%:*}"
        ip link del "$veth" >/dev/null 2>&1 || true     # a half-made one
        ip netns add "$ns" || die "cannot make network namespace $ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns" &&
            ip link set "$veth" master "$br" up &&
            ip netns exec "$ns" ip addr add "$addr/24" dev eth0 &&
            ip netns exec "$ns" ip link set eth0 up &&
            ip netns exec "$ns" ip link set lo up ||
            die "cannot wire network namespace $ns ($role $n)"
    done < <(procs)
}

# netns_teardown: removes the namespaces and the bridge (the processes
# must be stopped first); the folder's config and data stay.
netns_teardown() {
    local slot role n url
    slot="$(netns_slot)"
    while read -r role n url; do
        if netns_has "sx$slot-$n"; then
            ip netns del "sx$slot-$n" || echo "local-cluster: cannot remove namespace sx$slot-$n" >&2
        fi
    done < <(procs)
    if ip link show "sx${slot}br" >/dev/null 2>&1; then
        ip link del "sx${slot}br" || echo "local-cluster: cannot remove bridge sx${slot}br" >&2
    fi
}
