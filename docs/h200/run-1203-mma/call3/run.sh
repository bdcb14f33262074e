# device call 3: page-locked, reused state memory (engine/state_memory.h): prefill gaps and TTFT
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
$B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
for v in 1 0; do
  LUCERNA_PAGEABLE_STATES=$v timeout 70 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof$v --runs batch8 --n-gen 48 > $OUT/prof$v.txt 2>&1
  echo "LUCERNA_PAGEABLE_STATES=$v"; sed -n 3,16p $OUT/prof$v.txt | cut -c1-90
  rm -f $OUT/prof$v/*.tsv $OUT/prof$v/*.so
done
echo "profiles $(( $(date +%s) - T0 )) s"
timeout 200 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against daemon --parallel 8 --concurrency 1 --max-tokens 32 --limit 10 --n-ctx 32768 --out $OUT/bench-c1.json > $OUT/bench.txt 2>&1; tail -25 $OUT/bench.txt
echo "done $(( $(date +%s) - T0 )) s"
