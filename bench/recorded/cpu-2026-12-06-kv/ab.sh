#!/bin/bash
# A/B: base (db2166c) and after (kvgen), alternating, each a full torch_gen_bench --modes kv run.
OUT=${OUT:-/tmp/kv/ab}; ROUNDS=${ROUNDS:-4}; PAIRS=${PAIRS:-5}
mkdir -p $OUT
unset RGPU_OPSERVER
for i in $(seq $ROUNDS); do
  for side in base after; do
    if [ $side = base ]; then T=/work/wt-kv-base; else T=/work/wt-kv; fi
    uptime >> $OUT/load.txt
    RGPU_BUILD_DIR=$T/build /work/main/.venv/bin/python $T/bench/torch_gen_bench.py --modes kv --pairs $PAIRS --tokens 200 --out $OUT/$side-$i.json 2>&1 | tail -1 | sed "s/^/$side $i: /"
  done
done
