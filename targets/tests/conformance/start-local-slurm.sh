#!/usr/bin/env bash
# Starts a private, local Slurm controller that `targets/tests/slurm_accepts.rs` submits the
# emitted sbatch scripts to with `sbatch --test-only`. Run it as root; it is idempotent.
#
# Nothing system-wide is touched: the configuration, state and logs live in $PLANC_SLURM_DIR
# (default /tmp/planc-slurm), and clients find it through SLURM_CONF=$PLANC_SLURM_DIR/slurm.conf
# (the test reads PLANC_SLURM_CONF, defaulting to /tmp/planc-slurm/slurm.conf).
#
# The nodes are fake: no slurmd runs. They are declared as powered-down cloud nodes
# (State=CLOUD, listed by sinfo thanks to PrivateData=cloud), which the scheduler counts as
# available, so `--test-only` (a will-run query to slurmctld) answers "Job N to start at ..."
# for anything the cluster could run, and refuses what it never could.
# Authentication is auth/none, so munge is not needed.
#
# Environment:
#   PLANC_SLURM_DIR    private folder (default /tmp/planc-slurm)
#   PLANC_SLURM_NODES  number of fake nodes, 8 GPUs each (default 2048; the largest example asks for 2048)
#   PLANC_SLURM_PORT   slurmctld port (default 16817, away from a real controller's 6817)
set -euo pipefail

DIR="${PLANC_SLURM_DIR:-/tmp/planc-slurm}"
NODES="${PLANC_SLURM_NODES:-2048}"
PORT="${PLANC_SLURM_PORT:-16817}"
CONF="$DIR/slurm.conf"

say() { echo "start-local-slurm: $*"; }
die() {
    echo "start-local-slurm: error: $*" >&2
    if [[ -s "$DIR/slurmctld.log" ]]; then
        echo "start-local-slurm: last lines of $DIR/slurmctld.log:" >&2
        tail -n 20 "$DIR/slurmctld.log" >&2
    fi
    exit 1
}

[[ "$(id -u)" == 0 ]] || die "run as root (slurmctld runs as SlurmUser=root here)"
for cmd in slurmctld sbatch scontrol; do
    command -v "$cmd" >/dev/null || die "$cmd not found; install slurmctld and slurm-client (apt-get install -y slurmctld slurm-client)"
done
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "PLANC_SLURM_NODES must be a positive number, not '$NODES'"

export SLURM_CONF="$CONF"
HOST="$(hostname -s)"
LAST="$(printf 'gpu%04d' "$NODES")"
NODELIST="gpu[0001-${LAST#gpu}]"

mkdir -p "$DIR/state"
chmod 700 "$DIR"

new_conf="$(mktemp "$DIR/slurm.conf.XXXXXX")"
trap 'rm -f "$new_conf"' EXIT
cat >"$new_conf" <<EOF
# Written by planc targets/tests/conformance/start-local-slurm.sh: a private controller with
# $NODES fake cloud nodes for \`sbatch --test-only\`. Do not use for real jobs.
ClusterName=planc-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmctldDebug=info
PlugStackConfig=$DIR/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
# Fake nodes: powered-down cloud nodes are schedulable without a slurmd.
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=INFINITE
ResumeTimeout=600
TreeWidth=65533
PrivateData=cloud
NodeName=$NODELIST CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=1000000 Gres=gpu:8 State=CLOUD
# The emitted scripts name no partition unless job.partition is set (the examples use "h100").
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=h100 Nodes=ALL MaxTime=INFINITE State=UP
EOF
: >"$DIR/plugstack.conf"
cat >"$DIR/gres.conf" <<EOF
NodeName=$NODELIST Name=gpu Count=8
EOF

ready() {
    echo "export SLURM_CONF=$CONF    # for sinfo, sbatch, scontrol"
    echo "export PLANC_SLURM_CONF=$CONF    # for the slurm_accepts test (default /tmp/planc-slurm/slurm.conf)"
}

ctld_pid() {
    local pid
    pid="$(cat "$DIR/slurmctld.pid" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == slurmctld ]] || return 1
    echo "$pid"
}

if cmp -s "$new_conf" "$CONF" && pid="$(ctld_pid)" && scontrol ping 2>/dev/null | grep -q UP; then
    say "slurmctld already running (pid $pid) with $CONF; nothing to do"
    ready
    exit 0
fi

if pid="$(ctld_pid)"; then
    say "stopping slurmctld (pid $pid) to apply a new configuration"
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "slurmctld (pid $pid) did not stop"
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "port $PORT is taken by another process (another controller?); set PLANC_SLURM_PORT"
fi
mv "$new_conf" "$CONF"
chmod 644 "$CONF"
say "wrote $CONF ($NODES fake nodes $NODELIST with gpu:8, partitions gpu (default) and h100, auth/none, port $PORT)"

# -c: a clean start, without jobs or node state from an earlier run.
slurmctld -c -f "$CONF" || die "slurmctld failed to start"
say "started slurmctld; waiting for scontrol ping"
for _ in $(seq 100); do
    if pid="$(ctld_pid)" && scontrol ping 2>/dev/null | grep -q UP; then
        say "slurmctld (pid $pid) answers: $(scontrol ping | head -n 1)"
        ready
        exit 0
    fi
    [[ -s "$DIR/slurmctld.pid" ]] && ! ctld_pid >/dev/null && die "slurmctld exited"
    sleep 0.2
done
die "slurmctld did not answer scontrol ping within 20 s"
