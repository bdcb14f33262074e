# One device call on a fresh machine, prepared 2026-12-05: engine patch 0209's staged
# activations on by default where they paid (Q6_K, rows of 32 super-blocks or more, 7-8
# columns; docs/benchmarks.md, "Staged activations, ragged admissions and the benchmark
# against llama-server"), against GGML_CUDA_MMVQ_MMA_STAGE=0, after a profile of where the
# 8-row step's time goes now. Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# No peer build (--no-peer): this call compares the engine with itself; run-2.sh builds
# the peer and measures spare sequences over HTTP.
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
# And what the engine picks unforced, and MMVQ's times (GGML_CUDA_MMVQ_MMA=0): where the
# kernel takes over from MMVQ (mmvq_mma_min_cols) was tuned before staging.
for mma in default 0; do
  echo "== GGML_CUDA_MMVQ_MMA=$mma"
  if [ $mma = 0 ]; then export GGML_CUDA_MMVQ_MMA=0; else unset GGML_CUDA_MMVQ_MMA; fi
  timeout 60 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 2>&1 | grep -E "gpu_matmul_time|error"
done > $OUT/products-pick.txt
unset GGML_CUDA_MMVQ_MMA
for st in default 0 default 0; do
  echo "== raw GGML_CUDA_MMVQ_MMA_STAGE=$st"
  if [ $st = 0 ]; then export GGML_CUDA_MMVQ_MMA_STAGE=0; else unset GGML_CUDA_MMVQ_MMA_STAGE; fi
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
unset GGML_CUDA_MMVQ_MMA_STAGE
echo "raw at $(( $(date +%s) - T0 )) s"
# Why an 8-column product of the tensor-core kernel still costs 1.2-1.3 times its
# one-column time on the rows of 20 super-blocks (ffn_up/gate: 30.3 against 23.2 us): the
# kernel's own counters in the decode steps of 8 sequences and of one (grid 1088 x 1:
# ffn_up/gate; 320 x 4: ffn_down; 640: the DeltaNet input projection), if ncu reads them
# on this machine (device/KINDS.md: Firecracker yes, gVisor no).
for n in 8 1; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
  timeout 100 ncu --clock-control none --graph-profiling node --kernel-name regex:mul_mat_vec_q_mma \
      --launch-skip 3000 --launch-count 12 --section SpeedOfLight --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --csv --page details \
      python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 16 --streams $n > $OUT/ncu-$n.csv 2> $OUT/ncu-$n.err
  echo "ncu $n: rc $?, $(grep -c mul_mat_vec_q_mma $OUT/ncu-$n.csv) lines"
done
echo "end $(( $(date +%s) - T0 )) s"
