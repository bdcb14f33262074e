# device call 3 (warm machine after calls 1-2; tree f6c8c61), as run:
source build/devcarry/setup.sh; B=build/native-cuda/bin
for tiles in 2 1 2 1; do
  echo "== raw GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  GGML_CUDA_MMVQ_MMA_TILES=$tiles timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps2.txt
for tiles in 1 2; do
  echo "== GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_TILES=$tiles timeout 40 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 2>&1 | grep -E "gpu_matmul|error" | grep -v "cols=16"
done > $OUT/products-forced.txt 2>&1
