#!/usr/bin/env bash
# The real Docker check: build the CPU image and run the ci config in it, as a non-root uid.
#
# No image registry is reachable here, so the base image is a local Debian bookworm made by
# debootstrap from this machine's own apt mirror, with this machine's CA certificates (the
# network re-signs TLS; the certificates go into that local base only, never into the
# Dockerfile). A private dockerd (own socket, data root, exec root, no bridge, no iptables)
# runs for the check alone and is stopped, and its data removed, whatever happens.
#
# Exit 0 with "docker-check: SKIPPED: <why>" only where dockerd cannot run at all.
# Environment knobs:
#   DOCKER_CHECK_CACHE   where the debootstrap tarball is kept between runs
#                        (default /var/cache/rnnopt-docker-check; empty: no cache)
#   DOCKER_CHECK_UID     uid:gid the workflow runs as (default 1000:1000)
#   DOCKER_CHECK_TMPFS_SIZE  size limit of the tmpfs for the daemon's data (default 10g)
#   DOCKER_CHECK_BUILD_ONLY=1  build and smoke-test the image, skip the workflow run
#   DOCKER_CHECK_KEEP=DIR      copy the run's results/ to DIR before cleaning up
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_DIR=$(pwd)

IMAGE_TAG=rnnopt:cpu
BASE_TAG=rnnopt-local-base:bookworm
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-pip,python3-dev,ca-certificates
# Bump when build_base_image changes what goes into the base: it keys the cached tarball.
BASE_RECIPE=2
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
WHEEL_DIR=/opt/wheels
CACHE_DIR=${DOCKER_CHECK_CACHE-/var/cache/rnnopt-docker-check}
RUN_AS=${DOCKER_CHECK_UID:-1000:1000}
# Upper bound of the tmpfs holding the daemon's data; it uses memory only for what is written
# (about 4 GB at the peak of the build).
TMPFS_SIZE=${DOCKER_CHECK_TMPFS_SIZE:-10g}
# The docker.io client, matching the daemon; a newer client elsewhere on PATH wants buildx.
DOCKER_CLIENT=/usr/bin/docker
# The classic builder: it supports --network host and needs no buildx.
export DOCKER_BUILDKIT=0

WORK_DIR=""
DOCKERD_PID=""
WHEEL_SERVER_PID=""
CHECK_START=$SECONDS
PHASE_START=$SECONDS
PHASE_NAME=""

log() { echo "docker-check: $*"; }
skip() {
    log "SKIPPED: $*"
    exit 0
}
fail() {
    log "FAILED: $*" >&2
    exit 1
}

phase() {
    end_phase
    PHASE_NAME=$1
    PHASE_START=$SECONDS
    log "--- $PHASE_NAME"
}
end_phase() {
    if [[ -n $PHASE_NAME ]]; then
        log "--- $PHASE_NAME took $((SECONDS - PHASE_START)) s"
    fi
    PHASE_NAME=""
}

docker_cli() { "$DOCKER_CLIENT" -H "unix://$WORK_DIR/docker.sock" "$@"; }

stop_pid() {
    local pid=$1 name=$2
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    log "$name (pid $pid) ignored SIGTERM for 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    set +e
    end_phase
    stop_pid "$WHEEL_SERVER_PID" "wheel server"
    if [[ -n $DOCKERD_PID ]]; then
        docker_cli ps -q 2>/dev/null | xargs -r "$DOCKER_CLIENT" -H "unix://$WORK_DIR/docker.sock" kill >/dev/null 2>&1
        stop_pid "$DOCKERD_PID" dockerd
        # dockerd stops the containerd it started; make sure, by that containerd's own pid file.
        local containerd_pidfile="$WORK_DIR/exec/containerd/containerd.pid"
        [[ -f $containerd_pidfile ]] && stop_pid "$(cat "$containerd_pidfile")" containerd
    fi
    if [[ -n $WORK_DIR && -d $WORK_DIR ]]; then
        # Unmount what the daemon left mounted under its directories, deepest first, and
        # last the tmpfs itself, which drops its contents.
        awk -v dir="$WORK_DIR" '$2 == dir || index($2, dir "/") == 1 {print $2}' /proc/mounts | sort -r |
            xargs -r -n1 umount -l 2>/dev/null
        rm -rf "$WORK_DIR"
    fi
    log "total $((SECONDS - CHECK_START)) s"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

install_tools() {
    phase "tools"
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    [[ -x $DOCKER_CLIENT ]] || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if ((${#missing[@]})); then
        [[ $(id -u) -eq 0 ]] || skip "dockerd or debootstrap missing, and installing them needs root"
        command -v apt-get >/dev/null || skip "dockerd or debootstrap missing, and no apt-get"
        local apt=(apt-get -o DPkg::Lock::Timeout=180 -o Acquire::Retries=3)
        "${apt[@]}" update -q
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q --no-install-recommends \
            docker.io debootstrap
    fi
    [[ $(id -u) -eq 0 ]] || skip "a private dockerd needs root"
}

start_dockerd() {
    phase "dockerd"
    WORK_DIR=$(mktemp -d /tmp/rnnopt-docker-check.XXXXXX)
    # On tmpfs: the image's ~100k files are written fast and dropped at once by one umount,
    # where deleting them from a disk mounted with discard takes minutes.
    if mount -t tmpfs -o "size=$TMPFS_SIZE,mode=755" rnnopt-docker-check "$WORK_DIR"; then
        log "work directory $WORK_DIR on tmpfs (size=$TMPFS_SIZE)"
    else
        log "no tmpfs: work directory $WORK_DIR on disk"
    fi
    chmod 755 "$WORK_DIR"
    local driver
    for driver in overlay2 vfs; do
        mkdir -p "$WORK_DIR/data" "$WORK_DIR/exec"
        dockerd \
            --host "unix://$WORK_DIR/docker.sock" \
            --data-root "$WORK_DIR/data" \
            --exec-root "$WORK_DIR/exec" \
            --pidfile "$WORK_DIR/docker.pid" \
            --storage-driver "$driver" \
            --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
            --userland-proxy=false \
            >"$WORK_DIR/dockerd-$driver.log" 2>&1 &
        DOCKERD_PID=$!
        for _ in $(seq 60); do
            kill -0 "$DOCKERD_PID" 2>/dev/null || break
            if docker_cli info >/dev/null 2>&1; then
                log "dockerd pid $DOCKERD_PID, storage driver $driver"
                return 0
            fi
            sleep 0.5
        done
        log "dockerd with $driver did not come up; its log ends:"
        tail -n 5 "$WORK_DIR/dockerd-$driver.log" | sed 's/^/    /'
        stop_pid "$DOCKERD_PID" dockerd
        DOCKERD_PID=""
        rm -rf "$WORK_DIR/data" "$WORK_DIR/exec"
    done
    skip "dockerd cannot run here (tried overlay2 and vfs; see the log lines above)"
}

# The first deb URI that serves $SUITE, from this machine's apt sources (deb822 or one-line).
apt_mirror() {
    local file
    for file in /etc/apt/sources.list.d/*.sources; do
        [[ -f $file ]] || continue
        awk -v suite="$SUITE" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uri != "")
                    { print uri; found = 1; exit }
                types = suites = uri = enabled = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
            /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
            /^URIs:/ { uri = $2 }
            /^Enabled:/ { enabled = tolower($2) }
            END { if (!found) flush() }' "$file"
    done
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $file ]] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) print $i
            }' "$file"
    done
}

build_base_image() {
    phase "local base image ($SUITE + python3 by debootstrap)"
    local mirror key tarball rootfs
    mirror=$(apt_mirror | sed -n 1p)
    [[ -n $mirror ]] || fail "no apt source for $SUITE in /etc/apt/sources.list{,.d}"
    key=$(printf '%s\n' "$BASE_RECIPE" "$SUITE" "$BASE_PACKAGES" "$mirror" \
        "$(sha256sum <"$HOST_CA_BUNDLE")" | sha256sum | cut -c1-16)
    tarball=${CACHE_DIR:+$CACHE_DIR/base-$SUITE-$key.tar}
    if [[ -n $tarball && -f $tarball ]]; then
        log "reusing $tarball"
    else
        rootfs="$WORK_DIR/rootfs"
        debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$mirror" \
            >"$WORK_DIR/debootstrap.log" 2>&1 ||
            { tail -n 20 "$WORK_DIR/debootstrap.log"; fail "debootstrap of $SUITE failed"; }
        # This network re-signs TLS: the local base trusts what this machine trusts.
        cp "$HOST_CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
        printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tarball=${tarball:-$WORK_DIR/base.tar}
        mkdir -p "$(dirname "$tarball")"
        tar -C "$rootfs" --numeric-owner -cf "$tarball.partial" .
        mv "$tarball.partial" "$tarball"
        rm -rf "$rootfs"
        # Older tarballs of other keys are stale.
        find "$(dirname "$tarball")" -maxdepth 1 -name "base-$SUITE-*.tar" ! -path "$tarball" -delete
    fi
    docker_cli import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        - "$BASE_TAG" <"$tarball" >/dev/null
    log "base image $BASE_TAG from $(basename "$tarball")"
}

# Serve the local torch wheel on loopback for the build (which runs with --network host).
start_wheel_server() {
    compgen -G "$WHEEL_DIR/torch-*.whl" >/dev/null || return 0
    local port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 -m http.server --bind 127.0.0.1 --directory "$WHEEL_DIR" "$port" \
        >"$WORK_DIR/wheel-server.log" 2>&1 &
    WHEEL_SERVER_PID=$!
    for _ in $(seq 40); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/')" 2>/dev/null &&
            break
        sleep 0.25
    done
    WHEEL_URL="http://127.0.0.1:$port/"
    log "serving $WHEEL_DIR on $WHEEL_URL for the build"
}

# Prefix each line with the seconds since the build started.
timestamp_lines() {
    local start=$SECONDS line
    while IFS= read -r line; do
        printf '%5d s  %s\n' $((SECONDS - start)) "$line"
    done
}

build_image() {
    phase "docker build $IMAGE_TAG"
    WHEEL_URL=""
    start_wheel_server
    local commit
    commit=$(git -C "$REPO_DIR" rev-parse HEAD 2>/dev/null || echo unknown)
    # Each output line prefixed with the seconds since the build started, for the step timings.
    docker_cli build --network host \
        --build-arg BASE_IMAGE="$BASE_TAG" \
        --build-arg TORCH_VARIANT=cpu \
        --build-arg PIP_FIND_LINKS="$WHEEL_URL" \
        --build-arg IMAGE_TAG="$IMAGE_TAG" \
        --build-arg GIT_COMMIT="$commit" \
        --tag "$IMAGE_TAG" "$REPO_DIR" 2>&1 |
        timestamp_lines >"$WORK_DIR/build.log" ||
        { tail -n 40 "$WORK_DIR/build.log"; fail "docker build failed"; }
    stop_pid "$WHEEL_SERVER_PID" "wheel server"
    WHEEL_SERVER_PID=""
    grep -E '^ *[0-9]+ s  Step [0-9]+/' "$WORK_DIR/build.log" | cut -c1-110 | sed 's/^/    /'
    docker_cli image ls "$IMAGE_TAG" --format '    {{.Repository}}:{{.Tag}} {{.Size}}'
}

smoke_test() {
    phase "smoke test (as $RUN_AS, no network)"
    local out
    out=$(docker_cli run --rm --network none --user "$RUN_AS" "$IMAGE_TAG" python -c '
import importlib.resources, os, rnnopt, torch
schema = importlib.resources.files("rnnopt") / "schemas" / "record.schema.json"
assert schema.is_file(), "package data missing: " + str(schema)
assert rnnopt.__file__.startswith("/opt/venv/"), rnnopt.__file__
print("torch", torch.__version__, "image", os.environ["RNNOPT_IMAGE"], "home", os.environ["HOME"])
') || fail "python smoke test in the image failed"
    log "$out"
    [[ $out == *"torch 2.13.0"*"image $IMAGE_TAG"* ]] || fail "unexpected smoke output: $out"
    docker_cli run --rm --network none --user "$RUN_AS" "$IMAGE_TAG" rnnopt --help >/dev/null ||
        fail "rnnopt --help failed in the image"
    log "rnnopt --help ok"
}

# The workflow on config/ci.yaml, results/ bind-mounted and written as a non-root uid.
run_workflow() {
    phase "snakemake --configfile config/ci.yaml in the image (as $RUN_AS)"
    [[ -f $REPO_DIR/Snakefile && -f $REPO_DIR/config/ci.yaml ]] ||
        fail "Snakefile or config/ci.yaml missing: nothing to run (DOCKER_CHECK_BUILD_ONLY=1 skips this)"
    local results="$WORK_DIR/results"
    mkdir -p "$results"
    chown "$RUN_AS" "$results"
    docker_cli run --rm --network none --user "$RUN_AS" \
        --volume "$results:/work/rnnopt/results" \
        "$IMAGE_TAG" snakemake --cores all --configfile config/ci.yaml \
        >"$WORK_DIR/run.log" 2>&1 ||
        { tail -n 60 "$WORK_DIR/run.log"; fail "the workflow failed in the image"; }
    grep -E '^[0-9]+ of [0-9]+ steps' "$WORK_DIR/run.log" | tail -n 1 | sed 's/^/    /'
    if [[ -n ${DOCKER_CHECK_KEEP:-} ]]; then
        mkdir -p "$DOCKER_CHECK_KEEP"
        cp -r "$results/." "$DOCKER_CHECK_KEEP/"
        log "results copied to $DOCKER_CHECK_KEEP"
    fi
    check_results "$results"
}

check_results() {
    local results=$1
    [[ -s $results/report/comparison.md ]] || fail "report/comparison.md missing"
    compgen -G "$results/report/*.png" >/dev/null || compgen -G "$results/report/*/*.png" \
        >/dev/null || fail "no figure (*.png) under report/"
    python3 - "$IMAGE_TAG" "$results" <<'EOF' || fail "profile records do not name the image"
import json, pathlib, sys
tag, results = sys.argv[1], pathlib.Path(sys.argv[2])
paths = sorted(results.glob("*/profile/**/*.json"))
assert paths, "no profile record (results/*/profile/*.json)"
images = {json.loads(p.read_text())["env"]["image"] for p in paths}
assert images == {tag}, f"env.image in the records: {images}, expected {tag}"
print(f"docker-check: {len(paths)} profile records carry env.image = {tag}")
EOF
    python3 - "$results" <<'EOF' || fail "the image wrote failed records"
import json, pathlib, sys
# In the image CUDA is skipped (no GPU) and nothing may fail: torch.compile without a C++
# compiler was recorded failed while this check said PASSED.
failed = []
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*/**/*.json")):
    record = json.loads(path.read_text())
    if isinstance(record, dict) and record.get("status") == "failed":
        failed.append(f"{path.name}: {record.get('reason')}")
assert not failed, f"{len(failed)} failed records: " + "; ".join(failed[:5])
print("docker-check: no failed record")
EOF
    local foreign
    foreign=$(find "$results" ! -uid "${RUN_AS%%:*}" | awk 'NR <= 5')
    [[ -z $foreign ]] || fail "files under results/ not owned by uid ${RUN_AS%%:*}: $foreign"
    log "report files present, results owned by uid ${RUN_AS%%:*}"
}

lint_dockerfile() {
    if command -v hadolint >/dev/null; then
        hadolint --config "$REPO_DIR/.hadolint.yaml" "$REPO_DIR/Dockerfile" || fail "hadolint"
        log "hadolint clean"
    fi
}

main() {
    lint_dockerfile
    install_tools
    start_dockerd
    build_base_image
    build_image
    smoke_test
    if [[ ${DOCKER_CHECK_BUILD_ONLY:-0} == 1 ]]; then
        log "DOCKER_CHECK_BUILD_ONLY=1: workflow run not done"
    else
        run_workflow
    fi
    end_phase
    log "PASSED"
}

main "$@"
