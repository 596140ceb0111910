#!/usr/bin/env bash
# Start Ray for oam-actors by hand (no cloud launcher, no Kubernetes).
#
#   cluster/start.sh head [PORT]           this machine becomes the head (default port 6379)
#   cluster/start.sh worker HEAD:PORT      this machine joins the cluster at HEAD:PORT
#   cluster/start.sh local [NODES] [PORT]  a head plus NODES-1 worker nodes on this machine (tests,
#                                          demos); prints the address to pass to --address
#
# Then, on the head (or any machine that reaches it):
#   oam-actors serve --runtime ray --address HEAD:PORT --tcp 127.0.0.1:7400
#   oam-actors stdio --runtime ray --address HEAD:PORT
#
# Every node must import oam_actors: install it, or run this from a checkout (the checkout is
# put on PYTHONPATH for the nodes started here). Token authentication is on: every node and
# driver needs the same ~/.ray/auth_token (created here if missing) and RAY_AUTH_MODE=token.
# Stop with `ray stop` on each machine (it ends every Ray process of that machine).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
export RAY_AUTH_MODE=token
# Shards are servers: at Ray's default worker niceness (15) any other load starves them.
export RAY_worker_niceness=0

ensure_token() {
  [[ -f "${HOME}/.ray/auth_token" ]] || ray get-auth-token --generate > /dev/null
}

start_head() {
  local port="${1:-6379}"
  ensure_token
  ray start --head --port="${port}" --include-dashboard=false --disable-usage-stats
  echo "oam-actors: head at $(hostname -I 2>/dev/null | awk '{print $1}'):${port}"
}

start_worker() {
  local address="${1:?usage: start.sh worker HEAD:PORT}"
  ensure_token
  ray start --address="${address}" --disable-usage-stats
}

start_local() {
  local nodes="${1:-2}" port="${2:-6379}"
  # Each node gets a share of the cores: Ray would otherwise count every core on every node.
  local cpus=$(( $(nproc) / nodes )); (( cpus > 0 )) || cpus=1
  ensure_token
  ray start --head --port="${port}" --num-cpus="${cpus}" --include-dashboard=false --disable-usage-stats
  for (( n = 1; n < nodes; n++ )); do
    ray start --address="127.0.0.1:${port}" --num-cpus="${cpus}" --disable-usage-stats
  done
  echo "oam-actors: ${nodes} nodes; use --address 127.0.0.1:${port}"
}

case "${1:-}" in
  head) shift; start_head "$@" ;;
  worker) shift; start_worker "$@" ;;
  local) shift; start_local "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
