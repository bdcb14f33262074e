# device call 1 of 3, prepared 2026-12-04 (first tried 2026-12-04 night: see
# docs/benchmarks.md, "A device session lost"). Packed here with
#   bin/gpu-h200-pack docs/h200/run-next/run-*.sh
# and run as `bash build/devcarry/run-1.sh` on a fresh machine with carry
# ["build/devcarry","build/devcache",".whl"]: the engine, the peer llama-server built in
# the engine's directory, our daemons and the 27B-shape target, then the raw steps.
# Call 2 must follow at once (the machine is released after 30 s idle) and must NOT
# carry build/devcache: a carried path replaces the device's copy, build included.
source build/devcarry/setup.sh
T0=$(date +%s)
python3 bin/gpu-h200-bench build --models $M > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
tail -3 $OUT/build.log
echo "build $(( $(date +%s) - T0 )) s"
cat $M/qwen36-27b.gguf > /dev/null
timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2
echo "end $(( $(date +%s) - T0 )) s"
