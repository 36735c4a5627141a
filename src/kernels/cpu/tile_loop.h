#pragma once
// The CPU GEMM kernels compute register tiles of MR activation rows x NR weight rows, each a
// template over its shape. for_each_tile walks a product's tiles and turns the runtime shape at
// the matrix edges into the template call, so every kernel file walks them the same way.
#include <algorithm>
#include <cstdint>

namespace deepinfer::kernels::cpu {

template <int MR, int NR, typename Fn>
void with_weight_rows(int64_t nr, Fn& fn) {
    if constexpr (NR == 1) {
        fn.template operator()<MR, 1>();
    } else {
        if (nr == NR) return fn.template operator()<MR, NR>();
        with_weight_rows<MR, NR - 1>(nr, fn);
    }
}

template <int MR, int kMaxNr, typename Fn>
void with_tile_shape(int64_t mr, int64_t nr, Fn& fn) {
    if constexpr (MR == 1) {
        with_weight_rows<1, kMaxNr>(nr, fn);
    } else {
        if (mr == MR) return with_weight_rows<MR, kMaxNr>(nr, fn);
        with_tile_shape<MR - 1, kMaxNr>(mr, nr, fn);
    }
}

// Calls fn.template operator()<MR, NR>(i, j) for the tile at activation row i and weight row j,
// covering activation rows [0, m) and weight rows [n_begin, n_end): blocks of kMaxNr weight rows
// outside (each streamed once), blocks of kMaxMr activation rows inside.
template <int kMaxMr, int kMaxNr, typename Fn>
void for_each_tile(int64_t m, int64_t n_begin, int64_t n_end, Fn&& fn) {
    for (int64_t j = n_begin; j < n_end; j += kMaxNr)
        for (int64_t i = 0; i < m; i += kMaxMr) {
            auto at = [&]<int MR, int NR>() { fn.template operator()<MR, NR>(i, j); };
            with_tile_shape<kMaxMr, kMaxNr>(std::min<int64_t>(kMaxMr, m - i), std::min<int64_t>(kMaxNr, n_end - j), at);
        }
}

}  // namespace deepinfer::kernels::cpu
