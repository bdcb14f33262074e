# Device call 1 of 2 on a fresh machine, prepared 2026-12-05 (second session). Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Builds the engine with the peer llama-server in its build directory (run-2.sh, on the
# machine this call leaves warm, benchmarks against it), then: where the 8-row step's
# time goes now (0208 split-K and 0209 staging on), and raw decode at 1, 4 and 8
# sequences with 0209's default rule against GGML_CUDA_MMVQ_MMA_STAGE=0.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
timeout 90 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
tail -40 $OUT/prof.txt
echo "profile at $(( $(date +%s) - T0 )) s"
for st in default 0; do
  [ $(( $(date +%s) - T0 )) -gt 530 ] && break
  echo "== raw GGML_CUDA_MMVQ_MMA_STAGE=$st"
  if [ $st = 0 ]; then export GGML_CUDA_MMVQ_MMA_STAGE=0; else unset GGML_CUDA_MMVQ_MMA_STAGE; fi
  timeout 55 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
