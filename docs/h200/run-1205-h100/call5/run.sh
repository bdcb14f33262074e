# device call 5 (warm machine; tree f6c8c61), as run:
source build/devcarry/setup.sh
for tiles in 2 1; do
  export GGML_CUDA_MMVQ_MMA_TILES=$tiles
  timeout 100 python3 -m orchestrator.cli bench --model $M/qwen36-27b.gguf --against llama-server --parallel 8 \
      --concurrency 1,8 --max-tokens 64 --repeats 2 --n-ctx 32768 --threads 16 \
      --out $OUT/vs-peer-r2-tiles$tiles.json > $OUT/vs-peer-r2-tiles$tiles.txt 2>&1
done
