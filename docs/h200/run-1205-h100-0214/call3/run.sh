# Device call 3, on the same warm H100, carry ["build/devcarry",".whl"]: 256 tokens at 1, 4
# and 8 sequences, LLAMA_KV_PAD_PER_TOKEN=0 first this time.
source build/devcarry/setup.sh; T0=$(date +%s); for mode in upstream default upstream default; do [ $(( $(date +%s) - T0 )) -gt 120 ] && break; unset LLAMA_KV_PAD_PER_TOKEN; [ $mode = upstream ] && export LLAMA_KV_PAD_PER_TOKEN=0; echo "== raw $mode"; timeout 60 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 256 --streams 1,4,8 2>&1 | tail -3; done | tee $OUT/steps256.txt; echo "end $(( $(date +%s) - T0 )) s"
