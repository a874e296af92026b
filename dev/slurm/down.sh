#!/usr/bin/env bash
# Stop the daemons dev/slurm/up.sh started, by their pid files; packages and state stay.
set -euo pipefail
dir=${JOBS_DEVCLUSTER_DIR:-/var/lib/jobs-devcluster}

stop() {  # stop PIDFILE NAME
  local pidfile=$1 name=$2 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    printf 'devcluster: stopped %s (%s)\n' "$name" "$pid"
  fi
  rm -f "$pidfile"
}

stop "$dir/run/slurmd-node1.pid" slurmd-node1
stop "$dir/run/slurmd-node2.pid" slurmd-node2
stop "$dir/run/slurmctld.pid" slurmctld
stop "$dir/run/slurmdbd.pid" slurmdbd
stop "$dir/run/mysqld.pid" mariadb
stop /run/munge/munged.pid munged
