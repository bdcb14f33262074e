# device call 2: HTTP against the daemon, 1/4/8 streams at --parallel 8 (TTFT, aggregate)
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
timeout 420 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against daemon --parallel 8 --concurrency 1,4,8 --max-tokens 64 --limit 16 --n-ctx 32768 --out $OUT/bench.json > $OUT/bench.txt 2>&1; tail -16 $OUT/bench.txt
echo "done $(( $(date +%s) - T0 )) s"
