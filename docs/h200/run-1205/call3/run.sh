# device call 3 of 3, `bash build/devcarry/run-3.sh` (carry ["build/devcarry",".whl"] only,
# right after run-2.sh): what the idle daemon's spare state block buys one stream with the
# prefix cache on (docs/benchmarks.md, "A device session lost": built, not measured).
# The afternoon's call A (docs/h200/run-1204-cache/) put 50-130 ms of TTFT on the snapshot
# of each displaced conversation, which locked a new 160 MB block. LUCERNA_STATE_RESERVE=0
# makes no memory ahead (no spare; no checkpoint blocks at startup either, which at one
# stream only the first request's checkpoint needs), the default makes both; alternated,
# two rounds, the same server command as call A. The daemon makes the spare only after
# 50 ms with no command, and the bench sends each request as soon as the last one ends:
# where its gaps are shorter this shows that the spare costs nothing, not what it buys.
#
# First (prepared 2026-12-05): engine patch 0210, a step of prompts of several lengths as
# one forward on the hybrid 27B, against LLAMA_RS_RAGGED=0 (one forward per length, as the
# pinned engine), alternated: raw, eight prompts of eight lengths admitted at once beside
# nothing (the tool's own step count and forwards), then over HTTP at 8 streams (each
# request's prompt admitted beside the others' decode rows).
source build/devcarry/setup.sh
# build/ragged-off: engine patch 0210 failed in call 1 (run-1.sh)
[ -f build/ragged-off ] && { export LLAMA_RS_RAGGED=0; echo "0210 failed in call 1: LLAMA_RS_RAGGED=0"; }
T0=$(date +%s)
for ragged in $([ -f build/ragged-off ] || echo default 0 default 0); do
  echo "== raw LLAMA_RS_RAGGED=$ragged"
  if [ $ragged = 0 ]; then export LLAMA_RS_RAGGED=0; else unset LLAMA_RS_RAGGED; fi
  timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 8 \
      --prompt-lengths 64,70,76,82,88,94,100,103 2>&1 | tail -1
done | tee $OUT/ragged-raw.txt
for ragged in $([ -f build/ragged-off ] || echo default 0); do
  if [ $ragged = 0 ]; then export LLAMA_RS_RAGGED=0; else unset LLAMA_RS_RAGGED; fi
  python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
      --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-ragged-$ragged.log 2>&1 &
  pid=$!
  for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
  timeout 100 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 8 --max-tokens 64 \
      --repeats 2 --out $OUT/ragged-$ragged.json > $OUT/ragged-$ragged.txt 2>&1
  echo "LLAMA_RS_RAGGED=$ragged"; grep -E "^\| *candidate" $OUT/ragged-$ragged.txt | head -2
  kill -INT $pid; wait $pid
  echo "at $(( $(date +%s) - T0 )) s"
done
[ -f build/ragged-off ] || unset LLAMA_RS_RAGGED
for round in 1 2; do
  for reserve in default 0; do
    if [ $reserve = 0 ]; then export LUCERNA_STATE_RESERVE=0; else unset LUCERNA_STATE_RESERVE; fi
    python3 -m orchestrator.cli serve --model $M/qwen36-27b.gguf --model-name qwen36-27b \
        --host 127.0.0.1 --port 8123 --n-ctx 32768 --threads 16 --queue-limit 16 --parallel 8 > $OUT/serve-$round-$reserve.log 2>&1 &
    pid=$!
    for i in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done
    timeout 100 python3 -m orchestrator.cli bench --url http://127.0.0.1:8123/v1 --concurrency 1 --max-tokens 64 \
        --repeats 2 --out $OUT/spare-$round-$reserve.json > $OUT/spare-$round-$reserve.txt 2>&1
    curl -s http://127.0.0.1:8123/status > $OUT/status-$round-$reserve.json
    echo "round $round LUCERNA_STATE_RESERVE=$reserve"; grep -E "^\| *candidate" $OUT/spare-$round-$reserve.txt | head -2
    kill -INT $pid; wait $pid
    echo "at $(( $(date +%s) - T0 )) s"
    [ $(( $(date +%s) - T0 )) -gt 420 ] && break 2
  done
done
