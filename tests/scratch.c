/* scratch: see scratch.h. */
#include "scratch.h"

#include <stdio.h>

char tmpdir[256];

const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}
