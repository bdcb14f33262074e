# device call 2 of 3, `bash build/devcarry/run-2.sh` (carry ["build/devcarry",".whl"] only): issue 13's benchmark as
# written, Lucerna against llama-server at the same --parallel, both with their prompt
# caches on, same GGUF, same run; 64-token replies (as every earlier round) and then
# 256-token ones (an agent's reply is longer; the admissions weigh less)
# First, engine patch 0209 (activations staged through shared memory, off unless
# GGML_CUDA_MMVQ_MMA_STAGE=1): its products against the default, then the raw 8-row decode.
source build/devcarry/setup.sh
# build/ragged-off: engine patch 0210 failed in call 1 (run-1.sh)
[ -f build/ragged-off ] && { export LLAMA_RS_RAGGED=0; echo "0210 failed in call 1: LLAMA_RS_RAGGED=0"; }
T0=$(date +%s)
B=build/native-cuda/bin
for st in 0 1; do
  echo "== GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_STAGE=$st"
  GGML_CUDA_MMVQ_MMA=1 GGML_CUDA_MMVQ_MMA_STAGE=$st timeout 60 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K --threads 16 2>&1 | grep -E "gpu_matmul|error" | grep -v "cols=16"
done > $OUT/stage.txt 2>&1
grep -c gbps $OUT/stage.txt
for st in 0 1 0 1; do
  echo "== raw GGML_CUDA_MMVQ_MMA_STAGE=$st"
  GGML_CUDA_MMVQ_MMA_STAGE=$st timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
echo "stage $(( $(date +%s) - T0 )) s"
# The HTTP rounds run with whichever setting gave the higher 8-stream rate while all
# decode, summed over both rounds (the peer is the pristine engine: the variable is
# nothing to it).
export GGML_CUDA_MMVQ_MMA_STAGE=$(awk '/^== raw/ {st=substr($NF, length($NF))} /^8 streams/ {sum[st]+=$6} END {print (sum[1] > sum[0]) ? 1 : 0}' $OUT/steps.txt)
echo "HTTP rounds with GGML_CUDA_MMVQ_MMA_STAGE=$GGML_CUDA_MMVQ_MMA_STAGE"
for n in 64 256; do
  [ $(( $(date +%s) - T0 )) -gt 380 ] && break
  timeout 200 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens $n --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-$n.json > $OUT/vs-peer-$n.txt 2>&1
  echo "max-tokens $n"; grep -E "^\| *(candidate|baseline|lucerna|llama)" $OUT/vs-peer-$n.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
