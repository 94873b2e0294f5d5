/* cmd_split.c - `moontail split`: cuts one shard out of a model, or a whole
 * plan's set of shards with its manifest (see moontail/shard.h), or writes
 * the model as the N files of a split model (gguf-split's layout). */
#include "cli.h"
#include "moontail/clock.h"
#include "cli_shard_io.h"
#include "moontail/model.h"
#include "moontail/progress.h"
#include "moontail/shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: moontail split MODEL --layers A:B [--experts LIST | --no-experts]\n"
    "                            [--attention | --no-attention] [--head] -o FILE\n"
    "       moontail split MODEL --head -o FILE\n"
    "       moontail split MODEL --plan cell:N | swarm:N -o DIR\n"
    "       moontail split MODEL --parts N -o PREFIX\n"
    "\n"
    "Writes a shard: a GGUF file holding part of MODEL's tensors, with moontail.shard.*\n"
    "metadata and a content hash of every tensor. With --parts, writes MODEL again as\n"
    "the N files of a split model instead.\n"
    "\n"
    "MODEL may be a single GGUF file or any file of a split model (NAME-00001-of-0000N.gguf\n"
    "... as llama.cpp's gguf-split writes them): the other files are found next to it.\n"
    "\n"
    "  --layers A:B     layers [A, B): 0-based, B exclusive (0:8 is the first 8 layers)\n"
    "  --experts LIST   only these routed experts of each MoE layer, e.g. 0,3,5-9\n"
    "                   (default: all experts)\n"
    "  --no-experts     no routed experts\n"
    "  --attention      the layers' non-expert part: norms, attention, router, shared\n"
    "                   experts, dense FFN (default)\n"
    "  --no-attention   leave the non-expert part out (an expert shard)\n"
    "  --head           also token_embd, output_norm, output (rope_freqs, a llama-3\n"
    "                   RoPE vector, goes with the head and with every attention part)\n"
    "  --plan cell:N    one head shard + N pipeline stages of whole layers, balanced by bytes\n"
    "  --plan swarm:N   one backbone shard (head + all attention parts) + N shards of\n"
    "                   routed experts, each a contiguous range of expert ids\n"
    "  --parts N        the files PREFIX-00001-of-0000N.gguf ... in gguf-split's layout\n"
    "                   (llama.cpp opens them): all metadata in the first, the tensors in\n"
    "                   model order cut into N runs of nearly equal bytes; N = 1 merges a\n"
    "                   split model into one file\n"
    "  -o PATH          the shard file, with --plan the output directory (files\n"
    "                   <model>-<role>-<k>.gguf and <model>-<mode>-manifest.json), with\n"
    "                   --parts the name before -0000k-of-0000N.gguf (a final .gguf is\n"
    "                   dropped)\n"
    "  --hash-cache PATH  where the model's hashes are kept between runs (default\n"
    "                   $XDG_CACHE_HOME/moontail/hashes.sqlite or ~/.cache/moontail/;\n"
    "                   'none': no cache)\n"
    "  --rehash         read and hash the whole model again, ignoring the cache\n"
    "  -t N             threads that hash and copy (default: every core)\n";

/* "A:B" -> two layer numbers (range checks come with the model). */
static bool parse_layers(const char *s, int32_t *a, int32_t *b) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end != ':' || x < 0 || x > INT32_MAX || *s == '-' || *s == '+')
        goto bad;
    const char *t = end + 1;
    long y = strtol(t, &end, 10);
    if (errno || end == t || *end || y < 0 || y > INT32_MAX || *t == '-' || *t == '+') goto bad;
    *a = (int32_t)x;
    *b = (int32_t)y;
    return true;
bad:
    fprintf(stderr, "moontail split: --layers expects A:B (layers [A, B), e.g. 0:8), got '%s'\n",
            s);
    return false;
}

static int split_plan(const gguf_file *f, const char *plan_s, const char *out, mt_shard_io *io) {
    mt_error err = {{0}};
    mt_plan_mode mode;
    int32_t n;
    if (mt_plan_parse(plan_s, &mode, &n, &err)) {
        fprintf(stderr, "moontail split: --plan: %s\n", err.msg);
        return 2;
    }
    mt_plan plan;
    int rc =
        mode == MT_PLAN_CELL ? mt_plan_cell(f, n, &plan, &err) : mt_plan_swarm(f, n, &plan, &err);
    if (rc) {
        fprintf(stderr, "moontail split: %s\n", err.msg);
        return 1;
    }
    char manifest[4096];
    if (mt_plan_write_io(f, &plan, out, manifest, sizeof manifest, io, &err)) {
        fprintf(stderr, "moontail split: %s\n", err.msg);
        mt_plan_free(&plan);
        return 1;
    }
    for (int32_t i = 0; i < plan.n_shards; i++) {
        const mt_plan_shard *s = &plan.shards[i];
        printf("%-8s %2d  layers %d:%d%s%s", mt_plan_role_name(s->role), s->index,
               s->spec.layer_begin, s->spec.layer_end, s->spec.attention ? " attention" : "",
               s->spec.head ? " head" : "");
        if (s->spec.n_experts < 0)
            printf(" experts all");
        else if (s->spec.n_experts > 0)
            printf(" experts %d-%d", s->spec.experts[0], s->spec.experts[s->spec.n_experts - 1]);
        printf("  %.1f MiB\n", (double)s->tensor_bytes / (1024.0 * 1024.0));
    }
    printf("manifest %s\n", manifest);
    mt_plan_free(&plan);
    return 0;
}

typedef struct parts_bar {
    mt_progress bar;
    double t0; /* mt_mono_s() at the start */
} parts_bar;

static void parts_progress(void *ctx, uint64_t done, uint64_t total) {
    parts_bar *pb = ctx;
    double dt = mt_mono_s() - pb->t0;
    double rate = dt > 0 ? (double)done / dt : 0;
    mt_progress_update(&pb->bar, done, total, rate, rate > 0 ? (double)(total - done) / rate : -1);
}

/* The parts' model identity, from the hashes of the bytes as they were
 * copied; kept in id to be shown. */
typedef struct parts_id {
    const gguf_file *f;
    char id[MT_SHARD_HASH_HEX];
} parts_id;

_Static_assert(MT_SHARD_HASH_HEX == GGUF_SPLIT_SOURCE_ID_LEN + 1,
               "a source_id fills the split's source-id key exactly");

static int parts_source_id(void *ctx, const uint8_t (*hashes)[32], char *out, mt_error *err) {
    parts_id *p = ctx;
    if (mt_shard_source_id_from(p->f, hashes, p->id, err)) return -1;
    memcpy(out, p->id, MT_SHARD_HASH_HEX);
    return 0;
}

/* --parts: the model as n files of a split set, each tagged with the
 * model's identity so that parts of different models are never mixed. The
 * model is read once: its identity comes from the bytes as they are copied. */
static int split_parts(const gguf_file *f, int64_t n, const char *out, int threads) {
    mt_error err = {{0}};
    char prefix[4096];
    size_t ol = strlen(out);
    if (ol >= sizeof prefix - 32) {
        fprintf(stderr, "moontail split: -o %s: the name is too long\n", out);
        return 2;
    }
    memcpy(prefix, out, ol + 1);
    if (ol > 5 && strcmp(prefix + ol - 5, ".gguf") == 0) prefix[ol - 5] = 0;
    if ((uint64_t)n > f->n_tensors) {
        fprintf(stderr,
                "moontail split: --parts %lld: %s has %llu tensors and every part needs one; use"
                " at most %llu parts\n",
                (long long)n, f->path, (unsigned long long)f->n_tensors,
                (unsigned long long)f->n_tensors);
        return 2;
    }
    parts_id id = {f, ""};
    uint64_t *first = malloc(((size_t)n + 1) * sizeof *first);
    mt_pool *pool = mt_pool_create(threads);
    if (!first || !pool) {
        mt_error_set(&err, !first ? "out of memory"
                                  : "cannot start the copying threads; give fewer with -t");
        goto fail;
    }
    parts_bar pr;
    mt_progress_init(&pr.bar, stderr, "writing parts");
    pr.t0 = mt_mono_s();
    gguf_split_opts o = {.source_id_of = parts_source_id,
                         .source_id_ctx = &id,
                         .pool = pool,
                         .progress = parts_progress,
                         .progress_ctx = &pr,
                         .part_tensors = first};
    if (gguf_split_write(f, (uint32_t)n, prefix, &o, &err)) goto fail;
    mt_pool_free(pool);
    for (int64_t k = 0; k < n; k++) {
        char path[4200];
        gguf_split_path(path, sizeof path, prefix, (uint32_t)k, (uint32_t)n);
        uint64_t bytes = 0;
        for (uint64_t i = first[k]; i < first[k + 1]; i++) bytes += f->tensors[i].nbytes;
        printf("wrote %s: %llu tensors, %.1f MiB of tensors%s\n", path,
               (unsigned long long)(first[k + 1] - first[k]), (double)bytes / (1024.0 * 1024.0),
               k == 0 ? " and the metadata" : "");
    }
    printf("model identity %s\n", id.id);
    free(first);
    return 0;
fail:
    fprintf(stderr, "moontail split: %s\n", err.msg);
    mt_pool_free(pool);
    free(first);
    return 1;
}

int cmd_split(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            fputs(usage, stdout);
            return 0;
        }
        fprintf(stderr, "moontail split: give the model file first; see 'moontail split --help'\n");
        return 2;
    }
    const char *model = argv[1], *layers = NULL, *experts = NULL, *plan = NULL, *out = NULL;
    const char *hash_cache = NULL;
    bool no_experts = false, attention = false, no_attention = false, head = false, rehash = false;
    int64_t threads = 0, parts = 0;
    const cli_opt opts[] = {
        {"--parts", CLI_INT, &parts, 1, GGUF_SPLIT_MAX_PARTS},
        {"--layers", CLI_STRING, &layers, 0, 0},
        {"--experts", CLI_STRING, &experts, 0, 0},
        {"--no-experts", CLI_FLAG, &no_experts, 0, 0},
        {"--attention", CLI_FLAG, &attention, 0, 0},
        {"--no-attention", CLI_FLAG, &no_attention, 0, 0},
        {"--head", CLI_FLAG, &head, 0, 0},
        {"--plan", CLI_STRING, &plan, 0, 0},
        {"-o", CLI_STRING, &out, 0, 0},
        {"--hash-cache", CLI_STRING, &hash_cache, 0, 0},
        {"--rehash", CLI_FLAG, &rehash, 0, 0},
        {"-t", CLI_INT, &threads, 1, 1024},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("split", argc - 1, argv + 1, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!out) {
        fprintf(stderr, "moontail split: -o %s is required\n",
                plan    ? "DIR"
                : parts ? "PREFIX"
                        : "FILE");
        return 2;
    }
    if (parts && (plan || layers || experts || no_experts || attention || no_attention || head)) {
        fprintf(stderr, "moontail split: --parts writes the whole model again; drop --plan,"
                        " --layers, --experts, --attention and --head\n");
        return 2;
    }
    if (plan && (layers || experts || no_experts || attention || no_attention || head)) {
        fprintf(stderr, "moontail split: --plan chooses every shard itself; drop --layers,"
                        " --experts, --attention and --head\n");
        return 2;
    }
    if (!plan && !layers && !head && !parts) {
        fprintf(stderr, "moontail split: give --layers A:B, --head, --plan MODE:N or --parts N\n");
        return 2;
    }
    if (attention && no_attention) {
        fprintf(stderr, "moontail split: --attention and --no-attention contradict each other\n");
        return 2;
    }
    if (experts && no_experts) {
        fprintf(stderr, "moontail split: --experts and --no-experts contradict each other\n");
        return 2;
    }
    mt_shard_spec spec = {0, 0, layers != NULL && !no_attention, head, NULL, -1};
    if (layers && !parse_layers(layers, &spec.layer_begin, &spec.layer_end)) return 2;
    if (!layers) spec.n_experts = 0; /* head alone */
    if (no_experts) spec.n_experts = 0;

    mt_error err = {{0}};
    gguf_file *f = gguf_open(model, &err);
    /* what a node would refuse is refused here, before anything is written */
    if (!f || mt_model_check_file(f, &err)) {
        fprintf(stderr, "moontail split: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    if (parts) {
        int rc = split_parts(f, parts, out, (int)threads);
        gguf_close(f);
        return rc;
    }
    cli_shard_io sio;
    cli_shard_io_open(&sio, "split", hash_cache, rehash, (int)threads);
    if (plan) {
        int rc = split_plan(f, plan, out, &sio.io);
        cli_shard_io_close(&sio);
        gguf_close(f);
        return rc;
    }
    int rc = 1;
    char id[MT_SHARD_HASH_HEX];
    int32_t *ids = NULL;
    mt_shard_layout l;
    if (mt_shard_layout_read(f, &l, &err)) goto fail;
    if (experts) {
        if (mt_shard_parse_experts(experts, l.n_expert, &ids, &spec.n_experts, &err)) {
            fprintf(stderr, "moontail split: --experts: %s\n", err.msg);
            rc = 2;
            goto done;
        }
        spec.experts = ids;
    }
    if (mt_shard_spec_check(&l, &spec, &err)) {
        fprintf(stderr, "moontail split: %s: %s\n", model, err.msg);
        rc = 2;
        goto done;
    }
    if (mt_shard_source_id_io(f, &sio.io, id, NULL, &err) ||
        mt_shard_write_io(f, &l, id, &spec, out, &sio.io, &err))
        goto fail;
    printf("wrote %s: %.1f MiB of tensors (layers %d:%d, attention %s, head %s, ", out,
           (double)mt_shard_spec_bytes(&l, &spec) / (1024.0 * 1024.0), spec.layer_begin,
           spec.layer_end, spec.attention ? "on" : "off", spec.head ? "on" : "off");
    if (spec.n_experts < 0)
        printf("all %d experts)\n", l.n_expert);
    else
        printf("%d of %d experts)\n", spec.n_experts, l.n_expert);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moontail split: %s\n", err.msg);
done:
    cli_shard_io_close(&sio);
    free(ids);
    mt_shard_layout_free(&l);
    gguf_close(f);
    return rc;
}
