# Where the dev container set-up keeps its state; sourced by the scripts beside it.
# One folder per machine (shared by every checkout on it): the CA, the registry's storage, the image
# build, the dev lock and the squashfs files.
dev=${JOBS_DEV_DIR:-/var/lib/jobs-dev}
registry_addr=${JOBS_DEV_REGISTRY:-127.0.0.1:5443}
ca_dir=$dev/ca
registry_dir=$dev/registry
image_dir=$dev/image
dev_lock=$dev/containers.lock
sqsh_dir=$dev/sqsh
ready_dir=${JOBS_IMAGES_READY_DIR:-/tmp/jobs-images}
