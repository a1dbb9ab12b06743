/*
 * analyze.c — shardex-chaos-analyze: the chaos runner's figures from one
 * schedule's histories, fault timeline and index lag samples
 * (tests/chaos/README.md, "Checkers and figures"):
 *
 *   shardex-chaos-analyze --out DIR --replicas N --faults FAULTS.jsonl
 *       [--lag LAG.jsonl] HISTORY.jsonl...
 *
 * writes DIR/analysis.json with
 *   - operations: per history, ok / fail / info / pending;
 *   - availability: the share of completions that were ok, overall, during
 *     faults and outside them, and the worst one-second bin;
 *   - failover: per fault and operation kind (put, get, delete, add, read,
 *     move, query-strong, query-verified; the set is one key, a query's
 *     key is its value), the service gap, the maximum over the keys; p50
 *     and max over the faults. With replicas > 1 (failover_from "fault"):
 *     for each key with an operation of that kind invoked while the fault
 *     lasted, the time from the fault's start until an operation of that
 *     kind on it invoked at or after the start completed ok (a client
 *     that moves to another router turns a failure into a slow success:
 *     the gap counts either). With one replica (failover_from "heal": it
 *     cannot fail over, its keys come back with their node): for each key
 *     with an operation of that kind invoked during the fault that ended
 *     fail or info, the time from the heal until an operation of that
 *     kind on it invoked no earlier than its first failed one completed
 *     ok;
 *   - repair: per heal, the time until a strong query invoked after it
 *     completed ok and every index partition's watermark reached the
 *     storage partitions' heads of the first lag sample after the heal;
 *     p50 and max;
 * and DIR/timeline.dat (per second from the first operation: seconds, ok,
 * fail, info, p50 and p99 latency of ok operations in ms) and
 * DIR/faults.dat (per fault: start and heal in seconds, its label) for
 * gnuplot.
 *
 * FAULTS.jsonl lines (tests/chaos/nemesis.sh): {"event": "fault", "id": N,
 * "time": NS, "fault": NAME, "nodes": "...", ...} and {"event": "heal",
 * "id": N, "time": NS, "done": NS}; times are CLOCK_MONOTONIC, the
 * histories' clock. Exit status 0, 1 when an input cannot be read or the
 * output written, 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#define NKINDS 8
static const char *const kind_names[NKINDS] = { "put",  "get",  "delete",       "add",
                                                "read", "move", "query-strong", "query-verified" };

enum { OUT_OK, OUT_FAIL, OUT_INFO, OUT_PENDING };

typedef struct op {
    int kind;
    char *key;
    uint64_t inv, done; /* done 0: pending */
    int outcome;
} op;

typedef struct pend {
    long long process;
    int idx; /* into ops, -1 when free */
} pend;

typedef struct fault {
    long long id;
    char *name, *nodes;
    uint64_t start, heal, done;
} fault;

typedef struct lagsample {
    uint64_t t;
    size_t n;
    uint64_t (*pairs)[4]; /* idx, src, wm, head */
} lagsample;

typedef struct state {
    op *ops;
    size_t nops, capops;
    fault *faults;
    size_t nfaults, capfaults;
    lagsample *lags;
    size_t nlags, caplags;
    long counts[16][4];
    const char *hist_names[16];
    int nhist;
    uint64_t t0, tend;
} state;

static int oom(void)
{
    fprintf(stderr, "shardex-chaos-analyze: out of memory\n");
    return 1;
}

/* Grows *arr (of *cap elements of size sz) to hold n + 1; 0 or -1. */
static int grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 1024;
    void *p = realloc(*arr, c * sz);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static int kind_of(const char *f, const char *cons)
{
    if (strcmp(f, "query") == 0)
        return cons != NULL && strcmp(cons, "strong") == 0 ? 6 : 7;
    for (int k = 0; k < 6; k++)
        if (strcmp(f, kind_names[k]) == 0)
            return k;
    return -1;
}

/* The text of a key or value field (a string, an integer, null or absent). */
static char *key_text(json_t *v)
{
    char buf[64];

    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return strdup(buf);
    }
    return strdup("");
}

/* Reads one history into s->ops; 0 or 1 (said why). */
static int read_history(state *s, const char *path, int h)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    pend *pends = NULL;
    size_t npend = 0, cappend = 0;
    ssize_t len;
    int rc = 0;

    if (f == NULL) {
        fprintf(stderr, "shardex-chaos-analyze: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        if (j == NULL)
            continue; /* the checker judges malformed lines */
        long long p = json_integer_value(json_object_get(j, "process"));
        const char *type = json_string_value(json_object_get(j, "type"));
        const char *fn = json_string_value(json_object_get(j, "f"));
        uint64_t t = (uint64_t)json_integer_value(json_object_get(j, "time"));
        size_t i;
        if (type == NULL || fn == NULL) {
            json_decref(j);
            continue;
        }
        for (i = 0; i < npend && pends[i].process != p; i++)
            ;
        if (strcmp(type, "invoke") == 0) {
            int kind = kind_of(fn, json_string_value(json_object_get(j, "consistency")));
            json_t *kv = json_object_get(j, kind == 6 || kind == 7 ? "value" : "key");
            if (grow((void **)&s->ops, &s->capops, s->nops, sizeof(op)) != 0 ||
                (i == npend && grow((void **)&pends, &cappend, npend, sizeof(pend)) != 0)) {
                json_decref(j);
                rc = oom();
                break;
            }
            op *o = &s->ops[s->nops];
            *o = (op){ .kind = kind, .key = key_text(kv), .inv = t, .outcome = OUT_PENDING };
            if (o->key == NULL) {
                json_decref(j);
                rc = oom();
                break;
            }
            if (i == npend)
                pends[npend++].process = p;
            pends[i].idx = (int)s->nops++;
            s->counts[h][OUT_PENDING]++;
        } else if (i < npend && pends[i].idx >= 0) {
            op *o = &s->ops[pends[i].idx];
            o->done = t;
            o->outcome = strcmp(type, "ok") == 0     ? OUT_OK
                         : strcmp(type, "fail") == 0 ? OUT_FAIL
                                                     : OUT_INFO;
            s->counts[h][OUT_PENDING]--;
            s->counts[h][o->outcome]++;
            pends[i] = pends[--npend];
        }
        if (s->t0 == 0 || t < s->t0)
            s->t0 = t;
        if (t > s->tend)
            s->tend = t;
        json_decref(j);
    }
    free(line);
    free(pends);
    fclose(f);
    return rc;
}

/* Reads the fault timeline; 0 or 1. */
static int read_faults(state *s, const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;

    if (f == NULL) {
        fprintf(stderr, "shardex-chaos-analyze: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        const char *ev = json_string_value(json_object_get(j, "event"));
        long long id = json_integer_value(json_object_get(j, "id"));
        uint64_t t = (uint64_t)json_integer_value(json_object_get(j, "time"));
        if (ev != NULL && strcmp(ev, "fault") == 0) {
            if (grow((void **)&s->faults, &s->capfaults, s->nfaults, sizeof(fault)) != 0) {
                json_decref(j);
                free(line);
                fclose(f);
                return oom();
            }
            fault *x = &s->faults[s->nfaults++];
            *x = (fault){ .id = id, .start = t };
            x->name = key_text(json_object_get(j, "fault"));
            x->nodes = key_text(json_object_get(j, "nodes"));
        } else if (ev != NULL && strcmp(ev, "heal") == 0) {
            for (size_t i = 0; i < s->nfaults; i++)
                if (s->faults[i].id == id) {
                    s->faults[i].heal = t;
                    s->faults[i].done = (uint64_t)json_integer_value(json_object_get(j, "done"));
                    if (s->faults[i].done == 0)
                        s->faults[i].done = t;
                }
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    for (size_t i = 0; i < s->nfaults; i++)
        if (s->faults[i].heal == 0) /* never healed: until the end */
            s->faults[i].heal = s->faults[i].done = s->tend;
    return 0;
}

/* Reads the lag samples (ok ones); 0 or 1. */
static int read_lag(state *s, const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;

    if (f == NULL)
        return 0; /* no sampler: repair from the strong queries alone */
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        json_t *pairs = json_object_get(j, "pairs");
        if (json_integer_value(json_object_get(j, "ok")) == 1 && json_is_array(pairs)) {
            if (grow((void **)&s->lags, &s->caplags, s->nlags, sizeof(lagsample)) != 0) {
                json_decref(j);
                free(line);
                fclose(f);
                return oom();
            }
            lagsample *l = &s->lags[s->nlags++];
            l->t = (uint64_t)json_integer_value(json_object_get(j, "time"));
            l->n = json_array_size(pairs);
            l->pairs = calloc(l->n ? l->n : 1, sizeof(*l->pairs));
            if (l->pairs == NULL) {
                json_decref(j);
                free(line);
                fclose(f);
                return oom();
            }
            for (size_t i = 0; i < l->n; i++)
                for (int k = 0; k < 4; k++)
                    l->pairs[i][k] = (uint64_t)json_integer_value(
                        json_array_get(json_array_get(pairs, i), k));
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Whether a, of kind k, failed (fail or info) and was invoked during x. */
static bool failed_in(const op *a, int k, const fault *x)
{
    return a->kind == k && a->outcome != OUT_OK && a->inv >= x->start && a->inv <= x->done;
}

/* The service gap (ms) of kind k after fault x, with replicas: the
 * maximum over the keys with an operation of kind k invoked during x of
 * the time from x's start until an operation of kind k on the key invoked
 * at or after the start completed ok; -1 when one never did; -2 when no
 * operation of kind k was invoked during x. */
static long long gap_ms(const state *s, const fault *x, int k)
{
    long long worst = -2;
    const char **keys = NULL;
    size_t nkeys = 0, cap = 0;

    for (size_t i = 0; i < s->nops; i++) { /* the keys, each once */
        const op *a = &s->ops[i];
        if (a->kind != k || a->inv < x->start || a->inv > x->done)
            continue;
        bool seen = false;
        for (size_t j = 0; j < nkeys && !seen; j++)
            seen = strcmp(keys[j], a->key) == 0;
        if (seen)
            continue;
        if (grow((void **)&keys, &cap, nkeys, sizeof(*keys)) != 0) {
            free(keys);
            return oom(), -1;
        }
        keys[nkeys++] = a->key;
    }
    for (size_t j = 0; j < nkeys && worst != -1; j++) {
        uint64_t first = 0;
        for (size_t i = 0; i < s->nops; i++) {
            const op *b = &s->ops[i];
            if (b->kind == k && b->outcome == OUT_OK && b->inv >= x->start &&
                (first == 0 || b->done < first) && strcmp(b->key, keys[j]) == 0)
                first = b->done;
        }
        long long ms = first == 0 ? -1 : (long long)(first - x->start) / 1000000;
        if (ms == -1 || ms > worst)
            worst = ms;
    }
    free(keys);
    return worst;
}

/* The failover time (ms) of kind k for fault x with one replica: the
 * maximum over affected keys of the time from ref (the heal) to the first
 * ok completion at or after ref of an operation invoked no earlier than
 * the key's first failed one; -1 when a key never recovered; -2 when no
 * key was affected. */
static long long failover_ms(const state *s, const fault *x, int k, uint64_t ref)
{
    long long worst = -2;

    for (size_t i = 0; i < s->nops; i++) {
        const op *a = &s->ops[i];
        if (!failed_in(a, k, x))
            continue;
        bool seen = false; /* this key counted already (an earlier failed op) */
        for (size_t j = 0; j < i && !seen; j++)
            seen = failed_in(&s->ops[j], k, x) && strcmp(s->ops[j].key, a->key) == 0;
        if (seen)
            continue;
        uint64_t since = a->inv; /* the key's first failure in x */
        for (size_t j = i + 1; j < s->nops; j++) {
            const op *b = &s->ops[j];
            if (failed_in(b, k, x) && b->inv < since && strcmp(b->key, a->key) == 0)
                since = b->inv;
        }
        uint64_t first = 0;
        for (size_t j = 0; j < s->nops; j++) {
            const op *b = &s->ops[j];
            if (b->kind == k && b->outcome == OUT_OK && b->done >= ref && b->inv >= since &&
                strcmp(b->key, a->key) == 0 && (first == 0 || b->done < first))
                first = b->done;
        }
        long long ms = first == 0 ? -1 : (long long)(first - ref) / 1000000;
        if (ms == -1)
            return -1;
        if (ms > worst)
            worst = ms;
    }
    return worst;
}

/* The repair of the heal of fault x: ms until a strong query invoked after
 * the heal completed ok (*strong) and the watermarks reached the heads of
 * the first lag sample after it (*lag); -1 for never. */
static void repair_ms(const state *s, const fault *x, long long *strong, long long *lag)
{
    uint64_t h = x->done, first = 0;

    for (size_t i = 0; i < s->nops; i++) {
        const op *a = &s->ops[i];
        if (a->kind == 6 && a->outcome == OUT_OK && a->inv >= h && (first == 0 || a->done < first))
            first = a->done;
    }
    *strong = first == 0 ? -1 : (long long)(first - h) / 1000000;
    *lag = -1;
    size_t i = 0;
    while (i < s->nlags && s->lags[i].t < h)
        i++;
    if (i == s->nlags)
        return;
    const lagsample *ref = &s->lags[i];
    for (size_t k = i; k < s->nlags; k++) {
        const lagsample *l = &s->lags[k];
        bool caught = true;
        for (size_t p = 0; p < l->n && caught; p++)
            for (size_t q = 0; q < ref->n; q++)
                if (ref->pairs[q][1] == l->pairs[p][1] && l->pairs[p][2] < ref->pairs[q][3])
                    caught = false;
        if (caught) {
            *lag = (long long)(l->t - h) / 1000000;
            return;
        }
    }
}

/* Adds {"n", "p50_ms", "max_ms", "never"} of the n values v (-1: never) to o
 * under name. */
static void put_stats(json_t *o, const char *name, long long *v, size_t n)
{
    size_t never = 0, m = 0;
    json_t *st = json_object();

    for (size_t i = 0; i < n; i++)
        if (v[i] < 0)
            never++;
        else
            v[m++] = v[i];
    qsort(v, m, sizeof(*v), cmp_ll);
    json_object_set_new(st, "n", json_integer((json_int_t)n));
    json_object_set_new(st, "never", json_integer((json_int_t)never));
    json_object_set_new(st, "p50_ms", m ? json_integer(v[(m - 1) / 2]) : json_null());
    json_object_set_new(st, "max_ms", m ? json_integer(v[m - 1]) : json_null());
    json_object_set_new(o, name, st);
}

static bool in_fault(const state *s, uint64_t t)
{
    for (size_t i = 0; i < s->nfaults; i++)
        if (t >= s->faults[i].start && t <= s->faults[i].done)
            return true;
    return false;
}

/* Writes timeline.dat and the availability figures into root. 0 or 1. */
static int timeline(const state *s, const char *dir, json_t *root)
{
    char path[4096];
    size_t nbins = s->tend > s->t0 ? (size_t)((s->tend - s->t0) / 1000000000u) + 1 : 1;
    long(*c)[3] = calloc(nbins, sizeof(*c));
    uint64_t *lat = malloc((s->nops ? s->nops : 1) * sizeof(*lat));
    long tot[3] = { 0 }, in[3] = { 0 };
    double worst = 1.0;
    FILE *f;

    if (c == NULL || lat == NULL) {
        free(c);
        free(lat);
        return oom();
    }
    snprintf(path, sizeof(path), "%s/timeline.dat", dir);
    if ((f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "shardex-chaos-analyze: cannot write %s: %s\n", path, strerror(errno));
        free(c);
        free(lat);
        return 1;
    }
    for (size_t i = 0; i < s->nops; i++) {
        const op *a = &s->ops[i];
        if (a->outcome == OUT_PENDING)
            continue;
        c[(a->done - s->t0) / 1000000000u][a->outcome]++;
        tot[a->outcome]++;
        if (in_fault(s, a->done))
            in[a->outcome]++;
    }
    fprintf(f, "# second ok fail info p50_ms p99_ms\n");
    for (size_t b = 0; b < nbins; b++) {
        size_t m = 0;
        for (size_t i = 0; i < s->nops; i++) {
            const op *a = &s->ops[i];
            if (a->outcome == OUT_OK && (a->done - s->t0) / 1000000000u == b)
                lat[m++] = a->done - a->inv;
        }
        qsort(lat, m, sizeof(*lat), cmp_u64);
        long all = c[b][0] + c[b][1] + c[b][2];
        if (all > 0 && (double)c[b][0] / (double)all < worst)
            worst = (double)c[b][0] / (double)all;
        fprintf(f, "%zu %ld %ld %ld %.3f %.3f\n", b, c[b][0], c[b][1], c[b][2],
                m ? (double)lat[(m - 1) / 2] / 1e6 : 0.0,
                m ? (double)lat[(m * 99 - 1) / 100] / 1e6 : 0.0);
    }
    int werr = fclose(f) != 0;
    json_t *av = json_object();
    long all = tot[0] + tot[1] + tot[2], ain = in[0] + in[1] + in[2];
    long aout = all - ain;
    json_object_set_new(av, "ok", json_integer(tot[0]));
    json_object_set_new(av, "fail", json_integer(tot[1]));
    json_object_set_new(av, "info", json_integer(tot[2]));
    json_object_set_new(av, "share", json_real(all ? (double)tot[0] / (double)all : 0.0));
    json_object_set_new(av, "share_in_faults",
                        ain ? json_real((double)in[0] / (double)ain) : json_null());
    json_object_set_new(av, "share_outside_faults",
                        aout ? json_real((double)(tot[0] - in[0]) / (double)aout) : json_null());
    json_object_set_new(av, "worst_second_share", json_real(worst));
    json_object_set_new(av, "seconds", json_integer((json_int_t)nbins));
    json_object_set_new(root, "availability", av);
    free(c);
    free(lat);
    if (werr)
        fprintf(stderr, "shardex-chaos-analyze: writing %s failed\n", path);
    return werr;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "shardex-chaos-analyze: %s\n"
            "usage: shardex-chaos-analyze --out DIR --replicas N --faults FAULTS.jsonl\n"
            "       [--lag LAG.jsonl] HISTORY.jsonl...\n",
            why);
    return 2;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *faults = NULL, *lagf = NULL;
    int replicas = 1, rc = 1;
    state s;
    char path[4096];

    memset(&s, 0, sizeof(s));
    for (int i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--out") == 0 && val)
            dir = val, i++;
        else if (strcmp(argv[i], "--faults") == 0 && val)
            faults = val, i++;
        else if (strcmp(argv[i], "--lag") == 0 && val)
            lagf = val, i++;
        else if (strcmp(argv[i], "--replicas") == 0 && val)
            replicas = atoi(val), i++;
        else if (argv[i][0] == '-')
            return usage("unknown option or missing value");
        else if (s.nhist == 16)
            return usage("at most 16 histories");
        else
            s.hist_names[s.nhist++] = argv[i];
    }
    if (dir == NULL || faults == NULL || s.nhist == 0 || replicas < 1)
        return usage("--out, --faults and a history are required");
    for (int h = 0; h < s.nhist; h++)
        if (read_history(&s, s.hist_names[h], h) != 0)
            goto out;
    if (read_faults(&s, faults) != 0 || (lagf != NULL && read_lag(&s, lagf) != 0))
        goto out;

    json_t *root = json_object(), *ops = json_object(), *fl = json_array();
    json_object_set_new(root, "replicas", json_integer(replicas));
    json_object_set_new(root, "failover_from", json_string(replicas > 1 ? "fault" : "heal"));
    for (int h = 0; h < s.nhist; h++) {
        json_t *o = json_object();
        static const char *const on[] = { "ok", "fail", "info", "pending" };
        const char *base = strrchr(s.hist_names[h], '/');
        for (int k = 0; k < 4; k++)
            json_object_set_new(o, on[k], json_integer(s.counts[h][k]));
        json_object_set_new(ops, base ? base + 1 : s.hist_names[h], o);
    }
    json_object_set_new(root, "operations", ops);
    if (timeline(&s, dir, root) != 0) {
        json_decref(root);
        json_decref(fl);
        goto out;
    }

    size_t nf = s.nfaults ? s.nfaults : 1;
    long long *fo[NKINDS], *rep = calloc(nf, sizeof(long long));
    size_t nfo[NKINDS] = { 0 }, nrep = 0;
    for (int k = 0; k < NKINDS; k++)
        fo[k] = calloc(nf, sizeof(long long));
    snprintf(path, sizeof(path), "%s/faults.dat", dir);
    FILE *fd = fopen(path, "w");
    for (size_t i = 0; i < s.nfaults; i++) {
        const fault *x = &s.faults[i];
        json_t *fj = json_object(), *fk = json_object();
        uint64_t ref = replicas > 1 ? x->start : x->done;
        json_object_set_new(fj, "id", json_integer(x->id));
        json_object_set_new(fj, "fault", json_string(x->name));
        json_object_set_new(fj, "nodes", json_string(x->nodes));
        json_object_set_new(fj, "start_s", json_real((double)(x->start - s.t0) / 1e9));
        json_object_set_new(fj, "healed_s", json_real((double)(x->done - s.t0) / 1e9));
        for (int k = 0; k < NKINDS; k++) {
            long long ms = replicas > 1 ? gap_ms(&s, x, k) : failover_ms(&s, x, k, ref);
            if (ms == -2)
                continue; /* no key of this kind affected */
            if (fo[k] != NULL)
                fo[k][nfo[k]++] = ms;
            json_object_set_new(fk, kind_names[k], json_integer(ms));
        }
        json_object_set_new(fj, "failover_ms", fk);
        long long rs, rl;
        repair_ms(&s, x, &rs, &rl);
        json_object_set_new(fj, "repair_strong_ms", json_integer(rs));
        json_object_set_new(fj, "repair_lag_ms", json_integer(rl));
        long long r = rs < 0 || (s.nlags && rl < 0) ? -1 : rs > rl ? rs : rl;
        json_object_set_new(fj, "repair_ms", json_integer(r));
        if (rep != NULL)
            rep[nrep++] = r;
        json_array_append_new(fl, fj);
        if (fd != NULL)
            fprintf(fd, "%.3f %.3f %s\n", (double)(x->start - s.t0) / 1e9,
                    (double)(x->done - s.t0) / 1e9, x->name);
    }
    json_object_set_new(root, "faults", fl);
    json_t *fos = json_object();
    for (int k = 0; k < NKINDS; k++)
        if (fo[k] != NULL && nfo[k] > 0)
            put_stats(fos, kind_names[k], fo[k], nfo[k]);
    json_object_set_new(root, "failover", fos);
    if (rep != NULL)
        put_stats(root, "repair", rep, nrep);
    bool lost = rep == NULL || fd == NULL;
    for (int k = 0; k < NKINDS; k++) {
        lost = lost || fo[k] == NULL;
        free(fo[k]);
    }
    free(rep);
    if (fd != NULL && fclose(fd) != 0)
        lost = true;
    snprintf(path, sizeof(path), "%s/analysis.json", dir);
    if (lost) {
        oom();
    } else if (json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
        fprintf(stderr, "shardex-chaos-analyze: cannot write %s\n", path);
    } else {
        rc = 0;
    }
    json_decref(root);
out:
    for (size_t i = 0; i < s.nops; i++)
        free(s.ops[i].key);
    free(s.ops);
    for (size_t i = 0; i < s.nfaults; i++) {
        free(s.faults[i].name);
        free(s.faults[i].nodes);
    }
    free(s.faults);
    for (size_t i = 0; i < s.nlags; i++)
        free(s.lags[i].pairs);
    free(s.lags);
    return rc;
}
