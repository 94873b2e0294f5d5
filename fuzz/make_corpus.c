/* make_corpus.c - writes the seed inputs of the fuzz targets
 * (fuzz/corpus/<target>/) from MoonTail's own writers, so every seed is a
 * valid input the parser must accept: a tiny synthetic model and shards cut
 * from it (fuzz_gguf; also two copies of the model that must be refused, one
 * with overlapping tensors, one with a vocabulary that does not fit the
 * embedding), the plan and piece manifests of those shards
 * (fuzz_manifest), every data-plane message type from mt_proto_encode
 * (fuzz_proto, and sealed into frames for fuzz_frame), a client hello
 * (fuzz_frame), request bodies (fuzz_openai), texts (fuzz_tokenize) and
 * registry API requests (fuzz_registry), pause schedules (fuzz_schedule),
 * chat templates (fuzz_jinja), the relay's hellos, whole, cut short and
 * malformed (fuzz_relay_hello), and multipart forms as the OpenAI and curl clients send
 * them, and refused ones (fuzz_multipart).
 * Built with the fuzz build; run by `./dev fuzz-corpus`. The output is
 * deterministic; the seeds are committed. */
#include "../src/control/relay_hello.h"
#include "../src/net/net_internal.h"
#include "fuzz_util.h"
#include "moontail/gguf.h"
#include "moontail/proto.h"
#include "moontail/shard.h"
#include "moontail/shard_fetch.h"
#include "moontail/tokenizer.h"
#include "moontail/transport.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *out_root;

static void seed(const char *target, const char *name, const void *data, size_t len) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", out_root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) fuzz_die(path, strerror(errno));
    snprintf(path, sizeof path, "%s/%s/%s", out_root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) fuzz_die(path, "write failed");
}

/* seed() with a one-byte prefix (the targets' selector byte). */
static void seed1(const char *target, const char *name, uint8_t first, const void *data,
                  size_t len) {
    uint8_t *b = malloc(len + 1);
    b[0] = first;
    memcpy(b + 1, data, len);
    seed(target, name, b, len + 1);
    free(b);
}

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fuzz_die(path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) fuzz_die(path, "read failed");
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void seed_file(const char *target, const char *name, const char *path) {
    size_t len;
    void *b = slurp(path, &len);
    seed(target, name, b, len);
    free(b);
}

/* ---- GGUF files and manifests -----------------------------------------------------------------
 */

/* Files the loaders must refuse, so that fuzzing starts next to those checks
 * too: the tiny model with its second tensor's data moved onto its first's
 * (the reader refuses overlaps), and with its vocabulary 40 tokens shorter
 * than the embedding's rows (the model loader refuses that). */
static void refused_models(const char *model) {
    mt_error err = {0};
    char path[600];
    gguf_file *f = gguf_open(model, &err);
    if (!f || f->n_tensors < 2) fuzz_die(model, err.msg);
    size_t len;
    uint8_t *b = slurp(model, &len);
    /* the second tensor's info: its length-prefixed name, n_dims, ne[], type, offset */
    const gguf_tensor *t = &f->tensors[1];
    uint64_t n = strlen(t->name);
    uint8_t key[8 + 256];
    memcpy(key, &n, 8);
    memcpy(key + 8, t->name, n);
    uint8_t *at = memmem(b, f->data_offset, key, 8 + n);
    if (!at) fuzz_die(model, "second tensor's info not found");
    at += 8 + n + 4 + 8 * (size_t)t->n_dims + 4;
    memcpy(at, &f->tensors[0].offset, 8);
    seed("fuzz_gguf", "model-overlap", b, len);
    free(b);

    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_value v = f->kv[i].value;
        const char *k = f->kv[i].key;
        if (v.type == GGUF_TYPE_ARRAY && v.arr.n > 40 &&
            (!strcmp(k, "tokenizer.ggml.tokens") || !strcmp(k, "tokenizer.ggml.token_type") ||
             !strcmp(k, "tokenizer.ggml.scores")))
            v.arr.n -= 40;
        gguf_writer_set_value(w, k, &v);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        t = &f->tensors[i];
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) != 0)
            fuzz_die(t->name, err.msg);
    }
    snprintf(path, sizeof path, "%s/short-vocab.gguf", fuzz_dir());
    if (gguf_writer_write(w, path, &err) != 0) fuzz_die(path, err.msg);
    gguf_writer_free(w);
    gguf_close(f);
    seed_file("fuzz_gguf", "model-vocab-short", path);
}

static void gguf_and_manifests(void) {
    mt_error err = {0};
    char model[400], path[600];
    snprintf(model, sizeof model, "%s/tiny.gguf", fuzz_dir());
    mt_synth_params p = fuzz_tiny_params();
    if (mt_synth_write(&p, model, &err) != 0) fuzz_die("model", err.msg);
    seed_file("fuzz_gguf", "model", model); /* no .gguf: .gitignore */
    snprintf(path, sizeof path, "%s/tiny-k3.gguf", fuzz_dir());
    mt_synth_params k3 = fuzz_tiny_k3_params();
    if (mt_synth_write(&k3, path, &err) != 0) fuzz_die("kimi-k3 model", err.msg);
    seed_file("fuzz_gguf", "model-kimi-k3", path);
    gguf_file *f = gguf_open(model, &err);
    if (!f) fuzz_die(model, err.msg);
    mt_plan plan;
    char manifest[600];
    if (mt_plan_cell(f, 2, &plan, &err) != 0 ||
        mt_plan_write(f, &plan, fuzz_dir(), manifest, sizeof manifest, &err) != 0)
        fuzz_die("cell plan", err.msg);
    mt_plan_free(&plan);
    seed_file("fuzz_manifest", "cell-manifest.json", manifest);
    const char *shards[] = {"tiny-head-0.gguf", "tiny-stage-0.gguf", "tiny-stage-1.gguf"};
    const char *names[] = {"shard-head", "shard-stage-0", "shard-stage-1"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", fuzz_dir(), shards[i]);
        seed_file("fuzz_gguf", names[i], path);
    }
    if (mt_plan_swarm(f, 2, &plan, &err) != 0 ||
        mt_plan_write(f, &plan, fuzz_dir(), manifest, sizeof manifest, &err) != 0)
        fuzz_die("swarm plan", err.msg);
    mt_plan_free(&plan);
    seed_file("fuzz_manifest", "swarm-manifest.json", manifest);
    snprintf(path, sizeof path, "%s/tiny-experts-1.gguf", fuzz_dir());
    seed_file("fuzz_gguf", "shard-experts-1", path);
    gguf_close(f);

    /* the piece manifest of a shard, with small pieces so it lists several */
    snprintf(path, sizeof path, "%s/tiny-stage-0.gguf", fuzz_dir());
    json_t *m = mt_shard_manifest_of_file(path, "tiny-stage-0.gguf", 4096, &err);
    if (!m) fuzz_die("piece manifest", err.msg);
    char *txt = json_dumps(m, JSON_COMPACT);
    seed("fuzz_manifest", "piece-manifest.json", txt, strlen(txt));
    free(txt);
    json_decref(m);

    /* a vocabulary-only file */
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_string(w, "general.architecture", "llama");
    mt_vocab_write_bytes(w, "qwen2", true);
    snprintf(path, sizeof path, "%s/vocab.gguf", fuzz_dir());
    if (gguf_writer_write(w, path, &err) != 0) fuzz_die(path, err.msg);
    gguf_writer_free(w);
    seed_file("fuzz_gguf", "vocab", path);
    refused_models(model);
}

/* ---- data-plane messages ----------------------------------------------------------------------
 */

#define N_EMBD 4

static uint8_t *frame_script; /* fuzz_frame mode 1: [op][len] payload ... */
static size_t script_len;

static void message(const char *name, const mt_proto_msg *m) {
    uint8_t *enc;
    size_t len;
    mt_error err = {0};
    if (mt_proto_encode(m, &enc, &len, &err) != 0) fuzz_die(name, err.msg);
    seed("fuzz_proto", name, enc, len);
    if (len <= 255) { /* the frame script carries a one-byte length */
        frame_script = realloc(frame_script, script_len + 2 + len);
        frame_script[script_len] = 0;
        frame_script[script_len + 1] = (uint8_t)len;
        memcpy(frame_script + script_len + 2, enc, len);
        script_len += 2 + len;
    }
    free(enc);
}

static void messages(void) {
    float rows[3 * N_EMBD];
    for (int i = 0; i < 3 * N_EMBD; i++) rows[i] = (float)i * 0.25f - 1.0f;
    int32_t pos[3] = {0, 1, 2}, ids[3] = {0, 2, 3}, held[2] = {1, 3};
    mt_proto_hop hops[2] = {{"10.0.0.2:7001", {1}, 1, 2}, {"node.example:7002", {2}, 2, 3}};
    mt_proto_msg m;

    memset(&m, 0, sizeof m), m.type = MT_PROTO_INFO, m.request_id = 1;
    message("info", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_STAGE_FORWARD, m.request_id = 2, m.session = 77;
    m.n = 3, m.cols = N_EMBD, m.layer_begin = 0, m.layer_end = 2, m.pos = pos, m.rows = rows;
    message("stage_forward", &m);
    m.dtype = MT_PROTO_BF16;
    message("stage_forward_bf16", &m);
    m.dtype = MT_PROTO_F32, m.oneway = true, m.origin.pass_id = 9, m.origin.pass_end = 3;
    memset(m.origin.pk, 0x5a, sizeof m.origin.pk);
    message("stage_forward_oneway", &m); /* the last stage's: no hops */
    m.n_hops = 2, m.hops = hops, m.n = 1, m.layer_end = 1;
    message("stage_forward_hops", &m);
    m.speculative = true; /* MT_PROTO_FLAG_SPECULATIVE, with and without hops */
    message("stage_forward_hops_speculative", &m);
    m.n_hops = 0, m.hops = NULL, m.n = 3, m.layer_end = 2;
    message("stage_forward_speculative", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_STAGE_AWAIT, m.request_id = 6, m.session = 77;
    m.origin.pass_id = 9, m.pass_begin = 0, m.origin.pass_end = 3;
    memset(m.prev_pk, 0x3c, sizeof m.prev_pk);
    message("stage_await", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_CHAIN_ABORT, m.request_id = 7, m.session = 77;
    m.origin.pass_id = 9, m.origin.pass_end = 3, m.code = MT_PROTO_ERR_UNKNOWN_SESSION, m.back = 1;
    memset(m.origin.pk, 0x5a, sizeof m.origin.pk);
    snprintf(m.text, sizeof m.text, "session 77 is not known here");
    message("chain_abort", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_EXPERT_RUN, m.request_id = 3, m.layer_begin = 1;
    m.n = 3, m.cols = N_EMBD, m.ids = ids, m.rows = rows;
    message("expert_run", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_SESSION_END, m.request_id = 4, m.session = 77;
    message("session_end", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_INFO_REPLY, m.request_id = 1;
    mt_proto_info *in = &m.info;
    snprintf(in->arch, sizeof in->arch, "qwen3moe");
    in->n_embd = N_EMBD, in->n_layer = 2, in->n_expert = 4, in->n_expert_used = 2;
    in->layer_begin = 0, in->layer_end = 2, in->attention = true, in->experts = true;
    in->n_ctx = 256, in->max_sessions = 8, in->res_block = 1, in->n_embd_exp = 2;
    memset(in->source_id, 'a', MT_SHARD_HASH_HEX - 1);
    in->n_held = 2, in->held = held;
    message("info_reply", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_STAGE_REPLY, m.request_id = 2, m.n = 2;
    m.cols = N_EMBD + 1; /* a stream and part of a checkpoint bank: any width decodes */
    m.rows = rows;
    message("stage_reply", &m);
    m.type = MT_PROTO_EXPERT_REPLY, m.dtype = MT_PROTO_BF16;
    message("expert_reply_bf16", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_SESSION_END_REPLY, m.request_id = 4;
    m.existed = true;
    message("session_end_reply", &m);
    memset(&m, 0, sizeof m), m.type = MT_PROTO_ERROR, m.request_id = 5;
    m.code = MT_PROTO_ERR_UNKNOWN_SESSION;
    snprintf(m.text, sizeof m.text, "session 77 is unknown: replay from position 0");
    message("error", &m);
    m.code = MT_PROTO_ERR_COMPUTE, m.has_back = true, m.back = 2; /* an AWAIT's failed stage */
    snprintf(m.text, sizeof m.text, "stage 2 before the last: next hop cannot be reached");
    message("error_stage", &m);
}

/* ---- frames and hellos ------------------------------------------------------------------------
 */

static void frames(void) {
    seed1("fuzz_frame", "script", 1, frame_script, script_len);
    /* mode 0: two frames sealed under the fuzzer's key, back to back */
    net_dir d;
    memset(&d, 0, sizeof d);
    fuzz_frame_key(d.key, sizeof d.key);
    size_t l1, l2;
    uint8_t *f1 = net_frame_seal(&d, frame_script + 2, frame_script[1], &l1);
    uint8_t *f2 = net_frame_seal(&d, "", 0, &l2);
    uint8_t *both = malloc(l1 + l2);
    memcpy(both, f1, l1), memcpy(both + l1, f2, l2);
    seed1("fuzz_frame", "raw", 0, both, l1 + l2);
    free(f1), free(f2), free(both);
    /* mode 2: a client hello (transport.h), then the start of a frame */
    uint8_t hello[MT_CONN_HELLO_BYTES + 8] = {'M', 'T', 'N', '1', MT_CONN_VERSION, 0, 0, 0};
    for (int i = 8; i < MT_CONN_HELLO_BYTES; i++) hello[i] = (uint8_t)(i * 13);
    hello[MT_CONN_HELLO_BYTES] = 64;
    seed1("fuzz_frame", "hello", 2, hello, sizeof hello);
}

/* ---- HTTP request bodies and texts ------------------------------------------------------------
 */

static void bodies(void) {
    static const struct {
        const char *name;
        int chat;
        const char *body;
    } b[] = {
        {"completion", 0,
         "{\"model\":\"tiny\",\"prompt\":[\"Hello\"],\"max_tokens\":7,\"temperature\":0,"
         "\"top_p\":0.5,\"seed\":-3,\"stop\":\"\\n\",\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true},\"n\":1,\"user\":\"u\","
         "\"logprobs\":null,\"echo\":false}"},
        {"completion_ids", 0,
         "{\"model\":\"tiny\",\"prompt\":\"a b\",\"stop\":[\"x\",\"yz\"],"
         "\"frequency_penalty\":0.5,\"presence_penalty\":-0.5,\"max_tokens\":null}"},
        {"chat", 1,
         "{\"model\":\"tiny\",\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
         "{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"x\"},"
         "{\"role\":\"assistant\",\"content\":null}],"
         "\"max_completion_tokens\":3,\"tools\":[],\"response_format\":"
         "{\"type\":\"text\"}}"},
        {"chat_system", 1,
         "{\"model\":\"tiny\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
         "{\"role\":\"user\",\"content\":\"Hi \\u00e9\\ud83d\\ude00\"}],\"stream\":true,"
         "\"temperature\":1.5,\"seed\":42}"},
        {"chat_thinking", 1,
         "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},"
         "{\"role\":\"assistant\",\"content\":\"x<think>\\nr\\n</think>\\n\\nA\","
         "\"reasoning_content\":\" \\nR\"},{\"role\":\"user\",\"content\":\"Q2\"}],"
         "\"chat_template_kwargs\":{\"enable_thinking\":false,\"thinking\":true,"
         "\"thinking_effort\":\"low\",\"other\":[1]}}"},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        seed1("fuzz_openai", b[i].name, (uint8_t)b[i].chat, b[i].body, strlen(b[i].body));
}

static void texts(void) {
    static const struct {
        const char *name;
        uint8_t sel; /* vocabulary (mod the count) | 0x40 add_special | 0x80 parse_special */
        const char *text;
    } t[] = {
        {"ascii", 0, "Hello, world! It's 2026: 12345 tokens, 3.14 and    spaces\n\ttabs."},
        {"utf8", 1, "Grüße, мир, 世界, 🌍 and \xe2\x80\x94 dashes"},
        {"special", 0x80 | 0x40, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
        {"digits", 2, "1234567890 0.000001 1e10 -42"},
        {"kimi", 3, "  leading space, 'quotes', CAPS and camelCase\r\n\r\n"},
        {"default", 4, "don't can't I'm we'll they've"},
        {"qwen3", 5, "The Qwen3 vocabulary: \xe4\xbd\xa0\xe5\xa5\xbd <think>x</think>"},
        {"invalid", 0x80 | 5, "\xff\xfe broken \xc3 utf8 \xed\xa0\x80 <|endoftext|>"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        seed1("fuzz_tokenize", t[i].name, t[i].sel, t[i].text, strlen(t[i].text));
}

static void registry_requests(void) {
    static const char pk[] = "7d3f1a2b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7";
    char join[600];
    snprintf(join, sizeof join,
             "POST /v1/nodes u\n{\"name\": \"n2\", \"pubkey\": \"%s\", \"addr\": "
             "\"127.0.0.1:9\", \"capacity\": 1000000, \"speed\": 1.5, \"hw\": {\"ram\": "
             "8000000000, \"cores\": 4, \"simd\": \"avx2\", \"gpu\": \"\"}}",
             pk);
    static const struct {
        const char *name, *req;
    } q[] = {
        {"account", "POST /v1/accounts a\n{\"name\": \"bob\"}"},
        {"me", "GET /v1/accounts/me u\n"},
        {"cert", "POST /v1/accounts/me/cert u\n{\"pubkey\": \"00ff\"}"},
        {"heartbeat", "POST /v1/nodes/@/heartbeat n\n{\"ready_shard\": \"\", \"served\": "
                      "{\"token_layers\": 5, \"expert_rows\": 2}, \"load\": 0.5}"},
        {"pause", "POST /v1/nodes/@/pause n\n{\"pause\": true, \"schedule\": \"mon-fri "
                  "09:00-17:00\"}"},
        {"resume", "POST /v1/nodes/@/pause u\n{\"resume\": true}"},
        {"shard", "GET /v1/shards/stage-0-l0-2 -\n"},
        {"route", "POST /v1/routes u\n{\"session\": 12345, \"avoid\": [1, 2]}"},
        {"keepalive", "POST /v1/routes/keepalive u\n{\"ticket\": \"abc\"}"},
        {"done", "POST /v1/routes/done u\n{\"ticket\": \"abc\"}"},
        {"usage", "POST /v1/usage u\n{\"tokens\": 7, \"used_tokens\": 3}"},
        {"ledger", "GET /v1/ledger/nodes u\n"},
        {"status", "GET /v1/status -\n"},
        {"metrics", "GET /metrics -\n"},
        {"index", "GET / -\n"},
        {"report", "POST /v1/reports u\n{\"nodes\": [@, 2], \"layers\": [0, 2], \"position\": 3,"
                   " \"tokens\": 1, \"hashes\": [\"00000000000000000000000000000000000000000000"
                   "00000000000000000000\", \"0000000000000000000000000000000000000000000000000"
                   "000000000000001\"]}"},
        {"release", "POST /v1/nodes/@/release a\n{}"},
    };
    seed("fuzz_registry", "join", join, strlen(join));
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        seed("fuzz_registry", q[i].name, q[i].req, strlen(q[i].req));
}

static void schedules(void) {
    static const char *const t[] = {"Mon-Fri 09:00-18:00; Sat 10:00-14:00", "daily 22:00-06:00",
                                    "Fri-Mon 00:00-24:00, mon wed fri 12:30-13:15", "18:00-08:00"};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "schedule-%zu", i);
        seed("fuzz_schedule", name, t[i], strlen(t[i]));
    }
}

/* Chat templates written for the fuzzer (fuzz_jinja): the real ones are other projects' text
 * and stay out of the repository. */
static void jinja_templates(void) {
    static const struct {
        const char *name, *text;
    } t[] = {
        {"call-block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro "
                       "%}{% call wrap('b') %}{{ messages[-1].content[::-1] }}{% endcall %}{{ "
                       "raise_exception('stop') if messages|length > 9 }}"},
        {"chatml", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_en"
                   "d|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{%"
                   " endif %}"},
        {"errors", "{{ messages[0].content.startswith('Be') and (1 / 0) }}"},
        {"filters", "{{ messages|map(attribute='role')|join(', ') }}|{{ tools|tojson(indent"
                    "=2) }}|{{ messages|selectattr('role', 'equalto', 'user')|list|length }"
                    "}|{{ 'a,b'.split(',')|reverse|list }}|{{ (messages[1].content ~ '!')|u"
                    "pper|trim }}"},
        {"loopctl", "{% for i in range(20) %}{% if i is odd %}{% continue %}{% endif %}{% i"
                    "f i > 12 %}{% break %}{% endif %}{{ loop.index0 }}{{ loop.cycle('a', '"
                    "b') }}{% endfor %}{% set a, b = 1, 2 %}{{ a + b * 3 // 2 ** 2 % 5 }}{{"
                    " [1, 2][5] is undefined }}"},
        {"macro-ns", "{%- macro r(v) -%}{%- if v is mapping -%}{% for k, x in v|dictsort %}{"
                     "{ k }}={{ r(x) }};{% endfor %}{%- else -%}{{ v|tojson }}{%- endif -%}{"
                     "%- endmacro -%}{% set ns = namespace(n=0) %}{% for m in messages if m."
                     "role != 'tool' %}{% set ns.n = ns.n + 1 %}{{ r(m) }}{% endfor %}{{ ns."
                     "n }}"},
        {"tool-calls", "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %"
                       "}{{ c.function.name }}({{ c.function.arguments|tojson }}){{ ',' if not"
                       " loop.last }}{% endfor %}{% elif m.role == 'tool' %}[{{ m.tool_call_id"
                       " }}: {{ m.content }}]{% endif %}{% endfor %}"},
        {"whitespace", "  {%- if enable_thinking is defined and not enable_thinking %}\n  <thin"
                       "k></think>\n  {% endif -%}\n{# comment #}\n{% raw %}{{ raw }}{% endraw %}"
                       "\n{{- bos_token -}}"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        seed("fuzz_jinja", t[i].name, t[i].text, strlen(t[i].text));
}

/* ---- the relay's hellos ----------------------------------------------------------------------
 */

static void relay_hellos(void) {
    uint8_t proof[32], cookie[MT_RELAY_COOKIE_BYTES], challenge[MT_RELAY_CHALLENGE_BYTES];
    for (int i = 0; i < 32; i++) proof[i] = (uint8_t)(i * 11 + 3), challenge[i] = (uint8_t)(i * 5);
    for (int i = 0; i < MT_RELAY_COOKIE_BYTES; i++) cookie[i] = (uint8_t)(0xc0 + i);
    const char *t = "fuzz_relay_hello";
    uint8_t ctl[MT_RELAY_CONTROL_BYTES], data[MT_RELAY_DATA_BYTES + MT_CONN_HELLO_BYTES];
    relay_hello_control_write(ctl, 7, proof);
    seed(t, "control", ctl, sizeof ctl);
    seed(t, "control-cut", ctl, 20);
    seed(t, "head-only", ctl, 6);
    relay_hello_control_write(ctl, 0, proof);
    seed(t, "control-node-0", ctl, sizeof ctl);
    relay_hello_control_write(ctl, -1, proof); /* 2^64-1 on the wire */
    seed(t, "control-node-huge", ctl, sizeof ctl);
    relay_hello_data_write(data, cookie);
    seed(t, "data", data, MT_RELAY_DATA_BYTES);
    seed(t, "data-cut", data, 10);
    /* what follows a data hello belongs to the data plane: a transport hello's start */
    memset(data + MT_RELAY_DATA_BYTES, 0, MT_CONN_HELLO_BYTES);
    memcpy(data + MT_RELAY_DATA_BYTES, "MTN1", 4);
    data[MT_RELAY_DATA_BYTES + 4] = MT_CONN_VERSION;
    seed(t, "data-then-stream", data, sizeof data);
    const char *http = "GET / HTTP/1.1\r\nHost: relay\r\n\r\n";
    seed(t, "wrong-magic", http, strlen(http));
    /* whole hellos with one header byte wrong, so that a reader which let more bytes change
     * its answer fails the target's checks from the seeds on */
    data[4] = 7;
    seed(t, "unknown-kind", data, MT_RELAY_DATA_BYTES);
    relay_hello_control_write(ctl, 7, proof);
    ctl[5] = 9;
    seed(t, "reserved-set", ctl, sizeof ctl);
    uint8_t server[MT_RELAY_HELLO_BYTES];
    relay_hello_server_write(server, challenge);
    seed(t, "server", server, sizeof server);
}

/* ---- multipart forms (POST /v1/files) --------------------------------------------------------
 */

/* A seed of fuzz_multipart: the Content-Type value, '\n', the body. */
static void form(const char *name, const char *ct, const char *body) {
    size_t cn = strlen(ct), bn = strlen(body);
    char *b = malloc(cn + 1 + bn);
    memcpy(b, ct, cn);
    b[cn] = '\n';
    memcpy(b + cn + 1, body, bn);
    seed("fuzz_multipart", name, b, cn + 1 + bn);
    free(b);
}

static void forms(void) {
    /* as the openai npm client (undici's FormData) sends a batch file */
    form("openai-node", "multipart/form-data; boundary=----formdata-undici-0123456789",
         "------formdata-undici-0123456789\r\n"
         "Content-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
         "------formdata-undici-0123456789\r\n"
         "Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n"
         "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\","
         " \"body\": {\"model\": \"tiny\", \"prompt\": \"Hi\"}}\n\r\n"
         "------formdata-undici-0123456789--\r\n");
    /* as curl -F sends it, and a quoted boundary with a space */
    form("curl", "multipart/form-data; boundary=------------------------d74496d66958873e",
         "--------------------------d74496d66958873e\r\n"
         "Content-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n{}\n\r\n"
         "--------------------------d74496d66958873e\r\n"
         "Content-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
         "--------------------------d74496d66958873e--");
    form("quoted-boundary", "Multipart/Form-Data;boundary=\"a b'()+_,-./:=?\"",
         "--a b'()+_,-./:=?\r\ncontent-disposition: form-data ; name=\"x\"\r\n\r\n"
         "\r\n--a b'()+_,-./:=?--");
    /* refusals: a preamble, an unknown header, a data part that never ends */
    form("preamble", "multipart/form-data; boundary=XyZ",
         "hello\r\n--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--XyZ--");
    form("unknown-header", "multipart/form-data; boundary=XyZ",
         "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX-More: 1\r\n\r\n1\r\n"
         "--XyZ--");
    form("unterminated", "multipart/form-data; boundary=XyZ",
         "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1234");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus OUT_DIR (fuzz/corpus)\n");
        return 2;
    }
    out_root = argv[1];
    if (mkdir(out_root, 0755) != 0 && errno != EEXIST) fuzz_die(out_root, strerror(errno));
    gguf_and_manifests();
    messages();
    frames();
    bodies();
    texts();
    registry_requests();
    schedules();
    jinja_templates();
    relay_hellos();
    forms();
    return 0;
}
