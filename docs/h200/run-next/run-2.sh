# An optional device call on the H200 run-1.sh left warm (`bash build/devcarry/run-2.sh`,
# carry ["build/devcarry",".whl"] only, needs_h200 true: carrying build/devcache again would replace the
# engine build). Prepared 2026-12-07. Raw decode at 1 and 8 sequences, 256 tokens, engine
# patch 0215 (default) against GGML_CUDA_MMVQ_MMA_SB_SUMS=0, alternated; both ways' tokens
# and log-probabilities at 8 sequences (--records: 0215 rounds differently, so they are
# compared, not expected equal); the kernel's hardware counters (ncu); where the 8-row step
# goes now (gpu-kernel-profile).
source build/devcarry/setup.sh
T0=$(date +%s)
setting() {
  unset GGML_CUDA_MMVQ_MMA_SB_SUMS
  if [ $1 = legacy ]; then export GGML_CUDA_MMVQ_MMA_SB_SUMS=0; fi
}
for mode in default legacy default legacy; do
  echo "== raw $mode"; setting $mode
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
for mode in default legacy; do
  setting $mode
  timeout 40 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 64 --streams 1,8 \
      --records $OUT/records-$mode.json --logprobs 2 > $OUT/records-$mode.txt 2>&1
done
echo "records at $(( $(date +%s) - T0 )) s"
setting default
# The tensor-core kernel's counters (Nsight Compute reads them on Firecracker machines,
# not on gVisor ones: KINDS.md): the Q4_K timing shapes' launches at 1 and 8 columns, to
# see whether the products now wait on memory or still on issue.
B=$(ls -d build/native-cuda*/bin 2>/dev/null | head -1)
[ $(( $(date +%s) - T0 )) -lt 300 ] && timeout 120 ncu --clock-control none --kernel-name regex:mul_mat_vec_q_mma \
    --launch-skip 200 --launch-count 40 --section SpeedOfLight --section WarpStateStats \
    --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
    $B/lucerna-mkmodels --gpu-matmul-check q4_K > $OUT/ncu.txt 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|Issue Slots|Stall|Achieved Occupancy" $OUT/ncu.txt | head -20
[ $(( $(date +%s) - T0 )) -lt 420 ] && timeout 100 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof \
    --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
grep -E "^\| (8|1) \| 1[0-9]{3} " $OUT/prof.txt | head -4
for mode in default legacy; do
  [ $(( $(date +%s) - T0 )) -gt 530 ] && break
  echo "== raw $mode"; setting $mode
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee -a $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
