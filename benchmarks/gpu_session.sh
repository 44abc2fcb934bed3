#!/usr/bin/env bash
# Every run of the "Measured on GPU" README section, on one NVIDIA GPU with CUDA torch, NCCL and
# nvidia-ml-py already installed (the device machine: no network, so missing pure-Python deps
# travel as wheels in .whl/). Results land in $OUT (default /tmp/preflight-gpu):
#     bash benchmarks/gpu_session.sh
set -uo pipefail
# Before anything is installed or written: on a machine without a GPU, say so and stop.
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_session.sh needs a GPU: nvidia-smi lists none (run it on the device machine)" >&2
  exit 2
fi
OUT=${OUT:-/tmp/preflight-gpu}
RES=/tmp/preflight-gpu-results
mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "install failed"; exit 2; }
log() { echo "=== $* ($(date +%T))"; }
{
  log device; nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
} 2>&1 | tee "$RES/device.txt"

log "pytest -m gpu"
timeout 420 python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly tests/probes/test_probes_gpu.py \
  2>&1 | tee "$RES/pytest-gpu.txt" | tail -40

OPS=all_reduce,all_gather,reduce_scatter,all_to_all,broadcast
log "world size 1, nccl, 1MiB and 256MiB"
timeout 120 python3 -m preflight run --backend nccl --ops $OPS --sizes 1MiB,256MiB --json "$RES/world1.json" \
  --text "$RES/world1.txt"; echo "exit $?"

two_ranks() {  # env:// by hand: two ranks on GPU 0, a NCCL host id each, NCCL over lo
  local port=$((20000 + RANDOM % 10000)) r
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID=gpu-session-$r NCCL_SOCKET_IFNAME=lo CUDA_VISIBLE_DEVICES=0 \
      timeout 180 python3 -m preflight run "$@" &
  done
  wait %1; local rc=$?; wait; echo "exit (rank 0) $rc"
}
log "world size 2 on one GPU, --mesh tp2"
two_ranks --backend nccl --mesh tp2 --ops $OPS --sizes 1MiB,256MiB --json "$RES/tp2.json" --text "$RES/tp2.txt"
log "world size 2 on one GPU, --mesh pp2 --ops send_recv"
two_ranks --backend nccl --mesh pp2 --ops send_recv --sizes 1MiB,256MiB --json "$RES/pp2.json" --text "$RES/pp2.txt"
log "facts only"
timeout 120 python3 -m preflight run --skip probe --json "$RES/facts.json" --text "$RES/facts.txt"; echo "exit $?"

log "fidelity"
for size in 1MiB 256MiB; do
  timeout 240 python3 benchmarks/probe_fidelity.py --backend nccl --ranks 2 --size $size --iters 20 --rounds 5
done 2>&1 | tee "$RES/fidelity.txt"
log "device probes: a run of the family alone, and its fidelity against a bare torch loop"
timeout 120 python3 -m preflight run --only gpu-probe --json "$RES/device.json" --text "$RES/device.txt"; echo "exit $?"
timeout 300 python3 benchmarks/device_fidelity.py --device cuda --rounds 5 2>&1 | tee "$RES/device_fidelity.txt"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NGPU" -ge 2 ]; then  # issue 31: a rank on LOCAL_RANK 1 must measure GPU 1, not GPU 0
  log "device probes from LOCAL_RANK 0 and 1 of 2 visible devices"
  port=$((20000 + RANDOM % 10000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      CUDA_VISIBLE_DEVICES=0,1 timeout 180 python3 -m preflight run --only gpu-probe \
      --json "$RES/device_local_rank1.json" --text "$RES/device_local_rank1.txt" &
  done
  wait %1; echo "exit (rank 0) $?"; wait
  python3 -c "import json; r = json.load(open('$RES/device_local_rank1.json')); print([(d['rank'], d['index'], d['uuid']) for d in r['device_probes']])"
  log "in-process from LOCAL_RANK 1 with the newer TF32 API set"
  LOCAL_RANK=1 timeout 180 python3 benchmarks/inprocess_device.py 2>&1 | tee "$RES/inprocess_local_rank1.txt"
else
  log "one GPU: LOCAL_RANK 1 of 2 visible devices cannot run here"
fi
log "in-process with the newer TF32 API set"
timeout 180 python3 benchmarks/inprocess_device.py 2>&1 | tee "$RES/inprocess_tf32.txt"

# Issue 43 (docs/verification.md, "The real node, wave 2"): the model's rules checked on the device.
log "issue 43: events, identity by bus id, loaded libraries, pinned memory, sustained sampling, device_id"
timeout 240 python3 benchmarks/node_wave2.py 2>&1 | tee "$RES/node_wave2.txt"
CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 120 python3 -c "import benchmarks.node_wave2 as w, torch; w.identity(torch)" \
  2>&1 | tee -a "$RES/node_wave2.txt"
log "issue 43: a second user on the node after the first (the PCIe turns leave nothing behind)"
timeout 120 python3 -m preflight run --only gpu-probe --json "$RES/user1.json" >/dev/null 2>&1; echo "root: exit $?"
ls -l /tmp/preflight-pcie-* 2>/dev/null | tee "$RES/left_behind.txt" || echo "nothing left in /tmp"
if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null; then
  chmod -R a+rX . 2>/dev/null
  timeout 120 runuser -u nobody -- env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m preflight run \
    --only gpu-probe --json /tmp/preflight-user2.json >/dev/null 2>&1; echo "nobody: exit $?"
  python3 -c "import json; r = json.load(open('/tmp/preflight-user2.json')); print('DEV009:', [f['message'] for f in r['findings'] if f['check_id'] == 'DEV009'])" \
    2>&1 | tee -a "$RES/left_behind.txt"
fi
log done
tar czf "$OUT/results.tgz" -C "$RES" .
