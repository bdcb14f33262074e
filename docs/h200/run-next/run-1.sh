# Device call 1 of 2 on a fresh H200, prepared 2026-12-05 (second session). Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Engine patch 0211 (row tiles sharing staged activations) was measured on an H100 only
# (docs/benchmarks.md, "Row tiles sharing staged activations"), where its default rule
# (Q4_K from 6 columns) came from the products table. Here, on the H200: the default
# against GGML_CUDA_MMVQ_MMA_TILES=1 (off) and =2 (every staged product), raw decode at
# 1, 4 and 8 sequences, two rounds alternated; the products; where the 8-row step goes.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
for tiles in default 1 2 default 1 2; do
  [ $(( $(date +%s) - T0 )) -gt 450 ] && break
  echo "== raw GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  if [ $tiles = default ]; then unset GGML_CUDA_MMVQ_MMA_TILES; else export GGML_CUDA_MMVQ_MMA_TILES=$tiles; fi
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
unset GGML_CUDA_MMVQ_MMA_TILES
echo "raw at $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
for tiles in default 1; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && break
  echo "== GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  if [ $tiles = default ]; then unset GGML_CUDA_MMVQ_MMA_TILES; else export GGML_CUDA_MMVQ_MMA_TILES=$tiles; fi
  timeout 40 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 2>&1 | grep -E "gpu_matmul|error" | grep -v "cols=16"
done > $OUT/products.txt 2>&1
unset GGML_CUDA_MMVQ_MMA_TILES
grep -E "^==|cols=8 " $OUT/products.txt | grep -E "^==|gbps" | head -30
[ $(( $(date +%s) - T0 )) -lt 510 ] && timeout 80 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof \
    --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
grep -E "^- rows (8|1), 1[0-9]{3} kernels|^\| (8|1) \| 1[0-9]{3} " $OUT/prof.txt | head -6
echo "end $(( $(date +%s) - T0 )) s"
