# Device call 1 of 2 on a fresh machine, prepared 2026-12-05 (second session). Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Engine patch 0211 (row tiles sharing staged activations, GGML_CUDA_MMVQ_MMA_TILES=1|2|4,
# 1 by default) measured against itself: the products, then raw decode at 1, 4 and 8
# sequences; then where the 8-row step's time goes. Leaves build/tiles-choice (the setting
# with the higher 8-sequence rate while all decode) for run-2.sh on the warm machine.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
B=build/native-cuda/bin
for tiles in 1 2 4; do
  echo "== GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  GGML_CUDA_MMVQ_MMA_TILES=$tiles timeout 40 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 2>&1 \
      | grep -E "gpu_matmul|error" | grep -v "cols=16"
done > $OUT/products.txt 2>&1
grep -E "^==|cols=8 " $OUT/products.txt | head -40
echo "products at $(( $(date +%s) - T0 )) s"
for tiles in 1 2 4; do
  [ $(( $(date +%s) - T0 )) -gt 470 ] && break
  echo "== raw GGML_CUDA_MMVQ_MMA_TILES=$tiles"
  GGML_CUDA_MMVQ_MMA_TILES=$tiles timeout 55 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
awk '/^== raw/ {split($NF, kv, "="); tiles=kv[2]} /^8 streams/ {if ($6 > best) {best=$6; pick=tiles}} END {print pick ? pick : 1}' \
    $OUT/steps.txt > build/tiles-choice
echo "raw at $(( $(date +%s) - T0 )) s; tiles-choice $(cat build/tiles-choice)"
[ $(( $(date +%s) - T0 )) -lt 500 ] && GGML_CUDA_MMVQ_MMA_TILES=$(cat build/tiles-choice) timeout 80 \
    python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
tail -12 $OUT/prof.txt
echo "end $(( $(date +%s) - T0 )) s"
