# device call A (2026-12-04 session 2): is the front end's prefix cache (the snapshot
# of the conversation a new request displaces from its sequence, every request of the
# bench at 8 streams) what keeps HTTP (4.01x) below raw decode (4.9x)? Lucerna
# serve --parallel 8 with the cache on (default) and off (--cache-ram 0), alternated
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null
echo "models $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for cache in on off; do
    extra=""; [ $cache = off ] && extra="--cache-ram 0"
    python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
        --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 $extra > $OUT/serve-$round-$cache.log 2>&1 &
    pid=$!
    for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
    timeout 100 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1,8 --max-tokens 64 \
        --repeats 2 --out $OUT/http-$round-$cache.json > $OUT/http-$round-$cache.txt 2>&1
    curl -s http://127.0.0.1:8123/status > $OUT/status-$round-$cache.json
    echo "round $round cache $cache"; grep -E "^\| *candidate" $OUT/http-$round-$cache.txt | head -4
    kill -INT $pid; wait $pid
    echo "at $(( $(date +%s) - T0 )) s"
    [ $(( $(date +%s) - T0 )) -gt 500 ] && break 2
  done
done
