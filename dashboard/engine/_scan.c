/* attnscope's event scanner: a JSON array of trace events -> columns, without a Python object
 * per event.
 *
 * scan(buffer) reads `[ {event}, {event}, ... ]` and returns the columns the loader builds from
 * msgspec's typed structs (dashboard/engine/load.py: _Event, _Args, _complete_frame,
 * _flow_frame), or None whenever the input holds anything it does not read exactly as that path
 * does: then the caller takes the msgspec path, which gives the answer (or the error) as before.
 * So it only has to be exact on what it accepts; it refuses (returns None):
 *   - JSON that is not valid (strict grammar: numbers, literals, escapes, control characters);
 *   - an element of the array that is not an object; ph that is not a string; cat that is neither
 *     a string nor null; a boolean, object or array where a scalar is typed; a float in args.kind;
 *     args.direction (read where args.kind is absent or null) that is a boolean, object or array;
 *     args that is neither an object, an array nor null (each would fail msgspec's validation);
 *   - a key written with an escape, a key given twice in one object, nesting deeper than 64;
 *   - a lone UTF-16 surrogate in an escape; text that is not UTF-8 in a string it keeps (found
 *     when its Python str is made, strictly).
 * Memory events (ph "i" or "I" named "[memory]", what profile_memory=True writes: one per allocation
 * and free) are read into columns of their own (M_*): pid, tid, ts, and the args Device Type,
 * Device Id, Bytes, Total Allocated, Total Reserved and Addr. The loader types those args as raw
 * JSON (any value, never a validation failure): an int64 is kept, null or absent is null, and
 * anything else is an odd entry that Python reads.
 * Texts are interned per column: each distinct text is one entry, and a column is a uint32 code
 * per row (0 = null) into its table's list [None, text1, text2, ...]. Integers are int64 with a
 * validity byte; ts and dur are parsed to exact int64 ns from their digits, as load._ns does.
 * Each column is handed over as an Arrow array (a pair of capsules, see arrow_pair) that owns the
 * scan's buffer: polars takes it as a Series without a copy.
 * Values the loader reads through Python (a numeric string in an int field, a float, an integer
 * beyond int64, a quoted or exponent timestamp, "-0" as a text) are returned as "odd" entries
 * (column, row, raw JSON bytes) for the caller to read with the same Python functions as before.
 * The scan itself holds no Python object and runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define HAVE_MMAP 1
#endif

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return 0; /* (src may be NULL then, which memcpy must not see) */
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ intern tables */

typedef struct {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t mask;
    Buf offsets;     /* size_t per entry: start in arena */
    Buf lengths;     /* uint32 per entry */
    Buf hashes;      /* uint64 per entry */
    Buf arena;
    uint32_t count;
} Table;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    memset(t, 0, sizeof(*t));
    t->mask = 1023;
    t->slots = calloc(t->mask + 1, sizeof(uint32_t));
    return t->slots ? 0 : -1;
}

static void table_free(Table *t) {
    free(t->slots);
    buf_free(&t->offsets);
    buf_free(&t->lengths);
    buf_free(&t->hashes);
    buf_free(&t->arena);
}

static int table_grow(Table *t) {
    size_t mask = t->mask * 2 + 1;
    uint32_t *slots = calloc(mask + 1, sizeof(uint32_t));
    if (!slots) return -1;
    const uint64_t *hashes = (const uint64_t *)t->hashes.data;
    for (uint32_t e = 0; e < t->count; e++) {
        size_t i = hashes[e] & mask;
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = e + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

/* The code (entry + 1) of the text p[0:n], added if new; 0 on allocation failure. */
static uint32_t table_code(Table *t, const char *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    size_t i = h & t->mask;
    const uint64_t *hashes = (const uint64_t *)t->hashes.data;
    const size_t *offsets = (const size_t *)t->offsets.data;
    const uint32_t *lengths = (const uint32_t *)t->lengths.data;
    while (t->slots[i]) {
        uint32_t e = t->slots[i] - 1;
        if (hashes[e] == h && lengths[e] == n && memcmp(t->arena.data + offsets[e], p, n) == 0) return e + 1;
        i = (i + 1) & t->mask;
    }
    if (n > UINT32_MAX || t->count >= UINT32_MAX - 1) return 0;
    size_t off = t->arena.len;
    uint32_t len = (uint32_t)n;
    if (buf_put(&t->arena, p, n) || buf_put(&t->offsets, &off, sizeof off) || buf_put(&t->lengths, &len, sizeof len) ||
        buf_put(&t->hashes, &h, sizeof h))
        return 0;
    t->slots[i] = ++t->count;
    if ((size_t)t->count * 2 > t->mask && table_grow(t)) return 0;
    return t->count;
}

/* ------------------------------------------------------------------ values */

enum { V_ABSENT, V_NULL, V_STR, V_INT, V_NUM, V_BOOL, V_OBJ, V_ARR };

typedef struct {
    int kind;
    const char *start, *end; /* the raw JSON value */
    int esc;                 /* V_STR: holds a backslash escape */
    int fits;                /* V_INT: in int64 */
    int64_t i;               /* V_INT: the value when it fits */
    /* numbers (V_INT, V_NUM): read once, for put_time */
    int neg, digits;         /* a minus sign; digits of the whole part */
    int64_t whole;           /* the whole part's magnitude, when digits <= 18 */
    int frac3;               /* the first three fraction digits as an integer (000-999; 0 without a fraction) */
    int has_exp;             /* an exponent */
} Val;

typedef struct {
    const char *p, *end;
    int depth;
    Buf scratch; /* an escaped string, decoded */
} Cur;

#define MAX_DEPTH 64
#define FAIL (-1)

static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A string at c->p (the opening quote). Sets v; checks every escape. */
static int parse_string(Cur *c, Val *v) {
    const char *s = c->p++;
    int esc = 0;
    while (c->p < c->end) {
#ifdef __SSE2__
        /* to the next quote, backslash or control character, 16 bytes at a time */
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1F);
        while (c->end - c->p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)c->p);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, slash)),
                                       _mm_cmpeq_epi8(_mm_max_epu8(x, ctl), ctl));
            int mask = _mm_movemask_epi8(hit);
            if (mask) {
                c->p += __builtin_ctz((unsigned)mask);
                break;
            }
            c->p += 16;
        }
        if (c->p >= c->end) break;
#endif
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            v->kind = V_STR;
            v->start = s;
            v->end = c->p;
            v->esc = esc;
            return 0;
        }
        if (ch < 0x20) return FAIL;
        if (ch == '\\') {
            esc = 1;
            if (c->p + 1 >= c->end) return FAIL;
            char e = c->p[1];
            if (e == 'u') {
                if (c->end - c->p < 6) return FAIL;
                int u = read_hex4(c->p + 2);
                if (u < 0) return FAIL;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low one */
                    if (c->end - c->p < 12 || c->p[6] != '\\' || c->p[7] != 'u') return FAIL;
                    int lo = read_hex4(c->p + 8);
                    if (lo < 0xDC00 || lo > 0xDFFF) return FAIL;
                    c->p += 12;
                    continue;
                }
                if (u >= 0xDC00 && u <= 0xDFFF) return FAIL;
                c->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return FAIL;
            c->p += 2;
            continue;
        }
        c->p++;
    }
    return FAIL;
}

static void put_utf8(Buf *b, uint32_t u, int *err) {
    char out[4];
    size_t n;
    if (u < 0x80) {
        out[0] = (char)u;
        n = 1;
    } else if (u < 0x800) {
        out[0] = (char)(0xC0 | (u >> 6));
        out[1] = (char)(0x80 | (u & 0x3F));
        n = 2;
    } else if (u < 0x10000) {
        out[0] = (char)(0xE0 | (u >> 12));
        out[1] = (char)(0x80 | ((u >> 6) & 0x3F));
        out[2] = (char)(0x80 | (u & 0x3F));
        n = 3;
    } else {
        out[0] = (char)(0xF0 | (u >> 18));
        out[1] = (char)(0x80 | ((u >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((u >> 6) & 0x3F));
        out[3] = (char)(0x80 | (u & 0x3F));
        n = 4;
    }
    if (buf_put(b, out, n)) *err = 1;
}

/* The text of a string value (checked by parse_string), unescaped into c->scratch if need be. */
static int string_text(Cur *c, const Val *v, const char **p, size_t *n) {
    const char *s = v->start + 1, *e = v->end - 1;
    if (!v->esc) {
        *p = s;
        *n = (size_t)(e - s);
        return 0;
    }
    Buf *b = &c->scratch;
    b->len = 0;
    int err = 0;
    while (s < e && !err) {
        const char *q = memchr(s, '\\', (size_t)(e - s));
        if (!q) q = e;
        if (buf_put(b, s, (size_t)(q - s))) return FAIL;
        s = q;
        if (s >= e) break;
        char x = s[1];
        if (x == 'u') {
            uint32_t u = (uint32_t)read_hex4(s + 2);
            s += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {
                uint32_t lo = (uint32_t)read_hex4(s + 2);
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            put_utf8(b, u, &err);
            continue;
        }
        char out = x == 'b' ? '\b' : x == 'f' ? '\f' : x == 'n' ? '\n' : x == 'r' ? '\r' : x == 't' ? '\t' : x;
        if (buf_put(b, &out, 1)) return FAIL;
        s += 2;
    }
    if (err) return FAIL;
    *p = b->data ? b->data : "";
    *n = b->len;
    return 0;
}

static inline int is_delim(const Cur *c) {
    if (c->p >= c->end) return 1;
    char ch = *c->p;
    return ch == ',' || ch == '}' || ch == ']' || ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
}

static int parse_number(Cur *c, Val *v) {
    const char *s = c->p;
    int neg = 0, is_float = 0, digits = 0, frac3 = 0, has_exp = 0;
    uint64_t whole = 0; /* accumulated in the one pass over the digits (wrapping past 19): exact up to 18 of them */
    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    if (c->p >= c->end) return FAIL;
    if (*c->p == '0') {
        c->p++;
        digits = 1;
    } else if (*c->p >= '1' && *c->p <= '9') {
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            whole = whole * 10 + (*c->p++ - '0');
            digits++;
        }
    } else {
        return FAIL;
    }
    const char *int_end = c->p;
    if (c->p < c->end && *c->p == '.') {
        is_float = 1;
        c->p++;
        const char *d = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (c->p - d < 3) frac3 = frac3 * 10 + (*c->p - '0');
            c->p++;
        }
        if (c->p == d) return FAIL;
        for (ptrdiff_t k = c->p - d; k < 3; k++) frac3 *= 10;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        is_float = has_exp = 1;
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        const char *d = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
        if (c->p == d) return FAIL;
    }
    if (!is_delim(c)) return FAIL;
    v->start = s;
    v->end = c->p;
    v->neg = neg;
    v->digits = digits;
    v->whole = digits <= 18 ? (int64_t)whole : 0;
    v->frac3 = frac3;
    v->has_exp = has_exp;
    if (is_float) {
        v->kind = V_NUM;
        return 0;
    }
    v->kind = V_INT;
    v->fits = 1;
    if (digits <= 18) {
        v->i = neg ? -(int64_t)whole : (int64_t)whole;
        return 0;
    }
    /* 19 digits or more: accumulate as a negative number so that INT64_MIN fits */
    int64_t acc = 0;
    for (const char *d = s + neg; d < int_end; d++) {
        int digit = *d - '0';
        if (acc < (INT64_MIN + digit) / 10) {
            v->fits = 0;
            break;
        }
        acc = acc * 10 - digit;
    }
    if (v->fits && !neg) {
        if (acc == INT64_MIN) v->fits = 0;
        else acc = -acc;
    }
    v->i = acc;
    return 0;
}

static int literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return FAIL;
    c->p += n;
    return is_delim(c) ? 0 : FAIL;
}

static int skip_value(Cur *c, Val *v);

/* An object or array at c->p, checked and skipped. */
static int skip_container(Cur *c, Val *v) {
    char open = *c->p, close = open == '{' ? '}' : ']';
    const char *s = c->p++;
    if (++c->depth > MAX_DEPTH) return FAIL;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
    } else {
        for (;;) {
            Val item;
            if (open == '{') {
                if (c->p >= c->end || *c->p != '"' || parse_string(c, &item)) return FAIL;
                skip_ws(c);
                if (c->p >= c->end || *c->p != ':') return FAIL;
                c->p++;
                skip_ws(c);
            }
            if (skip_value(c, &item)) return FAIL;
            skip_ws(c);
            if (c->p >= c->end) return FAIL;
            if (*c->p == ',') {
                c->p++;
                skip_ws(c);
                continue;
            }
            if (*c->p == close) {
                c->p++;
                break;
            }
            return FAIL;
        }
    }
    c->depth--;
    v->kind = open == '{' ? V_OBJ : V_ARR;
    v->start = s;
    v->end = c->p;
    return 0;
}

/* Any JSON value at c->p, checked; containers skipped. */
static int skip_value(Cur *c, Val *v) {
    if (c->p >= c->end) return FAIL;
    const char *s = c->p;
    switch (*c->p) {
    case '"':
        return parse_string(c, v);
    case '{':
    case '[':
        return skip_container(c, v);
    case 't':
        if (literal(c, "true", 4)) return FAIL;
        v->kind = V_BOOL;
        break;
    case 'f':
        if (literal(c, "false", 5)) return FAIL;
        v->kind = V_BOOL;
        break;
    case 'n':
        if (literal(c, "null", 4)) return FAIL;
        v->kind = V_NULL;
        break;
    default:
        return parse_number(c, v);
    }
    v->start = s;
    v->end = c->p;
    return 0;
}

/* ------------------------------------------------------------------ columns */

enum { T_CAT, T_NAME, T_PID, T_TID, T_KIND, T_DIMS, T_TYPES, T_CONC, T_ID, T_PH, N_TABLES };

/* Columns of complete events (X_*), of flow events (F_*) and of memory events (M_*); the odd
 * entries name them. */
enum {
    X_CAT, X_NAME, X_PID, X_TID, X_TS, X_DUR, X_STREAM, X_DEVICE, X_CORR, X_EXT, X_BYTES, X_KIND, X_DIMS, X_TYPES,
    X_CONC, F_ID, F_CAT, F_NAME, F_PH, F_PID, F_TID, F_TS,
    M_PID, M_TID, M_TS, M_DEVTYPE, M_DEVID, M_BYTES, M_ALLOC, M_RESERVED, M_ADDR, N_COLS
};

static const int COL_TABLE[N_COLS] = {
    T_CAT, T_NAME, T_PID, T_TID, -1, -1, -1, -1, -1, -1, -1, T_KIND, T_DIMS, T_TYPES, T_CONC,
    T_ID, T_CAT, T_NAME, T_PH, T_PID, T_TID, -1,
    T_PID, T_TID, -1, -1, -1, -1, -1, -1, -1,
};
typedef struct {
    Buf data;  /* uint32 codes, or int64 values */
    Buf valid; /* int columns: one byte per row */
} Col;

typedef struct {
    Table tables[N_TABLES];
    Col cols[N_COLS];
    Buf odd_col, odd_row, odd_start, odd_len; /* int32, int64, size_t, size_t per odd value */
    const char *base;
    int64_t seen, nx, nf, nm;
    const char *last_ts_start, *last_ts_end;
} Out;

static int add_odd(Out *o, int col, int64_t row, const Val *v) {
    int32_t c = col;
    size_t start = (size_t)(v->start - o->base), len = (size_t)(v->end - v->start);
    return buf_put(&o->odd_col, &c, sizeof c) || buf_put(&o->odd_row, &row, sizeof row) ||
           buf_put(&o->odd_start, &start, sizeof start) || buf_put(&o->odd_len, &len, sizeof len);
}

static int put_code(Out *o, int col, uint32_t code) { return buf_put(&o->cols[col].data, &code, sizeof code); }

/* A text column: a string as decoded, an integer as its digits (the loader's str(int) or its
 * Int64 -> String cast give the same), null; a float, "-0" read through Python (odd). */
static int put_text(Out *o, Cur *c, int col, int64_t row, const Val *v) {
    Table *t = &o->tables[COL_TABLE[col]];
    const char *p;
    size_t n;
    uint32_t code = 0;
    switch (v->kind) {
    case V_ABSENT:
    case V_NULL:
        return put_code(o, col, 0);
    case V_STR:
        if (string_text(c, v, &p, &n)) return FAIL;
        code = table_code(t, p, n);
        return code ? put_code(o, col, code) : FAIL;
    case V_INT:
        if (v->end - v->start == 2 && v->start[0] == '-' && v->start[1] == '0') break;
        code = table_code(t, v->start, (size_t)(v->end - v->start));
        return code ? put_code(o, col, code) : FAIL;
    case V_NUM:
        break;
    default:
        return FAIL; /* ruled out while parsing */
    }
    return put_code(o, col, 0) || add_odd(o, col, row, v);
}

/* A raw JSON text column (Input Dims and the like): the value's bytes as written; null if absent. */
static int put_raw(Out *o, int col, const Val *v) {
    if (v->kind == V_ABSENT) return put_code(o, col, 0);
    uint32_t code = table_code(&o->tables[COL_TABLE[col]], v->start, (size_t)(v->end - v->start));
    return code ? put_code(o, col, code) : FAIL;
}

static int put_int(Out *o, int col, int64_t value, char valid) {
    return buf_put(&o->cols[col].data, &value, sizeof value) || buf_put(&o->cols[col].valid, &valid, 1);
}

/* An int column: an int64 as it is; null; anything else read through Python (odd). */
static int put_intval(Out *o, int col, int64_t row, const Val *v) {
    if (v->kind == V_ABSENT || v->kind == V_NULL) return put_int(o, col, 0, 0);
    if (v->kind == V_INT && v->fits) return put_int(o, col, v->i, 1);
    return put_int(o, col, 0, 0) || add_odd(o, col, row, v);
}

/* ts or dur: µs as a JSON number -> exact ns from the digits, like load._ns (the whole part
 * times 1000, plus the first three fraction digits, signed like the text). Anything else
 * (absent: null; a string, an exponent, a whole part whose ns pass int64) is read through Python. */
#define MAX_WHOLE_US ((INT64_MAX - 999) / 1000)
static int put_time(Out *o, int col, int64_t row, const Val *v) {
    if (v->kind == V_ABSENT) return put_int(o, col, 0, col == X_DUR);
    if ((v->kind == V_INT || v->kind == V_NUM) && !v->has_exp && v->digits <= 18 && v->whole <= MAX_WHOLE_US) {
        int64_t ns = v->whole * 1000 + v->frac3;
        return put_int(o, col, v->neg ? -ns : ns, 1);
    }
    return put_int(o, col, 0, 0) || add_odd(o, col, row, v);
}

/* ------------------------------------------------------------------ events */

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, N_EVENT_KEYS };
/* A_DIMS and after take any value (raw JSON on the msgspec path): the memory events' args among them. */
enum {
    A_CORR, A_EXT, A_EXT_LEGACY, A_STREAM, A_DEVICE, A_BYTES, A_SIZE, A_KIND, A_DIMS, A_TYPES, A_CONC, A_DIRECTION,
    A_MEM_DEVTYPE, A_MEM_DEVID, A_MEM_BYTES, A_MEM_ALLOC, A_MEM_RESERVED, A_MEM_ADDR, N_ARG_KEYS
};

static int event_key(const char *p, size_t n) {
    switch (n) {
    case 2:
        if (!memcmp(p, "ph", 2)) return K_PH;
        if (!memcmp(p, "ts", 2)) return K_TS;
        if (!memcmp(p, "id", 2)) return K_ID;
        break;
    case 3:
        if (!memcmp(p, "cat", 3)) return K_CAT;
        if (!memcmp(p, "pid", 3)) return K_PID;
        if (!memcmp(p, "tid", 3)) return K_TID;
        if (!memcmp(p, "dur", 3)) return K_DUR;
        break;
    case 4:
        if (!memcmp(p, "name", 4)) return K_NAME;
        if (!memcmp(p, "args", 4)) return K_ARGS;
        break;
    }
    return -1;
}

static int arg_key(const char *p, size_t n) {
    switch (n) {
    case 4:
        if (!memcmp(p, "kind", 4)) return A_KIND;
        if (!memcmp(p, "size", 4)) return A_SIZE;
        if (!memcmp(p, "Addr", 4)) return A_MEM_ADDR;
        break;
    case 5:
        if (!memcmp(p, "bytes", 5)) return A_BYTES;
        if (!memcmp(p, "Bytes", 5)) return A_MEM_BYTES;
        break;
    case 9:
        if (!memcmp(p, "Device Id", 9)) return A_MEM_DEVID;
        if (!memcmp(p, "direction", 9)) return A_DIRECTION;
        break;
    case 6:
        if (!memcmp(p, "stream", 6)) return A_STREAM;
        if (!memcmp(p, "device", 6)) return A_DEVICE;
        break;
    case 10:
        if (!memcmp(p, "Input Dims", 10)) return A_DIMS;
        if (!memcmp(p, "Input type", 10)) return A_TYPES;
        break;
    case 11:
        if (!memcmp(p, "correlation", 11)) return A_CORR;
        if (!memcmp(p, "External id", 11)) return A_EXT;
        if (!memcmp(p, "external id", 11)) return A_EXT_LEGACY;
        if (!memcmp(p, "Device Type", 11)) return A_MEM_DEVTYPE;
        break;
    case 14:
        if (!memcmp(p, "Total Reserved", 14)) return A_MEM_RESERVED;
        break;
    case 15:
        if (!memcmp(p, "Concrete Inputs", 15)) return A_CONC;
        if (!memcmp(p, "Total Allocated", 15)) return A_MEM_ALLOC;
        break;
    }
    return -1;
}

/* An object's members, one at a time: the key's index in `keys` (-1 for another key) and its
 * value, parsed only as far as typed fields need. Returns 1 with *index set, 0 at the end. */
static int next_member(Cur *c, int *first, int (*keys)(const char *, size_t), int *index, Val *v) {
    skip_ws(c);
    if (c->p >= c->end) return FAIL;
    if (*first) {
        *first = 0;
        if (*c->p == '}') {
            c->p++;
            return 0;
        }
    } else {
        if (*c->p == '}') {
            c->p++;
            return 0;
        }
        if (*c->p != ',') return FAIL;
        c->p++;
        skip_ws(c);
    }
    Val key;
    if (c->p >= c->end || *c->p != '"' || parse_string(c, &key) || key.esc) return FAIL;
    *index = keys(key.start + 1, (size_t)(key.end - key.start - 2));
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return FAIL;
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return FAIL;
    if (*c->p == '{' || *c->p == '[') {
        if (*index >= 0 && keys == event_key && *index == K_ARGS && *c->p == '{') {
            v->kind = V_OBJ; /* read by the caller */
            v->start = c->p;
            return 1;
        }
        if (skip_value(c, v)) return FAIL;
        return 1;
    }
    if (skip_value(c, v)) return FAIL;
    return 1;
}

/* Scalars typed Union[int, float, str, None] in the loader: a bool, object or array fails msgspec's validation. */
static inline int scalar_ok(const Val *v) { return v->kind != V_BOOL && v->kind != V_OBJ && v->kind != V_ARR; }

static int parse_args(Cur *c, Val *args) {
    c->p++; /* the brace */
    if (++c->depth > MAX_DEPTH) return FAIL;
    int first = 1, index, got;
    Val v;
    while ((got = next_member(c, &first, arg_key, &index, &v)) == 1) {
        if (index < 0) continue;
        if (args[index].kind != V_ABSENT) return FAIL; /* a key twice */
        if (index == A_KIND ? (v.kind != V_STR && v.kind != V_INT && v.kind != V_NULL)
                            : (index < A_DIMS && !scalar_ok(&v)))
            return FAIL;
        args[index] = v;
    }
    c->depth--;
    return got;
}

/* Which kind of event its ph makes it: 'X', 'F' (a flow: s, f or t), 'I' (an instant: i or I) or 0. */
static int event_ph(Cur *c, const Val *ph) {
    if (ph->kind == V_ABSENT) return 0;
    const char *p;
    size_t n;
    if (string_text(c, ph, &p, &n)) return -1;
    if (n != 1) return 0;
    if (p[0] == 'X') return 'X';
    if (p[0] == 's' || p[0] == 'f' || p[0] == 't') return 'F';
    if (p[0] == 'i' || p[0] == 'I') return 'I';
    return 0;
}

/* True when an instant event's name is the string "[memory]" (as decoded). */
static int is_memory(Cur *c, const Val *name, int *err) {
    const char *p;
    size_t n;
    if (name->kind != V_STR || name->end - name->start < 10) return 0;
    if (string_text(c, name, &p, &n)) {
        *err = 1;
        return 0;
    }
    return n == 8 && !memcmp(p, "[memory]", 8);
}

static int parse_event(Cur *c, Out *o) {
    Val ev[N_EVENT_KEYS], args[N_ARG_KEYS];
    for (int k = 0; k < N_EVENT_KEYS; k++) ev[k].kind = V_ABSENT;
    for (int k = 0; k < N_ARG_KEYS; k++) args[k].kind = V_ABSENT;
    if (c->p >= c->end || *c->p != '{') return FAIL;
    c->p++;
    if (++c->depth > MAX_DEPTH) return FAIL;
    int first = 1, index, got;
    Val v;
    while ((got = next_member(c, &first, event_key, &index, &v)) == 1) {
        if (index < 0) continue;
        if (ev[index].kind != V_ABSENT) return FAIL;
        switch (index) {
        case K_PH:
            if (v.kind != V_STR) return FAIL;
            break;
        case K_CAT:
            if (v.kind != V_STR && v.kind != V_NULL) return FAIL;
            break;
        case K_TS:
        case K_DUR:
            break; /* any value: read as raw text */
        case K_ARGS:
            if (v.kind == V_OBJ) {
                if (parse_args(c, args)) return FAIL;
                v.end = c->p;
            } else if (v.kind != V_ARR && v.kind != V_NULL) {
                return FAIL;
            }
            break;
        default:
            if (!scalar_ok(&v)) return FAIL;
        }
        ev[index] = v;
    }
    if (got) return FAIL;
    c->depth--;
    o->seen++;
    int kind = event_ph(c, &ev[K_PH]);
    if (kind < 0) return FAIL;
    if (kind == 'X') {
        int64_t row = o->nx++;
        const Val *ext = args[A_EXT].kind > V_NULL ? &args[A_EXT] : &args[A_EXT_LEGACY];
        const Val *bytes = args[A_BYTES].kind > V_NULL ? &args[A_BYTES] : &args[A_SIZE];
        /* kind_arg: args.kind, else args.direction (typed Any on the msgspec path: a boolean, object
         * or array there is str() of what msgspec decodes, left to it) */
        const Val *kind_arg = args[A_KIND].kind > V_NULL ? &args[A_KIND] : &args[A_DIRECTION];
        if (!scalar_ok(kind_arg)) return FAIL;
        if (put_text(o, c, X_CAT, row, &ev[K_CAT]) || put_text(o, c, X_NAME, row, &ev[K_NAME]) ||
            put_text(o, c, X_PID, row, &ev[K_PID]) || put_text(o, c, X_TID, row, &ev[K_TID]) ||
            put_time(o, X_TS, row, &ev[K_TS]) || put_time(o, X_DUR, row, &ev[K_DUR]) ||
            put_intval(o, X_STREAM, row, &args[A_STREAM]) || put_intval(o, X_DEVICE, row, &args[A_DEVICE]) ||
            put_intval(o, X_CORR, row, &args[A_CORR]) || put_intval(o, X_EXT, row, ext) ||
            put_intval(o, X_BYTES, row, bytes) || put_text(o, c, X_KIND, row, kind_arg) ||
            put_raw(o, X_DIMS, &args[A_DIMS]) || put_raw(o, X_TYPES, &args[A_TYPES]) || put_raw(o, X_CONC, &args[A_CONC]))
            return FAIL;
        o->last_ts_start = ev[K_TS].kind == V_ABSENT ? NULL : ev[K_TS].start;
        o->last_ts_end = ev[K_TS].kind == V_ABSENT ? NULL : ev[K_TS].end;
    } else if (kind == 'I' && ev[K_TS].kind != V_ABSENT) {
        int err = 0;
        if (!is_memory(c, &ev[K_NAME], &err)) return err ? FAIL : 0;
        int64_t row = o->nm++;
        if (put_text(o, c, M_PID, row, &ev[K_PID]) || put_text(o, c, M_TID, row, &ev[K_TID]) ||
            put_time(o, M_TS, row, &ev[K_TS]) || put_intval(o, M_DEVTYPE, row, &args[A_MEM_DEVTYPE]) ||
            put_intval(o, M_DEVID, row, &args[A_MEM_DEVID]) || put_intval(o, M_BYTES, row, &args[A_MEM_BYTES]) ||
            put_intval(o, M_ALLOC, row, &args[A_MEM_ALLOC]) || put_intval(o, M_RESERVED, row, &args[A_MEM_RESERVED]) ||
            put_intval(o, M_ADDR, row, &args[A_MEM_ADDR]))
            return FAIL;
    } else if (kind == 'F' && ev[K_TS].kind != V_ABSENT) {
        int64_t row = o->nf++;
        if (put_text(o, c, F_ID, row, &ev[K_ID]) || put_text(o, c, F_CAT, row, &ev[K_CAT]) ||
            put_text(o, c, F_NAME, row, &ev[K_NAME]) || put_text(o, c, F_PH, row, &ev[K_PH]) ||
            put_text(o, c, F_PID, row, &ev[K_PID]) || put_text(o, c, F_TID, row, &ev[K_TID]) ||
            put_time(o, F_TS, row, &ev[K_TS]))
            return FAIL;
    }
    return 0;
}

/* `[ event, ... ]` at c->p. */
static int scan_events(Cur *c, Out *o) {
    if (c->p >= c->end || *c->p != '[') return FAIL;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    for (;;) {
        if (parse_event(c, o)) return FAIL;
        skip_ws(c);
        if (c->p >= c->end) return FAIL;
        if (*c->p == ',') {
            c->p++;
            skip_ws(c);
            continue;
        }
        if (*c->p == ']') {
            c->p++;
            return 0;
        }
        return FAIL;
    }
}

/* The whole input is one array of events. */
static int scan_array(Cur *c, Out *o) {
    skip_ws(c);
    if (scan_events(c, o)) return FAIL;
    skip_ws(c);
    return c->p == c->end ? 0 : FAIL;
}

/* The whole input is one object with a traceEvents array: the events are scanned, and each other
 * member's key and value are recorded (offsets: key start, key end, value start, value end). */
static int scan_object(Cur *c, Out *o, Buf *members) {
    int found = 0;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{') return FAIL;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') return FAIL; /* no traceEvents: the msgspec path says so */
    for (;;) {
        Val key, v;
        if (c->p >= c->end || *c->p != '"' || parse_string(c, &key) || key.esc) return FAIL;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return FAIL;
        c->p++;
        skip_ws(c);
        if (key.end - key.start == 13 && !memcmp(key.start + 1, "traceEvents", 11)) {
            if (found || scan_events(c, o)) return FAIL; /* twice: msgspec keeps the last; not read here */
            found = 1;
        } else {
            if (skip_value(c, &v)) return FAIL;
            size_t span[4] = {(size_t)(key.start + 1 - o->base), (size_t)(key.end - 1 - o->base), (size_t)(v.start - o->base),
                              (size_t)(v.end - o->base)};
            if (buf_put(members, span, sizeof span)) return FAIL;
        }
        skip_ws(c);
        if (c->p >= c->end) return FAIL;
        if (*c->p == ',') {
            c->p++;
            skip_ws(c);
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            break;
        }
        return FAIL;
    }
    skip_ws(c);
    return found && c->p == c->end ? 0 : FAIL;
}

/* ------------------------------------------------------------------ Arrow columns */

/* The Arrow C data interface's two structs (https://arrow.apache.org/docs/format/CDataInterface.html),
 * as the standard gives them to copy. A column goes to polars as a pair of capsules holding them
 * (the Arrow PyCapsule interface), without numpy and without a Python object per value. */
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* What an array owns: its buffer pointers (validity bitmap or NULL, values), freed by the release
 * without Python, so that a consumer may release it from any thread, without the GIL. Values
 * copied by arrow() of MAPPED_BYTES or more are mapped pages of their own (mapped: their size),
 * returned to the system when released: from malloc, once glibc has raised its mmap threshold
 * past them (it does after each large free), they would land in its heap, which keeps freed
 * memory (a first open of the 910 MB trace peaked 9-26 MB higher). */
typedef struct {
    const void *buffers[2];
    size_t mapped;
} ArrowOwned;

#define MAPPED_BYTES ((size_t)1 << 16)

/* size bytes for arrow()'s copy (*mapped: the mapping's size, or 0 from malloc); NULL on no memory. */
static void *values_alloc(size_t size, size_t *mapped) {
    *mapped = 0;
#ifdef HAVE_MMAP
    if (size >= MAPPED_BYTES) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        *mapped = size;
        return p;
    }
#endif
    return malloc(size ? size : 1);
}

static void values_free(void *p, size_t mapped) {
#ifdef HAVE_MMAP
    if (mapped) {
        munmap(p, mapped);
        return;
    }
#endif
    free(p);
}

static void schema_release(struct ArrowSchema *schema) { schema->release = NULL; }

static void array_release(struct ArrowArray *array) {
    ArrowOwned *own = array->private_data;
    if (own) {
        free((void *)own->buffers[0]);
        values_free((void *)own->buffers[1], own->mapped);
        free(own);
    }
    array->release = NULL;
}

static void schema_capsule_free(PyObject *capsule) {
    struct ArrowSchema *schema = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (schema && schema->release) schema->release(schema);
    free(schema);
}

static void array_capsule_free(PyObject *capsule) {
    struct ArrowArray *array = PyCapsule_GetPointer(capsule, "arrow_array");
    if (array && array->release) array->release(array);
    free(array);
}

/* (schema capsule, array capsule) for n values at `values` (mapped: see ArrowOwned) with the
 * validity bitmap `bits` (NULL: all valid) and `nulls` nulls, in Arrow format `format` (a static
 * string). Takes both buffers (freed with the array, or here on failure); NULL with an exception
 * set on failure. */
static PyObject *arrow_pair(void *values, size_t mapped, uint8_t *bits, int64_t n, int64_t nulls, const char *format) {
    struct ArrowSchema *schema = calloc(1, sizeof *schema);
    struct ArrowArray *array = calloc(1, sizeof *array);
    ArrowOwned *own = malloc(sizeof *own);
    if (!values) values = malloc(1); /* an empty column: a buffer all the same */
    if (!schema || !array || !own || !values) {
        free(schema);
        free(array);
        free(own);
        if (values) values_free(values, mapped);
        free(bits);
        return PyErr_NoMemory();
    }
    own->buffers[0] = nulls ? bits : NULL;
    own->buffers[1] = values;
    own->mapped = mapped;
    if (!nulls) free(bits);
    *schema = (struct ArrowSchema){format, "", NULL, 2 /* ARROW_FLAG_NULLABLE */, 0, NULL, NULL, schema_release, NULL};
    *array = (struct ArrowArray){n, nulls, 0, 2, 0, own->buffers, NULL, NULL, array_release, own};
    PyObject *s = PyCapsule_New(schema, "arrow_schema", schema_capsule_free);
    if (!s) {
        free(schema);
        array_release(array);
        free(array);
        return NULL;
    }
    PyObject *a = PyCapsule_New(array, "arrow_array", array_capsule_free);
    if (!a) {
        Py_DECREF(s);
        array_release(array);
        free(array);
        return NULL;
    }
    return Py_BuildValue("(NN)", s, a);
}

/* A bitmap of n bytes (bit i set where byte i is not 0) and the count of zero bytes; NULL on no memory. */
static uint8_t *bitmap_of(const uint8_t *ok, int64_t n, int64_t *nulls) {
    uint8_t *bits = calloc(((size_t)n + 63) / 64 * 8 + 8, 1);
    if (!bits) return NULL;
    int64_t missing = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ok[i]) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        else missing++;
    }
    *nulls = missing;
    return bits;
}

/* ------------------------------------------------------------------ Python */

static void out_free(Out *o) {
    for (int t = 0; t < N_TABLES; t++) table_free(&o->tables[t]);
    for (int k = 0; k < N_COLS; k++) {
        buf_free(&o->cols[k].data);
        buf_free(&o->cols[k].valid);
    }
    buf_free(&o->odd_col);
    buf_free(&o->odd_row);
    buf_free(&o->odd_start);
    buf_free(&o->odd_len);
}

/* Column k as an Arrow array (capsule pair) that takes the column's values from the Buf (no copy);
 * an int column's validity bytes become its bitmap. */
static PyObject *column_pair(Out *o, int k) {
    Col *col = &o->cols[k];
    int table = COL_TABLE[k] >= 0;
    int64_t n = (int64_t)(col->data.len / (table ? sizeof(uint32_t) : sizeof(int64_t))), nulls = 0;
    uint8_t *bits = NULL;
    if (!table) {
        bits = bitmap_of((const uint8_t *)col->valid.data, n, &nulls);
        if (!bits) return PyErr_NoMemory();
    }
    void *values = col->data.data;
    if (values && col->data.cap > col->data.len) { /* the growth's slack (up to half) is not kept */
        void *fitted = realloc(values, col->data.len ? col->data.len : 1);
        if (fitted) values = fitted;
    }
    col->data = (Buf){0}; /* the array's now */
    return arrow_pair(values, 0, bits, n, nulls, table ? "I" : "l");
}

/* [None, text, ...] for one table; NULL with no exception set when a text is not UTF-8. */
static PyObject *table_list(const Table *t, int *not_utf8) {
    PyObject *list = PyList_New((Py_ssize_t)t->count + 1);
    if (!list) return NULL;
    Py_INCREF(Py_None);
    PyList_SET_ITEM(list, 0, Py_None);
    const size_t *offsets = (const size_t *)t->offsets.data;
    const uint32_t *lengths = (const uint32_t *)t->lengths.data;
    for (uint32_t e = 0; e < t->count; e++) {
        PyObject *s = PyUnicode_DecodeUTF8(t->arena.data + offsets[e], (Py_ssize_t)lengths[e], "strict");
        if (!s) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                *not_utf8 = 1;
            }
            return NULL;
        }
        PyList_SET_ITEM(list, e + 1, s);
    }
    return list;
}

/* Column k as plain Python objects that pickle: (values bytes, format, valid) for `arrow` to make the
 * Arrow array from in another process; valid is None where every row is valid (a text column's
 * codes, or an int column without nulls), else its bytes, one a row. */
static PyObject *column_plain(Out *o, int k) {
    Col *col = &o->cols[k];
    int table = COL_TABLE[k] >= 0;
    size_t n = col->data.len / (table ? sizeof(uint32_t) : sizeof(int64_t));
    PyObject *values = PyBytes_FromStringAndSize(col->data.data ? col->data.data : "", (Py_ssize_t)col->data.len);
    if (!values) return NULL;
    PyObject *valid;
    if (table || !n || !memchr(col->valid.data, 0, n)) {
        valid = Py_None;
        Py_INCREF(valid);
    } else if (!(valid = PyBytes_FromStringAndSize(col->valid.data, (Py_ssize_t)n))) {
        Py_DECREF(values);
        return NULL;
    }
    return Py_BuildValue("(NsN)", values, table ? "I" : "l", valid);
}

static PyObject *result(Out *o, int *not_utf8, int plain) {
    PyObject *tables = PyTuple_New(N_TABLES), *columns = PyTuple_New(N_COLS);
    PyObject *odd = PyList_New(0), *last = NULL, *res = NULL;
    if (!tables || !columns || !odd) goto done;
    for (int t = 0; t < N_TABLES; t++) {
        PyObject *list = table_list(&o->tables[t], not_utf8);
        if (!list) goto done;
        PyTuple_SET_ITEM(tables, t, list);
    }
    for (int k = 0; k < N_COLS; k++) {
        PyObject *pair = plain ? column_plain(o, k) : column_pair(o, k);
        if (!pair) goto done;
        PyTuple_SET_ITEM(columns, k, pair);
    }
    size_t n_odd = o->odd_col.len / sizeof(int32_t);
    for (size_t k = 0; k < n_odd; k++) {
        int32_t col = ((int32_t *)o->odd_col.data)[k];
        int64_t row = ((int64_t *)o->odd_row.data)[k];
        size_t start = ((size_t *)o->odd_start.data)[k], len = ((size_t *)o->odd_len.data)[k];
        PyObject *item = Py_BuildValue("(iLy#)", (int)col, (long long)row, o->base + start, (Py_ssize_t)len);
        if (!item || PyList_Append(odd, item)) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    last = o->last_ts_start ? PyBytes_FromStringAndSize(o->last_ts_start, o->last_ts_end - o->last_ts_start)
                            : PyBytes_FromStringAndSize("", 0);
    if (!last) goto done;
    res = Py_BuildValue("(LLLOOOOL)", (long long)o->seen, (long long)o->nx, (long long)o->nf, tables, columns, odd, last,
                        (long long)o->nm);
done:
    Py_XDECREF(tables);
    Py_XDECREF(columns);
    Py_XDECREF(odd);
    Py_XDECREF(last);
    return res;
}

/* [(key, value bytes), ...] for the members recorded by scan_object; NULL with no exception set
 * when a key is not UTF-8. */
static PyObject *member_list(const Out *o, const Buf *members, int *not_utf8) {
    size_t n = members->len / (4 * sizeof(size_t));
    const size_t *span = (const size_t *)members->data;
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t k = 0; k < n; k++, span += 4) {
        PyObject *key = PyUnicode_DecodeUTF8(o->base + span[0], (Py_ssize_t)(span[1] - span[0]), "strict");
        if (!key) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                *not_utf8 = 1;
            }
            return NULL;
        }
        PyObject *item = Py_BuildValue("(Ny#)", key, o->base + span[2], (Py_ssize_t)(span[3] - span[2]));
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, item);
    }
    return list;
}

/* scan (document = 0) or scan_document (1). */
static PyObject *run(PyObject *arg, int document, int plain) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    Buf members = {0};
    Cur c = {(const char *)view.buf, (const char *)view.buf + view.len, 0, {0}};
    o.base = (const char *)view.buf;
    int failed = 0;
    for (int t = 0; t < N_TABLES; t++)
        if (table_init(&o.tables[t])) failed = 1;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        failed = document ? scan_object(&c, &o, &members) : scan_array(&c, &o);
        Py_END_ALLOW_THREADS
    }
    PyObject *res = NULL;
    int not_utf8 = 0;
    if (!failed) {
        res = result(&o, &not_utf8, plain);
        if (res && document) {
            PyObject *list = member_list(&o, &members, &not_utf8);
            PyObject *both = list ? Py_BuildValue("(NN)", list, res) : NULL;
            if (!both) Py_DECREF(res);
            res = both;
        }
    }
    out_free(&o);
    buf_free(&members);
    buf_free(&c.scratch);
    PyBuffer_Release(&view);
    if (res || PyErr_Occurred()) return res;
    Py_RETURN_NONE; /* not read here: the msgspec path reads it */
}

static PyObject *scan(PyObject *self, PyObject *arg) { return run(arg, 0, 0); }

static PyObject *scan_plain(PyObject *self, PyObject *arg) { return run(arg, 0, 1); }

static PyObject *scan_document(PyObject *self, PyObject *arg) { return run(arg, 1, 0); }

PyDoc_STRVAR(scan_doc,
"scan(buffer) -> (seen, n_complete, n_flows, tables, columns, odd, last_ts, n_memory) or None\n\n"
"The columns of a JSON array of trace events; None where the msgspec path must read it.\n"
"See dashboard/engine/_scan.c and load._scanned_part.");

PyDoc_STRVAR(scan_plain_doc,
"scan_plain(buffer) -> scan's tuple with each column as (values bytes, format, valid bytes or None), or None\n\n"
"What scan returns, in objects that pickle: a slice worker without polars sends it to the loading\n"
"process, which makes each column with arrow(*column). See dashboard/engine/model/slice_workers.py.");

PyDoc_STRVAR(scan_document_doc,
"scan_document(buffer) -> ([(key, raw value), ...], scan's tuple) or None\n\n"
"A JSON object with a traceEvents array: its other members as raw JSON, and the events as scan\n"
"reads them; None where the msgspec path must read it.");

/* holders(lane, reach, need, out): for each row i of int64 arrays sorted by lane (each lane's rows
 * contiguous), out[i] = the largest j < i of i's lane with reach[j] >= need[i], else -1: the
 * nesting rule's innermost holder (dashboard/engine/load/steps.py: innermost_holders, whose numpy
 * version is the fallback and the tests' oracle). Each row first gets prev[i], the latest earlier
 * row of its lane with a reach strictly greater than its own; a walk from i - 1 may then jump from
 * j to prev[j], since every row between them reaches no further than j. O(n) for prev; each
 * query walks a chain of rising reaches. No Python object, without the GIL. */
static PyObject *holders(PyObject *self, PyObject *args) {
    Py_buffer b[4];
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &b[0], &b[1], &b[2], &b[3])) return NULL;
    PyObject *res = NULL;
    Py_ssize_t bytes = b[0].len;
    if (bytes % 8 || b[1].len != bytes || b[2].len != bytes || b[3].len != bytes) {
        PyErr_SetString(PyExc_ValueError, "holders: four int64 arrays of one length");
        goto done;
    }
    Py_ssize_t n = bytes / 8;
    const int64_t *lane = b[0].buf, *reach = b[1].buf, *need = b[2].buf;
    int64_t *out = b[3].buf;
    int64_t *prev = malloc(n ? (size_t)n * sizeof *prev : 1);
    if (!prev) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t j = (int64_t)i - 1;
        while (j >= 0 && lane[j] == lane[i] && reach[j] <= reach[i]) j = prev[j];
        prev[i] = (j >= 0 && lane[j] == lane[i]) ? j : -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t j = (int64_t)i - 1;
        while (j >= 0 && lane[j] == lane[i] && reach[j] < need[i]) j = prev[j];
        out[i] = (j >= 0 && lane[j] == lane[i]) ? j : -1;
    }
    Py_END_ALLOW_THREADS
    free(prev);
    res = Py_None;
    Py_INCREF(res);
done:
    for (int k = 0; k < 4; k++) PyBuffer_Release(&b[k]);
    return res;
}

PyDoc_STRVAR(holders_doc,
"holders(lane, reach, need, out) -> None\n\n"
"out[i] = the largest j < i of i's lane with reach[j] >= need[i], else -1 (int64 arrays of one\n"
"length, sorted by lane). See dashboard/engine/load/steps.py: innermost_holders.");

/* depths(parent, out): out[i] = the number of ancestors of row i, by the parent links of an int64
 * array in which each parent comes before its child (parent[i] < i; -1: none), as holders gives
 * them: one pass, each row's depth one more than its parent's, already known (the numpy version,
 * steps.py: _depths, climbs by pointer doubling: a few passes over every row). out is int32, as
 * the depth column holds it. A parent out of that order is a ValueError. Without the GIL. */
static PyObject *depths(PyObject *self, PyObject *args) {
    Py_buffer parent, out;
    if (!PyArg_ParseTuple(args, "y*w*", &parent, &out)) return NULL;
    PyObject *res = NULL;
    if (parent.len % 8 || out.len * 2 != parent.len) {
        PyErr_SetString(PyExc_ValueError, "depths: an int64 array and an int32 array of one length");
        goto done;
    }
    Py_ssize_t n = parent.len / 8, bad = -1;
    const int64_t *up = parent.buf;
    int32_t *depth = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t j = up[i];
        if (j >= i || j < -1) {
            bad = i;
            break;
        }
        depth[i] = j < 0 ? 0 : depth[j] + 1;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "depths: row %zd's parent does not come before it", bad);
        goto done;
    }
    res = Py_None;
    Py_INCREF(res);
done:
    PyBuffer_Release(&parent);
    PyBuffer_Release(&out);
    return res;
}

PyDoc_STRVAR(depths_doc,
"depths(parent, out) -> None\n\n"
"out[i] (int32) = the number of ancestors of row i by the int64 parent links, each parent before\n"
"its child (parent[i] < i; -1: none). See dashboard/engine/load/steps.py: nesting.");

/* arrow(values, format, valid): see arrow_doc. The values are copied (a few bytes a row, once), so
 * the array owns what it points to and outlives the buffer it was made from. */
static PyObject *arrow(PyObject *self, PyObject *args) {
    Py_buffer values, valid = {0};
    const char *format;
    PyObject *valid_obj, *res = NULL;
    int has_valid = 0;
    if (!PyArg_ParseTuple(args, "y*sO", &values, &format, &valid_obj)) return NULL;
    size_t width;
    const char *arrow_format;
    switch (format[0] && !format[1] ? format[0] : 0) {
    case 'l': width = 8, arrow_format = "l"; break; /* int64 */
    case 'i': width = 4, arrow_format = "i"; break; /* int32 */
    case 'I': width = 4, arrow_format = "I"; break; /* uint32 */
    case 'b': width = 1, arrow_format = "b"; break; /* bool, one byte (0 or 1) a value */
    default:
        PyErr_Format(PyExc_ValueError, "arrow: unknown format %R (l, i, I or b)", PyTuple_GET_ITEM(args, 1));
        goto done;
    }
    if (values.len % (Py_ssize_t)width) {
        PyErr_SetString(PyExc_ValueError, "arrow: the values' length is not a whole number of values");
        goto done;
    }
    int64_t n = values.len / (Py_ssize_t)width, nulls = 0;
    if (valid_obj != Py_None) {
        if (PyObject_GetBuffer(valid_obj, &valid, PyBUF_SIMPLE)) goto done;
        has_valid = 1;
        if (valid.len != n) {
            PyErr_SetString(PyExc_ValueError, "arrow: valid must hold one byte a value");
            goto done;
        }
    }
    uint8_t *bits = has_valid ? bitmap_of(valid.buf, n, &nulls) : NULL;
    uint8_t *copy = NULL;
    size_t mapped = 0;
    if (width == 1) { /* bool: bit-packed, as Arrow holds it */
        int64_t zeros;
        copy = bitmap_of(values.buf, n, &zeros);
    } else {
        copy = values_alloc((size_t)n * width, &mapped);
        if (copy && n) memcpy(copy, values.buf, (size_t)n * width);
    }
    if ((has_valid && !bits) || !copy) {
        free(bits);
        if (copy) values_free(copy, mapped);
        PyErr_NoMemory();
        goto done;
    }
    res = arrow_pair(copy, mapped, bits, n, nulls, arrow_format);
done:
    PyBuffer_Release(&values);
    if (has_valid) PyBuffer_Release(&valid);
    return res;
}

PyDoc_STRVAR(arrow_doc,
"arrow(values, format, valid) -> (schema capsule, array capsule)\n\n"
"A column as the Arrow PyCapsule interface hands it over (what __arrow_c_array__ returns), so that\n"
"polars takes it without numpy: values a buffer of int64 (format 'l'), int32 ('i'), uint32 ('I')\n"
"or bool bytes ('b'), in native order; valid None (all valid) or one byte a value (0: null).");

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {"scan_plain", scan_plain, METH_O, scan_plain_doc},
    {"scan_document", scan_document, METH_O, scan_document_doc},
    {"holders", holders, METH_VARARGS, holders_doc},
    {"depths", depths, METH_VARARGS, depths_doc},
    {"arrow", arrow, METH_VARARGS, arrow_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Trace events -> columns (see _scan.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
