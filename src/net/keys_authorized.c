/* keys_authorized.c - the authorized-keys set and file (keys.h): which
 * peers and which certificate authorities a node accepts, each with a name,
 * safe to look up from many threads while others are added. */
#include "moontail/keys.h"
#include "net_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AUTH_FILE_MAX (16u << 20) /* an authorized-keys file is at most 16 MiB */
#define AUTH_LINE_MAX 1024

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
    mt_file_info st;
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
