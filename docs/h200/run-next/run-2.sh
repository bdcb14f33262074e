# Device call 2 of 2, on the machine run-1.sh left warm (`bash build/devcarry/run-2.sh`,
# carry ["build/devcarry",".whl"] only: carrying build/devcache again would replace the
# engine build). Prepared 2026-12-05 (second session).
# Spare sequences (docs/batching.md, "Spare sequences"): issue 13's benchmark as
# written, Lucerna (--parallel 8, spares by default: 8 more sequences on this GPU)
# against llama-server at the same --parallel, both prompt caches on, same GGUF, same
# run; then Lucerna with --spare-sequences 0. Then the tensor-core kernel's counters (ncu)
# in the 8-sequence decode step, and the products with the default rule.
source build/devcarry/setup.sh
T0=$(date +%s)
B=build/native-cuda/bin
for spares in default 0; do
  [ $(( $(date +%s) - T0 )) -gt 300 ] && break
  flag=""; [ $spares = 0 ] && flag="--spare-sequences 0"
  timeout 190 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 $flag \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-spares-$spares.json > $OUT/vs-peer-spares-$spares.txt 2>&1
  echo "spares $spares (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-spares-$spares.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
if [ $(( $(date +%s) - T0 )) -lt 470 ]; then
  timeout 100 ncu --clock-control none --graph-profiling node --kernel-name regex:mul_mat_vec_q_mma \
      --launch-skip 3000 --launch-count 12 --section SpeedOfLight --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --csv --page details \
      python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 16 --streams 8 > $OUT/ncu-8.csv 2> $OUT/ncu-8.err
  echo "ncu 8: rc $?, $(grep -c mul_mat_vec_q_mma $OUT/ncu-8.csv) lines"
fi
if [ $(( $(date +%s) - T0 )) -lt 560 ]; then
  GGML_CUDA_MMVQ_MMA=1 timeout 30 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q6_K --threads 16 2>&1 \
      | grep -E "gpu_matmul_time|error" > $OUT/products.txt
  grep -E "cols=(1|8) " $OUT/products.txt | head -20
fi
echo "end $(( $(date +%s) - T0 )) s"
