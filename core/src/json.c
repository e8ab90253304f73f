/*
 * A strict RFC 8259 JSON validator: payloads are checked in C before any
 * write, with no SQL round trip, and the same way whatever SQLite version
 * (and JSON5 leniency) the host runs.
 */
#include "internal.h"

#define TC_JSON_MAX_DEPTH 1000

typedef struct jp {
    const unsigned char *p, *end;
    int depth;
} jp;

static void jp_ws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int jp_lit(jp *j, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return 0;
    j->p += n;
    return 1;
}

static int jp_digits(jp *j) {
    const unsigned char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    return j->p > s;
}

static int jp_number(jp *j) {
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p < j->end && *j->p == '0') {
        j->p++;
    } else if (!jp_digits(j)) {
        return 0;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!jp_digits(j)) return 0;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!jp_digits(j)) return 0;
    }
    return 1;
}

static int hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int jp_string(jp *j) {
    j->p++; /* the opening quote */
    while (j->p < j->end) {
        unsigned char c = *j->p++;
        if (c == '"') return 1;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (j->p >= j->end) return 0;
            c = *j->p++;
            if (c == 'u') {
                int i;
                if (j->end - j->p < 4) return 0;
                for (i = 0; i < 4; i++)
                    if (!hex(j->p[i])) return 0;
                j->p += 4;
            } else if (!strchr("\"\\/bfnrt", c)) {
                return 0;
            }
        }
    }
    return 0;
}

static int jp_value(jp *j);

/* An object or array: members separated by commas, with or without keys. */
static int jp_container(jp *j, unsigned char close, int keyed) {
    if (++j->depth > TC_JSON_MAX_DEPTH) return 0;
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return 1;
    }
    for (;;) {
        if (keyed) {
            if (j->p >= j->end || *j->p != '"' || !jp_string(j)) return 0;
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') return 0;
            j->p++;
        }
        if (!jp_value(j)) return 0;
        if (j->p >= j->end) return 0;
        if (*j->p == ',') {
            j->p++;
            jp_ws(j);
            continue;
        }
        if (*j->p != close) return 0;
        j->p++;
        j->depth--;
        return 1;
    }
}

static int jp_value(jp *j) {
    int ok;
    jp_ws(j);
    if (j->p >= j->end) return 0;
    switch (*j->p) {
    case '{': ok = jp_container(j, '}', 1); break;
    case '[': ok = jp_container(j, ']', 0); break;
    case '"': ok = jp_string(j); break;
    case 't': ok = jp_lit(j, "true"); break;
    case 'f': ok = jp_lit(j, "false"); break;
    case 'n': ok = jp_lit(j, "null"); break;
    default: ok = jp_number(j); break;
    }
    jp_ws(j);
    return ok;
}

int tc_json_valid(const char *text, size_t n, char *top) {
    jp j;
    j.p = (const unsigned char *)text;
    j.end = j.p + n;
    j.depth = 0;
    jp_ws(&j);
    if (top) *top = j.p < j.end ? (char)*j.p : 0;
    return jp_value(&j) && j.p == j.end;
}
