# device call 1 (2026-12-03 session 2): 0108 (ssm_out one product) and best-fit state reuse
source build/devcarry/setup.sh
set -o pipefail
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
echo "models $(( $(date +%s) - T0 )) s"
timeout 90 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 48 > $OUT/prof.txt 2>&1
sed -n 1,40p $OUT/prof.txt | cut -c1-110; rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
timeout 120 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,4,8 --tokens 128 > $OUT/steps.txt 2>&1; tail -25 $OUT/steps.txt
echo "done $(( $(date +%s) - T0 )) s"
