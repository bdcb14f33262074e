# device call 4: lucerna bench against llama-server at --parallel 8 (third round's command)
source build/devcarry/setup.sh
T0=$(date +%s)
python3 - > $OUT/peer-build.log 2>&1 <<'PY' || { tail -30 $OUT/peer-build.log; exit 1; }
from importlib.machinery import SourceFileLoader
SourceFileLoader("g", "bin/gpu-h200-bench").load_module().build_peer_in_engine_dir("cuda")
PY
echo "peer build $(( $(date +%s) - T0 )) s"
timeout 480 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 --concurrency 1,4,8,16 --max-tokens 64 --repeats 3 --n-ctx 32768 --out $OUT/h200-batching-27b-p8.json > $OUT/bench.txt 2>&1; tail -22 $OUT/bench.txt
echo "done $(( $(date +%s) - T0 )) s"
