#!/usr/bin/env bash
# Start a real one-node SLURM cluster on localhost from Debian's packages: munged, MariaDB,
# slurmdbd (the Snakemake SLURM executor asks sacct for job states), slurmctld and slurmd. No
# systemd and no cgroups (proctrack/linuxproc, task/none). The configuration goes where the
# SLURM commands look for it, /etc/slurm (slurm.conf, slurmdbd.conf, gres.conf; the Snakemake
# job step drops SLURM_CONF from the environment of the srun it calls inside each job), and it
# refuses to replace a configuration it did not write. Everything else (keys, sockets, pid
# files, logs, spool, database) lives in one state directory. ci/slurm-stop.sh ends the
# daemons by their pid files and removes both.
#
#   bash ci/slurm-start.sh [--gpus N]      # N fake GPUs as a `gpu` GRES (device nodes)
#
# Environment: RNNOPT_SLURM_DIR (state directory, default /tmp/rnnopt-slurm),
# RNNOPT_SLURM_START_TIMEOUT_S (default 120). Needs root (apt-get install, daemons as root).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="$(realpath -m "${RNNOPT_SLURM_DIR:-/tmp/rnnopt-slurm}")"
# Made in the state directory at its creation: a directory without it is never emptied,
# removed, or read for pid files to signal (ci/slurm-stop.sh holds to the same).
STATE_MARKER=".rnnopt-slurm-state"
TIMEOUT_S="${RNNOPT_SLURM_START_TIMEOUT_S:-120}"
GPUS=0
PACKAGES=(munge mariadb-server slurmdbd slurmctld slurmd slurm-client)
CTLD_PORT=6817
SLURMD_PORT=6818
DBD_PORT=6819
DB_PORT=3307 # not 3306: leaves a MariaDB/MySQL of the host alone
CONF_DIR=/etc/slurm
MARK="written by ci/slurm-start.sh" # in the first line of every file it puts in CONF_DIR

while [[ $# -gt 0 ]]; do
    case "$1" in
        --gpus) GPUS="$2"; shift 2 ;;
        *) echo "slurm-start: unknown argument '$1'; allowed: --gpus N" >&2; exit 2 ;;
    esac
done
[[ "$GPUS" =~ ^[0-9]+$ ]] || { echo "slurm-start: --gpus wants a count, got '$GPUS'" >&2; exit 2; }
[[ $EUID -eq 0 ]] || { echo "slurm-start: run as root (apt-get, daemons as root)" >&2; exit 2; }

say() { echo "slurm-start: $*"; }

ours() { # a state directory this script made (or, before the marker, its exact layout)
    [[ -f "$1/$STATE_MARKER" ]] || [[ -f "$1/munge/munge.key" && -d "$1/spool/ctld" ]]
}

if [[ -e "$STATE" ]] && ! ours "$STATE" && [[ ! -d "$STATE" || -n "$(ls -A "$STATE")" ]]; then
    echo "slurm-start: $STATE exists and was not made by ci/slurm-start.sh (no $STATE_MARKER);" \
        "not touching it: choose another RNNOPT_SLURM_DIR" >&2
    exit 2
fi

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

for conf in slurm.conf slurmdbd.conf gres.conf; do
    if [[ -e "$CONF_DIR/$conf" ]] && ! head -n 1 "$CONF_DIR/$conf" | grep -q "$MARK"; then
        echo "slurm-start: $CONF_DIR/$conf exists and is not ours; not replacing it" >&2
        exit 1
    fi
done
for pidfile in "$STATE"/run/*.pid; do
    if alive "$pidfile"; then
        echo "slurm-start: $(basename "$pidfile" .pid) already runs (pid $(cat "$pidfile"));" \
            "run ci/slurm-stop.sh first" >&2
        exit 1
    fi
done

# wait_for SECONDS WHAT COMMAND...: retry COMMAND every 0.5 s until it succeeds.
wait_for() {
    local seconds="$1" what="$2"
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "slurm-start: $what not ready after ${seconds}s; logs in $STATE/log" >&2
            tail -n 20 "$STATE"/log/*.log >&2 || true
            exit 1
        fi
        sleep 0.5
    done
}

install_packages() {
    local missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'ok installed' \
            || missing+=("$package")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    say "installing ${missing[*]}"
    # Keep the packages' init scripts from starting daemons: this script starts its own.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    # A fresh machine may still hold the dpkg lock (a boot-time apt run) or meet a mirror
    # hiccup: wait for the lock, and retry the update and install before giving up.
    local attempt log="$STATE/log/apt.log"
    local apt=(apt-get -o DPkg::Lock::Timeout=180 -o Acquire::Retries=3)
    for attempt in 1 2 3; do
        if "${apt[@]}" update -qq >>"$log" 2>&1 \
            && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq \
                --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
            if ((own_policy)); then rm -f "$policy"; fi
            return 0
        fi
        say "apt-get failed (attempt $attempt of 3); see $log"
        if ((attempt < 3)); then sleep $((attempt * 15)); fi
    done
    if ((own_policy)); then rm -f "$policy"; fi
    # On stdout too: a CI log that keeps only one stream still shows why.
    tail -n 30 "$log" | tee /dev/stderr
    exit 1
}

render() { # render TEMPLATE OUT: fill the @NAME@ fields
    sed -e "s|@STATE@|$STATE|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
        -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
        -e "s|@DB_PORT@|$DB_PORT|g" -e "s|@DB_PASSWORD@|$DB_PASSWORD|g" \
        -e "s|@HOSTNAME@|$(hostname -s)|g" -e "s|@NODE_HARDWARE@|$NODE_HARDWARE|g" \
        -e "s|@GRES_TYPES@|$GRES_TYPES|g" -e "s|@NODE_GRES@|$NODE_GRES|g" "$1" >"$2"
}

[[ "$STATE" == /?*/* || "$STATE" == /tmp?* ]] || { echo "slurm-start: RNNOPT_SLURM_DIR must be an absolute path below /, got '$STATE'" >&2; exit 2; }
rm -rf "$STATE"
rm -f "$CONF_DIR"/{slurm,slurmdbd,gres}.conf
mkdir -p "$STATE"/{run,log,munge,mysql,spool/ctld,spool/d,dev} "$CONF_DIR"
echo "$MARK" >"$STATE/$STATE_MARKER"
chmod 711 "$STATE/munge"
install_packages

unset SLURM_CONF
DB_PASSWORD="$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
# CPUs, sockets, cores, threads and memory as slurmd sees them (NodeName dropped: ours is fixed).
NODE_HARDWARE="$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')"
GRES_TYPES="" NODE_GRES=""
if ((GPUS > 0)); then
    GRES_TYPES="GresTypes=gpu" NODE_GRES="Gres=gpu:$GPUS"
    echo "# Fake GPUs of the one-node cluster, $MARK" >"$CONF_DIR/gres.conf"
    for ((i = 0; i < GPUS; i++)); do
        # A character device like /dev/null: slurmd only checks that the file exists.
        mknod "$STATE/dev/gpu$i" c 1 3
        echo "NodeName=rnnopt-node Name=gpu File=$STATE/dev/gpu$i" >>"$CONF_DIR/gres.conf"
    done
fi
render "$HERE/slurm/slurm.conf.in" "$CONF_DIR/slurm.conf"
render "$HERE/slurm/slurmdbd.conf.in" "$CONF_DIR/slurmdbd.conf"
chmod 600 "$CONF_DIR/slurmdbd.conf"

say "munged"
mungekey --create --keyfile="$STATE/munge/munge.key"
munged --force --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
wait_for 10 munged test -S "$STATE/munge/munge.socket"

say "MariaDB on 127.0.0.1:$DB_PORT"
mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql/data" \
    --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1
mariadbd --no-defaults --user=root --datadir="$STATE/mysql/data" \
    --socket="$STATE/mysql/mysqld.sock" --pid-file="$STATE/run/mariadbd.pid" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --log-error="$STATE/log/mariadbd.log" --innodb-buffer-pool-size=64M \
    >/dev/null 2>&1 </dev/null &
mysql_root() { mariadb --no-defaults --socket="$STATE/mysql/mysqld.sock" -u root "$@"; }
wait_for 60 MariaDB mysql_root -e 'SELECT 1'
mysql_root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

say "slurmdbd"
slurmdbd
wait_for 60 slurmdbd sacctmgr -n show cluster
sacctmgr -i add cluster rnnopt >/dev/null
sacctmgr -i add account rnnopt cluster=rnnopt description=rnnopt organization=rnnopt >/dev/null
sacctmgr -i add user "$(id -un)" account=rnnopt defaultaccount=rnnopt >/dev/null

say "slurmctld and slurmd"
slurmctld
slurmd -N rnnopt-node
wait_for "$TIMEOUT_S" "srun true" timeout 20 srun --time=1 true
say "up: $(sinfo -h -o '%P %D %c CPUs %m MB %G' | head -n 1)"
