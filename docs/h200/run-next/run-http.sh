# One device call on a fresh H200 for a session whose starts keep being refused
# (`bash build/devcarry/run-http.sh`, carry ["build/devcarry","build/devcache",".whl"],
# needs_h200 true). Prepared 2026-12-07. The engine with the peer (engine patches
# 0215-0217), then issue 13's benchmark as written: Lucerna (--parallel 8) against
# llama-server at the same --parallel, both prompt caches on, same GGUF, same run, 256
# tokens; then raw decode at 1 and 8 sequences as the time allows.
# BUDGET: the seconds the call may take (its timeout_s less 10 or so), 590 by default.
source build/devcarry/setup.sh
T0=$(date +%s); BUDGET=${BUDGET:-590}
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
# The call ends at BUDGET: one repeat where the build left too little time for two.
LEFT=$(( BUDGET - ($(date +%s) - T0) )); REPEATS=2; [ $LEFT -lt 230 ] && REPEATS=1
timeout $LEFT python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
    --concurrency 1,8 --max-tokens 256 --repeats $REPEATS --n-ctx 32768 --threads 16 \
    --out $OUT/vs-peer-256.json > $OUT/vs-peer-256.txt 2>&1
echo "256 tokens, $REPEATS repeats (rc $?)"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-256.txt | head -8
echo "at $(( $(date +%s) - T0 )) s"
while [ $(( $(date +%s) - T0 )) -lt $(( BUDGET - 50 )) ]; do
  timeout 45 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
