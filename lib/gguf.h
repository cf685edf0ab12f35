/* gguf: read, validate and write GGUF files (versions 2 and 3), including split models.
 *
 * Reading maps each file read-only and validates everything before anything is used: magic,
 * version, counts, string and array lengths, dims, type ids, size arithmetic overflow, offsets and
 * sizes inside the file, alignment, duplicate keys and names. Metadata is decoded into owned memory
 * (strings NUL-terminated); tensor data stays in the mapping. A failure names the file, the item and
 * what was expected. See docs/gguf.md.
 */
#ifndef INFER_GGUF_H
#define INFER_GGUF_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
};

#define GGUF_MAX_NAME 64 /* tensor names are shorter than this (ggml's GGML_MAX_NAME, with the NUL) */
#define GGUF_DEFAULT_ALIGNMENT 32

struct gguf_str {
    uint64_t len;
    const char *s; /* NUL-terminated copy; may contain NULs inside */
};

struct gguf_value {
    enum gguf_vtype type;      /* GGUF_ARR for arrays */
    enum gguf_vtype elem_type; /* arrays: the element type; else == type */
    uint64_t n;                /* arrays: element count; else 1 */
    union {
        uint64_t u; /* U8..U64, BOOL (0/1) */
        int64_t i;  /* I8..I64 (sign-extended) */
        double f;   /* F32, F64 */
        struct gguf_str str;
        const void *arr; /* arrays: n native elements (uint8_t, int32_t, float, ..., struct gguf_str) */
    } v;
};

struct gguf_kv {
    const char *key;
    struct gguf_value val;
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME];
    int32_t type;      /* ggml type id with a known layout */
    int32_t n_dims;    /* as stored, 0..4 */
    int64_t ne[4];     /* missing dims are 1 */
    uint64_t offset;   /* relative to its file's data section */
    uint64_t nbytes;   /* ne0/blck * block_bytes * ne1 * ne2 * ne3 */
    const void *data;  /* inside the mapping of file `split` */
    int32_t split;
};

struct gguf_file {
    char *path;            /* first file's path */
    uint32_t version;      /* of the first file */
    uint32_t alignment;
    int64_t n_kv;
    struct gguf_kv *kv;    /* (n_kv); the first file's metadata (split files carry only split.*) */
    int64_t n_tensors;
    struct gguf_tensor *tensors; /* (n_tensors), all splits in order */
    int32_t n_splits;
    /* private: one mapping per split */
    struct gguf_map *maps;
    void *arena; /* owned metadata memory */
};

/* Opens path; if its name is <prefix>-00001-of-0000N.gguf (or it holds split.count > 1) all N parts
 * are opened and their tensors concatenated. Gives *out. */
infer_status gguf_open(const char *path, struct gguf_file **out);
/* Parses a complete file image held in memory (borrowed for the result's lifetime); name is used in
 * messages. Used by the fuzzer and the malformed-file corpus. */
infer_status gguf_open_memory(const void *data, size_t size, const char *name, struct gguf_file **out);
void gguf_close(struct gguf_file *f); /* NULL is a no-op */
/* Releases the memory of t's whole pages in a file mapping (its data stays readable: it is read from the file
 * again if touched); a no-op for a file held in memory (gguf_open_memory). */
void gguf_drop_pages(const struct gguf_file *f, const struct gguf_tensor *t);

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);
int64_t gguf_find_tensor_index(const struct gguf_file *f, const char *name); /* -1 if absent */

/* Typed getters: INFER_E_FORMAT naming the key if it is absent or of another type (integer getters
 * accept any integer type whose value fits). */
infer_status gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
infer_status gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
infer_status gguf_get_str(const struct gguf_file *f, const char *key, const char **out);
/* As above, but absent keys leave *out untouched and return INFER_OK. */
infer_status gguf_get_u32_opt(const struct gguf_file *f, const char *key, uint32_t *out);
infer_status gguf_get_f32_opt(const struct gguf_file *f, const char *key, float *out);

const char *gguf_vtype_name(enum gguf_vtype t);
/* Formats a value as text the way `llm-gguf info` prints it (arrays: at most max_elems, then "..."). */
int gguf_value_format(const struct gguf_value *v, char *buf, size_t cap, int max_elems);

/* ---- writing ---- */

struct gguf_writer;

/* Fills dst (nbytes) with the data of tensor `index` (in add order). */
typedef infer_status (*gguf_fill_fn)(void *user, int64_t index, void *dst, size_t nbytes);

infer_status gguf_writer_create(struct gguf_writer **out);
void gguf_writer_free(struct gguf_writer *w);
/* Setting a key again replaces its value. Strings and arrays are copied. */
infer_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
infer_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
infer_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
infer_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
infer_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v);
infer_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Generic: any scalar or array value (struct gguf_str elements for string arrays). */
infer_status gguf_writer_set(struct gguf_writer *w, const char *key, const struct gguf_value *v);
infer_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                                 const void *elems, uint64_t n);
infer_status gguf_writer_set_str_arr(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Adds a tensor (n_dims 1..4). data is borrowed until gguf_writer_write, or NULL to be produced by
 * the fill callback at write time (so multi-GB models stream through one buffer). */
infer_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, int32_t type, int n_dims,
                                    const int64_t *ne, const void *data);
/* Writes a v3 file with the given alignment (general.alignment is written when it is not 32). */
infer_status gguf_writer_write(struct gguf_writer *w, const char *path, gguf_fill_fn fill, void *user);
/* The same file without writing tensor data: the header and tensor infos, then the file extended to its full
 * length with ftruncate, so the data reads as zeros and takes no disk where the filesystem has holes (a
 * 20 GB model's shape in a few MB, for planning and loader tests). Tensor data given to add_tensor is ignored. */
infer_status gguf_writer_write_sparse(struct gguf_writer *w, const char *path);

#endif
