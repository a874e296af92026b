#!/usr/bin/env bash
# ready.sh DIGEST: writes $ready_dir/READY, what anyone on this machine needs to use the dev image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/env.sh"
digest=$1
sqsh=$(JOBS_CONTAINERS_LOCK=$dev_lock PYTHONPATH=$root "$root/.venv/bin/python" -c 'import sys
from jobs import containers as c
print(sys.argv[1] + "/" + c.squashfs_name(c.resolve("tiny-cpu")))' "$sqsh_dir")
mkdir -p "$ready_dir"
cat >"$ready_dir/READY.tmp" <<TXT
image:      $registry_addr/jobs/tiny-cpu@$digest   (tag 0.1)
holds:      Debian bookworm, /usr/bin/python3 3.11.2, the stages' libraries at .venv's versions in /usr/local
            (torch 2.13.0+cpu, transformers, tokenizers, safetensors, numpy, ray 2.60.0, wandb, tensorboard, datasets);
            NOT submitit, hydra-core, omegaconf, cloudpickle, jobs (the job brings them)
registry:   https://$registry_addr  (Debian docker-registry, TLS; its CA is in the system trust store)
CA:         $ca_dir/ca.crt
dev lock:   export JOBS_CONTAINERS_LOCK=$dev_lock   (laid over containers/containers.lock, key by key; tiny-cpu pinned there)
squashfs:   $sqsh
run:        USER=root ch-run -b SRC:DST $sqsh -- python3 ...   (ch-run needs USER)
import:     jobs containers import tiny-cpu --runtime charliecloud --dir $sqsh_dir
python:     jobs.containers.squashfs_for(image: containers.Image, folder, runtime="charliecloud") -> Path
            (imports when missing: ch-image pull by digest, bytes checked against the pin, ch-convert; flock + rename)
            jobs.containers.resolve(name) -> Image (merged lock); RUNTIMES = ("pyxis", "charliecloud")
profile:    proposed keys: container_runtime: pyxis|charliecloud ; container_dir: where squashfs files live
code:       branch images, jobs/containers.py, containers/__init__.py, dev/containers/
rebuild:    $root/dev/containers/image.sh   (once per set-up: a stamp in $image_dir; this note: $(date -u +%FT%TZ))
TXT
mv "$ready_dir/READY.tmp" "$ready_dir/READY"
