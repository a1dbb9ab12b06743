/*
 * check.c — shardex-chaos-check, the judge of a recorded chaos-test history
 * (tests/chaos/README.md):
 *
 *   shardex-chaos-check --history FILE [--model register|set|index] [--out DIR]
 *
 * Reads the history, checks that it is well formed, then runs the model's
 * checker (register: linearizable, set: set-full, index: index).  Prints one
 * verdict line per checker on stdout, counterexamples and errors on stderr,
 * and with --out writes DIR/check.json.  Exit status: 0 every checker
 * passed, 1 one failed or could not decide, 2 usage error, unreadable,
 * malformed or ill-formed history, or check.json not written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chk.h"

#define SHOWN_ERRORS 20 /* well-formedness errors printed on stderr */

static const char usage[] =
    "usage: shardex-chaos-check --history FILE [--model register|set|index] [--out DIR]\n"
    "  Judges a recorded history (one JSON object a line; tests/chaos/README.md).\n"
    "  --model   register (default): linearizable per key; set: set-full; index: index\n"
    "  --out     also write DIR/check.json (verdicts, figures, counterexamples)\n"
    "  Exit: 0 all checkers passed, 1 a checker failed or could not decide,\n"
    "        2 usage error or an unreadable, malformed or ill-formed history.\n";

/* The value of option name at argv[*i] ("--name V" or "--name=V"), moving
 * *i past it; NULL when argv[*i] is not that option.  *missing is set when
 * the option has no value. */
static const char *option(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t len = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, len))
        return NULL;
    if (a[len] == '=')
        return a + len + 1;
    if (a[len])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "shardex-chaos-check: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

int main(int argc, char **argv)
{
    const char *history = NULL, *model_name = "register", *out = NULL;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if ((v = option(argc, argv, &i, "--history", &missing))) {
            history = v;
        } else if ((v = option(argc, argv, &i, "--model", &missing))) {
            model_name = v;
        } else if ((v = option(argc, argv, &i, "--out", &missing))) {
            out = v;
        } else {
            return usage_error(missing ? "%s needs a value" : "unknown argument '%s'", argv[i]);
        }
    }
    chk_model model;
    const char *name;
    int (*checker)(const chk_hist *, chk_result *);
    if (!strcmp(model_name, "register")) {
        model = CHK_REGISTER;
        name = "linearizable";
        checker = chk_linearizable;
    } else if (!strcmp(model_name, "set")) {
        model = CHK_SET;
        name = "set-full";
        checker = chk_set_full;
    } else if (!strcmp(model_name, "index")) {
        model = CHK_INDEX;
        name = "index";
        checker = chk_index;
    } else {
        return usage_error("unknown model '%s' (register, set or index)", model_name);
    }
    if (!history || !*history)
        return usage_error("%s--history FILE is required", "");
    if (out && !*out)
        return usage_error("%s--out needs a directory", "");

    chk_hist h = { 0 };
    chk_result rs[2];
    size_t n = 0;
    char err[1024];
    const char *error = NULL;
    int code;
    memset(rs, 0, sizeof rs);
    if (chk_hist_read(&h, history, model, err, sizeof err)) {
        error = err;
        code = 2;
    } else if (chk_result_init(&rs[n++], "well-formed") || chk_well_formed(&h, &rs[0])) {
        error = "out of memory";
        code = 2;
    } else if (rs[0].verdict != CHK_PASS) {
        code = 2;
    } else if (chk_result_init(&rs[n++], name) || checker(&h, &rs[1]) ||
               chk_result_finish(&rs[1], &h)) {
        error = "out of memory";
        code = 2;
    } else {
        code = rs[1].verdict == CHK_PASS ? 0 : 1;
    }

    if (error) {
        fprintf(stderr, "shardex-chaos-check: %s\n", error);
    } else {
        chk_report_print(stdout, stderr, &h, rs, n);
        for (size_t i = 0; i < h.n_errs && i < SHOWN_ERRORS; i++)
            fprintf(stderr, "%s:%ld: %s\n", history, h.errs[i].line, h.errs[i].msg);
        if (h.n_errs > SHOWN_ERRORS)
            fprintf(stderr, "... and %zu more well-formedness errors\n", h.n_errs - SHOWN_ERRORS);
    }
    char werr[1024];
    if (out && chk_report_write(out, history, model_name, code, error ? NULL : rs, error ? 0 : n,
                                error, werr, sizeof werr)) {
        fprintf(stderr, "shardex-chaos-check: %s\n", werr);
        code = 2;
    }
    for (size_t i = 0; i < n; i++)
        chk_result_free(&rs[i]);
    chk_hist_free(&h);
    return code;
}
