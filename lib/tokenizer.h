/* tokenizer: text <-> token ids from a GGUF file's tokenizer.ggml.* metadata, matching llama.cpp.
 *
 * Models: byte-level BPE (tokenizer.ggml.model "gpt2") with the pre-tokenizers gpt-2, llama-bpe
 * (Llama 3), qwen2 (Qwen2/Qwen3) and qwen35 (Qwen3.5); SPM ("llama") with byte fallback.
 * See docs/tokenizer.md. A loaded tokenizer is immutable and may be
 * shared across threads; encode allocates its scratch per call.
 */
#ifndef INFER_TOKENIZER_H
#define INFER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "status.h"

/* Token attributes (llama.cpp's llama_token_attr bits). */
enum {
    TOKEN_ATTR_UNKNOWN = 1 << 0,
    TOKEN_ATTR_UNUSED = 1 << 1,
    TOKEN_ATTR_NORMAL = 1 << 2,
    TOKEN_ATTR_CONTROL = 1 << 3,
    TOKEN_ATTR_USER_DEFINED = 1 << 4,
    TOKEN_ATTR_BYTE = 1 << 5,
    TOKEN_ATTR_LSTRIP = 1 << 7,
    TOKEN_ATTR_RSTRIP = 1 << 8,
};

enum tokenizer_kind { TOKENIZER_SPM = 1, TOKENIZER_BPE = 2 };

struct tokenizer;

/* Reads the tokenizer from f (borrowed only during the call). Gives *out; INFER_E_UNSUPPORTED for
 * models or pre-tokenizers not listed above, INFER_E_FORMAT for malformed metadata. */
infer_status tokenizer_load(const struct gguf_file *f, struct tokenizer **out);
void tokenizer_free(struct tokenizer *t); /* NULL is a no-op */

enum tokenizer_kind tokenizer_kind(const struct tokenizer *t);
int32_t tokenizer_n_vocab(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); /* -1 if none */
int32_t tokenizer_eos(const struct tokenizer *t); /* -1 if none */
int tokenizer_is_eog(const struct tokenizer *t, int32_t id);
uint32_t tokenizer_attr(const struct tokenizer *t, int32_t id); /* 0 for an invalid id */
/* The token's text as stored (borrowed for t's lifetime); NULL for an invalid id. */
const char *tokenizer_text(const struct tokenizer *t, int32_t id, uint32_t *len);

/* Tokenizes text[0..len). add_special: BOS/EOS per the metadata. parse_special: control and
 * unknown tokens written in the text become their ids (user-defined ones always do).
 * Writes min(count, cap) ids to out and returns count (the snprintf rule), or -1 on failure
 * (out of memory, or len over 1 GiB), with infer_last_error() set. */
int32_t tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                         int32_t *out, int32_t cap);

/* The bytes of one token: special = 1 renders control/unknown tokens; lstrip skips up to that many
 * leading spaces. Writes min(n, cap) bytes (no NUL) and returns n; -1 for an invalid id. */
int32_t tokenizer_token_to_piece(const struct tokenizer *t, int32_t id, char *buf, int32_t cap, int32_t lstrip,
                                 int special);

/* Whole-sequence detokenisation as llama_detokenize: remove_special drops a leading BOS / trailing
 * EOS the tokenizer adds; unparse_special renders control tokens; the SPM leading space and the BPE
 * clean-up of spaces are applied. Writes min(n, cap) bytes, returns n; -1 on failure. */
int32_t tokenizer_detokenize(const struct tokenizer *t, const int32_t *ids, int32_t n_ids, char *buf, int32_t cap,
                             int remove_special, int unparse_special);

/* Streaming detokenisation (infer_token_stream of infer.h: up to 3 held-back bytes): pieces are
 * emitted as they come, except that a trailing incomplete UTF-8 sequence is held back until the
 * bytes that complete it arrive (or flush). The concatenation of all outputs equals the
 * concatenation of the token pieces. Zero-initialise. */
/* Appends token id; writes the bytes now complete and returns their count. If cap is too small
 * nothing is consumed and the needed count is returned (call again with a bigger buffer); -1 for an
 * invalid id. A buffer of piece length + 4 always suffices. */
int32_t tokenizer_stream_put(const struct tokenizer *t, infer_token_stream *s, int32_t id, int special, char *buf,
                             int32_t cap);
/* Writes whatever is held back (an incomplete sequence at the end of the stream) and resets s. */
int32_t tokenizer_stream_flush(infer_token_stream *s, char *buf, int32_t cap);

#endif
