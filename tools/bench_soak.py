"""The job `bench.py --part soak` runs beside the agent: a small CNN trained
from a DataLoader whose 2 workers are forked anew every epoch (not
persistent), an epoch every --epoch-seconds, for --seconds. Each epoch's
workers are new processes the agent must find, sample and let go of.
Prints `epochs <n> steps <n>`.

  bench_soak.py --seconds S [--epoch-seconds E] [--tag TOKEN]
"""
import argparse
import time

import torch
import torch.nn as nn

from bench_train import model_and_optimizer


class Batches(torch.utils.data.IterableDataset):
    """Batches until the epoch's end: each worker yields for `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __iter__(self):
        end = time.monotonic() + self.seconds
        generator = torch.Generator().manual_seed(0)
        while time.monotonic() < end:
            data = torch.randn(32, 1, 16, 16, generator=generator)
            yield data, torch.randint(0, 10, (32,), generator=generator)
            time.sleep(0.005)  # an input pipeline that is not all CPU


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--epoch-seconds", type=float, default=60)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    model, opt = model_and_optimizer()
    deadline = time.monotonic() + args.seconds
    epochs = steps = 0
    while time.monotonic() < deadline:
        loader = torch.utils.data.DataLoader(Batches(min(args.epoch_seconds, deadline - time.monotonic())),
                                             batch_size=None, num_workers=2, persistent_workers=False)
        for data, target in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(data), target).backward()
            opt.step()
            steps += 1
        epochs += 1
    print("epochs", epochs, "steps", steps, flush=True)


if __name__ == "__main__":
    main()
