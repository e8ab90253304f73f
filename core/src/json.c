/*
 * A strict RFC 8259 JSON validator: payloads are checked in C before any
 * write, with no SQL round trip, and the same way whatever SQLite version
 * (and JSON5 leniency) the host runs.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

#define TC_JSON_MAX_DEPTH 1000

/* A key of an object being read (duplicate-key check): its text between the
 * quotes, and whether that holds an escape (then it is compared decoded). */
typedef struct jkey {
    const unsigned char *p;
    size_t n;
    int esc;
} jkey;

/* Keys kept without allocating: enough for every object of a usual payload
 * (the keys of the objects open around the one being read, and its own). */
#define TC_JKEYS_INLINE 32
/* An object's first keys are each compared with the ones before them (few,
 * and mostly of other lengths: a handful of instructions each); an object
 * with more has all its keys sorted at its end instead, O(n log n). */
#define TC_JKEYS_SCAN 16

/* One step of the path to an object holding a duplicate key (error path). */
typedef struct jstep {
    const unsigned char *key; /* a member's key as written, or NULL: an element */
    size_t n;                 /* the key's length, or the element's index */
} jstep;

typedef struct jp {
    const unsigned char *p, *end;
    int depth, max_depth;
    int too_deep; /* refused for nesting past max_depth */
    int huge;     /* refused for a number beyond a double's range */
    int lone;     /* refused for a lone surrogate escape (\ud800 with no pair) */
    const unsigned char *key, *hkey; /* the member being read; the one holding the huge number */
    size_t keylen, hkeylen;
    int esc;      /* the last string read held an escape */
    int dups;     /* refuse an object with a key twice (decoded) */
    int dup;      /* refused for that: dkey (first as written), dkey2 (again) */
    int oom;      /* refused for want of memory to check the keys */
    jkey dkey, dkey2;
    jkey *keys;   /* the keys of the objects open, outermost first */
    size_t nkeys, capkeys;
    jstep *path;  /* when set (explaining a refusal): the steps to the object
                     holding the duplicate, innermost first */
    size_t npath, cappath;
    jkey inl[TC_JKEYS_INLINE];
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
    j->esc = 0;
    j->dups = 0;
    j->dup = 0;
    j->oom = 0;
    j->keys = j->inl;
    j->nkeys = 0;
    j->capkeys = TC_JKEYS_INLINE;
    j->path = NULL;
    j->npath = j->cappath = 0;
}

static void jp_done(jp *j) {
    if (j->keys != j->inl) sqlite3_free(j->keys);
    j->keys = j->inl;
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
            j->esc = 1;
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

/* ---- duplicate keys ---------------------------------------------------------
 * An object with a key twice ({"a":1,"a":2}) is valid JSON to RFC 8259, but
 * its readers disagree on what it holds: SQLite's JSON functions (and
 * tc_json_members) read the first value, Python, Node, Ruby and Go the last.
 * Keys are compared decoded: "a" and "\u0061" are the same key. */

static size_t js_put_utf8(char *o, unsigned cp);

/* The bytes of a key's decoded text, one at a time (its escapes validated). */
typedef struct kit {
    const unsigned char *p, *end;
    unsigned char b[4];
    size_t i, n;
} kit;

static int kit_next(kit *t) {
    long cp;
    if (t->i < t->n) return t->b[t->i++];
    if (t->p >= t->end) return -1;
    if (*t->p != '\\') return *t->p++;
    t->p += 2;
    switch (t->p[-1]) {
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'u':
        cp = hex4(t->p);
        t->p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a pair (lone halves were refused) */
            cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(t->p + 2) - 0xdc00);
            t->p += 6;
        }
        t->n = js_put_utf8((char *)t->b, (unsigned)cp);
        t->i = 1;
        return t->b[0];
    default: return t->p[-1]; /* " \ / */
    }
}

/* Orders keys by their decoded bytes: 0 when they are the same key. */
static int key_cmp(const jkey *a, const jkey *b) {
    kit ta, tb;
    int ca, cb;
    if (!a->esc && !b->esc) {
        int c = memcmp(a->p, b->p, a->n < b->n ? a->n : b->n);
        return c ? c : a->n < b->n ? -1 : a->n > b->n;
    }
    ta.p = a->p;
    ta.end = a->p + a->n;
    tb.p = b->p;
    tb.end = b->p + b->n;
    ta.i = ta.n = tb.i = tb.n = 0;
    do {
        ca = kit_next(&ta);
        cb = kit_next(&tb);
    } while (ca == cb && ca >= 0);
    return ca < cb ? -1 : ca > cb;
}

static int key_qcmp(const void *a, const void *b) { return key_cmp(a, b); }

static int key_same(const jkey *a, const jkey *b) {
    if (!a->esc && !b->esc) return a->n == b->n && memcmp(a->p, b->p, a->n) == 0;
    return key_cmp(a, b) == 0;
}

/* Refuses the object for its key twice: first written as a, again as b. */
static int jp_dup(jp *j, const jkey *a, const jkey *b) {
    j->dup = 1;
    j->dkey = a->p < b->p ? *a : *b;
    j->dkey2 = a->p < b->p ? *b : *a;
    return 0;
}

/* The key [k, ke) (quotes included; j->esc: it holds an escape) of the
 * object whose keys start at keys[base]: 0 (refused) when it was there
 * before, or when there is no memory to keep it. */
static int jp_key(jp *j, size_t base, const unsigned char *k, const unsigned char *ke) {
    jkey *nk;
    size_t i;
    if (j->nkeys == j->capkeys) {
        size_t cap = j->capkeys * 2;
        jkey *m = sqlite3_malloc64(cap * sizeof *m);
        if (!m) {
            j->oom = 1;
            return 0;
        }
        memcpy(m, j->keys, j->nkeys * sizeof *m);
        if (j->keys != j->inl) sqlite3_free(j->keys);
        j->keys = m;
        j->capkeys = cap;
    }
    nk = &j->keys[j->nkeys];
    nk->p = k + 1;
    nk->n = (size_t)(ke - k) - 2;
    nk->esc = j->esc;
    if (j->nkeys - base < TC_JKEYS_SCAN)
        for (i = base; i < j->nkeys; i++)
            if (key_same(&j->keys[i], nk)) return jp_dup(j, &j->keys[i], nk);
    j->nkeys++;
    return 1;
}

/* At the end of the object whose keys are keys[base..]: those past the first
 * TC_JKEYS_SCAN were not compared yet; sorted, any two alike are neighbours.
 * 0 (refused) for a duplicate. Its keys are dropped either way. */
static int jp_keys_end(jp *j, size_t base) {
    size_t n = j->nkeys - base, i;
    j->nkeys = base;
    if (n <= TC_JKEYS_SCAN) return 1;
    qsort(j->keys + base, n, sizeof *j->keys, key_qcmp);
    for (i = base + 1; i < base + n; i++)
        if (key_cmp(&j->keys[i - 1], &j->keys[i]) == 0) return jp_dup(j, &j->keys[i - 1], &j->keys[i]);
    return 1;
}

/* Explaining a duplicate: the container being left held it at member
 * (key k..ke) or element i; kept as one step of its path. */
static void jp_step(jp *j, int keyed, const unsigned char *k, const unsigned char *ke, size_t i) {
    if (!j->path || !j->dup || j->npath == j->cappath) return;
    j->path[j->npath].key = keyed ? k : NULL;
    j->path[j->npath].n = keyed ? (size_t)(ke - k) : i;
    j->npath++;
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
    size_t outerlen = j->keylen, i, base = j->nkeys;
    int dups = keyed && j->dups;
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
            j->esc = 0;
            if (j->p >= j->end || *j->p != '"' || !jp_string(j)) return 0;
            ke = j->p;
            if (dups && !jp_key(j, base, k, ke)) return 0;
            j->key = k;
            j->keylen = (size_t)(ke - k);
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') return 0;
            j->p++;
            jp_ws(j);
        }
        v = j->p;
        if (!jp_value(j)) {
            jp_step(j, keyed, k, ke, i);
            return 0;
        }
        if (mfn && mfn(ctx, (const char *)k, (size_t)(ke - k), (const char *)v, span_of(v, j->p))) return -1;
        if (efn && efn(ctx, i, (const char *)v, span_of(v, j->p))) return -1;
        if (j->p >= j->end) return 0;
        if (*j->p == ',') {
            j->p++;
            jp_ws(j);
            continue;
        }
        if (*j->p != close) return 0;
        if (dups && !jp_keys_end(j, base)) return 0;
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

static int jp_valid(jp *j, const char *text, size_t n, char *top, int dups) {
    int ok;
    jp_init(j, text, n);
    j->dups = dups;
    jp_ws(j);
    if (top) *top = j->p < j->end ? (char)*j->p : 0;
    ok = jp_value(j) && j->p == j->end;
    jp_done(j);
    return ok;
}

int tc_json_valid(const char *text, size_t n, char *top) {
    jp j;
    return jp_valid(&j, text, n, top, 1);
}

int tc_json_valid_syntax(const char *text, size_t n) {
    jp j;
    return jp_valid(&j, text, n, NULL, 0);
}

/* The tail of a message saying why jp_valid refused j's text ("" for its
 * syntax itself), to buf. */
static const char *jp_why(const jp *j, char *buf, size_t cap) {
    static const char range[] = "a number beyond the range of a double (as 1e999 is: JSON readers "
                                "turn it into infinity or refuse it)";
    static const char lone[] = "a lone surrogate escape, half of a UTF-16 pair such as \\ud800 without "
                               "its other half: no UTF-8 text holds it, and JSON readers disagree on it";
    buf[0] = 0;
    if (j->too_deep)
        snprintf(buf, cap, " (it nests arrays and objects more than 1000 deep, tocsin's limit)");
    else if (j->huge && j->hkey)
        snprintf(buf, cap, " (the value of %.*s%s holds %s)", (int)(j->hkeylen > 80 ? 76 : j->hkeylen),
                 (const char *)j->hkey, j->hkeylen > 80 ? "...\"" : "", range);
    else if (j->huge)
        snprintf(buf, cap, " (it holds %s)", range);
    else if (j->lone)
        snprintf(buf, cap, " (%s%.*s%s holds %s)", j->hkey ? "the value of " : "a string in it",
                 j->hkey ? (int)(j->hkeylen > 80 ? 76 : j->hkeylen) : 0, j->hkey ? (const char *)j->hkey : "",
                 j->hkey && j->hkeylen > 80 ? "...\"" : "", lone);
    return buf;
}

/* Why tc_json_valid_syntax refuses text[0..n), as the tail of an error
 * message written to buf (an error path: it validates again to say why); ""
 * for its syntax itself. A huge number inside an object is named by its
 * member's key (the innermost one), so that a refused option says which. */
const char *tc_json_why(const char *text, size_t n, char *buf, size_t cap) {
    jp j;
    buf[0] = 0;
    if (jp_valid(&j, text, n, NULL, 0)) return buf;
    return jp_why(&j, buf, cap);
}

/* A key as written, quoted, cut at 60 bytes (not inside a UTF-8 character). */
static void put_key(tc_buf *b, const unsigned char *k, size_t n) {
    size_t m = n;
    if (m > 60)
        for (m = 60; m > 0 && (k[m] & 0xc0) == 0x80; m--) {
        }
    tc_buf_puts(b, "\"");
    tc_buf_put(b, (const char *)k, m);
    tc_buf_puts(b, m < n ? "...\"" : "\"");
}

int tc_json_refusal(const char *text, size_t n, char *buf, size_t cap) {
    jp j;
    tc_buf b = {0};
    size_t s;
    int ok;
    jp_init(&j, text, n);
    j.dups = 1;
    j.cappath = TC_JSON_MAX_DEPTH + TC_JSON_WRAPPER_LEVELS + 1;
    j.path = sqlite3_malloc64(j.cappath * sizeof *j.path); /* NULL: no path said */
    jp_ws(&j);
    ok = jp_value(&j) && j.p == j.end;
    jp_done(&j);
    buf[0] = 0;
    if (ok || j.oom) { /* valid now: it was refused for want of memory */
        sqlite3_free(j.path);
        return TC_JSON_NOMEM;
    }
    if (!j.dup || !tc_json_valid_syntax(text, n)) { /* a duplicate is said only of JSON */
        sqlite3_free(j.path);
        tc_json_why(text, n, buf, cap);
        return TC_JSON_BAD;
    }
    tc_buf_puts(&b, "duplicate key ");
    put_key(&b, j.dkey.p, j.dkey.n);
    tc_buf_puts(&b, " in an object");
    if (j.npath) {
        tc_buf_puts(&b, " at $");
        for (s = j.npath; s-- > 0;) {
            const jstep *st = &j.path[s];
            if (b.len > 160) {
                tc_buf_puts(&b, "...");
                break;
            }
            if (st->key) { /* .name, or ."name" unless it is letters, digits and _ */
                const unsigned char *k = st->key + 1;
                size_t kn = st->n - 2, c;
                for (c = 0; c < kn && (k[c] == '_' || (k[c] >= '0' && k[c] <= '9') ||
                                       ((k[c] | 0x20) >= 'a' && (k[c] | 0x20) <= 'z'));
                     c++) {
                }
                tc_buf_puts(&b, ".");
                if (kn && c == kn)
                    tc_buf_put(&b, (const char *)k, kn);
                else
                    put_key(&b, k, kn);
            } else {
                tc_buf_puts(&b, "[");
                tc_buf_i64(&b, (int64_t)st->n);
                tc_buf_puts(&b, "]");
            }
        }
    }
    if (j.dkey.n != j.dkey2.n || memcmp(j.dkey.p, j.dkey2.p, j.dkey.n) != 0) {
        tc_buf_puts(&b, " (written ");
        put_key(&b, j.dkey2.p, j.dkey2.n);
        tc_buf_puts(&b, " the second time)");
    }
    tc_buf_puts(&b, ": JSON readers disagree on which of its values counts (SQLite's JSON functions read the "
                    "first, Python, Node, Ruby and Go the last)");
    sqlite3_free(j.path);
    /* (out of memory for the message: the refusal stands, said shorter) */
    if (b.p && !b.oom) tc_cut_utf8(b.p, cap - 1); /* (on a character's boundary) */
    snprintf(buf, cap, "%s", b.p && !b.oom ? b.p : "duplicate key in an object");
    sqlite3_free(b.p);
    return TC_JSON_DUP;
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
