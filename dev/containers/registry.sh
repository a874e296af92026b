#!/usr/bin/env bash
# A local OCI registry with TLS on 127.0.0.1 (Debian's docker-registry), for the dev cluster's images.
# Makes a CA and a certificate for the address (ch-image pulls over HTTPS only), trusts the CA system-wide
# (update-ca-certificates: Debian's python3-requests, skopeo and curl then verify it with no flag), and
# starts the registry in the background. Idempotent: a registry that already answers is left alone.
# Root, no systemd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
host=${registry_addr%:*}
mkdir -p "$ca_dir" "$registry_dir/storage"
if [ ! -s "$ca_dir/registry.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=jobs dev CA" \
    -keyout "$ca_dir/ca.key" -out "$ca_dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$host" -keyout "$ca_dir/registry.key" \
    -out "$ca_dir/registry.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$host" >"$ca_dir/ext.cnf"
  openssl x509 -req -in "$ca_dir/registry.csr" -CA "$ca_dir/ca.crt" -CAkey "$ca_dir/ca.key" \
    -CAcreateserial -days 3650 -extfile "$ca_dir/ext.cnf" -out "$ca_dir/registry.crt" 2>/dev/null
  chmod 600 "$ca_dir/ca.key" "$ca_dir/registry.key"
fi
trusted=/usr/local/share/ca-certificates/jobs-dev-$(echo "$dev" | sha256sum | cut -c1-8).crt
if ! cmp -s "$ca_dir/ca.crt" "$trusted"; then
  cp "$ca_dir/ca.crt" "$trusted"
  update-ca-certificates >/dev/null 2>&1
fi
if curl -fsS --cacert "$ca_dir/ca.crt" "https://$registry_addr/v2/" >/dev/null 2>&1; then
  exit 0
fi
cat >"$registry_dir/config.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $registry_dir/storage}
  delete: {enabled: true}
http:
  addr: $registry_addr
  tls: {certificate: $ca_dir/registry.crt, key: $ca_dir/registry.key}
YAML
setsid nohup docker-registry serve "$registry_dir/config.yml" >>"$registry_dir/registry.log" 2>&1 </dev/null &
echo $! >"$registry_dir/registry.pid"
for _ in $(seq 50); do
  curl -fsS --cacert "$ca_dir/ca.crt" "https://$registry_addr/v2/" >/dev/null 2>&1 && exit 0
  sleep 0.2
done
echo "registry.sh: docker-registry did not answer on https://$registry_addr (log: $registry_dir/registry.log)" >&2
tail -5 "$registry_dir/registry.log" >&2
exit 1
