#!/usr/bin/env bash
# Start a real two-node Slurm cluster on this one machine: munge, MariaDB, slurmdbd, slurmctld and
# two slurmd (node1, node2). Installs Debian's packages when missing. Idempotent: when everything
# is already up it only checks. Root, no systemd. Stop with dev/slurm/down.sh.
#
# Files: $JOBS_DEVCLUSTER_DIR (default /var/lib/jobs-devcluster): logs, state, spool, database.
# Config: /etc/slurm/slurm.conf and /etc/slurm/slurmdbd.conf, where every Slurm client looks.
set -euo pipefail

dir=${JOBS_DEVCLUSTER_DIR:-/var/lib/jobs-devcluster}
host=$(hostname -s)
packages=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server libpmix2)

log() { printf 'devcluster: %s\n' "$*"; }

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out waiting for $what (logs: $dir/log)"
      exit 1
    fi
    sleep 0.5
  done
}

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]}"
  # Keep the packages' own services from starting with their default config.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
}

write_config() {
  local cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.4}' /proc/meminfo)  # two nodes share this host
  mkdir -p "$dir"/{log,state,run} /etc/slurm
  cat > /etc/slurm/slurm.conf <<CONF
# Written by dev/slurm/up.sh: a two-node dev cluster on one host.
ClusterName=dev
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldPort=16817
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2,sched_min_interval=100000
DependencyParameters=kill_invalid_depend
EnforcePartLimits=ALL
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=16819
JobAcctGatherType=jobacct_gather/none
NodeName=node[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=17001-17002 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=02:00:00 State=UP
CONF
  cat > /etc/slurm/slurmdbd.conf <<CONF
# Written by dev/slurm/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=16819
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=16306
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
  chmod 600 /etc/slurm/slurmdbd.conf
  for n in node1 node2; do mkdir -p "$dir/spool/$n" "$dir/tmp/$n"; done
  # srun --mpi=pmix looks for the unversioned name.
  local pmix=/usr/lib/x86_64-linux-gnu/pmix2/lib
  if [ -e "$pmix/libpmix.so.2" ] && [ ! -e "$pmix/libpmix.so" ]; then ln -s libpmix.so.2 "$pmix/libpmix.so"; fi
}

start_munge() {
  if [ ! -f /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    wait_for 20 munge sh -c 'munge -n | unmunge'
  fi
}

start_mariadb() {
  local data="$dir/mysql" sock="$dir/run/mysqld.sock"
  if ! running "$dir/run/mysqld.pid"; then
    if [ ! -d "$data/mysql" ]; then
      mariadb-install-db --user=root --datadir="$data" --auth-root-authentication-method=normal \
        --skip-test-db >"$dir/log/mariadb-install.log" 2>&1
    fi
    mkdir -p /run/mysqld
    (setsid mariadbd --user=root --datadir="$data" --socket="$sock" --pid-file="$dir/run/mysqld.pid" \
       --bind-address=127.0.0.1 --port=16306 --log-error="$dir/log/mariadb.log" \
       --innodb-buffer-pool-size=64M >/dev/null 2>&1 &)
    wait_for 60 MariaDB mariadb --socket="$sock" -uroot -e 'SELECT 1'
  fi
  mariadb --socket="$sock" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurm() {
  if ! running "$dir/run/slurmdbd.pid"; then
    slurmdbd
    wait_for 60 slurmdbd sacctmgr -n list cluster
  fi
  sacctmgr -n list cluster format=cluster | grep -qw dev || sacctmgr -i add cluster dev >/dev/null
  sacctmgr -n list account format=account | grep -qw ci || sacctmgr -i add account ci Cluster=dev >/dev/null
  sacctmgr -n list user format=user | grep -qw root || sacctmgr -i add user root Account=ci Cluster=dev >/dev/null
  if ! running "$dir/run/slurmctld.pid"; then
    slurmctld
    wait_for 60 slurmctld scontrol ping
  fi
  for n in node1 node2; do
    running "$dir/run/slurmd-$n.pid" || slurmd -N "$n"
  done
  wait_for 60 "both nodes idle" sh -c '[ "$(sinfo -h -N -t idle,mixed,allocated -o %N | sort -u | wc -l)" -eq 2 ]'
}

start=$SECONDS
install_packages
write_config
start_munge
start_mariadb
start_slurm
log "up in $((SECONDS - start)) s: $(sinfo -h -o '%P %a %D %T %N' | tr '\n' ' ')"
