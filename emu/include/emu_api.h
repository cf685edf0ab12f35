/* emu_api.h: what a test or a tool may ask of the CUDA emulator itself (built with INFER_EMU only).
 * Plain C. Counters are per emulated device, since the process started or the last reset. */
#ifndef INFER_EMU_API_H
#define INFER_EMU_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct emu_counters {
    uint64_t launches;       /* kernel launches made through the API (launch_kernel), captures included */
    uint64_t kernels;        /* kernels run, graph nodes included */
    uint64_t graph_launches; /* cudaGraphLaunch calls */
    uint64_t syncs;          /* host waits: stream, event and device synchronisation, blocking copies */
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes; /* copied to, from and within the device */
    uint64_t allocs;         /* cudaMalloc calls that succeeded */
    uint64_t bytes_in_use;   /* device memory held now */
};

/* Thread orders (INFER_EMU_ORDER): check (default) runs the first runs of each launch site and shape in
 * forward, reverse and a random order and compares everything they wrote; forward, reverse and random
 * run every launch in that one order. */
enum { EMU_ORDER_CHECK = 0, EMU_ORDER_FORWARD = 1, EMU_ORDER_REVERSE = 2, EMU_ORDER_RANDOM = 3 };

int emu_device_count(void);
void emu_counters_get(int device, struct emu_counters *out);
void emu_counters_reset(void);
/* Bugs the emulator has reported (printed on stderr as "emu: ...") since the process started. */
uint64_t emu_reports(void);
/* The report count is also kept per launch site: the last report's text, or "" when none. */
const char *emu_last_report(void);

#ifdef __cplusplus
}
#endif
#endif
