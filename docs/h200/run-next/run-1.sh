# Device call 1 of 2 on a fresh H200, prepared 2026-12-05 (fourth session). Packed with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` with carry ["build/devcarry","build/devcache",".whl"].
# Engine patch 0214 pads n_kv by 256 cells per sequence of a micro-batch: 8 sequences kept
# a graph's shape for 32 steps before (a new n_kv every 256 cells: a rebuilt graph, two
# steps kernel by kernel and a CUDA graph capture), 256 now. Raw decode at 1 and 8
# sequences, 256 tokens (eight 256-cell crossings at 8 sequences before), the default
# against LLAMA_KV_PAD_PER_SEQ=0, alternated; then the same tokens and
# log-probabilities either way (--records, cmp). Call 2 builds the peer.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
setting() {
  unset LLAMA_KV_PAD_PER_SEQ
  if [ $1 = upstream ]; then export LLAMA_KV_PAD_PER_SEQ=0; fi
}
for mode in default upstream default upstream; do
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break
  echo "== raw $mode"; setting $mode
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,8 2>&1 | tail -2
done | tee $OUT/steps.txt
for mode in default upstream; do
  [ $(( $(date +%s) - T0 )) -gt 560 ] && break
  setting $mode
  timeout 30 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 40 --streams 8 \
      --records $OUT/records-$mode.json --logprobs 2 > $OUT/records-$mode.txt 2>&1
done
cmp $OUT/records-default.json $OUT/records-upstream.json && echo "records: identical"
echo "end $(( $(date +%s) - T0 )) s"
