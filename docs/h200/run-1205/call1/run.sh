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
# Engine patch 0210 (added 2026-12-05) on CUDA before calls 2 and 3 lean on it: eight
# prompt lengths admitted at once, the default (one forward a step) against
# LLAMA_RS_RAGGED=0 (one per length), greedy tokens compared. Should the default fail,
# build/ragged-off (kept on the warm machine) turns it off for calls 2 and 3.
L=64,70,76,82,88,94,100,103
timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 32 --streams 8 \
    --prompt-lengths $L --records $OUT/rec-ragged.json 2>&1 | tail -1
[ -s $OUT/rec-ragged.json ] || { touch build/ragged-off; echo "0210 FAILED: calls 2 and 3 run with LLAMA_RS_RAGGED=0"; }
LLAMA_RS_RAGGED=0 timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 32 --streams 8 \
    --prompt-lengths $L --records $OUT/rec-split.json 2>&1 | tail -1
python3 - $OUT/rec-ragged.json $OUT/rec-split.json <<'PY'
import json, sys
try:
    a, b = (json.load(open(path))["8"] for path in sys.argv[1:])
except (OSError, KeyError, ValueError) as error:
    sys.exit(f"no comparison: {error}")
same = [next((i for i, (x, y) in enumerate(zip(a[s], b[s])) if x[0] != y[0]), len(a[s])) for s in sorted(a)]
print("0210: greedy tokens equal to the split's, per sequence, up to the first difference:", same)
PY
echo "end $(( $(date +%s) - T0 )) s"
