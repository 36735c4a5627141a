#include "base/cpu_features.h"

namespace deepinfer {

Isa detect_isa() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        return Isa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        return Isa::kAvx2;
    }
#endif
    return Isa::kScalar;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kAvx512: return "avx512";
        case Isa::kAvx2: return "avx2";
        default: return "scalar";
    }
}

}  // namespace deepinfer
