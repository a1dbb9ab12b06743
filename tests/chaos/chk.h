/*
 * chk.h — shared types of shardex-chaos-check, the judge of a recorded
 * chaos-test history (tests/chaos/README.md): the interning table that maps
 * the history's keys, values and processes to integers (intern.c), the
 * history read from history.jsonl with its operations paired and its
 * well-formedness checked (history.c), the checkers (lin.c: linearizable,
 * setfull.c: set-full, indexq.c: index) and their results, printed and
 * written to check.json (report.c).  check.c is the program.
 *
 * Everything here runs on one thread.  Functions returning int return 0 on
 * success and -1 when memory ran out, unless their comment says otherwise.
 */
#ifndef SHARDEX_CHK_H
#define SHARDEX_CHK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* The time of a return that never came (info, or no completion at all). */
#define CHK_INF UINT64_MAX

/* ---- interning: canonical JSON text <-> dense integer id ---- */

/* Id 0 is JSON null ("null"); every other text gets the next id. */
typedef struct chk_intern {
    char **text; /* by id, owned */
    size_t n, cap;
    uint64_t *slot; /* open addressing: id + 1, 0 when empty */
    size_t nslot;
} chk_intern;

/* Makes t an empty table holding only "null" (id 0). */
int chk_intern_init(chk_intern *t);
/* Looks text up, adding a copy when new; *id gets its id. */
int chk_intern_text(chk_intern *t, const char *text, uint64_t *id);
/* The same for a JSON value's canonical text (compact, JSON_ENCODE_ANY):
 * "a" and 1 and null are three ids (null is 0). */
int chk_intern_json(chk_intern *t, const json_t *v, uint64_t *id);
/* The canonical text of id (valid while t lives), or "?" for an unknown id. */
const char *chk_intern_name(const chk_intern *t, uint64_t id);
/* Frees the table's memory (t may be zeroed or initialised). */
void chk_intern_free(chk_intern *t);

/* ---- the history ---- */

typedef enum chk_model { CHK_REGISTER = 1, CHK_SET, CHK_INDEX } chk_model;

typedef enum chk_f {
    CHK_F_PUT = 1,
    CHK_F_GET,
    CHK_F_DELETE,
    CHK_F_ADD,
    CHK_F_READ,
    CHK_F_MOVE,
    CHK_F_QUERY
} chk_f;

/* How an operation ended.  PENDING: no completion before the end of the
 * history, judged like INFO. */
typedef enum chk_outcome { CHK_PENDING = 0, CHK_OK, CHK_FAIL, CHK_INFO } chk_outcome;

/* One operation: an invocation line and its completion line, if any. */
typedef struct chk_op {
    chk_f f;
    chk_outcome outcome;
    uint64_t process; /* interned ids */
    uint64_t key;     /* 0 when the lines have none */
    uint64_t value;   /* written (put, add, move), read (get), asked (query) */
    uint64_t *items;  /* ok read: the elements; ok query: the keys; owned */
    size_t n_items;
    int strong;         /* query: 1 strong, 0 verified */
    uint64_t call, ret; /* nanoseconds; ret CHK_INF unless ok or fail */
    long inv_line;      /* 1-based history line numbers */
    long done_line;     /* 0 when never completed */
} chk_op;

/* A well-formedness error of the history. */
typedef struct chk_wf_err {
    long line;
    char *msg; /* owned */
} chk_wf_err;

typedef struct chk_hist {
    chk_model model;
    chk_op *ops; /* in invocation (line) order */
    size_t n_ops, cap_ops;
    char **lines; /* every line's text, by line number - 1; owned */
    size_t n_lines, cap_lines;
    chk_intern in;
    size_t n_processes;
    chk_wf_err *errs; /* well-formedness errors, in line order */
    size_t n_errs, cap_errs;
} chk_hist;

/* Reads the history at path (one JSON object a line, README.md) for model
 * into h, which the caller zeroes first and frees with chk_hist_free
 * whatever the result.  Returns 0 when every line was read (well-formedness
 * errors are then in h->errs), -1 with a message in err[errlen] naming the
 * file and line when the file cannot be read or a line is malformed, or
 * when memory ran out. */
int chk_hist_read(chk_hist *h, const char *path, chk_model model, char *err, size_t errlen);
/* Frees what chk_hist_read allocated in h. */
void chk_hist_free(chk_hist *h);
/* The history's text of line (1-based), or "" past the end. */
const char *chk_hist_line(const chk_hist *h, long line);
/* The name of f ("put", ...). */
const char *chk_f_name(chk_f f);
/* 1 if op took effect or may have (ok, info or never completed). */
int chk_op_maybe(const chk_op *op);

/* ---- checker results ---- */

typedef enum chk_verdict { CHK_PASS = 0, CHK_FAILED, CHK_UNKNOWN } chk_verdict;

/* What one checker found.  text follows "<name>: " on the verdict line
 * ("pass (...)", "FAIL ...", "UNKNOWN ..."); figures and counterexample
 * go to check.json; the counterexample's history lines (ascending) also go
 * to stderr. */
typedef struct chk_result {
    const char *name; /* static */
    chk_verdict verdict;
    char *text;   /* owned */
    json_t *figs; /* object, owned */
    json_t *cx;   /* counterexample object, owned; NULL when none */
    long *lines;  /* the counterexample's history lines */
    size_t n_lines, cap_lines;
} chk_result;

/* Makes r an empty result of the checker name (a static string), verdict
 * pass, with an empty figures object. */
int chk_result_init(chk_result *r, const char *name);
/* Sets r's verdict and its text, formatted printf-style. */
int chk_result_set(chk_result *r, chk_verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets figure name of r to the integer v. */
int chk_result_fig(chk_result *r, const char *name, long long v);
/* Adds op's invocation and completion lines to r's counterexample (making
 * r->cx an object when it is NULL). */
int chk_result_add_op(chk_result *r, const chk_op *op);
/* Completes r->cx, if any, with "lines" (ascending, distinct) and "ops"
 * (those history lines as JSON objects). */
int chk_result_finish(chk_result *r, const chk_hist *h);
/* Frees r's memory. */
void chk_result_free(chk_result *r);

/* The verdict line of every result on out ("<name>: <text>"), and on err,
 * under each failed result's name, its counterexample's history lines. */
void chk_report_print(FILE *out, FILE *err, const chk_hist *h, const chk_result *rs, size_t n);
/* Writes dir/check.json (making dir and its parents when missing): the
 * history path, model, exit status and the results, or error when the
 * history could not be judged (rs may then be empty).  Returns 0, or -1
 * with the reason in err[errlen]. */
int chk_report_write(const char *dir, const char *history, const char *model, int exit_code,
                     const chk_result *rs, size_t n, const char *error, char *err, size_t errlen);

/* "s" unless n is 1: "%zu key%s", n, chk_s(n). */
const char *chk_s(size_t n);

/* Formats a scalar value's canonical text for a message: at most max
 * bytes of it into buf[n] (with "..." when cut). Returns buf. */
const char *chk_short(const char *text, char *buf, size_t n, size_t max);

/* ---- checkers: each fills r (initialised by the caller) ---- */

/* linearizable (register model): lin.c. */
int chk_linearizable(const chk_hist *h, chk_result *r);
/* set-full (set model): setfull.c. */
int chk_set_full(const chk_hist *h, chk_result *r);
/* index (index model): indexq.c. */
int chk_index(const chk_hist *h, chk_result *r);
/* well-formed: the history's structure errors as a result (history.c). */
int chk_well_formed(const chk_hist *h, chk_result *r);

#endif
