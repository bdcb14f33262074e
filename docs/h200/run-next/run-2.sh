# Device call 2 of 2, on the H200 run-1.sh left warm (`bash build/devcarry/run-2.sh`,
# carry ["build/devcarry",".whl"] only: carrying build/devcache again would replace the
# engine build). Prepared 2026-12-05 (second session).
# Builds the peer llama-server in the engine's build directory, then issue 13's benchmark
# as written: Lucerna (--parallel 8, spare sequences by default) against llama-server at
# the same --parallel, both prompt caches on, same GGUF, same run; with engine patch
# 0211's default, then with GGML_CUDA_MMVQ_MMA_TILES=1, then the default again (the peer
# is the pristine engine: the variable is nothing to it). On the H100 spares took the
# 8-stream aggregate from 4.63x to 5.53x one stream (docs/benchmarks.md).
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
n=0
for tiles in default 1 default; do
  [ $(( $(date +%s) - T0 )) -gt 440 ] && break
  n=$((n + 1))
  if [ $tiles = default ]; then unset GGML_CUDA_MMVQ_MMA_TILES; else export GGML_CUDA_MMVQ_MMA_TILES=$tiles; fi
  timeout 150 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-$n-tiles-$tiles.json > $OUT/vs-peer-$n-tiles-$tiles.txt 2>&1
  echo "round $n tiles $tiles (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-$n-tiles-$tiles.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
echo "end $(( $(date +%s) - T0 )) s"
