/* test_cert.c - certificates (cert.h) and their use by the transport and the
 * node: the documented byte layout, each refusal with its own message (expired,
 * not yet valid, another key, unknown authority, a flipped bit in any byte,
 * truncated, wrong magic or version), certificate files, authority lines in
 * authorized-keys files and a set changed while handshakes read it; then
 * handshakes over loopback: a certified client admitted by a server that lists
 * no keys, refusals that name what failed on both sides while the same server
 * goes on serving, an authorized client with no (or a bad) certificate still
 * admitted, the peer's certificate readable on both sides, a client written
 * from transport.h's byte description alone; and a running node whose
 * certificate is renewed (mt_node_set_cert): its next outgoing connection, to
 * a next hop, carries the new one. */
#include "check.h"
#include "moontail/cert.h"
#include "moontail/keys.h"
#include "moontail/node.h"
#include "moontail/remote.h"
#include "moontail/synth_model.h"
#include "moontail/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>

static mt_keys k_reg, k_reg2, k_server, k_client, k_stranger;
static char hex_reg[MT_KEYS_HEX_SIZE], hex_reg2[MT_KEYS_HEX_SIZE], hex_client[MT_KEYS_HEX_SIZE],
    hex_stranger[MT_KEYS_HEX_SIZE];
static uint64_t now_s;

static bool has(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

/* A certificate for subject by issuer; valid [now + from, now + to]. */
static void make_cert(uint8_t out[MT_CERT_BYTES], const mt_keys *issuer, const uint8_t *subject,
                      mt_cert_role role, uint64_t account, int64_t from, int64_t to,
                      uint64_t serial) {
    mt_cert c = {.role = role,
                 .account = account,
                 .not_before = (uint64_t)((int64_t)now_s + from),
                 .not_after = (uint64_t)((int64_t)now_s + to),
                 .serial = serial};
    memcpy(c.subject, subject, 32);
    mt_error err = {{0}};
    CHECK(mt_cert_issue(&c, issuer, out, &err) == 0, "issue: %s", err.msg);
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static bool write_all(int fd, const void *buf, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t r = write(fd, (const char *)buf + off, n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        off += (size_t)r;
    }
    return true;
}

static bool read_exact(int fd, void *buf, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t r = read(fd, (char *)buf + off, n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        off += (size_t)r;
    }
    return true;
}

static void write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write_all(fd, text, strlen(text)), "cannot write %s", path);
    if (fd >= 0) close(fd);
}

/* ---- the format ---------------------------------------------------------------- */

static void test_layout(void) {
    uint8_t b[MT_CERT_BYTES];
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 0x0102030405060708ull, -10, 3600,
              0xA1B2C3D4E5F60718ull);
    /* the documented offsets */
    CHECK(memcmp(b, "MTC1", 4) == 0 && b[4] == 1 && b[5] == 0 && b[6] == 2 && b[7] == 0,
          "header bytes %02x %02x %02x %02x", b[4], b[5], b[6], b[7]);
    CHECK(memcmp(b + 8, k_client.pk, 32) == 0 && memcmp(b + 40, k_reg.pk, 32) == 0,
          "subject / issuer offsets");
    CHECK(le64(b + 72) == 0x0102030405060708ull && le64(b + 80) == now_s - 10 &&
              le64(b + 88) == now_s + 3600 && le64(b + 96) == 0xA1B2C3D4E5F60718ull,
          "u64 fields little-endian at 72/80/88/96");
    CHECK(crypto_sign_verify_detached(b + 104, b, 104, k_reg.pk) == 0,
          "signature at 104 over bytes [0, 104) by the issuer");
    /* verify gives the fields back */
    mt_cert c;
    mt_error err = {{0}};
    const uint8_t(*trusted)[32] = &k_reg.pk;
    CHECK(mt_cert_verify(b, sizeof b, trusted, 1, k_client.pk, now_s, 0, &c, &err) == 0,
          "valid certificate refused: %s", err.msg);
    CHECK(c.role == MT_CERT_ROLE_REQUESTER && c.account == 0x0102030405060708ull &&
              c.serial == 0xA1B2C3D4E5F60718ull && c.not_after == now_s + 3600 &&
              memcmp(c.issuer, k_reg.pk, 32) == 0 && memcmp(c.subject, k_client.pk, 32) == 0,
          "decoded fields");
    CHECK(strcmp(mt_cert_role_name(c.role), "requester") == 0 &&
              mt_cert_role_from_name("node") == MT_CERT_ROLE_NODE &&
              mt_cert_role_from_name("admin") < 0,
          "role names");
    /* among several trusted authorities */
    uint8_t two[2][32];
    memcpy(two[0], k_reg2.pk, 32);
    memcpy(two[1], k_reg.pk, 32);
    CHECK(mt_cert_verify(b, sizeof b, (const uint8_t(*)[32])two, 2, k_client.pk, now_s, 0, NULL,
                         &err) == 0,
          "second of two authorities: %s", err.msg);
    /* issue refuses nonsense */
    c.role = (mt_cert_role)7;
    CHECK(mt_cert_issue(&c, &k_reg, b, &err) < 0 && has(err.msg, "role 7"), "role 7: %s", err.msg);
    c.role = MT_CERT_ROLE_NODE;
    c.not_before = c.not_after + 1;
    CHECK(mt_cert_issue(&c, &k_reg, b, &err) < 0 && has(err.msg, "never be valid"),
          "inverted window: %s", err.msg);
    char t[32];
    mt_cert_time_str(0, t);
    CHECK(strcmp(t, "1970-01-01 00:00:00 UTC") == 0, "time 0: %s", t);
    mt_cert_time_str(UINT64_MAX, t);
    CHECK(has(t, "18446744073709551615"), "huge time: %s", t);
}

/* One refusal: verify must fail with a message containing `want`. */
static void expect_refused(const uint8_t *b, size_t len, const uint8_t *subject, uint64_t now,
                           uint64_t skew, const char *want, const char *what) {
    mt_error err = {{0}};
    const uint8_t(*trusted)[32] = &k_reg.pk;
    int rc = mt_cert_verify(b, len, trusted, 1, subject, now, skew, NULL, &err);
    CHECK(rc < 0 && has(err.msg, want) && strncmp(err.msg, "certificate", 11) == 0,
          "%s: rc %d, '%s' (wanted '%s')", what, rc, err.msg, want);
}

static void test_refusals(void) {
    uint8_t b[MT_CERT_BYTES], x[MT_CERT_BYTES + 8];
    char want[256], t1[32], t2[32];
    /* expired: the message gives both times */
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -7200, -3600, 1);
    mt_cert_time_str(now_s - 3600, t1);
    mt_cert_time_str(now_s, t2);
    snprintf(want, sizeof want, "certificate expired at %s (now %s)", t1, t2);
    expect_refused(b, sizeof b, k_client.pk, now_s, 300, want, "expired");
    /* within the clock skew allowance it still passes; without, it does not */
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -7200, -100, 2);
    const uint8_t(*trusted)[32] = &k_reg.pk;
    mt_error err = {{0}};
    CHECK(mt_cert_verify(b, sizeof b, trusted, 1, k_client.pk, now_s, 300, NULL, &err) == 0,
          "100 s past not_after with 300 s skew: %s", err.msg);
    expect_refused(b, sizeof b, k_client.pk, now_s, 0, "expired at", "expired, no skew");
    /* not yet valid */
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, 3600, 7200, 3);
    mt_cert_time_str(now_s + 3600, t1);
    snprintf(want, sizeof want, "certificate is not valid before %s (now %s)", t1, t2);
    expect_refused(b, sizeof b, k_client.pk, now_s, 300, want, "not yet valid");
    /* for another key */
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 4);
    snprintf(want, sizeof want,
             "is for another key: it vouches for %s, but the key presenting "
             "it is %s",
             hex_client, hex_stranger);
    expect_refused(b, sizeof b, k_stranger.pk, now_s, 300, want, "another key");
    /* an unknown authority (even a well-signed one) */
    make_cert(x, &k_reg2, k_client.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 5);
    snprintf(want, sizeof want, "issued by an unknown authority %s", hex_reg2);
    expect_refused(x, MT_CERT_BYTES, k_client.pk, now_s, 300, want, "unknown authority");
    /* ... which the any-issuer check accepts, naming the issuer */
    mt_cert c;
    CHECK(mt_cert_verify(x, MT_CERT_BYTES, MT_CERT_ANY_ISSUER, 0, k_client.pk, now_s, 300, &c,
                         &err) == 0 &&
              memcmp(c.issuer, k_reg2.pk, 32) == 0,
          "any issuer: %s", err.msg);
    /* sizes */
    expect_refused(b, 0, k_client.pk, now_s, 300, "wrong size: 0 bytes", "empty");
    expect_refused(b, 100, k_client.pk, now_s, 300, "wrong size: 100 bytes", "truncated");
    expect_refused(b, MT_CERT_BYTES - 1, k_client.pk, now_s, 300, "wrong size: 167 bytes",
                   "one byte short");
    memcpy(x, b, sizeof b);
    expect_refused(x, MT_CERT_BYTES + 1, k_client.pk, now_s, 300, "wrong size: 169 bytes",
                   "one byte extra");
    /* magic and version */
    memcpy(x, b, sizeof b);
    memcpy(x, "MTC2", 4);
    expect_refused(x, MT_CERT_BYTES, k_client.pk, now_s, 300, "wrong magic", "magic MTC2");
    memcpy(x, b, sizeof b);
    x[4] = 2;
    expect_refused(x, MT_CERT_BYTES, k_client.pk, now_s, 300, "wrong version: 2", "version 2");
    /* every bit of every byte: refused, with the message of the field it hit */
    int bad = 0;
    for (int i = 0; i < MT_CERT_BYTES; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(x, b, sizeof b);
            x[i] ^= (uint8_t)(1u << bit);
            const char *w = i < 4    ? "wrong magic"
                            : i < 6  ? "wrong version"
                            : i == 6 ? "role"
                            : i == 7 ? "reserved byte 7"
                            : i < 40 ? "bad signature" /* the subject: the signature first */
                            : i < 72 ? "unknown authority"
                                     : "bad signature";
            err.msg[0] = 0;
            int rc =
                mt_cert_verify(x, MT_CERT_BYTES, trusted, 1, k_client.pk, now_s, 300, NULL, &err);
            if (rc == 0 || !has(err.msg, w)) {
                if (bad++ < 5)
                    CHECK(false, "byte %d bit %d: rc %d '%s' (wanted '%s')", i, bit, rc, err.msg,
                          w);
            }
        }
    }
    CHECK(bad == 0, "%d of %d flipped bits were not refused as expected", bad, MT_CERT_BYTES * 8);
    /* decode checks form and signature but not trust, subject or time */
    make_cert(x, &k_reg2, k_client.pk, MT_CERT_ROLE_NODE, 0, -7200, -3600, 6);
    CHECK(mt_cert_decode(x, MT_CERT_BYTES, &c, &err) == 0 && c.serial == 6, "decode: %s", err.msg);
    x[100] ^= 1;
    CHECK(mt_cert_decode(x, MT_CERT_BYTES, &c, &err) < 0 && has(err.msg, "bad signature"),
          "decode of an altered certificate: %s", err.msg);
}

static void test_files(void) {
    uint8_t b[MT_CERT_BYTES], l[MT_CERT_BYTES];
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 9, -10, 3600, 77);
    const char *p = check_tmp(".cert");
    mt_error err = {{0}};
    CHECK(mt_cert_save(b, p, &err) == 0, "save: %s", err.msg);
    char text[1024] = {0};
    int fd = open(p, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0) close(fd);
    CHECK(n == 17 + 336 + 1 && strncmp(text, "moontail-cert v1\n", 17) == 0 && text[n - 1] == '\n',
          "file layout (%zd bytes)", n);
    mt_cert c;
    CHECK(mt_cert_load(p, l, &c, &err) == 0 && memcmp(b, l, sizeof b) == 0 && c.account == 9,
          "load: %s", err.msg);
    /* saving again replaces it (renewal) */
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 9, -10, 7200, 78);
    CHECK(mt_cert_save(b, p, &err) == 0 && mt_cert_load(p, l, &c, &err) == 0 && c.serial == 78,
          "replaced: %s", err.msg);
    /* the raw 168 bytes are read too */
    fd = open(p, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write_all(fd, b, sizeof b), "write raw");
    if (fd >= 0) close(fd);
    CHECK(mt_cert_load(p, l, &c, &err) == 0 && c.serial == 78, "raw file: %s", err.msg);
    /* damaged files name the file and the problem */
    write_text(p, "hello\n");
    CHECK(mt_cert_load(p, l, NULL, &err) < 0 && has(err.msg, p) &&
              has(err.msg, "not a MoonTail certificate file"),
          "wrong header: %s", err.msg);
    text[17 + 100] = text[17 + 100] == 'a' ? 'b' : 'a'; /* a hex digit of the subject */
    write_text(p, text);
    CHECK(mt_cert_load(p, l, NULL, &err) < 0 && has(err.msg, p) && has(err.msg, "bad signature"),
          "altered hex: %s", err.msg);
    text[17 + 300] = 0;
    write_text(p, text);
    CHECK(mt_cert_load(p, l, NULL, &err) < 0 && has(err.msg, "line 2"), "short hex: %s", err.msg);
    unlink(p);
    CHECK(mt_cert_load(p, l, NULL, &err) < 0 && has(err.msg, p) && has(err.msg, "cannot open"),
          "missing: %s", err.msg);
}

static void test_identity(void) {
    mt_keys k = k_client;
    uint8_t b[MT_CERT_BYTES];
    mt_error err = {{0}};
    CHECK(!k.has_cert, "a generated key has a certificate");
    make_cert(b, &k_reg, k_stranger.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 1);
    CHECK(mt_keys_set_cert(&k, b, sizeof b, &err) < 0 && has(err.msg, "another key") && !k.has_cert,
          "another key's certificate: %s", err.msg);
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 2);
    CHECK(mt_keys_set_cert(&k, b, 100, &err) < 0 && has(err.msg, "wrong size"), "short: %s",
          err.msg);
    CHECK(mt_keys_set_cert(&k, b, sizeof b, &err) == 0 && k.has_cert &&
              memcmp(k.cert, b, sizeof b) == 0,
          "own certificate: %s", err.msg);
    CHECK(mt_keys_set_cert(&k, NULL, 0, &err) == 0 && !k.has_cert, "remove");
    mt_keys_wipe(&k);
}

/* ---- authorities in the authorized set ----------------------------------------------- */

static void test_authorized_file(void) {
    const char *p = check_tmp(".auth");
    char text[2048];
    snprintf(text, sizeof text,
             "# peers and the registry\n"
             "%s client-a\n"
             "authority %s registry   # the control plane\n"
             "  authority\t%s\n"
             "%s registry\n", /* a peer may share an authority's name */
             hex_client, hex_reg, hex_reg2, hex_stranger);
    write_text(p, text);
    mt_error err = {{0}};
    mt_keys_authorized *a = mt_keys_authorized_load(p, &err);
    CHECK(a && mt_keys_authorized_count(a) == 2 && mt_keys_authorized_authority_count(a) == 2,
          "load: %s", err.msg);
    if (a) {
        const char *nm = mt_keys_authorized_find_authority(a, k_reg.pk);
        CHECK(nm && strcmp(nm, "registry") == 0, "authority name %s", nm);
        nm = mt_keys_authorized_find_authority(a, k_reg2.pk);
        CHECK(nm && strcmp(nm, hex_reg2) == 0, "unnamed authority is named by its hex: %s", nm);
        CHECK(!mt_keys_authorized_find(a, k_reg.pk) &&
                  !mt_keys_authorized_find_authority(a, k_client.pk),
              "peers and authorities are separate");
        uint8_t b[MT_CERT_BYTES];
        make_cert(b, &k_reg2, k_server.pk, MT_CERT_ROLE_NODE, 3, -10, 3600, 1);
        mt_cert c;
        CHECK(mt_keys_authorized_check_cert(a, b, sizeof b, k_server.pk, now_s, 300, &c, &err) ==
                      0 &&
                  c.account == 3,
              "check_cert: %s", err.msg);
        CHECK(mt_keys_authorized_add_authority(a, k_reg.pk, NULL, &err) < 0 &&
                  has(err.msg, "listed twice (first on line 3)"),
              "duplicate authority: %s", err.msg);
    }
    mt_keys_authorized_free(a);
    static const struct {
        const char *fmt; /* %s = reg hex, %s = reg2 hex */
        const char *line, *what;
    } bad[] = {
        {"authority %s r\nauthority %s r\n", ":2:", "name 'r' is given to two authoritys"},
        {"authority %s\nauthority %.64s x\n", ":2:", "authority"},
        {"authority\n", ":1:", "needs the authority's public key"},
        {"authority nothex%.1s\n", ":1:", "not a public key"},
        {"authority %s r extra\n", ":1:", "after the name"},
        {"authorities %s\n", ":1:", "not a public key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, bad[i].fmt, hex_reg, i == 1 ? hex_reg : hex_reg2);
        write_text(p, text);
        err.msg[0] = 0;
        a = mt_keys_authorized_load(p, &err);
        CHECK(!a && has(err.msg, p) && has(err.msg, bad[i].line) && has(err.msg, bad[i].what),
              "bad authority line %zu: %s", i, err.msg);
        mt_keys_authorized_free(a);
    }
    unlink(p);
}

/* Threads that add keys and authorities while others look them up and check
 * certificates: the set must stay consistent (run under ASan). */
typedef struct churn_ctx {
    mt_keys_authorized *set;
    int id;
    int failures;
} churn_ctx;

static void *churn_main(void *arg) {
    churn_ctx *c = arg;
    uint8_t b[MT_CERT_BYTES];
    mt_cert f = {.role = MT_CERT_ROLE_NODE, .not_before = now_s, .not_after = now_s + 60};
    memcpy(f.subject, k_client.pk, 32);
    mt_error err = {{0}};
    mt_cert_issue(&f, &k_reg, b, &err);
    for (int i = 0; i < 200; i++) {
        if (c->id < 2) { /* writers */
            uint8_t pk[32];
            randombytes_buf(pk, sizeof pk);
            char name[32];
            snprintf(name, sizeof name, "w%d-%d", c->id, i);
            int rc = i % 4 == 0 ? mt_keys_authorized_add_authority(c->set, pk, name, &err)
                                : mt_keys_authorized_add(c->set, pk, name, &err);
            if (rc) c->failures++;
        } else { /* readers */
            const char *nm = mt_keys_authorized_find(c->set, k_client.pk);
            if (!nm || strcmp(nm, "client-a") != 0) c->failures++;
            if (mt_keys_authorized_check_cert(c->set, b, sizeof b, k_client.pk, now_s, 0, NULL,
                                              &err))
                c->failures++;
        }
    }
    return NULL;
}

static void test_concurrent_set(void) {
    mt_keys_authorized *set = mt_keys_authorized_new();
    mt_error err = {{0}};
    CHECK(mt_keys_authorized_add(set, k_client.pk, "client-a", &err) == 0 &&
              mt_keys_authorized_add_authority(set, k_reg.pk, "registry", &err) == 0,
          "setup: %s", err.msg);
    churn_ctx cx[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        cx[i] = (churn_ctx){set, i, 0};
        pthread_create(&th[i], NULL, churn_main, &cx[i]);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        failures += cx[i].failures;
    }
    CHECK(failures == 0, "%d failures adding and reading at once", failures);
    CHECK(mt_keys_authorized_count(set) == 1 + 2 * 150 &&
              mt_keys_authorized_authority_count(set) == 1 + 2 * 50,
          "counts %zu / %zu", mt_keys_authorized_count(set),
          mt_keys_authorized_authority_count(set));
    mt_keys_authorized_free(set);
}

/* ---- handshakes ----------------------------------------------------------------------- */

/* One server that takes connections one after another, each with a full
 * handshake and a short echo, and records what it saw. */
enum { MAX_CONNS = 24 };

typedef struct conn_seen {
    bool ok;
    char err[512];
    char peer[80];
    bool has_cert;
    mt_cert cert;
    char note[512];
} conn_seen;

typedef struct server {
    int lfd;
    char addr[64];
    const mt_keys *me;
    mt_keys_authorized *auth;
    pthread_t th;
    pthread_mutex_t lock;
    int n; /* connections handled */
    conn_seen seen[MAX_CONNS];
} server;

static void *server_main(void *arg) {
    server *s = arg;
    for (int i = 0; i < MAX_CONNS; i++) {
        mt_error err = {{0}};
        int fd = mt_accept_tcp(s->lfd, 5000, NULL, 0, &err);
        if (fd < 0) break;
        conn_seen r = {0};
        mt_conn *c = mt_conn_server(fd, s->me, s->auth, 5000, &err);
        if (c) {
            r.ok = true;
            snprintf(r.peer, sizeof r.peer, "%s", mt_conn_peer_name(c));
            const mt_cert *pc = mt_conn_peer_cert(c);
            r.has_cert = pc != NULL;
            if (pc) r.cert = *pc;
            snprintf(r.note, sizeof r.note, "%s", mt_conn_peer_cert_note(c));
        } else {
            snprintf(r.err, sizeof r.err, "%s", err.msg);
        }
        pthread_mutex_lock(&s->lock);
        s->seen[i] = r;
        s->n = i + 1;
        pthread_mutex_unlock(&s->lock);
        for (;;) { /* echo until the client closes */
            void *buf;
            size_t len;
            if (!c || mt_conn_recv(c, &buf, &len, &err) != 0) break;
            int rc = mt_conn_send(c, buf, len, &err);
            free(buf);
            if (rc) break;
        }
        mt_conn_close(c);
    }
    return NULL;
}

static void server_start(server *s, const mt_keys *me, mt_keys_authorized *auth) {
    memset(s, 0, sizeof *s);
    mt_error err = {{0}};
    s->me = me;
    s->auth = auth;
    s->lfd = mt_listen_tcp("127.0.0.1:0", &err);
    CHECK(s->lfd >= 0, "listen: %s", err.msg);
    snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", mt_listen_port(s->lfd));
    pthread_mutex_init(&s->lock, NULL);
    pthread_create(&s->th, NULL, server_main, s);
}

static void server_stop(server *s) {
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->th, NULL);
    close(s->lfd);
    pthread_mutex_destroy(&s->lock);
}

/* What the server saw of its connection number i (waits for it). */
static conn_seen seen(server *s, int i) {
    for (int t = 0; t < 500; t++) {
        pthread_mutex_lock(&s->lock);
        bool done = s->n > i;
        conn_seen r = s->seen[i];
        pthread_mutex_unlock(&s->lock);
        if (done) return r;
        usleep(10000);
    }
    conn_seen none = {.err = "(the server never handled this connection)"};
    return none;
}

/* Connects as `me`; on success echoes one frame and returns the connection. */
static mt_conn *client(const server *s, const mt_keys *me, mt_error *err) {
    int fd = mt_connect_tcp(s->addr, 2000, err);
    mt_conn *c = fd >= 0 ? mt_conn_client(fd, me, k_server.pk, 5000, err) : NULL;
    if (c) {
        void *back = NULL;
        size_t len = 0;
        if (mt_conn_send(c, "ping", 4, err) || mt_conn_recv(c, &back, &len, err) != 0 || len != 4 ||
            memcmp(back, "ping", 4) != 0) {
            mt_error_set(err, "echo after the handshake failed: %s", err->msg);
            mt_conn_close(c);
            c = NULL;
        }
        free(back);
    }
    return c;
}

/* A client identity with certificate bytes put in place directly (so that
 * tests can present certificates mt_keys_set_cert would not take). */
static mt_keys with_cert(const mt_keys *k, const uint8_t *cert) {
    mt_keys r = *k;
    r.has_cert = cert != NULL;
    if (cert) memcpy(r.cert, cert, MT_CERT_BYTES);
    return r;
}

static void test_handshakes(void) {
    mt_error err = {{0}};
    /* the server lists no keys: it trusts the registry only, and has a node certificate */
    mt_keys_authorized *auth = mt_keys_authorized_new();
    CHECK(mt_keys_authorized_add_authority(auth, k_reg.pk, "registry", &err) == 0, "add: %s",
          err.msg);
    uint8_t scert[MT_CERT_BYTES];
    make_cert(scert, &k_reg, k_server.pk, MT_CERT_ROLE_NODE, 0, -10, 86400, 500);
    mt_keys me = with_cert(&k_server, scert);
    server s;
    server_start(&s, &me, auth);
    int i = 0;

    /* 0: a valid requester certificate: admitted, fields on both sides */
    uint8_t b[MT_CERT_BYTES];
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 42, -10, 3600, 600);
    mt_keys kc = with_cert(&k_client, b);
    mt_conn *c = client(&s, &kc, &err);
    CHECK(c != NULL, "certified client refused: %s", err.msg);
    if (c) {
        const mt_cert *pc = mt_conn_peer_cert(c);
        CHECK(pc && pc->role == MT_CERT_ROLE_NODE && pc->serial == 500 &&
                  pc->not_after == now_s + 86400 && memcmp(pc->issuer, k_reg.pk, 32) == 0,
              "client's view of the server's certificate");
        mt_conn_close(c);
    }
    conn_seen r = seen(&s, i++);
    CHECK(r.ok && r.has_cert && r.cert.account == 42 && r.cert.role == MT_CERT_ROLE_REQUESTER &&
              r.cert.not_after == now_s + 3600 && strcmp(r.peer, hex_client) == 0,
          "server's view: ok %d cert %d account %llu peer %s (%s)", r.ok, r.has_cert,
          (unsigned long long)r.cert.account, r.peer, r.err);

    /* refusals: each names what failed, on both sides */
    static const struct {
        const char *what;
        int kind; /* 0 none, 1 expired, 2 not yet, 3 another key, 4 unknown issuer, 5 flipped */
        const char *want;
    } cases[] = {
        {"no certificate", 0, "presented no certificate"},
        {"expired", 1, "certificate expired at"},
        {"not yet valid", 2, "certificate is not valid before"},
        {"another key", 3, "certificate is for another key"},
        {"unknown authority", 4, "issued by an unknown authority"},
        {"flipped bit", 5, "bad signature"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t x[MT_CERT_BYTES];
        int kind = cases[k].kind;
        if (kind == 1) make_cert(x, &k_reg, k_stranger.pk, MT_CERT_ROLE_NODE, 0, -7200, -3600, 1);
        if (kind == 2) make_cert(x, &k_reg, k_stranger.pk, MT_CERT_ROLE_NODE, 0, 3600, 7200, 1);
        if (kind == 3) make_cert(x, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 1);
        if (kind == 4) make_cert(x, &k_reg2, k_stranger.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 1);
        if (kind == 5) {
            make_cert(x, &k_reg, k_stranger.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 1);
            x[80] ^= 0x10; /* not_before */
        }
        mt_keys ks = with_cert(&k_stranger, kind ? x : NULL);
        err.msg[0] = 0;
        c = client(&s, &ks, &err);
        CHECK(!c && has(err.msg, "the server refused this node's key") &&
                  has(err.msg, hex_stranger) && has(err.msg, "not in the authorized keys") &&
                  has(err.msg, cases[k].want),
              "%s: client's error: %s", cases[k].what, err.msg);
        mt_conn_close(c);
        r = seen(&s, i++);
        CHECK(!r.ok && has(r.err, hex_stranger) && has(r.err, "not in the authorized keys") &&
                  has(r.err, cases[k].want),
              "%s: server's error: %s", cases[k].what, r.err);
        mt_keys_wipe(&ks);
    }

    /* the same server still admits a certified client */
    c = client(&s, &kc, &err);
    CHECK(c != NULL, "certified client after the refusals: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, i++);
    CHECK(r.ok && r.has_cert, "server after the refusals: %s", r.err);

    /* an authorized key: admitted without a certificate, and with a bad one
     * (which is reported, not used); authorities may be added while serving */
    CHECK(mt_keys_authorized_add(auth, k_stranger.pk, "stranger-listed", &err) == 0, "add: %s",
          err.msg);
    mt_keys ks = with_cert(&k_stranger, NULL);
    c = client(&s, &ks, &err);
    CHECK(c && !mt_conn_peer_cert_note(c)[0], "authorized key without a certificate: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, i++);
    CHECK(r.ok && !r.has_cert && strcmp(r.peer, "stranger-listed") == 0 && !r.note[0],
          "server, authorized key: %s %s", r.peer, r.err);
    uint8_t x[MT_CERT_BYTES];
    make_cert(x, &k_reg, k_stranger.pk, MT_CERT_ROLE_NODE, 0, -7200, -3600, 1);
    ks = with_cert(&k_stranger, x);
    c = client(&s, &ks, &err);
    CHECK(c != NULL, "authorized key with an expired certificate: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, i++);
    CHECK(r.ok && !r.has_cert && has(r.note, "expired at"), "expired certificate note: '%s'",
          r.note);
    /* a second registry trusted while the server runs */
    make_cert(x, &k_reg2, k_client.pk, MT_CERT_ROLE_REQUESTER, 7, -10, 3600, 2);
    mt_keys k2 = with_cert(&k_client, x);
    c = client(&s, &k2, &err);
    CHECK(!c && has(err.msg, "unknown authority"), "before trusting the second registry: %s",
          err.msg);
    mt_conn_close(c);
    seen(&s, i++);
    CHECK(mt_keys_authorized_add_authority(auth, k_reg2.pk, "registry-2", &err) == 0, "add: %s",
          err.msg);
    c = client(&s, &k2, &err);
    CHECK(c != NULL, "after trusting the second registry: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, i++);
    CHECK(r.ok && r.has_cert && r.cert.account == 7, "second registry's certificate: %s", r.err);
    server_stop(&s);

    /* a server that trusts no authority still refuses unknown keys before its hello */
    mt_keys_authorized *keys_only = mt_keys_authorized_new();
    mt_keys_authorized_add(keys_only, k_client.pk, "client-a", &err);
    server_start(&s, &me, keys_only);
    ks = with_cert(&k_stranger, NULL);
    c = client(&s, &ks, &err);
    CHECK(!c && has(err.msg, "without sending a hello") && has(err.msg, "authority"),
          "keys-only server, stranger: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, 0);
    CHECK(!r.ok && has(r.err, "not in the authorized keys"), "keys-only server: %s", r.err);
    /* and an authorized client with no certificate goes on working; it sees
     * the server's certificate, and a server certificate for another key is
     * reported, not fatal (the client trusts the server by its pinned key) */
    c = client(&s, &k_client, &err);
    CHECK(c && mt_conn_peer_cert(c) && mt_conn_peer_cert(c)->serial == 500,
          "authorized client, keys-only server: %s", err.msg);
    mt_conn_close(c);
    r = seen(&s, 1);
    CHECK(r.ok && strcmp(r.peer, "client-a") == 0 && !r.has_cert, "keys-only server: %s", r.err);
    server_stop(&s);
    mt_keys wrong = with_cert(&k_server, b); /* b is the client's certificate */
    server_start(&s, &wrong, keys_only);
    c = client(&s, &k_client, &err);
    CHECK(c && !mt_conn_peer_cert(c) && has(mt_conn_peer_cert_note(c), "another key"),
          "server with another key's certificate: %s / %s", err.msg,
          c ? mt_conn_peer_cert_note(c) : "");
    mt_conn_close(c);
    server_stop(&s);
    mt_keys_wipe(&wrong);
    mt_keys_wipe(&me);
    mt_keys_wipe(&kc);
    mt_keys_wipe(&ks);
    mt_keys_wipe(&k2);
    mt_keys_authorized_free(keys_only);
    mt_keys_authorized_free(auth);
}

/* ---- a client written from transport.h's byte description ------------------------------ */

static void put_u32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads one frame and decrypts it with key and counter. Returns the payload
 * length, -1 on failure. */
static long raw_recv(int fd, const uint8_t key[32], uint64_t counter, uint8_t *out, size_t cap) {
    uint8_t hdr[4], body[2048], nonce[24] = {0};
    if (!read_exact(fd, hdr, 4)) return -1;
    uint32_t len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (len < 16 || len > sizeof body || len - 16 > cap || !read_exact(fd, body, len)) return -1;
    for (int i = 0; i < 8; i++) nonce[i] = (uint8_t)(counter >> (8 * i));
    unsigned long long plen = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, &plen, NULL, body, len, hdr, 4, nonce, key))
        return -1;
    return (long)plen;
}

static bool raw_send(int fd, const uint8_t key[32], uint64_t counter, const uint8_t *p, size_t n) {
    uint8_t frame[4 + 2048 + 16], nonce[24] = {0};
    if (n > 2048) return false;
    put_u32le(frame, (uint32_t)(n + 16));
    for (int i = 0; i < 8; i++) nonce[i] = (uint8_t)(counter >> (8 * i));
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(frame + 4, &clen, p, n, frame, 4, NULL, nonce, key);
    return write_all(fd, frame, 4 + (size_t)clen);
}

/* The client side of the handshake by hand, sending cert[0..cert_len) after
 * the signature. Returns the verdict byte with the reason in why, or -1 if
 * the server hung up first. *server_auth_len gets the server's auth payload
 * length. */
static int raw_handshake(const char *addr, const mt_keys *me, const uint8_t *cert, size_t cert_len,
                         char *why, size_t why_size, long *server_auth_len) {
    mt_error err = {{0}};
    int fd = mt_connect_tcp(addr, 2000, &err);
    if (fd < 0) return -1;
    uint8_t hc[104], hs[104], eph_pk[32], eph_sk[32], rx[32], tx[32];
    crypto_kx_keypair(eph_pk, eph_sk);
    memcpy(hc, "MTN1", 4);
    hc[4] = MT_CONN_VERSION, hc[5] = 0, hc[6] = 0, hc[7] = 0;
    memcpy(hc + 8, eph_pk, 32);
    memcpy(hc + 40, me->pk, 32);
    randombytes_buf(hc + 72, 32);
    int rc = -1;
    uint8_t p[1 + 2048];
    if (!write_all(fd, hc, sizeof hc) || !read_exact(fd, hs, sizeof hs) ||
        crypto_kx_client_session_keys(rx, tx, eph_pk, eph_sk, hs + 8))
        goto out;
    *server_auth_len = raw_recv(fd, rx, 0, p, sizeof p);
    if (*server_auth_len < 64) goto out;
    uint8_t msg[48];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, hc, sizeof hc);
    crypto_generichash_update(&st, hs, sizeof hs);
    crypto_generichash_final(&st, msg + 16, 32);
    memcpy(msg, "MTN1 server auth", 16);
    if (crypto_sign_verify_detached(p, msg, 48, hs + 40)) goto out;
    memcpy(msg, "MTN1 client auth", 16);
    crypto_sign_detached(p, NULL, msg, 48, me->sk);
    memcpy(p + 64, cert, cert_len);
    if (!raw_send(fd, tx, 0, p, 64 + cert_len)) goto out;
    long vl = raw_recv(fd, rx, 1, p, sizeof p);
    if (vl < 1) goto out;
    snprintf(why, why_size, "%.*s", (int)(vl - 1), (const char *)p + 1);
    rc = p[0];
    if (rc == 0) { /* admitted: application frames from counter 1 (c->s) and 2 (s->c) */
        if (!raw_send(fd, tx, 1, (const uint8_t *)"ping", 4) || raw_recv(fd, rx, 2, p, 16) != 4 ||
            memcmp(p, "ping", 4) != 0)
            rc = -1;
    }
out:
    close(fd);
    return rc;
}

static void test_wire(void) {
    mt_error err = {{0}};
    mt_keys_authorized *auth = mt_keys_authorized_new();
    mt_keys_authorized_add_authority(auth, k_reg.pk, "registry", &err);
    uint8_t scert[MT_CERT_BYTES], b[MT_CERT_BYTES + 8];
    make_cert(scert, &k_reg, k_server.pk, MT_CERT_ROLE_NODE, 0, -10, 3600, 1);
    mt_keys me = with_cert(&k_server, scert);
    server s;
    server_start(&s, &me, auth);
    make_cert(b, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 5, -10, 3600, 2);
    char why[600] = "";
    long sl = 0;
    int v = raw_handshake(s.addr, &k_client, b, MT_CERT_BYTES, why, sizeof why, &sl);
    CHECK(v == 0 && sl == 64 + MT_CERT_BYTES,
          "documented handshake: verdict %d (%s), server auth "
          "payload %ld bytes",
          v, why, sl);
    conn_seen r = seen(&s, 0);
    CHECK(r.ok && r.has_cert && r.cert.account == 5, "server: %s", r.err);
    /* truncated and wrong-magic certificates on the wire */
    v = raw_handshake(s.addr, &k_client, b, 100, why, sizeof why, &sl);
    CHECK(v == 1 && has(why, "wrong size: 100 bytes"), "truncated on the wire: %d '%s'", v, why);
    r = seen(&s, 1);
    CHECK(!r.ok && has(r.err, "wrong size"), "server, truncated: %s", r.err);
    uint8_t m[MT_CERT_BYTES];
    memcpy(m, b, sizeof m);
    m[0] = 'X';
    v = raw_handshake(s.addr, &k_client, m, MT_CERT_BYTES, why, sizeof why, &sl);
    CHECK(v == 1 && has(why, "wrong magic"), "wrong magic on the wire: %d '%s'", v, why);
    seen(&s, 2);
    /* an auth frame longer than signature + 1024 bytes is a protocol error: no verdict */
    static uint8_t big[1100];
    v = raw_handshake(s.addr, &k_client, big, sizeof big, why, sizeof why, &sl);
    CHECK(v == -1, "oversized auth frame answered: %d", v);
    r = seen(&s, 3);
    CHECK(!r.ok && has(r.err, "identity proof") && has(r.err, "exceeds"), "server, oversized: %s",
          r.err);
    /* and a good client once more */
    v = raw_handshake(s.addr, &k_client, b, MT_CERT_BYTES, why, sizeof why, &sl);
    CHECK(v == 0, "good client at the end: %d (%s)", v, why);
    server_stop(&s);
    mt_keys_wipe(&me);
    mt_keys_authorized_free(auth);
}

/* ---- a node renews its certificate -------------------------------------------------------- */

/* A next hop that completes the handshake, records the serial of the
 * certificate the node presented, then hangs up (the node's one-way
 * forward to it fails; the next one connects again). */
typedef struct hop_ctx {
    int lfd;
    mt_keys_authorized *auth;
    pthread_mutex_t lock;
    int n;
    uint64_t serial[8];
    char err[8][512];
} hop_ctx;

static void *hop_main(void *arg) {
    hop_ctx *h = arg;
    for (int i = 0; i < 8; i++) {
        mt_error err = {{0}};
        int fd = mt_accept_tcp(h->lfd, 10000, NULL, 0, &err);
        if (fd < 0) break;
        mt_conn *c = mt_conn_server(fd, &k_stranger, h->auth, 5000, &err);
        const mt_cert *pc = c ? mt_conn_peer_cert(c) : NULL;
        pthread_mutex_lock(&h->lock);
        h->serial[i] = pc ? pc->serial : 0;
        snprintf(h->err[i], sizeof h->err[i], "%s", c ? "" : err.msg);
        h->n = i + 1;
        pthread_mutex_unlock(&h->lock);
        mt_conn_close(c);
    }
    return NULL;
}

static int hop_count(hop_ctx *h) {
    pthread_mutex_lock(&h->lock);
    int n = h->n;
    pthread_mutex_unlock(&h->lock);
    return n;
}

static void test_node_renewal(void) {
    mt_error err = {{0}};
    const char *model = check_tmp(".gguf");
    mt_synth_params p = mt_synth_default_params("llama");
    p.type = MT_TYPE_F32;
    p.n_layer = 4;
    p.n_embd = 64, p.head_dim = 16, p.n_ff = 64;
    p.dense = true;
    CHECK(mt_synth_write(&p, model, &err) == 0, "model: %s", err.msg);
    /* the node trusts the registry (and lists no key) */
    mt_keys_authorized *auth = mt_keys_authorized_new();
    mt_keys_authorized_add_authority(auth, k_reg.pk, "registry", &err);
    uint8_t c1[MT_CERT_BYTES], c2[MT_CERT_BYTES], cr[MT_CERT_BYTES];
    make_cert(c1, &k_reg, k_server.pk, MT_CERT_ROLE_NODE, 0, -10, 600, 1001);
    make_cert(c2, &k_reg, k_server.pk, MT_CERT_ROLE_NODE, 0, -10, 86400, 1002);
    make_cert(cr, &k_reg, k_client.pk, MT_CERT_ROLE_REQUESTER, 9, -10, 3600, 1003);
    mt_keys node_keys = with_cert(&k_server, c1), req = with_cert(&k_client, cr);
    mt_node_config cfg = {.shard_path = model,
                          .keys = &node_keys,
                          .authorized = auth,
                          .listen = "127.0.0.1:0",
                          .n_ctx = 32,
                          .threads = 1,
                          .timeout_ms = 5000,
                          .quiet = true};
    mt_node *node = mt_node_start(&cfg, &err);
    CHECK(node != NULL, "node: %s", err.msg);
    hop_ctx h = {.auth = auth};
    pthread_mutex_init(&h.lock, NULL);
    h.lfd = mt_listen_tcp("127.0.0.1:0", &err);
    pthread_t th;
    pthread_create(&th, NULL, hop_main, &h);
    mt_remote *r =
        node ? mt_remote_connect(mt_node_addr(node), k_server.pk, &req, 5000, 5000, &err) : NULL;
    CHECK(r != NULL, "certified requester to a node that lists no keys: %s", err.msg);
    /* a requester without a certificate is refused, and told why */
    mt_remote *r2 =
        node ? mt_remote_connect(mt_node_addr(node), k_server.pk, &k_stranger, 5000, 5000, &err)
             : NULL;
    CHECK(!r2 && has(err.msg, "refused") && has(err.msg, "presented no certificate"),
          "requester without a certificate: %s", err.msg);
    mt_remote_close(r2);
    if (r) {
        const int32_t E = mt_remote_info(r)->n_embd;
        float *rows = calloc((size_t)E, sizeof(float));
        mt_proto_hop hop = {.layer_begin = 2, .layer_end = 4};
        snprintf(hop.addr, sizeof hop.addr, "127.0.0.1:%d", mt_listen_port(h.lfd));
        memcpy(hop.pk, k_stranger.pk, 32);
        uint8_t bad[MT_CERT_BYTES];
        make_cert(bad, &k_reg, k_client.pk, MT_CERT_ROLE_NODE, 0, -10, 600, 1004);
        for (int round = 0; round < 3; round++) {
            if (round == 1)
                CHECK(mt_node_set_cert(node, c2, sizeof c2, &err) == 0, "renew: %s", err.msg);
            if (round == 2) /* a certificate for another key is refused; c2 stays */
                CHECK(mt_node_set_cert(node, bad, sizeof bad, &err) < 0 &&
                          has(err.msg, "another key") && has(err.msg, "old one stays"),
                      "another key's certificate: %s", err.msg);
            int32_t pos = 0;
            /* a one-way pass: the node connects to its next hop to pass the rows on */
            mt_proto_origin o = {.pass_id = 1 + (uint64_t)round, .pass_end = 1};
            memcpy(o.pk, req.pk, sizeof o.pk);
            int rc = mt_remote_stage_send(r, 10 + (uint64_t)round, 0, 2, &hop, 1, &o, false, &pos,
                                          1, rows, MT_PROTO_F32, &err);
            CHECK(rc == 0, "round %d: one-way forward: %s", round, err.msg);
            for (int waited = 0; waited < 10000 && hop_count(&h) < round + 1; waited += 5)
                usleep(5000);
            CHECK(hop_count(&h) == round + 1, "round %d: %d connections to the hop", round,
                  hop_count(&h));
        }
        pthread_mutex_lock(&h.lock);
        CHECK(h.serial[0] == 1001 && h.serial[1] == 1002 && h.serial[2] == 1002,
              "serials the hop saw: %llu %llu %llu (%s)", (unsigned long long)h.serial[0],
              (unsigned long long)h.serial[1], (unsigned long long)h.serial[2], h.err[0]);
        pthread_mutex_unlock(&h.lock);
        free(rows);
    }
    /* new incoming connections present the new certificate too */
    mt_remote_close(r);
    int fd = node ? mt_connect_tcp(mt_node_addr(node), 2000, &err) : -1;
    mt_conn *c = fd >= 0 ? mt_conn_client(fd, &req, k_server.pk, 5000, &err) : NULL;
    CHECK(c && mt_conn_peer_cert(c) && mt_conn_peer_cert(c)->serial == 1002,
          "node's certificate seen by a new requester: %s", err.msg);
    mt_conn_close(c);
    mt_node_stop(node);
    shutdown(h.lfd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(h.lfd);
    pthread_mutex_destroy(&h.lock);
    mt_keys_wipe(&node_keys);
    mt_keys_wipe(&req);
    mt_keys_authorized_free(auth);
    unlink(model);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    mt_error err = {{0}};
    if (mt_keys_generate(&k_reg, &err) || mt_keys_generate(&k_reg2, &err) ||
        mt_keys_generate(&k_server, &err) || mt_keys_generate(&k_client, &err) ||
        mt_keys_generate(&k_stranger, &err)) {
        fprintf(stderr, "keys: %s\n", err.msg);
        return 1;
    }
    mt_keys_pk_to_hex(k_reg.pk, hex_reg);
    mt_keys_pk_to_hex(k_reg2.pk, hex_reg2);
    mt_keys_pk_to_hex(k_client.pk, hex_client);
    mt_keys_pk_to_hex(k_stranger.pk, hex_stranger);
    now_s = mt_cert_now();

    test_layout();
    test_refusals();
    test_files();
    test_identity();
    test_authorized_file();
    test_concurrent_set();
    test_handshakes();
    test_wire();
    test_node_renewal();

    mt_keys_wipe(&k_reg);
    mt_keys_wipe(&k_reg2);
    mt_keys_wipe(&k_server);
    mt_keys_wipe(&k_client);
    mt_keys_wipe(&k_stranger);
    return check_report("test_cert");
}
