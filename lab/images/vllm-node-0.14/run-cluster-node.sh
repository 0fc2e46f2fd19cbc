#!/bin/bash
# Start this container's Ray node, in the style of the field's run-cluster-node.sh
# (and vLLM's examples/online_serving/run_cluster.sh): a head or a worker, kept in
# the foreground so the container lives as long as Ray does. `vllm serve` is then
# run inside the head container (docker exec), where it joins this Ray cluster.
#
#   RAY_NODE_TYPE     head | worker                          (required)
#   VLLM_HOST_IP      this node's address on the fabric       (required)
#   RAY_HEAD_IP       the head's address (workers)            (required for workers)
#   RAY_PORT          GCS port of the head                    (default 6379)
#   RAY_NUM_GPUS      GPUs this node offers to Ray            (default 1: one GB10 per Spark)
#   RAY_EXTRA_ARGS    more `ray start` arguments, split on spaces
set -euo pipefail

: "${RAY_NODE_TYPE:?set RAY_NODE_TYPE to head or worker}"
: "${VLLM_HOST_IP:?set VLLM_HOST_IP to the fabric address of this node}"
RAY_PORT="${RAY_PORT:-6379}"
RAY_NUM_GPUS="${RAY_NUM_GPUS:-1}"
read -r -a extra <<< "${RAY_EXTRA_ARGS:-}"

trap 'ray stop --force >/dev/null 2>&1 || true' TERM INT

case "${RAY_NODE_TYPE}" in
  head)
    echo "run-cluster-node: starting Ray head on ${VLLM_HOST_IP}:${RAY_PORT} with ${RAY_NUM_GPUS} GPU(s)"
    ray start --head --block --node-ip-address="${VLLM_HOST_IP}" --port="${RAY_PORT}" \
      --num-gpus="${RAY_NUM_GPUS}" --dashboard-host=127.0.0.1 --disable-usage-stats "${extra[@]}" &
    ;;
  worker)
    : "${RAY_HEAD_IP:?set RAY_HEAD_IP for a worker}"
    echo "run-cluster-node: starting Ray worker ${VLLM_HOST_IP} -> head ${RAY_HEAD_IP}:${RAY_PORT}"
    ray start --block --address="${RAY_HEAD_IP}:${RAY_PORT}" --node-ip-address="${VLLM_HOST_IP}" \
      --num-gpus="${RAY_NUM_GPUS}" --disable-usage-stats "${extra[@]}" &
    ;;
  *)
    echo "run-cluster-node: RAY_NODE_TYPE must be head or worker, not '${RAY_NODE_TYPE}'" >&2
    exit 2
    ;;
esac
wait $!
