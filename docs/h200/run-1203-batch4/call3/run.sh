# device call 3: TTFT at one stream, page-locked vs pageable state memory, as call 3 of the last session
source build/devcarry/setup.sh
for v in 0 1; do
LUCERNA_PAGEABLE_STATES=$v timeout 200 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against daemon --parallel 8 --concurrency 1 --max-tokens 32 --limit 10 --n-ctx 32768 --out $OUT/bench-c1-p$v.json > $OUT/bench-c1-p$v.txt 2>&1; echo "PAGEABLE=$v"; tail -8 $OUT/bench-c1-p$v.txt | head -4
done
