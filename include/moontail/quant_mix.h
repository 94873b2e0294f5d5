/* quant_mix.h - the per-tensor types of llama.cpp's quantization mixes
 * ("file types": Q4_K_M, IQ2_XXS, ...), so that `moontail mkmodel --ftype`
 * writes test models whose tensors have the types published quants have.
 *
 * The rules are those of llama.cpp's quantizer (src/llama-quant.cpp of the
 * release pinned in tools/golden), re-expressed as a table in quant_mix.c:
 *   - which tensors are quantized at all (2-D or more, named "*weight", not a
 *     norm, router or convolution...); the others keep their type;
 *   - the mix's base type, raised or lowered per tensor role (token_embd,
 *     output, attn_v, attn_k, attn_q, attn_output, ffn_down/gate/up, their
 *     expert and shared-expert forms), by layer position, grouped-query
 *     factor, expert count and whether an importance matrix is used;
 *   - the fallback when a row is not a whole number of blocks of the chosen
 *     type (K, IQ and TQ types: 256): IQ* -> IQ4_NL, Q2_K/Q3_K/TQ* -> Q4_0,
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and F16 if even that does not
 *     fit (DeepSeek's and Kimi's 128-wide attn_k_b rows take this path).
 * Some choices depend on the tensors seen before (llama.cpp counts attn_v
 * and ffn_down tensors in its own order: by layer, then by name), so a whole
 * model is planned at once with mt_quant_mix_plan; mt_quant_mix_type is the
 * same choice for one tensor given the counters. */
#ifndef MOONTAIL_QUANT_MIX_H
#define MOONTAIL_QUANT_MIX_H

#include "moontail/error.h"
#include "moontail/tensor_type.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mt_quant_mix {
    MT_QUANT_MIX_NONE = 0, /* no mix: the writer's own types */
    MT_QUANT_MIX_F32,
    MT_QUANT_MIX_F16,
    MT_QUANT_MIX_BF16,
    MT_QUANT_MIX_Q4_0,
    MT_QUANT_MIX_Q4_1,
    MT_QUANT_MIX_Q5_0,
    MT_QUANT_MIX_Q5_1,
    MT_QUANT_MIX_Q8_0,
    MT_QUANT_MIX_Q2_K,
    MT_QUANT_MIX_Q2_K_S,
    MT_QUANT_MIX_Q3_K_S,
    MT_QUANT_MIX_Q3_K_M,
    MT_QUANT_MIX_Q3_K_L,
    MT_QUANT_MIX_Q4_K_S,
    MT_QUANT_MIX_Q4_K_M,
    MT_QUANT_MIX_Q5_K_S,
    MT_QUANT_MIX_Q5_K_M,
    MT_QUANT_MIX_Q6_K,
    MT_QUANT_MIX_IQ1_S,
    MT_QUANT_MIX_IQ1_M,
    MT_QUANT_MIX_IQ2_XXS,
    MT_QUANT_MIX_IQ2_XS,
    MT_QUANT_MIX_IQ2_S,
    MT_QUANT_MIX_IQ2_M,
    MT_QUANT_MIX_IQ3_XXS,
    MT_QUANT_MIX_IQ3_XS,
    MT_QUANT_MIX_IQ3_S,
    MT_QUANT_MIX_IQ3_M,
    MT_QUANT_MIX_IQ4_NL,
    MT_QUANT_MIX_IQ4_XS,
    MT_QUANT_MIX_TQ1_0,
    MT_QUANT_MIX_TQ2_0,
    MT_QUANT_MIX_MXFP4_MOE,
    MT_QUANT_MIX_COUNT
} mt_quant_mix;

/* What the rules need to know of the model, as llama.cpp reads it from the file. */
typedef struct mt_quant_mix_model {
    const char *arch;  /* general.architecture */
    int32_t n_layer;   /* block_count */
    int32_t n_head;    /* layer 0's attention heads */
    int32_t n_head_kv; /* layer 0's KV heads (0 for a recurrent layer, as kimi's KDA) */
    int32_t n_expert;  /* expert_count; 0 = dense */
    bool has_imatrix;  /* quantized with an importance matrix (mkmodel: never) */
} mt_quant_mix_model;

/* One tensor as the rules see it. */
typedef struct mt_quant_mix_tensor {
    const char *name;
    int64_t ne[4]; /* ne[0] = row length; unused dimensions 1 */
    mt_type type;  /* the type it has before quantizing (kept when not quantized) */
} mt_quant_mix_tensor;

/* llama.cpp's running counts while it walks the tensors (by layer, then name). */
typedef struct mt_quant_mix_state {
    int n_attn_v; /* attn_v / attn_qkv / attn_kv_b tensors in the model */
    int i_attn_v; /* of them seen so far */
    int i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied; /* no output.weight: token_embd is also the head */
} mt_quant_mix_state;

/* The mix named as llama-quantize names it ("Q4_K_M", case-insensitive), or
 * MT_QUANT_MIX_NONE if unknown. */
mt_quant_mix mt_quant_mix_from_name(const char *name);

/* "Q4_K_M"; NULL for NONE or an unknown value. */
const char *mt_quant_mix_name(mt_quant_mix mix);

/* llama.cpp's enum llama_ftype value of the mix (general.file_type in a
 * quantized GGUF; the value llama_model_quantize takes); -1 for NONE. */
int mt_quant_mix_llama_ftype(mt_quant_mix mix);

/* Whether llama.cpp would quantize this tensor at all (else it keeps its type). */
bool mt_quant_mix_quantizes(const mt_quant_mix_tensor *t);

/* Sets the counters for a model of these tensors (before the first tensor). */
void mt_quant_mix_begin(mt_quant_mix_state *st, const mt_quant_mix_tensor *tensors, size_t n);

/* The type of tensor t under mix, given the counters of the tensors before it
 * in llama.cpp's order (which it advances). A pure function of its inputs.
 * MT_TYPE_COUNT for an unknown mix, or when a rule needs the layer number of
 * an ffn tensor whose name has none ("blk.N."; llama.cpp refuses such a model). */
mt_type mt_quant_mix_type(mt_quant_mix mix, const mt_quant_mix_model *m, mt_quant_mix_state *st,
                          const mt_quant_mix_tensor *t);

/* The types of all n tensors of a model (out[i] for tensors[i], in any order
 * given: the walk follows llama.cpp's order). Returns 0, or -1 with err filled
 * (out of memory, an unknown mix, a tensor name without a layer where the
 * rules need one). */
int mt_quant_mix_plan(mt_quant_mix mix, const mt_quant_mix_model *m,
                      const mt_quant_mix_tensor *tensors, size_t n, mt_type *out, mt_error *err);

#endif
