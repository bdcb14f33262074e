# Device call 1 of 2 on a fresh H200, prepared 2026-12-07. Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"]
# and needs_h200 true: a call for the nvidia-h200 kind without it may start an H100.
# Engine patches 0215-0217 (the tensor-core kernel's scales applied as integers into
# super-block sums; Q6_K long rows to it from 4 columns; Q4_K staged at every width), so
# far measured on H100s only (docs/benchmarks.md, "Super-block sums in the tensor-core
# kernel"). The products, the engine's pick of kernel, with them (default), with
# GGML_CUDA_MMVQ_MMA_SB_SUMS=0 (the scaling before 0215), with GGML_CUDA_MMVQ_MMA=1 (the
# kernel at every width) and with GGML_CUDA_MMVQ_MMA_STAGE=2 (every product staged: Q5_K
# too); then raw decode at 1 and 8 sequences, 256 tokens, the default against
# SB_SUMS=0, alternated, as the time allows. Call 2 is run-3.sh.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=$(ls -d build/native-cuda*/bin 2>/dev/null | head -1)
cat $M/qwen36-27b.gguf > /dev/null
setting() {
  unset GGML_CUDA_MMVQ_MMA_SB_SUMS GGML_CUDA_MMVQ_MMA GGML_CUDA_MMVQ_MMA_STAGE
  if [ $1 = legacy ]; then export GGML_CUDA_MMVQ_MMA_SB_SUMS=0; fi
  if [ $1 = mma-all ]; then export GGML_CUDA_MMVQ_MMA=1; fi
  if [ $1 = stage-all ]; then export GGML_CUDA_MMVQ_MMA_STAGE=2; fi
}
for s in default legacy mma-all stage-all; do
  [ $(( $(date +%s) - T0 )) -gt 470 ] && break
  setting $s; echo "== $s at $(( $(date +%s) - T0 )) s"
  timeout 80 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K 2>&1 | grep gpu_matmul
done > $OUT/products.txt 2>&1
grep -E "^==" $OUT/products.txt; grep -c gpu_matmul_time $OUT/products.txt
grep "gpu_matmul " $OUT/products.txt | awk '{split($7,a,"="); if (a[2] > 5e-4) print "NMSE HIGH", $0}' | head
grep "gpu_matmul " $OUT/products.txt | grep -c "invariant=0"
for mode in default legacy default legacy default; do
  [ $(( $(date +%s) - T0 )) -gt 530 ] && break
  echo "== raw $mode"; setting $mode
  timeout 45 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
