/* cuda_fp16.h (emulator): __half and the conversions the kernels use, IEEE binary16 with round to nearest
 * even, written here from the IEEE 754 definition (not from the project's own converters, so the two can
 * check each other). */
#ifndef INFER_EMU_CUDA_FP16_H
#define INFER_EMU_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t __x;
};
struct __half2 {
    __half x, y;
};

static inline uint16_t emu_f32_to_f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN stays NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) { /* below the smallest normal half: a subnormal (or 0) */
        const int shift = 126 - (int)(a >> 23);      /* 14 + (113 - exponent) */
        if (shift > 24) return (uint16_t)sign;         /* below half the smallest subnormal */
        const uint32_t m = (a & 0x7FFFFFu) | 0x800000u; /* the float's significand with its hidden bit */
        const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        const uint32_t r = q + (rem > halfway || (rem == halfway && (q & 1)));
        return (uint16_t)(sign | r);
    }
    const uint32_t q = (a - 0x38000000u) >> 13, rem = a & 0x1FFFu; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (q + (rem > 0x1000u || (rem == 0x1000u && (q & 1)))));
}

static inline float emu_f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t u;
    if (e == 0x1F) u = sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0);
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else {
        float f = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __half __float2half_rn(float f) { return __half{emu_f32_to_f16_bits(f)}; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return emu_f16_bits_to_f32(h.__x); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }

#endif
