#!/usr/bin/env bash
# CPU peer benchmark: DeepInfer against llama.cpp on one random-weight DeepSeek-V4 checkpoint
# (issue 27). It
#   1. exports a llama.cpp snapshot (given as a source tree or a git directory) and builds its
#      benchmark tools in a work directory outside this repository,
#   2. writes the checkpoint (build/bin/make_random_v4), rewrites it into DeepSeek's release
#      layout (scripts/v4_to_release_layout.py: the layout llama.cpp's converter reads), converts
#      that with llama.cpp's convert_hf_to_gguf.py and quantizes the GGUF with llama-quantize,
#   3. runs the engines in alternating rounds (DeepInfer, then each llama.cpp file; ROUNDS times)
#      and prints one table: min / median / max of each cell over the rounds.
# Nothing of llama.cpp enters the repository: source, build and models live under PEER_WORK.
#
#   LLAMA_CPP_GIT=/path/to/llama.cpp.git bench/llama_cpp_peer.sh      # or LLAMA_CPP_SRC=/path/to/tree
#
# Needs cmake + a C++17 compiler (llama.cpp), build/bin/{make_random_v4,bench_forward} (this
# repository's Release build), and a python3 with numpy, torch, regex, tqdm and yaml for the
# converter; on Debian 12:
#   apt-get install python3-numpy python3-torch python3-regex python3-tqdm python3-yaml
# (PyPI is not reachable here, so the converter's `transformers` import is met by a stand-in and
# Debian's torch 1.13 gets two dtype aliases; see bench/llama_cpp_peer.py).
#
# Settings (environment):
#   LLAMA_CPP_SRC   llama.cpp source tree with DeepSeek-V4 support (used in place), or
#   LLAMA_CPP_GIT   a llama.cpp git directory (bare or not) to export LLAMA_CPP_REF from
#   LLAMA_CPP_REF   commit to export (default: upstream master of 2026-08-07, the one measured)
#   PEER_WORK       work directory (default: $TMPDIR/deepinfer-llama-peer); reruns reuse what is there
#   DEEPINFER_BIN   this repository's binaries (default: build/bin)
#   PRESET          make_random_v4 preset (default cpu-1b, ~1B parameters)
#   THREADS         threads for every engine (default 2)
#   ROUNDS          alternating rounds (default 6)
#   CONTEXT, DECODE_STEPS   decode: tokens prefilled per sequence, decode steps timed (128, 16)
#   LLAMA_VARIANTS  llama.cpp files to run, in order (default "bf16 q8_0 native"):
#                     bf16   every matrix bf16, routed experts included (the converter writes the
#                            experts as MXFP4, the release's format; llama-quantize widens them) -
#                            the same bytes DeepInfer reads
#                     q8_0   every matrix Q8_0 (llama-quantize Q8_0, experts requantized)
#                     native the converter's own output: bf16 matrices, MXFP4 routed experts
#   DEEPINFER_VARIANTS  DeepInfer runs, in order (default "none fast q8"): none = as loaded (bf16
#                     weights, fp32 activations), fast = bf16 weights with --precision fast (bf16
#                     activations and KV cache), q8 = --quantize q8 (8-bit blocks, the counterpart
#                     of Q8_0), fp8 / fp8_fast = the checkpoint with its attention projections and
#                     shared experts in the release's FP8 (v4_to_release_layout.py --fp8-linears:
#                     e4m3, 128x128 power-of-two scales), read as stored, exact / fast
#   JOBS            parallel jobs for the llama.cpp build (default 2; it runs under nice -n 19)
#   PYTHON          python with the packages above (default: the first python3 that has them)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA_CPP_SRC=${LLAMA_CPP_SRC:-}
LLAMA_CPP_GIT=${LLAMA_CPP_GIT:-}
LLAMA_CPP_REF=${LLAMA_CPP_REF:-82bb48500a9a6b3374da2cf5811695369278e4d3}
PEER_WORK=${PEER_WORK:-${TMPDIR:-/tmp}/deepinfer-llama-peer}
DEEPINFER_BIN=${DEEPINFER_BIN:-$REPO/build/bin}
PRESET=${PRESET:-cpu-1b}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-6}
CONTEXT=${CONTEXT:-128}
DECODE_STEPS=${DECODE_STEPS:-16}
LLAMA_VARIANTS=${LLAMA_VARIANTS:-bf16 q8_0 native}
DEEPINFER_VARIANTS=${DEEPINFER_VARIANTS:-none fast q8}
JOBS=${JOBS:-2}

log() { printf '[llama_cpp_peer] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$PEER_WORK/logs"
PEER_WORK=$(cd "$PEER_WORK" && pwd)
LOGS=$PEER_WORK/logs

# --- python for the conversion -------------------------------------------------------------------
# The pyenv/venv python3 on PATH may lack Debian's python3-* packages, so also try Debian's own.
if [[ -z "${PYTHON:-}" ]]; then
    for p in python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import numpy, torch, regex, tqdm, yaml' 2>/dev/null; then PYTHON=$p; break; fi
    done
    [[ -n "${PYTHON:-}" ]] || die "no python3 with numpy, torch, regex, tqdm and yaml (Debian: apt-get install python3-numpy python3-torch python3-regex python3-tqdm python3-yaml)"
fi

for b in make_random_v4 bench_forward; do
    [[ -x "$DEEPINFER_BIN/$b" ]] || die "$DEEPINFER_BIN/$b is missing: build this repository first (Release)"
done

# --- 1. llama.cpp source -------------------------------------------------------------------------
if [[ -z "$LLAMA_CPP_SRC" ]]; then
    [[ -n "$LLAMA_CPP_GIT" ]] || die "set LLAMA_CPP_SRC (a llama.cpp tree) or LLAMA_CPP_GIT (a llama.cpp git directory)"
    LLAMA_CPP_SRC=$PEER_WORK/llama.cpp-src
    if [[ "$(cat "$LLAMA_CPP_SRC/.exported-ref" 2>/dev/null)" != "$LLAMA_CPP_REF" ]]; then
        log "exporting llama.cpp $LLAMA_CPP_REF from $LLAMA_CPP_GIT"
        git --git-dir="$LLAMA_CPP_GIT" rev-parse --verify -q "$LLAMA_CPP_REF^{commit}" >/dev/null ||
            die "$LLAMA_CPP_GIT has no commit $LLAMA_CPP_REF"
        rm -rf "$LLAMA_CPP_SRC" && mkdir -p "$LLAMA_CPP_SRC"
        # A mirror may lack some blobs (snapshots leave out files of 4 MiB and more: test vocab
        # GGUFs, a CSV under docs/). None is needed to build or convert, so export without them.
        excludes=()
        git --git-dir="$LLAMA_CPP_GIT" ls-tree -r --format='%(objecttype) %(objectname) %(path)' "$LLAMA_CPP_REF" |
            awk '$1 == "blob"' | cut -d' ' -f2- >"$PEER_WORK/.tree"  # "sha path" lines
        while IFS= read -r path; do excludes+=(":(exclude,literal)$path"); done < <(
            cut -d' ' -f1 "$PEER_WORK/.tree" | git --git-dir="$LLAMA_CPP_GIT" cat-file --batch-check |
                awk '$2 == "missing" { print $1 }' |
                awk 'NR == FNR { gone[$1]; next } $1 in gone { print substr($0, length($1) + 2) }' - "$PEER_WORK/.tree")
        ((${#excludes[@]} == 0)) || log "left out ${#excludes[@]} file(s) the git directory lacks: ${excludes[*]}"
        # git archive still names excluded missing blobs on stderr; its exit status is what counts.
        git --git-dir="$LLAMA_CPP_GIT" archive "$LLAMA_CPP_REF" -- . "${excludes[@]}" 2>"$LOGS/export.err" |
            tar -x -C "$LLAMA_CPP_SRC" || { cat "$LOGS/export.err" >&2; die "export failed"; }
        echo "$LLAMA_CPP_REF" > "$LLAMA_CPP_SRC/.exported-ref"
    fi
fi
[[ -f "$LLAMA_CPP_SRC/convert_hf_to_gguf.py" ]] || die "$LLAMA_CPP_SRC is not a llama.cpp source tree"
# DeepSeek-V4 support: the converter's model class and the runtime graph.
if ! grep -rqs 'DeepseekV4ForCausalLM' "$LLAMA_CPP_SRC/convert_hf_to_gguf.py" "$LLAMA_CPP_SRC/conversion" ||
    [[ ! -f "$LLAMA_CPP_SRC/src/models/deepseek4.cpp" ]]; then
    die "this llama.cpp has no DeepSeek-V4 support (no DeepseekV4ForCausalLM converter / src/models/deepseek4.cpp)"
fi
LLAMA_DESC=$(cat "$LLAMA_CPP_SRC/.exported-ref" 2>/dev/null || git -C "$LLAMA_CPP_SRC" rev-parse HEAD 2>/dev/null || echo "tree $LLAMA_CPP_SRC")

# --- 2. build llama.cpp (outside the repository, low priority: the machine is shared) ------------
BUILD=$PEER_WORK/llama.cpp-build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    log "configuring llama.cpp in $BUILD"
    # CPU only, tuned for this CPU (GGML_NATIVE); no network at configure or build time: no curl,
    # no OpenSSL, no web UI (the prebuilt UI would be downloaded), no tests / examples / server.
    nice -n 19 cmake -S "$LLAMA_CPP_SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF \
        >"$LOGS/configure.log" 2>&1 || { tail -20 "$LOGS/configure.log" >&2; die "cmake configure failed"; }
fi
log "building llama-bench, llama-batched-bench, llama-quantize (log: $LOGS/build.log)"
nice -n 19 cmake --build "$BUILD" -j"$JOBS" --target llama-bench llama-batched-bench llama-quantize \
    >"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log" >&2; die "llama.cpp build failed"; }
LLAMA_BIN=$BUILD/bin

# --- 3. checkpoint, release layout, GGUF files -----------------------------------------------------
CKPT=$PEER_WORK/v4-$PRESET
RELEASE=$PEER_WORK/v4-$PRESET-release
if [[ ! -f "$CKPT/config.json" ]]; then
    log "writing the random checkpoint ($PRESET) to $CKPT"
    "$DEEPINFER_BIN/make_random_v4" --preset "$PRESET" --out "$CKPT" >"$LOGS/make_random_v4.log"
fi
if [[ ! -f "$RELEASE/config.json" ]]; then
    log "rewriting it into the release layout: $RELEASE"
    "$PYTHON" "$REPO/scripts/v4_to_release_layout.py" "$CKPT" "$RELEASE.tmp" \
        --tokenizer "$REPO/models/deepseek-v4-tokenizer" >"$LOGS/release_layout.log" 2>&1 ||
        { tail -20 "$LOGS/release_layout.log" >&2; die "release layout failed"; }
    rm -rf "$RELEASE" && mv "$RELEASE.tmp" "$RELEASE"
fi
RELEASE_FP8=$PEER_WORK/v4-$PRESET-release-fp8
if [[ " $DEEPINFER_VARIANTS " == *" fp8"* && ! -f "$RELEASE_FP8/config.json" ]]; then
    log "rewriting it into the release layout with FP8 linears: $RELEASE_FP8"
    "$PYTHON" "$REPO/scripts/v4_to_release_layout.py" "$CKPT" "$RELEASE_FP8.tmp" --fp8-linears \
        --tokenizer "$REPO/models/deepseek-v4-tokenizer" >"$LOGS/release_layout_fp8.log" 2>&1 ||
        { tail -20 "$LOGS/release_layout_fp8.log" >&2; die "release layout (FP8) failed"; }
    rm -rf "$RELEASE_FP8" && mv "$RELEASE_FP8.tmp" "$RELEASE_FP8"
fi
NATIVE=$PEER_WORK/v4-$PRESET-native.gguf
if [[ ! -f "$NATIVE" ]]; then
    log "converting with llama.cpp's convert_hf_to_gguf.py --outtype bf16 (log: $LOGS/convert.log)"
    "$PYTHON" "$REPO/bench/llama_cpp_peer.py" convert "$LLAMA_CPP_SRC" -- "$RELEASE" --outtype bf16 \
        --outfile "$NATIVE.tmp" >"$LOGS/convert.log" 2>&1 || { tail -30 "$LOGS/convert.log" >&2; die "conversion failed"; }
    mv "$NATIVE.tmp" "$NATIVE"
fi
gguf_of() {  # variant -> file, made on first use
    local v=$1 out=$PEER_WORK/v4-$PRESET-$1.gguf type
    case $v in
        native) echo "$NATIVE"; return ;;
        bf16) type=BF16 ;;
        q8_0) type=Q8_0 ;;
        *) die "unknown llama.cpp variant '$v' (bf16, q8_0, native)" ;;
    esac
    if [[ ! -f "$out" ]]; then
        log "llama-quantize --allow-requantize $type -> $out"
        # --allow-requantize: the routed experts arrive as MXFP4 and are widened / requantized.
        "$LLAMA_BIN/llama-quantize" --allow-requantize "$NATIVE" "$out.tmp" "$type" "$THREADS" \
            >"$LOGS/quantize-$v.log" 2>&1 || { tail -20 "$LOGS/quantize-$v.log" >&2; die "llama-quantize $type failed"; }
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}
declare -A GGUF
for v in $LLAMA_VARIANTS; do GGUF[$v]=$(gguf_of "$v"); done

# --- 4. alternating rounds -------------------------------------------------------------------------
# Same work on both sides: prefill = one prompt of N random tokens (DeepInfer: best of 2 runs;
# llama-bench: best of its 2 repetitions after a warm-up); decode = B sequences of CONTEXT random
# tokens prefilled, then DECODE_STEPS steps of one token each (DeepInfer: B / median step time;
# llama-batched-bench: B * steps / their total time). DeepInfer reads the release-layout directory,
# so it runs the very numbers llama.cpp converted (it widens the MXFP4 experts to bf16 at load; its
# speed on make_random_v4's own bf16 directory is the same).
RESULTS=$PEER_WORK/results.tsv
: >"$RESULTS"
NCTX=$(((4 * (CONTEXT + DECODE_STEPS) + 255) / 256 * 256))  # 4 sequences' KV, rounded up
for ((r = 1; r <= ROUNDS; r++)); do
    # The machine may be shared: keep the load average at the start of each round with the numbers.
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    log "round $r/$ROUNDS (load average: $load)"
    echo "# round $r load $load" >>"$RESULTS"
    for q in $DEEPINFER_VARIANTS; do
        name=deepinfer$([[ $q == none ]] || echo "_$q")
        model=$RELEASE
        case $q in
            fast) DEEPINFER_ARGS=(--precision fast) ;;
            none | q8) DEEPINFER_ARGS=(--quantize "$q") ;;
            fp8) DEEPINFER_ARGS=() model=$RELEASE_FP8 ;;
            fp8_fast) DEEPINFER_ARGS=(--precision fast) model=$RELEASE_FP8 ;;
            *) die "unknown DeepInfer variant '$q' (none, fast, q8, fp8, fp8_fast)" ;;
        esac
        out=$LOGS/round$r-$name.txt
        "$DEEPINFER_BIN/bench_forward" --model "$model" --prompt 128,512 --batch 1,4 --context "$CONTEXT" \
            --decode-steps "$DECODE_STEPS" --threads "$THREADS" "${DEEPINFER_ARGS[@]}" >"$out" 2>&1 ||
            { tail "$out" >&2; die "bench_forward failed"; }
        "$PYTHON" "$REPO/bench/llama_cpp_peer.py" collect "$name" "$r" "$out" >>"$RESULTS"
    done
    for v in $LLAMA_VARIANTS; do
        out=$LOGS/round$r-llama-$v.txt
        "$LLAMA_BIN/llama-bench" -m "${GGUF[$v]}" -t "$THREADS" -p 128,512 -n 0 -r 2 -o jsonl >"$out" 2>"$out.err" ||
            { tail "$out.err" >&2; die "llama-bench failed ($v)"; }
        "$LLAMA_BIN/llama-batched-bench" -m "${GGUF[$v]}" -t "$THREADS" -tb "$THREADS" -c "$NCTX" \
            -npp "$CONTEXT" -ntg "$DECODE_STEPS" -npl 1,4 --output-format jsonl >>"$out" 2>"$out.err2" ||
            { tail "$out.err2" >&2; die "llama-batched-bench failed ($v)"; }
        "$PYTHON" "$REPO/bench/llama_cpp_peer.py" collect "llama_$v" "$r" "$out" >>"$RESULTS"
    done
done

echo
echo "DeepInfer vs llama.cpp $LLAMA_DESC, $PRESET random DeepSeek-V4 ($(nproc) cores, $THREADS threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
"$PYTHON" "$REPO/bench/llama_cpp_peer.py" table "$RESULTS"
echo
echo "load average (1/5/15 min) at the start of each round: $(grep '^# round' "$RESULTS" | cut -d' ' -f5-7 | paste -sd';' | sed 's/;/; /g')"
echo "raw numbers: $RESULTS; logs: $LOGS"
