/*
 * lin.c — the chaos checker's linearizable checker (model register): each
 * key's history of puts, deletes (writes of null) and gets is judged by
 * lincheck_register (tests/sim/lincheck.c) with the key's values interned
 * as integers (null, the initial state, is 0).  An ok operation took effect
 * within [invoke, completion]; an info or never-completed write at any time
 * after its invoke, or never; failed operations and reads that did not
 * complete ok are left out.
 *
 * For the first failing key the counterexample is shrunk, every step kept
 * only when lincheck proves the smaller set still cannot be linearized, and
 * every step sound (README.md, "linearizable"):
 *   1. right end: the earliest completion time t such that the history cut
 *      at t (operations invoked by t; a write still running at t may or may
 *      not have taken effect, a read still running is left out) fails —
 *      a binary search, as cutting preserves linearizability;
 *   2. left end: the latest quiescent time s (every operation invoked before
 *      s that completed had completed before s) such that the operations
 *      from s (and the info writes invoked before it) fail from whatever
 *      value the key may have held at s — absent, or the value of a write
 *      invoked before s that no write completed before s certainly
 *      overwrote — a binary search;
 *   3. inside the window: drop each read, and each write whose value no
 *      remaining read returns, while the rest still fails for every such
 *      initial value (neither removal can make a linearizable set fail).
 * The counterexample is then the window's remaining operations, the writes
 * before s that define its possible initial values, and for each value
 * read the latest write of it before s; it is checked to fail on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "chk.h"
#include "lincheck.h"

#define SHRINK_RUNS 4000 /* lincheck runs the shrinking may spend */
#define LIST_OPS 8       /* operations named on the verdict line */

/* A judged operation of one key. */
typedef struct lop {
    const chk_op *op;
    int write;
    uint64_t v;         /* written or read value id */
    uint64_t call, ret; /* times + 2 (1 is the initial write); ret CHK_INF: open */
} lop;

typedef struct shrink {
    sim_hop *buf;         /* n + 1 */
    lop *tmp;             /* n */
    uint64_t *vals, *eff; /* n + 1, n + 2 */
    size_t runs;
    int cut_short;
} shrink;

static int cmp_lop(const void *a, const void *b)
{
    const lop *x = a, *y = b;
    if (x->op->key != y->op->key)
        return x->op->key < y->op->key ? -1 : 1;
    if (x->call != y->call)
        return x->call < y->call ? -1 : 1;
    return (x->op->inv_line > y->op->inv_line) - (x->op->inv_line < y->op->inv_line);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_line(const void *a, const void *b)
{
    const lop *x = a, *y = b;
    return (x->op->inv_line > y->op->inv_line) - (x->op->inv_line < y->op->inv_line);
}

/* lincheck over ops starting from value init: 1 linearizable, 0 not, -1
 * gave up. */
static int run(shrink *sh, const lop *ops, size_t n, uint64_t init)
{
    size_t k = 0;
    if (init)
        sh->buf[k++] = (sim_hop){ .kind = OP_PUT, .in = init, .call = 1, .ret = 1 };
    for (size_t i = 0; i < n; i++)
        sh->buf[k++] = (sim_hop){ .kind = ops[i].write ? OP_PUT : OP_GET,
                                  .in = ops[i].write ? ops[i].v : 0,
                                  .out = ops[i].write ? 0 : ops[i].v,
                                  .call = ops[i].call,
                                  .ret = ops[i].ret };
    sh->runs++;
    return lincheck_register(sh->buf, k);
}

/* 1 when ops fail from every initial value in cands (within the budget).
 * The initial values that no read of ops returns behave alike (the search
 * compares the state only with values read), so one stands for them all. */
static int fails_all(shrink *sh, const lop *ops, size_t n, const uint64_t *cands, size_t nc)
{
    size_t nv = 0, ne = 0, other = 0;
    for (size_t i = 0; i < n; i++)
        if (!ops[i].write)
            sh->vals[nv++] = ops[i].v;
    qsort(sh->vals, nv, sizeof *sh->vals, cmp_u64);
    for (size_t i = 0; i < nc; i++) {
        if (bsearch(&cands[i], sh->vals, nv, sizeof *sh->vals, cmp_u64))
            sh->eff[ne++] = cands[i];
        else if (!other++)
            sh->eff[nc] = cands[i];
    }
    if (other)
        sh->eff[ne++] = sh->eff[nc];
    if (sh->runs + ne > SHRINK_RUNS) {
        sh->cut_short = 1;
        return 0;
    }
    for (size_t i = 0; i < ne; i++)
        if (run(sh, ops, n, sh->eff[i]) != 0)
            return 0;
    return 1;
}

/* Drops from s[n] the open writes (ret CHK_INF) whose value no remaining
 * read returns: they can take effect last, where nobody sees them, so
 * dropping them changes no verdict. */
static void drop_unread_open(const lop *s, size_t n, char *gone)
{
    for (size_t i = 0; i < n; i++) {
        if (gone[i] || !s[i].write || s[i].ret != CHK_INF)
            continue;
        int read = 0;
        for (size_t j = 0; j < n && !read; j++)
            read = !gone[j] && !s[j].write && s[j].v == s[i].v;
        gone[i] = !read;
    }
}

/* The key's operations g[n] cut at time t into out: returns their number. */
static size_t cut_at(const lop *g, size_t n, uint64_t t, lop *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n && g[i].call <= t; i++) {
        if (g[i].ret <= t || g[i].ret == CHK_INF) {
            out[k++] = g[i];
        } else if (g[i].write) {
            out[k] = g[i];
            out[k++].ret = CHK_INF;
        }
    }
    return k;
}

/* The window of t[n] from index i into out (the info writes invoked before
 * it, then t[i..]) and its possible initial values into cands (sorted,
 * distinct); *nw and *nc get the counts. */
static void window(const lop *t, size_t n, size_t i, lop *out, size_t *nw, uint64_t *cands,
                   size_t *nc)
{
    uint64_t maxcall = 0;
    int completed = 0;
    size_t k = 0, c = 0;
    for (size_t j = 0; j < i; j++)
        if (t[j].write && t[j].ret != CHK_INF) {
            completed = 1;
            maxcall = t[j].call > maxcall ? t[j].call : maxcall;
        }
    for (size_t j = 0; j < i; j++) {
        if (!t[j].write)
            continue;
        if (t[j].ret == CHK_INF) {
            out[k++] = t[j];
            cands[c++] = t[j].v;
        } else if (t[j].ret >= maxcall) {
            cands[c++] = t[j].v; /* not certainly overwritten before the window */
        }
    }
    if (!completed)
        cands[c++] = 0;
    for (size_t j = i; j < n; j++)
        out[k++] = t[j];
    qsort(cands, c, sizeof *cands, cmp_u64);
    size_t d = 0;
    for (size_t j = 0; j < c; j++)
        if (!d || cands[d - 1] != cands[j])
            cands[d++] = cands[j];
    *nw = k;
    *nc = d;
}

/* What the shrinking found for one key. */
typedef struct witness {
    lop *ops; /* in line order */
    size_t n;
    size_t window_ops;
    int verified;
} witness;

/* Shrinks the failing key g[n] (README.md, "linearizable") into w. */
static int shrink_key(const lop *g, size_t n, shrink *sh, witness *w)
{
    int rc = -1;
    lop *t = malloc(n * sizeof *t), *s = malloc(n * sizeof *s);
    uint64_t *rets = malloc(n * sizeof *rets), *cands = malloc((n + 1) * sizeof *cands);
    size_t *qs = malloc(n * sizeof *qs);
    char *gone = calloc(n, 1);
    w->ops = malloc((2 * n + 1) * sizeof *w->ops);
    if (!t || !s || !rets || !cands || !qs || !gone || !w->ops)
        goto out;

    /* 1. right end */
    size_t nr = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i].ret != CHK_INF)
            rets[nr++] = g[i].ret;
    qsort(rets, nr, sizeof *rets, cmp_u64);
    size_t d = 0;
    for (size_t i = 0; i < nr; i++)
        if (!d || rets[d - 1] != rets[i])
            rets[d++] = rets[i];
    nr = d;
    size_t nt;
    uint64_t zero = 0;
    if (nr && (nt = cut_at(g, n, rets[nr - 1], t), fails_all(sh, t, nt, &zero, 1))) {
        size_t lo = 0, hi = nr - 1;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            nt = cut_at(g, n, rets[mid], t);
            if (fails_all(sh, t, nt, &zero, 1))
                hi = mid;
            else
                lo = mid + 1;
        }
        nt = cut_at(g, n, rets[hi], t);
    } else {
        memcpy(t, g, n * sizeof *t);
        nt = n;
    }

    /* 2. left end, over the quiescent times */
    size_t nq = 0;
    uint64_t maxret = 0;
    int any = 0;
    for (size_t i = 0; i < nt;) {
        size_t j = i;
        while (j < nt && t[j].call == t[i].call)
            j++;
        if (!any || maxret < t[i].call)
            qs[nq++] = i;
        for (size_t k = i; k < j; k++)
            if (t[k].ret != CHK_INF) {
                maxret = t[k].ret > maxret ? t[k].ret : maxret;
                any = 1;
            }
        i = j;
    }
    size_t ns, nc, lo = 0, hi = nq ? nq - 1 : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        window(t, nt, qs[mid], s, &ns, cands, &nc);
        if (fails_all(sh, s, ns, cands, nc))
            lo = mid;
        else
            hi = mid - 1;
    }
    size_t start = nq ? qs[lo] : 0;
    window(t, nt, start, s, &ns, cands, &nc);
    w->window_ops = ns;

    /* 3. inside the window: reads, then writes nobody reads, until stable */
    for (int changed = 1; changed && !sh->cut_short;) {
        changed = 0;
        for (int writes = 0; writes < 2; writes++) {
            if (writes)
                drop_unread_open(s, ns, gone);
            for (size_t i = 0; i < ns && !sh->cut_short; i++) {
                if (gone[i] || s[i].write != writes)
                    continue;
                int read = 0;
                for (size_t j = 0; j < ns && writes && !read; j++)
                    read = !gone[j] && !s[j].write && s[j].v == s[i].v;
                if (read)
                    continue;
                gone[i] = 1;
                size_t k = 0;
                for (size_t j = 0; j < ns; j++)
                    if (!gone[j])
                        sh->tmp[k++] = s[j];
                if (fails_all(sh, sh->tmp, k, cands, nc))
                    changed = 1;
                else
                    gone[i] = 0;
            }
        }
    }

    /* the witness: what is left, the writes before the window that define
     * its initial values, and the latest earlier write of each value read */
    size_t k = 0;
    for (size_t i = 0; i < ns; i++)
        if (!gone[i])
            w->ops[k++] = s[i];
    uint64_t maxcall = 0;
    for (size_t j = 0; j < start; j++)
        if (t[j].write && t[j].ret != CHK_INF && t[j].call > maxcall)
            maxcall = t[j].call;
    for (size_t j = 0; j < start; j++)
        if (t[j].write && t[j].ret != CHK_INF && t[j].ret >= maxcall)
            w->ops[k++] = t[j];
    size_t kept = k;
    for (size_t i = 0; i < kept; i++) {
        if (w->ops[i].write)
            continue;
        int have = 0;
        for (size_t j = 0; j < k && !have; j++)
            have = w->ops[j].write && w->ops[j].v == w->ops[i].v;
        const lop *last = NULL;
        for (size_t j = 0; j < start && !have; j++)
            if (t[j].write && t[j].v == w->ops[i].v)
                last = &t[j];
        if (last)
            w->ops[k++] = *last;
    }
    w->n = k;
    w->verified = run(sh, w->ops, w->n, 0) == 0;
    if (!w->verified) { /* cannot happen if the steps are sound: keep the cut */
        memcpy(w->ops, t, nt * sizeof *t);
        w->n = nt;
    }
    qsort(w->ops, w->n, sizeof *w->ops, cmp_line);
    rc = 0;
out:
    free(t);
    free(s);
    free(rets);
    free(cands);
    free(qs);
    free(gone);
    return rc;
}

/* Appends "put 2 (lines 3-4)" for op to buf[n] at *len. */
static void describe(const chk_hist *h, const chk_op *op, char *buf, size_t n, size_t *len)
{
    char v[64], where[96];
    if (op->f == CHK_F_DELETE)
        v[0] = 0;
    else
        chk_short(chk_intern_name(&h->in, op->value), v, sizeof v, 40);
    if (!op->done_line)
        snprintf(where, sizeof where, "line %ld, no completion", op->inv_line);
    else
        snprintf(where, sizeof where, "lines %ld-%ld%s", op->inv_line, op->done_line,
                 op->outcome == CHK_INFO ? ", info" : "");
    if (*len < n) {
        int m = snprintf(buf + *len, n - *len, "%s%s%s%s (%s)", *len ? ", " : "", chk_f_name(op->f),
                         v[0] ? " " : "", v, where);
        *len += m > 0 ? (size_t)m : 0;
    }
}

/* For a read in w (w->ops[i]) of a value no write in w writes, adds a
 * failed put of that value to r, if there is one: failed writes are not
 * judged, but show where a value read came from. */
static int failed_context(const chk_hist *h, const witness *w, size_t i, chk_result *r)
{
    const lop *rd = &w->ops[i];
    if (rd->write || !rd->v)
        return 0;
    for (size_t j = 0; j < w->n; j++)
        if (w->ops[j].write && w->ops[j].v == rd->v)
            return 0;
    for (size_t j = 0; j < h->n_ops; j++) {
        const chk_op *op = &h->ops[j];
        if (op->f == CHK_F_PUT && op->outcome == CHK_FAIL && op->key == rd->op->key &&
            op->value == rd->v)
            return chk_result_add_op(r, op);
    }
    return 0;
}

/* chk_linearizable: contract in chk.h. */
int chk_linearizable(const chk_hist *h, chk_result *r)
{
    int rc = -1;
    size_t n = 0, n_keys = 0;
    lop *all = malloc((h->n_ops ? h->n_ops : 1) * sizeof *all);
    uint8_t *seen = calloc(h->in.n ? h->in.n : 1, 1);
    json_t *failed = json_array();
    shrink sh = { 0 };
    witness w = { 0 };
    if (!all || !seen || !failed)
        goto out;
    for (size_t i = 0; i < h->n_ops; i++) {
        const chk_op *op = &h->ops[i];
        if (!seen[op->key]) {
            seen[op->key] = 1;
            n_keys++;
        }
        int write = op->f != CHK_F_GET;
        if (write ? op->outcome == CHK_FAIL : op->outcome != CHK_OK)
            continue;
        all[n++] = (lop){ op, write, op->value, op->call + 2,
                          op->ret == CHK_INF ? CHK_INF : op->ret + 2 };
    }
    qsort(all, n, sizeof *all, cmp_lop);
    sh.buf = malloc((n + 1) * sizeof *sh.buf);
    sh.tmp = malloc((n ? n : 1) * sizeof *sh.tmp);
    sh.vals = malloc((n + 1) * sizeof *sh.vals);
    sh.eff = malloc((n + 2) * sizeof *sh.eff);
    if (!sh.buf || !sh.tmp || !sh.vals || !sh.eff)
        goto out;

    size_t n_failed = 0, n_unknown = 0, bad_at = 0, bad_n = 0, unk_at = 0, unk_n = 0;
    long bad_line = 0, unk_line = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a, first = a;
        while (b < n && all[b].op->key == all[a].op->key) {
            if (all[b].op->inv_line < all[first].op->inv_line)
                first = b;
            b++;
        }
        int v = run(&sh, all + a, b - a, 0);
        long line = all[first].op->inv_line;
        if (v == 0) {
            const char *k = chk_intern_name(&h->in, all[a].op->key);
            if (n_failed < 100 &&
                json_array_append_new(failed, json_loads(k, JSON_DECODE_ANY, NULL)))
                goto out;
            if (!n_failed++ || line < bad_line) {
                bad_at = a;
                bad_n = b - a;
                bad_line = line;
            }
        } else if (v < 0 && (!n_unknown++ || line < unk_line)) {
            unk_at = a;
            unk_n = b - a;
            unk_line = line;
        }
        a = b;
    }
    if (chk_result_fig(r, "keys", (long long)n_keys) ||
        chk_result_fig(r, "operations", (long long)h->n_ops) ||
        chk_result_fig(r, "judged", (long long)n) ||
        chk_result_fig(r, "keys_failed", (long long)n_failed) ||
        chk_result_fig(r, "keys_unknown", (long long)n_unknown))
        goto out;

    if (!n_failed && !n_unknown) {
        rc = chk_result_set(r, CHK_PASS, "pass (%zu key%s, %zu operation%s)", n_keys, chk_s(n_keys),
                            h->n_ops, chk_s(h->n_ops));
        goto out;
    }
    char key[96];
    if (!n_failed) {
        chk_short(chk_intern_name(&h->in, all[unk_at].op->key), key, sizeof key, 64);
        rc = chk_result_set(r, CHK_UNKNOWN,
                            "UNKNOWN key %s: the search gave up on its %zu operations [keys "
                            "undecided: %zu of %zu]",
                            key, unk_n, n_unknown, n_keys);
        goto out;
    }

    sh.runs = 0;
    if (shrink_key(all + bad_at, bad_n, &sh, &w))
        goto out;
    char list[1024];
    size_t len = 0;
    for (size_t i = 0; i < w.n && i < LIST_OPS; i++)
        describe(h, w.ops[i].op, list, sizeof list, &len);
    if (w.n > LIST_OPS && len < sizeof list)
        snprintf(list + len, sizeof list - len, ", ... (%zu in all)", w.n);
    for (size_t i = 0; i < w.n; i++)
        if (chk_result_add_op(r, w.ops[i].op) || failed_context(h, &w, i, r))
            goto out;
    if (!r->cx && !(r->cx = json_object()))
        goto out;
    const char *k = chk_intern_name(&h->in, all[bad_at].op->key);
    if (json_object_set_new(r->cx, "key", json_loads(k, JSON_DECODE_ANY, NULL)) ||
        json_object_set(r->cx, "failed_keys", failed) ||
        chk_result_fig(r, "key_operations", (long long)bad_n) ||
        chk_result_fig(r, "window_operations", (long long)w.window_ops) ||
        chk_result_fig(r, "counterexample_operations", (long long)w.n) ||
        chk_result_fig(r, "shrink_runs", (long long)sh.runs) ||
        chk_result_fig(r, "shrink_complete", !sh.cut_short) ||
        chk_result_fig(r, "counterexample_verified", w.verified))
        goto out;
    chk_short(k, key, sizeof key, 64);
    rc = chk_result_set(r, CHK_FAILED,
                        "FAIL key %s: no linearization of %s [keys failing: %zu of %zu]", key, list,
                        n_failed, n_keys);
out:
    free(all);
    free(seen);
    json_decref(failed);
    free(sh.buf);
    free(sh.tmp);
    free(sh.vals);
    free(sh.eff);
    free(w.ops);
    return rc;
}
