/*
 * check_test.c — the chaos checker's checkers on generated histories
 * (ctest chaos.check_generated), written as history.jsonl files and read
 * back with chk_hist_read:
 *   - model runs: each operation takes effect at a random point of its
 *     interval (an info or unfinished write at a random time after its
 *     invoke, or never; a failed one never), and reads, final reads and
 *     queries report the model's state, so every checker must pass them;
 *     a register read then changed on purpose must fail whenever it makes
 *     the history non-linearizable, with a sound-looking counterexample;
 *   - differential runs: small histories with random read results and
 *     query answers, judged by the checker and by a brute-force reading of
 *     README.md's rules (every order of a register history; every element,
 *     key and query of a set or index history), which must agree.
 * A failing register history's counterexample must be a sub-history of it,
 * well formed, verified by the shrinking, no larger than its key's history
 * and failing on its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chk.h"

#include "check.h"
#include "scratch.h"

#define ROUNDS 150

enum { O_OK, O_FAIL, O_INFO, O_PENDING };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Uniform in [0, n). */
static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

static void *must(void *p)
{
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static char dir[256];

/* ---- histories as lines ---- */

typedef struct lines {
    char **l;
    size_t n, cap;
} lines;

static void lines_add(lines *ls, const char *text)
{
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? ls->cap * 2 : 64;
        ls->l = must(realloc(ls->l, ls->cap * sizeof *ls->l));
    }
    ls->l[ls->n++] = must(strdup(text));
}

static void lines_free(lines *ls)
{
    for (size_t i = 0; i < ls->n; i++)
        free(ls->l[i]);
    free(ls->l);
    memset(ls, 0, sizeof *ls);
}

/* Writes ls to dir/h.jsonl, reads it into h and judges it with checker
 * into r (initialised here); returns the number of well-formedness
 * errors.  The caller frees r and h. */
static size_t judge(const lines *ls, chk_model model,
                    int (*checker)(const chk_hist *, chk_result *), const char *name, chk_result *r,
                    chk_hist *h)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/h.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    for (size_t i = 0; i < ls->n; i++)
        fprintf(f, "%s\n", ls->l[i]);
    if (fclose(f)) {
        perror(path);
        exit(1);
    }
    memset(h, 0, sizeof *h);
    int rc = chk_hist_read(h, path, model, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    CHECK(chk_result_init(r, name) == 0);
    if (rc == 0 && !h->n_errs) {
        CHECK(checker(h, r) == 0);
        CHECK(chk_result_finish(r, h) == 0);
    }
    return h->n_errs;
}

static long long fig(const chk_result *r, const char *name)
{
    return json_integer_value(json_object_get(r->figs, name));
}

/* One generated operation, as the lines it becomes. */
typedef struct xop {
    int proc, outcome;
    const char *f;
    char key[24];   /* JSON text; "" for none */
    char value[24]; /* the invocation's value (repeated by its completion) */
    char extra[48]; /* more fields of the invocation */
    char *done;     /* more fields of an ok completion; owned, may be NULL */
    uint64_t call, ret;
} xop;

typedef struct xev {
    uint64_t time;
    int proc, phase;
    size_t op;
} xev;

static int cmp_xev(const void *a, const void *b)
{
    const xev *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->proc != y->proc)
        return x->proc - y->proc;
    return x->phase - y->phase;
}

/* Gives o an interval on its process after the process's last one. */
static void place(xop *o, uint64_t *t, uint64_t gap, uint64_t dur)
{
    o->call = t[o->proc] + below(gap);
    o->ret = o->call + below(dur);
    t[o->proc] = o->ret + 1;
}

/* The history of ops[n] in time order (per time, by process). */
static void emit(const xop *ops, size_t n, lines *ls)
{
    static const char *const types[] = { "ok", "fail", "info" };
    xev *ev = must(malloc((2 * n + 1) * sizeof *ev));
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        ev[ne++] = (xev){ ops[i].call, ops[i].proc, 0, i };
        if (ops[i].outcome != O_PENDING)
            ev[ne++] = (xev){ ops[i].ret, ops[i].proc, 1, i };
    }
    qsort(ev, ne, sizeof *ev, cmp_xev);
    for (size_t i = 0; i < ne; i++) {
        const xop *o = &ops[ev[i].op];
        int inv = ev[i].phase == 0;
        size_t len = 256 + (o->done ? strlen(o->done) : 0);
        char *line = must(malloc(len));
        snprintf(
            line, len,
            "{\"process\": %d, \"type\": \"%s\", \"f\": \"%s\"%s%s%s%s%s%s%s%s, \"time\": %llu}",
            o->proc, inv ? "invoke" : types[o->outcome], o->f, o->key[0] ? ", \"key\": " : "",
            o->key, o->value[0] ? ", \"value\": " : "", o->value, inv && o->extra[0] ? ", " : "",
            inv ? o->extra : "", !inv && o->outcome == O_OK && o->done ? ", " : "",
            !inv && o->outcome == O_OK && o->done ? o->done : "", (unsigned long long)ev[i].time);
        lines_add(ls, line);
        free(line);
    }
    free(ev);
}

static void xops_free(xop *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ops[i].done);
    free(ops);
}

/* ---- register ---- */

enum { R_PUT, R_GET, R_DELETE };

/* A register operation of the model. */
typedef struct rop {
    int key, kind, outcome, applies;
    long value; /* written or read; -1 null */
    uint64_t point;
} rop;

static void value_text(long v, char *buf, size_t n)
{
    if (v < 0)
        snprintf(buf, n, "null");
    else if (v % 2)
        snprintf(buf, n, "%ld", v);
    else
        snprintf(buf, n, "\"v%ld\"", v);
}

/* Fills x from r: f, key, value, and an ok get's value read. */
static void reg_xop(const rop *r, xop *x)
{
    static const char *const fs[] = { "put", "get", "delete" };
    x->f = fs[r->kind];
    x->outcome = r->outcome;
    if (r->key == 3)
        snprintf(x->key, sizeof x->key, "3");
    else
        snprintf(x->key, sizeof x->key, "\"k%d\"", r->key);
    x->value[0] = 0;
    free(x->done);
    x->done = NULL;
    if (r->kind == R_PUT) {
        value_text(r->value, x->value, sizeof x->value);
    } else if (r->kind == R_GET) {
        char v[24];
        value_text(r->value, v, sizeof v);
        x->done = must(malloc(48));
        snprintf(x->done, 48, "\"value\": %s", v);
    }
}

static int cmp_point(const void *a, const void *b)
{
    const rop *x = *(const rop *const *)a, *y = *(const rop *const *)b;
    return (x->point > y->point) - (x->point < y->point);
}

/* 1 if the register operations of one key can be ordered as README.md
 * says: every ok one, any subset of the info or unfinished writes, each
 * after every ok one that completed before it was invoked, each get
 * reading the value of the last write before it (null at first). */
static int brute(const rop *r, const xop *x, int n, unsigned placed, long state)
{
    int left = 0;
    for (int i = 0; i < n; i++)
        left |= !(placed & 1u << i) && r[i].outcome == O_OK;
    if (!left)
        return 1;
    for (int i = 0; i < n; i++) {
        if (placed & 1u << i || r[i].outcome == O_FAIL ||
            (r[i].kind == R_GET && r[i].outcome != O_OK))
            continue;
        int first = 1;
        for (int j = 0; j < n && first; j++)
            first = placed & 1u << j || j == i || r[j].outcome != O_OK || x[j].ret >= x[i].call;
        if (!first)
            continue;
        if (r[i].kind == R_GET) {
            if (r[i].value == state && brute(r, x, n, placed | 1u << i, state))
                return 1;
        } else if (brute(r, x, n, placed | 1u << i, r[i].kind == R_PUT ? r[i].value : -1)) {
            return 1;
        }
    }
    return 0;
}

/* Checks a failing register result's counterexample (see the header). */
static void check_witness(const lines *ls, const chk_result *r, const chk_hist *h)
{
    CHECK(r->cx != NULL && r->n_lines > 0);
    if (!r->cx || !r->n_lines)
        return;
    CHECK_INT(fig(r, "counterexample_verified"), 1);
    char *kt = json_dumps(json_object_get(r->cx, "key"), JSON_ENCODE_ANY | JSON_COMPACT);
    CHECK(kt != NULL);
    size_t key_lines = 0;
    for (size_t i = 0; i < h->n_ops && kt; i++)
        if (!strcmp(chk_intern_name(&h->in, h->ops[i].key), kt))
            key_lines += 1 + (h->ops[i].done_line != 0);
    free(kt);
    CHECKF(r->n_lines <= key_lines, "%zu counterexample lines, %zu of its key", r->n_lines,
           key_lines);
    lines sub = { 0 };
    for (size_t i = 0; i < r->n_lines; i++) {
        CHECK(r->lines[i] >= 1 && (size_t)r->lines[i] <= ls->n);
        CHECK(i == 0 || r->lines[i] > r->lines[i - 1]);
        if (r->lines[i] >= 1 && (size_t)r->lines[i] <= ls->n)
            lines_add(&sub, ls->l[r->lines[i] - 1]);
    }
    chk_result r2;
    chk_hist h2;
    CHECK_INT(judge(&sub, CHK_REGISTER, chk_linearizable, "linearizable", &r2, &h2), 0);
    CHECKF(r2.verdict == CHK_FAILED, "the counterexample alone: %s", r2.text ? r2.text : "?");
    CHECK(r2.n_lines <= r->n_lines);
    chk_result_free(&r2);
    chk_hist_free(&h2);
    lines_free(&sub);
}

/* Model runs: linearizable by construction; then one read changed. */
static void test_register_model(void)
{
    int broken = 0, caught = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int procs = 2 + (int)below(4), keys = 1 + (int)below(4);
        size_t n = 10 + below(60);
        rop *r = must(calloc(n, sizeof *r));
        rop **by_point = must(calloc(n, sizeof *by_point));
        xop *x = must(calloc(n, sizeof *x));
        uint64_t t[8] = { 0 };
        long next_value = 1;
        for (size_t i = 0; i < n; i++) {
            x[i].proc = (int)below((uint64_t)procs);
            place(&x[i], t, 20, 40);
            r[i].key = (int)below((uint64_t)keys);
            uint64_t k = below(10);
            r[i].kind = k < 5 ? R_PUT : k < 9 ? R_GET : R_DELETE;
            k = below(20);
            r[i].outcome = k < 16 ? O_OK : k < 18 ? O_FAIL : O_INFO;
            r[i].value = r[i].kind != R_PUT ? -1
                         : below(5)         ? next_value++
                                            : 1 + (long)below((uint64_t)next_value);
            r[i].applies = r[i].outcome == O_OK || (r[i].outcome == O_INFO && below(2));
            r[i].point = x[i].call + below(x[i].ret - x[i].call + 1);
            if (r[i].outcome == O_INFO && r[i].kind != R_GET)
                r[i].point = x[i].call + below(200); /* may land after its info */
            by_point[i] = &r[i];
        }
        for (int p = 0; p < procs; p++) /* a process's last write may never complete */
            for (size_t i = n; i-- > 0;)
                if (x[i].proc == p) {
                    if (r[i].kind != R_GET && below(4) == 0) {
                        r[i].outcome = O_PENDING;
                        r[i].applies = (int)below(2);
                        r[i].point = x[i].call + below(200);
                    }
                    break;
                }
        qsort(by_point, n, sizeof *by_point, cmp_point);
        long state[4] = { -1, -1, -1, -1 };
        for (size_t i = 0; i < n; i++) {
            rop *o = by_point[i];
            if (o->kind == R_GET)
                o->value = state[o->key];
            else if (o->applies)
                state[o->key] = o->kind == R_PUT ? o->value : -1;
        }
        for (size_t i = 0; i < n; i++)
            reg_xop(&r[i], &x[i]);
        lines ls = { 0 };
        emit(x, n, &ls);
        chk_result res;
        chk_hist h;
        CHECK_INT(judge(&ls, CHK_REGISTER, chk_linearizable, "linearizable", &res, &h), 0);
        CHECKF(res.verdict == CHK_PASS, "round %d: %s", round, res.text ? res.text : "?");
        chk_result_free(&res);
        chk_hist_free(&h);

        /* change one ok get's value */
        size_t gets[128], ng = 0;
        for (size_t i = 0; i < n && ng < 128; i++)
            if (r[i].kind == R_GET && r[i].outcome == O_OK)
                gets[ng++] = i;
        if (ng) {
            size_t at = gets[below(ng)];
            r[at].value = (long)below(8) - 1;
            reg_xop(&r[at], &x[at]);
            lines_free(&ls);
            emit(x, n, &ls);
            broken++;
            CHECK_INT(judge(&ls, CHK_REGISTER, chk_linearizable, "linearizable", &res, &h), 0);
            CHECK(res.verdict != CHK_UNKNOWN);
            if (res.verdict == CHK_FAILED) {
                caught++;
                check_witness(&ls, &res, &h);
            }
            chk_result_free(&res);
            chk_hist_free(&h);
        }
        lines_free(&ls);
        free(r);
        free(by_point);
        xops_free(x, n);
    }
    printf("register model runs: %d passed, %d of %d with a read changed failed\n", ROUNDS, caught,
           broken);
    CHECKF(caught * 4 >= broken, "only %d of %d changed reads failed", caught, broken);
}

/* Differential: small one-key histories with random reads, against brute. */
static void test_register_brute(void)
{
    int verdicts[2] = { 0, 0 };
    for (int round = 0; round < 4 * ROUNDS; round++) {
        int procs = 2 + (int)below(2), n = 2 + (int)below(7);
        rop r[8];
        xop x[8];
        uint64_t t[4] = { 0 };
        memset(x, 0, sizeof x);
        for (int i = 0; i < n; i++) {
            x[i].proc = (int)below((uint64_t)procs);
            place(&x[i], t, 6, 8);
            r[i].key = 0;
            uint64_t k = below(10);
            r[i].kind = k < 4 ? R_PUT : k < 9 ? R_GET : R_DELETE;
            r[i].value = r[i].kind == R_DELETE ? -1 : (long)below(4) - (r[i].kind == R_GET);
            if (r[i].kind == R_PUT && r[i].value < 1)
                r[i].value = 1;
            k = below(20);
            r[i].outcome = k < 15 ? O_OK : k < 17 ? O_FAIL : O_INFO;
        }
        for (int p = 0; p < procs; p++)
            for (int i = n - 1; i >= 0; i--)
                if (x[i].proc == p) {
                    if (r[i].kind != R_GET && below(5) == 0)
                        r[i].outcome = O_PENDING;
                    break;
                }
        for (int i = 0; i < n; i++)
            reg_xop(&r[i], &x[i]);
        int want = brute(r, x, n, 0, -1);
        lines ls = { 0 };
        emit(x, (size_t)n, &ls);
        chk_result res;
        chk_hist h;
        CHECK_INT(judge(&ls, CHK_REGISTER, chk_linearizable, "linearizable", &res, &h), 0);
        CHECKF(res.verdict == (want ? CHK_PASS : CHK_FAILED), "round %d: brute force says %s, %s",
               round, want ? "linearizable" : "not", res.text ? res.text : "?");
        if (res.verdict == CHK_FAILED)
            check_witness(&ls, &res, &h);
        verdicts[want]++;
        chk_result_free(&res);
        chk_hist_free(&h);
        lines_free(&ls);
        for (int i = 0; i < n; i++)
            free(x[i].done);
    }
    printf("register against brute force: %d linearizable, %d not\n", verdicts[1], verdicts[0]);
    CHECK(verdicts[0] > ROUNDS / 4 && verdicts[1] > ROUNDS / 4);
}

/* ---- set ---- */

#define SET_ELEMS 10

/* Differential: adds of a few elements to two sets, reads of them (the
 * model's content, or a random subset), against README.md's rules. */
static void test_set(void)
{
    int fails = 0, passes = 0;
    for (int round = 0; round < 2 * ROUNDS; round++) {
        int procs = 2 + (int)below(3), n = 3 + (int)below(25);
        xop *x = must(calloc((size_t)n, sizeof *x));
        int set[32], elem[32], is_read[32], items[32][SET_ELEMS + 2], n_items[32];
        uint64_t t[8] = { 0 };
        for (int i = 0; i < n; i++) {
            x[i].proc = (int)below((uint64_t)procs);
            place(&x[i], t, 10, 20);
            set[i] = (int)below(2);
            is_read[i] = below(4) == 0;
            elem[i] = (int)below(SET_ELEMS);
            uint64_t k = below(10);
            x[i].outcome = k < 7 ? O_OK : k < 8 ? O_FAIL : O_INFO;
            x[i].f = is_read[i] ? "read" : "add";
            snprintf(x[i].key, sizeof x[i].key, "\"s%d\"", set[i]);
            if (!is_read[i])
                snprintf(x[i].value, sizeof x[i].value, "%d", elem[i]);
        }
        if (below(4)) { /* mostly, a final read of each set after the rest */
            uint64_t end = 0;
            for (int i = 0; i < n; i++)
                end = x[i].ret > end ? x[i].ret : end;
            for (int s = 0; s < 2; s++, n++) {
                x = must(realloc(x, (size_t)(n + 1) * sizeof *x));
                memset(&x[n], 0, sizeof x[n]);
                x[n] = (xop){ .proc = 7,
                              .outcome = O_OK,
                              .f = "read",
                              .call = end + 5 + 10 * s,
                              .ret = end + 10 + 10 * s };
                snprintf(x[n].key, sizeof x[n].key, "\"s%d\"", s);
                set[n] = s;
                is_read[n] = 1;
            }
        }
        for (int i = 0; i < n; i++) {
            n_items[i] = 0;
            if (!is_read[i])
                continue;
            int model = below(4) != 0;
            for (int e = 0; e < SET_ELEMS + 2; e++) {
                int in;
                if (model) { /* acknowledged before it, or maybe: in flight or info */
                    int certain = 0, maybe = 0;
                    for (int j = 0; j < n; j++)
                        if (!is_read[j] && set[j] == set[i] && elem[j] == e) {
                            certain |= x[j].outcome == O_OK && x[j].ret < x[i].call;
                            maybe |= x[j].outcome != O_FAIL && x[j].call <= x[i].ret;
                        }
                    in = certain || (maybe && below(2));
                } else {
                    in = below(3) == 0;
                }
                if (in)
                    items[i][n_items[i]++] = e;
            }
            char buf[256];
            size_t len = 0;
            for (int k = 0; k < n_items[i]; k++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", k ? ", " : "",
                                        items[i][k]);
            x[i].done = must(malloc(len + 16));
            snprintf(x[i].done, len + 16, "\"value\": [%.*s]", (int)len, buf);
        }
        /* README.md's rules, by brute force */
        long long phantom = 0, lost = 0, unread = 0;
        for (int i = 0; i < n; i++) {
            if (!is_read[i] || x[i].outcome != O_OK)
                continue;
            for (int k = 0; k < n_items[i]; k++) {
                int ok = 0;
                for (int j = 0; j < n && !ok; j++)
                    ok = !is_read[j] && set[j] == set[i] && elem[j] == items[i][k] &&
                         x[j].outcome != O_FAIL && x[j].call <= x[i].ret;
                phantom += !ok;
            }
        }
        for (int s = 0; s < 2; s++) {
            int fin = -1;
            for (int i = 0; i < n; i++)
                if (is_read[i] && set[i] == s && x[i].outcome == O_OK &&
                    (fin < 0 || x[i].call > x[fin].call ||
                     (x[i].call == x[fin].call && x[i].proc > x[fin].proc)))
                    fin = i;
            for (int e = 0; e < SET_ELEMS; e++) {
                int acked = 0, before = 0, present = 0;
                for (int j = 0; j < n; j++)
                    if (!is_read[j] && set[j] == s && elem[j] == e && x[j].outcome == O_OK) {
                        acked = 1;
                        before |= fin >= 0 && x[j].ret < x[fin].call;
                    }
                for (int k = 0; fin >= 0 && k < n_items[fin]; k++)
                    present |= items[fin][k] == e;
                if (acked && fin < 0)
                    unread++;
                else if (before && !present)
                    lost++;
            }
        }
        lines ls = { 0 };
        emit(x, (size_t)n, &ls);
        chk_result res;
        chk_hist h;
        CHECK_INT(judge(&ls, CHK_SET, chk_set_full, "set-full", &res, &h), 0);
        CHECKF(fig(&res, "phantom") == phantom && fig(&res, "lost") == lost &&
                   fig(&res, "without_final_read") == unread,
               "round %d: brute force: %lld phantom, %lld lost, %lld unread: %s", round, phantom,
               lost, unread, res.text ? res.text : "?");
        chk_verdict want = phantom || lost ? CHK_FAILED : unread ? CHK_UNKNOWN : CHK_PASS;
        CHECKF(res.verdict == want, "round %d: %s", round, res.text ? res.text : "?");
        fails += want == CHK_FAILED;
        passes += want == CHK_PASS;
        chk_result_free(&res);
        chk_hist_free(&h);
        lines_free(&ls);
        xops_free(x, (size_t)n);
    }
    printf("set-full against brute force: %d pass, %d fail\n", passes, fails);
    CHECK(fails > ROUNDS / 4 && passes > ROUNDS / 4);
}

/* ---- index ---- */

#define IX_KEYS 3
#define IX_VALUES 3

typedef struct iop {
    int query, key, value, strong, applies; /* value -1: null */
    uint64_t point;
    int result[IX_KEYS + 1], n_result;
} iop;

static uint64_t ret_of(const xop *x)
{
    return x->outcome == O_OK || x->outcome == O_FAIL ? x->ret : UINT64_MAX;
}

/* README.md's index rules by brute force: the violations of query q. */
static void index_brute(const iop *o, const xop *x, int n, int q, long long *missing,
                        long long *unexpected)
{
    for (int k = 0; k <= IX_KEYS; k++) {
        int in = 0;
        for (int i = 0; i < o[q].n_result; i++)
            in |= o[q].result[i] == k;
        if (in) {
            int may = 0;
            for (int m = 0; m < n && !may; m++) {
                if (o[m].query || o[m].key != k || o[m].value != o[q].value ||
                    x[m].outcome == O_FAIL || x[m].call > x[q].ret)
                    continue;
                int gone = 0;
                for (int m2 = 0; m2 < n && !gone; m2++)
                    gone = !o[m2].query && o[m2].key == k && o[m2].value != o[q].value &&
                           x[m2].outcome == O_OK && ret_of(&x[m]) != UINT64_MAX &&
                           x[m2].call > ret_of(&x[m]) && x[m2].ret < x[q].call;
                may = !gone;
            }
            *unexpected += !may;
        } else if (o[q].strong) {
            int must_in = 0;
            for (int m = 0; m < n && !must_in; m++) {
                if (o[m].query || o[m].key != k || o[m].value != o[q].value ||
                    x[m].outcome != O_OK || x[m].ret >= x[q].call)
                    continue;
                int clear = 1;
                for (int m2 = 0; m2 < n && clear; m2++)
                    if (!o[m2].query && o[m2].key == k && o[m2].value != o[q].value &&
                        x[m2].outcome != O_FAIL)
                        clear = ret_of(&x[m2]) < x[m].call || x[m2].call > x[q].ret;
                must_in = clear;
            }
            *missing += must_in;
        }
    }
}

/* Model runs (answers from the model's state at a point of the query:
 * must pass) and random answers (differential), on a few keys. */
static void test_index(void)
{
    int fails = 0, passes = 0;
    for (int round = 0; round < 2 * ROUNDS; round++) {
        int n = 4 + (int)below(40), model = (int)below(2), dense = (int)below(2);
        iop o[48];
        xop *x = must(calloc((size_t)n, sizeof *x));
        uint64_t t[8] = { 0 };
        memset(o, 0, sizeof o);
        for (int i = 0; i < n; i++) {
            o[i].query = below(3) == 0;
            x[i].proc = o[i].query ? 4 + (int)below(2) : (int)below(4);
            place(&x[i], t, dense ? 4 : 20, dense ? 6 : 30); /* dense: many ties */
            uint64_t k = below(10);
            x[i].outcome = k < 7 ? O_OK : k < 8 ? O_FAIL : O_INFO;
            o[i].key = (int)below(IX_KEYS);
            o[i].value = (int)below(IX_VALUES + 1) - !o[i].query;
            if (o[i].query && o[i].value == IX_VALUES)
                o[i].value = 0;
            o[i].strong = (int)below(2);
            o[i].applies = x[i].outcome == O_OK || (x[i].outcome == O_INFO && below(2));
            o[i].point = x[i].outcome == O_INFO ? x[i].call + below(100)
                                                : x[i].call + below(x[i].ret - x[i].call + 1);
            if (o[i].query) {
                x[i].f = "query";
                snprintf(x[i].value, sizeof x[i].value, "\"c%d\"", o[i].value);
                snprintf(x[i].extra, sizeof x[i].extra, "\"consistency\": \"%s\"",
                         o[i].strong ? "strong" : "verified");
            } else {
                x[i].f = "move";
                snprintf(x[i].key, sizeof x[i].key, "\"k%d\"", o[i].key);
                if (o[i].value < 0)
                    snprintf(x[i].value, sizeof x[i].value, "null");
                else
                    snprintf(x[i].value, sizeof x[i].value, "\"c%d\"", o[i].value);
            }
        }
        for (int q = 0; q < n; q++) {
            if (!o[q].query)
                continue;
            for (int k = 0; k <= IX_KEYS; k++) {
                int in;
                if (model) { /* the model's value at the query's point */
                    int val = -1, found = 0;
                    uint64_t best = 0;
                    for (int m = 0; m < n; m++)
                        if (!o[m].query && o[m].key == k && o[m].applies &&
                            o[m].point <= o[q].point && (!found || o[m].point >= best)) {
                            best = o[m].point;
                            val = o[m].value;
                            found = 1;
                        }
                    in = val == o[q].value && (o[q].strong || below(2));
                } else {
                    in = below(2);
                }
                if (in)
                    o[q].result[o[q].n_result++] = k;
            }
            char buf[64];
            size_t len = 0;
            for (int k = 0; k < o[q].n_result; k++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\"k%d\"", k ? ", " : "",
                                        o[q].result[k]);
            x[q].done = must(malloc(len + 16));
            snprintf(x[q].done, len + 16, "\"result\": [%.*s]", (int)len, buf);
        }
        long long missing = 0, unexpected = 0;
        for (int q = 0; q < n; q++)
            if (o[q].query && x[q].outcome == O_OK)
                index_brute(o, x, n, q, &missing, &unexpected);
        lines ls = { 0 };
        emit(x, (size_t)n, &ls);
        chk_result res;
        chk_hist h;
        CHECK_INT(judge(&ls, CHK_INDEX, chk_index, "index", &res, &h), 0);
        if (model)
            CHECKF(res.verdict == CHK_PASS, "round %d: a model run: %s", round,
                   res.text ? res.text : "?");
        CHECKF(fig(&res, "missing") == missing && fig(&res, "unexpected") == unexpected,
               "round %d: brute force: %lld missing, %lld unexpected: %s", round, missing,
               unexpected, res.text ? res.text : "?");
        CHECK(res.verdict == (missing || unexpected ? CHK_FAILED : CHK_PASS));
        fails += missing || unexpected;
        passes += !missing && !unexpected;
        chk_result_free(&res);
        chk_hist_free(&h);
        lines_free(&ls);
        xops_free(x, (size_t)n);
    }
    printf("index against brute force: %d pass, %d fail\n", passes, fails);
    CHECK(fails > ROUNDS / 4 && passes > ROUNDS / 4);
}

/* ---- the interning table ---- */

static void test_intern(void)
{
    chk_intern t;
    uint64_t a, b, c, d;
    CHECK(chk_intern_init(&t) == 0);
    json_t *s = json_string("1"), *i = json_integer(1), *nl = json_null();
    CHECK(chk_intern_json(&t, s, &a) == 0);
    CHECK(chk_intern_json(&t, i, &b) == 0);
    CHECK(chk_intern_json(&t, nl, &c) == 0);
    CHECK(chk_intern_text(&t, "\"1\"", &d) == 0);
    CHECK(a != b);
    CHECK_INT(c, 0);
    CHECK_INT(d, a);
    CHECK(!strcmp(chk_intern_name(&t, b), "1"));
    for (int k = 0; k < 5000; k++) { /* through several rehashes */
        char txt[32];
        snprintf(txt, sizeof txt, "%d", k);
        CHECK(chk_intern_text(&t, txt, &d) == 0);
        if (k == 1)
            CHECK_INT(d, b);
    }
    CHECK(!strcmp(chk_intern_name(&t, b), "1"));
    CHECK(!strcmp(chk_intern_name(&t, t.n), "?"));
    json_decref(s);
    json_decref(i);
    chk_intern_free(&t);
}

int main(void)
{
    if (scratch_make("chaos-check", dir, sizeof(dir)) == NULL)
        return 1;
    test_intern();
    test_register_model();
    test_register_brute();
    test_set();
    test_index();
    scratch_remove(dir);
    return CHECK_DONE();
}
