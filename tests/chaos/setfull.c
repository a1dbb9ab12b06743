/*
 * setfull.c — the chaos checker's set-full checker (model set): per set
 * (the "key" of its adds and reads; one set when there is none), every
 * element of every ok read must have been added by an add that did not
 * fail and was invoked before the read completed, and every element with
 * an ok add completed before the final read (the ok read invoked last) was
 * invoked must be in that read.  An info or never-completed add may be in
 * it or not.  README.md states the rules.
 */
#include <stdlib.h>
#include <string.h>

#include "chk.h"

enum { PH_NEVER = 1, PH_FAILED, PH_LATE };

static int cmp_add(const void *a, const void *b)
{
    const chk_op *x = *(const chk_op *const *)a, *y = *(const chk_op *const *)b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return (x->call > y->call) - (x->call < y->call);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The first add of (key, value) in adds[n] (sorted), or n. */
static size_t find_group(const chk_op *const *adds, size_t n, uint64_t key, uint64_t value)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const chk_op *m = adds[mid];
        if (m->key < key || (m->key == key && m->value < value))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && adds[lo]->key == key && adds[lo]->value == value ? lo : n;
}

static int has(const uint64_t *sorted, size_t n, uint64_t v)
{
    return bsearch(&v, sorted, n, sizeof v, cmp_u64) != NULL;
}

/* The set's name for a message: ` set "s"`, or "" for the unnamed set. */
static const char *set_name(const chk_hist *h, uint64_t key, char *buf, size_t n)
{
    char k[80];
    if (!key)
        return "";
    snprintf(buf, n, " set %s", chk_short(chk_intern_name(&h->in, key), k, sizeof k, 64));
    return buf;
}

static int append(json_t *a, const chk_hist *h, uint64_t id)
{
    return json_array_append_new(a, json_loads(chk_intern_name(&h->in, id), JSON_DECODE_ANY, NULL));
}

/* chk_set_full: contract in chk.h. */
int chk_set_full(const chk_hist *h, chk_result *r)
{
    int rc = -1;
    size_t nk = h->in.n ? h->in.n : 1, n_adds = 0, n_reads = 0, n_sets = 0;
    const chk_op **adds = malloc((h->n_ops ? h->n_ops : 1) * sizeof *adds);
    const chk_op **final = calloc(nk, sizeof *final);
    uint64_t **fin_items = calloc(nk, sizeof *fin_items); /* sorted, distinct */
    size_t *fin_n = calloc(nk, sizeof *fin_n);
    uint8_t *is_set = calloc(nk, 1);
    json_t *lost = json_array(), *phantoms = json_array();
    if (!adds || !final || !fin_items || !fin_n || !is_set || !lost || !phantoms)
        goto out;
    size_t ok_adds = 0, info_adds = 0, fail_adds = 0;
    for (size_t i = 0; i < h->n_ops; i++) {
        const chk_op *op = &h->ops[i];
        if (!is_set[op->key]) {
            is_set[op->key] = 1;
            n_sets++;
        }
        if (op->f == CHK_F_ADD) {
            adds[n_adds++] = op;
            ok_adds += op->outcome == CHK_OK;
            fail_adds += op->outcome == CHK_FAIL;
            info_adds += op->outcome == CHK_INFO || op->outcome == CHK_PENDING;
        } else if (op->outcome == CHK_OK) {
            n_reads++;
            const chk_op *f = final[op->key];
            if (!f || op->call > f->call || (op->call == f->call && op->inv_line > f->inv_line))
                final[op->key] = op;
        }
    }
    qsort(adds, n_adds, sizeof *adds, cmp_add);
    size_t in_final = 0;
    for (size_t k = 0; k < nk; k++) {
        const chk_op *f = final[k];
        if (!f)
            continue;
        uint64_t *it = malloc((f->n_items ? f->n_items : 1) * sizeof *it);
        if (!it)
            goto out;
        memcpy(it, f->items, f->n_items * sizeof *it);
        qsort(it, f->n_items, sizeof *it, cmp_u64);
        size_t d = 0;
        for (size_t i = 0; i < f->n_items; i++)
            if (!d || it[d - 1] != it[i])
                it[d++] = it[i];
        fin_items[k] = it;
        fin_n[k] = d;
        in_final += d;
    }

    /* lost: per element, its earliest-completing ok add */
    size_t n_lost = 0, unconfirmed = 0, info_in = 0, info_out = 0, unread = 0;
    const chk_op *lost_add = NULL, *unread_add = NULL;
    for (size_t a = 0; a < n_adds;) {
        size_t b = a;
        const chk_op *first_ok = NULL;
        int maybe = 0;
        for (; b < n_adds && adds[b]->key == adds[a]->key && adds[b]->value == adds[a]->value;
             b++) {
            const chk_op *op = adds[b];
            if (op->outcome == CHK_OK && (!first_ok || op->ret < first_ok->ret))
                first_ok = op;
            maybe |= op->outcome == CHK_INFO || op->outcome == CHK_PENDING;
        }
        const chk_op *f = final[adds[a]->key];
        int present = f && has(fin_items[adds[a]->key], fin_n[adds[a]->key], adds[a]->value);
        if (first_ok && !f) {
            unread++;
            if (!unread_add)
                unread_add = first_ok;
        } else if (first_ok && first_ok->ret < f->call && !present) {
            if (n_lost < 100 && append(lost, h, adds[a]->value))
                goto out;
            if (!n_lost++ || first_ok->inv_line < lost_add->inv_line)
                lost_add = first_ok;
        } else if (first_ok && !present) {
            unconfirmed++;
        } else if (!first_ok && maybe && f) {
            info_in += present;
            info_out += !present;
        }
        a = b;
    }

    /* phantoms: in any ok read */
    size_t n_phantom = 0;
    const chk_op *ph_read = NULL, *ph_add = NULL;
    uint64_t ph_elem = 0;
    int ph_kind = 0;
    for (size_t i = 0; i < h->n_ops; i++) {
        const chk_op *rd = &h->ops[i];
        if (rd->f != CHK_F_READ || rd->outcome != CHK_OK)
            continue;
        for (size_t e = 0; e < rd->n_items; e++) {
            size_t g = find_group(adds, n_adds, rd->key, rd->items[e]);
            int kind = PH_NEVER, ok = 0;
            const chk_op *evidence = NULL;
            for (size_t j = g;
                 j < n_adds && !ok && adds[j]->key == rd->key && adds[j]->value == rd->items[e];
                 j++) {
                if (adds[j]->outcome == CHK_FAIL) {
                    if (kind == PH_NEVER) {
                        kind = PH_FAILED;
                        evidence = adds[j];
                    }
                } else if (adds[j]->call <= rd->ret) {
                    ok = 1;
                } else {
                    kind = PH_LATE;
                    evidence = adds[j];
                    break; /* sorted by call: this is the first one not failed */
                }
            }
            if (ok)
                continue;
            int dup = 0; /* the same element twice in one read counts once */
            for (size_t x = 0; x < e && !dup; x++)
                dup = rd->items[x] == rd->items[e];
            if (dup)
                continue;
            if (n_phantom < 100 && append(phantoms, h, rd->items[e]))
                goto out;
            if (!n_phantom++) {
                ph_read = rd;
                ph_add = evidence;
                ph_elem = rd->items[e];
                ph_kind = kind;
            }
        }
    }

    if (chk_result_fig(r, "sets", (long long)n_sets) ||
        chk_result_fig(r, "adds", (long long)n_adds) ||
        chk_result_fig(r, "adds_ok", (long long)ok_adds) ||
        chk_result_fig(r, "adds_fail", (long long)fail_adds) ||
        chk_result_fig(r, "adds_info", (long long)info_adds) ||
        chk_result_fig(r, "reads_ok", (long long)n_reads) ||
        chk_result_fig(r, "final_read_elements", (long long)in_final) ||
        chk_result_fig(r, "lost", (long long)n_lost) ||
        chk_result_fig(r, "phantom", (long long)n_phantom) ||
        chk_result_fig(r, "unconfirmed", (long long)unconfirmed) ||
        chk_result_fig(r, "info_present", (long long)info_in) ||
        chk_result_fig(r, "info_absent", (long long)info_out) ||
        chk_result_fig(r, "without_final_read", (long long)unread))
        goto out;

    char sn[128], el[80];
    if (n_lost) {
        const chk_op *f = final[lost_add->key];
        if (chk_result_add_op(r, lost_add) || chk_result_add_op(r, f) ||
            json_object_set_new(r->cx, "kind", json_string("lost")) ||
            json_object_set_new(
                r->cx, "element",
                json_loads(chk_intern_name(&h->in, lost_add->value), JSON_DECODE_ANY, NULL)) ||
            json_object_set(r->cx, "lost", lost) || json_object_set(r->cx, "phantoms", phantoms))
            goto out;
        rc = chk_result_set(
            r, CHK_FAILED,
            "FAIL%s: the acknowledged add of %s (lines %ld-%ld) is missing from the "
            "final read (lines %ld-%ld) [%zu lost, %zu phantom]",
            set_name(h, lost_add->key, sn, sizeof sn),
            chk_short(chk_intern_name(&h->in, lost_add->value), el, sizeof el, 64),
            lost_add->inv_line, lost_add->done_line, f->inv_line, f->done_line, n_lost, n_phantom);
    } else if (n_phantom) {
        if (chk_result_add_op(r, ph_read) || (ph_add && chk_result_add_op(r, ph_add)) ||
            json_object_set_new(r->cx, "kind", json_string("phantom")) ||
            json_object_set_new(
                r->cx, "element",
                json_loads(chk_intern_name(&h->in, ph_elem), JSON_DECODE_ANY, NULL)) ||
            json_object_set(r->cx, "lost", lost) || json_object_set(r->cx, "phantoms", phantoms))
            goto out;
        char why[160];
        if (ph_kind == PH_NEVER)
            snprintf(why, sizeof why, "which was never added");
        else if (ph_kind == PH_FAILED)
            snprintf(why, sizeof why, "whose adds all failed (the first at lines %ld-%ld)",
                     ph_add->inv_line, ph_add->done_line);
        else
            snprintf(
                why, sizeof why,
                "whose first add that did not fail was invoked after the read completed (line %ld)",
                ph_add->inv_line);
        rc = chk_result_set(
            r, CHK_FAILED,
            "FAIL%s: the read (lines %ld-%ld) returned %s, %s [%zu lost, %zu phantom]",
            set_name(h, ph_read->key, sn, sizeof sn), ph_read->inv_line, ph_read->done_line,
            chk_short(chk_intern_name(&h->in, ph_elem), el, sizeof el, 64), why, n_lost, n_phantom);
    } else if (unread) {
        if (chk_result_add_op(r, unread_add))
            goto out;
        rc = chk_result_set(r, CHK_UNKNOWN,
                            "UNKNOWN%s: no ok read to check %zu acknowledged element%s against "
                            "(the first added at lines %ld-%ld)",
                            set_name(h, unread_add->key, sn, sizeof sn), unread,
                            unread == 1 ? "" : "s", unread_add->inv_line, unread_add->done_line);
    } else {
        rc = chk_result_set(
            r, CHK_PASS,
            "pass (%zu set%s, %zu add%s, %zu ok read%s, %zu element%s in the final read%s)", n_sets,
            chk_s(n_sets), n_adds, chk_s(n_adds), n_reads, chk_s(n_reads), in_final,
            chk_s(in_final), chk_s(n_sets));
    }
out:
    if (fin_items)
        for (size_t k = 0; k < nk; k++)
            free(fin_items[k]);
    free(fin_items);
    free(fin_n);
    free(adds);
    free(final);
    free(is_set);
    json_decref(lost);
    json_decref(phantoms);
    return rc;
}
