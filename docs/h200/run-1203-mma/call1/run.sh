# device call 1: build, the small-batch kernel's check and timings, raw batched decode A/B
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
$B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-default.txt 2> $OUT/mm-default.err || tail -20 $OUT/mm-default.err
echo "check default $(( $(date +%s) - T0 )) s"; grep -c . $OUT/mm-default.txt
GGML_CUDA_MMVQ_MMA=0 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-off.txt 2>&1
echo "check off $(( $(date +%s) - T0 )) s"
$B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
for mma in 0 default; do
  echo "GGML_CUDA_MMVQ_MMA=$mma"
  if [ $mma = default ]; then unset GGML_CUDA_MMVQ_MMA; else export GGML_CUDA_MMVQ_MMA=$mma; fi
  timeout 120 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,4,8 --tokens 128 2>&1 | tail -5
done 2>&1 | tee $OUT/steps.txt
unset GGML_CUDA_MMVQ_MMA
echo "steps $(( $(date +%s) - T0 )) s"
for w in 4 8; do GGML_CUDA_MMVQ_MMA=$w timeout 60 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 > $OUT/mm-w$w.txt 2>&1; done
echo "done $(( $(date +%s) - T0 )) s"
