#!/usr/bin/env bash
# Start a real two-node Slurm cluster on this one machine: munge, MariaDB, slurmdbd, slurmctld and two
# slurmd (node1, node2), partition `debug`. Installs Debian's packages when missing. Idempotent: when
# everything is already up it only checks (well under a second). Root, no systemd: daemons are started
# directly and tracked by pid files. Stop with dev/slurm/down.sh (packages and state stay).
#
# Files: $JOBS_DEVCLUSTER_DIR (default /var/lib/jobs-devcluster): etc/ (config), log/, run/ (pid files,
# sockets), state/ (slurmctld), spool/%n and tmp/%n (per node), mysql/ (accounting database).
# /etc/slurm/slurm.conf and slurmdbd.conf are symlinks into etc/, since every Slurm client looks there.
# One cluster per machine: the ports below are fixed.
set -euo pipefail

dir=${JOBS_DEVCLUSTER_DIR:-/var/lib/jobs-devcluster}
host=$(hostname -s)
packages=(munge slurmctld slurmd slurm-client slurmdbd slurm-wlm-mysql-plugin mariadb-server libpmix2)
nodes=(node1 node2)
db_port=16306 dbd_port=16819 ctld_port=16817 slurmd_ports=17001-17002

log() { printf 'devcluster: %s\n' "$*"; }
die() { log "$*"; exit 1; }

# running PIDFILE NAME: the pid file names a live process that really is NAME (a stale file whose pid was
# reused by something else must not count, and must never be signalled by down.sh either).
running() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null  # a zombie is gone (nothing reaps here)
}

# stop PIDFILE NAME: used only to restart a daemon whose config changed.
stop() {
  running "$1" "$2" || return 0
  local pid; pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do running "$1" "$2" || break; sleep 0.1; done
  if running "$1" "$2"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$1"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll on a deadline, never forever
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out after $1 s waiting for $what (logs: $dir/log)"
    sleep 0.3
  done
}

case $dir in
  /*) ;;
  *) die "JOBS_DEVCLUSTER_DIR must be an absolute path: $dir" ;;
esac
# slurm.conf values cannot be quoted: a path with blanks would be split.
if [[ $dir =~ [[:space:]] ]]; then die "JOBS_DEVCLUSTER_DIR must not contain blanks: $dir"; fi
[ "$(id -u)" -eq 0 ] || die "run as root"

install_packages() {
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  # A policy-rc.d exiting 101 keeps the packages' own services from starting with their default config
  # (they would grab the ports and pid files). Keep any policy-rc.d that was there and put it back.
  local policy=/usr/sbin/policy-rc.d saved=""
  if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
  # shellcheck disable=SC2064  # expand now: the trap must restore this run's state
  trap "if [ -n '$saved' ]; then mv -f '$saved' '$policy'; else rm -f '$policy'; fi" EXIT
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 0755 "$policy"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    > "$dir/log/apt-install.log" 2>&1 || { cat "$dir/log/apt-install.log" >&2; die "apt-get install failed"; }
  if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
  trap - EXIT
}

# put_file DEST MODE: stdin becomes DEST when it differs. Returns 0 only when a setting changed (comments
# and line order aside): that is what needs a daemon restart.
put_file() {
  local tmp; tmp=$(mktemp "$1.XXXXXX")
  cat > "$tmp"
  chmod "$2" "$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
  local same=1
  [ -f "$1" ] && diff -q <(grep -v '^#' "$1" | sort) <(grep -v '^#' "$tmp" | sort) >/dev/null || same=0
  mv -f "$tmp" "$1"
  [ "$same" = 0 ]
}

slurm_conf_changed=0 dbd_conf_changed=0

# memory_cgroup: cgroup v1's memory controller is mounted and this host may make groups in it (root in a
# container may not): then Slurm can hold jobs to their memory.
memory_cgroup() {
  local probe=/sys/fs/cgroup/memory/jobs-devcluster-probe.$$
  [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] && mkdir "$probe" 2>/dev/null && rmdir "$probe"
}
write_config() {
  local cpus mem_mb n task_plugin=task/none
  cpus=$(nproc)
  if memory_cgroup; then task_plugin=task/cgroup; fi
  # Two nodes share this host: each claims ~40% of its memory, so both together leave room for the OS.
  mem_mb=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.4}' /proc/meminfo)
  put_file "$dir/etc/slurm.conf" 0644 <<CONF && slurm_conf_changed=1
# Written by dev/slurm/up.sh: a two-node dev cluster on one host. Edit the script, not this file.
ClusterName=dev
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=$ctld_port
# Jobs run as root here; every daemon runs as root too (no slurm user needed).
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start only after its old credential expired: 10 s instead of the default 120 s.
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
# Per-node spool and tmp dirs (%n = node name): two slurmd (and pmix) would collide in shared ones.
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# The nodes' CPUs/memory come from this file, not from what each slurmd detects on the shared host.
SlurmdParameters=config_overrides
# No systemd: processes are tracked by parent pid. Where the host offers cgroup v1's memory controller,
# task/cgroup holds each job to its memory (cgroup.conf): a job over it is killed and ends OUT_OF_MEMORY.
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
MpiDefault=none
SelectType=select/cons_tres
# CR_Core: a core is one CPU here (Threads=1); it lets a partition count memory too (memcap below).
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Schedule within a second or two of a submit, an end or a requeue (defaults: 30-60 s).
SchedulerParameters=bf_interval=1,sched_interval=2,sched_min_interval=100000
# A job whose dependency can never be met is cancelled instead of pending forever.
DependencyParameters=kill_invalid_depend
# Reject at submit what a partition could never run (e.g. --time over MaxTime).
EnforcePartLimits=ALL
# A node that was down (its slurmd stopped) comes back by itself when its slurmd registers again.
ReturnToService=2
JobRequeue=1
KillWait=5
# Finished jobs stay visible to scontrol/squeue for 5 minutes (sacct keeps them for good).
MinJobAge=300
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
# Each step's processes sampled from /proc (MaxRSS, CPU time in sacct), every 5 s and at the step's end.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
NodeName=node[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=$slurmd_ports CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=02:00:00 State=UP
# The same nodes, where a job's --mem is allocated and, with task/cgroup, its limit.
PartitionName=memcap Nodes=node[1-2] MaxTime=02:00:00 State=UP SelectTypeParameters=CR_Core_Memory
CONF
  put_file "$dir/etc/cgroup.conf" 0644 <<CONF && slurm_conf_changed=1
# Written by dev/slurm/up.sh. Read by task/cgroup only (slurm.conf's TaskPlugin).
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
CONF
  # slurmdbd refuses a config that others can read (it holds the database password).
  put_file "$dir/etc/slurmdbd.conf" 0600 <<CONF && dbd_conf_changed=1
# Written by dev/slurm/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
  # Clients (sbatch, sacct, submitit) read /etc/slurm: point it at this cluster's files. Refuse to
  # take it over from another dev cluster dir that is still running.
  mkdir -p /etc/slurm
  local cur other
  cur=$(readlink /etc/slurm/slurm.conf || true)
  other=${cur%/etc/slurm.conf}
  if [ -n "$cur" ] && [ "$other" != "$dir" ] && running "$other/run/slurmctld.pid" slurmctld; then
    die "another dev cluster ($other) is running: stop it with JOBS_DEVCLUSTER_DIR=$other dev/slurm/down.sh first"
  fi
  for n in slurm.conf slurmdbd.conf cgroup.conf; do
    [ "$(readlink "/etc/slurm/$n" || true)" = "$dir/etc/$n" ] || ln -sfn "$dir/etc/$n" "/etc/slurm/$n"
  done
  for n in "${nodes[@]}"; do mkdir -p "$dir/spool/$n" "$dir/tmp/$n"; done
  # srun --mpi=pmix dlopens the unversioned name, which only the -dev package would provide.
  local lib
  for lib in /usr/lib/*/pmix2/lib; do
    if [ -e "$lib/libpmix.so.2" ] && [ ! -e "$lib/libpmix.so" ]; then ln -s libpmix.so.2 "$lib/libpmix.so"; fi
  done
}

started=()
start_munge() {
  # A working munged (ours or not) is enough; we only start, and down.sh only stops, our own one,
  # whose pid file lives in the cluster dir.
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
  if [ ! -s /etc/munge/munge.key ]; then mungekey --create --keyfile=/etc/munge/munge.key; fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge "$dir/run/munge" "$dir/log/munge"
  chown munge:munge /run/munge "$dir/run/munge" "$dir/log/munge"
  runuser -u munge -- /usr/sbin/munged --pid-file="$dir/run/munge/munged.pid" \
    --log-file="$dir/log/munge/munged.log" >>"$dir/log/munged.out" 2>&1
  wait_for 20 munge sh -c 'munge -n | unmunge'
  started+=(munge)
}

start_mariadb() {
  local data="$dir/mysql" sock="$dir/run/mysqld.sock"
  if ! running "$dir/run/mysqld.pid" mariadbd; then
    if [ ! -d "$data/mysql" ]; then
      mariadb-install-db --user=root --datadir="$data" --auth-root-authentication-method=normal \
        --skip-test-db >"$dir/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $dir/log/mariadb-install.log"
    fi
    # Its own port, socket and datadir: no clash with a system MariaDB. setsid: not tied to this shell.
    setsid mariadbd --no-defaults --user=root --datadir="$data" --socket="$sock" --pid-file="$dir/run/mysqld.pid" \
      --bind-address=127.0.0.1 --port="$db_port" --log-error="$dir/log/mariadb.log" \
      --innodb-buffer-pool-size=64M </dev/null >>"$dir/log/mariadbd.out" 2>&1 &
    wait_for 60 MariaDB mariadb --no-defaults --socket="$sock" -uroot -e 'SELECT 1'
    started+=(mariadb)
  fi
  # Cheap and idempotent: the accounting database and slurmdbd's login.
  mariadb --no-defaults --socket="$sock" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurmdbd() {
  if [ "$dbd_conf_changed" = 1 ]; then stop "$dir/run/slurmdbd.pid" slurmdbd; fi
  if ! running "$dir/run/slurmdbd.pid" slurmdbd; then
    slurmdbd >>"$dir/log/slurmdbd.out" 2>&1 || die "slurmdbd did not start: $dir/log/slurmdbd.log"
    wait_for 60 slurmdbd sacctmgr -n list cluster
    started+=(slurmdbd)
  fi
  # The association that lets root submit (the accounting storage knows no users by default).
  local have
  have=$(sacctmgr -n -P list associations format=cluster,account,user)
  grep -qx 'dev|ci|root' <<<"$have" && return 0
  grep -q '^dev|' <<<"$have" || sacctmgr -i add cluster dev >/dev/null
  grep -q '^dev|ci|' <<<"$have" || sacctmgr -i add account ci Cluster=dev Description=dev Organization=dev >/dev/null
  sacctmgr -i add user root Account=ci DefaultAccount=ci Cluster=dev >/dev/null
}

# Both nodes respond and can take jobs (busy ones count: a re-run must not wait for others' jobs).
nodes_ready() {
  local states
  states=$(sinfo -h -N -p debug -o '%N %t' | sort -u)
  [ "$(grep -cE '^node[12] (idle|mix|alloc|comp)$' <<<"$states")" -eq 2 ]
}

# After a machine or container restart slurmctld recovers the jobs it had running, but their processes
# died with the restart; it purges them only when a node's boot time changes, which a container restart
# does not change. Such a job holds its node until its time limit (30 min of a CI run once). Every
# node's slurmd runs on this host, so a running job with no slurmstepd here is one of them: cancel it.
cancel_ghost_jobs() {
  local job
  for job in $(squeue -h -t RUNNING,COMPLETING -o %A); do
    pgrep -f "^slurmstepd: \[$job\." >/dev/null && continue
    log "cancelling job $job: slurmctld has it running, but no slurmstepd of it is left (a restart ended it)"
    scancel "$job" || true
  done
}

start_slurm() {
  local n
  # A changed slurm.conf (e.g. node sizes) needs the daemons restarted; running jobs survive that.
  if [ "$slurm_conf_changed" = 1 ] && running "$dir/run/slurmctld.pid" slurmctld; then
    log "slurm.conf changed: restarting slurmctld and slurmd"
    for n in "${nodes[@]}"; do stop "$dir/run/slurmd-$n.pid" slurmd; done
    stop "$dir/run/slurmctld.pid" slurmctld
  fi
  if ! running "$dir/run/slurmctld.pid" slurmctld; then
    slurmctld >>"$dir/log/slurmctld.out" 2>&1 || die "slurmctld did not start: $dir/log/slurmctld.log"
    wait_for 60 slurmctld scontrol ping
    started+=(slurmctld)
  fi
  for n in "${nodes[@]}"; do
    if ! running "$dir/run/slurmd-$n.pid" slurmd; then
      slurmd -N "$n" >>"$dir/log/slurmd-$n.out" 2>&1 || die "slurmd $n did not start: $dir/log/slurmd-$n.log"
      started+=("slurmd-$n")
    fi
  done
  [[ " ${started[*]} " == *" slurmd-"* ]] && cancel_ghost_jobs
  nodes_ready && return 0
  # Fresh slurmd register within a second or two. A node still down or drained then (e.g. after a step
  # that would not die) gets one resume: its slurmd is running, so it can take jobs.
  local deadline=$((SECONDS + 10))
  until nodes_ready || [ $SECONDS -ge $deadline ]; do sleep 0.3; done
  if ! nodes_ready; then
    for n in "${nodes[@]}"; do
      if sinfo -h -n "$n" -o '%t' | grep -qE '^(down|drain|drng|fail)$'; then
        log "resuming $n ($(sinfo -h -n "$n" -o '%t: %E'))"
        scontrol update NodeName="$n" State=RESUME || true
      fi
    done
  fi
  wait_for 60 "both nodes to be idle" nodes_ready
}

t0=$(date +%s.%N)
mkdir -p "$dir"/{etc,log,run,state,spool,tmp}
install_packages
write_config
start_munge
start_mariadb
start_slurmdbd
start_slurm
# sacct answers from slurmdbd: check it end to end, not just that the daemon exists.
wait_for 30 "sacct to answer" sacct -n -X -S now -o JobID
what="already up"
[ ${#started[@]} -eq 0 ] || what="started ${started[*]}"
log "up ($what) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s: cluster dev, partition debug*: $(sinfo -h -N -p debug -o '%N=%t' | sort -u | tr '\n' ' ')accounting ok; files in $dir"
