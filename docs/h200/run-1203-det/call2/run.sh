# device call 2 (warm): the deterministic mode on the 27B shape
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
ls build/native-cuda/bin $M
python3 bin/gpu-deterministic --target $M/qwen36-27b.gguf --target-draft $M/dflash-27b.gguf --out $OUT/det --steps target --budget-s 540 2>&1 | tail -40
echo "done $(( $(date +%s) - T0 )) s"
