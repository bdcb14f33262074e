# device call of 2026-12-04 00:00 UTC; experiment-0204-cuda-mmvq-mma-two-tiles.patch sat in
# native/engine-patches/ (uncommitted) for this call only, on the tree of 1521676
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
GGML_CUDA_MMVQ_MMA=1 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-16rows.txt 2> $OUT/mm-16rows.err || tail -20 $OUT/mm-16rows.err
echo "check 16 $(( $(date +%s) - T0 )) s"
GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_TWO_TILES=1 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-32rows.txt 2> $OUT/mm-32rows.err || tail -20 $OUT/mm-32rows.err
echo "check 32 $(( $(date +%s) - T0 )) s"
$B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
for tt in 9 4; do
  echo "GGML_CUDA_MMVQ_MMA_TWO_TILES=$tt"
  GGML_CUDA_MMVQ_MMA_TWO_TILES=$tt timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,4,8 --tokens 128 2>&1 | tail -4
done 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
