"""The training loop `bench.py --part agent` times with and without the agent:
a small CNN's forward, backward and SGD step on one thread, for --seconds.
Prints `steps <n> step_ns <mean ns per step>`.

  bench_train.py --seconds S [--tag TOKEN]   TOKEN only marks the command line,
                                             so the bench's agent finds this process
  bench_train.py --seconds S --profile       the same under torch.profiler (CPU)
"""
import argparse
import time

import torch
import torch.nn as nn


def model_and_optimizer():
    """The small CNN and its SGD, on one thread (bench_soak.py trains it too)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--tag", default="")
    parser.add_argument("--profile", action="store_true", help="under torch.profiler (CPU activities)")
    args = parser.parse_args()
    model, opt = model_and_optimizer()
    data, target = torch.randn(32, 1, 16, 16), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(data), target)
        loss.backward()
        opt.step()

    for _ in range(50):  # warm caches and lazy initialisation
        step()
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.profile else None
    if profiler:
        profiler.__enter__()
    steps, start = 0, time.perf_counter_ns()
    deadline = start + int(args.seconds * 1e9)
    while time.perf_counter_ns() < deadline:
        step()
        steps += 1
    elapsed = time.perf_counter_ns() - start
    if profiler:
        profiler.__exit__(None, None, None)
    print("steps", steps, "step_ns", elapsed // steps, flush=True)


if __name__ == "__main__":
    main()
