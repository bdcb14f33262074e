# device call C: call B's machine still warm (build kept): the two settings again, in the
# other order, then raw decode split 4 against 1
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
n=0
for split in 1 4 1 4; do
  n=$((n+1))
  GGML_CUDA_MMVQ_MMA_SPLIT_K=$split python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
      --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-$n-$split.log 2>&1 &
  pid=$!
  for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
  timeout 90 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1,8 --max-tokens 64 \
      --repeats 2 --out $OUT/http-$n-$split.json > $OUT/http-$n-$split.txt 2>&1
  echo "run $n split $split"; grep -E "^\| *candidate" $OUT/http-$n-$split.txt | head -4
  kill -INT $pid; wait $pid
  echo "at $(( $(date +%s) - T0 )) s"
  [ $(( $(date +%s) - T0 )) -gt 400 ] && break
done
for split in 1 4; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
  echo "== raw split $split"; GGML_CUDA_MMVQ_MMA_SPLIT_K=$split timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2
done
echo "end $(( $(date +%s) - T0 )) s"
