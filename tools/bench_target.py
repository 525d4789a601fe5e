"""The loop `make bench` times: small-tensor ATen ops, as a training step's
bookkeeping would call them. Prints `loop_ns <ns> ops_per_iter <n>`.

  bench_target.py --iters N             time the loop
  bench_target.py --iters N --profile   time it under torch.profiler
  bench_target.py --iters N --profile-memory   ... with profile_memory=True
  bench_target.py --iters N --profile-shapes   ... with record_shapes=True
  bench_target.py --iters N --profile-stack    ... with with_stack=True
  bench_target.py --count               print the aten ops per iteration
  bench_target.py --count-allocations   print the CPU allocations per iteration
  ... --torchops                        the same ops called through torch.ops.aten
                                        (the dispatcher's boxed path)
  bench_target.py --annotations ...     the loop is one empty record_function
                                        range per iteration instead
  bench_target.py --autograd ...        the loop is one backward of 6 autograd nodes
                                        (--count: nodes per iteration)
"""
import argparse
import time

import torch


def body_unboxed(x, w):
    # 10 Python-level op calls per iteration.
    y = torch.add(x, x)
    y = torch.mul(y, 2.0)
    y = torch.sub(y, x)
    y = y.relu()
    y = torch.matmul(y, w)
    y = y.sum(dim=1)
    y = y.neg()
    y = torch.exp(y)
    y = y.view(-1)
    return torch.max(y)


def body_torchops(x, w):
    # The same 10 calls through torch.ops.aten: each enters the dispatcher
    # boxed (Dispatcher::callBoxed), not through at::_ops::<op>::call.
    aten = torch.ops.aten
    y = aten.add.Tensor(x, x)
    y = aten.mul.Scalar(y, 2.0)
    y = aten.sub.Tensor(y, x)
    y = aten.relu.default(y)
    y = aten.matmul.default(y, w)
    y = aten.sum.dim_IntList(y, [1])
    y = aten.neg.default(y)
    y = aten.exp.default(y)
    y = aten.view.default(y, [-1])
    return aten.max.default(y)


def annotation(x, w):
    with torch.autograd.profiler.record_function("## bench ##"):
        pass


def backward(x, w):
    # Nodes: MulBackward0, NegBackward0, ExpBackward0, ReluBackward0,
    # SumBackward0 and w's AccumulateGrad.
    (w * 2.0).neg().exp().relu().sum().backward()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-memory", action="store_true")
    parser.add_argument("--profile-shapes", action="store_true")
    parser.add_argument("--profile-stack", action="store_true")
    parser.add_argument("--count", action="store_true")
    parser.add_argument("--count-allocations", action="store_true")
    parser.add_argument("--torchops", action="store_true")
    parser.add_argument("--annotations", action="store_true")
    parser.add_argument("--autograd", action="store_true")
    args = parser.parse_args()
    body = annotation if args.annotations else body_torchops if args.torchops else body_unboxed
    body = backward if args.autograd else body
    torch.set_num_threads(1)
    x, w = torch.ones(4, 4), torch.eye(4, requires_grad=args.autograd)
    for _ in range(200):  # warm caches and lazy initialisation
        body(x, w)
    if args.count:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(100):
                body(x, w)
        counted = "autograd::engine::evaluate_function: " if args.autograd else "aten::"
        n = sum(1 for e in prof.events() if e.name.startswith(counted))
        print("ops_per_iter", n / 100)
        return
    if args.count_allocations:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            for _ in range(100):
                body(x, w)
        events = prof.profiler.kineto_results.events()
        n = sum(1 for e in events if e.name() == "[memory]" and e.nbytes() > 0)
        print("allocations_per_iter", n / 100)
        return
    if args.profile or args.profile_memory or args.profile_shapes or args.profile_stack:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=args.profile_memory, record_shapes=args.profile_shapes,
                                    with_stack=args.profile_stack):
            start = time.perf_counter_ns()
            for _ in range(args.iters):
                body(x, w)
            elapsed = time.perf_counter_ns() - start
    else:
        start = time.perf_counter_ns()
        for _ in range(args.iters):
            body(x, w)
        elapsed = time.perf_counter_ns() - start
    print("loop_ns", elapsed)


if __name__ == "__main__":
    main()
