# Device call 1 of 2 on a fresh H200, prepared 2026-12-05 (third session). Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Engine patch 0212 leaves the logits on the device until a pick or a record reads them:
# the H100's 8-row step copied 7.9 MB of logits (0.96 ms of memcpy a step) that greedy
# picks never read; there it gave 8 sequences 2.1-4.9% (docs/benchmarks.md, "Logits left
# on the device"). Here, on the H200: raw decode at 1, 4 and 8 sequences with 0212
# (default) against LLAMA_LOGITS_ON_DEMAND=0 (every row copied), alternated; the same
# tokens and log-probabilities either way (--records, cmp); where the 8-row step goes
# (bin/gpu-kernel-profile runs its daemons with every row copied, to cut the steps).
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
setting() {
  unset LLAMA_LOGITS_ON_DEMAND
  if [ $1 = eager ]; then export LLAMA_LOGITS_ON_DEMAND=0; fi
}
for mode in default eager; do
  echo "== raw $mode"; setting $mode
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee $OUT/steps.txt
for mode in default eager; do
  setting $mode
  timeout 40 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 32 --streams 1,8 \
      --records $OUT/records-$mode.json --logprobs 2 > $OUT/records-$mode.txt 2>&1
done
setting default
for mode in eager; do
  cmp $OUT/records-default.json $OUT/records-$mode.json && echo "records: $mode identical to default"
done
echo "records at $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt 480 ] && timeout 80 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof \
    --runs batch8,decode --n-gen 32 > $OUT/prof.txt 2>&1
grep -E "^\| (8|1) \| 1[0-9]{3} " $OUT/prof.txt | head -4
python3 -c "
import json; d = json.load(open('$OUT/prof/kernel-profile.json'))
for run in d: s = d[run]['steps'][0]; print(run, s['logits_rows'], 'span', s['span_ms'], 'memcpy', s['memcpy_per_step'], s['memcpy_ms'])
" 2>/dev/null
for mode in default eager; do
  [ $(( $(date +%s) - T0 )) -gt 540 ] && break
  echo "== raw $mode"; setting $mode
  timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,4,8 2>&1 | tail -3
done | tee -a $OUT/steps.txt
echo "end $(( $(date +%s) - T0 )) s"
