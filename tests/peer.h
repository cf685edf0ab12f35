/* peer: finds and opens the real llama.cpp (the npm package @node-llama-cpp/linux-x64, installed by
 * `make peer` into build/peer), the oracle our conformance tests compare against. */
#ifndef TEST_PEER_H
#define TEST_PEER_H

/* The folder holding libllama / libggml*.so ($INFER_PEER_DIR/node_modules/...), or NULL. */
const char *peer_bin_dir(void);
/* dlopen()s a library of that folder by file name ("libggml-base.so"); NULL (and *why set) if the peer
 * is not installed or the library does not load. Handles are cached and never closed. */
void *peer_open(const char *file, const char **why);
/* dlsym in a handle from peer_open; NULL if absent. */
void *peer_sym(void *handle, const char *name);

#endif
