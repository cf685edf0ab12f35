/* fuzz-gguf: libFuzzer entry for the GGUF reader.
 *
 * Parses the input with gguf_open_memory (the same code path as gguf_open, without mmap), then walks
 * everything a caller may touch: every key and value (formatted, so string and array payloads are
 * read end to end) and every tensor, reading the first and last byte of its data, so ASan catches a
 * tensor that the reader let point outside the image. Built by `make fuzz`; seeds in seeds/.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f = NULL;
    if (gguf_open_memory(data, size, "fuzz.gguf", &f) != INFER_OK) return 0;
    static char buf[512];
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        sink ^= (uint8_t)kv->key[strlen(kv->key)];
        gguf_value_format(&kv->val, buf, sizeof buf, 64);
        if (kv->val.type == GGUF_ARR && kv->val.elem_type == GGUF_STR && kv->val.n > 0) {
            const struct gguf_str *s = (const struct gguf_str *)kv->val.v.arr + (kv->val.n - 1);
            sink ^= (uint8_t)s->s[s->len]; /* the NUL after the last string */
        }
        if (gguf_find_kv(f, kv->key) != kv) __builtin_trap(); /* keys are unique */
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->nbytes == 0) continue;
        const uint8_t *p = t->data;
        sink ^= p[0];
        sink ^= p[t->nbytes - 1];
        if (gguf_find_tensor_index(f, t->name) != i) __builtin_trap(); /* names are unique */
    }
    (void)sink;
    gguf_close(f);
    return 0;
}
