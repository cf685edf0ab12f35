/* gguf: reading, validating and writing GGUF files (v2, v3), split models included.
 *
 * Why this shape: a GGUF file is untrusted input that may be many GB. Each file is mapped read-only
 * and walked once by a bounds-checked cursor; nothing is allocated from a count before the count has
 * been checked against the bytes that remain, so a hostile header fails fast instead of asking for
 * terabytes. Metadata is decoded into owned memory (strings NUL-terminated, arrays native); tensor
 * data stays in the mapping. The checks are llama.cpp's (docs/gguf.md §7),
 * so we accept exactly the files it accepts, and every failure names the file, the item and what was
 * expected.
 *
 * Layout of a file: "GGUF" u32 version, i64 n_tensors, i64 n_kv, n_kv x (str key, i32 type, value),
 * n_tensors x (str name, u32 n_dims, i64 ne[n_dims], i32 type, u64 offset), zero padding to the
 * alignment, then the tensors, each at data_start + offset, offsets sequential and padded.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#define GGUF_MAX_STRING ((uint64_t)1 << 30) /* llama.cpp's GGUF_MAX_STRING_LENGTH */
#define GGUF_MAX_ARRAY ((uint64_t)1 << 30)  /* llama.cpp's GGUF_MAX_ARRAY_ELEMENTS */
#define GGUF_MAX_DIMS 4
#define GGUF_MIN_KV_BYTES 13     /* empty-key string length (8) + type (4) + a 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24 /* name length (8) + n_dims (4) + type (4) + offset (8) */

struct gguf_map {
    const uint8_t *base;
    size_t size;
    int mapped; /* 1: munmap on close; 0: borrowed memory */
};

/* Owned allocations of a file, freed together. */
struct arena {
    void **ptrs;
    size_t n, cap;
};

static void *arena_alloc(struct gguf_file *f, size_t n) {
    struct arena *a = f->arena;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        void **p = xrealloc(a->ptrs, cap * sizeof *p);
        if (!p) return NULL;
        a->ptrs = p, a->cap = cap;
    }
    void *p = xmalloc(n);
    if (p) a->ptrs[a->n++] = p;
    return p;
}

static size_t vtype_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    case GGUF_STR: return sizeof(struct gguf_str);
    default: return 0;
    }
}

const char *gguf_vtype_name(enum gguf_vtype t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "invalid";
}

/* ---- hash set of names (keys, tensor names): duplicate checks in O(n), not O(n^2) ---- */

struct name_set {
    const char **slots;
    size_t cap; /* power of two */
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static infer_status set_init(struct name_set *s, size_t n) {
    s->cap = 16;
    while (s->cap < 2 * n + 1) s->cap *= 2;
    s->slots = xcalloc(s->cap, sizeof *s->slots);
    return s->slots ? INFER_OK : INFER_OOM("a name table");
}

/* 1 if name was already present, else inserts it and returns 0. The set never fills: cap > 2n. */
static int set_insert(struct name_set *s, const char *name) {
    for (size_t i = hash_str(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->slots[i]) {
            s->slots[i] = name;
            return 0;
        }
        if (strcmp(s->slots[i], name) == 0) return 1;
    }
}

/* ---- the bounds-checked cursor over one file image ---- */

struct cursor {
    const uint8_t *base;
    size_t size, pos;
    const char *name; /* file name for messages */
    char item[96];    /* the record being read, for messages: "key 3 'general.name'", "" in the header */
    int64_t elem;     /* the array element being read, or -1 */
};

static size_t remaining(const struct cursor *c) { return c->size - c->pos; }

/* Sets the record named in messages: "key 3" before its name is known, "key 3 'name'" after. */
static void cursor_item(struct cursor *c, const char *kind, int64_t i, const char *name) {
    if (name) snprintf(c->item, sizeof c->item, "%s %" PRId64 " '%.60s'", kind, i, name);
    else snprintf(c->item, sizeof c->item, "%s %" PRId64, kind, i);
    c->elem = -1;
}

/* "file: key 3 'name' element 7: " as a prefix for the messages below */
static const char *cursor_where(const struct cursor *c, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s: ", c->name);
    if (c->item[0] && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "%s", c->item);
    if (c->elem >= 0 && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, " element %" PRId64, c->elem);
    if (c->item[0] && n >= 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ": ");
    return buf;
}

static infer_status truncated(const struct cursor *c, const char *what) {
    char where[512];
    return infer_fail(INFER_E_FORMAT, "%struncated at byte %zu of %zu while reading %s", cursor_where(c, where, sizeof where),
                      c->pos, c->size, what);
}

static infer_status read_bytes(struct cursor *c, void *dst, size_t n, const char *what) {
    if (remaining(c) < n) return truncated(c, what);
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return INFER_OK;
}

/* A string: its bytes stay in the image; *len and *s point at them. */
static infer_status read_str_ref(struct cursor *c, uint64_t *len, const char **s, const char *what) {
    infer_status st = read_bytes(c, len, 8, what);
    if (st) return st;
    char where[512];
    if (*len > GGUF_MAX_STRING || *len > remaining(c))
        return infer_fail(INFER_E_FORMAT, "%s%s at byte %zu has length %" PRIu64 ", expected at most %" PRIu64,
                          cursor_where(c, where, sizeof where), what, c->pos - 8, *len,
                          *len > GGUF_MAX_STRING ? GGUF_MAX_STRING : (uint64_t)remaining(c));
    *s = (const char *)c->base + c->pos;
    c->pos += *len;
    return INFER_OK;
}

static infer_status copy_str(struct gguf_file *f, uint64_t len, const char *src, struct gguf_str *out) {
    char *d = arena_alloc(f, len + 1);
    if (!d) return INFER_OOM("a metadata string");
    memcpy(d, src, len);
    d[len] = 0;
    out->len = len, out->s = d;
    return INFER_OK;
}

static void scalar_from_bytes(enum gguf_vtype t, const uint8_t *p, struct gguf_value *v) {
    switch (t) {
    case GGUF_U8: v->v.u = p[0]; break;
    case GGUF_I8: v->v.i = (int8_t)p[0]; break;
    case GGUF_BOOL: v->v.u = p[0] != 0; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); v->v.u = x; break; }
    case GGUF_I16: { int16_t x; memcpy(&x, p, 2); v->v.i = x; break; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); v->v.u = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, p, 4); v->v.i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, p, 4); v->v.f = x; break; }
    case GGUF_U64: memcpy(&v->v.u, p, 8); break;
    case GGUF_I64: memcpy(&v->v.i, p, 8); break;
    case GGUF_F64: memcpy(&v->v.f, p, 8); break;
    default: break;
    }
}

static infer_status read_value(struct gguf_file *f, struct cursor *c, const char *key, int32_t type32,
                               struct gguf_value *v) {
    infer_status st = INFER_OK;
    if (type32 < 0 || type32 > GGUF_F64 || (type32 != GGUF_ARR && vtype_size((enum gguf_vtype)type32) == 0))
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' has value type %d, expected 0..12", c->name, key, type32);
    v->type = v->elem_type = (enum gguf_vtype)type32;
    v->n = 1;
    if (type32 == GGUF_STR) {
        uint64_t len = 0;
        const char *s = NULL;
        if ((st = read_str_ref(c, &len, &s, "a string value"))) return st;
        return copy_str(f, len, s, &v->v.str);
    }
    if (type32 != GGUF_ARR) {
        uint8_t buf[8];
        if ((st = read_bytes(c, buf, vtype_size(v->type), "a value"))) return st;
        scalar_from_bytes(v->type, buf, v);
        return INFER_OK;
    }
    int32_t et = 0;
    uint64_t n = 0;
    if ((st = read_bytes(c, &et, 4, "an array type")) || (st = read_bytes(c, &n, 8, "an array length"))) return st;
    if (et < 0 || et > GGUF_F64 || et == GGUF_ARR || vtype_size((enum gguf_vtype)et) == 0)
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' is an array of type %d, expected 0..8 or 10..12 (no nesting)",
                          c->name, key, et);
    const size_t file_es = et == GGUF_STR ? 8 : vtype_size((enum gguf_vtype)et); /* bytes per element at least */
    if (n > GGUF_MAX_ARRAY || n > remaining(c) / file_es)
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' claims %" PRIu64 " array elements, only %zu bytes remain",
                          c->name, key, n, remaining(c));
    v->elem_type = (enum gguf_vtype)et;
    v->n = n;
    if (et != GGUF_STR) {
        const size_t es = vtype_size((enum gguf_vtype)et);
        void *arr = arena_alloc(f, n * es);
        if (!arr) return INFER_OOM("a metadata array");
        memcpy(arr, c->base + c->pos, n * es); /* note: little-endian host assumed, as llama.cpp does */
        c->pos += n * es;
        if (et == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++) ((uint8_t *)arr)[i] = ((uint8_t *)arr)[i] != 0;
        v->v.arr = arr;
        return INFER_OK;
    }
    /* strings: validate and size in one pass, copy into one block in a second */
    const size_t start = c->pos;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = 0;
        const char *s = NULL;
        c->elem = (int64_t)i;
        if ((st = read_str_ref(c, &len, &s, "a string"))) return st;
        total += len + 1;
    }
    struct gguf_str *strs = arena_alloc(f, n * sizeof *strs);
    char *chars = arena_alloc(f, total);
    if (!strs || !chars) return INFER_OOM("a metadata string array");
    c->pos = start;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = 0;
        const char *s = NULL;
        read_str_ref(c, &len, &s, "an array string"); /* checked above */
        memcpy(chars, s, len);
        chars[len] = 0;
        strs[i].len = len, strs[i].s = chars;
        chars += len + 1;
    }
    v->v.arr = strs;
    return INFER_OK;
}

/* ---- one file image ---- */

struct parsed {
    int64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    uint32_t version, alignment;
};

static infer_status parse_header(struct cursor *c, struct parsed *p) {
    uint8_t magic[4];
    infer_status st = read_bytes(c, magic, 4, "the magic");
    if (st) return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return infer_fail(INFER_E_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected 'GGUF')", c->name,
                          magic[0], magic[1], magic[2], magic[3]);
    if ((st = read_bytes(c, &p->version, 4, "the version"))) return st;
    if (p->version == 0 || (p->version & 0xFFFF) == 0)
        return infer_fail(INFER_E_FORMAT, "%s: version %" PRIu32 " (0x%08" PRIx32 "): %s, expected 2 or 3", c->name,
                          p->version, p->version, p->version ? "a byte-swapped (big-endian) file" : "invalid");
    if (p->version == 1) return infer_fail(INFER_E_FORMAT, "%s: GGUF version 1 is no longer supported, expected 2 or 3", c->name);
    if (p->version > 3) return infer_fail(INFER_E_FORMAT, "%s: GGUF version %" PRIu32 ", expected 2 or 3", c->name, p->version);
    if ((st = read_bytes(c, &p->n_tensors, 8, "the tensor count")) || (st = read_bytes(c, &p->n_kv, 8, "the key count")))
        return st;
    if (p->n_tensors < 0 || (uint64_t)p->n_tensors > remaining(c) / GGUF_MIN_TENSOR_BYTES)
        return infer_fail(INFER_E_FORMAT, "%s: tensor count %" PRId64 " does not fit in the %zu bytes that remain",
                          c->name, p->n_tensors, remaining(c));
    if (p->n_kv < 0 || (uint64_t)p->n_kv > remaining(c) / GGUF_MIN_KV_BYTES)
        return infer_fail(INFER_E_FORMAT, "%s: key count %" PRId64 " does not fit in the %zu bytes that remain", c->name,
                          p->n_kv, remaining(c));
    return INFER_OK;
}

static infer_status parse_kvs(struct gguf_file *f, struct cursor *c, struct parsed *p) {
    infer_status st = INFER_OK;
    struct name_set keys = {0};
    TRY(set_init(&keys, (size_t)p->n_kv));
    p->kv = arena_alloc(f, (size_t)p->n_kv * sizeof *p->kv + 1);
    if (!p->kv) {
        st = INFER_OOM("the key table");
        goto fail;
    }
    for (int64_t i = 0; i < p->n_kv; i++) {
        uint64_t len = 0;
        const char *s = NULL;
        struct gguf_str key = {0, NULL};
        int32_t type = 0;
        cursor_item(c, "key", i, NULL);
        TRY(read_str_ref(c, &len, &s, "the key"));
        if (len == 0) {
            st = infer_fail(INFER_E_FORMAT, "%s: key %" PRId64 " at byte %zu is empty", c->name, i, c->pos - 8);
            goto fail;
        }
        TRY(copy_str(f, len, s, &key));
        if (strlen(key.s) != len) {
            st = infer_fail(INFER_E_FORMAT, "%s: key %" PRId64 " contains a NUL byte", c->name, i);
            goto fail;
        }
        if (set_insert(&keys, key.s)) {
            st = infer_fail(INFER_E_FORMAT, "%s: duplicate key '%s'", c->name, key.s);
            goto fail;
        }
        cursor_item(c, "key", i, key.s);
        TRY(read_bytes(c, &type, 4, "the value type"));
        p->kv[i].key = key.s;
        TRY(read_value(f, c, key.s, type, &p->kv[i].val));
    }
    p->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < p->n_kv; i++) {
        if (strcmp(p->kv[i].key, "general.alignment") != 0) continue;
        const struct gguf_value *v = &p->kv[i].val;
        if (v->type != GGUF_U32) {
            st = infer_fail(INFER_E_FORMAT, "%s: key 'general.alignment' has type %s, expected u32", c->name,
                            gguf_vtype_name(v->type));
            goto fail;
        }
        if (v->v.u == 0 || (v->v.u & (v->v.u - 1)) != 0) {
            st = infer_fail(INFER_E_FORMAT, "%s: key 'general.alignment' is %" PRIu64 ", expected a power of two",
                            c->name, v->v.u);
            goto fail;
        }
        p->alignment = (uint32_t)v->v.u;
    }
fail:
    xfree(keys.slots);
    return st;
}

static infer_status parse_tensor_info(struct cursor *c, int64_t i, struct gguf_tensor *t) {
    uint64_t len = 0;
    const char *s = NULL;
    uint32_t n_dims = 0;
    cursor_item(c, "tensor", i, NULL);
    infer_status st = read_str_ref(c, &len, &s, "the name");
    if (st) return st;
    if (len >= GGUF_MAX_NAME)
        return infer_fail(INFER_E_FORMAT, "%s: tensor %" PRId64 " has a name of %" PRIu64 " bytes, expected fewer than %d",
                          c->name, i, len, GGUF_MAX_NAME);
    memcpy(t->name, s, len);
    t->name[len] = 0;
    if (strlen(t->name) != len) return infer_fail(INFER_E_FORMAT, "%s: tensor %" PRId64 " name contains a NUL byte", c->name, i);
    cursor_item(c, "tensor", i, t->name);
    if ((st = read_bytes(c, &n_dims, 4, "n_dims"))) return st;
    if (n_dims > GGUF_MAX_DIMS)
        return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has %" PRIu32 " dims, expected at most %d", c->name, t->name,
                          n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int32_t)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if ((st = read_bytes(c, &t->ne[d], 8, "a dimension"))) return st;
        if (t->ne[d] < 0)
            return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' dim %" PRIu32 " is %" PRId64 ", expected >= 0", c->name,
                              t->name, d, t->ne[d]);
    }
    if ((st = read_bytes(c, &t->type, 4, "the type")) || (st = read_bytes(c, &t->offset, 8, "the offset"))) return st;
    const struct quant_type *qt = quant_type(t->type);
    if (!qt)
        return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has type id %" PRId32 ", expected a ggml type with a known layout",
                          c->name, t->name, t->type);
    /* the element count: like llama.cpp, refused from INT64_MAX up; any zero dim makes an empty tensor */
    int64_t nel = t->ne[0];
    for (int d = 1; d < GGUF_MAX_DIMS && nel > 0; d++) {
        if (t->ne[d] == 0) {
            nel = 0;
        } else if (nel >= INT64_MAX / t->ne[d]) {
            return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                              "] overflows the element count", c->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        } else {
            nel *= t->ne[d];
        }
    }
    if (t->ne[0] % qt->blck != 0)
        return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has rows of %" PRId64 " elements, expected a multiple of %s's block of %d",
                          c->name, t->name, t->ne[0], qt->name, (int)qt->blck);
    if ((uint64_t)(nel / qt->blck) > UINT64_MAX / (uint64_t)qt->bytes)
        return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' byte size overflows", c->name, t->name);
    t->nbytes = (uint64_t)(nel / qt->blck) * (uint64_t)qt->bytes;
    return INFER_OK;
}

static uint64_t pad_to(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

/* Parses one whole image into p (arena-owned). split is stored in each tensor. */
static infer_status parse_image(struct gguf_file *f, const uint8_t *base, size_t size, const char *name, int32_t split,
                                struct parsed *p) {
    infer_status st = INFER_OK;
    struct cursor c = {base, size, 0, name, "", -1};
    memset(p, 0, sizeof *p);
    TRY(parse_header(&c, p));
    TRY(parse_kvs(f, &c, p));
    p->tensors = arena_alloc(f, (size_t)p->n_tensors * sizeof *p->tensors + 1);
    if (!p->tensors) return INFER_OOM("the tensor table");
    for (int64_t i = 0; i < p->n_tensors; i++) {
        memset(&p->tensors[i], 0, sizeof p->tensors[i]);
        p->tensors[i].split = split;
        TRY(parse_tensor_info(&c, i, &p->tensors[i]));
    }
    if (p->n_tensors == 0) return INFER_OK; /* no padding, no data section */
    const uint64_t data = pad_to(c.pos, p->alignment);
    uint64_t expect = 0;
    for (int64_t i = 0; i < p->n_tensors; i++) {
        struct gguf_tensor *t = &p->tensors[i];
        if (t->offset != expect)
            return infer_fail(INFER_E_FORMAT, "%s: tensor %" PRId64 " '%s' has offset %" PRIu64 ", expected %" PRIu64
                              " (tensors are contiguous in file order, each padded to %" PRIu32 " bytes)",
                              name, i, t->name, t->offset, expect, p->alignment);
        if (t->nbytes > size || data > size - t->nbytes || t->offset > size - t->nbytes - data)
            return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' data [%" PRIu64 ", +%" PRIu64 ") lies past the end of the file (%zu bytes)",
                              name, t->name, data + t->offset, t->nbytes, size);
        t->data = base + data + t->offset;
        expect = pad_to(t->offset + t->nbytes, p->alignment); /* cannot overflow: both are below size */
    }
    return INFER_OK;
fail:
    return st;
}

/* ---- files and splits ---- */

static infer_status map_file(const char *path, struct gguf_map *m) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return infer_fail(INFER_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return infer_fail(INFER_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return infer_fail(INFER_E_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 24) {
        close(fd);
        return infer_fail(INFER_E_FORMAT, "%s: %lld bytes is too short for a GGUF header (24 bytes)", path, (long long)sb.st_size);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return infer_fail(INFER_E_IO, "%s: cannot mmap %lld bytes: %s", path, (long long)sb.st_size, strerror(e));
    m->base = p, m->size = (size_t)sb.st_size, m->mapped = 1;
    return INFER_OK;
}

static infer_status file_new(const char *path, int n_maps, struct gguf_file **out) {
    struct gguf_file *f = xcalloc(1, sizeof *f);
    if (!f) return INFER_OOM("a GGUF file handle");
    f->arena = xcalloc(1, sizeof(struct arena));
    f->maps = xcalloc((size_t)n_maps, sizeof *f->maps);
    f->path = xstrdup(path);
    if (!f->arena || !f->maps || !f->path) {
        xfree(f->arena), xfree(f->maps), xfree(f->path), xfree(f);
        return INFER_OOM("a GGUF file handle");
    }
    *out = f;
    return INFER_OK;
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    for (int32_t i = 0; i < f->n_splits; i++)
        if (f->maps[i].mapped) munmap((void *)f->maps[i].base, f->maps[i].size);
    struct arena *a = f->arena;
    for (size_t i = 0; a && i < a->n; i++) xfree(a->ptrs[i]);
    if (a) xfree(a->ptrs);
    xfree(a);
    xfree(f->maps);
    xfree(f->path);
    xfree(f);
}

void gguf_drop_pages(const struct gguf_file *f, const struct gguf_tensor *t) {
    if (t->split < 0 || t->split >= f->n_splits || !f->maps[t->split].mapped) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)t->data + page - 1) / page * page, hi = ((uintptr_t)t->data + t->nbytes) / page * page;
    /* a read-only private file mapping: the pages are clean, so a later read faults them back in from the file */
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static const struct gguf_kv *find_kv(const struct gguf_kv *kv, int64_t n, const char *key) {
    for (int64_t i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0) return &kv[i];
    return NULL;
}

/* The split.* keys of one part: count (0 when absent), index. */
static infer_status split_keys(const char *name, const struct parsed *p, uint32_t *count, uint32_t *no) {
    const struct gguf_kv *c = find_kv(p->kv, p->n_kv, "split.count"), *n = find_kv(p->kv, p->n_kv, "split.no");
    *count = 0, *no = 0;
    if (!c) return INFER_OK;
    if (c->val.type != GGUF_U16 || (n && n->val.type != GGUF_U16))
        return infer_fail(INFER_E_FORMAT, "%s: keys split.count / split.no must have type u16", name);
    *count = (uint32_t)c->val.v.u;
    *no = n ? (uint32_t)n->val.v.u : 0;
    return INFER_OK;
}

/* "<prefix>-%05d-of-%05d.gguf": length of the prefix, or -1 when the name does not follow the pattern. */
static int split_prefix_len(const char *path, uint32_t *idx, uint32_t *count) {
    size_t n = strlen(path);
    const size_t tail = strlen("-00001-of-00003.gguf");
    if (n < tail) return -1;
    const char *t = path + n - tail;
    unsigned a, b;
    char dot[6];
    if (sscanf(t, "-%5u-of-%5u%5s", &a, &b, dot) != 3 || strcmp(dot, ".gguf") != 0 || t[6] != '-') return -1;
    *idx = a, *count = b;
    return (int)(n - tail);
}

static infer_status append_part(struct gguf_file *f, const struct parsed *p) {
    if (p->n_tensors == 0) return INFER_OK;
    struct gguf_tensor *all = arena_alloc(f, (size_t)(f->n_tensors + p->n_tensors) * sizeof *all);
    if (!all) return INFER_OOM("the tensor table");
    if (f->n_tensors) memcpy(all, f->tensors, (size_t)f->n_tensors * sizeof *all);
    memcpy(all + f->n_tensors, p->tensors, (size_t)p->n_tensors * sizeof *all);
    f->tensors = all;
    f->n_tensors += p->n_tensors;
    return INFER_OK;
}

static infer_status check_unique_names(const struct gguf_file *f) {
    struct name_set names = {0};
    infer_status st = set_init(&names, (size_t)f->n_tensors);
    if (st) return st;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (set_insert(&names, f->tensors[i].name)) {
            st = infer_fail(INFER_E_FORMAT, "%s: duplicate tensor name '%s'", f->path, f->tensors[i].name);
            break;
        }
    xfree(names.slots);
    return st;
}

static infer_status open_parts(struct gguf_file *f, const struct parsed *first, uint32_t n_split) {
    infer_status st = INFER_OK;
    uint32_t idx, count;
    int plen = split_prefix_len(f->path, &idx, &count);
    if (plen < 0 || idx != 1 || count != n_split)
        return infer_fail(INFER_E_FORMAT, "%s: split model of %" PRIu32 " parts: open it by its first part, named "
                          "<prefix>-00001-of-%05" PRIu32 ".gguf", f->path, n_split, n_split);
    size_t cap = (size_t)plen + 32;
    char *part = xmalloc(cap);
    if (!part) return INFER_OOM("a split path");
    TRY(append_part(f, first));
    for (uint32_t i = 1; i < n_split; i++) {
        snprintf(part, cap, "%.*s-%05" PRIu32 "-of-%05" PRIu32 ".gguf", plen, f->path, i + 1, n_split);
        TRY(map_file(part, &f->maps[i]));
        f->n_splits = (int32_t)i + 1;
        struct parsed p;
        TRY(parse_image(f, f->maps[i].base, f->maps[i].size, part, (int32_t)i, &p));
        uint32_t c, no;
        TRY(split_keys(part, &p, &c, &no));
        if (c != n_split || no != i) {
            st = infer_fail(INFER_E_FORMAT, "%s: split.no %" PRIu32 " / split.count %" PRIu32 ", expected %" PRIu32 " / %" PRIu32,
                            part, no, c, i, n_split);
            goto fail;
        }
        TRY(append_part(f, &p));
    }
fail:
    xfree(part);
    return st;
}

static infer_status finish_open(struct gguf_file *f, const struct parsed *p0) {
    infer_status st = INFER_OK;
    uint32_t n_split, no;
    f->version = p0->version, f->alignment = p0->alignment, f->n_kv = p0->n_kv, f->kv = p0->kv;
    TRY(split_keys(f->path, p0, &n_split, &no));
    if (n_split > 1) {
        if (no != 0) return infer_fail(INFER_E_FORMAT, "%s: split.no is %" PRIu32 ", expected 0 (open the first part)", f->path, no);
        TRY(open_parts(f, p0, n_split));
        const struct gguf_kv *tc = gguf_find_kv(f, "split.tensors.count");
        if (tc && (tc->val.type != GGUF_I32 || tc->val.v.i != f->n_tensors))
            return infer_fail(INFER_E_FORMAT, "%s: split.tensors.count says %" PRId64 ", the parts hold %" PRId64 " tensors",
                              f->path, tc->val.v.i, f->n_tensors);
    } else {
        f->tensors = p0->tensors, f->n_tensors = p0->n_tensors;
    }
    TRY(check_unique_names(f));
fail:
    return st;
}

infer_status gguf_open(const char *path, struct gguf_file **out) {
    infer_status st = INFER_OK;
    struct gguf_file *f = NULL;
    struct gguf_map m0;
    uint32_t idx = 0, count = 1;
    *out = NULL;
    if (!path) return infer_fail(INFER_E_ARG, "gguf_open: path is NULL");
    if (split_prefix_len(path, &idx, &count) < 0 || count == 0) count = 1;
    TRY(map_file(path, &m0));
    if ((st = file_new(path, (int)(count > 0 ? count : 1), &f))) {
        munmap((void *)m0.base, m0.size);
        return st;
    }
    f->maps[0] = m0;
    f->n_splits = 1;
    struct parsed p0;
    TRY(parse_image(f, m0.base, m0.size, path, 0, &p0));
    uint32_t n_split = 0, no;
    TRY(split_keys(path, &p0, &n_split, &no));
    if (n_split > count) { /* more parts than the name promised: grow the map table */
        struct gguf_map *maps = xcalloc(n_split, sizeof *maps);
        if (!maps) {
            st = INFER_OOM("the split table");
            goto fail;
        }
        maps[0] = f->maps[0];
        xfree(f->maps);
        f->maps = maps;
    }
    TRY(finish_open(f, &p0));
    *out = f;
    return INFER_OK;
fail:
    gguf_close(f);
    return st;
}

infer_status gguf_open_memory(const void *data, size_t size, const char *name, struct gguf_file **out) {
    infer_status st = INFER_OK;
    struct gguf_file *f = NULL;
    *out = NULL;
    if (!data && size) return infer_fail(INFER_E_ARG, "gguf_open_memory: data is NULL");
    TRY(file_new(name ? name : "(memory)", 1, &f));
    f->maps[0].base = data, f->maps[0].size = size, f->maps[0].mapped = 0;
    f->n_splits = 1;
    struct parsed p0;
    TRY(parse_image(f, data, size, f->path, 0, &p0));
    uint32_t n_split, no;
    TRY(split_keys(f->path, &p0, &n_split, &no));
    if (n_split > 1) {
        st = infer_fail(INFER_E_UNSUPPORTED, "%s: part %" PRIu32 " of a %" PRIu32 "-part split model; open split models from files",
                        f->path, no + 1, n_split);
        goto fail;
    }
    TRY(finish_open(f, &p0));
    *out = f;
    return INFER_OK;
fail:
    gguf_close(f);
    return st;
}

/* ---- lookups and typed getters ---- */

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) { return find_kv(f->kv, f->n_kv, key); }

int64_t gguf_find_tensor_index(const struct gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return i;
    return -1;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    int64_t i = gguf_find_tensor_index(f, name);
    return i < 0 ? NULL : &f->tensors[i];
}

static int is_unsigned(enum gguf_vtype t) { return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64; }
static int is_signed(enum gguf_vtype t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

static infer_status get_u32(const struct gguf_file *f, const char *key, uint32_t *out, int optional) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return optional ? INFER_OK : infer_fail(INFER_E_FORMAT, "%s: key '%s' is missing", f->path, key);
    const struct gguf_value *v = &kv->val;
    if (is_unsigned(v->type) && v->v.u <= UINT32_MAX) *out = (uint32_t)v->v.u;
    else if (is_signed(v->type) && v->v.i >= 0 && v->v.i <= (int64_t)UINT32_MAX) *out = (uint32_t)v->v.i;
    else
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s%s, expected an unsigned 32-bit integer", f->path, key,
                          gguf_vtype_name(v->type), v->type == GGUF_ARR ? " (an array)" : "");
    return INFER_OK;
}

static infer_status get_f32(const struct gguf_file *f, const char *key, float *out, int optional) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return optional ? INFER_OK : infer_fail(INFER_E_FORMAT, "%s: key '%s' is missing", f->path, key);
    if (kv->val.type != GGUF_F32 && kv->val.type != GGUF_F64)
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s, expected f32", f->path, key, gguf_vtype_name(kv->val.type));
    *out = (float)kv->val.v.f;
    return INFER_OK;
}

infer_status gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) { return get_u32(f, key, out, 0); }
infer_status gguf_get_u32_opt(const struct gguf_file *f, const char *key, uint32_t *out) { return get_u32(f, key, out, 1); }
infer_status gguf_get_f32(const struct gguf_file *f, const char *key, float *out) { return get_f32(f, key, out, 0); }
infer_status gguf_get_f32_opt(const struct gguf_file *f, const char *key, float *out) { return get_f32(f, key, out, 1); }

infer_status gguf_get_str(const struct gguf_file *f, const char *key, const char **out) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return infer_fail(INFER_E_FORMAT, "%s: key '%s' is missing", f->path, key);
    if (kv->val.type != GGUF_STR)
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s, expected str", f->path, key, gguf_vtype_name(kv->val.type));
    *out = kv->val.v.str.s;
    return INFER_OK;
}

/* ---- formatting ---- */

/* Appends to buf (snprintf rule: counts what would have been written). */
static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) INFER_PRINTF(4, 5);
static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*n < cap ? buf + *n : NULL, *n < cap ? cap - *n : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *n += (size_t)k;
}

static void put_elem(char *buf, size_t cap, size_t *n, enum gguf_vtype t, const void *arr, uint64_t i) {
    struct gguf_value e;
    memset(&e, 0, sizeof e);
    if (t == GGUF_STR) {
        const struct gguf_str *s = (const struct gguf_str *)arr + i;
        put(buf, cap, n, "\"%s\"", s->s);
        return;
    }
    scalar_from_bytes(t, (const uint8_t *)arr + i * vtype_size(t), &e);
    if (is_unsigned(t)) put(buf, cap, n, "%" PRIu64, e.v.u);
    else if (is_signed(t)) put(buf, cap, n, "%" PRId64, e.v.i);
    else if (t == GGUF_BOOL) put(buf, cap, n, "%s", e.v.u ? "true" : "false");
    else put(buf, cap, n, "%.9g", e.v.f);
}

int gguf_value_format(const struct gguf_value *v, char *buf, size_t cap, int max_elems) {
    size_t n = 0;
    if (cap) buf[0] = 0;
    if (v->type == GGUF_STR) {
        put(buf, cap, &n, "%s", v->v.str.s);
    } else if (v->type == GGUF_ARR) {
        put(buf, cap, &n, "[");
        for (uint64_t i = 0; i < v->n && (max_elems < 0 || i < (uint64_t)max_elems); i++) {
            if (i) put(buf, cap, &n, ", ");
            put_elem(buf, cap, &n, v->elem_type, v->v.arr, i);
        }
        if (max_elems >= 0 && v->n > (uint64_t)max_elems) put(buf, cap, &n, ", ... (%" PRIu64 " in all)", v->n);
        put(buf, cap, &n, "]");
    } else {
        uint8_t raw[8] = {0};
        /* re-encode the scalar so put_elem handles every type one way */
        if (is_unsigned(v->type) || v->type == GGUF_BOOL) memcpy(raw, &v->v.u, vtype_size(v->type));
        else if (is_signed(v->type)) memcpy(raw, &v->v.i, vtype_size(v->type));
        else if (v->type == GGUF_F32) {
            float x = (float)v->v.f;
            memcpy(raw, &x, 4);
        } else memcpy(raw, &v->v.f, 8);
        put_elem(buf, cap, &n, v->type, raw, 0);
    }
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* ---- writing ---- */

struct wtensor {
    char name[GGUF_MAX_NAME];
    int32_t type, n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    const void *data;
};

struct gguf_writer {
    struct gguf_kv *kv; /* values deep-copied into the writer's arena (a gguf_file used as an arena) */
    int64_t n_kv, cap_kv;
    struct wtensor *t;
    int64_t n_t, cap_t;
    struct gguf_file *mem;
};

infer_status gguf_writer_create(struct gguf_writer **out) {
    *out = NULL;
    struct gguf_writer *w = xcalloc(1, sizeof *w);
    if (!w) return INFER_OOM("a GGUF writer");
    infer_status st = file_new("(writer)", 1, &w->mem);
    if (st) {
        xfree(w);
        return st;
    }
    *out = w;
    return INFER_OK;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    gguf_close(w->mem);
    xfree(w->kv);
    xfree(w->t);
    xfree(w);
}

static infer_status grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return INFER_OK;
    int64_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = xrealloc(*p, (size_t)c * elem);
    if (!q) return INFER_OOM("a GGUF writer table");
    *p = q, *cap = c;
    return INFER_OK;
}

infer_status gguf_writer_set(struct gguf_writer *w, const char *key, const struct gguf_value *v) {
    infer_status st;
    if (!key || !*key) return infer_fail(INFER_E_ARG, "gguf writer: empty key");
    if (v->type > GGUF_F64 || (v->type != GGUF_ARR && vtype_size(v->type) == 0) ||
        (v->type == GGUF_ARR && (v->elem_type == GGUF_ARR || vtype_size(v->elem_type) == 0)))
        return infer_fail(INFER_E_ARG, "gguf writer: key '%s' has an invalid value type", key);
    struct gguf_value c = *v;
    struct gguf_str k = {0, NULL};
    if ((st = copy_str(w->mem, strlen(key), key, &k))) return st;
    if (v->type == GGUF_STR) {
        if ((st = copy_str(w->mem, v->v.str.len, v->v.str.s, &c.v.str))) return st;
    } else if (v->type == GGUF_ARR) {
        const size_t es = vtype_size(v->elem_type);
        void *arr = arena_alloc(w->mem, v->n * es + 1);
        if (!arr) return INFER_OOM("a metadata array");
        if (v->n) memcpy(arr, v->v.arr, v->n * es);
        if (v->elem_type == GGUF_STR)
            for (uint64_t i = 0; i < v->n; i++) {
                const struct gguf_str *s = (const struct gguf_str *)v->v.arr + i;
                if ((st = copy_str(w->mem, s->len, s->s, (struct gguf_str *)arr + i))) return st;
            }
        c.v.arr = arr;
    } else {
        c.elem_type = c.type, c.n = 1;
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) { /* replace in place: the order of first setting is kept */
            w->kv[i].val = c;
            return INFER_OK;
        }
    if ((st = grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv))) return st;
    w->kv[w->n_kv].key = k.s, w->kv[w->n_kv].val = c;
    w->n_kv++;
    return INFER_OK;
}

static infer_status set_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype t, uint64_t u, int64_t i, double f) {
    struct gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = v.elem_type = t, v.n = 1;
    if (t == GGUF_F32 || t == GGUF_F64) v.v.f = f;
    else if (is_signed(t)) v.v.i = i;
    else v.v.u = u;
    return gguf_writer_set(w, key, &v);
}

infer_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) { return set_scalar(w, key, GGUF_U32, v, 0, 0); }
infer_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, GGUF_I32, 0, v, 0); }
infer_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, GGUF_U64, v, 0, 0); }
infer_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) { return set_scalar(w, key, GGUF_F32, 0, 0, v); }
infer_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v) { return set_scalar(w, key, GGUF_BOOL, v != 0, 0, 0); }

infer_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s) {
    struct gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = v.elem_type = GGUF_STR, v.n = 1;
    v.v.str.s = s, v.v.str.len = strlen(s);
    return gguf_writer_set(w, key, &v);
}

infer_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type, const void *elems,
                                 uint64_t n) {
    struct gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_ARR, v.elem_type = elem_type, v.n = n, v.v.arr = elems;
    return gguf_writer_set(w, key, &v);
}

infer_status gguf_writer_set_str_arr(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    struct gguf_str *tmp = xmalloc((size_t)n * sizeof *tmp + 1);
    if (!tmp) return INFER_OOM("a string array");
    for (uint64_t i = 0; i < n; i++) tmp[i].s = strs[i], tmp[i].len = strlen(strs[i]);
    infer_status st = gguf_writer_set_arr(w, key, GGUF_STR, tmp, n);
    xfree(tmp);
    return st;
}

infer_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, int32_t type, int n_dims, const int64_t *ne,
                                    const void *data) {
    infer_status st;
    const struct quant_type *qt = quant_type(type);
    if (!name || strlen(name) >= GGUF_MAX_NAME || !*name)
        return infer_fail(INFER_E_ARG, "gguf writer: tensor name '%s' must have 1..%d bytes", name ? name : "", GGUF_MAX_NAME - 1);
    if (!qt) return infer_fail(INFER_E_ARG, "gguf writer: tensor '%s' has type id %d without a layout", name, (int)type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return infer_fail(INFER_E_ARG, "gguf writer: tensor '%s' has %d dims", name, n_dims);
    struct wtensor t;
    memset(&t, 0, sizeof t);
    strcpy(t.name, name);
    t.type = type, t.n_dims = n_dims, t.data = data;
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0 || (t.ne[d] > 0 && nel > (uint64_t)INT64_MAX / (uint64_t)t.ne[d]))
            return infer_fail(INFER_E_ARG, "gguf writer: tensor '%s' has an invalid shape", name);
        nel *= (uint64_t)t.ne[d];
    }
    if (t.ne[0] % qt->blck) return infer_fail(INFER_E_ARG, "gguf writer: tensor '%s': %" PRId64 " is not a multiple of %s's block of %d",
                                              name, t.ne[0], qt->name, (int)qt->blck);
    t.nbytes = nel / (uint64_t)qt->blck * (uint64_t)qt->bytes;
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return infer_fail(INFER_E_ARG, "gguf writer: duplicate tensor '%s'", name);
    if ((st = grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))) return st;
    w->t[w->n_t++] = t;
    return INFER_OK;
}

/* Buffered output that remembers the first error. */
struct out {
    FILE *fp;
    const char *path;
    int err;
    uint64_t pos;
};

static void out_bytes(struct out *o, const void *p, size_t n) {
    if (o->err || n == 0) return;
    if (fwrite(p, 1, n, o->fp) != n) o->err = errno ? errno : EIO;
    o->pos += n;
}

static void out_u32(struct out *o, uint32_t v) { out_bytes(o, &v, 4); }
static void out_u64(struct out *o, uint64_t v) { out_bytes(o, &v, 8); }
static void out_str(struct out *o, uint64_t len, const char *s) {
    out_u64(o, len);
    out_bytes(o, s, (size_t)len);
}

static void out_pad(struct out *o, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t n = pad_to(o->pos, align) - o->pos;
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        out_bytes(o, zeros, k);
        n -= k;
    }
}

static void out_value(struct out *o, const struct gguf_value *v) {
    uint8_t raw[8];
    out_u32(o, (uint32_t)v->type);
    if (v->type == GGUF_STR) {
        out_str(o, v->v.str.len, v->v.str.s);
    } else if (v->type == GGUF_ARR) {
        out_u32(o, (uint32_t)v->elem_type);
        out_u64(o, v->n);
        if (v->elem_type == GGUF_STR)
            for (uint64_t i = 0; i < v->n; i++) out_str(o, ((const struct gguf_str *)v->v.arr)[i].len, ((const struct gguf_str *)v->v.arr)[i].s);
        else
            out_bytes(o, v->v.arr, (size_t)v->n * vtype_size(v->elem_type));
    } else {
        if (v->type == GGUF_F32) {
            float x = (float)v->v.f;
            memcpy(raw, &x, 4);
        } else if (v->type == GGUF_F64) memcpy(raw, &v->v.f, 8);
        else if (is_signed(v->type)) memcpy(raw, &v->v.i, 8);
        else memcpy(raw, &v->v.u, 8);
        out_bytes(o, raw, vtype_size(v->type));
    }
}

/* gguf_writer_write, or with sparse the header and tensor infos only, the file then extended with ftruncate. */
static infer_status gguf_writer_emit(struct gguf_writer *w, const char *path, gguf_fill_fn fill, void *user,
                                     int sparse) {
    infer_status st = INFER_OK;
    uint32_t align = GGUF_DEFAULT_ALIGNMENT;
    void *buf = NULL;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0) {
            const struct gguf_value *v = &w->kv[i].val;
            if (v->type != GGUF_U32 || v->v.u == 0 || (v->v.u & (v->v.u - 1)))
                return infer_fail(INFER_E_ARG, "gguf writer: general.alignment must be a u32 power of two");
            align = (uint32_t)v->v.u;
        }
    uint64_t max_fill = 0;
    for (int64_t i = 0; i < w->n_t && !sparse; i++)
        if (!w->t[i].data) {
            if (!fill) return infer_fail(INFER_E_ARG, "gguf writer: tensor '%s' has no data and no fill callback", w->t[i].name);
            if (w->t[i].nbytes > max_fill) max_fill = w->t[i].nbytes;
        }
    if (max_fill && !(buf = xmalloc((size_t)max_fill))) return INFER_OOM("a tensor buffer");
    struct out o = {fopen(path, "wb"), path, 0, 0};
    if (!o.fp) {
        xfree(buf);
        return infer_fail(INFER_E_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    struct stat sb;
    const int regular = fstat(fileno(o.fp), &sb) == 0 && S_ISREG(sb.st_mode); /* never unlink a device */
    out_bytes(&o, "GGUF", 4);
    out_u32(&o, 3);
    out_u64(&o, (uint64_t)w->n_t);
    out_u64(&o, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        out_str(&o, strlen(w->kv[i].key), w->kv[i].key);
        out_value(&o, &w->kv[i].val);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        int n_dims = 1; /* trailing 1-sized dims are dropped, as ggml's writer does */
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            if (t->ne[d] > 1) n_dims = d + 1;
        out_str(&o, strlen(t->name), t->name);
        out_u32(&o, (uint32_t)n_dims);
        for (int d = 0; d < n_dims; d++) out_u64(&o, (uint64_t)t->ne[d]);
        out_u32(&o, (uint32_t)t->type);
        out_u64(&o, off);
        off = pad_to(off + t->nbytes, align);
    }
    out_pad(&o, align);
    if (sparse && !o.err && (fflush(o.fp) != 0 || ftruncate(fileno(o.fp), (off_t)(o.pos + off)) != 0)) o.err = errno;
    for (int64_t i = 0; i < w->n_t && !o.err && !sparse; i++) {
        const struct wtensor *t = &w->t[i];
        const void *data = t->data;
        if (!data) {
            if ((st = fill(user, i, buf, (size_t)t->nbytes))) goto fail;
            data = buf;
        }
        out_bytes(&o, data, (size_t)t->nbytes);
        out_pad(&o, align);
    }
    if (o.err) st = infer_fail(INFER_E_IO, "%s: write failed: %s", path, strerror(o.err));
fail:
    if (fclose(o.fp) != 0 && st == INFER_OK) st = infer_fail(INFER_E_IO, "%s: write failed: %s", path, strerror(errno));
    if (st && regular) unlink(path); /* no half-written file is left behind */
    xfree(buf);
    return st;
}

infer_status gguf_writer_write(struct gguf_writer *w, const char *path, gguf_fill_fn fill, void *user) {
    return gguf_writer_emit(w, path, fill, user, 0);
}

infer_status gguf_writer_write_sparse(struct gguf_writer *w, const char *path) {
    return gguf_writer_emit(w, path, NULL, NULL, 1);
}
