#!/bin/bash
# One device call for the GPU measurements (issue 15): libcst from a cp312 wheel carried in the
# ignored .whl folder (`carry: [".whl"]`), the pinning bench, then the whole verify bench.
# Run on the device machine from the repository root: `bash bench/verify/gpu_session.sh`.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site
# The wheel: python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#   --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl libcst==1.9.0
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 -c "import torch,transformers,accelerate;print(torch.__version__,transformers.__version__,accelerate.__version__)"; git log --oneline -1 2>/dev/null; } >>$LOG 2>&1
echo "== advisor check target" >>$LOG
PYTHONPATH=$PWD:/tmp/site timeout 30 python3 -m advisor check --no-color bench/verify/gpt2_plain_loop.py 2>&1 | grep -i target >>$LOG
echo "== pinning without workers" >>$LOG
T0=$(date +%s)
timeout 90 python3 bench/loader/pinning_without_workers.py >$OUT/pinning.json 2>>$LOG
echo "pinning bench: $(( $(date +%s) - T0 )) s" >>$LOG
echo "== bench/verify/run.py" >>$LOG
T0=$(date +%s)
python3 bench/verify/run.py --reports-dir $OUT/r --out docs/benchmarks.md 2>&1 | tee -a $LOG
echo "bench wall: $(( $(date +%s) - T0 )) s" | tee -a $LOG
cp docs/benchmarks.md $OUT/benchmarks.md
