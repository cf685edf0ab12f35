/* A user's program: includes only <infer.h>, links the installed library, and checks that the
 * public API answers (type table, status strings, a clean error for a missing file). */
#include <infer.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    infer_model *m = (infer_model *)1;
    infer_status s = infer_model_load("/nonexistent/model.gguf", NULL, &m);
    if (s != INFER_E_IO || m != NULL || strstr(infer_last_error(), "/nonexistent/model.gguf") == NULL) {
        printf("consumer: expected INFER_E_IO naming the file, got %s: %s\n", infer_status_str(s), infer_last_error());
        return 1;
    }
    if (strcmp(infer_type_name(INFER_TYPE_Q4_K), "Q4_K") != 0 || infer_type_block_bytes(INFER_TYPE_Q4_K) != 144) {
        printf("consumer: type table wrong\n");
        return 1;
    }
    printf("consumer: ok (%s)\n", infer_last_error());
    return 0;
}
