# Device call 2 on the H200 run-1.sh left warm (`bash build/devcarry/run-3.sh`, carry
# ["build/devcarry",".whl"], needs_h200 true). Prepared 2026-12-07. Its build step adds the
# peer llama-server to the engine build of call 1. Issue 13's benchmark as written: Lucerna
# (--parallel 8) against llama-server at the same --parallel, both prompt caches on, same
# GGUF, same run, with engine patches 0215-0217; 256 tokens, then 64 as the time allows.
# run-2.sh (records and the kernel profile) is for a session with device time to spare.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
for n in 256 64; do
  [ $(( $(date +%s) - T0 )) -gt 380 ] && break
  timeout 200 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens $n --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-$n.json > $OUT/vs-peer-$n.txt 2>&1
  echo "$n tokens (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-$n.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
echo "end $(( $(date +%s) - T0 )) s"
