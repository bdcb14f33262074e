# Device call 2, on the H200 call 1 left warm (carry ["build/devcarry",".whl"]), 2026-12-05
# 15:32 UTC: the products of the engine's own pick of kernel, the default (staged
# activations where 0209's rule stages them) against GGML_CUDA_MMVQ_MMA_STAGE=0.
source build/devcarry/setup.sh; B=$(ls -d build/native-cuda*/bin 2>/dev/null | head -1); echo $B; ls $B | head; for s in default 0; do echo "== STAGE $s"; if [ $s = 0 ]; then export GGML_CUDA_MMVQ_MMA_STAGE=0; fi; timeout 100 $B/lucerna-mkmodels --gpu-matmul-check q4_K,q5_K,q6_K 2>&1 | grep gpu_matmul_time; done > $OUT/products.txt 2>&1; tail -5 $OUT/products.txt; wc -l $OUT/products.txt
