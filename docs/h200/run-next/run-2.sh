# The second device call of the next session, on the machine run-1.sh left warm
# (`bash build/devcarry/run-2.sh`, carry ["build/devcarry",".whl"] only; on a fresh
# machine carry build/devcache too: the build below then takes the engine's 5.5 minutes
# and the bench rounds that do not fit are skipped). Prepared 2026-12-05.
# Spare sequences (docs/batching.md, "Spare sequences"): issue 13's benchmark as
# written, Lucerna (--parallel 8, spares by default: 8 more sequences on this GPU)
# against llama-server at the same --parallel, both prompt caches on, same GGUF, same
# run; then Lucerna with --spare-sequences 0 (the 2026-12-05 runs' setting), alternated.
# On the CPU the spares took Lucerna from 0.79-0.88x llama-server's 8-stream aggregate
# to 0.99x, and its TTFT p50 at 8 streams from 164-822 ms to 45 (docs/benchmarks.md).
source build/devcarry/setup.sh
T0=$(date +%s)
# The peer (llama-server in the engine's build directory); the engine and models from
# run-1.sh are found built.
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
for spares in default 0; do
  [ $(( $(date +%s) - T0 )) -gt 400 ] && break
  flag=""; [ $spares = 0 ] && flag="--spare-sequences 0"
  timeout 190 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 $flag \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-spares-$spares.json > $OUT/vs-peer-spares-$spares.txt 2>&1
  echo "spares $spares"; grep -E "^\| *(lucerna|llama)" $OUT/vs-peer-spares-$spares.txt | head -8
  grep -E "x8:|x1:" $OUT/vs-peer-spares-$spares.txt
  echo "at $(( $(date +%s) - T0 )) s"
done
echo "end $(( $(date +%s) - T0 )) s"
