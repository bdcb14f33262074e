# device call 2026-12-04 16:28 UTC (run as prepared the session before): engine patch 0208 (split-K for the
# tensor-core kernel, GGML_CUDA_MMVQ_MMA_SPLIT_K) product by product and in the 8-row
# step, and admissions written at once (bin/batched-step-profile --admit all, now the
# default) with prompts of one length against eight lengths
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
for s in 1 2 4 8; do
  echo "== GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_SPLIT_K=$s"
  GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_SPLIT_K=$s timeout 60 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q6_K --threads 16 2>&1 | grep -E "k=17408|error|invariant=0" | grep -v "cols=16"
done > $OUT/split.txt 2>&1
grep -c gbps $OUT/split.txt; echo "split $(( $(date +%s) - T0 )) s"
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null
echo "models $(( $(date +%s) - T0 )) s"
P="python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128"
{
  for round in 1 2; do
    for s in 1 4; do
      echo "== GGML_CUDA_MMVQ_MMA_SPLIT_K=$s"; GGML_CUDA_MMVQ_MMA_SPLIT_K=$s timeout 60 $P --streams 1,8 2>&1 | tail -2
    done
  done
  for L in 83 64,70,76,82,88,94,100,103; do
    echo "== --prompt-lengths $L"; timeout 60 $P --streams 8 --prompt-lengths $L 2>&1 | tail -1
  done
} 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
