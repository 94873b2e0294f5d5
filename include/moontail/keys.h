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
 * An identity may carry a certificate (cert.h): a registry's signature saying
 * that this key is a node or a requester of some account. It is presented in
 * every handshake (transport.h), so that peers that trust the registry admit
 * the key without listing it.
 *
 * Authorized-keys file (the cell key file): one peer or authority per line,
 *
 *     # comment lines start with '#'; blank lines are ignored
 *     <64 hex digits of the peer's public key> [name]   [# trailing comment]
 *     authority <64 hex digits of an authority's public key> [name]
 *
 * A peer line admits that key. An authority line admits every key that
 * presents a valid, unexpired certificate issued by that authority (a
 * registry's key). A name is 1-63 printable ASCII characters without spaces
 * or '#'; peers and authorities without a name are named by their hex key.
 * Peers and authorities have separate names. A repeated key or name, a bad
 * hex key, an extra field or an over-long line is an error naming file:line. */
#ifndef MOONTAIL_KEYS_H
#define MOONTAIL_KEYS_H

#include "moontail/cert.h"
#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_KEYS_PUBLIC_BYTES 32 /* crypto_sign_PUBLICKEYBYTES */
#define MT_KEYS_SECRET_BYTES 64 /* crypto_sign_SECRETKEYBYTES */
#define MT_KEYS_HEX_SIZE     65 /* 64 hex digits of a public key + NUL */
#define MT_KEYS_NAME_MAX     63 /* longest peer name in an authorized-keys file */

/* One identity. `sk` is secret: wipe it with mt_keys_wipe when done. The
 * certificate is optional (has_cert false: none); set it with
 * mt_keys_set_cert. A copy of the struct is a copy of the whole identity. */
typedef struct mt_keys {
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    uint8_t sk[MT_KEYS_SECRET_BYTES];
    bool has_cert;
    uint8_t cert[MT_CERT_BYTES]; /* a certificate for pk, presented in handshakes */
} mt_keys;

/* Fills *k with a fresh random key pair (and no certificate). Returns 0, or
 * -1 if libsodium cannot be initialised. */
int mt_keys_generate(mt_keys *k, mt_error *err);

/* Writes k's secret key file at path with mode 0600. Refuses to overwrite an
 * existing file (an identity is not something to lose by accident). */
int mt_keys_save(const mt_keys *k, const char *path, mt_error *err);

/* Reads a secret key file (no certificate); refuses files other users may
 * access, files that are not in the format above, and keys whose halves do
 * not match. */
int mt_keys_load(mt_keys *k, const char *path, mt_error *err);

/* Gives k the certificate cert[0..len) after checking its form, that it is
 * for k->pk and that the authority it names signed it (mt_cert_decode); its
 * time and whether peers trust its authority are for the peers to judge.
 * cert NULL (or len 0) removes k's certificate. On error k is unchanged. */
int mt_keys_set_cert(mt_keys *k, const uint8_t *cert, size_t len, mt_error *err);

/* Overwrites the secret half (and the rest of *k) with zeros. */
void mt_keys_wipe(mt_keys *k);

/* Public key <-> 64 lowercase hex digits. from_hex accepts exactly 64 hex
 * digits (either case) and nothing else. */
void mt_keys_pk_to_hex(const uint8_t pk[MT_KEYS_PUBLIC_BYTES], char hex[MT_KEYS_HEX_SIZE]);
int mt_keys_pk_from_hex(uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *hex, mt_error *err);

/* ---- authorized keys ----------------------------------------------------
 * Peer keys and trusted authorities. A set may be shared by any number of
 * threads, and keys and authorities may be added while other threads check
 * handshakes against it (a mutex guards it; entries are never moved or
 * removed, so a name returned by a find stays valid until the set is freed).
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
/* Peer keys in the set (authorities not counted). */
size_t mt_keys_authorized_count(const mt_keys_authorized *set);
void mt_keys_authorized_free(mt_keys_authorized *set);

/* Trusts an authority: certificates it issues admit their subject. name may
 * be NULL (the authority is then named by its hex key). */
int mt_keys_authorized_add_authority(mt_keys_authorized *set,
                                     const uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *name,
                                     mt_error *err);
/* The authority's name if pk is a trusted authority, else NULL. */
const char *mt_keys_authorized_find_authority(const mt_keys_authorized *set,
                                              const uint8_t pk[MT_KEYS_PUBLIC_BYTES]);
size_t mt_keys_authorized_authority_count(const mt_keys_authorized *set);

/* mt_cert_verify of a peer's certificate cert[0..len) against the set's
 * authorities: it must be issued by one of them, signed, for `subject`, and
 * valid at `now` give or take skew seconds. out (may be NULL) receives its
 * fields. */
int mt_keys_authorized_check_cert(const mt_keys_authorized *set, const uint8_t *cert, size_t len,
                                  const uint8_t subject[MT_KEYS_PUBLIC_BYTES], uint64_t now,
                                  uint64_t skew, mt_cert *out, mt_error *err);

#endif
