#pragma once
// The x86 SIMD level the CPU kernels may use, detected once at run time.
namespace deepinfer {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Best level this CPU supports (AVX-512 needs F/BW/VL/DQ; AVX2 needs AVX2+FMA+F16C).
Isa detect_isa();
const char* isa_name(Isa isa);

}  // namespace deepinfer
