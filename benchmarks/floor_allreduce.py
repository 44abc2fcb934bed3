"""The floor a launch cannot beat: import torch, init gloo from torchrun's env, one all_reduce."""

import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
tensor = torch.ones(1)
dist.all_reduce(tensor)
assert tensor.item() == dist.get_world_size()
dist.destroy_process_group()
