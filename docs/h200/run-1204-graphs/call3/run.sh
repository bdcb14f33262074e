# device call 3 of 2026-12-04: the series with 0204-0207 (0206: delta-net states read in
# place; 0207: q8_1 activations quantized once per group of products), each change
# against its own off switch in one build
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null  # into the page cache: a cold first load outlasted its timeout in call 2
echo "models $(( $(date +%s) - T0 )) s"
OFF="GGML_CUDA_MMVQ_MMA_ADD=0 GGML_CUDA_KEEP_Q8_1=0 LLAMA_RS_GATHER=1"
# the same numbers, bit for bit, with each change off: token ids and log-probabilities
i=0
for setting in "" "$OFF" ""; do
  i=$((i + 1)); name="$i-$(echo "${setting:-all-on}" | tr ' =' '_-')"
  env $setting timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 24 \
      --logprobs 1 --records $OUT/records-$name.json > /dev/null 2>&1 || echo "records $name failed"
done
python3 - $OUT/records-*.json <<'PY'
import json, sys
runs = {path.rsplit("/", 1)[1]: json.load(open(path)) for path in sys.argv[1:]}
first = runs.pop(min(runs))
for name, run in sorted(runs.items()):
    for streams in sorted(first, key=int):
        same = run.get(streams) == first[streams]
        print(f"{name} against the first all-on run, {streams} streams: {'same bits' if same else 'DIFFERENT'}")
PY
echo "bits $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for setting in "$OFF" ""; do
    echo "round $round ${setting:-all on}"
    env $setting timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --streams 1,8 --tokens 96 2>&1 | tail -2
  done
done 2>&1 | tee $OUT/steps.txt
echo "steps $(( $(date +%s) - T0 )) s"
timeout 80 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
grep -A4 "^## \|^| 8 \|^| 1 " $OUT/prof.txt | head -16 | cut -c1-120; grep "^- rows" $OUT/prof.txt | head -3 | cut -c1-400
rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
