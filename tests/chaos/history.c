/*
 * history.c — reads a chaos-test history (history.jsonl: one JSON object a
 * line, README.md) for one model: checks every line's fields, pairs each
 * invocation with its process's next completion into an operation, and
 * records the history's well-formedness errors (a completion without an
 * invocation, two outstanding operations on one process, a completion that
 * differs from its invocation, time going backwards on a process).  A
 * malformed line stops the reading with an error naming the line; a
 * well-formedness error does not.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chk.h"

enum { EV_INVOKE = 0, EV_OK, EV_FAIL, EV_INFO };

static const char *const type_names[] = { "invoke", "ok", "fail", "info" };

/* One line, checked. */
typedef struct ev {
    int type;
    chk_f f;
    uint64_t process, key, value, time;
    int has_value, has_cons, strong;
    uint64_t *items; /* owned until handed to an operation */
    size_t n_items;
} ev;

/* What is known of one process (indexed by its interned id). */
typedef struct pstate {
    int seen;
    size_t open; /* outstanding operation's index + 1; 0: none */
    uint64_t last_time;
    long last_line;
} pstate;

typedef struct reader {
    chk_hist *h;
    const char *path;
    char *err;
    size_t errlen;
    pstate *ps;
    size_t n_ps;
} reader;

/* chk_f_name: contract in chk.h. */
const char *chk_f_name(chk_f f)
{
    switch (f) {
    case CHK_F_PUT: return "put";
    case CHK_F_GET: return "get";
    case CHK_F_DELETE: return "delete";
    case CHK_F_ADD: return "add";
    case CHK_F_READ: return "read";
    case CHK_F_MOVE: return "move";
    case CHK_F_QUERY: return "query";
    }
    return "?";
}

/* chk_op_maybe: contract in chk.h. */
int chk_op_maybe(const chk_op *op)
{
    return op->outcome != CHK_FAIL;
}

/* chk_hist_line: contract in chk.h. */
const char *chk_hist_line(const chk_hist *h, long line)
{
    if (line < 1 || (size_t)line > h->n_lines)
        return "";
    return h->lines[line - 1];
}

static int bad(reader *rd, long line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats "PATH:LINE: message" into the reader's error; returns -1. */
static int bad(reader *rd, long line, const char *fmt, ...)
{
    int n = snprintf(rd->err, rd->errlen, "%s:%ld: ", rd->path, line);
    if (n < 0 || (size_t)n >= rd->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rd->err + n, rd->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int wf_err(reader *rd, long line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records a well-formedness error of line; returns -1 only on NOMEM. */
static int wf_err(reader *rd, long line, const char *fmt, ...)
{
    chk_hist *h = rd->h;
    if (h->n_errs == h->cap_errs) {
        size_t nc = h->cap_errs ? h->cap_errs * 2 : 16;
        chk_wf_err *ne = realloc(h->errs, nc * sizeof *ne);
        if (!ne)
            return -1;
        h->errs = ne;
        h->cap_errs = nc;
    }
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *msg = strdup(buf);
    if (!msg)
        return -1;
    h->errs[h->n_errs++] = (chk_wf_err){ line, msg };
    return 0;
}

static int is_scalar(const json_t *v)
{
    return json_is_string(v) || json_is_integer(v);
}

/* f's name in this model, or 0 when the model has no such operation. */
static chk_f f_of(chk_model m, const char *s)
{
    static const struct {
        chk_model m;
        const char *name;
        chk_f f;
    } fs[] = {
        { CHK_REGISTER, "put", CHK_F_PUT },       { CHK_REGISTER, "get", CHK_F_GET },
        { CHK_REGISTER, "delete", CHK_F_DELETE }, { CHK_SET, "add", CHK_F_ADD },
        { CHK_SET, "read", CHK_F_READ },          { CHK_INDEX, "move", CHK_F_MOVE },
        { CHK_INDEX, "query", CHK_F_QUERY },
    };
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if (fs[i].m == m && !strcmp(fs[i].name, s))
            return fs[i].f;
    return 0;
}

static const char *model_fs(chk_model m)
{
    switch (m) {
    case CHK_REGISTER: return "put, get or delete (model register)";
    case CHK_SET: return "add or read (model set)";
    case CHK_INDEX: return "move or query (model index)";
    }
    return "?";
}

/* Reads an array of strings and integers into ev's items. */
static int read_items(reader *rd, long line, const json_t *a, const char *field, ev *e)
{
    if (!json_is_array(a))
        return bad(rd, line, "\"%s\" must be an array of strings and integers", field);
    size_t n = json_array_size(a);
    e->items = malloc((n ? n : 1) * sizeof *e->items);
    if (!e->items)
        return bad(rd, line, "out of memory");
    e->n_items = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!is_scalar(v))
            return bad(rd, line, "\"%s\"[%zu] must be a string or an integer", field, i);
        if (chk_intern_json(&rd->h->in, v, &e->items[i]))
            return bad(rd, line, "out of memory");
    }
    return 0;
}

/* Checks one parsed line's fields for the model into e (README.md says
 * which fields each operation carries). */
static int read_fields(reader *rd, long line, const json_t *j, ev *e)
{
    chk_intern *in = &rd->h->in;
    if (!json_is_object(j))
        return bad(rd, line, "not a JSON object");

    const json_t *v = json_object_get(j, "type");
    e->type = -1;
    for (int i = 0; i < 4 && json_is_string(v); i++)
        if (!strcmp(json_string_value(v), type_names[i]))
            e->type = i;
    if (e->type < 0)
        return bad(rd, line, "\"type\" must be \"invoke\", \"ok\", \"fail\" or \"info\"");

    v = json_object_get(j, "f");
    e->f = json_is_string(v) ? f_of(rd->h->model, json_string_value(v)) : 0;
    if (!e->f)
        return bad(rd, line, "\"f\" must be %s", model_fs(rd->h->model));

    v = json_object_get(j, "process");
    if (!is_scalar(v))
        return bad(rd, line, "\"process\" must be a string or an integer");
    if (chk_intern_json(in, v, &e->process))
        return bad(rd, line, "out of memory");

    v = json_object_get(j, "time");
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad(rd, line, "\"time\" must be a non-negative integer (nanoseconds)");
    e->time = (uint64_t)json_integer_value(v);

    int need_key = rd->h->model == CHK_REGISTER || e->f == CHK_F_MOVE;
    v = json_object_get(j, "key");
    if (need_key ? !is_scalar(v) : v && !is_scalar(v) && !json_is_null(v))
        return bad(rd, line, "\"key\" must be a string or an integer%s",
                   need_key ? "" : " (or absent)");
    if (chk_intern_json(in, v, &e->key))
        return bad(rd, line, "out of memory");

    const char *fname = chk_f_name(e->f);
    int invoke = e->type == EV_INVOKE, ok = e->type == EV_OK;
    v = json_object_get(j, "value");
    switch (e->f) {
    case CHK_F_PUT:
    case CHK_F_ADD:
    case CHK_F_MOVE:
    case CHK_F_QUERY:
        /* the invocation names the value; a completion may repeat it */
        if (invoke && !v)
            return bad(rd, line, "an invoked %s must carry \"value\"", fname);
        if (v && !is_scalar(v) && !(e->f == CHK_F_MOVE && json_is_null(v)))
            return bad(rd, line, "the \"value\" of a %s must be a string or an integer%s", fname,
                       e->f == CHK_F_MOVE ? " (or null)" : "");
        e->has_value = v != NULL;
        break;
    case CHK_F_GET:
        if (ok && !v)
            return bad(rd, line, "an ok get must carry the \"value\" read (null when absent)");
        if (ok && !is_scalar(v) && !json_is_null(v))
            return bad(rd, line, "the \"value\" of a get must be a string, an integer or null");
        e->has_value = ok;
        break;
    case CHK_F_READ:
        if (ok && !v)
            return bad(rd, line, "an ok read must carry the \"value\" read: an array");
        if (ok && read_items(rd, line, v, "value", e))
            return -1;
        break;
    case CHK_F_DELETE: break;
    }
    if (e->has_value && chk_intern_json(in, v, &e->value))
        return bad(rd, line, "out of memory");

    if (e->f == CHK_F_QUERY) {
        v = json_object_get(j, "consistency");
        const char *c = json_is_string(v) ? json_string_value(v) : "";
        if ((invoke || v) && strcmp(c, "strong") && strcmp(c, "verified"))
            return bad(rd, line,
                       "the \"consistency\" of a query must be \"strong\" or \"verified\"");
        e->has_cons = v != NULL;
        e->strong = !strcmp(c, "strong");
        if (ok) {
            v = json_object_get(j, "result");
            if (!v)
                return bad(rd, line, "an ok query must carry its \"result\": an array of keys");
            if (read_items(rd, line, v, "result", e))
                return -1;
        }
    }
    return 0;
}

static int grow_ps(reader *rd, uint64_t id)
{
    if (id < rd->n_ps)
        return 0;
    size_t nn = rd->n_ps ? rd->n_ps : 64;
    while (nn <= id)
        nn *= 2;
    pstate *np = realloc(rd->ps, nn * sizeof *np);
    if (!np)
        return -1;
    memset(np + rd->n_ps, 0, (nn - rd->n_ps) * sizeof *np);
    rd->ps = np;
    rd->n_ps = nn;
    return 0;
}

/* Pairs a checked line with its process's state; the line's items pass to
 * the operation when it takes them. */
static int pair(reader *rd, long line, ev *e)
{
    chk_hist *h = rd->h;
    const char *pname = chk_intern_name(&h->in, e->process);
    if (grow_ps(rd, e->process))
        return bad(rd, line, "out of memory");
    pstate *ps = &rd->ps[e->process];
    if (!ps->seen) {
        ps->seen = 1;
        h->n_processes++;
    } else if (e->time < ps->last_time) {
        if (wf_err(rd, line, "time goes backwards on process %s: %llu after %llu at line %ld",
                   pname, (unsigned long long)e->time, (unsigned long long)ps->last_time,
                   ps->last_line))
            return bad(rd, line, "out of memory");
    }
    if (e->time >= ps->last_time) {
        ps->last_time = e->time;
        ps->last_line = line;
    }

    if (e->type == EV_INVOKE) {
        if (ps->open &&
            wf_err(rd, line, "process %s invokes a %s while its %s from line %ld is outstanding",
                   pname, chk_f_name(e->f), chk_f_name(h->ops[ps->open - 1].f),
                   h->ops[ps->open - 1].inv_line))
            return bad(rd, line, "out of memory");
        if (h->n_ops == h->cap_ops) {
            size_t nc = h->cap_ops ? h->cap_ops * 2 : 256;
            chk_op *no = realloc(h->ops, nc * sizeof *no);
            if (!no)
                return bad(rd, line, "out of memory");
            h->ops = no;
            h->cap_ops = nc;
        }
        chk_op *op = &h->ops[h->n_ops++];
        memset(op, 0, sizeof *op);
        op->f = e->f;
        op->outcome = CHK_PENDING;
        op->process = e->process;
        op->key = e->key;
        op->value = e->f == CHK_F_GET ? 0 : e->value;
        op->strong = e->strong;
        op->call = e->time;
        op->ret = CHK_INF;
        op->inv_line = line;
        ps->open = h->n_ops;
        return 0;
    }

    if (!ps->open) {
        if (wf_err(rd, line, "%s %s completion on process %s without an invocation",
                   type_names[e->type], chk_f_name(e->f), pname))
            return bad(rd, line, "out of memory");
        return 0;
    }
    chk_op *op = &h->ops[ps->open - 1];
    ps->open = 0;
    int r = 0;
    if (op->f != e->f)
        r |= wf_err(rd, line,
                    "the completion's f \"%s\" differs from its invocation's \"%s\" (line %ld)",
                    chk_f_name(e->f), chk_f_name(op->f), op->inv_line);
    else if (op->key != e->key)
        r |= wf_err(rd, line, "the completion's key %s differs from its invocation's %s (line %ld)",
                    chk_intern_name(&h->in, e->key), chk_intern_name(&h->in, op->key),
                    op->inv_line);
    else if (e->f != CHK_F_GET && e->has_value && e->value != op->value)
        r |= wf_err(
            rd, line, "the completion's value %s differs from its invocation's %s (line %ld)",
            chk_intern_name(&h->in, e->value), chk_intern_name(&h->in, op->value), op->inv_line);
    else if (e->f == CHK_F_QUERY && e->has_cons && e->strong != op->strong)
        r |= wf_err(rd, line,
                    "the completion's consistency differs from its invocation's (line %ld)",
                    op->inv_line);
    if (r)
        return bad(rd, line, "out of memory");
    op->outcome = e->type == EV_OK ? CHK_OK : e->type == EV_FAIL ? CHK_FAIL : CHK_INFO;
    op->ret = op->outcome == CHK_INFO ? CHK_INF : e->time;
    op->done_line = line;
    if (op->outcome == CHK_OK && op->f == CHK_F_GET && e->f == CHK_F_GET)
        op->value = e->value;
    if (op->outcome == CHK_OK && e->items && op->f == e->f) {
        op->items = e->items;
        op->n_items = e->n_items;
        e->items = NULL;
    }
    return 0;
}

static int keep_line(chk_hist *h, const char *text, size_t len)
{
    if (h->n_lines == h->cap_lines) {
        size_t nc = h->cap_lines ? h->cap_lines * 2 : 1024;
        char **nl = realloc(h->lines, nc * sizeof *nl);
        if (!nl)
            return -1;
        h->lines = nl;
        h->cap_lines = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, text, len);
    copy[len] = 0;
    h->lines[h->n_lines++] = copy;
    return 0;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* chk_hist_read: contract in chk.h. */
int chk_hist_read(chk_hist *h, const char *path, chk_model model, char *err, size_t errlen)
{
    reader rd = { h, path, err, errlen, NULL, 0 };
    h->model = model;
    if (chk_intern_init(&h->in)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    long line = 0;
    int rc = 0;
    while (rc == 0 && (got = getline(&buf, &cap, fp)) >= 0) {
        line++;
        size_t len = (size_t)got;
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--;
        if (keep_line(h, buf, len)) {
            rc = bad(&rd, line, "out of memory");
            break;
        }
        if (blank(buf, len))
            continue;
        if (memchr(buf, 0, len)) {
            rc = bad(&rd, line, "not JSON: a NUL byte in the line");
            break;
        }
        json_error_t jerr;
        json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!j) {
            rc = bad(&rd, line, "not JSON: %s (column %d)", jerr.text, jerr.column);
            break;
        }
        ev e;
        memset(&e, 0, sizeof e);
        rc = read_fields(&rd, line, j, &e);
        if (rc == 0)
            rc = pair(&rd, line, &e);
        free(e.items);
        json_decref(j);
    }
    if (rc == 0 && ferror(fp)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        rc = -1;
    }
    free(buf);
    fclose(fp);
    free(rd.ps);
    return rc;
}

/* chk_hist_free: contract in chk.h. */
void chk_hist_free(chk_hist *h)
{
    for (size_t i = 0; i < h->n_ops; i++)
        free(h->ops[i].items);
    free(h->ops);
    for (size_t i = 0; i < h->n_lines; i++)
        free(h->lines[i]);
    free(h->lines);
    for (size_t i = 0; i < h->n_errs; i++)
        free(h->errs[i].msg);
    free(h->errs);
    chk_intern_free(&h->in);
    memset(h, 0, sizeof *h);
}

/* chk_well_formed: contract in chk.h. */
int chk_well_formed(const chk_hist *h, chk_result *r)
{
    size_t pending = 0, events = 0;
    for (size_t i = 0; i < h->n_ops; i++)
        pending += h->ops[i].outcome == CHK_PENDING;
    for (size_t i = 0; i < h->n_lines; i++)
        events += !blank(h->lines[i], strlen(h->lines[i]));
    int rc = chk_result_fig(r, "lines", (long long)events);
    rc |= chk_result_fig(r, "operations", (long long)h->n_ops);
    rc |= chk_result_fig(r, "processes", (long long)h->n_processes);
    rc |= chk_result_fig(r, "pending", (long long)pending);
    rc |= chk_result_fig(r, "errors", (long long)h->n_errs);
    if (rc)
        return -1;
    if (!h->n_errs)
        return chk_result_set(r, CHK_PASS,
                              "pass (%zu line%s, %zu operation%s, %zu process%s, %zu pending)",
                              events, chk_s(events), h->n_ops, chk_s(h->n_ops), h->n_processes,
                              h->n_processes == 1 ? "" : "es", pending);
    json_t *errs = json_array();
    r->cx = json_object();
    if (!errs || !r->cx || json_object_set_new(r->cx, "errors", errs)) {
        json_decref(errs);
        return -1;
    }
    for (size_t i = 0; i < h->n_errs && i < 100; i++)
        if (json_array_append_new(errs, json_pack("{s:I,s:s}", "line", (json_int_t)h->errs[i].line,
                                                  "error", h->errs[i].msg)))
            return -1;
    return chk_result_set(r, CHK_FAILED, "FAIL (%zu error%s; the first at line %ld: %s)", h->n_errs,
                          h->n_errs == 1 ? "" : "s", h->errs[0].line, h->errs[0].msg);
}
