#!/usr/bin/env bash
# Measure llama.cpp (CUDA) on a lent GPU machine that reaches no network: build llama.cpp from the
# source carried in .gpu/llama.cpp (llama-cpp-python 0.3.36's vendored tree, commit in BASE_COMMIT),
# write full-size random-weight GGUFs of real architectures (random_gguf.py), and run llama-bench and
# llama-batched-bench with the settings of the public rows they are compared with:
#   - llama 7B Q4_0 pp512 / tg128, fa off and on: the CUDA scoreboard (llama.cpp discussion #15013);
#   - Llama 3.1 8B Q4_K_M and F16 pp512 / pp4096 / tg128: XiongjieDai's GPU-Benchmarks-on-LLM-Inference;
#   - Qwen2.5 7B Q8_0 llama-batched-bench 512,4096 x 32 x B=1..32 and llama-bench pp2048/tg32 at
#     depths 0..16384, n_batch = n_ubatch = 2048, fa on: ggml-org's benches/dgx-spark.md commands;
#   - Llama 3.1 8B Q4_K_M llama-batched-bench 512 x 128 x B=1..64: batched quantized decode.
# Everything is logged to $OUT/h200_llamacpp.log as it happens, so a run cut short still reports.
#   - second run (SET=b): Llama 3.1 70B Q4_K_M pp512 / tg128 (XiongjieDai's 70B rows), at depth 8192,
#     and llama-batched-bench 512 x 64 x B=1..16; Llama 2 7B Q8_0 pp512 / tg128, fa off and on.
# Usage (on the device machine, from the repo root): [SET=b] bash benchmarks/gpu/run_h200.sh
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
OUTDIR=${OUT:-/tmp/out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/h200_llamacpp.log
exec > >(tee -a "$LOG") 2>&1
SRC=.gpu/llama.cpp
BUILD=${BUILD:-.gpu/build}
MODELS=${MODELS:-.gpu/models}
BUDGET=${BUDGET:-560}   # seconds this script may use in all
left() { echo $((BUDGET - ($(date +%s) - START))); }
stamp() { echo "=== [t+$(($(date +%s) - START)) s] $*"; }

stamp "machine"
date -u
nvidia-smi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv
nvcc --version | tail -2
nproc; free -g | head -2; df -h . | tail -1
echo "llama.cpp source: $(cat $SRC/BASE_COMMIT)"

# --- build (background), with a fallback to the cuBLAS that PyTorch's wheels carry -----------------
EXTRA=()
if [ ! -f /usr/local/cuda/include/cublas_v2.h ]; then
  H=$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -name cublas_v2.h -print 2>/dev/null | head -1)
  L=$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -name 'libcublas.so*' -not -name '*Lt*' -print 2>/dev/null | head -1)
  LT=$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -name 'libcublasLt.so*' -print 2>/dev/null | head -1)
  echo "no cublas in /usr/local/cuda: using header $H, libs $L $LT"
  EXTRA=(-DCUDA_cublas_LIBRARY="$L" -DCUDA_cublasLt_LIBRARY="$LT" "-DCMAKE_CUDA_FLAGS=-I$(dirname "$H")" "-DCMAKE_CXX_FLAGS=-I$(dirname "$H")")
  export LD_LIBRARY_PATH=$(dirname "$L"):${LD_LIBRARY_PATH:-}
fi
(
  [ -n "${SKIP_BUILD:-}" ] && { echo 0 > /tmp/build_rc; exit 0; }
  cmake -S $SRC -B $BUILD -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release "${EXTRA[@]}" > $OUTDIR/cmake.log 2>&1 \
  && cmake --build $BUILD -j "$(nproc)" --target llama-bench llama-batched-bench > $OUTDIR/build.log 2>&1
  echo $? > /tmp/build_rc
) &
BUILD_PID=$!

# --- models (foreground, while the build runs) -----------------------------------------------------
stamp "writing random-weight models"
SET=${SET:-a}   # a: the 7-8B models (first run); b: Llama 3.1 70B Q4_K_M and Llama 2 7B Q8_0 (second run)
if [ "$SET" = b ]; then DEFAULT_SPECS="llama-3.1-70b:q4_k_m llama-2-7b:q8_0"
else DEFAULT_SPECS="llama-2-7b:q4_0 llama-3.1-8b:q4_k_m qwen2.5-7b:q8_0 llama-3.1-8b:f16"; fi
SPECS=${SPECS:-$DEFAULT_SPECS}
PYTHONPATH=$SRC/gguf-py python3 benchmarks/gpu/random_gguf.py $MODELS $SPECS || echo "model writing failed"
stamp "models written; waiting for the build"
wait $BUILD_PID
RC=$(cat /tmp/build_rc 2>/dev/null || echo 1)
stamp "build rc=$RC"
if [ "$RC" != 0 ]; then tail -30 $OUTDIR/cmake.log; tail -60 $OUTDIR/build.log; exit 1; fi
B=$BUILD/bin

run() {  # run CMD... with what is left of the budget, minus a margin
  local t=$(( $(left) - 15 ))
  if [ $t -le 5 ]; then stamp "SKIPPED (no time left): $*"; return; fi
  stamp "$*"
  echo "=== $*" >> $OUTDIR/stderr.log
  timeout $t "$@" 2>> $OUTDIR/stderr.log
  echo "(exit $?)"
}

M=$MODELS
if [ "$SET" = b ]; then
run $B/llama-bench -m $M/llama-3.1-70b-q4_k_m.gguf -p 512 -n 128 -r 3
run $B/llama-batched-bench -m $M/llama-3.1-70b-q4_k_m.gguf -c 10240 -b 2048 -ub 512 -npp 512 -ntg 64 -npl 1,2,4,8,16 -fa on -ngl 99
run $B/llama-bench -m $M/llama-2-7b-q8_0.gguf -p 512 -n 128 -fa 0,1 -r 3
run $B/llama-bench -m $M/llama-3.1-70b-q4_k_m.gguf -p 512 -n 128 -fa 1 -d 8192 -r 2
else
run $B/llama-bench -m $M/llama-2-7b-q4_0.gguf -p 512 -n 128 -fa 0,1 -r 5
run $B/llama-bench -m $M/llama-3.1-8b-q4_k_m.gguf -p 512,4096 -n 128 -r 5
run $B/llama-batched-bench -m $M/llama-3.1-8b-q4_k_m.gguf -c 41984 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,2,4,8,16,32,64 -fa on -ngl 99
run $B/llama-batched-bench -m $M/qwen2.5-7b-q8_0.gguf -c 135168 -b 2048 -ub 2048 -npp 512,4096 -ntg 32 -npl 1,2,4,8,16,32 -fa on -ngl 99
run $B/llama-bench -m $M/qwen2.5-7b-q8_0.gguf -fa 1 -b 2048 -ub 2048 -p 2048 -n 32 -d 0,4096,8192,16384 -r 3
run $B/llama-bench -m $M/llama-3.1-8b-f16.gguf -p 512,4096 -n 128 -r 5
run $B/llama-bench -m $M/llama-2-7b-q4_0.gguf -p 512 -n 128 -fa 1 -ub 2048 -b 2048 -d 0,4096 -r 3
fi
stamp "done"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
ls -la $MODELS
