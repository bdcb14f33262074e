# device call 2 (prepared, not yet run; warm, the build of call 1): a second raw round in
# the other order, then the same over HTTP (lucerna serve --parallel 8, lucerna bench at 1
# and 8 streams), each setting twice, alternated; then the kernel trace
source build/devcarry/setup.sh
T0=$(date +%s)
[ -x build/native-cuda/bin/lucerna-mkmodels ] || { echo "cold machine: no build"; exit 3; }
for r in 1 0; do
  echo "LUCERNA_STATE_RESERVE=$r"
  LUCERNA_STATE_RESERVE=$r timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 128 2>&1 | tail -3
done 2>&1 | tee $OUT/steps2.txt
for round in 1 2; do
  for r in 0 1; do
    LUCERNA_STATE_RESERVE=$r python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
        --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-$round-$r.log 2>&1 &
    pid=$!
    for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
    timeout 150 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1,8 --max-tokens 64 \
        --repeats 2 --out $OUT/http-$round-$r.json > $OUT/http-$round-$r.txt 2>&1
    echo "round $round LUCERNA_STATE_RESERVE=$r"; grep -E "^\| *candidate" $OUT/http-$round-$r.txt | head -4
    kill -INT $pid; wait $pid
    echo "at $(( $(date +%s) - T0 )) s"
  done
done
timeout 120 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8 --n-gen 48 > $OUT/prof.txt 2>&1
sed -n 1,30p $OUT/prof.txt | cut -c1-120; rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
