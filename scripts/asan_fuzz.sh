#!/usr/bin/env bash
# The server request fuzzer (tests/server/serve_fuzz_test.cc) against a `deepinfer serve` built
# with AddressSanitizer and UBSan: any report ends the server with a non-zero status, which the
# test checks. Builds only what it needs, in build-asan (CPU only). Part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON -DDEEPINFER_CUDA=OFF \
      -DDEEPINFER_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target deepinfer serve_fuzz_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$BUILD_DIR"/bin/serve_fuzz_tests
