# Warnings and include roots shared by every deepinfer target.
function(deepinfer_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -fno-strict-aliasing>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
endfunction()

# Files compiled for one instruction set; the code inside picks the variant at run time.
function(deepinfer_isa_sources isa)
  if(isa STREQUAL "avx512")
    set(flags "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mbmi2")
  elseif(isa STREQUAL "avx512vnni")
    set(flags "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mbmi2")
  elseif(isa STREQUAL "avx512bf16")
    set(flags "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c -mbmi2")
  elseif(isa STREQUAL "avx2")
    set(flags "-mavx2 -mfma -mf16c")
  endif()
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_FLAGS "${flags}")
endfunction()
