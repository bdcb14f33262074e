# device call 1: build, the 27B-shape models, the deterministic mode on the test model
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
[ -f $M/dflash-27b.gguf ] || $B/lucerna-mkmodels --shape dflash-27b --out $M --piece-pool 64 >> $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
ls -la $M
echo "models $(( $(date +%s) - T0 )) s"
python3 bin/gpu-deterministic --out $OUT/det --steps test-model --budget-s $(( 560 - ($(date +%s) - T0) )) 2>&1 | tail -40
echo "done $(( $(date +%s) - T0 )) s"
