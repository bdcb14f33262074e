# Device call 1 of 3 on a fresh H200, prepared 2026-12-07. Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Engine patch 0215 applies the tensor-core kernel's scales as integers into super-block
# sums (the SASS loop of a Q4_K super-block: 480 -> 306 instructions unstaged, 620 -> 313
# staged at 8 columns). The products, the engine's pick of kernel, with 0215 (default),
# with GGML_CUDA_MMVQ_MMA_SB_SUMS=0 (the scaling before it), and with GGML_CUDA_MMVQ_MMA=1
# (the kernel at every width, against MMVQ's picks below 3 or 4 columns; 0216 moved Q6_K's long
# rows from 7 to 4), with every product's activations staged, one column's too
# (GGML_CUDA_MMVQ_MMA_STAGE=2), and so with two row tiles a block (TILES=2); then raw
# decode at 1 and 8 sequences, 256 tokens, 0215 against SB_SUMS=0 and STAGE=2, as the time
# allows.
# (As run on the H100 of 2026-12-07: the first three product runs, raw runs of 128 tokens.)
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=$(ls -d build/native-cuda*/bin 2>/dev/null | head -1)
cat $M/qwen36-27b.gguf > /dev/null
setting() {
  unset GGML_CUDA_MMVQ_MMA_SB_SUMS GGML_CUDA_MMVQ_MMA GGML_CUDA_MMVQ_MMA_STAGE GGML_CUDA_MMVQ_MMA_TILES
  if [ $1 = legacy ]; then export GGML_CUDA_MMVQ_MMA_SB_SUMS=0; fi
  if [ $1 = mma-all ]; then export GGML_CUDA_MMVQ_MMA=1; fi
  if [ $1 = stage-all ]; then export GGML_CUDA_MMVQ_MMA_STAGE=2; fi
  if [ $1 = stage-all-tiles2 ]; then export GGML_CUDA_MMVQ_MMA_STAGE=2 GGML_CUDA_MMVQ_MMA_TILES=2; fi
}
for s in default legacy mma-all stage-all stage-all-tiles2; do
  [ $(( $(date +%s) - T0 )) -gt 470 ] && break
  setting $s; echo "== $s at $(( $(date +%s) - T0 )) s"
  timeout 80 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K 2>&1 | grep gpu_matmul
done > $OUT/products.txt 2>&1
grep -E "^==" $OUT/products.txt; grep -c gpu_matmul_time $OUT/products.txt
grep "gpu_matmul " $OUT/products.txt | awk '{split($7,a,"="); if (a[2] > 5e-4) print "NMSE HIGH", $0}' | head
grep "gpu_matmul " $OUT/products.txt | grep -c "invariant=0"
for mode in default legacy stage-all default legacy stage-all; do
  [ $(( $(date +%s) - T0 )) -gt 530 ] && break
  echo "== raw $mode"; setting $mode
  timeout 45 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
