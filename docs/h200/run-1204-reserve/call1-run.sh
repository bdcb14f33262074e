# device call 1 (prepared 2026-12-04, not yet run): checkpoint memory made at startup
# (reserve_checkpoint_memory, LUCERNA_STATE_RESERVE=0 leaves it out), raw decode; then
# MMVQ for every K-quant product of up to 8 columns (GGML_CUDA_MMVQ_MAX_BATCH=8, engine
# patch 0101), in place of MMQ for the Q6_K ffn_down at 7-8 columns (32 launches, 1.86 ms
# of the fifth round's 8-row step)
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null
echo "models $(( $(date +%s) - T0 )) s"
for r in 0 1; do
  echo "LUCERNA_STATE_RESERVE=$r"
  LUCERNA_STATE_RESERVE=$r timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 128 2>&1 | tail -3
  echo "at $(( $(date +%s) - T0 )) s"
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break
done 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
for v in 8 0; do
  echo "GGML_CUDA_MMVQ_MAX_BATCH=$v"
  GGML_CUDA_MMVQ_MAX_BATCH=$v timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 8 --tokens 128 2>&1 | tail -2
  [ $(( $(date +%s) - T0 )) -gt 560 ] && break
done 2>&1 | tee $OUT/mmvq.txt
echo "mmvq $(( $(date +%s) - T0 )) s"
