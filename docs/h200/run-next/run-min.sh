# The shortest H200 call that gives issue 13's ratio (`bash build/devcarry/run-min.sh`,
# carry ["build/devcarry","build/devcache",".whl"]), for a session with little device
# time left: the engine's build, then raw decode at 1 and 8 sequences, 64 tokens, as
# often as the time allows.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M --no-peer > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
while true; do
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 64 --streams 1,8 2>&1 | tail -2
  echo "at $(( $(date +%s) - T0 )) s"
done | tee $OUT/steps.txt
