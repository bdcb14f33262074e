# device call 1 of 2026-12-04 04:20 UTC: engine patches 0204 (one CUDA graph per shape) and
# 0205 (the residual's ADD fused into the small-batch tensor-core kernel)
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
$B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm.txt 2> $OUT/mm.err || tail -20 $OUT/mm.err
echo "check $(( $(date +%s) - T0 )) s"
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for add in 0 1; do
    echo "round $round GGML_CUDA_MMVQ_MMA_ADD=$add"
    GGML_CUDA_MMVQ_MMA_ADD=$add timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 128 2>&1 | tail -3
  done
done 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
which ncu nsys 2>&1 | head -2
