# device call 5: spare state blocks (engine/state_memory.cpp want_spare): TTFT at one stream, spares off then on
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
n=0
for v in 0 1 0 1; do
  n=$((n+1))
  LUCERNA_STATE_SPARES=$v timeout 100 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against daemon --parallel 8 --concurrency 1 --max-tokens 32 --limit 10 --n-ctx 32768 --out $OUT/bench-$n-spares$v.json > $OUT/b.txt 2>&1
  echo "SPARES=$v $(( $(date +%s) - T0 )) s"; grep -E "^\| (lucerna|daemon) " $OUT/b.txt
done
