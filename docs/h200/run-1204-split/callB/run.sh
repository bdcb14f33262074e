# device call B (2026-12-04 session 3): engine patch 0208's split-K, now on by default
# (4 ranges), against GGML_CUDA_MMVQ_MMA_SPLIT_K=1 (off) over HTTP: Lucerna serve
# --parallel 8, lucerna bench --concurrency 1,8, the two settings alternated; then the
# raw 1- and 8-sequence decode of the default build if time is left
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null
echo "models $(( $(date +%s) - T0 )) s"
for split in 4 1; do
  GGML_CUDA_MMVQ_MMA_SPLIT_K=$split python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
      --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-$split.log 2>&1 &
  pid=$!
  for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
  timeout 90 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1,8 --max-tokens 64 \
      --repeats 2 --out $OUT/http-$split.json > $OUT/http-$split.txt 2>&1
  echo "split $split"; grep -E "^\| *candidate" $OUT/http-$split.txt | head -4
  kill -INT $pid; wait $pid
  echo "at $(( $(date +%s) - T0 )) s"
done
if [ $(( $(date +%s) - T0 )) -lt 520 ]; then
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2 | tee $OUT/steps.txt
fi
echo "end $(( $(date +%s) - T0 )) s"
