/* byte_level.c - the GPT-2 byte-level alphabet and the UTF-8 handling that
 * the tokenizer needs to see text exactly as llama.cpp does.
 *
 * Byte-level BPE vocabularies store tokens in an alphabet where each of the
 * 256 byte values is one printable code point: bytes 0x21-0x7E, 0xA1-0xAC
 * and 0xAE-0xFF stand for themselves, the other 68 bytes (in increasing
 * order) for U+0100, U+0101, ... (so space is U+0120 'Ġ').
 *
 * llama.cpp decodes input text leniently before pre-tokenizing: a byte that
 * does not start a decodable sequence becomes U+FFFD, overlong forms are
 * accepted (and re-encoded in their short form), surrogates pass through.
 * mt_utf8_sanitize reproduces that, so invalid UTF-8 tokenizes as U+FFFD
 * exactly like llama.cpp instead of going through BPE byte by byte. */
#include "vocab_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- alphabet */

typedef struct bytelevel_tables {
    char enc[256][2];
    int enc_len[256];
    int16_t dec[0x100 + 68]; /* code point -> byte, -1 if none */
} bytelevel_tables;

static bytelevel_tables g_bl;
static pthread_once_t g_bl_once = PTHREAD_ONCE_INIT;

static bool stands_for_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void bytelevel_build(void) {
    bytelevel_tables t;
    for (size_t i = 0; i < sizeof t.dec / sizeof t.dec[0]; i++) t.dec[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = stands_for_itself(b) ? (uint32_t)b : 0x100u + (uint32_t)extra++;
        char buf[4];
        int n = mt_utf8_encode(cp, buf);
        memcpy(t.enc[b], buf, (size_t)n);
        t.enc_len[b] = n;
        t.dec[cp] = (int16_t)b;
    }
    g_bl = t;
}

static void bytelevel_init(void) {
    pthread_once(&g_bl_once, bytelevel_build);
}

const char *mt_bytelevel_encode(uint8_t b, int *n) {
    bytelevel_init();
    *n = g_bl.enc_len[b];
    return g_bl.enc[b];
}

int mt_bytelevel_decode(uint32_t cp) {
    bytelevel_init();
    if (cp >= sizeof g_bl.dec / sizeof g_bl.dec[0]) return -1;
    return g_bl.dec[cp];
}

/* ---------------------------------------------------------------- UTF-8 */

size_t mt_utf8_decode_lax(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t need;
    uint32_t c;
    if ((b & 0x40) == 0) goto invalid; /* stray continuation byte */
    if ((b & 0x20) == 0) {
        need = 2;
        c = b & 0x1f;
    } else if ((b & 0x10) == 0) {
        need = 3;
        c = b & 0x0f;
    } else if ((b & 0x08) == 0) {
        need = 4;
        c = b & 0x07;
    } else {
        goto invalid;
    }
    if (len < need) goto invalid;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) goto invalid;
        c = (c << 6) | (s[i] & 0x3f);
    }
    /* llama.cpp would throw while re-encoding such a code point; we treat
     * the lead byte as invalid instead. */
    if (c > 0x10FFFF) goto invalid;
    *cp = c;
    return need;
invalid:
    *cp = 0xFFFD;
    return 1;
}

int mt_utf8_encode(uint32_t cp, char *out) {
    if (cp <= 0x7f) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp <= 0x7ff) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp <= 0xffff) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

int mt_utf8_sanitize(const char *text, size_t len, char **out, size_t *out_len, char **regex_text) {
    *out = NULL;
    *regex_text = NULL;
    if (len > (SIZE_MAX - 1) / 3) return -1;
    char *o = malloc(3 * len + 1);
    if (!o) return -1;
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    bool surrogates = false;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t used = mt_utf8_decode_lax(s + i, len - i, &cp);
        if (used == 1 && cp < 0x80) {
            o[n++] = (char)cp; /* fast path for ASCII */
        } else {
            n += (size_t)mt_utf8_encode(cp, o + n);
            if (cp >= 0xD800 && cp <= 0xDFFF) surrogates = true;
        }
        i += used;
    }
    o[n] = 0;
    *out = o;
    *out_len = n;
    if (!surrogates) {
        *regex_text = o;
        return 0;
    }
    char *r = malloc(n + 1);
    if (!r) {
        free(o);
        *out = NULL;
        return -1;
    }
    memcpy(r, o, n + 1);
    /* A surrogate is ED A0..BF 80..BF; U+FFF0 (unassigned) is EF BF B0. Both
     * fall in no class our regexes name, so the splits do not change. */
    for (size_t i = 0; i + 2 < n; i++)
        if ((unsigned char)r[i] == 0xED && ((unsigned char)r[i + 1] & 0xE0) == 0xA0) {
            r[i] = (char)0xEF;
            r[i + 1] = (char)0xBF;
            r[i + 2] = (char)0xB0;
            i += 2;
        }
    *regex_text = r;
    return 0;
}
