/* fuzz_proto.c - libFuzzer target for the data-plane message decoder
 * (mt_proto_decode, proto.h): what a node or requester does with a frame's
 * payload after decryption. Input: the payload (rows carry their own width).
 * A message that decodes must encode again; with f32
 * rows the encoding must give back exactly the same bytes (the format has one
 * encoding per message), and it must decode again. */
#include "fuzz_target.h"
#include "moontail/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so reading one byte too far is caught */
    uint8_t *buf = malloc(size ? size : 1);
    if (size) memcpy(buf, data, size);
    mt_proto_msg m;
    mt_error err = {0};
    if (mt_proto_decode(buf, size, &m, &err) == 0) {
        uint8_t *enc = NULL;
        size_t len = 0;
        if (mt_proto_encode(&m, &enc, &len, &err) != 0) abort(); /* decoded => encodable */
        if (m.dtype == MT_PROTO_F32 && (len != size || memcmp(enc, buf, size) != 0)) abort();
        mt_proto_msg again;
        if (mt_proto_decode(enc, len, &again, &err) != 0) abort();
        if (again.type != m.type || again.n != m.n || again.cols != m.cols ||
            again.request_id != m.request_id)
            abort();
        mt_proto_msg_free(&again);
        free(enc);
        mt_proto_msg_free(&m);
    }
    free(buf);
    return 0;
}
