# device call B (2026-12-04 session 2): where does an admission's time go? Raw decode
# (bin/batched-step-profile) at 8 sequences with prompts of one length (83 tokens, the
# bench's code-set mean) against eight distinct lengths (64..103): the engine splits a
# step into micro-batches with as many tokens of every sequence (split_equal), so the
# second should take one micro-batch per length; and each with and without checkpoints
# (--reuse 0); then the kernel trace of the batch8 run
source build/devcarry/setup.sh
T0=$(date +%s)
python3 -c "from daemons.native import ensure_native; ensure_native('cuda')" > $OUT/build.log 2>&1 || { tail -60 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
B=build/native-cuda/bin
[ -f $M/qwen36-27b.gguf ] || $B/lucerna-mkmodels --shape qwen36-27b --out $M --piece-pool 64 > $OUT/mk.log 2>&1 || tail -20 $OUT/mk.log
cat $M/qwen36-27b.gguf > /dev/null
echo "models $(( $(date +%s) - T0 )) s"
P="python3 bin/batched-step-profile --model $M/qwen36-27b.gguf --tokens 128"
EQ=83; DIST=64,70,76,82,88,94,100,103
{
  for args in "--streams 1 --prompt-lengths $EQ" "--streams 8 --prompt-lengths $EQ" "--streams 8 --prompt-lengths $DIST" \
              "--streams 8 --prompt-lengths $DIST --reuse 0" "--streams 8 --prompt-lengths $EQ --reuse 0" \
              "--streams 8 --prompt-lengths $DIST" "--streams 8 --prompt-lengths $EQ"; do
    echo "== $args"; timeout 60 $P $args 2>&1 | tail -2
    [ $(( $(date +%s) - T0 )) -gt 500 ] && break
  done
} 2>&1 | tee $OUT/admit.txt
echo "admit $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt 470 ] && timeout 100 python3 bin/gpu-kernel-profile --models $M --out $OUT/prof --runs batch8 --n-gen 32 > $OUT/prof.txt 2>&1
sed -n 1,24p $OUT/prof.txt | cut -c1-110; rm -f $OUT/prof/*.tsv $OUT/prof/*.so
echo "profile $(( $(date +%s) - T0 )) s"
