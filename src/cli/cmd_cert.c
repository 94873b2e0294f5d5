/* cmd_cert.c - `moontail cert`: issues a certificate with an authority's
 * secret key (what the registry does for nodes and requesters; here for
 * operators and tests) and shows what a certificate file says. Format and
 * checks: moontail/cert.h. */
#include "cli.h"
#include "moontail/cert.h"
#include "moontail/keys.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: moontail cert issue --issuer KEYFILE --subject PUBKEY --role node|requester\n"
    "                           [--account N] [--days D | --minutes M] -o FILE\n"
    "       moontail cert show FILE\n"
    "\n"
    "issue: signs a certificate saying that PUBKEY (64 hex digits) is a node or a\n"
    "requester, with the authority's secret key file (moontail keygen). Nodes that trust\n"
    "the authority (moontail node --authority) admit the key while it is valid.\n"
    "  --issuer KEYFILE  the authority's secret key file\n"
    "  --subject PUBKEY  the key vouched for\n"
    "  --role R          node or requester\n"
    "  --account N       account id (default 0: none)\n"
    "  --days D          valid for D days from now (default 30)\n"
    "  --minutes M       valid for M minutes from now instead\n"
    "  -o FILE           where to write it (an existing file is replaced)\n"
    "\n"
    "show: prints a certificate's fields and whether it is valid now; exits 1 if the\n"
    "file is not a well-formed certificate signed by the authority it names.\n";

static int cert_issue(int argc, char **argv) {
    const char *issuer_path = NULL, *subject = NULL, *role = NULL, *out = NULL;
    int64_t account = 0, days = 0, minutes = 0;
    const cli_opt opts[] = {
        {"--issuer", CLI_STRING, &issuer_path, 0, 0},
        {"--subject", CLI_STRING, &subject, 0, 0},
        {"--role", CLI_STRING, &role, 0, 0},
        {"--account", CLI_INT, &account, 0, INT64_MAX},
        {"--days", CLI_INT, &days, 1, 36500},
        {"--minutes", CLI_INT, &minutes, 1, 36500LL * 24 * 60},
        {"-o", CLI_STRING, &out, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("cert issue", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!issuer_path || !subject || !role || !out) {
        fprintf(stderr, "moontail cert issue: --issuer, --subject, --role and -o are required;"
                        " see 'moontail cert --help'\n");
        return 2;
    }
    if (days && minutes) {
        fprintf(stderr, "moontail cert issue: give --days or --minutes, not both\n");
        return 2;
    }
    mt_error err = {{0}};
    mt_cert c = {0};
    int r = mt_cert_role_from_name(role);
    if (r < 0) {
        fprintf(stderr, "moontail cert issue: --role must be node or requester, not '%s'\n", role);
        return 2;
    }
    c.role = (mt_cert_role)r;
    if (mt_keys_pk_from_hex(c.subject, subject, &err)) {
        fprintf(stderr, "moontail cert issue: --subject: %s\n", err.msg);
        return 2;
    }
    c.account = (uint64_t)account;
    c.not_before = mt_cert_now();
    c.not_after = c.not_before +
                  (minutes ? (uint64_t)minutes * 60 : (uint64_t)(days ? days : 30) * 24 * 3600);
    mt_keys issuer;
    uint8_t bytes[MT_CERT_BYTES];
    int rc = 1;
    if (mt_keys_load(&issuer, issuer_path, &err) == 0) {
        randombytes_buf(&c.serial, sizeof c.serial);
        if (mt_cert_issue(&c, &issuer, bytes, &err) == 0 && mt_cert_save(bytes, out, &err) == 0)
            rc = 0;
    }
    mt_keys_wipe(&issuer);
    if (rc) {
        fprintf(stderr, "moontail cert issue: %s\n", err.msg);
        return rc;
    }
    char until[32];
    mt_cert_time_str(c.not_after, until);
    printf("%s: %s certificate for %s, serial %llu, valid until %s\n", out, role, subject,
           (unsigned long long)c.serial, until);
    return 0;
}

static int cert_show(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "moontail cert show: give one certificate file (and no options); see"
                        " 'moontail cert --help'\n");
        return 2;
    }
    const char *path = argv[1];
    mt_error err = {{0}};
    uint8_t bytes[MT_CERT_BYTES];
    mt_cert c;
    if (mt_cert_load(path, bytes, &c, &err)) {
        fprintf(stderr, "moontail cert show: %s\n", err.msg);
        return 1;
    }
    char subject[MT_KEYS_HEX_SIZE], issuer[MT_KEYS_HEX_SIZE], from[32], until[32];
    mt_keys_pk_to_hex(c.subject, subject);
    mt_keys_pk_to_hex(c.issuer, issuer);
    mt_cert_time_str(c.not_before, from);
    mt_cert_time_str(c.not_after, until);
    mt_error terr = {{0}};
    bool valid = mt_cert_check_time(&c, mt_cert_now(), 0, &terr) == 0;
    printf("certificate %s\n"
           "  role        %s\n"
           "  subject     %s\n"
           "  issuer      %s\n"
           "  account     %llu%s\n"
           "  not before  %s\n"
           "  not after   %s\n"
           "  serial      %llu\n"
           "  now         %s\n",
           path, mt_cert_role_name(c.role), subject, issuer, (unsigned long long)c.account,
           c.account ? "" : " (none)", from, until, (unsigned long long)c.serial,
           valid ? "valid (signature checked; whether a node trusts the issuer is its own "
                   "choice)"
                 : terr.msg);
    return 0;
}

int cmd_cert(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "issue") == 0) return cert_issue(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "show") == 0) return cert_show(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "moontail cert: expected 'issue' or 'show'; see 'moontail cert --help'\n");
    return 2;
}
