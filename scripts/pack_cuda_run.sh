#!/usr/bin/env bash
# Packs binaries of build/bin for the GPU machine (scripts/gpu_run_cuda.sh unpacks them): stripped
# into build-cuda/bin, with the shared libraries they link that the machine may lack (not libc,
# libm, the CUDA runtime or the loader), into .devcache/pack/cuda_run.tar.xz. Only what the run
# needs: the working tree and the pack travel together under the machine's transfer limit.
#   scripts/pack_cuda_run.sh BINARY...   (e.g. kernel_tests model_tests speculative_tests)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
rm -rf build-cuda .devcache/lib
mkdir -p build-cuda/bin .devcache/lib .devcache/pack
for b in "$@"; do
    strip -o "build-cuda/bin/$b" "build/bin/$b"
    ldd "build/bin/$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda*|libcublas*|libcudart*|libnccl*) ;;
            *) cp -L "$lib" .devcache/lib/ ;;
        esac
    done
done
XZ_OPT=-9e tar -cJf .devcache/pack/cuda_run.tar.xz build-cuda/bin .devcache/lib
rm -rf build-cuda
ls -l .devcache/pack/cuda_run.tar.xz
