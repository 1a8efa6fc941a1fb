# rnnopt: the workflow and its pinned environment in one image.
# CPU build by default; --build-arg TORCH_VARIANT=cuda for the CUDA build (docs/docker.md).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# cpu | cuda: which PyTorch index torch comes from (TORCH_INDEX_URL overrides the mapping).
# cuda maps to cu130, the CUDA build that PyPI's torch 2.13.0 is too.
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX_URL=
# A directory or URL holding the torch wheel (pip reads this variable itself): when set,
# torch is installed from there alone, without asking the index.
ARG PIP_FIND_LINKS=
ARG IMAGE_TAG=rnnopt:cpu
ARG GIT_COMMIT=unknown

# Any --user uid works: HOME, caches and matplotlib's config under /tmp, writable by all; USER
# named, because getpass.getuser() (Snakemake, torch) fails for a uid /etc/passwd lacks.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    USER=rnnopt \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/.config/matplotlib \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    RNNOPT_IMAGE=${IMAGE_TAG} \
    RNNOPT_GIT_COMMIT=${GIT_COMMIT}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

WORKDIR /work/rnnopt

# A C++ compiler: torch.compile's CPU backend (inductor) compiles its kernels with it; without
# one, torch-*-compile failed with InvalidCxxCompiler. bookworm's g++, pinned.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++=4:12.2.0-3 \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, in their own layers, so that editing the project does not reinstall them.
COPY requirements/lock.txt requirements/lock.txt
RUN python3 -m venv "$VIRTUAL_ENV" \
    && case "$TORCH_VARIANT" in \
         cpu) torch_index=https://download.pytorch.org/whl/cpu ;; \
         cuda) torch_index=https://download.pytorch.org/whl/cu130 ;; \
         *) echo "TORCH_VARIANT=$TORCH_VARIANT: allowed are cpu, cuda" >&2; exit 1 ;; \
       esac \
    && torch_version="$(sed -n 's/^torch==//p' requirements/lock.txt)" \
    && PIP_NO_INDEX="$([ -n "$PIP_FIND_LINKS" ] && echo 1 || echo 0)" \
       pip install --no-cache-dir --progress-bar off --no-deps \
       --index-url "${TORCH_INDEX_URL:-$torch_index}" "torch==${torch_version}" \
    && pip install --no-cache-dir --progress-bar off -r requirements/lock.txt

# The project, non-editable (its schemas ship as package data), and the workflow it runs.
COPY . .
RUN pip install --no-cache-dir --progress-bar off -c requirements/lock.txt . \
    && rm -rf build src/*.egg-info \
    && python -c "import importlib.resources as r, rnnopt; \
assert rnnopt.__file__.startswith('/opt/venv/'), rnnopt.__file__; \
assert r.files('rnnopt').joinpath('schemas/record.schema.json').is_file(), 'schemas missing'" \
    && mkdir -p results \
    && chmod 1777 . results

# Snakemake keeps its state in .snakemake/ here: the sticky, world-writable workdir lets any uid.
# Never root by default (nobody); `docker run --user "$(id -u):$(id -g)"` makes the files yours.
USER 65534:65534
CMD ["snakemake", "--cores", "all"]
