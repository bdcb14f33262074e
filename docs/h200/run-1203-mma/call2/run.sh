# device call 2: the kernel with its measured table; raw batched decode A/B; kernel profile of the 8-sequence step
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
$B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-default.txt 2>&1 || tail -20 $OUT/mm-default.txt
grep "gpu_matmul " $OUT/mm-default.txt | awk '{print $3,$4,$6,$7,$8}' | sort | uniq -c | awk '$6!="invariant=1"' | head -20
echo "check $(( $(date +%s) - T0 )) s"
$B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
for mma in 0 default; do
  echo "GGML_CUDA_MMVQ_MMA=$mma"
  if [ $mma = default ]; then unset GGML_CUDA_MMVQ_MMA; else export GGML_CUDA_MMVQ_MMA=$mma; fi
  timeout 120 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,4,8 --tokens 128 2>&1 | tail -5
done 2>&1 | tee $OUT/steps.txt
unset GGML_CUDA_MMVQ_MMA
echo "steps $(( $(date +%s) - T0 )) s"
timeout 150 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 48 > $OUT/prof.txt 2>&1; tail -30 $OUT/prof.txt
rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
GGML_CUDA_MMVQ_MMA=0 timeout 60 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof0 --runs batch8 --n-gen 48 > $OUT/prof0.txt 2>&1; tail -12 $OUT/prof0.txt
rm -f $OUT/prof0/*.tsv $OUT/prof0/*.so
echo "done $(( $(date +%s) - T0 )) s"
