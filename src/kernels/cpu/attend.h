#pragma once
// The two products of one query token's attention, reading the keys where they lie (ring slots,
// this step's rows, cache entries) through row pointers instead of gathering and transposing
// them: scores[h, j] = q[h] · key[j] and out[h] = Σ_j p[h, j] · key[j]. Each (h, j) score and each
// out[h] element is summed in one fixed order whatever the number of heads passed together, so a
// head's result does not depend on how heads are split over threads.
#include <cstdint>

namespace deepinfer::kernels::cpu {

// q [nh, d] (row stride d), keys[n] rows of d floats (or bf16 values, widened exactly), scores [nh, n].
void attend_scores_avx512(const float* q, int64_t nh, int64_t d, const float* const* keys, int64_t n, float* scores);
void attend_scores_avx512(const float* q, int64_t nh, int64_t d, const uint16_t* const* keys, int64_t n, float* scores);
// p [nh, n], keys[n] rows of d floats (or bf16 values), out [nh, d] (row stride d).
void attend_values_avx512(const float* p, int64_t nh, int64_t n, const float* const* keys, int64_t d, float* out);
void attend_values_avx512(const float* p, int64_t nh, int64_t n, const uint16_t* const* keys, int64_t d, float* out);

}  // namespace deepinfer::kernels::cpu
