#!/usr/bin/env bash
# Stop the daemons dev/slurm/up.sh started, by the pid files in the cluster dir, in reverse start order.
# Packages, config, job state and the accounting database stay: up.sh brings the same cluster back
# (job IDs go on). A pid file whose process is gone, or is no longer that daemon, is only removed:
# nothing but our own daemons is ever signalled. A munged that up.sh did not start is left alone.
set -euo pipefail
dir=${JOBS_DEVCLUSTER_DIR:-/var/lib/jobs-devcluster}

# alive PID NAME: PID is a live process named NAME (not a zombie: nothing may reap it here).
alive() {
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# stop PIDFILE NAME: SIGTERM, then up to 15 s for a clean exit (slurmctld saves its state, MariaDB
# flushes), then SIGKILL.
stop() {
  local pidfile=$1 name=$2 pid t0=$SECONDS
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" "$name"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do alive "$pid" "$name" || break; sleep 0.1; done
    if alive "$pid" "$name"; then
      kill -9 "$pid" 2>/dev/null || true
      printf 'devcluster: killed %s (%s): it ignored SIGTERM for 15 s\n' "$name" "$pid"
    else
      printf 'devcluster: stopped %s (%s) in %d s\n' "$name" "$pid" $((SECONDS - t0))
    fi
  fi
  rm -f "$pidfile"
}

# slurmd first: its jobs' slurmstepd keep running on their own and are reattached by the next slurmd.
stop "$dir/run/slurmd-node1.pid" slurmd
stop "$dir/run/slurmd-node2.pid" slurmd
stop "$dir/run/slurmctld.pid" slurmctld
stop "$dir/run/slurmdbd.pid" slurmdbd
stop "$dir/run/mysqld.pid" mariadbd
stop "$dir/run/munge/munged.pid" munged
