/* rope.c - rotary position embedding, plain or YaRN-scaled.
 *
 * Follows ggml's conventions so results sit close to llama.cpp's: the base
 * angle of pair i is pos * base^(-2i/n_rot), built by repeated
 * multiplication in f32; YaRN blends interpolated and extrapolated angles
 * with a linear ramp between the correction dims and scales cos/sin by
 * hp->rope_mscale. NORM mode rotates (x[2i], x[2i+1]); NEOX mode rotates
 * (x[i], x[i + n_rot/2]). Dims past n_rot are left alone. The table of a
 * position is made once and serves every head of q and k; the rotation is a
 * vector kernel (vecops.h). ln, pow, sin and cos are mathf.h's, not libm's,
 * whose last bits differ between platforms (and so would the tables). */
#include "model_internal.h"
#include "moontail/mathf.h"
#include "moontail/vecops.h"

#include <math.h>

/* Dimension at which a wavelength spans n_ctx_orig / (2 pi b) turns. */
static float yarn_corr_dim(int32_t n_rot, int32_t n_ctx_orig, float b, float base) {
    return (float)n_rot * mt_math_logf((float)n_ctx_orig / (b * 2.0f * (float)M_PI)) /
           (2.0f * mt_math_logf(base));
}

void mt_rope_table(const mt_hparams *hp, const float *freq_divisors, int32_t pos, float *cs,
                   float *sn) {
    const int32_t n_rot = hp->n_rot, half = n_rot / 2;
    float low = 0.0f, high = 0.0f;
    if (hp->rope_yarn) {
        low = floorf(yarn_corr_dim(n_rot, hp->yarn_orig_ctx, hp->yarn_beta_fast, hp->rope_base));
        high = ceilf(yarn_corr_dim(n_rot, hp->yarn_orig_ctx, hp->yarn_beta_slow, hp->rope_base));
        if (low < 0.0f) low = 0.0f;
        if (high > (float)(n_rot - 1)) high = (float)(n_rot - 1);
    }
    const float theta_scale = mt_math_powf(hp->rope_base, -2.0f / (float)n_rot);
    float theta_base = (float)pos;
    for (int32_t i = 0; i < half; i++) {
        float theta_extrap = freq_divisors ? theta_base / freq_divisors[i] : theta_base;
        float theta = hp->rope_freq_scale * theta_extrap;
        if (hp->rope_yarn) {
            float y = ((float)i - low) / fmaxf(0.001f, high - low);
            float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            theta = theta * (1.0f - ramp) + theta_extrap * ramp;
        }
        float s, c;
        mt_math_sincosf(theta, &s, &c);
        cs[i] = c * hp->rope_mscale;
        sn[i] = s * hp->rope_mscale;
        theta_base *= theta_scale;
    }
}

void mt_rope_rotate(const mt_hparams *hp, const float *cs, const float *sn, float *x,
                    int32_t head_dim, int32_t n_heads) {
    const int32_t half = hp->n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        if (hp->rope_neox)
            mt_vec_rope_neox(x + (size_t)h * head_dim, cs, sn, half);
        else
            mt_vec_rope_norm(x + (size_t)h * head_dim, cs, sn, half);
    }
}
