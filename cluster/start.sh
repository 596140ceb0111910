#!/usr/bin/env bash
# Start Ray for oam-actors by hand (no cloud launcher, no Kubernetes).
#
#   cluster/start.sh local [NODES] [PORT]  a head plus NODES-1 worker nodes on this machine, all on
#                                          127.0.0.1 only (tests, demos); prints the --address
#   cluster/start.sh head [PORT]           this machine becomes the head (default port 6379)
#   cluster/start.sh worker HEAD:PORT      this machine joins the cluster at HEAD:PORT
#   cluster/start.sh stop [PORT]           end this machine's processes of the cluster on PORT
#                                          (default 6379), and no other Ray
#
# Then, on the head (or any machine that reaches it):
#   oam-actors serve --runtime ray --address HEAD:PORT --tcp 127.0.0.1:7400
#   oam-actors stdio --runtime ray --address HEAD:PORT
#
# Every node must import oam_actors: install it, or run this from a checkout (the checkout is
# put on PYTHONPATH for the nodes started here). Token authentication is on: the nodes started
# here and oam-actors read the token from ~/.ray/auth_token (created here if missing; Ray also
# takes RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), so every machine needs the same token file.
# Each cluster keeps its logs in /tmp/oam-ray-PORT (`stop` finds its processes by it).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
export RAY_AUTH_MODE=token
export RAY_USAGE_STATS_ENABLED=0
# Shards are servers: at Ray's default worker niceness (15) any other load starves them.
export RAY_worker_niceness=0

cluster_dir() { echo "/tmp/oam-ray-${1}"; }

ensure_token() {
  [[ -n "${RAY_AUTH_TOKEN:-}" || -f "${RAY_AUTH_TOKEN_PATH:-${HOME}/.ray/auth_token}" ]] \
    || ray get-auth-token --generate > /dev/null
}

start_head() {
  local port="${1:-6379}"
  ensure_token
  ray start --head --port="${port}" --temp-dir="$(cluster_dir "${port}")" --include-dashboard=false
  echo "oam-actors: head at $(hostname -I 2>/dev/null | awk '{print $1}'):${port}; stop with: $0 stop ${port}"
}

start_worker() {
  local address="${1:?usage: start.sh worker HEAD:PORT}"
  ensure_token
  ray start --address="${address}" --temp-dir="$(cluster_dir "${address##*:}")"
  echo "oam-actors: joined ${address}; stop with: $0 stop ${address##*:}"
}

start_local() {
  local nodes="${1:-2}" port="${2:-6379}"
  (( nodes >= 1 )) || { echo "start.sh: NODES must be at least 1, got ${nodes}" >&2; exit 2; }
  # Each node gets a share of the cores: Ray would otherwise count every core on every node.
  local cpus=$(( $(nproc) / nodes )); (( cpus > 0 )) || cpus=1
  ensure_token
  python3 "${repo}/cluster/nodes.py" local "${nodes}" "${port}" "${cpus}"
}

case "${1:-}" in
  local) shift; start_local "$@" ;;
  head) shift; start_head "$@" ;;
  worker) shift; start_worker "$@" ;;
  stop) shift; python3 "${repo}/cluster/nodes.py" stop "${1:-6379}" ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
