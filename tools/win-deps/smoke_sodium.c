/* win-deps smoke check: libsodium initialises and hashes "abc" to the digest given as
 * argv[1] (the script takes it from the host's sha256sum); a box round trip works. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    if (sodium_init() < 0) {
        puts("sodium_init failed");
        return 1;
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * sizeof h + 1];
    crypto_hash_sha256(h, (const unsigned char *)"abc", 3);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    if (strcmp(hex, argv[1]) != 0) {
        printf("sha256(abc) = %s, want %s\n", hex, argv[1]);
        return 1;
    }
    unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    unsigned char c[crypto_box_SEALBYTES + 5], m[5];
    crypto_box_keypair(pk, sk);
    crypto_box_seal(c, (const unsigned char *)"hello", 5, pk);
    if (crypto_box_seal_open(m, c, sizeof c, pk, sk) != 0 || memcmp(m, "hello", 5) != 0) {
        puts("crypto_box_seal round trip failed");
        return 1;
    }
    printf("ok: libsodium %s: sha256(abc) = %s, sealed box round trip\n", sodium_version_string(),
           hex);
    return 0;
}
