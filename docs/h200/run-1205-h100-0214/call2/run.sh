# Device call 2 (of the three below, a fourth was a mistyped bench command), on the H100
# call 1 left warm, carry ["build/devcarry",".whl"], 2026-12-05 16:40 UTC: 128 tokens, as
# the earlier H100 sections measured, 0214 (default) against LLAMA_KV_PAD_PER_TOKEN=0.
source build/devcarry/setup.sh; T0=$(date +%s); for mode in default upstream default upstream; do [ $(( $(date +%s) - T0 )) -gt 170 ] && break; unset LLAMA_KV_PAD_PER_TOKEN; [ $mode = upstream ] && export LLAMA_KV_PAD_PER_TOKEN=0; echo "== raw $mode"; timeout 50 python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128 --streams 1,8 2>&1 | tail -2; done | tee $OUT/steps128.txt; echo "end $(( $(date +%s) - T0 )) s"
