#!/usr/bin/env bash
# Stop the one-node cluster of ci/slurm-start.sh: cancel its jobs, end every daemon by its pid
# file (never by name), then remove the state directory and the configuration files it wrote
# in /etc/slurm. Safe to run twice or with nothing up.
#
#   bash ci/slurm-stop.sh        # RNNOPT_SLURM_DIR as for the start script
set -uo pipefail

STATE="$(realpath -m "${RNNOPT_SLURM_DIR:-/tmp/rnnopt-slurm}")"
STATE_MARKER=".rnnopt-slurm-state" # ci/slurm-start.sh makes it; no marker, nothing is touched
CONF_DIR=/etc/slurm
MARK="written by ci/slurm-start.sh"
unset SLURM_CONF
# Jobs before their daemon, clients before their servers.
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)

say() { echo "slurm-stop: $*"; }

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

remove_configuration() {
    for conf in slurm.conf slurmdbd.conf gres.conf; do
        if [[ -e "$CONF_DIR/$conf" ]] && head -n 1 "$CONF_DIR/$conf" | grep -q "$MARK"; then
            rm -f "$CONF_DIR/$conf"
        fi
    done
}

if [[ -e "$STATE" && ! -f "$STATE/$STATE_MARKER" ]] \
    && ! [[ -f "$STATE/munge/munge.key" && -d "$STATE/spool/ctld" ]]; then
    say "$STATE was not made by ci/slurm-start.sh (no $STATE_MARKER): not touching it"
    exit 2
fi

if [[ ! -d "$STATE" ]]; then
    remove_configuration
    say "nothing to stop ($STATE does not exist)"
    exit 0
fi

# A job's processes (slurmstepd and below) outlive slurmd: cancel the jobs and let slurmd end
# them while it still runs.
if alive "$STATE/run/slurmctld.pid" && alive "$STATE/run/slurmd.pid"; then
    timeout 10 scancel --full --quiet --user="$(id -un)" || true
    for _ in $(seq 60); do
        [[ -z "$(timeout 5 squeue -h -t PD,R,CG,S -o %i 2>/dev/null)" ]] && break
        sleep 0.5
    done
fi

left=0
for daemon in "${DAEMONS[@]}"; do
    pidfile="$STATE/run/$daemon.pid"
    alive "$pidfile" || continue
    pid="$(cat "$pidfile")"
    kill -TERM "$pid"
    for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "$daemon (pid $pid) ignored SIGTERM for 30 s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        sleep 0.5
    fi
    if kill -0 "$pid" 2>/dev/null; then
        say "$daemon (pid $pid) still runs"
        left=1
    else
        say "$daemon (pid $pid) stopped"
    fi
done

((left)) && { say "state kept in $STATE for inspection"; exit 1; }
rm -rf "$STATE"
remove_configuration
say "state removed ($STATE, $CONF_DIR/{slurm,slurmdbd,gres}.conf)"
