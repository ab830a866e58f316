/* prepare.h — `pptrain prepare-data`: documents (text files, or JSONL records) through a
 * Hugging Face tokenizer.json, or byte-level, into llm.c token files (one per split, or
 * shards), encoded by worker threads in a fixed order, streamed, written all or nothing. */
#ifndef PP_TOK_PREPARE_H
#define PP_TOK_PREPARE_H

/* `pptrain prepare-data (--text FILE... | --jsonl FILE... --field NAME) --out PATH
 * [--tokenizer FILE] [--doc-token TOKEN] [--val-fraction F] [--shard-tokens N]
 * [--threads N]` (argv[0] is "prepare-data"; options also as --opt=value). What it writes
 * and in which order: [Note: prepare-data] in prepare.c. Prints one line per file written
 * and the throughput on stdout, a progress line on stderr. Returns PP_OK; PP_EUSAGE with a
 * message on stderr for bad arguments, an input that cannot be opened, a tokenizer.json
 * tok_load refuses, a JSONL line that is not a record with the field as a string (naming
 * FILE:LINE), an empty corpus (no document with text), a split left without tokens, a file
 * of more tokens than its int32 count holds; PP_ERUNTIME for an input that fails while
 * read or an output that cannot be written. On any error nothing is written: every final
 * name keeps what it held before. SIGINT, SIGTERM or SIGHUP likewise removes what the run
 * wrote, then the process dies of the signal (exit status 128 + its number). */
int prep_main(int argc, char **argv);

#endif
