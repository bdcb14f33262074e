# device call 2 of 2 (carry ["build/devcarry",".whl"] only): issue 13's benchmark as
# written, Lucerna against llama-server at the same --parallel, both with their prompt
# caches on, same GGUF, same run; 64-token replies (as every earlier round) and then
# 256-token ones (an agent's reply is longer; the admissions weigh less)
source build/devcarry/setup.sh
T0=$(date +%s)
for n in 64 256; do
  [ $(( $(date +%s) - T0 )) -gt 300 ] && break
  timeout 280 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens $n --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-$n.json > $OUT/vs-peer-$n.txt 2>&1
  echo "max-tokens $n"; grep -E "^\| *(candidate|baseline|lucerna|llama)" $OUT/vs-peer-$n.txt | head -8
  echo "at $(( $(date +%s) - T0 )) s"
done
