#!/usr/bin/env bash
# The GPU check of issue 8 in one run, on a machine with a CUDA device and its own python3 with
# torch (nothing is installed: the package runs from src/ on PYTHONPATH, without the optional C
# kernel). Logs go to $OUT (default ./cuda-check):
#   env.txt     the GPU, Python, torch and CUDA versions
#   pytest.txt  tests/singular/test_cuda.py (a CUDA read gives the CPU reading; --max-memory bounds
#               the GPU peak; the CLI and a one-process torchrun over nccl) and the device tests
#   bench.txt   benchmarks/cuda_read.py (CPU vs GPU time of the whole read, batching on the GPU)
# Run:  bash benchmarks/cuda_check.sh        (about 5 minutes on one H200 and 16 cores)
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-cuda-check}"
mkdir -p "$out"
py="${PYTHON:-python3}"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$py" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())"
    "$py" -c "import neuromanifold; print(neuromanifold.__file__)"
} 2>&1 | tee "$out/env.txt"
timeout "${PYTEST_TIMEOUT:-200}" "$py" -m pytest -p no:cacheprovider -o addopts= -q -rs -n 4 \
    tests/singular/test_cuda.py tests/singular/test_agreement.py tests/singular/test_device.py \
    tests/singular/test_meta_and_device_errors.py tests/singular/test_read_cli_rank_errors.py \
    2>&1 | tee "$out/pytest.txt"
timeout "${BENCH_TIMEOUT:-170}" "$py" benchmarks/cuda_read.py --cpu-budget 20 ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt"
