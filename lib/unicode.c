/* unicode: class lookup, lowercase, lenient UTF-8 and the GPT-2 byte mapping. See unicode.h. */
#include "unicode.h"

uint32_t unicode_flags(uint32_t cp) {
    if (cp > 0x10FFFF) return UNICODE_UNDEFINED;
    /* the last run whose first <= cp; unicode_ranges[0].first == 0 */
    int lo = 0, hi = unicode_ranges_count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (unicode_ranges[mid].first <= cp) lo = mid;
        else hi = mid - 1;
    }
    return unicode_ranges[lo].flags;
}

uint32_t unicode_tolower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    int lo = 0, hi = unicode_lower_count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (unicode_lower[mid].from == cp) return unicode_lower[mid].to;
        if (unicode_lower[mid].from < cp) lo = mid + 1;
        else hi = mid - 1;
    }
    return cp;
}

uint32_t unicode_utf8_decode(const uint8_t *s, size_t n, size_t *i) {
    size_t p = *i;
    uint8_t b = s[p];
    int len = b < 0x80 ? 1 : b < 0xC0 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 0;
    if (len == 0 || p + len > n) goto bad;
    uint32_t cp = len == 1 ? b : (uint32_t)(b & (0x7F >> len));
    for (int k = 1; k < len; k++) {
        if ((s[p + k] & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (s[p + k] & 0x3F);
    }
    if (cp > 0x10FFFF) goto bad; /* llama.cpp cannot re-encode these either */
    *i = p + len;
    return cp;
bad:
    *i = p + 1;
    return 0xFFFD;
}

int unicode_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Printable Latin-1 bytes map to themselves; the other 68 bytes, in increasing order, to U+0100.. */
static int byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t unicode_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    int k = 0;
    for (int c = 0; c < b; c++) k += !byte_is_printable(c);
    return 0x100 + (uint32_t)k;
}

int unicode_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp > 0x143) return -1;
    int k = (int)(cp - 0x100);
    for (int c = 0; c < 256; c++)
        if (!byte_is_printable(c) && k-- == 0) return c;
    return -1;
}
