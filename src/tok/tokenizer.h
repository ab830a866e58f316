/* tokenizer.h — Hugging Face tokenizer.json BPE tokenizers in C: byte-level BPE (GPT-2,
 * Llama 3, SmolLM, Qwen2 with its NFC normalizer) and SentencePiece-style BPE with byte
 * fallback (Llama 2, Mistral, TinyLlama: the legacy Prepend/Replace normalizer or the
 * Metaspace pre-tokenizer), giving exactly the ids the tokenizers library gives.
 * [Note: tokenizer.json support] in tok_load.c lists what is read and what is refused. */
#ifndef PP_TOK_TOKENIZER_H
#define PP_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct Tokenizer Tokenizer;

/* A growable id array the encoder appends to. Zero-initialize; tok_ids_free frees it.
 * The caller may set n = 0 to reuse the memory. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} TokIds;

/* A growable byte buffer the decoder appends to, NUL-terminated after len bytes.
 * Zero-initialize; tok_text_free frees it. */
typedef struct {
    char *p;
    size_t len, cap;
} TokText;

void tok_ids_free(TokIds *v);
void tok_text_free(TokText *b);

/* Read the tokenizer.json at `path` (jansson) and build the tokenizer: vocabulary and
 * merges in hash maps, regexes compiled by PCRE2 (UTF, UCP, JIT where it compiles).
 * Returns PP_OK with *out (tok_free frees it); or PP_EUSAGE with *out = NULL and a
 * message naming the file and the field: "PATH: not valid JSON: REASON at line L,
 * column C", "PATH: model.type is \"WordPiece\": pptrain reads only BPE tokenizers",
 * "PATH: pre_tokenizer.pretokenizers[1].type \"Digits\" is not supported (...)",
 * "PATH: model.merges[7] \"a b\": \"b\" is not in model.vocab". */
int tok_load(const char *path, Tokenizer **out, char *err, size_t errlen);

void tok_free(Tokenizer *t);

/* tok_encode's flags. By default encode is the library's tokenizer.encode(text).ids
 * (add_special_tokens=True): the post-processor's template adds its special tokens
 * (Llama 3's <|begin_of_text|>, Llama 2's <s>; GPT-2's adds none). */
#define TOK_ENCODE_NO_SPECIAL 1u /* encode(text, add_special_tokens=False) */

/* Append the ids of text[len] to out. text is UTF-8; each maximal ill-formed
 * subsequence in it is read as one U+FFFD, which is what the library encodes for such
 * bytes decoded by Python's bytes.decode("utf-8", errors="replace") (the library itself
 * takes only valid Unicode). Added tokens in the text (special or not) are split out
 * first and become their own ids, as the library does. Thread-safe: many threads may
 * encode with one tokenizer at once (each call has its own scratch memory). Returns the
 * number of ids appended. Dies only when memory runs out or a pattern cannot be matched
 * (tok_encode_checked's message). O(n log n) in a word's length: merges are found through a
 * hash map keyed by the pair and applied from a min-heap on their rank. */
size_t tok_encode(const Tokenizer *t, const char *text, size_t len, unsigned flags, TokIds *out);

/* tok_encode, with an error instead of dying where a pre-tokenizer pattern cannot be
 * matched over the text: PCRE2 fails (its heap or recursion limits), or the pattern has
 * used its budget of match steps, about 256 per byte of the text ([Note: regex budget] in
 * tok_encode.c: a pattern that backtracks catastrophically ends, with a message, instead
 * of running for hours). Returns PP_OK, or PP_EUSAGE with "PATH: the pre-tokenizer pattern
 * \"P\" ... on a text of N bytes: REASON" and out as it was. */
int tok_encode_checked(const Tokenizer *t, const char *text, size_t len, unsigned flags,
                       TokIds *out, char *err, size_t errlen);

/* tok_decode's flags. */
#define TOK_DECODE_SKIP_SPECIAL 1u /* decode(ids, skip_special_tokens=True) */

/* Append to out the text of ids[n] as the library's tokenizer.decode(ids,
 * skip_special_tokens=...) gives it: the tokens' strings (added tokens' contents) through
 * the decoder (ByteLevel's byte map, or Replace/ByteFallback/Fuse/Strip), bytes that do
 * not form UTF-8 as U+FFFD as the library writes them. decode(encode(x)) == x for valid
 * UTF-8 x with SKIP_SPECIAL, or with NO_SPECIAL on both sides. Returns PP_OK, or
 * PP_EUSAGE with "token id N is not in the tokenizer (ids are 0..V-1)" (the library
 * would drop it silently) and out unchanged. */
int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, unsigned flags, TokText *out,
               char *err, size_t errlen);

/* 1 + the largest id of the vocabulary or the added tokens: the rows an embedding needs. */
int32_t tok_vocab_size(const Tokenizer *t);

/* The id of the token whose string is name ("<|endoftext|>", "<s>"): an added token's
 * content or a model vocabulary entry; -1 if there is none. */
int32_t tok_token_id(const Tokenizer *t, const char *name);

/* The string of token id (added token content or vocabulary entry, as the file has it:
 * byte-level tokens in their mapped form, "Ġthe"), its length in *len; NULL if the id
 * has none. */
const char *tok_token_str(const Tokenizer *t, int32_t id, size_t *len);

#endif
