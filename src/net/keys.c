/* keys.c - node identities: Ed25519 key pairs with an optional certificate,
 * the secret key file (mode 0600, refused when others may read it) and the
 * authorized-keys set and file that say which peers and which certificate
 * authorities a node accepts. Formats are documented in keys.h. */
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

bool net_hex_decode(uint8_t *out, size_t n, const char *s, size_t len) {
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
    if (!net_hex_decode(pk, MT_KEYS_PUBLIC_BYTES, hex, len))
        return mt_error_set(err,
                            "'%.80s%s' is not a public key: expected exactly %d hex digits, "
                            "got %zu characters",
                            hex, len > 80 ? "..." : "", 2 * MT_KEYS_PUBLIC_BYTES, len);
    return 0;
}

/* ---- key pairs ----------------------------------------------------------- */

int mt_keys_generate(mt_keys *k, mt_error *err) {
    if (net_sodium_init(err)) return -1;
    memset(k, 0, sizeof *k);
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

char *net_read_small_file(const char *path, size_t max, const char *what, struct stat *st,
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
    memset(k, 0, sizeof *k);
    char *text = net_read_small_file(path, SECRET_FILE_MAX, "secret key file", &st, &len, err);
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
    if (!net_hex_decode(k->sk, MT_KEYS_SECRET_BYTES, hex, hl) || *rest != 0) {
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

int mt_keys_set_cert(mt_keys *k, const uint8_t *cert, size_t len, mt_error *err) {
    if (!cert || len == 0) {
        k->has_cert = false;
        memset(k->cert, 0, sizeof k->cert);
        return 0;
    }
    mt_cert c;
    if (mt_cert_decode(cert, len, &c, err)) return -1;
    if (sodium_memcmp(c.subject, k->pk, MT_KEYS_PUBLIC_BYTES) != 0) {
        char want[MT_KEYS_HEX_SIZE], got[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(k->pk, want);
        mt_keys_pk_to_hex(c.subject, got);
        return mt_error_set(err,
                            "certificate is for another key: it vouches for %s, this identity "
                            "is %s; ask the registry for a certificate of this key",
                            got, want);
    }
    memcpy(k->cert, cert, MT_CERT_BYTES);
    k->has_cert = true;
    return 0;
}

/* ---- authorized keys ----------------------------------------------------- */

/* A peer key or an authority. Entries are allocated one by one and never
 * moved, so a name handed out stays valid while others are added. */
typedef struct auth_entry {
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    char name[NET_NAME_SIZE];
    int line; /* where it came from in a file (0: added by code) */
} auth_entry;

typedef struct auth_list {
    auth_entry **v;
    size_t n, cap;
} auth_list;

struct mt_keys_authorized {
    pthread_mutex_t lock; /* guards both lists */
    auth_list peers, authorities;
};

/* The set's lock, also from the const pointers lookups get (the set itself
 * is always allocated writable by mt_keys_authorized_new). */
static pthread_mutex_t *auth_lock(const mt_keys_authorized *set) {
    return &((mt_keys_authorized *)set)->lock;
}

mt_keys_authorized *mt_keys_authorized_new(void) {
    mt_keys_authorized *set = calloc(1, sizeof(mt_keys_authorized));
    if (set) pthread_mutex_init(&set->lock, NULL);
    return set;
}

static void auth_list_free(auth_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

void mt_keys_authorized_free(mt_keys_authorized *set) {
    if (!set) return;
    auth_list_free(&set->peers);
    auth_list_free(&set->authorities);
    pthread_mutex_destroy(&set->lock);
    free(set);
}

static size_t auth_count(const mt_keys_authorized *set, const auth_list *l) {
    if (!set) return 0;
    pthread_mutex_lock(auth_lock(set));
    size_t n = l->n;
    pthread_mutex_unlock(auth_lock(set));
    return n;
}

size_t mt_keys_authorized_count(const mt_keys_authorized *set) {
    return set ? auth_count(set, &set->peers) : 0;
}

size_t mt_keys_authorized_authority_count(const mt_keys_authorized *set) {
    return set ? auth_count(set, &set->authorities) : 0;
}

/* The entry for pk in l (the set's lock held). */
static const auth_entry *list_find(const auth_list *l, const uint8_t *pk) {
    for (size_t i = 0; i < l->n; i++)
        if (memcmp(l->v[i]->pk, pk, MT_KEYS_PUBLIC_BYTES) == 0) return l->v[i];
    return NULL;
}

static const char *auth_find_name(const mt_keys_authorized *set, const auth_list *l,
                                  const uint8_t *pk) {
    if (!set) return NULL;
    pthread_mutex_lock(auth_lock(set));
    const auth_entry *e = list_find(l, pk);
    pthread_mutex_unlock(auth_lock(set));
    return e ? e->name : NULL;
}

const char *mt_keys_authorized_find(const mt_keys_authorized *set,
                                    const uint8_t pk[MT_KEYS_PUBLIC_BYTES]) {
    return set ? auth_find_name(set, &set->peers, pk) : NULL;
}

const char *mt_keys_authorized_find_authority(const mt_keys_authorized *set,
                                              const uint8_t pk[MT_KEYS_PUBLIC_BYTES]) {
    return set ? auth_find_name(set, &set->authorities, pk) : NULL;
}

/* A name is 1..MT_KEYS_NAME_MAX printable ASCII characters, no space, no '#'. */
static bool name_ok(const char *s, size_t len) {
    if (len == 0 || len > MT_KEYS_NAME_MAX) return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '#') return false;
    return true;
}

/* Adds pk to l (a peer or an authority, as `what` says: "key" or "authority")
 * under the set's lock, refusing a repeated key or name. */
static int auth_add(mt_keys_authorized *set, auth_list *l, const char *what, const uint8_t *pk,
                    const char *name, size_t name_len, int line, mt_error *err) {
    char hex[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(pk, hex);
    if (name && !name_ok(name, name_len)) {
        /* Shown with anything unprintable as '?': names end up in logs. */
        char shown[MT_KEYS_NAME_MAX + 1];
        size_t n = name_len < MT_KEYS_NAME_MAX ? name_len : MT_KEYS_NAME_MAX;
        for (size_t i = 0; i < n; i++) shown[i] = name[i] > ' ' && name[i] <= '~' ? name[i] : '?';
        shown[n] = 0;
        return mt_error_set(err,
                            "%s name '%s%s' (%zu characters) is not allowed: use 1-%d printable "
                            "ASCII characters without spaces or '#'",
                            l == &set->peers ? "peer" : "authority", shown,
                            name_len > n ? "..." : "", name_len, MT_KEYS_NAME_MAX);
    }
    auth_entry *e = calloc(1, sizeof *e);
    if (!e) return mt_error_set(err, "out of memory adding an authorized %s", what);
    memcpy(e->pk, pk, MT_KEYS_PUBLIC_BYTES);
    if (name) {
        memcpy(e->name, name, name_len);
        e->name[name_len] = 0;
    } else {
        memcpy(e->name, hex, sizeof hex);
    }
    e->line = line;
    int rc = 0;
    pthread_mutex_lock(&set->lock);
    const auth_entry *dup = list_find(l, pk);
    if (dup && dup->line)
        rc = mt_error_set(err, "%s %s is listed twice (first on line %d)", what, hex, dup->line);
    else if (dup)
        rc = mt_error_set(err, "%s %s is already in the set", what, hex);
    for (size_t i = 0; rc == 0 && name && i < l->n; i++)
        if (strcmp(l->v[i]->name, e->name) == 0)
            rc = l->v[i]->line
                     ? mt_error_set(err, "name '%s' is given to two %ss (first on line %d)",
                                    e->name, what, l->v[i]->line)
                     : mt_error_set(err, "name '%s' is already used by another %s", e->name, what);
    if (rc == 0 && l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        auth_entry **v = realloc(l->v, cap * sizeof *v);
        if (v) {
            l->v = v;
            l->cap = cap;
        } else {
            rc = mt_error_set(err, "out of memory adding an authorized %s", what);
        }
    }
    if (rc == 0) l->v[l->n++] = e;
    pthread_mutex_unlock(&set->lock);
    if (rc) free(e);
    return rc;
}

int mt_keys_authorized_add(mt_keys_authorized *set, const uint8_t pk[MT_KEYS_PUBLIC_BYTES],
                           const char *name, mt_error *err) {
    return auth_add(set, &set->peers, "key", pk, name, name ? strlen(name) : 0, 0, err);
}

int mt_keys_authorized_add_authority(mt_keys_authorized *set,
                                     const uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *name,
                                     mt_error *err) {
    return auth_add(set, &set->authorities, "authority", pk, name, name ? strlen(name) : 0, 0, err);
}

int mt_keys_authorized_check_cert(const mt_keys_authorized *set, const uint8_t *cert, size_t len,
                                  const uint8_t subject[MT_KEYS_PUBLIC_BYTES], uint64_t now,
                                  uint64_t skew, mt_cert *out, mt_error *err) {
    /* Only the issuer the certificate names can be the one: copy its key out
     * under the lock, verify (the slow part) without holding it. */
    uint8_t issuer[MT_KEYS_PUBLIC_BYTES];
    bool known = false;
    if (set && cert && len == MT_CERT_BYTES) {
        pthread_mutex_lock(auth_lock(set));
        const auth_entry *e = list_find(&set->authorities, cert + MT_CERT_ISSUER_OFFSET);
        if (e) {
            memcpy(issuer, e->pk, sizeof issuer);
            known = true;
        }
        pthread_mutex_unlock(auth_lock(set));
    }
    const uint8_t(*trusted)[MT_CERT_KEY_BYTES] = &issuer;
    return mt_cert_verify(cert, len, trusted, known ? 1 : 0, subject, now, skew, out, err);
}

/* Parses one line (no newline, NUL-free) into set:
 * "<hex> [name]" or "authority <hex> [name]". */
static int auth_parse_line(mt_keys_authorized *set, char *s, size_t len, int line, mt_error *err) {
    const char *tok[4];
    size_t tl[4];
    int nt = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\t')) i++;
        if (i == len || s[i] == '#') break; /* end or comment */
        size_t b = i;
        while (i < len && s[i] != ' ' && s[i] != '\t') i++;
        bool authority = nt > 0 && tl[0] == 9 && memcmp(tok[0], "authority", 9) == 0;
        if (nt == (authority ? 3 : 2))
            return mt_error_set(err,
                                "unexpected '%.*s' after the name; a line is '<hex public key> "
                                "[name]' or 'authority <hex public key> [name]'",
                                (int)(i - b > 40 ? 40 : i - b), s + b);
        tok[nt] = s + b;
        tl[nt++] = i - b;
    }
    if (nt == 0) return 0;
    bool authority = tl[0] == 9 && memcmp(tok[0], "authority", 9) == 0;
    int k = authority ? 1 : 0; /* the key's token */
    if (authority && nt == 1)
        return mt_error_set(err, "'authority' needs the authority's public key: 'authority <hex "
                                 "public key> [name]'");
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    if (!net_hex_decode(pk, MT_KEYS_PUBLIC_BYTES, tok[k], tl[k]))
        return mt_error_set(err,
                            "'%.*s%s' is not a public key: expected %d hex digits (as printed by "
                            "'moontail keygen')",
                            (int)(tl[k] > 70 ? 70 : tl[k]), tok[k], tl[k] > 70 ? "..." : "",
                            2 * MT_KEYS_PUBLIC_BYTES);
    bool named = nt > k + 1;
    return auth_add(set, authority ? &set->authorities : &set->peers,
                    authority ? "authority" : "key", pk, named ? tok[k + 1] : NULL,
                    named ? tl[k + 1] : 0, line, err);
}

mt_keys_authorized *mt_keys_authorized_load(const char *path, mt_error *err) {
    struct stat st;
    size_t len = 0;
    if (err) err->msg[0] = 0;
    char *text = net_read_small_file(path, AUTH_FILE_MAX, "authorized-keys file", &st, &len, err);
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
