#!/usr/bin/env bash
# Wheels of requirements/gpu-host.txt for a GPU host without network (Python 3.12, x86_64) into
# .whl/, which ci/gpu-run.sh installs there without resolving anything (docs/gpu.md).
# connection_pool is published as an sdist only: its wheel is built here (pure Python).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLATFORMS=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 \
    manylinux2014 manylinux1; do
    PLATFORMS+=(--platform "${tag}_x86_64")
done
grep -v -e '^#' -e '^connection_pool' requirements/gpu-host.txt >.whl/binary.txt
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d .whl -r .whl/binary.txt
python3 -m pip wheel --quiet --no-deps -w .whl \
    "$(grep '^connection_pool' requirements/gpu-host.txt)"
rm .whl/binary.txt
echo "gpu-wheels: $(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
