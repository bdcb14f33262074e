# One device call on a fresh machine, prepared 2026-12-05: engine patch 0209's staged
# activations on by default where they paid (Q6_K, rows of 32 super-blocks or more, 7-8
# columns; docs/benchmarks.md, "Staged activations, ragged admissions and the benchmark
# against llama-server"), against GGML_CUDA_MMVQ_MMA_STAGE=0, after a profile of where the
# 8-row step's time goes now. Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# No peer build (--no-peer): this call compares the engine with itself.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
B=build/native-cuda/bin
# Where the 8-row step's time goes (first: a call short of device time still gets it).
timeout 90 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
tail -40 $OUT/prof.txt
echo "profile at $(( $(date +%s) - T0 )) s"
# The products with the default rule: 2-6 columns on the short Q4_K/Q5_K rows as
# STAGE=0 timed them this morning, 7-8 columns and Q6_K as STAGE=1.
GGML_CUDA_MMVQ_MMA=1 timeout 60 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q6_K --threads 16 2>&1 \
    | grep -E "gpu_matmul_time|error" > $OUT/products.txt
grep -E "cols=(2|8) " $OUT/products.txt
for st in default 0 default 0; do
  echo "== raw GGML_CUDA_MMVQ_MMA_STAGE=$st"
  if [ $st = 0 ]; then export GGML_CUDA_MMVQ_MMA_STAGE=0; else unset GGML_CUDA_MMVQ_MMA_STAGE; fi
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
unset GGML_CUDA_MMVQ_MMA_STAGE
echo "end $(( $(date +%s) - T0 )) s"
