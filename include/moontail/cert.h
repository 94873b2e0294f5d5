/* cert.h - certificates: how the control plane (the registry) vouches for a
 * node's or a requester's identity key, so that the data plane can admit
 * exactly the keys the registry vouches for without listing each of them in
 * an authorized-keys file (keys.h).
 *
 * A certificate is a small fixed-size record: "authority A says key S is a
 * node (or a requester) of account N from time T0 to time T1", signed by A's
 * Ed25519 key. It is public (no secret in it): it travels inside the
 * encrypted handshake (transport.h) and can be stored anywhere.
 *
 * ---- Format (version 1; 168 bytes; integers little-endian) -----------------
 *     off  size
 *       0     4  magic "MTC1"
 *       4     2  u16 version = 1
 *       6     1  u8 role: 1 = node, 2 = requester
 *       7     1  u8 reserved = 0 (non-zero is refused)
 *       8    32  subject: the Ed25519 public key vouched for
 *      40    32  issuer: the authority's Ed25519 public key
 *      72     8  u64 account id (0 = none)
 *      80     8  u64 not_before (unix seconds)
 *      88     8  u64 not_after (unix seconds, the last valid second)
 *      96     8  u64 serial (chosen by the issuer, e.g. random)
 *     104    64  Ed25519 signature (crypto_sign_detached) by the issuer's key
 *                over bytes [0, 104)
 * A certificate is valid at time t (unix seconds) when
 *     not_before - skew <= t <= not_after + skew,
 * skew being the clock difference allowed between machines.
 *
 * ---- Certificate file ----------------------------------------------------------
 * Text, two lines (mt_cert_save writes this; mt_cert_load also reads the 168
 * raw bytes):
 *     moontail-cert v1
 *     <336 lowercase hex digits: the 168 bytes above>
 * A certificate is public, so its file needs no particular mode. */
#ifndef MOONTAIL_CERT_H
#define MOONTAIL_CERT_H

#include "moontail/error.h"

#include <stddef.h>
#include <stdint.h>

#define MT_CERT_BYTES         168
#define MT_CERT_SIGNED_BYTES  104 /* the bytes the signature covers */
#define MT_CERT_KEY_BYTES     32  /* an Ed25519 public key (= MT_KEYS_PUBLIC_BYTES) */
#define MT_CERT_ISSUER_OFFSET 40  /* where the issuer's key is (to look it up before verifying) */
#define MT_CERT_VERSION       1
#define MT_CERT_DEFAULT_SKEW  300 /* seconds of clock difference allowed in handshakes */

/* mt_cert_verify's `trusted` when the caller trusts whatever issuer the
 * certificate names (the signature is still checked against that issuer) and
 * judges out->issuer itself. */
#define MT_CERT_ANY_ISSUER NULL

typedef struct mt_keys mt_keys; /* keys.h */

typedef enum mt_cert_role { MT_CERT_ROLE_NODE = 1, MT_CERT_ROLE_REQUESTER = 2 } mt_cert_role;

/* The decoded fields of a certificate. */
typedef struct mt_cert {
    mt_cert_role role;
    uint8_t subject[MT_CERT_KEY_BYTES];
    uint8_t issuer[MT_CERT_KEY_BYTES];
    uint64_t account; /* 0: none */
    uint64_t not_before, not_after;
    uint64_t serial;
} mt_cert;

/* "node", "requester", or "unknown". */
const char *mt_cert_role_name(int role);
/* "node" -> MT_CERT_ROLE_NODE, "requester" -> MT_CERT_ROLE_REQUESTER; else -1. */
int mt_cert_role_from_name(const char *name);

/* The current time in unix seconds (0 if the clock reads before 1970). */
uint64_t mt_cert_now(void);
/* "2025-03-01 12:00:00 UTC" (or the plain number of seconds past year 9999). */
void mt_cert_time_str(uint64_t t, char out[32]);

/* Signs a certificate: every field of *fields except issuer (which is taken
 * from issuer->pk) goes into out. Refuses an unknown role and not_before >
 * not_after. */
int mt_cert_issue(const mt_cert *fields, const mt_keys *issuer, uint8_t out[MT_CERT_BYTES],
                  mt_error *err);

/* Decodes len bytes and checks their form and that the issuer they name
 * signed them; nothing about trust, subject or time. For display, and for
 * the checks below. */
int mt_cert_decode(const uint8_t *bytes, size_t len, mt_cert *out, mt_error *err);

/* The full check a peer's certificate must pass, in this order (the first
 * failure is reported):
 *   size ("wrong size"), magic ("wrong magic"), version ("wrong version"),
 *   role and reserved byte; the issuer is one of trusted[0..n_trusted) ("issued
 *   by an unknown authority <hex>"; MT_CERT_ANY_ISSUER skips this); the
 *   signature ("bad signature"); the subject is `subject` ("is for another
 *   key"); now is in the validity window widened by skew seconds ("expired at
 *   ... (now ...)", "not valid before ... (now ...)").
 * Every message starts with "certificate". out (may be NULL) receives the
 * fields on success. */
int mt_cert_verify(const uint8_t *bytes, size_t len, const uint8_t (*trusted)[MT_CERT_KEY_BYTES],
                   size_t n_trusted, const uint8_t subject[MT_CERT_KEY_BYTES], uint64_t now,
                   uint64_t skew, mt_cert *out, mt_error *err);

/* Only the time check of mt_cert_verify. */
int mt_cert_check_time(const mt_cert *c, uint64_t now, uint64_t skew, mt_error *err);

/* Writes the certificate file at path (text format above), replacing an
 * existing file atomically (a running node may be reading the old one). */
int mt_cert_save(const uint8_t cert[MT_CERT_BYTES], const char *path, mt_error *err);
/* Reads a certificate file (text or the raw 168 bytes) and checks its form
 * and signature (mt_cert_decode); out_fields may be NULL. */
int mt_cert_load(const char *path, uint8_t cert[MT_CERT_BYTES], mt_cert *out_fields, mt_error *err);

#endif
