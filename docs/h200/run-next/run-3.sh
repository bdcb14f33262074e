# Device call on the machine run-1.sh left warm (`bash build/devcarry/run-3.sh`, carry
# ["build/devcarry",".whl"]), 2026-12-05 third session: run-1 left 0213 (split-K sums in
# the last block) within the noise against GGML_CUDA_MMVQ_MMA_SPLIT_SUM=kernel; here two
# more alternated pairs, the 8-row step's profile, then issue 13's benchmark once.
source build/devcarry/setup.sh
T0=$(date +%s)
setting() {
  unset LLAMA_LOGITS_ON_DEMAND GGML_CUDA_MMVQ_MMA_SPLIT_SUM
  case $1 in
    eager) export LLAMA_LOGITS_ON_DEMAND=0 ;;
    sumkernel) export GGML_CUDA_MMVQ_MMA_SPLIT_SUM=kernel ;;
  esac
}
for mode in sumkernel default sumkernel default; do
  echo "== raw $mode"; setting $mode
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
setting default
timeout 80 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
grep -E "^\| (8|1) \| 1[0-9]{3} " $OUT/prof.txt | head -4
echo "prof at $(( $(date +%s) - T0 )) s"
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "peer build at $(( $(date +%s) - T0 )) s"
timeout 150 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
    --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
    --out $OUT/vs-peer.json > $OUT/vs-peer.txt 2>&1
echo "bench rc $?"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer.txt | head -8
echo "end $(( $(date +%s) - T0 )) s"
