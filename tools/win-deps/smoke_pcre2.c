/* win-deps smoke check: pcre2 (8-bit) has JIT, compiles a UTF-8 pattern with Unicode
 * properties, JIT-compiles it and finds the expected match. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    uint32_t jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &jit);
    if (!jit) {
        puts("pcre2 was built without JIT");
        return 1;
    }
    const char *pat = "(\\p{L}+)\\s+\xc3\xbc"
                      "ber"; /* (\p{L}+)\s+über */
    const char *subj = "na\xc3\xafve Gr\xc3\xbc\xc3\x9f"
                       "e \xc3\xbc"
                       "ber alles"; /* naïve Grüße über alles */
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, NULL);
    if (!re) {
        puts("pcre2_compile failed");
        return 1;
    }
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) {
        puts("pcre2_jit_compile failed");
        return 1;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_jit_match(re, (PCRE2_SPTR)subj, strlen(subj), 0, 0, md, NULL);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    const char *want = "Gr\xc3\xbc\xc3\x9f"
                       "e";
    int good =
        rc == 2 && ov[3] - ov[2] == strlen(want) && memcmp(subj + ov[2], want, strlen(want)) == 0;
    char ver[32];
    pcre2_config(PCRE2_CONFIG_VERSION, ver);
    printf("%s: pcre2 %s, JIT: group 1 is bytes %u..%u (%s)\n", good ? "ok" : "FAIL", ver,
           (unsigned)ov[2], (unsigned)ov[3], good ? "Gr\\u00fc\\u00dfe" : "wrong");
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return good ? 0 : 1;
}
