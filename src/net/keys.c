/* keys.c - node identities: Ed25519 key pairs, the secret key file (mode
 * 0600, refused when others may read it) and the authorized-keys file that
 * says which peers a node accepts. Formats are documented in keys.h. */
#include "moontail/keys.h"
#include "net_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_MAGIC    "moontail-secret-key v1"
#define AUTH_FILE_MAX   (16u << 20) /* an authorized-keys file is at most 16 MiB */
#define AUTH_LINE_MAX   1024
#define SECRET_FILE_MAX 1024

/* ---- libsodium start-up -------------------------------------------------- */

int net_sodium_init(mt_error *err) {
    if (sodium_init() < 0)
        return mt_error_set(err, "libsodium failed to initialise (sodium_init); the system's "
                                 "random number source may be unavailable");
    return 0;
}

/* ---- hex ----------------------------------------------------------------- */

void mt_keys_pk_to_hex(const uint8_t pk[MT_KEYS_PUBLIC_BYTES], char hex[MT_KEYS_HEX_SIZE]) {
    sodium_bin2hex(hex, MT_KEYS_HEX_SIZE, pk, MT_KEYS_PUBLIC_BYTES);
}

/* Decodes exactly 2*n hex digits from s[0..len) into out; false otherwise. */
static bool hex_decode(uint8_t *out, size_t n, const char *s, size_t len) {
    if (len != 2 * n) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    size_t got = 0;
    const char *end = NULL;
    return sodium_hex2bin(out, n, s, len, NULL, &got, &end) == 0 && got == n && end == s + len;
}

int mt_keys_pk_from_hex(uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *hex, mt_error *err) {
    size_t len = strlen(hex);
    if (!hex_decode(pk, MT_KEYS_PUBLIC_BYTES, hex, len))
        return mt_error_set(err,
                            "'%.80s%s' is not a public key: expected exactly %d hex digits, "
                            "got %zu characters",
                            hex, len > 80 ? "..." : "", 2 * MT_KEYS_PUBLIC_BYTES, len);
    return 0;
}

/* ---- key pairs ----------------------------------------------------------- */

int mt_keys_generate(mt_keys *k, mt_error *err) {
    if (net_sodium_init(err)) return -1;
    crypto_sign_keypair(k->pk, k->sk);
    return 0;
}

void mt_keys_wipe(mt_keys *k) {
    if (k) sodium_memzero(k, sizeof *k);
}

int mt_keys_save(const mt_keys *k, const char *path, mt_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return mt_error_set(err,
                                "%s: file already exists; a secret key is never overwritten, "
                                "remove it first or choose another path",
                                path);
        return mt_error_set(err, "%s: cannot create secret key file: %s", path, strerror(errno));
    }
    /* 22 + 1 + 128 + 1 bytes; the hex is secret too, so wipe the buffer after. */
    char text[sizeof SECRET_MAGIC + 2 * MT_KEYS_SECRET_BYTES + 2];
    memcpy(text, SECRET_MAGIC "\n", sizeof SECRET_MAGIC);
    sodium_bin2hex(text + sizeof SECRET_MAGIC, 2 * MT_KEYS_SECRET_BYTES + 1, k->sk,
                   MT_KEYS_SECRET_BYTES);
    size_t n = sizeof SECRET_MAGIC + 2 * MT_KEYS_SECRET_BYTES;
    text[n++] = '\n';
    size_t off = 0;
    int rc = 0;
    /* umask may have removed bits, never added them; make sure it is exactly 0600. */
    if (fchmod(fd, 0600) < 0) rc = mt_error_set(err, "%s: chmod 600: %s", path, strerror(errno));
    while (rc == 0 && off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            rc = mt_error_set(err, "%s: cannot write: %s", path, strerror(errno));
        else
            off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = mt_error_set(err, "%s: cannot sync to disk: %s", path, strerror(errno));
    if (close(fd) < 0 && rc == 0)
        rc = mt_error_set(err, "%s: cannot close: %s", path, strerror(errno));
    sodium_memzero(text, sizeof text);
    if (rc) unlink(path);
    return rc;
}

/* Reads a whole regular file of at most max bytes into a NUL-terminated heap
 * buffer. *st receives the file's status (permission checks). */
static char *read_small_file(const char *path, size_t max, const char *what, struct stat *st,
                             size_t *len, mt_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        mt_error_set(err, "%s: cannot open %s: %s", path, what, strerror(errno));
        return NULL;
    }
    if (fstat(fd, st) < 0) {
        mt_error_set(err, "%s: cannot stat %s: %s", path, what, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size > max) {
        if (!S_ISREG(st->st_mode))
            mt_error_set(err, "%s: %s is not a regular file", path, what);
        else
            mt_error_set(err, "%s: %s is %lld bytes, larger than any valid one (%zu)", path, what,
                         (long long)st->st_size, max);
        close(fd);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = 0;
    while (buf && n <= max) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mt_error_set(err, "%s: cannot read %s: %s", path, what, strerror(errno));
            free(buf);
            buf = NULL;
        }
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) {
        if (err && !err->msg[0]) mt_error_set(err, "%s: out of memory reading %s", path, what);
        return NULL;
    }
    if (n > max) { /* grew while we read it */
        mt_error_set(err, "%s: %s is larger than any valid one (%zu bytes)", path, what, max);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int mt_keys_load(mt_keys *k, const char *path, mt_error *err) {
    if (net_sodium_init(err)) return -1;
    struct stat st;
    size_t len = 0;
    if (err) err->msg[0] = 0;
    char *text = read_small_file(path, SECRET_FILE_MAX, "secret key file", &st, &len, err);
    if (!text) return -1;
    int rc = 0;
    if (st.st_mode & 077) {
        rc = mt_error_set(err,
                          "%s: secret key file is accessible by other users (mode %04o); "
                          "refusing to use it. Run 'chmod 600 %s' (and consider the key "
                          "exposed if others could read it)",
                          path, (unsigned)(st.st_mode & 07777), path);
        goto done;
    }
    /* Line 1: the magic; line 2: 128 hex digits; an optional final newline
     * (LF or CRLF) and nothing else. */
    size_t m = sizeof SECRET_MAGIC - 1;
    const char *hex = text + m + 1;
    if (len < m + 1 || memcmp(text, SECRET_MAGIC, m) != 0 ||
        (text[m] != '\n' && !(text[m] == '\r' && text[m + 1] == '\n'))) {
        rc = mt_error_set(err,
                          "%s: not a MoonTail secret key file (line 1 must be '" SECRET_MAGIC
                          "'); create one with 'moontail keygen -o FILE'",
                          path);
        goto done;
    }
    if (text[m] == '\r') hex++;
    size_t hl = strcspn(hex, "\r\n");
    const char *rest = hex + hl;
    if (*rest == '\r') rest++;
    if (*rest == '\n') rest++;
    uint8_t seed_pk[MT_KEYS_PUBLIC_BYTES], seed_sk[MT_KEYS_SECRET_BYTES];
    if (!hex_decode(k->sk, MT_KEYS_SECRET_BYTES, hex, hl) || *rest != 0) {
        rc = mt_error_set(err,
                          "%s: line 2 must be the %d hex digits of the secret key and nothing "
                          "may follow it; the file is damaged",
                          path, 2 * MT_KEYS_SECRET_BYTES);
        goto done;
    }
    /* The 64-byte secret key is seed || public key: check they belong together. */
    crypto_sign_seed_keypair(seed_pk, seed_sk, k->sk);
    if (sodium_memcmp(seed_pk, k->sk + 32, MT_KEYS_PUBLIC_BYTES) != 0) {
        rc = mt_error_set(err,
                          "%s: the public half of the secret key does not match its seed; the "
                          "file is damaged",
                          path);
    } else {
        memcpy(k->pk, seed_pk, MT_KEYS_PUBLIC_BYTES);
    }
    sodium_memzero(seed_sk, sizeof seed_sk);
done:
    sodium_memzero(text, len);
    free(text);
    if (rc) sodium_memzero(k, sizeof *k);
    return rc;
}

/* ---- authorized keys ----------------------------------------------------- */

typedef struct auth_entry {
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    char name[NET_NAME_SIZE];
    int line; /* where it came from in a file (0: added by code) */
} auth_entry;

struct mt_keys_authorized {
    auth_entry *v;
    size_t n, cap;
};

mt_keys_authorized *mt_keys_authorized_new(void) {
    return calloc(1, sizeof(mt_keys_authorized));
}

void mt_keys_authorized_free(mt_keys_authorized *set) {
    if (!set) return;
    free(set->v);
    free(set);
}

size_t mt_keys_authorized_count(const mt_keys_authorized *set) {
    return set ? set->n : 0;
}

static const auth_entry *auth_find(const mt_keys_authorized *set, const uint8_t *pk) {
    for (size_t i = 0; set && i < set->n; i++)
        if (memcmp(set->v[i].pk, pk, MT_KEYS_PUBLIC_BYTES) == 0) return &set->v[i];
    return NULL;
}

const char *mt_keys_authorized_find(const mt_keys_authorized *set,
                                    const uint8_t pk[MT_KEYS_PUBLIC_BYTES]) {
    const auth_entry *e = auth_find(set, pk);
    return e ? e->name : NULL;
}

/* A name is 1..MT_KEYS_NAME_MAX printable ASCII characters, no space, no '#'. */
static bool name_ok(const char *s, size_t len) {
    if (len == 0 || len > MT_KEYS_NAME_MAX) return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '#') return false;
    return true;
}

static int auth_add(mt_keys_authorized *set, const uint8_t *pk, const char *name, size_t name_len,
                    int line, mt_error *err) {
    char hex[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(pk, hex);
    if (name && !name_ok(name, name_len)) {
        /* Shown with anything unprintable as '?': names end up in logs. */
        char shown[MT_KEYS_NAME_MAX + 1];
        size_t n = name_len < MT_KEYS_NAME_MAX ? name_len : MT_KEYS_NAME_MAX;
        for (size_t i = 0; i < n; i++) shown[i] = name[i] > ' ' && name[i] <= '~' ? name[i] : '?';
        shown[n] = 0;
        return mt_error_set(err,
                            "peer name '%s%s' (%zu characters) is not allowed: use 1-%d printable "
                            "ASCII characters without spaces or '#'",
                            shown, name_len > n ? "..." : "", name_len, MT_KEYS_NAME_MAX);
    }
    const auth_entry *dup = auth_find(set, pk);
    if (dup && dup->line)
        return mt_error_set(err, "key %s is listed twice (first on line %d)", hex, dup->line);
    if (dup) return mt_error_set(err, "key %s is already in the set", hex);
    for (size_t i = 0; name && i < set->n; i++)
        if (strlen(set->v[i].name) == name_len && memcmp(set->v[i].name, name, name_len) == 0)
            return set->v[i].line
                       ? mt_error_set(err, "name '%.*s' is given to two keys (first on line %d)",
                                      (int)name_len, name, set->v[i].line)
                       : mt_error_set(err, "name '%.*s' is already used by another key",
                                      (int)name_len, name);
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        auth_entry *v = realloc(set->v, cap * sizeof *v);
        if (!v) return mt_error_set(err, "out of memory adding an authorized key");
        set->v = v;
        set->cap = cap;
    }
    auth_entry *e = &set->v[set->n++];
    memcpy(e->pk, pk, MT_KEYS_PUBLIC_BYTES);
    if (name) {
        memcpy(e->name, name, name_len);
        e->name[name_len] = 0;
    } else {
        memcpy(e->name, hex, sizeof hex);
    }
    e->line = line;
    return 0;
}

int mt_keys_authorized_add(mt_keys_authorized *set, const uint8_t pk[MT_KEYS_PUBLIC_BYTES],
                           const char *name, mt_error *err) {
    return auth_add(set, pk, name, name ? strlen(name) : 0, 0, err);
}

/* Parses one line (no newline, NUL-free) into set. */
static int auth_parse_line(mt_keys_authorized *set, char *s, size_t len, int line, mt_error *err) {
    const char *tok[3];
    size_t tl[3];
    int nt = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\t')) i++;
        if (i == len || s[i] == '#') break; /* end or comment */
        size_t b = i;
        while (i < len && s[i] != ' ' && s[i] != '\t') i++;
        if (nt == 2)
            return mt_error_set(err,
                                "unexpected '%.*s' after the name; a line is '<hex public key> "
                                "[name]'",
                                (int)(i - b > 40 ? 40 : i - b), s + b);
        tok[nt] = s + b;
        tl[nt++] = i - b;
    }
    if (nt == 0) return 0;
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    if (!hex_decode(pk, MT_KEYS_PUBLIC_BYTES, tok[0], tl[0]))
        return mt_error_set(err,
                            "'%.*s%s' is not a public key: expected %d hex digits (as printed by "
                            "'moontail keygen')",
                            (int)(tl[0] > 70 ? 70 : tl[0]), tok[0], tl[0] > 70 ? "..." : "",
                            2 * MT_KEYS_PUBLIC_BYTES);
    return auth_add(set, pk, nt > 1 ? tok[1] : NULL, nt > 1 ? tl[1] : 0, line, err);
}

mt_keys_authorized *mt_keys_authorized_load(const char *path, mt_error *err) {
    struct stat st;
    size_t len = 0;
    if (err) err->msg[0] = 0;
    char *text = read_small_file(path, AUTH_FILE_MAX, "authorized-keys file", &st, &len, err);
    if (!text) return NULL;
    mt_keys_authorized *set = mt_keys_authorized_new();
    if (!set) mt_error_set(err, "%s: out of memory", path);
    int line = 0;
    for (size_t off = 0; set && off < len; line++) {
        size_t end = off;
        while (end < len && text[end] != '\n') end++;
        size_t n = end - off;
        if (n && text[off + n - 1] == '\r') n--;
        const char *what = NULL;
        if (memchr(text + off, 0, n))
            what = "contains a NUL byte; this is not a text file";
        else if (n > AUTH_LINE_MAX)
            what = "is longer than 1024 characters";
        if (what || auth_parse_line(set, text + off, n, line + 1, err)) {
            if (what) mt_error_set(err, "line %s", what);
            mt_error_prefix(err, "%s:%d", path, line + 1);
            mt_keys_authorized_free(set);
            set = NULL;
        }
        off = end + 1;
    }
    free(text);
    return set;
}
