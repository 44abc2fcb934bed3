"""preflight.check on a GPU job reads the job's device in the trainer's own thread.

CUDA's current device belongs to the thread (a new thread starts on 0): the job's bound GPU
must be read where the trainer set it, never in preflight's helper threads. The CUDA boundary
is the model of tests/helpers/fake_cuda.py; the process group is real (gloo, one rank).
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from preflight import api
from preflight.model import World
from preflight.options import RunOptions
from preflight.probes import session as ses
from preflight.probes.plan import build_plan
from tests.helpers.fake_cuda import FakeCuda, gpu


def test_the_job_device_is_read_in_the_trainers_thread_and_adopted_in_a_helper_thread() -> None:
    model = FakeCuda([gpu(i) for i in range(8)])
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with model.install():
            model.set_device(6)  # the trainer's torch.cuda.set_device(LOCAL_RANK), in its own thread
            job = api._job_groups(None, [], "nccl", "cuda", 0, 1)
            world = World(launcher="env", rank=0, world_size=1, local_rank=6, local_world_size=8, host="n")
            plan = build_plan(RunOptions.build(ops="all_reduce", sizes="64KiB").for_world(1), "cuda")
            adopted: list[ses.Session] = []
            helper = threading.Thread(target=lambda: adopted.append(ses.adopt_session(world, plan, store, job, 5.0)))
            helper.start()  # as orchestrate runs it: in a bounded helper thread, whose current device is 0
            helper.join()
            (session,) = adopted
            assert job.device_index == 6 and session.device == torch.device("cuda", 6)
            assert session.bound is not None and session.bound.uuid.endswith("00000006-1111-2222-3333-444444444444")
            assert model.current_device() == 6  # the trainer's thread: not rebound
    finally:
        dist.destroy_process_group()
