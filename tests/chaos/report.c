/*
 * report.c — the chaos checker's results: building one (verdict, text,
 * figures, counterexample operations), printing the verdict lines on
 * stdout and the counterexamples' history lines on stderr, and writing
 * check.json (README.md, "Output").
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chk.h"

/* chk_result_init: contract in chk.h. */
int chk_result_init(chk_result *r, const char *name)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->figs = json_object();
    return r->figs ? 0 : -1;
}

/* chk_result_set: contract in chk.h. */
int chk_result_set(chk_result *r, chk_verdict v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    char *t = malloc((size_t)n + 1);
    if (!t)
        return -1;
    va_start(ap, fmt);
    vsnprintf(t, (size_t)n + 1, fmt, ap);
    va_end(ap);
    free(r->text);
    r->text = t;
    r->verdict = v;
    return 0;
}

/* chk_result_fig: contract in chk.h. */
int chk_result_fig(chk_result *r, const char *name, long long v)
{
    return json_object_set_new(r->figs, name, json_integer((json_int_t)v));
}

static int add_line(chk_result *r, long line)
{
    if (r->n_lines == r->cap_lines) {
        size_t nc = r->cap_lines ? r->cap_lines * 2 : 16;
        long *nl = realloc(r->lines, nc * sizeof *nl);
        if (!nl)
            return -1;
        r->lines = nl;
        r->cap_lines = nc;
    }
    r->lines[r->n_lines++] = line;
    return 0;
}

/* chk_result_add_op: contract in chk.h. */
int chk_result_add_op(chk_result *r, const chk_op *op)
{
    if (!r->cx && !(r->cx = json_object()))
        return -1;
    if (add_line(r, op->inv_line))
        return -1;
    return op->done_line ? add_line(r, op->done_line) : 0;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

/* chk_result_finish: contract in chk.h. */
int chk_result_finish(chk_result *r, const chk_hist *h)
{
    if (!r->cx)
        return 0;
    qsort(r->lines, r->n_lines, sizeof *r->lines, cmp_long);
    size_t k = 0;
    for (size_t i = 0; i < r->n_lines; i++)
        if (k == 0 || r->lines[k - 1] != r->lines[i])
            r->lines[k++] = r->lines[i];
    r->n_lines = k;
    json_t *lines = json_array(), *ops = json_array();
    if (!lines || !ops) {
        json_decref(lines);
        json_decref(ops);
        return -1;
    }
    if (json_object_set_new(r->cx, "lines", lines)) {
        json_decref(ops);
        return -1;
    }
    if (json_object_set_new(r->cx, "ops", ops))
        return -1;
    for (size_t i = 0; i < k; i++) {
        const char *text = chk_hist_line(h, r->lines[i]);
        json_t *o = json_loads(text, JSON_DECODE_ANY, NULL);
        if (!o)
            o = json_string(text);
        if (json_array_append_new(lines, json_integer(r->lines[i])) ||
            json_array_append_new(ops, o))
            return -1;
    }
    return 0;
}

/* chk_result_free: contract in chk.h. */
void chk_result_free(chk_result *r)
{
    free(r->text);
    json_decref(r->figs);
    json_decref(r->cx);
    free(r->lines);
    memset(r, 0, sizeof *r);
}

/* chk_s: contract in chk.h. */
const char *chk_s(size_t n)
{
    return n == 1 ? "" : "s";
}

/* chk_short: contract in chk.h. */
const char *chk_short(const char *text, char *buf, size_t n, size_t max)
{
    size_t len = strlen(text);
    if (max + 4 > n)
        max = n > 4 ? n - 4 : 0;
    if (len <= max) {
        snprintf(buf, n, "%s", text);
        return buf;
    }
    while (max && ((unsigned char)text[max] & 0xc0) == 0x80)
        max--; /* not inside a UTF-8 sequence */
    snprintf(buf, n, "%.*s...", (int)max, text);
    return buf;
}

/* chk_report_print: contract in chk.h. */
void chk_report_print(FILE *out, FILE *err, const chk_hist *h, const chk_result *rs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s: %s\n", rs[i].name, rs[i].text ? rs[i].text : "?");
    fflush(out);
    for (size_t i = 0; i < n; i++) {
        if (rs[i].verdict == CHK_PASS || !rs[i].n_lines)
            continue;
        fprintf(err, "%s: counterexample (history lines):\n", rs[i].name);
        for (size_t k = 0; k < rs[i].n_lines; k++)
            fprintf(err, "  %6ld  %s\n", rs[i].lines[k], chk_hist_line(h, rs[i].lines[k]));
    }
}

/* Makes dir and its missing parents (mkdir -p). */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    if (!*dir) {
        snprintf(err, errlen, "the --out directory is empty");
        return -1;
    }
    char *p = strdup(dir);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) {
            snprintf(err, errlen, "%s: cannot make the directory: %s", p, strerror(errno));
            rc = -1;
            break;
        }
        *s = c;
        if (!c)
            break;
    }
    free(p);
    return rc;
}

static const char *verdict_name(chk_verdict v)
{
    return v == CHK_PASS ? "pass" : v == CHK_FAILED ? "fail" : "unknown";
}

/* chk_report_write: contract in chk.h. */
int chk_report_write(const char *dir, const char *history, const char *model, int exit_code,
                     const chk_result *rs, size_t n, const char *error, char *err, size_t errlen)
{
    if (make_dirs(dir, err, errlen))
        return -1;
    json_t *root = json_pack("{s:s,s:s,s:b,s:i}", "history", history, "model", model, "valid",
                             exit_code == 0, "exit", exit_code);
    json_t *checkers = json_array();
    int bad = !root || !checkers || json_object_set_new(root, "checkers", checkers);
    if (!root)
        json_decref(checkers);
    if (!bad && error)
        bad = json_object_set_new(root, "error", json_string(error));
    for (size_t i = 0; i < n && !bad; i++) {
        json_t *c = json_pack("{s:s,s:s,s:s,s:O}", "name", rs[i].name, "verdict",
                              verdict_name(rs[i].verdict), "summary", rs[i].text ? rs[i].text : "",
                              "figures", rs[i].figs);
        bad = json_array_append_new(checkers, c);
        if (!bad && rs[i].cx)
            bad = json_object_set(c, "counterexample", rs[i].cx);
    }
    if (bad) {
        json_decref(root);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t plen = strlen(dir) + sizeof "/check.json.tmp";
    char *path = malloc(plen), *tmp = malloc(plen);
    int rc = -1;
    if (!path || !tmp) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    snprintf(path, plen, "%s/check.json", dir);
    snprintf(tmp, plen, "%s/check.json.tmp", dir);
    if (json_dump_file(root, tmp, JSON_INDENT(2)) || rename(tmp, path)) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        goto out;
    }
    rc = 0;
out:
    free(path);
    free(tmp);
    json_decref(root);
    return rc;
}
