/* fuzz-gguf: libFuzzer entry for the GGUF parser. Parses the input as a whole file image, then
 * touches everything a caller may touch: every key and value (formatted), every tensor's first and
 * last data byte. Any crash, sanitizer report, leak or hang is a bug in lib/gguf.c.
 *   make fuzz FUZZ_TIME=600          (seeds in tests/fuzz/seeds/, corpus in build/fuzz-corpus/) */
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f = NULL;
    if (gguf_open_memory(data, size, "fuzz.gguf", &f) != INFER_OK) return 0;
    char buf[256];
    volatile uint32_t sink = 0;
    for (int64_t i = 0; i < f->n_kv; i++) {
        sink += (uint32_t)gguf_value_format(&f->kv[i].val, buf, sizeof buf, 16);
        sink += (uint32_t)(gguf_find_kv(f, f->kv[i].key) != NULL);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        sink += (uint32_t)(gguf_find_tensor(f, t->name) == t);
    }
    (void)sink;
    gguf_close(f);
    return 0;
}
