/* keys.h - long-term node identities (Ed25519 key pairs), their files, and the
 * set of peer keys a node accepts.
 *
 * A node's identity is one Ed25519 key pair (libsodium crypto_sign). The
 * public half (32 bytes, written as 64 lowercase hex digits) is what an
 * operator puts into other nodes' authorized-keys files; the secret half never
 * leaves its file and the process that loaded it.
 *
 * Secret key file (text, exactly two lines, created with mode 0600):
 *
 *     moontail-secret-key v1
 *     <128 hex digits: the 64-byte libsodium Ed25519 secret key, i.e. seed || public key>
 *
 * A secret key file that grants any permission to group or others (mode & 077)
 * is refused, as is one whose public half does not match its seed.
 *
 * Authorized-keys file (the cell key file): one peer per line,
 *
 *     # comment lines start with '#'; blank lines are ignored
 *     <64 hex digits of the peer's public key> [name]   [# trailing comment]
 *
 * A name is 1-63 printable ASCII characters without spaces or '#'; peers
 * without a name are named by their hex key. A repeated key or name, a bad hex
 * key, an extra field or an over-long line is an error naming file:line. */
#ifndef MOONTAIL_KEYS_H
#define MOONTAIL_KEYS_H

#include "moontail/error.h"

#include <stddef.h>
#include <stdint.h>

#define MT_KEYS_PUBLIC_BYTES 32 /* crypto_sign_PUBLICKEYBYTES */
#define MT_KEYS_SECRET_BYTES 64 /* crypto_sign_SECRETKEYBYTES */
#define MT_KEYS_HEX_SIZE     65 /* 64 hex digits of a public key + NUL */
#define MT_KEYS_NAME_MAX     63 /* longest peer name in an authorized-keys file */

/* One identity. `sk` is secret: wipe it with mt_keys_wipe when done. */
typedef struct mt_keys {
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    uint8_t sk[MT_KEYS_SECRET_BYTES];
} mt_keys;

/* Fills *k with a fresh random key pair. Returns 0, or -1 if libsodium cannot
 * be initialised. */
int mt_keys_generate(mt_keys *k, mt_error *err);

/* Writes k's secret key file at path with mode 0600. Refuses to overwrite an
 * existing file (an identity is not something to lose by accident). */
int mt_keys_save(const mt_keys *k, const char *path, mt_error *err);

/* Reads a secret key file; refuses files other users may access, files that
 * are not in the format above, and keys whose halves do not match. */
int mt_keys_load(mt_keys *k, const char *path, mt_error *err);

/* Overwrites the secret half (and the rest of *k) with zeros. */
void mt_keys_wipe(mt_keys *k);

/* Public key <-> 64 lowercase hex digits. from_hex accepts exactly 64 hex
 * digits (either case) and nothing else. */
void mt_keys_pk_to_hex(const uint8_t pk[MT_KEYS_PUBLIC_BYTES], char hex[MT_KEYS_HEX_SIZE]);
int mt_keys_pk_from_hex(uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *hex, mt_error *err);

/* ---- authorized keys ----------------------------------------------------
 * Read-only after loading, so one set may be shared by any number of threads.
 * Lookup is a linear scan (sets hold a few hundred keys). */
typedef struct mt_keys_authorized mt_keys_authorized;

mt_keys_authorized *mt_keys_authorized_new(void);
/* Loads an authorized-keys file; NULL with "file:line: problem" on error. */
mt_keys_authorized *mt_keys_authorized_load(const char *path, mt_error *err);
/* Adds one key; name may be NULL (the peer is then named by its hex key). */
int mt_keys_authorized_add(mt_keys_authorized *set, const uint8_t pk[MT_KEYS_PUBLIC_BYTES],
                           const char *name, mt_error *err);
/* The peer's name if pk is in the set, else NULL. */
const char *mt_keys_authorized_find(const mt_keys_authorized *set,
                                    const uint8_t pk[MT_KEYS_PUBLIC_BYTES]);
size_t mt_keys_authorized_count(const mt_keys_authorized *set);
void mt_keys_authorized_free(mt_keys_authorized *set);

#endif
