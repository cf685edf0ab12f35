/* types: the public type queries of include/infer.h, thin wrappers over the quant type table. */
#include "quant.h"

INFER_API const char *infer_type_name(int32_t type) {
    const struct quant_type *t = quant_type(type);
    return t ? t->name : NULL;
}

INFER_API int32_t infer_type_block_size(int32_t type) {
    const struct quant_type *t = quant_type(type);
    return t ? t->blck : 0;
}

INFER_API int32_t infer_type_block_bytes(int32_t type) {
    const struct quant_type *t = quant_type(type);
    return t ? t->bytes : 0;
}

INFER_API int infer_type_supported(int32_t type) {
    const struct quant_type *t = quant_type(type);
    return t ? t->supported : 0;
}
