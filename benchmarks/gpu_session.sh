#!/usr/bin/env bash
# Every run of docs/verification.md's hardware column and performance.md's "Measured on GPU", on one
# NVIDIA GPU with CUDA torch, NCCL and nvidia-ml-py already installed (the device machine: no network,
# so missing pure-Python deps travel as wheels in .whl/). Results land in $OUT (default
# /tmp/preflight-gpu): session.log (everything printed) and results.tgz (every report, log and
# NCCL file), both rewritten after each step so a run stopped at its limit still returns what it did.
#     bash benchmarks/gpu_session.sh              # DEADLINE=500: seconds the whole session may take
# Steps run most-needed first; a step that would not end before DEADLINE is skipped and said so.
set -uo pipefail
# Before anything is installed or written: on a machine without a GPU, say so and stop.
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_session.sh needs a GPU: nvidia-smi lists none (run it on the device machine)" >&2
  exit 2
fi
OUT=${OUT:-/tmp/preflight-gpu}
DEADLINE=${DEADLINE:-500}
RES=/tmp/preflight-gpu-results
mkdir -p "$OUT" "$RES"
exec > >(tee "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
# preflight itself from this tree: on the path, whether or not an editable install takes.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "(no editable install: PYTHONPATH)"

log() { echo "=== $* (t=${SECONDS}s, $(date +%T))"; }
save() { tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }
# step NEED NAME: true when NEED more seconds fit before DEADLINE; else says the step is skipped.
step() {
  if (( SECONDS + $1 > DEADLINE )); then log "SKIPPED (needs ${1}s, ${SECONDS}s of ${DEADLINE}s used): $2"; return 1; fi
  save; log "$2"
}
# two_ranks ARGS: `preflight run ARGS` as two env:// ranks started by hand; EXTRA_ENV per call. PLACE:
# one-gpu (default: both on GPU 0, a NCCL host id each, NCCL over lo) or two-gpus (GPUs 0 and 1 visible
# to both, LOCAL_RANK choosing: a rank on LOCAL_RANK 1 must measure GPU 1, not GPU 0).
two_ranks() {
  local port=$((20000 + RANDOM % 10000)) r place pids=()
  for r in 0 1; do
    place="NCCL_HOSTID=gpu-session-$r NCCL_SOCKET_IFNAME=lo CUDA_VISIBLE_DEVICES=0"
    [ "${PLACE:-one-gpu}" = two-gpus ] && place="CUDA_VISIBLE_DEVICES=0,1"
    env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $place ${EXTRA_ENV:-} timeout 150 python3 -m preflight run "$@" &
    pids+=($!)
  done
  wait "${pids[0]}"; local rc=$?; wait "${pids[1]}"; echo "exit (rank 0) $rc, (rank 1) $?"
}
summary() {  # FILE.json: the verdict, findings and device rows of one report, short
  python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("exit", r.get("exit_code"), "|", r.get("why", "")[:300])
for f in r.get("findings", []):
    print(f"  {f['check_id']} {f['severity']}: {f['message'][:400]}")
for d in r.get("device_probes", []):
    print("  device", json.dumps(d)[:1500])
for p in r.get("probes", []):
    print(f"  probe {p.get('dim', '')} {p['op']} {p['size_bytes']} busbw {p['busbw_gbps']:.2f} verified {p['verified']}")
if r.get("nccl"):
    print("  nccl", json.dumps(r["nccl"])[:3000])
EOF
}
planted_products() {  # NAME BODY: `preflight run --only gpu-probe` with every product wrapped by BODY
  # A sitecustomize (a fault planted from outside, as a user's would be) runs BODY around each call of
  # torch.matmul / torch.mm / Tensor.__matmul__: BODY sees `real`, `args`, `kwargs` and returns the result.
  mkdir -p "/tmp/plant-$1"
  printf '%s\n' 'import itertools, torch' '_calls = itertools.count()' 'def _wrapped(real):' \
    '    def wrapper(*args, **kwargs):' "$2" '    return wrapper' \
    'torch.matmul = _wrapped(torch.matmul)' 'torch.mm = _wrapped(torch.mm)' \
    'torch.Tensor.__matmul__ = _wrapped(torch.Tensor.__matmul__)' >"/tmp/plant-$1/sitecustomize.py"
  PYTHONPATH="/tmp/plant-$1:$PYTHONPATH" timeout 120 python3 -m preflight run --only gpu-probe \
    --json "$RES/planted_$1.json"; echo "exit $?"
  summary "$RES/planted_$1.json"
}

step 20 device && {
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'cudnn', torch.backends.cudnn.version())"
  python3 -c "import pynvml, msgspec; print('nvidia-ml-py', getattr(pynvml, '__version__', '?'), 'msgspec', msgspec.__version__)"
} 2>&1 | tee "$RES/device.txt"

step 40 "facts only (NVML facts, GPU health, fabric as the card answers)" && {
  timeout 90 python3 -m preflight run --skip probe --json "$RES/facts.json" --text "$RES/facts.txt"; echo "exit $?"
  summary "$RES/facts.json"
  python3 - <<'EOF' 2>&1 | tee "$RES/fabric.txt"
import pynvml
from preflight.lib.nvml_fabric import read_fabric_info
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
try:
    print("fabric (preflight's read):", read_fabric_info(pynvml, h))
except pynvml.NVMLError as exc:
    print("fabric (preflight's read): NVMLError", exc)
for name in ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_t"):
    print(name, "in nvidia-ml-py:", hasattr(pynvml, name))
print("driver", pynvml.nvmlSystemGetDriverVersion())
EOF
}

step 60 "device probes alone (--only gpu-probe): TFLOP/s, copy, host link, % of the SKU" && {
  timeout 120 python3 -m preflight run --only gpu-probe --json "$RES/device.json" --text "$RES/device.txt"; echo "exit $?"
  summary "$RES/device.json"
}

step 60 "a planted wrong result (every other matmul's first element nudged): DEV002 expected" && {
  # One GPU has no sibling to differ from (DEV001); the same product giving two answers needs none.
  planted_products wrong '        out = real(*args, **kwargs)
        if next(_calls) % 2:
            out.view(-1)[0] += 1.0
        return out'
}

step 60 "a planted slow GPU (a 2 ms kernel queued before each matmul): DEV006 expected" && {
  planted_products slow '        torch.cuda._sleep(4_000_000)
        return real(*args, **kwargs)'
}

OPS=all_reduce,all_gather,reduce_scatter,all_to_all,broadcast
step 60 "NCCL's account, captured by preflight: two ranks on one GPU, --mesh tp2" && {
  two_ranks --backend nccl --mesh tp2 --ops $OPS --sizes 1MiB,256MiB --json "$RES/tp2.json" --text "$RES/tp2.txt"
  summary "$RES/tp2.json"
}

step 60 "NCCL's account from the job's own NCCL_DEBUG_FILE, then preflight nccl-log on those files" && {
  EXTRA_ENV="NCCL_DEBUG_FILE=$RES/nccl.%h.%p.log" two_ranks --backend nccl --mesh pp2 --ops send_recv \
    --sizes 1MiB,64MiB --json "$RES/pp2.json" --text "$RES/pp2.txt"
  summary "$RES/pp2.json"
  ls -l "$RES"/nccl.*.log
  timeout 60 python3 -m preflight nccl-log "$RES"/nccl.*.log; echo "nccl-log exit $?"
  timeout 60 python3 -m preflight nccl-log --json "$RES"/nccl.*.log >"$RES/nccl_log.json"; echo "nccl-log --json exit $?"
}

step 90 "issue 43: events, identity by bus id, loaded libraries, pinned memory, sustained sampling, device_id" && {
  timeout 120 python3 benchmarks/node_wave2.py 2>&1 | tee "$RES/node_wave2.txt"
  CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 60 python3 -c "import benchmarks.node_wave2 as w, torch; w.identity(torch)" \
    2>&1 | tee -a "$RES/node_wave2.txt"
}

step 60 "in-process preflight.check with the newer TF32 API set" && {
  timeout 120 python3 benchmarks/inprocess_device.py 2>&1 | tee "$RES/inprocess_tf32.txt"
}

STUCK=tests/probes/test_probes_gpu.py::test_a_rank_stuck_on_the_gpu_is_named_as_bw002_with_a_written_report_and_exit_3
HELD=tests/probes/test_probes_gpu.py::test_a_rank_held_up_before_nccl_setup_is_named_while_rank_0_sits_in_ncclcomminitrank
gpu_tests() {  # pytest -m gpu ARGS, bounded by what is left of DEADLINE
  timeout $((DEADLINE - SECONDS - 5)) python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly "$@" \
    tests/probes/test_probes_gpu.py tests/steps/gather/test_gpu_health.py 2>&1 | tail -40
}
step 120 "pytest -m gpu, all but the two that wait out a planted hang" && {
  gpu_tests --deselect "$STUCK[None]" --deselect "$STUCK[1]" --deselect "$STUCK[2]" --deselect "$STUCK[3]" \
    --deselect "$HELD" | tee "$RES/pytest-gpu.txt"
}

step 60 "device probe fidelity against a bare torch loop" && {
  timeout $((DEADLINE - SECONDS - 5)) python3 benchmarks/device_fidelity.py --device cuda --rounds 3 \
    2>&1 | tee "$RES/device_fidelity.txt"
}

step 60 "collective fidelity against a bare loop (2 ranks, 64 MiB and 1 MiB)" && {
  for size in 64MiB 1MiB; do  # docs/performance.md's sizes (256 MiB over the socket: 156 s for one size)
    timeout $((DEADLINE - SECONDS - 5)) python3 benchmarks/probe_fidelity.py --backend nccl --ranks 2 --size $size \
      --ops all_reduce,all_to_all,send_recv --iters 20 --rounds 3
  done 2>&1 | tee "$RES/fidelity.txt"
}

step 60 "issue 43: a second user on the node after the first (the PCIe turns leave nothing behind)" && {
  timeout 60 python3 -m preflight run --only gpu-probe --json "$RES/user1.json" >/dev/null 2>&1; echo "root: exit $?"
  ls -l /tmp/preflight-pcie-* 2>/dev/null | tee "$RES/left_behind.txt" || echo "nothing left in /tmp"
  if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null; then
    chmod -R a+rX . /tmp/site 2>/dev/null
    timeout 60 runuser -u nobody -- env PYTHONPATH="$PYTHONPATH" python3 -m preflight run \
      --only gpu-probe --json /tmp/preflight-user2.json >/dev/null 2>&1; echo "nobody: exit $?"
    python3 -c "import json; r = json.load(open('/tmp/preflight-user2.json')); print('exit', r['exit_code'], 'DEV009:', [f['message'] for f in r['findings'] if f['check_id'] == 'DEV009'])" \
      2>&1 | tee -a "$RES/left_behind.txt"
  fi
}

step 120 "pytest -m gpu: the planted hang (user's TORCH_NCCL_ASYNC_ERROR_HANDLING unset) and the held-up rank" && {
  gpu_tests -k "stuck or held_up" --deselect "$STUCK[1]" --deselect "$STUCK[2]" --deselect "$STUCK[3]" \
    | tee "$RES/pytest-gpu-hangs.txt"
}

NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NGPU" -ge 2 ] && step 60 "device probes from LOCAL_RANK 0 and 1 of 2 visible devices"; then
  PLACE=two-gpus two_ranks --only gpu-probe --json "$RES/device_local_rank1.json"
  summary "$RES/device_local_rank1.json"
  LOCAL_RANK=1 timeout 120 python3 benchmarks/inprocess_device.py 2>&1 | tee "$RES/inprocess_local_rank1.txt"
fi
log done
save
