/*
 * json.c — JSON <-> items for the CLI (jansson). Integers become int64,
 * other numbers doubles; {"$bin":"<base64>"} is a binary value; objects and
 * arrays nest as maps and lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include "cli.h"

json_t *cli_json_parse(const char *text, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        snprintf(err, errlen, "bad JSON at column %d: %s", je.column, je.text);
    return j;
}

/* True when j is {"$bin": "<text>"}. */
static bool is_bin(const json_t *j)
{
    return json_is_object(j) && json_object_size(j) == 1 &&
           json_is_string(json_object_get(j, "$bin"));
}

/* Decodes the base64 of a {"$bin":...} object (standard or URL-safe
 * alphabet, padded or not) into a malloc'd buffer. */
static int bin_decode(const json_t *j, uint8_t **out, size_t *n, char *err, size_t errlen)
{
    const json_t *s = json_object_get(j, "$bin");
    const char *t = json_string_value(s);
    size_t tl = json_string_length(s);
    static const int variants[] = { sodium_base64_VARIANT_ORIGINAL,
                                    sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                                    sodium_base64_VARIANT_URLSAFE,
                                    sodium_base64_VARIANT_URLSAFE_NO_PADDING };
    uint8_t *b = malloc(tl + 1);
    if (!b)
        return SX_ENOMEM;
    for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++) {
        if (sodium_base642bin(b, tl + 1, t, tl, NULL, n, NULL, variants[k]) == 0) {
            *out = b;
            return SX_OK;
        }
    }
    free(b);
    snprintf(err, errlen, "bad base64 in {\"$bin\": ...}");
    return SX_EINVAL;
}

int cli_json_to_scalar(const json_t *j, sx_value *v, void **keep, char *err, size_t errlen)
{
    *keep = NULL;
    switch (json_typeof(j)) {
    case JSON_NULL: *v = sx_val_null(); return SX_OK;
    case JSON_TRUE: *v = sx_val_bool(1); return SX_OK;
    case JSON_FALSE: *v = sx_val_bool(0); return SX_OK;
    case JSON_INTEGER: *v = sx_val_int((int64_t)json_integer_value(j)); return SX_OK;
    case JSON_REAL: *v = sx_val_double(json_real_value(j)); return SX_OK;
    case JSON_STRING: *v = sx_val_strn(json_string_value(j), json_string_length(j)); return SX_OK;
    case JSON_OBJECT:
        if (is_bin(j)) {
            uint8_t *b;
            size_t n;
            int rc = bin_decode(j, &b, &n, err, errlen);
            if (rc)
                return rc;
            *keep = b;
            *v = sx_val_bin(b, n);
            return SX_OK;
        }
        break;
    default: break;
    }
    snprintf(err, errlen, "expected a scalar value (null, bool, number, string or {\"$bin\":...})");
    return SX_EINVAL;
}

static int fill_map(sx_item *it, const json_t *obj, char *err, size_t errlen, int depth);

static int fill_list(sx_list *l, const json_t *arr, char *err, size_t errlen, int depth)
{
    size_t k;
    json_t *e;
    json_array_foreach(arr, k, e) {
        int rc;
        if (json_is_array(e)) {
            sx_list *sub;
            rc = sx_list_append_list(l, &sub);
            if (!rc)
                rc = fill_list(sub, e, err, errlen, depth + 1);
        } else if (json_is_object(e) && !is_bin(e)) {
            sx_item *sub;
            rc = sx_list_append_map(l, &sub);
            if (!rc)
                rc = fill_map(sub, e, err, errlen, depth + 1);
        } else {
            sx_value v;
            void *keep;
            rc = cli_json_to_scalar(e, &v, &keep, err, errlen);
            if (!rc)
                rc = sx_list_append(l, &v);
            free(keep);
        }
        if (rc)
            return rc;
    }
    return SX_OK;
}

static int fill_map(sx_item *it, const json_t *obj, char *err, size_t errlen, int depth)
{
    const char *name;
    json_t *e;
    if (depth > 30) {
        snprintf(err, errlen, "JSON nested too deeply");
        return SX_EINVAL;
    }
    json_object_foreach((json_t *)obj, name, e) {
        int rc;
        if (!*name) {
            snprintf(err, errlen, "empty attribute name");
            return SX_EINVAL;
        }
        if (json_is_array(e)) {
            sx_list *sub;
            rc = sx_item_set_list(it, name, &sub);
            if (!rc)
                rc = fill_list(sub, e, err, errlen, depth + 1);
        } else if (json_is_object(e) && !is_bin(e)) {
            sx_item *sub;
            rc = sx_item_set_map(it, name, &sub);
            if (!rc)
                rc = fill_map(sub, e, err, errlen, depth + 1);
        } else {
            sx_value v;
            void *keep;
            rc = cli_json_to_scalar(e, &v, &keep, err, errlen);
            if (!rc)
                rc = sx_item_set_value(it, name, &v);
            free(keep);
        }
        if (rc) {
            if (rc == SX_ENOMEM)
                snprintf(err, errlen, "out of memory");
            return rc;
        }
    }
    return SX_OK;
}

int cli_json_to_item(const json_t *obj, sx_item **out, char *err, size_t errlen)
{
    if (!json_is_object(obj) || is_bin(obj)) {
        snprintf(err, errlen, "expected a JSON object");
        return SX_EINVAL;
    }
    sx_item *it = sx_item_new();
    if (!it) {
        snprintf(err, errlen, "out of memory");
        return SX_ENOMEM;
    }
    int rc = fill_map(it, obj, err, errlen, 0);
    if (rc) {
        sx_item_free(it);
        return rc;
    }
    *out = it;
    return SX_OK;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left) that starts
 * with a byte >= 0x80, or 0 when it is not one (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;

    if (len == 0 || len > n)
        return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

/* Writes s as a JSON string literal: control characters escaped, UTF-8 as
 * it is, and bytes that are not UTF-8 (the library takes any bytes in a
 * string) as U+FFFD, so that the line stays JSON. */
static void emit_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t k = 0; k < n; k++) {
        unsigned char ch = (unsigned char)s[k];
        if (ch >= 0x80) {
            size_t len = utf8_len((const unsigned char *)s + k, n - k);
            if (len == 0) {
                fputs("\\ufffd", f);
            } else {
                fwrite(s + k, 1, len, f);
                k += len - 1;
            }
        } else if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Writes the shortest decimal form that reads back as the same double,
 * always with a '.' or exponent so it reads back as a double, not an int. */
static void emit_double(FILE *f, double d)
{
    char buf[40];
    if (d != d || d - d != 0) { /* NaN, infinities: JSON has none */
        fputs("null", f);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    fputs(buf, f);
    if (!strpbrk(buf, ".eE"))
        fputs(".0", f);
}

static void emit_item(FILE *f, const sx_item *it);

static void emit_value(FILE *f, const sx_value *v)
{
    switch (v->type) {
    case SX_NULL: fputs("null", f); break;
    case SX_BOOL: fputs(v->b ? "true" : "false", f); break;
    case SX_INT: fprintf(f, "%lld", (long long)v->i); break;
    case SX_DOUBLE: emit_double(f, v->d); break;
    case SX_STR: emit_str(f, v->s, v->len); break;
    case SX_BIN: {
        size_t n = sodium_base64_encoded_len(v->len, sodium_base64_VARIANT_ORIGINAL);
        char *b = malloc(n);
        if (!b) {
            fputs("null", f);
            break;
        }
        sodium_bin2base64(b, n, (const unsigned char *)v->s, v->len,
                          sodium_base64_VARIANT_ORIGINAL);
        fprintf(f, "{\"$bin\":\"%s\"}", b);
        free(b);
        break;
    }
    case SX_LIST:
        fputc('[', f);
        for (size_t k = 0; k < sx_list_len(v->list); k++) {
            sx_value e;
            sx_list_at(v->list, k, &e);
            if (k)
                fputc(',', f);
            emit_value(f, &e);
        }
        fputc(']', f);
        break;
    case SX_MAP: emit_item(f, v->map); break;
    }
}

static void emit_item(FILE *f, const sx_item *it)
{
    fputc('{', f);
    for (size_t k = 0; k < sx_item_count(it); k++) {
        const char *name;
        sx_value v;
        sx_item_attr(it, k, &name, &v);
        if (k)
            fputc(',', f);
        emit_str(f, name, strlen(name));
        fputc(':', f);
        emit_value(f, &v);
    }
    fputc('}', f);
}

int cli_print_item(const sx_item *it)
{
    emit_item(stdout, it);
    fputc('\n', stdout);
    if (ferror(stdout))
        return cli_error("cannot write to stdout");
    return CLI_OK;
}

int cli_split(const char *s, char ***out, size_t *n)
{
    size_t max = 1;
    for (const char *p = s; *p; p++)
        max += *p == ',';
    char **v = calloc(max, sizeof *v);
    if (!v)
        return SX_ENOMEM;
    size_t k = 0;
    const char *p = s;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0) {
            cli_split_free(v, k);
            return SX_EINVAL;
        }
        v[k] = strndup(p, len);
        if (!v[k]) {
            cli_split_free(v, k);
            return SX_ENOMEM;
        }
        k++;
        if (!e)
            break;
        p = e + 1;
    }
    *out = v;
    *n = k;
    return SX_OK;
}

void cli_split_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t k = 0; k < n; k++)
        free(v[k]);
    free(v);
}
