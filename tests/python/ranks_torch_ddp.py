"""DDP on CPU over the "tbcoll" backend, whichever process group is importable: one forward, backward and step on
2 ranks with different inputs; every rank's gradients must be the average. Prints "DDP OK <implementation>"."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import tbcoll.torch_backend

dist.init_process_group("tbcoll", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=int(sys.argv[2]),
                        world_size=2)
rank = dist.get_rank()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        # A buffer of another dtype: DDP broadcasts it in a bucket of its own, so rank 0's first broadcast has
        # completed before torch's C++ waits for it.
        self.register_buffer("steps", torch.full((3,), float(rank + 7), dtype=torch.float64))

    def forward(self, x):
        return self.fc(x)


net = Net()
model = net.fc
ddp = nn.parallel.DistributedDataParallel(net)
assert net.steps.tolist() == [7.0] * 3, net.steps  # rank 0's buffers everywhere
x = torch.full((3, 4), float(rank + 1))
ddp(x).sum().backward()
# d/dW of sum(W x + b) over 3 rows of value v is 3 v per weight: the average over ranks of v = 1 and 2 is 1.5.
assert torch.allclose(model.weight.grad, torch.full((2, 4), 4.5)), model.weight.grad
assert torch.allclose(model.bias.grad, torch.full((2,), 3.0)), model.bias.grad
print(f"DDP OK {tbcoll.torch_backend.IMPLEMENTATION}", flush=True)
