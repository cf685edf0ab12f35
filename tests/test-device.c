/* test-device: the public device API (infer_device_*) and the copy kernel behind its bandwidth probe.
 * Without a device (or built without CUDA) every call must refuse cleanly: count 0 with a reason,
 * INFER_E_DEVICE from the rest. With one: the name is the runtime's, the memory figures are ordered,
 * cuda_copy moves exactly the bytes asked for on both its paths (aligned 16-byte words, unaligned
 * bytes) and nothing around them, and the probe's bandwidth lies within a factor of what the copy
 * engine (cudaMemcpyAsync device to device, timed here independently) reaches. Without a device the
 * test exits 77 (skipped) once the refusals have passed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "t.h"

static void test_no_device(const char *why) {
    char name[64] = "untouched";
    uint64_t total = 1, avail = 1;
    double bw = 1;
    T_CHECK(infer_device_count() == 0 && strstr(infer_last_error(), "no usable CUDA device"),
            "count 0 with a reason: %s", infer_last_error());
    T_CHECK(infer_device_name(0, name, sizeof name) == -1 && strstr(infer_last_error(), why),
            "name of device 0 is refused: %s", infer_last_error());
    T_CHECK(infer_device_memory(0, &total, &avail) == INFER_E_DEVICE && total == 0 && avail == 0,
            "memory of device 0 is refused and zeroed: %s", infer_last_error());
    T_CHECK(infer_device_bandwidth(0, &bw) == INFER_E_DEVICE && bw == 0,
            "bandwidth of device 0 is refused and zeroed: %s", infer_last_error());
    T_CHECK(infer_device_bandwidth(0, NULL) == INFER_E_ARG, "bandwidth without an out pointer");
}

#ifdef INFER_CUDA
/* cuda_copy of n bytes from src + so to dst + doff in 2 MiB buffers; 1 if exactly those bytes changed. */
static int copy_case(uint8_t *dev_src, uint8_t *dev_dst, const uint8_t *src, uint8_t *back, size_t cap, size_t soff,
                     size_t doff, size_t n) {
    if (cudaMemset(dev_dst, 0xA5, cap) != cudaSuccess) return 0;
    if (cuda_copy(dev_dst + doff, dev_src + soff, n, 0) != cudaSuccess) return 0;
    if (cudaMemcpy(back, dev_dst, cap, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    for (size_t i = 0; i < cap; i++) {
        const uint8_t want = i >= doff && i < doff + n ? src[i - doff + soff] : 0xA5;
        if (back[i] != want) {
            printf("byte %zu: %d, expected %d (src +%zu, dst +%zu, %zu bytes)\n", i, back[i], want, soff, doff, n);
            return 0;
        }
    }
    return 1;
}

static void test_copy(void) {
    const size_t cap = (size_t)2 << 20;
    uint8_t *src = malloc(cap), *back = malloc(cap), *ds = NULL, *dd = NULL;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; src && i < cap; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (uint8_t)(x >> 32);
    }
    int ok = src && back && cudaMalloc((void **)&ds, cap) == cudaSuccess &&
             cudaMalloc((void **)&dd, cap) == cudaSuccess &&
             cudaMemcpy(ds, src, cap, cudaMemcpyHostToDevice) == cudaSuccess;
    T_CHECK(ok, "copy test buffers");
    if (ok) {
        T_CHECK(copy_case(ds, dd, src, back, cap, 0, 0, cap), "aligned copy of 2 MiB");
        T_CHECK(copy_case(ds, dd, src, back, cap, 16, 48, cap - 4096 - 16), "aligned copy, not a whole block");
        T_CHECK(copy_case(ds, dd, src, back, cap, 5, 3, 1000003), "unaligned copy of 1000003 bytes");
        T_CHECK(copy_case(ds, dd, src, back, cap, 0, 16, 24), "aligned pointers, length not a multiple of 16");
        T_CHECK(copy_case(ds, dd, src, back, cap, 0, 0, 0), "0 bytes change nothing");
        T_CHECK(cuda_copy(NULL, ds, 16, 0) == cudaErrorInvalidValue, "NULL destination is an error");
    }
    cudaFree(ds);
    cudaFree(dd);
    free(src);
    free(back);
}

/* The copy engine's device-to-device rate on 2 x 256 MiB, best of 10, read + write bytes per second. */
static double memcpy_bandwidth(void) {
#ifdef INFER_EMU
    const size_t n = (size_t)4 << 20;
#else
    const size_t n = (size_t)256 << 20;
#endif
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = 0;
    if (cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess && cudaMemset(a, 1, n) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess)
        for (int r = 0; r < 11; r++) {
            float ms = 0;
            if (cudaEventRecord(e0, 0) != cudaSuccess ||
                cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0) != cudaSuccess ||
                cudaEventRecord(e1, 0) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
                break;
            if (r > 0 && ms > 0 && (best == 0 || ms < best)) best = ms;
        }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best > 0 ? 2.0 * (double)n / (1e-3 * best) : 0;
}

static void test_device(int n) {
    char want[320], name[320], small[8];
    size_t mem = 0;
    T_CHECK(infer_device_count() == n, "infer_device_count agrees with the runtime (%d)", n);
    T_CHECK(device_describe(0, want, sizeof want, &mem) == INFER_OK, "describe device 0");
    const int32_t len = infer_device_name(0, NULL, 0);
    T_CHECK(len == (int32_t)strlen(want) && infer_device_name(0, name, sizeof name) == len && !strcmp(name, want),
            "name '%s' (%d), runtime says '%s'", name, len, want);
    T_CHECK(infer_device_name(0, small, sizeof small) == len && strlen(small) == sizeof small - 1 &&
                !strncmp(small, want, sizeof small - 1),
            "a short buffer gets a truncated name and the full length");
    T_CHECK(infer_device_name(n, name, sizeof name) == -1 && strstr(infer_last_error(), "no such device"),
            "device %d does not exist: %s", n, infer_last_error());
    uint64_t total = 0, avail = 0;
    /* note: cudaMemGetInfo's total may differ a little from the properties' (reserved memory) */
    T_CHECK(infer_device_memory(0, &total, &avail) == INFER_OK && total > 0.9 * (double)mem &&
                total <= 1.01 * (double)mem && avail > 0 && avail <= total,
            "memory: %llu free of %llu (runtime: %zu)", (unsigned long long)avail, (unsigned long long)total, mem);
    test_copy();
    double bw = 0;
    const infer_status st = infer_device_bandwidth(0, &bw);
    const double ref = memcpy_bandwidth();
    printf("device 0: %s; copy kernel %.0f GB/s, cudaMemcpy %.0f GB/s (read + write)\n", want, bw / 1e9, ref / 1e9);
#ifdef INFER_EMU /* the emulator's speeds mean nothing: only that the probe ran */
    T_CHECK(st == INFER_OK && bw > 0 && ref > 0, "bandwidth probe ran on the emulator: %s", st ? infer_last_error() : "");
#else
    T_CHECK(st == INFER_OK && bw > 1e10 && bw < 2e13, "bandwidth %.3g B/s is plausible: %s", bw,
            st ? infer_last_error() : "");
    T_CHECK(ref > 0 && bw > 0.6 * ref && bw < 1.5 * ref, "copy kernel %.0f GB/s within [0.6, 1.5] x cudaMemcpy's %.0f",
            bw / 1e9, ref / 1e9);
#endif
    T_CHECK(infer_device_bandwidth(n, &bw) == INFER_E_DEVICE && bw == 0, "bandwidth of a missing device");
}
#endif

int main(void) {
    const char *why = NULL;
    const int n = device_count(&why);
    if (n == 0) {
        test_no_device(why);
        T_SKIP("no CUDA device: %s", why);
        const int rc = t_done();
        return rc ? rc : 77; /* the refusals passed; the device checks did not run */
    }
#ifdef INFER_CUDA
    test_device(n);
#endif
    return t_done();
}
