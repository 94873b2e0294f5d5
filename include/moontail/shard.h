/* shard.h - shards and shard plans: cutting one model into the pieces that
 * nodes hold, and checking that a set of pieces is the whole model.
 *
 * Every tensor of a model belongs to exactly one *part*:
 *   - the HEAD: token_embd, output_norm, output;
 *   - SHARED tensors: rope_freqs (llama-3 style RoPE frequency factors), a
 *     small read-only vector every layer's attention uses: it is copied into
 *     every shard that holds the head or any attention part;
 *   - FINAL tensors: output_res_score (kimi-k3's attention-residual scores
 *     before the head), copied into every shard that holds the head or the
 *     LAST layer's attention part: the last stage mixes the checkpoints into
 *     the head's input itself, so that they need not travel back;
 *   - a layer's ATTENTION part: every blk.N.* tensor that is not a routed
 *     expert (norms, attention, router ffn_gate_inp, exp_probs_b, shared
 *     experts *_shexp incl. ffn_gate_inp_shexp, dense ffn_gate/up/down);
 *   - a layer's ROUTED EXPERTS: blk.N.ffn_{gate,up,down,gate_up}_exps, merged
 *     tensors {ne0, ne1, n_expert} that a shard may slice along ne[2].
 *
 * A shard is `layers [a, b)` x (attention part or not) x (experts E) plus
 * the head or not, written as an ordinary GGUF file: all of the model's
 * metadata, the selected tensors under their own names (an expert subset
 * keeps the name, with ne[2] = |E| and the experts in ascending original
 * id order), and these keys:
 *
 *   moontail.shard.version          u32     1
 *   moontail.shard.layer_begin      u32     a
 *   moontail.shard.layer_end        u32     b (exclusive)
 *   moontail.shard.attention        bool    holds the layers' attention parts
 *   moontail.shard.head             bool    holds the head tensors
 *   moontail.shard.experts          [u32]   original expert ids, ascending;
 *                                           absent = all experts
 *   moontail.shard.source_n_expert  u32     the model's expert_count (0: none)
 *   moontail.shard.source_id        string  hex BLAKE2b-256 identifying the model
 *   moontail.shard.tensor_names     [str]   every tensor of the shard ...
 *   moontail.shard.tensor_hashes    [str]   ... and the hex BLAKE2b-256
 *                                           (crypto_generichash, 32 bytes,
 *                                           no key) of its bytes as stored
 *                                           in the shard
 *
 * source_id = BLAKE2b-256 over the model's tensors in strcmp order of their
 * names, each contributing its name, one NUL byte and its 32-byte raw
 * content hash. It identifies the weights (not the metadata) of a model,
 * whatever their order or files: a split model has its single file's id.
 *
 * A plan cuts a model into a whole set of shards for one deployment (see
 * docs/design.md): `cell` = one head shard + N pipeline stages of whole layers
 * balanced by bytes; `swarm` = one backbone shard (head + every layer's
 * attention part) + N expert shards, each holding every MoE layer's routed
 * experts for a contiguous range of ids. mt_plan_write writes the files and
 * a manifest (JSON, format "moontail-manifest-v1", described at
 * mt_plan_write), and mt_plan_check proves a manifest's shards are the
 * model: every tensor slice (a whole non-expert tensor, or one expert of a
 * routed expert tensor) held by exactly `replicas` listed shards, with
 * bytes equal to the model's (shared tensors: held by every shard with the
 * head or attention, and by at least one). */
#ifndef MOONTAIL_SHARD_H
#define MOONTAIL_SHARD_H

#include "moontail/error.h"
#include "moontail/gguf.h"
#include "moontail/hash_cache.h"
#include "moontail/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_SHARD_VERSION  1
#define MT_SHARD_HASH_HEX 65 /* 64 hex digits + NUL */

/* ---------------------------------------------------------- model parts */

typedef enum mt_shard_part {
    MT_SHARD_PART_HEAD,
    MT_SHARD_PART_ATTENTION,
    MT_SHARD_PART_EXPERTS,
    MT_SHARD_PART_SHARED,
    MT_SHARD_PART_FINAL,
} mt_shard_part;

/* Whether a shard holds the FINAL tensors: it has the head, or the attention
 * part of the model's last layer (layers [a, b) with b = n_layer). */
static inline bool mt_shard_spec_has_final(int32_t n_layer, bool head, bool attention, int32_t a,
                                           int32_t b) {
    return head || (attention && a < b && b == n_layer);
}

/* Classifies a tensor by its name. Sets *part and *layer (-1 for the head).
 * An unknown name, or a blk.N name with a malformed N, is an error naming
 * the tensor. Shapes are not looked at (see mt_shard_layout_read). */
int mt_shard_classify(const char *name, mt_shard_part *part, int32_t *layer, mt_error *err);

/* A model's tensors sorted into parts, with the byte sizes a planner needs. */
typedef struct mt_shard_layout {
    int32_t n_layer;        /* <arch>.block_count */
    int32_t n_expert;       /* <arch>.expert_count, 0 when absent */
    uint64_t head_bytes;    /* tensor bytes of the head part */
    uint64_t shared_bytes;  /* tensor bytes of the shared tensors (in every shard with the
                               head or attention) */
    uint64_t final_bytes;   /* tensor bytes of the final tensors (in every shard with the
                               head or the last layer's attention part) */
    uint64_t *attn_bytes;   /* (n_layer) bytes of each layer's attention part */
    uint64_t *expert_bytes; /* (n_layer) bytes of ONE expert across the layer's routed
                               tensors; 0 for a dense layer */
    mt_shard_part *part;    /* (n_tensors of the model) */
    int32_t *layer;         /* (n_tensors) -1 for the head */
} mt_shard_layout;

/* Classifies every tensor of a full model and checks what slicing relies
 * on: layer numbers below block_count, routed expert tensors 3-D with
 * ne[2] == expert_count. A split model opened whole (gguf_open) is a model
 * like any other; files that are themselves shards, or one file of a split
 * model opened alone (gguf_open_single), are refused. Free with
 * mt_shard_layout_free. */
int mt_shard_layout_read(const gguf_file *model, mt_shard_layout *out, mt_error *err);
void mt_shard_layout_free(mt_shard_layout *l);

/* -------------------------------------------------------------- reading */

/* How the functions below that read a whole model or write shards go about
 * it (NULL or all zero: every core, no cache, no progress). They read with
 * pread in GGUF_STREAM_CHUNK pieces, never through the mapping, so their
 * memory stays a few chunks per thread whatever the model's size; tensors
 * are hashed and copied in parallel, largest first. */
typedef struct mt_shard_io {
    mt_pool *pool; /* threads to use; NULL: a pool of `threads` for each call */
    int threads;   /* <= 0: every core */
    /* Hashes of the model's tensors and slices kept across runs: looked up
     * before reading, and every hash computed is stored. NULL: none. */
    mt_hash_cache *cache;
    bool rehash; /* read and hash everything again (the cache is refreshed) */
    /* Progress of one long step ("hashing m.gguf", "writing m-stage-0.gguf"):
     * done of total bytes. Called from one thread at a time; a step whose
     * bytes all come from the cache is not reported. */
    void (*progress)(void *ctx, const char *what, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* Added up over calls: model bytes read to hash them (and the seconds
     * that took), model bytes whose hashes came from the cache instead,
     * shard bytes written. */
    uint64_t bytes_hashed, bytes_cached, bytes_written;
    double hash_s;
    mt_error cache_err; /* the cache's first failure (the work went on without it); "" if none */
} mt_shard_io;

/* ---------------------------------------------------------------- hashes */

/* Hex BLAKE2b-256 of a tensor's bytes, or, when n_experts >= 0, of the
 * concatenated expert slices [e*nb2, (e+1)*nb2) for e in experts (the bytes
 * a shard with that expert subset stores). Ids must be < ne[2]. */
void mt_shard_tensor_hash(const gguf_tensor *t, const int32_t *experts, int32_t n_experts,
                          char out[MT_SHARD_HASH_HEX]);

/* Hex BLAKE2b-256 of any bytes (the manifest's whole-file hash). */
void mt_shard_hash_bytes(const void *data, size_t n, char out[MT_SHARD_HASH_HEX]);

/* The model's source_id (see above). Reads every tensor byte. If
 * tensor_hashes is non-NULL it receives each tensor's hex hash, in the
 * model's tensor order (n_tensors entries). */
int mt_shard_source_id(const gguf_file *model, char out[MT_SHARD_HASH_HEX],
                       char (*tensor_hashes)[MT_SHARD_HASH_HEX], mt_error *err);
/* The source_id of a model whose tensors' BLAKE2b-256 hashes are known
 * (raw, in the model's tensor order); reads nothing. */
int mt_shard_source_id_from(const gguf_file *model, const uint8_t (*raw)[32],
                            char out[MT_SHARD_HASH_HEX], mt_error *err);
/* The same, reading as io says (NULL: every core, no cache). */
int mt_shard_source_id_io(const gguf_file *model, mt_shard_io *io, char out[MT_SHARD_HASH_HEX],
                          char (*tensor_hashes)[MT_SHARD_HASH_HEX], mt_error *err);

/* Hex BLAKE2b-256 of a whole file, read in chunks (the manifest's hash). */
int mt_shard_hash_file(const char *path, char out[MT_SHARD_HASH_HEX], mt_error *err);

/* ----------------------------------------------------------------- write */

typedef struct mt_shard_spec {
    int32_t layer_begin, layer_end; /* layers [begin, end); may be empty for a head-only shard */
    bool attention;                 /* the layers' attention parts */
    bool head;                      /* the head tensors */
    const int32_t *experts;         /* original expert ids, strictly ascending */
    int32_t n_experts;              /* -1 = all experts, 0 = no routed experts */
} mt_shard_spec;

/* Checks a spec against a model: the layer range inside [0, n_layer), expert
 * ids < n_expert, ascending without duplicates, at least one tensor
 * selected. Messages name the problem and the fix. */
int mt_shard_spec_check(const mt_shard_layout *l, const mt_shard_spec *spec, mt_error *err);

/* Tensor bytes a spec selects (no metadata, no padding). */
uint64_t mt_shard_spec_bytes(const mt_shard_layout *l, const mt_shard_spec *spec);

/* Writes the shard `spec` of `model` to out_path (see the top of this file).
 * Computes the model's source_id, which reads the whole model once. The
 * bytes go from the model's files to the shard in chunks (see mt_shard_io),
 * each tensor hashed on the way; the header, which holds those hashes, is
 * written last. The shard is written as out_path.part, flushed to disk
 * (fsync) and renamed, so a crash never leaves a half shard under its
 * name. */
int mt_shard_write(const gguf_file *model, const mt_shard_spec *spec, const char *out_path,
                   mt_error *err);

/* The same with a layout and source_id already computed for this model
 * (what the planner does for a whole set). */
int mt_shard_write_with(const gguf_file *model, const mt_shard_layout *l, const char *source_id,
                        const mt_shard_spec *spec, const char *out_path, mt_error *err);
/* ... reading and hashing as io says (NULL: every core, no cache). Hashes
 * the cache holds for the shard's tensors are checked against the bytes
 * written (a model that changed since it was hashed fails the write); the
 * ones computed are stored. */
int mt_shard_write_io(const gguf_file *model, const mt_shard_layout *l, const char *source_id,
                      const mt_shard_spec *spec, const char *out_path, mt_shard_io *io,
                      mt_error *err);

/* ------------------------------------------------------------------ read */

#define MT_SHARD_NOT_A_SHARD 1 /* mt_shard_info_read: a plain model, not an error */

typedef struct mt_shard_info {
    uint32_t version;
    int32_t layer_begin, layer_end;
    bool attention, head;
    int32_t n_experts; /* -1 = all */
    int32_t *experts;  /* (n_experts) ascending original ids; NULL when all */
    int32_t source_n_expert;
    int32_t source_n_layer; /* the model's block_count */
    char source_id[MT_SHARD_HASH_HEX];
    uint64_t n_tensors;     /* == the file's tensor count */
    uint64_t *tensor_index; /* (n_tensors) index into f->tensors of tensor_names[i] */
    char (*tensor_hash)[MT_SHARD_HASH_HEX]; /* (n_tensors) stored hash of tensor_names[i] */
} mt_shard_info;

/* Parses and validates a file's moontail.shard.* keys: types and ranges,
 * names and hashes lists parallel and covering exactly the file's tensors,
 * and every tensor consistent with the spec (its part selected, its layer
 * in range, expert tensors with ne[2] == number of experts held). Returns 0,
 * MT_SHARD_NOT_A_SHARD (err says so) for a file without
 * moontail.shard.version, or -1 naming the bad key or tensor. Free with
 * mt_shard_info_free. */
int mt_shard_info_read(const gguf_file *f, mt_shard_info *out, mt_error *err);
void mt_shard_info_free(mt_shard_info *info);

/* Recomputes every tensor's hash and compares it with the stored one; the
 * first mismatch is an error naming the tensor. Reads every byte (in
 * chunks, on every core; see mt_shard_io). */
int mt_shard_verify(const gguf_file *f, mt_error *err);
/* The same, hashing as io says (threads, progress; the cache is not used:
 * a shard's bytes are always read). NULL: every core, no progress. */
int mt_shard_verify_io(const gguf_file *f, mt_shard_io *io, mt_error *err);
/* Checks one tensor: the i-th of info's list (info read from f), e.g. a
 * node re-checking its shard a tensor at a time while it serves. */
int mt_shard_verify_tensor(const gguf_file *f, const mt_shard_info *info, uint64_t i,
                           mt_shard_io *io, mt_error *err);

/* Parses an expert list such as "0,3,5-9" into a sorted heap array (caller
 * frees). Ids must be in [0, n_expert); a repeated id is an error naming it. */
int mt_shard_parse_experts(const char *s, int32_t n_expert, int32_t **out, int32_t *n,
                           mt_error *err);

/* ----------------------------------------------------------------- plans */

typedef enum mt_plan_mode { MT_PLAN_CELL, MT_PLAN_SWARM } mt_plan_mode;

typedef enum mt_plan_role {
    MT_PLAN_ROLE_HEAD,     /* cell: the requester's head shard */
    MT_PLAN_ROLE_STAGE,    /* cell: layers [a, b) whole */
    MT_PLAN_ROLE_BACKBONE, /* swarm: head + every layer's attention part */
    MT_PLAN_ROLE_EXPERTS,  /* swarm: a contiguous range of routed experts, every layer */
} mt_plan_role;

typedef struct mt_plan_shard {
    mt_plan_role role;
    int32_t index;         /* k-th shard of its role */
    mt_shard_spec spec;    /* spec.experts points into the plan's own storage */
    uint64_t tensor_bytes; /* mt_shard_spec_bytes */
} mt_plan_shard;

typedef struct mt_plan {
    mt_plan_mode mode;
    int32_t n_shards;
    mt_plan_shard *shards;
    int32_t *expert_ids; /* storage behind the specs' expert lists */
} mt_plan;

/* "cell:N" / "swarm:N" -> mode and N (1..4096). */
int mt_plan_parse(const char *s, mt_plan_mode *mode, int32_t *n, mt_error *err);

/* Cell: one head shard, then N stages of contiguous whole layers (attention
 * + all experts) whose largest stage is as small as possible in bytes.
 * Needs 1 <= N <= n_layer. */
int mt_plan_cell(const gguf_file *model, int32_t n_stages, mt_plan *out, mt_error *err);

/* Swarm: one backbone shard, then N expert shards; shard k holds experts
 * [k*E/N, (k+1)*E/N) (sizes differ by at most one) of every MoE layer.
 * Needs a model with routed experts and 1 <= N <= n_expert. */
int mt_plan_swarm(const gguf_file *model, int32_t n_expert_shards, mt_plan *out, mt_error *err);
void mt_plan_free(mt_plan *plan);

const char *mt_plan_mode_name(mt_plan_mode m);
const char *mt_plan_role_name(mt_plan_role r);

/* Writes every shard of the plan into out_dir (created if missing) as
 * <stem>-<role>-<k>.gguf, where stem is the model file's name without
 * ".gguf" (a split model's: NAME of NAME-00001-of-0000N.gguf), and the
 * manifest <stem>-<mode>-manifest.json:
 *
 *   {"format": "moontail-manifest-v1", "model": "<model file name>",
 *    "source_id": "<hex>", "mode": "cell" | "swarm", "replicas": 1,
 *    "n_layer": L, "n_expert": E,
 *    "shards": [{"file": "<name, relative to the manifest>",
 *                "role": "head" | "stage" | "backbone" | "experts",
 *                "index": k, "layers": [a, b], "attention": bool,
 *                "head": bool, "experts": [ids...] | null (= all),
 *                "bytes": <file size>, "blake2b": "<hex BLAKE2b-256 of the file>"}]}
 *
 * The manifest path is copied to manifest_path (cap bytes) when non-NULL. */
int mt_plan_write(const gguf_file *model, const mt_plan *plan, const char *out_dir,
                  char *manifest_path, size_t cap, mt_error *err);
/* The same, reading and hashing as io says. */
int mt_plan_write_io(const gguf_file *model, const mt_plan *plan, const char *out_dir,
                     char *manifest_path, size_t cap, mt_shard_io *io, mt_error *err);

/* Checks a manifest against the model: each listed shard opens, is a shard
 * of this model (source_id), matches what the manifest says about it
 * (layers, attention, head, experts, bytes and blake2b when given) and
 * passes mt_shard_verify; each of its tensors has the model's type and
 * shape (ne[2] = experts held) and the hash of the model's bytes for that
 * slice; and every slice of the model is held exactly `replicas` times,
 * counting each manifest entry (a file listed twice counts twice).
 *
 * Returns 0 when all holds, 1 when problems were found, -1 when the check
 * could not run (model or manifest unreadable; err says why). *report
 * (caller frees) gets one line per problem (at most 50, then a count) and a
 * final summary line, for 0 and 1. */
int mt_plan_check(const char *model_path, const char *manifest_path, char **report, mt_error *err);
/* The same, reading and hashing as io says: with a cache, the model's
 * hashes (whole tensors and expert slices) come from it where it has them;
 * the shards are always read and hashed. */
int mt_plan_check_io(const char *model_path, const char *manifest_path, char **report,
                     mt_shard_io *io, mt_error *err);

#endif
