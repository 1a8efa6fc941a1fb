#!/usr/bin/env bash
# The GPU run (docs/gpu.md): on a CUDA host without network whose Python has torch, numpy,
# pandas, seaborn and numba but not snakemake, memray or memory_profiler. Installs the wheels
# carried in .whl/ (ci/gpu-wheels.sh makes them) into a private folder, without resolving
# anything, uses the host's own torch; runs config/gpu.yaml under Snakemake, then the CUDA
# tests, each under a time limit, and packs results/, the logs and the host's description into
# OUT (default gpu-out/) to bring back.
#   usage: RNNOPT_GIT_COMMIT=<commit> bash ci/gpu-run.sh [snakemake seconds] [test seconds]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
SNAKEMAKE_S=${1:-270}
TEST_S=${2:-75}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
SITE=${RNNOPT_GPU_SITE:-/tmp/rnnopt-site}

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl || { echo "gpu-run: wheel install failed" >&2; exit 1; }
fi
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

{
    date -u
    nvidia-smi || true
    ls -l /dev/nvidia* || true
    lscpu | head -20 || true
    "$PYTHON" - <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
print("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))
import rnnopt.models.variants.torch_base as tb
tb.set_fp32_precision(True)
print("fp32_precision tf32:", torch.backends.cuda.matmul.fp32_precision,
      torch.backends.cudnn.rnn.fp32_precision)
EOF
    "$PYTHON" -m snakemake --version
    "$PYTHON" -c "import memray, memory_profiler; print('memray', memray.__version__)"
} >"$OUT/env.txt" 2>&1

# The measurements first: they are what the run is for; the tests take the time left.
timeout --signal=INT --kill-after=20 "$SNAKEMAKE_S" "$PYTHON" -m snakemake --cores all \
    --configfile config/gpu.yaml --keep-going --rerun-incomplete >"$OUT/snakemake.log" 2>&1
echo "snakemake exit $?" >>"$OUT/snakemake.log"
tar -czf "$OUT/results.tar.gz" --exclude='*/cache/*' --exclude='*/datasets/*' results \
    .snakemake/log 2>/dev/null

# CUDA tests: every test of these files whose name says cuda, the torch.compile ones last
# (each compiles two graphs).
CUDA_TESTS=(tests/test_torch_variants.py tests/test_verify.py tests/test_profile_cli.py
    tests/test_flops.py tests/test_aggregate.py tests/test_report.py)
for selection in "cuda and not compile" "cuda and compile"; do
    timeout --kill-after=10 "$TEST_S" "$PYTHON" -m pytest -q -p no:cacheprovider \
        -k "$selection" "${CUDA_TESTS[@]}" >>"$OUT/pytest.log" 2>&1
    echo "pytest -k '$selection': exit $?" >>"$OUT/pytest.log"
done
