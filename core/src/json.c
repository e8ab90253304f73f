/*
 * A strict RFC 8259 JSON validator: payloads are checked in C before any
 * write, with no SQL round trip, and the same way whatever SQLite version
 * (and JSON5 leniency) the host runs.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

#define TC_JSON_MAX_DEPTH 1000

typedef struct jp {
    const unsigned char *p, *end;
    int depth, max_depth;
    int too_deep; /* refused for nesting past max_depth */
    int huge;     /* refused for a number beyond a double's range */
    int lone;     /* refused for a lone surrogate escape (\ud800 with no pair) */
    const unsigned char *key, *hkey; /* the member being read; the one holding the huge number */
    size_t keylen, hkeylen;
} jp;

/* A wrapper (an options object, the jobs array and its job objects) sits
 * above the values it carries: at most this many levels, so that a value
 * inside one may nest as deep as it may on its own. */
#define TC_JSON_WRAPPER_LEVELS 2

static void jp_init(jp *j, const char *text, size_t n) {
    j->p = (const unsigned char *)text;
    j->end = j->p + n;
    j->depth = 0;
    j->max_depth = TC_JSON_MAX_DEPTH;
    j->too_deep = 0;
    j->huge = 0;
    j->lone = 0;
    j->key = j->hkey = NULL;
    j->keylen = j->hkeylen = 0;
}

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

/* Whether the number with significant digits sig[0..n) (no leading zero, n >
 * 0) and decimal exponent e of its first digit (value sig[0].sig[1..] * 10^e)
 * is beyond the largest double: JSON readers turn it into infinity (Python,
 * Node, Ruby) or refuse it (Go), so it cannot travel between runtimes. Only
 * e == 308 needs strtod, given digits and an exponent alone (no decimal
 * point: the host's locale cannot change how it reads). The boundary, the
 * largest double plus half its last unit, has 309 significant digits, so the
 * digits decide up to there: the first 320 are kept, and any non-zero digit
 * after them only adds a final 1 (a value a hair above the kept digits, on
 * the same side of the boundary). Cutting at fewer digits read
 * 1.79769313486231580793728971405303415079999e308, which every JSON reader
 * turns into infinity, as the largest double. */
#define TC_HUGE_DIGITS 320
static int jp_huge(const unsigned char *sig, size_t n, long e) {
    char buf[TC_HUGE_DIGITS + 16];
    size_t k = 0, i;
    int more = 0;
    if (e != 308) return e > 308;
    for (i = 0; i < n; i++) {
        if (sig[i] == '.') continue;
        if (k < TC_HUGE_DIGITS)
            buf[k++] = (char)sig[i];
        else if (sig[i] != '0')
            more = 1;
    }
    if (more) buf[k++] = '1';
    snprintf(buf + k, sizeof buf - k, "e%ld", 308L - (long)(k - 1));
    return isinf(strtod(buf, NULL));
}

static int jp_number(jp *j) {
    const unsigned char *sig = NULL, *mend; /* the first non-zero digit; the mantissa's end */
    long e = 0, x = 0;
    int xneg = 0;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p < j->end && *j->p == '0') {
        j->p++;
    } else {
        const unsigned char *ip = j->p;
        if (!jp_digits(j)) return 0;
        sig = ip;
        e = (long)(j->p - ip) - 1;
    }
    if (j->p < j->end && *j->p == '.') {
        const unsigned char *f = ++j->p;
        if (!jp_digits(j)) return 0;
        if (!sig) { /* 0.000ddd: the first non-zero digit of the fraction */
            const unsigned char *z = f;
            while (z < j->p && *z == '0') z++;
            if (z < j->p) {
                sig = z;
                e = -(long)(z - f) - 1;
            }
        }
    }
    mend = j->p;
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) xneg = *j->p++ == '-';
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return 0;
        for (; j->p < j->end && *j->p >= '0' && *j->p <= '9'; j->p++)
            if (x < 100000000L) x = x * 10 + (*j->p - '0');
    }
    if (sig && jp_huge(sig, (size_t)(mend - sig), e + (xneg ? -x : x))) {
        j->huge = 1;
        j->hkey = j->key;
        j->hkeylen = j->keylen;
        return 0;
    }
    return 1;
}

static int hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The value of the 4 hex digits at p (checked), or -1. */
static long hex4(const unsigned char *p) {
    long v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        unsigned char c = p[i];
        if (!hex(c)) return -1;
        v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* Refuses a lone surrogate escape, naming the member that holds it. */
static int jp_lone(jp *j) {
    j->lone = 1;
    j->hkey = j->key;
    j->hkeylen = j->keylen;
    return 0;
}

/* A string. A \u escape of half a UTF-16 surrogate pair must be the high
 * half followed by the low one: a lone half (\ud800) is a code point no UTF-8
 * text holds, and readers disagree on it (Go reads U+FFFD, Python and Node
 * keep the lone half, Ruby makes invalid UTF-8), so it cannot travel. */
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
                long u;
                if (j->end - j->p < 4 || (u = hex4(j->p)) < 0) return 0;
                j->p += 4;
                if (u >= 0xdc00 && u <= 0xdfff) return jp_lone(j);
                if (u >= 0xd800 && u <= 0xdbff) {
                    long lo;
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || (lo = hex4(j->p + 2)) < 0xdc00 ||
                        lo > 0xdfff)
                        return jp_lone(j);
                    j->p += 6;
                }
            } else if (!strchr("\"\\/bfnrt", c)) {
                return 0;
            }
        }
    }
    return 0;
}

static int jp_value(jp *j);

/* The value at p (jp_value consumed it and the whitespace after it): its
 * span without that whitespace. */
static size_t span_of(const unsigned char *start, const unsigned char *end) {
    while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) end--;
    return (size_t)(end - start);
}

/* An object (keyed) or array at j->p: members separated by commas, each
 * handed to mfn / efn when given. 1 valid, 0 not, -1 stopped by fn. */
static int jp_container(jp *j, int keyed, tc_json_member_fn mfn, tc_json_element_fn efn, void *ctx) {
    unsigned char close = keyed ? '}' : ']';
    const unsigned char *outer = j->key; /* the member this container is the value of */
    size_t outerlen = j->keylen, i;
    if (++j->depth > j->max_depth) {
        j->too_deep = 1;
        return 0;
    }
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return 1;
    }
    for (i = 0;; i++) {
        const unsigned char *k = j->p, *ke = k, *v;
        if (keyed) {
            if (j->p >= j->end || *j->p != '"' || !jp_string(j)) return 0;
            ke = j->p;
            j->key = k;
            j->keylen = (size_t)(ke - k);
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') return 0;
            j->p++;
            jp_ws(j);
        }
        v = j->p;
        if (!jp_value(j)) return 0;
        if (mfn && mfn(ctx, (const char *)k, (size_t)(ke - k), (const char *)v, span_of(v, j->p))) return -1;
        if (efn && efn(ctx, i, (const char *)v, span_of(v, j->p))) return -1;
        if (j->p >= j->end) return 0;
        if (*j->p == ',') {
            j->p++;
            jp_ws(j);
            continue;
        }
        if (*j->p != close) return 0;
        j->p++;
        j->depth--;
        j->key = outer;
        j->keylen = outerlen;
        return 1;
    }
}

static int jp_value(jp *j) {
    int ok;
    jp_ws(j);
    if (j->p >= j->end) return 0;
    switch (*j->p) {
    case '{': ok = jp_container(j, 1, NULL, NULL, NULL); break;
    case '[': ok = jp_container(j, 0, NULL, NULL, NULL); break;
    case '"': ok = jp_string(j); break;
    case 't': ok = jp_lit(j, "true"); break;
    case 'f': ok = jp_lit(j, "false"); break;
    case 'n': ok = jp_lit(j, "null"); break;
    default: ok = jp_number(j); break;
    }
    jp_ws(j);
    return ok;
}

static int jp_valid(jp *j, const char *text, size_t n, char *top) {
    jp_init(j, text, n);
    jp_ws(j);
    if (top) *top = j->p < j->end ? (char)*j->p : 0;
    return jp_value(j) && j->p == j->end;
}

int tc_json_valid(const char *text, size_t n, char *top) {
    jp j;
    return jp_valid(&j, text, n, top);
}

/* Why tc_json_valid refuses text[0..n), as the tail of an error message
 * written to buf (an error path: it validates again to say why); "" for its
 * syntax itself. A huge number inside an object is named by its member's key
 * (the innermost one), so that a refused option says which. */
const char *tc_json_why(const char *text, size_t n, char *buf, size_t cap) {
    static const char range[] = "a number beyond the range of a double (as 1e999 is: JSON readers "
                                "turn it into infinity or refuse it)";
    static const char lone[] = "a lone surrogate escape, half of a UTF-16 pair such as \\ud800 without "
                               "its other half: no UTF-8 text holds it, and JSON readers disagree on it";
    jp j;
    buf[0] = 0;
    if (jp_valid(&j, text, n, NULL)) return buf;
    if (j.too_deep)
        snprintf(buf, cap, " (it nests arrays and objects more than 1000 deep, tocsin's limit)");
    else if (j.huge && j.hkey)
        snprintf(buf, cap, " (the value of %.*s%s holds %s)", (int)(j.hkeylen > 80 ? 76 : j.hkeylen),
                 (const char *)j.hkey, j.hkeylen > 80 ? "...\"" : "", range);
    else if (j.huge)
        snprintf(buf, cap, " (it holds %s)", range);
    else if (j.lone)
        snprintf(buf, cap, " (%s%.*s%s holds %s)", j.hkey ? "the value of " : "a string in it",
                 j.hkey ? (int)(j.hkeylen > 80 ? 76 : j.hkeylen) : 0, j.hkey ? (const char *)j.hkey : "",
                 j.hkey && j.hkeylen > 80 ? "...\"" : "", lone);
    return buf;
}

/* tc_json_valid for a wrapper whose values sit `levels` containers deep
 * (1: an options object; 2: the jobs array): 1 valid, 0 not, -1 refused only
 * for its nesting (a value inside nests past the limit). A negative `levels`
 * is a value that will sit inside a wrapper of ours (-1: the task envelope
 * around args and kwargs), allowed that many levels less. */
int tc_json_wrapper_valid(const char *text, size_t n, char *top, int levels) {
    jp j;
    int ok;
    jp_init(&j, text, n);
    j.max_depth += levels > TC_JSON_WRAPPER_LEVELS ? TC_JSON_WRAPPER_LEVELS : levels;
    jp_ws(&j);
    if (top) *top = j.p < j.end ? (char)*j.p : 0;
    ok = jp_value(&j) && j.p == j.end;
    return ok ? 1 : j.too_deep ? -1 : 0;
}

/* The top-level container of text[0..n): 1 when it is exactly one valid
 * object / array and fn never stopped, -1 when fn stopped, 0 otherwise. */
static int jp_walk(const char *text, size_t n, int keyed, tc_json_member_fn mfn, tc_json_element_fn efn,
                   void *ctx) {
    jp j;
    int r;
    jp_init(&j, text, n);
    j.max_depth += TC_JSON_WRAPPER_LEVELS; /* a wrapper: tc_json_wrapper_valid gated its depth */
    jp_ws(&j);
    if (j.p >= j.end || *j.p != (keyed ? '{' : '[')) return 0;
    if ((r = jp_container(&j, keyed, mfn, efn, ctx)) != 1) return r;
    jp_ws(&j);
    return j.p == j.end;
}

int tc_json_members(const char *text, size_t n, tc_json_member_fn fn, void *ctx) {
    return jp_walk(text, n, 1, fn, NULL, ctx);
}

int tc_json_elements(const char *text, size_t n, tc_json_element_fn fn, void *ctx) {
    return jp_walk(text, n, 0, NULL, fn, ctx);
}

char *tc_json_compact(const char *text, size_t n) {
    jp j;
    char *o, *buf = sqlite3_malloc64((sqlite3_uint64)n + 1);
    if (!buf) return NULL;
    jp_init(&j, text, n);
    for (o = buf; j.p < j.end;) {
        if (*j.p == '"') {
            const unsigned char *s = j.p;
            if (!jp_string(&j)) j.p = j.end; /* validated: not reached */
            memcpy(o, s, (size_t)(j.p - s));
            o += j.p - s;
        } else if (*j.p == ' ' || *j.p == '\t' || *j.p == '\n' || *j.p == '\r') {
            j.p++;
        } else {
            *o++ = (char)*j.p++;
        }
    }
    *o = 0;
    return buf;
}

/* The value of four hex digits (already validated). */
static unsigned js_hex4(const char *p) {
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static size_t js_put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* tc_json_decode (internal.h): a string token, escapes decoded. */
int tc_json_decode(const char *p, const char *end, char **out) {
    char *o, *buf = sqlite3_malloc64((sqlite3_uint64)(end - p) + 1);
    *out = NULL;
    if (!buf) return 3;
    o = buf;
    for (p++, end--; p < end; p++) {
        unsigned cp;
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        switch (*++p) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u':
            cp = js_hex4(p + 1);
            p += 4;
            if (cp == 0) {
                sqlite3_free(buf);
                return 1;
            }
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                sqlite3_free(buf);
                return 2;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo = end - p >= 7 && p[1] == '\\' && p[2] == 'u' ? js_hex4(p + 3) : 0;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    sqlite3_free(buf);
                    return 2;
                }
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            o += js_put_utf8(o, cp);
            break;
        default: *o++ = *p; break; /* " \ / */
        }
    }
    *o = 0;
    *out = buf;
    return 0;
}
