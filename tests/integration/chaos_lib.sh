# tests/integration/chaos_lib.sh — the write load and the checks shared by
# the tests that break a cluster under it (crash.sh: kill -9 of processes;
# partition.sh: a host cut off the network). Sourced after lib.sh and
# it_cluster_up. Provides:
#   chaos_start            table kv with index by_grp, and a background
#                          writer: batches of new ids plus rewrites of earlier
#                          ids (into another group, or out of the index),
#                          every attempt and which batches were acknowledged
#                          recorded under $W
#   acked_count / attempted / acked_at_least N / attempted_at_least N
#   chaos_finish           waits for 4 more acknowledged batches, stops the
#                          writer, then checks: every acknowledged item is
#                          readable with `get`, and an item whose last write
#                          was acknowledged holds exactly that write; the
#                          index converges to the facts (a strong query over
#                          the whole index returns exactly the stored items
#                          that have the attribute, and the index's own
#                          entries, eventual and covering, equal the facts'
#                          values); every acknowledged item with the attribute
#                          is among them; all 5 processes run. The strong
#                          query is judged on its first answer (it waits for
#                          the index itself; only a failure to answer in time
#                          is retried); the eventual one may be waited for.

chaos_start() {
    W="$IT_DIR/work"
    mkdir -p "$W"
    : >"$W/attempts"   # "batch id grp v" per written item ("-" = no grp)
    : >"$W/acked"      # acknowledged batch numbers
    : >"$W/failed"     # failed batch numbers
    echo 0 >"$W/attempted"

    sx table create kv --key id
    sx index create kv by_grp --on grp --project all
    wait_for "index by_grp ready" 60 index_ready kv by_grp

    GROUPS_=(Apple Kiwi Lime Mango Zebra)   # Apple/Kiwi/Lime -> i1, Mango/Zebra -> i2
    BATCH=6

    # writer: runs until $W/stop exists or MAX batches.
    writer() {
        local b=0 id=1 k r g v f max=400
        while [ ! -e "$W/stop" ] && ((b < max)); do
            b=$((b + 1))
            f="$W/batch.$b.jsonl"
            : >"$f"
            for ((k = 0; k < BATCH; k++)); do
                g="${GROUPS_[$(((id * 7) % 5))]}"
                ((id % 9 == 0)) && g="-"
                v="$b.$k"
                if [ "$g" = "-" ]; then
                    echo "{\"id\": $id, \"v\": \"$v\"}" >>"$f"
                else
                    echo "{\"id\": $id, \"grp\": \"$g\", \"v\": \"$v\"}" >>"$f"
                fi
                echo "$b $id $g $v" >>"$W/attempts"
                id=$((id + 1))
            done
            # two rewrites of ids from earlier batches: a new group, or none
            if ((b > 1)); then
                for k in 0 1; do
                    r=$(((b * 37 + k * 11) % (id - BATCH - 1) + 1))
                    g="${GROUPS_[$(((b + k * 2) % 5))]}"
                    ((b % 4 == 3 && k == 1)) && g="-"
                    v="$b.r$k"
                    if [ "$g" = "-" ]; then
                        echo "{\"id\": $r, \"v\": \"$v\"}" >>"$f"
                    else
                        echo "{\"id\": $r, \"grp\": \"$g\", \"v\": \"$v\"}" >>"$f"
                    fi
                    echo "$b $r $g $v" >>"$W/attempts"
                done
            fi
            if "$IT_CLI" -r "$IT_URL" load kv "$f" >/dev/null 2>>"$W/writer.err"; then
                echo "$b" >>"$W/acked"
            else
                echo "$b" >>"$W/failed"
            fi
            echo "$b" >"$W/attempted.tmp"
            mv "$W/attempted.tmp" "$W/attempted"
        done
    }

    writer &
    WPID=$!
    it_extra_cleanup() {
        touch "$W/stop" 2>/dev/null || true
        kill "$WPID" 2>/dev/null || true
        wait "$WPID" 2>/dev/null || true
    }

    acked_count() { wc -l <"$W/acked"; }
    attempted() { cat "$W/attempted"; }
    acked_at_least() { (($(acked_count) >= $1)); }
    attempted_at_least() { (($(attempted) >= $1)); }

}

chaos_finish() {
    a=$(acked_count)
    wait_for "4 more acknowledged batches after the restart" 60 acked_at_least $((a + 4))
    touch "$W/stop"
    wait "$WPID" || true
    it_extra_cleanup() { :; }
    nb=$(attempted)
    pass "writer stopped after $nb batches: $(acked_count) acknowledged, $(wc -l <"$W/failed") failed"
    [ "$(acked_count)" -ge 10 ] || fail "too few acknowledged batches"

    # ---- expectations from the writer's records -----------------------------------
    # acked ids, and for ids whose last attempt was acknowledged, that attempt.
    awk 'NR == FNR { ok[$1] = 1; next }
         { last[$2] = $0; if ($1 in ok) acked[$2] = 1 }
         END { for (i in acked) print i }' "$W/acked" "$W/attempts" | sort >"$W/acked_ids"
    awk 'NR == FNR { ok[$1] = 1; next }
         { last[$2] = $0; lastb[$2] = $1 }
         END { for (i in last) if (lastb[i] in ok) print last[i] }' "$W/acked" "$W/attempts" \
        | awk '{ print $2, $3, $4 }' | sort >"$W/expect_last"

    # ---- every acknowledged item is readable ----------------------------------------
    # one `get` per id, four at a time; prints "id rc" for every get that failed
    # shellcheck disable=SC2016
    xargs -P 4 -I '{}' sh -c '"$0" -r "$1" get kv "{\"id\": $2}" >/dev/null 2>&1 || echo "$2 $?"' \
        "$IT_CLI" "$IT_URL" '{}' <"$W/acked_ids" >"$W/get_failures" || true
    [ ! -s "$W/get_failures" ] || fail "acknowledged ids not readable (id, exit): $(head -n 5 "$W/get_failures" | tr '\n' ' ')"
    [ "$(wc -l <"$W/acked_ids")" -gt 0 ] || fail "no acknowledged ids"
    pass "all $(wc -l <"$W/acked_ids") acknowledged ids are readable with get"

    # Facts, via scan: "id grp v".
    sx scan kv | jq -r '"\(.id) \(.grp // "-") \(.v)"' | sort >"$W/facts"
    missing="$(comm -23 "$W/expect_last" "$W/facts" | head -n 5)"
    [ -z "$missing" ] || fail "items whose last write was acknowledged differ from that write: $missing"
    pass "$(wc -l <"$W/expect_last") items hold exactly their last acknowledged write"
    awk '{print $1}' "$W/facts" | sort >"$W/fact_ids"
    extra_acked="$(comm -23 "$W/acked_ids" "$W/fact_ids" | head -n 5)"
    [ -z "$extra_acked" ] || fail "acknowledged ids missing from the scan: $extra_acked"
    pass "scan holds every acknowledged id ($(wc -l <"$W/facts") items in all)"

    # ---- the index converges to the facts --------------------------------------------
    awk '$2 != "-" { print $1 }' "$W/facts" | sort >"$W/want_ids"
    awk '$2 != "-" { print $2, $1 }' "$W/facts" | sort >"$W/want_entries"
    # A strong query waits for the index itself: its first answer must be
    # right. Only a failure to answer in time (a timeout, a node not
    # reachable yet) is asked again; any other error, or a wrong answer,
    # fails at once.
    local srcs=0 deadline=$((SECONDS + 60))
    until sx query kv by_grp --consistency strong >"$W/strong.json" 2>"$W/strong.err"; do
        srcs=$?
        grep -qiE 'timed out|unavailable|not connected|network error|node down|strong read' \
            "$W/strong.err" || fail "strong query failed (exit $srcs): $(head -n 3 "$W/strong.err")"
        ((SECONDS < deadline)) ||
            fail "strong query still unanswered after 60 s: $(head -n 3 "$W/strong.err")"
        sleep 0.2
    done
    ids_of <"$W/strong.json" | sort >"$W/strong_ids"
    if ! cmp -s "$W/strong_ids" "$W/want_ids"; then
        diff "$W/want_ids" "$W/strong_ids" | head -n 20 >&2 || true
        fail "the strong query's answer differs from the stored items that have grp"
    fi
    pass "strong query returns exactly the $(wc -l <"$W/want_ids") stored items that have grp"
    entries_ok() {
        sx query kv by_grp --consistency eventual --attrs grp |
            jq -r '"\(.grp) \(.id)"' | sort >"$W/entries" &&
            cmp -s "$W/entries" "$W/want_entries"
    }
    if ! (wait_for "index entries = facts" 60 entries_ok); then
        diff "$W/want_entries" "$W/entries" | head -n 20 >&2 || true
        fail "index entries did not converge to the facts"
    fi
    pass "index entries (eventual, covering) equal the facts' values"
    awk '$2 != "-" { print $1 }' "$W/expect_last" | sort >"$W/acked_grp_ids"
    not_found="$(comm -23 "$W/acked_grp_ids" "$W/strong_ids" | head -n 5)"
    [ -z "$not_found" ] || fail "acknowledged items with grp missing from the index: $not_found"
    pass "every acknowledged item with grp is answered by the index"
    st="$(lc status)"
    [ "$(grep -c running <<<"$st")" -eq 5 ] || fail "not every process is running: $st"
    pass "all 5 processes running"
}
