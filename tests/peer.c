/* peer: locating and loading the llama.cpp oracle. */
#include "peer.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PEER_SUBDIR "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"

const char *peer_bin_dir(void) {
    static char dir[4096];
    if (dir[0]) return dir;
    const char *root = getenv("INFER_PEER_DIR");
    if (!root) root = "build/peer";
    snprintf(dir, sizeof dir, "%s%s", root, PEER_SUBDIR);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/libggml-base.so", dir);
    if (access(probe, R_OK) != 0) {
        dir[0] = 0;
        return NULL;
    }
    return dir;
}

void *peer_open(const char *file, const char **why) {
    static struct { char file[128]; void *h; } cache[16];
    for (int i = 0; i < 16; i++)
        if (cache[i].h && strcmp(cache[i].file, file) == 0) return cache[i].h;
    const char *dir = peer_bin_dir();
    if (!dir) {
        if (why) *why = "llama.cpp peer not installed (run `make peer`)";
        return NULL;
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        if (why) *why = dlerror();
        return NULL;
    }
    for (int i = 0; i < 16; i++)
        if (!cache[i].h) {
            snprintf(cache[i].file, sizeof cache[i].file, "%s", file);
            cache[i].h = h;
            break;
        }
    return h;
}

void *peer_sym(void *handle, const char *name) { return handle ? dlsym(handle, name) : NULL; }
