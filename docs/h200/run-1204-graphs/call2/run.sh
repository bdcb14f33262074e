# device call 2 of 2026-12-04 (warm machine, the build of call 1): one CUDA graph per
# shape (0204) against one per split (GGML_CUDA_GRAPH_PER_SHAPE=0), raw and over HTTP
source build/devcarry/setup.sh
T0=$(date +%s)
for round in 1 2; do
  for g in 0 1; do
    echo "round $round GGML_CUDA_GRAPH_PER_SHAPE=$g"
    GGML_CUDA_GRAPH_PER_SHAPE=$g timeout 100 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 128 2>&1 | tail -3
  done
done 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for g in 0 1; do
    GGML_CUDA_GRAPH_PER_SHAPE=$g python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
        --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-$round-$g.log 2>&1 &
    pid=$!
    for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
    timeout 150 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1,8 --max-tokens 64 \
        --repeats 2 --out $OUT/http-$round-$g.json > $OUT/http-$round-$g.txt 2>&1
    echo "round $round GGML_CUDA_GRAPH_PER_SHAPE=$g"; grep -E "^\| *(1|8) " $OUT/http-$round-$g.txt | head -4
    kill -INT $pid; wait $pid
  done
done
echo "http $(( $(date +%s) - T0 )) s"
timeout 100 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 48 > $OUT/prof.txt 2>&1
sed -n 1,40p $OUT/prof.txt | cut -c1-120; rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
