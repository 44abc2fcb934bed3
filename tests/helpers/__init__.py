"""Small helpers the tests share: start real preflight ranks and read what they did.

- hosts.py: FakeHost, the one way to make a process run "on another host" (real UTS + mount
  namespaces: hostname, /etc/hosts, /dev/shm, ulimit -l, bind mounts; optionally a netns).
- netns.py: networks of FakeHosts in network namespaces on bridges (`netns_hosts` fixture),
  with network faults (link down, tbf, nftables), and `rsh_agent()`, a remote shell into those
  hosts for MPI launchers (Open MPI's plm_rsh_agent, Hydra's -launcher-exec).
- ranks.py: the one spawn helper (`spawn_env_ranks` / `start_rank`) with a placement per rank
  (env overrides and a FakeHost; `spread` for a launcher's block layout), `plant_env` (the one
  `sitecustomize.py` hook, for code planted into chosen ranks), `run_cli`, `base_env`.
- facts.py: hand-written RankFacts and running one check on them (unit tests).
- tools.py: skip locally / fail under CI=true when a tool or capability is missing.
- slurm.py: a real Slurm, on this host (fake nodes through multiple slurmd) or over netns hosts
  (a slurmd in each).
- browser.py, synthetic.py: headless chromium, made-up probe results.
- fake_cuda.py, fake_device.py: data-driven FAKES of the CUDA boundaries (the probe session's
  `cuda=`, the device probes' `device=`), where no GPU exists; fake_cuda_tensors.py: the CUDA
  model's tensors (every allocation an operation on them makes, counted on their device).
- fake_nccl.py: a data-driven FAKE of NCCL's debug log (NCCL's own format strings, four
  releases, tests/fixtures/nccl_log/formats.json), written where NCCL would write it (fake_cuda's
  NCCL communicator) for a host's NICs, GPUDirect RDMA, plugin, NVLink and NVLS.
"""
