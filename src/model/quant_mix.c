/* quant_mix.c - per-tensor types of llama.cpp's quantization mixes (see
 * quant_mix.h), as data: one row per mix (base type, head and embedding
 * types) and a list of rules per (mix, tensor role), the first that holds
 * wins, else the base type. What is not data is the order llama.cpp applies
 * them in, written out in mt_quant_mix_type:
 *   1. a tensor llama.cpp does not quantize keeps its type; a mix whose base
 *      is not a quantized type (F32, F16, BF16) gives the base to the rest;
 *   2. output.weight (and token_embd when there is no output.weight): Q8_0 in
 *      MXFP4_MOE or when its rows are not whole blocks of the base type, else
 *      the mix's head type;
 *   3. MXFP4_MOE: tensors with a third dimension above 1 (the experts, and
 *      also MLA's attn_k_b/attn_v_b) MXFP4, everything else Q8_0;
 *   4. token_embd: the mix's embedding type;
 *   5. the role rules. Only in the mixes that are not the very low-bit family
 *      (IQ1_*, IQ2_*): attn_k of an 8-expert model is Q8_0 before any rule,
 *      and after the attn_v rules a 70B llama's Q3_K/Q4_K attn_v becomes
 *      Q5_K and an 8-expert model's attn_v Q8_0;
 *   6. the fallback of quant_mix.h for rows that are not whole blocks.
 * Roles are found by substring as llama.cpp does: "ffn_down" also matches
 * ffn_down_exps and ffn_down_shexp, while attn_k_b, attn_v_b, attn_q_a/b,
 * attn_kv_a_mqa and kimi's KDA and latent projections have no role and take
 * the base type (then the fallback). attn_qkv and attn_kv_b count as attn_v.
 * Falcon's own exceptions are left out: mkmodel writes no Falcon. Checked
 * tensor by tensor against llama.cpp's quantizer by tests/test_quant_mix_llama.c. */
#include "moontail/quant_mix.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ----------------------------------------------------------------- tables */

typedef struct mix_row {
    const char *name;
    int llama_ftype; /* enum llama_ftype in llama.h */
    mt_type base;
    mt_type head; /* output.weight (tied token_embd) when its rows fit the base */
    mt_type embd; /* token_embd when there is an output.weight */
    bool low_bit; /* the IQ1/IQ2 family: its own attn_v/attn_k/ffn_down rules */
} mix_row;

#define B MT_TYPE_COUNT /* "the base type" in the embd column */
// clang-format off
static const mix_row mixes[MT_QUANT_MIX_COUNT] = {
    [MT_QUANT_MIX_F32]       = {"F32",        0, MT_TYPE_F32,     B,              B,              false},
    [MT_QUANT_MIX_F16]       = {"F16",        1, MT_TYPE_F16,     B,              B,              false},
    [MT_QUANT_MIX_BF16]      = {"BF16",      32, MT_TYPE_BF16,    B,              B,              false},
    [MT_QUANT_MIX_Q4_0]      = {"Q4_0",       2, MT_TYPE_Q4_0,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q4_1]      = {"Q4_1",       3, MT_TYPE_Q4_1,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q5_0]      = {"Q5_0",       8, MT_TYPE_Q5_0,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q5_1]      = {"Q5_1",       9, MT_TYPE_Q5_1,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q8_0]      = {"Q8_0",       7, MT_TYPE_Q8_0,    MT_TYPE_Q8_0,   B,              false},
    [MT_QUANT_MIX_Q2_K]      = {"Q2_K",      10, MT_TYPE_Q2_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q2_K_S]    = {"Q2_K_S",    21, MT_TYPE_Q2_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q3_K_S]    = {"Q3_K_S",    11, MT_TYPE_Q3_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q3_K_M]    = {"Q3_K_M",    12, MT_TYPE_Q3_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q3_K_L]    = {"Q3_K_L",    13, MT_TYPE_Q3_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q4_K_S]    = {"Q4_K_S",    14, MT_TYPE_Q4_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q4_K_M]    = {"Q4_K_M",    15, MT_TYPE_Q4_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q5_K_S]    = {"Q5_K_S",    16, MT_TYPE_Q5_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q5_K_M]    = {"Q5_K_M",    17, MT_TYPE_Q5_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_Q6_K]      = {"Q6_K",      18, MT_TYPE_Q6_K,    MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_IQ1_S]     = {"IQ1_S",     24, MT_TYPE_IQ1_S,   MT_TYPE_Q5_K,   MT_TYPE_Q2_K,   true},
    [MT_QUANT_MIX_IQ1_M]     = {"IQ1_M",     31, MT_TYPE_IQ1_M,   MT_TYPE_Q5_K,   MT_TYPE_Q2_K,   true},
    [MT_QUANT_MIX_IQ2_XXS]   = {"IQ2_XXS",   19, MT_TYPE_IQ2_XXS, MT_TYPE_Q5_K,   MT_TYPE_Q2_K,   true},
    [MT_QUANT_MIX_IQ2_XS]    = {"IQ2_XS",    20, MT_TYPE_IQ2_XS,  MT_TYPE_Q5_K,   MT_TYPE_Q2_K,   true},
    [MT_QUANT_MIX_IQ2_S]     = {"IQ2_S",     28, MT_TYPE_IQ2_XS,  MT_TYPE_Q5_K,   MT_TYPE_IQ3_S,  true},
    [MT_QUANT_MIX_IQ2_M]     = {"IQ2_M",     29, MT_TYPE_IQ2_S,   MT_TYPE_Q5_K,   MT_TYPE_IQ3_S,  true},
    [MT_QUANT_MIX_IQ3_XXS]   = {"IQ3_XXS",   23, MT_TYPE_IQ3_XXS, MT_TYPE_Q5_K,   MT_TYPE_IQ3_S,  false},
    [MT_QUANT_MIX_IQ3_XS]    = {"IQ3_XS",    22, MT_TYPE_IQ3_S,   MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_IQ3_S]     = {"IQ3_S",     26, MT_TYPE_IQ3_S,   MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_IQ3_M]     = {"IQ3_M",     27, MT_TYPE_IQ3_S,   MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_IQ4_NL]    = {"IQ4_NL",    25, MT_TYPE_IQ4_NL,  MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_IQ4_XS]    = {"IQ4_XS",    30, MT_TYPE_IQ4_XS,  MT_TYPE_Q6_K,   B,              false},
    [MT_QUANT_MIX_TQ1_0]     = {"TQ1_0",     36, MT_TYPE_TQ1_0,   MT_TYPE_Q6_K,   MT_TYPE_Q4_K,   false},
    [MT_QUANT_MIX_TQ2_0]     = {"TQ2_0",     37, MT_TYPE_TQ2_0,   MT_TYPE_Q6_K,   MT_TYPE_Q4_K,   false},
    [MT_QUANT_MIX_MXFP4_MOE] = {"MXFP4_MOE", 38, MT_TYPE_MXFP4,   MT_TYPE_Q8_0,   MT_TYPE_Q8_0,   false},
};
// clang-format on

typedef enum role {
    ROLE_OTHER,
    ROLE_OUTPUT,
    ROLE_EMBD,
    ROLE_ATTN_V, /* attn_v, attn_qkv, attn_kv_b */
    ROLE_ATTN_K,
    ROLE_ATTN_Q,
    ROLE_ATTN_OUT,
    ROLE_FFN_DOWN,
    ROLE_FFN_GATE,
    ROLE_FFN_UP,
} role;

/* Where in the model the tensor is. For attn_v: i = attn_v tensors before it,
 * n = all of them. For ffn_*: i = its layer (from the name in a model with
 * experts, else the count of such tensors before it), n = block_count. */
typedef enum where {
    AT_ANY,
    AT_FIRST8,      /* i < n/8 */
    AT_FIRST16,     /* i < n/16 */
    AT_MORE_BITS,   /* the first and last eighth, and every third layer between */
    AT_MIDDLE,      /* n/8 <= i < 7n/8 */
    AT_BELOW2,      /* i < 2 */
    AT_BELOW4,      /* i < 4 */
    AT_COUNT_FIRST8 /* ffn_down tensors before it < n/8, whatever their layers */
} where;

typedef enum when {
    IF_ANY,
    IF_GQA4,         /* n_head / n_head_kv >= 4 (layer 0) */
    IF_GQA4_OR_EXP4, /* that, or 4 experts or more */
    IF_EXP8,         /* exactly 8 experts */
    IF_NOT_EXP8,
    IF_IMATRIX,
    IF_NO_IMATRIX,
} when;

typedef struct rule {
    mt_quant_mix mix;
    role role;
    where at;
    when cond;
    mt_type type;
} rule;

#define M(x) MT_QUANT_MIX_##x
#define T(x) MT_TYPE_##x
/* The very low-bit family: the rows of llama.cpp's IQ1/IQ2 branch. */
#define LOW_BIT(mix, lo, attn_out)                                                                 \
    {M(mix), ROLE_ATTN_V, AT_ANY, IF_GQA4_OR_EXP4, T(Q4_K)},                                       \
        {M(mix), ROLE_ATTN_V, AT_ANY, IF_ANY, T(lo)},                                              \
        {M(mix), ROLE_ATTN_K, AT_ANY, IF_EXP8, T(Q4_K)},                                           \
        {M(mix), ROLE_FFN_DOWN, AT_COUNT_FIRST8, IF_ANY, T(lo)},                                   \
        {M(mix), ROLE_ATTN_OUT, AT_ANY, IF_EXP8, T(Q5_K)}, {                                       \
        M(mix), ROLE_ATTN_OUT, AT_ANY, IF_ANY, T(attn_out)                                         \
    }
/* attn_output of an 8-expert model in these mixes */
#define EXP8_ATTN_OUT(mix)                                                                         \
    { M(mix), ROLE_ATTN_OUT, AT_ANY, IF_EXP8, T(Q5_K) }

// clang-format off
static const rule rules[] = {
    LOW_BIT(IQ2_XXS, Q2_K, IQ2_XXS),
    LOW_BIT(IQ2_XS,  Q2_K, IQ2_XS),
    LOW_BIT(IQ1_S,   Q2_K, IQ2_XXS),
    LOW_BIT(IQ1_M,   Q2_K, IQ2_XXS),
    LOW_BIT(IQ2_S,   IQ3_S, IQ3_S),
    LOW_BIT(IQ2_M,   IQ3_S, IQ3_S),

    {M(Q2_K),    ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q4_K)},
    {M(Q2_K),    ROLE_ATTN_V, AT_ANY,       IF_ANY,        T(Q3_K)},
    {M(Q2_K_S),  ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q4_K)},
    {M(IQ3_XXS), ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q4_K)},
    {M(IQ3_XXS), ROLE_ATTN_V, AT_ANY,       IF_NO_IMATRIX, T(IQ3_S)},
    {M(IQ3_XS),  ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q4_K)},
    {M(IQ3_S),   ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q4_K)},
    {M(IQ3_M),   ROLE_ATTN_V, AT_ANY,       IF_ANY,        T(Q4_K)},
    {M(Q3_K_M),  ROLE_ATTN_V, AT_BELOW2,    IF_ANY,        T(Q5_K)},
    {M(Q3_K_M),  ROLE_ATTN_V, AT_ANY,       IF_ANY,        T(Q4_K)},
    {M(Q3_K_L),  ROLE_ATTN_V, AT_ANY,       IF_ANY,        T(Q5_K)},
    {M(IQ4_NL),  ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q5_K)},
    {M(IQ4_XS),  ROLE_ATTN_V, AT_ANY,       IF_GQA4,       T(Q5_K)},
    {M(Q4_K_M),  ROLE_ATTN_V, AT_MORE_BITS, IF_ANY,        T(Q6_K)},
    {M(Q5_K_M),  ROLE_ATTN_V, AT_MORE_BITS, IF_ANY,        T(Q6_K)},
    {M(Q4_K_S),  ROLE_ATTN_V, AT_BELOW4,    IF_ANY,        T(Q5_K)},

    {M(IQ3_XS),  ROLE_ATTN_K, AT_ANY, IF_ANY, T(IQ3_XXS)},
    {M(IQ3_XXS), ROLE_ATTN_K, AT_ANY, IF_ANY, T(IQ2_S)},
    {M(IQ3_XS),  ROLE_ATTN_Q, AT_ANY, IF_ANY, T(IQ3_XXS)},
    {M(IQ3_XXS), ROLE_ATTN_Q, AT_ANY, IF_ANY, T(IQ2_S)},

    {M(Q2_K),    ROLE_FFN_DOWN, AT_ANY,       IF_ANY,        T(Q3_K)},
    {M(Q2_K_S),  ROLE_FFN_DOWN, AT_FIRST8,    IF_ANY,        T(Q4_K)},
    {M(IQ3_XXS), ROLE_FFN_DOWN, AT_FIRST8,    IF_NO_IMATRIX, T(Q4_K)},
    {M(IQ3_XXS), ROLE_FFN_DOWN, AT_ANY,       IF_NO_IMATRIX, T(Q3_K)},
    {M(Q3_K_M),  ROLE_FFN_DOWN, AT_FIRST16,   IF_ANY,        T(Q5_K)},
    {M(Q3_K_M),  ROLE_FFN_DOWN, AT_ANY,       IF_ANY,        T(Q4_K)},
    {M(IQ3_M),   ROLE_FFN_DOWN, AT_FIRST8,    IF_ANY,        T(Q4_K)},
    {M(IQ3_M),   ROLE_FFN_DOWN, AT_MORE_BITS, IF_EXP8,       T(Q4_K)},
    {M(Q3_K_L),  ROLE_FFN_DOWN, AT_ANY,       IF_ANY,        T(Q5_K)},
    {M(Q4_K_M),  ROLE_FFN_DOWN, AT_MORE_BITS, IF_ANY,        T(Q6_K)},
    {M(IQ4_NL),  ROLE_FFN_DOWN, AT_FIRST8,    IF_NO_IMATRIX, T(Q5_K)},
    {M(IQ4_XS),  ROLE_FFN_DOWN, AT_FIRST8,    IF_NO_IMATRIX, T(Q5_K)},
    {M(Q5_K_M),  ROLE_FFN_DOWN, AT_MORE_BITS, IF_ANY,        T(Q6_K)},
    {M(Q4_K_S),  ROLE_FFN_DOWN, AT_FIRST8,    IF_ANY,        T(Q5_K)},
    {M(Q4_0),    ROLE_FFN_DOWN, AT_FIRST8,    IF_IMATRIX,    T(Q4_1)},
    {M(Q5_0),    ROLE_FFN_DOWN, AT_FIRST8,    IF_IMATRIX,    T(Q5_1)},

    EXP8_ATTN_OUT(Q2_K),   EXP8_ATTN_OUT(IQ3_XS), EXP8_ATTN_OUT(IQ3_XXS), EXP8_ATTN_OUT(Q3_K_S),
    EXP8_ATTN_OUT(Q3_K_M), EXP8_ATTN_OUT(IQ4_NL), EXP8_ATTN_OUT(Q4_K_S),  EXP8_ATTN_OUT(Q4_K_M),
    EXP8_ATTN_OUT(IQ3_S),  EXP8_ATTN_OUT(IQ3_M),  EXP8_ATTN_OUT(IQ4_XS),
    {M(Q2_K),    ROLE_ATTN_OUT, AT_ANY, IF_NOT_EXP8, T(Q3_K)},
    {M(IQ3_XXS), ROLE_ATTN_OUT, AT_ANY, IF_NOT_EXP8, T(IQ3_S)},
    {M(Q3_K_M),  ROLE_ATTN_OUT, AT_ANY, IF_NOT_EXP8, T(Q4_K)},
    {M(Q3_K_L),  ROLE_ATTN_OUT, AT_ANY, IF_NOT_EXP8, T(Q5_K)},
    {M(IQ3_M),   ROLE_ATTN_OUT, AT_ANY, IF_NOT_EXP8, T(Q4_K)},

    {M(IQ3_XS),  ROLE_FFN_GATE, AT_MIDDLE, IF_ANY, T(IQ3_XXS)},
    {M(IQ3_XS),  ROLE_FFN_UP,   AT_MIDDLE, IF_ANY, T(IQ3_XXS)},
};

/* Where a type goes when a row is not a whole number of its blocks (then F16
 * if the row is not a whole number of 32 either). Types of 32-blocks stay. */
static const struct { mt_type from, to; } fallbacks[] = {
    {T(IQ1_S), T(IQ4_NL)},  {T(IQ1_M), T(IQ4_NL)},   {T(IQ2_XXS), T(IQ4_NL)},
    {T(IQ2_XS), T(IQ4_NL)}, {T(IQ2_S), T(IQ4_NL)},   {T(IQ3_XXS), T(IQ4_NL)},
    {T(IQ3_S), T(IQ4_NL)},  {T(IQ4_XS), T(IQ4_NL)},
    {T(Q2_K), T(Q4_0)},     {T(Q3_K), T(Q4_0)},      {T(TQ1_0), T(Q4_0)},
    {T(TQ2_0), T(Q4_0)},    {T(Q4_K), T(Q5_0)},      {T(Q5_K), T(Q5_1)},
    {T(Q6_K), T(Q8_0)},
};

/* Name fragments of 2-D tensors llama.cpp never quantizes (routers, small
 * convolutions and projections of other architectures). */
static const char *const keep_fragments[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
    "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
    "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger",
};
static const char *const keep_names[] = {"position_embd.weight", "token_types.weight"};

/* Role by name fragment, the first that occurs wins (so "attn_kv_b" is not attn_v). */
static const struct { const char *frag; role role; } roles[] = {
    {"attn_qkv.weight", ROLE_ATTN_V},   {"attn_kv_b.weight", ROLE_ATTN_V},
    {"attn_v.weight", ROLE_ATTN_V},     {"attn_k.weight", ROLE_ATTN_K},
    {"attn_q.weight", ROLE_ATTN_Q},     {"attn_output.weight", ROLE_ATTN_OUT},
    {"ffn_up", ROLE_FFN_UP},            {"ffn_gate", ROLE_FFN_GATE},
    {"ffn_down", ROLE_FFN_DOWN},
};
// clang-format on
#undef M
#undef T
#undef B

/* ------------------------------------------------------------------ names */

mt_quant_mix mt_quant_mix_from_name(const char *name) {
    for (int m = 1; m < MT_QUANT_MIX_COUNT; m++)
        if (strcasecmp(name, mixes[m].name) == 0) return (mt_quant_mix)m;
    return MT_QUANT_MIX_NONE;
}

const char *mt_quant_mix_name(mt_quant_mix mix) {
    return mix > MT_QUANT_MIX_NONE && mix < MT_QUANT_MIX_COUNT ? mixes[mix].name : NULL;
}

int mt_quant_mix_llama_ftype(mt_quant_mix mix) {
    return mix > MT_QUANT_MIX_NONE && mix < MT_QUANT_MIX_COUNT ? mixes[mix].llama_ftype : -1;
}

/* ------------------------------------------------------------------ rules */

static int n_dims(const mt_quant_mix_tensor *t) {
    for (int d = 3; d > 0; d--)
        if (t->ne[d] > 1) return d + 1;
    return 1;
}

bool mt_quant_mix_quantizes(const mt_quant_mix_tensor *t) {
    size_t len = strlen(t->name);
    if (n_dims(t) < 2 || len < 6 || strcmp(t->name + len - 6, "weight") != 0) return false;
    for (size_t i = 0; i < sizeof keep_fragments / sizeof keep_fragments[0]; i++)
        if (strstr(t->name, keep_fragments[i])) return false;
    for (size_t i = 0; i < sizeof keep_names / sizeof keep_names[0]; i++)
        if (strcmp(t->name, keep_names[i]) == 0) return false;
    return true;
}

static bool is_embd(const char *name) {
    return strcmp(name, "token_embd.weight") == 0 ||
           strcmp(name, "per_layer_token_embd.weight") == 0;
}

static role role_of(const char *name) {
    if (strcmp(name, "output.weight") == 0) return ROLE_OUTPUT;
    if (is_embd(name)) return ROLE_EMBD;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strstr(name, roles[i].frag)) return roles[i].role;
    return ROLE_OTHER;
}

void mt_quant_mix_begin(mt_quant_mix_state *st, const mt_quant_mix_tensor *tensors, size_t n) {
    memset(st, 0, sizeof *st);
    st->tied = true;
    for (size_t i = 0; i < n; i++) {
        role r = role_of(tensors[i].name);
        st->n_attn_v += r == ROLE_ATTN_V;
        if (r == ROLE_OUTPUT) st->tied = false;
    }
}

static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool holds_at(where at, int i, int n, int counted, int n_layer) {
    switch (at) {
    case AT_ANY:
        return true;
    case AT_FIRST8:
        return i < n / 8;
    case AT_FIRST16:
        return i < n / 16;
    case AT_MORE_BITS:
        return more_bits(i, n);
    case AT_MIDDLE:
        return i >= n / 8 && i < 7 * n / 8;
    case AT_BELOW2:
        return i < 2;
    case AT_BELOW4:
        return i < 4;
    case AT_COUNT_FIRST8:
        return counted < n_layer / 8;
    }
    return false;
}

static bool holds_if(when cond, const mt_quant_mix_model *m) {
    int gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    switch (cond) {
    case IF_ANY:
        return true;
    case IF_GQA4:
        return gqa >= 4;
    case IF_GQA4_OR_EXP4:
        return gqa >= 4 || m->n_expert >= 4;
    case IF_EXP8:
        return m->n_expert == 8;
    case IF_NOT_EXP8:
        return m->n_expert != 8;
    case IF_IMATRIX:
        return m->has_imatrix;
    case IF_NO_IMATRIX:
        return !m->has_imatrix;
    }
    return false;
}

/* The layer of an ffn tensor: from "blk.N." when the model has experts (their
 * tensors need not come in layer order), else the running count. -1 if the
 * name has no layer where one is needed (llama.cpp refuses such a model). */
static int ffn_layer(const mt_quant_mix_model *m, const char *name, int counted) {
    if (m->n_expert <= 1) return counted;
    int il = -1;
    if (sscanf(name, "blk.%d.", &il) != 1 || il < 0 || il >= m->n_layer) return -1;
    return il;
}

static mt_type fallback(mt_type t, int64_t row) {
    const int blck = mt_type_traits_get(t)->blck;
    if (row % blck == 0) return t;
    mt_type to = t; /* a 32-block type has nothing smaller to go to */
    for (size_t i = 0; i < sizeof fallbacks / sizeof fallbacks[0]; i++)
        if (fallbacks[i].from == t) to = fallbacks[i].to;
    return row % mt_type_traits_get(to)->blck == 0 ? to : MT_TYPE_F16;
}

/* The role rules (step 5 of the file comment); advances the counters. */
static mt_type by_role(mt_quant_mix mix, const mt_quant_mix_model *m, mt_quant_mix_state *st,
                       const mt_quant_mix_tensor *t, role r) {
    const mix_row *row = &mixes[mix];
    mt_type type = row->base;
    int i = 0, n = m->n_layer, counted = 0;
    switch (r) {
    case ROLE_ATTN_V:
        i = st->i_attn_v++;
        n = st->n_attn_v;
        break;
    case ROLE_ATTN_K:
        if (!row->low_bit && m->n_expert == 8) return MT_TYPE_Q8_0;
        break;
    case ROLE_FFN_DOWN: /* the low-bit family counts tensors, it reads no layer */
        counted = st->i_ffn_down++;
        i = row->low_bit ? counted : ffn_layer(m, t->name, counted);
        break;
    case ROLE_FFN_GATE: /* (no low-bit rule reads these) */
        i = row->low_bit ? st->i_ffn_gate++ : ffn_layer(m, t->name, st->i_ffn_gate++);
        break;
    case ROLE_FFN_UP:
        i = row->low_bit ? st->i_ffn_up++ : ffn_layer(m, t->name, st->i_ffn_up++);
        break;
    default:
        break;
    }
    if (i < 0) return MT_TYPE_COUNT;
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        const rule *u = &rules[k];
        if (u->mix == mix && u->role == r && holds_at(u->at, i, n, counted, m->n_layer) &&
            holds_if(u->cond, m)) {
            type = u->type;
            break;
        }
    }
    if (r == ROLE_ATTN_V && !row->low_bit) {
        bool llama_70b = strcmp(m->arch, "llama") == 0 && m->n_expert != 8 && m->n_layer == 80 &&
                         m->n_head != m->n_head_kv;
        if (llama_70b && (type == MT_TYPE_Q3_K || type == MT_TYPE_Q4_K)) type = MT_TYPE_Q5_K;
        if (m->n_expert == 8) type = MT_TYPE_Q8_0;
    }
    return type;
}

mt_type mt_quant_mix_type(mt_quant_mix mix, const mt_quant_mix_model *m, mt_quant_mix_state *st,
                          const mt_quant_mix_tensor *t) {
    if (mix <= MT_QUANT_MIX_NONE || mix >= MT_QUANT_MIX_COUNT) return MT_TYPE_COUNT;
    const mix_row *row = &mixes[mix];
    if (!mt_quant_mix_quantizes(t)) return t->type;
    const mt_type_traits *base = mt_type_traits_get(row->base);
    if (base->blck == 1) return row->base; /* F32, F16, BF16: no rules, no fallback */
    role r = role_of(t->name);
    mt_type type;
    if (r == ROLE_OUTPUT || (r == ROLE_EMBD && st->tied)) {
        type = t->ne[0] % base->blck != 0 ? MT_TYPE_Q8_0 : row->head;
    } else if (mix == MT_QUANT_MIX_MXFP4_MOE) {
        bool ffn = r == ROLE_FFN_DOWN || r == ROLE_FFN_GATE || r == ROLE_FFN_UP;
        bool expert = t->ne[2] > 1 && (strcmp(m->arch, "bailingmoe3") != 0 || ffn);
        type = expert ? MT_TYPE_MXFP4 : MT_TYPE_Q8_0;
    } else if (r == ROLE_EMBD) {
        type = row->embd == MT_TYPE_COUNT ? row->base : row->embd;
    } else {
        type = by_role(mix, m, st, t, r);
        if (type == MT_TYPE_COUNT) return type;
    }
    return fallback(type, t->ne[0]);
}

/* ------------------------------------------------------------------- plan */

static int layer_of(const char *name) {
    int il = -1;
    return sscanf(name, "blk.%d.", &il) == 1 ? il : -1;
}

/* llama.cpp's walk order: by layer (tensors outside the layers first), then name. */
static int walk_order(const void *a, const void *b) {
    const mt_quant_mix_tensor *x = *(const mt_quant_mix_tensor *const *)a,
                              *y = *(const mt_quant_mix_tensor *const *)b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

int mt_quant_mix_plan(mt_quant_mix mix, const mt_quant_mix_model *m,
                      const mt_quant_mix_tensor *tensors, size_t n, mt_type *out, mt_error *err) {
    if (!mt_quant_mix_name(mix)) return mt_error_set(err, "quant mix %d is not a known mix", mix);
    const mt_quant_mix_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return mt_error_set(err, "quant mix: out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++) order[i] = &tensors[i];
    qsort(order, n, sizeof *order, walk_order);
    mt_quant_mix_state st;
    mt_quant_mix_begin(&st, tensors, n);
    for (size_t k = 0; k < n; k++) {
        const mt_quant_mix_tensor *t = order[k];
        mt_type type = mt_quant_mix_type(mix, m, &st, t);
        if (type == MT_TYPE_COUNT) {
            free(order);
            return mt_error_set(err,
                                "%s: tensor '%s' has no layer number between 0 and %d in its name;"
                                " the quantization mix needs it",
                                mixes[mix].name, t->name, m->n_layer - 1);
        }
        out[t - tensors] = type;
    }
    free(order);
    return 0;
}
