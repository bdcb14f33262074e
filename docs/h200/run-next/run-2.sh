# Device call 2 of 2, on the H200 run-1.sh left warm (`bash build/devcarry/run-2.sh`,
# carry ["build/devcarry",".whl"] only: carrying build/devcache again would replace the
# engine build). Prepared 2026-12-05 (fourth session). Its build step adds the peer
# llama-server to the engine build call 1 left.
# Issue 13's benchmark as written: Lucerna (--parallel 8, spare sequences by default)
# against llama-server at the same --parallel, both prompt caches on, same GGUF, same
# run; with engine patch 0214 (the default), then LLAMA_KV_PAD_PER_SEQ=0 (the peer is
# the pristine engine: the variable is nothing to it).
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
n=0
for mode in default upstream; do
  [ $(( $(date +%s) - T0 )) -gt 400 ] && break
  n=$((n + 1))
  if [ $mode = upstream ]; then export LLAMA_KV_PAD_PER_SEQ=0; else unset LLAMA_KV_PAD_PER_SEQ; fi
  timeout 180 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-$n-$mode.json > $OUT/vs-peer-$n-$mode.txt 2>&1
  echo "round $n $mode (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-$n-$mode.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
echo "end $(( $(date +%s) - T0 )) s"
