# Device call 2 of 2, on the machine run-1.sh left warm (`bash build/devcarry/run-2.sh`,
# carry ["build/devcarry",".whl"] only: carrying build/devcache again would replace the
# engine build). Prepared 2026-12-05 (second session).
# Builds the peer llama-server in the engine's build directory, then issue 13's benchmark
# as written: Lucerna (--parallel 8, spares by default: 8 more sequences on this GPU)
# against llama-server at the same --parallel, both prompt caches on, same GGUF, same run;
# then Lucerna with --spare-sequences 0. Both with run-1.sh's GGML_CUDA_MMVQ_MMA_TILES pick
# (the peer is the pristine engine: the variable is nothing to it).
source build/devcarry/setup.sh
T0=$(date +%s)
export GGML_CUDA_MMVQ_MMA_TILES=$(cat build/tiles-choice 2>/dev/null || echo 1)
echo "GGML_CUDA_MMVQ_MMA_TILES=$GGML_CUDA_MMVQ_MMA_TILES"
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
for spares in default 0; do
  [ $(( $(date +%s) - T0 )) -gt 395 ] && break
  flag=""; [ $spares = 0 ] && flag="--spare-sequences 0"
  timeout 190 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 $flag \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-spares-$spares.json > $OUT/vs-peer-spares-$spares.txt 2>&1
  echo "spares $spares (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-spares-$spares.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
echo "end $(( $(date +%s) - T0 )) s"
