# device call 4 (warm machine; tree f6c8c61), as run:
source build/devcarry/setup.sh; export GGML_CUDA_MMVQ_MMA_TILES=1
timeout 190 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
    --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
    --out $OUT/vs-peer-spares-default-tiles1.json > $OUT/vs-peer-spares-default-tiles1.txt 2>&1
