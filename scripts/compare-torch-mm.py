#!/usr/bin/env python3
"""Cross-check of fp4gap's cublas-bf16 baseline against PyTorch's torch.mm on the same GPU.

Times torch.mm(A, B.T) (bf16 in, bf16 out) the way `fp4gap gemm` times its graph mode: one CUDA
graph of back-to-back launches rotating over input sets that together exceed twice the L2, so
every launch reads cold operands; per-launch time = replay time / launches; median of replays.
Prints one line per shape: M N K torch_graph_us. Compare with the cublas-bf16 rows of
`fp4gap gemm --m M --n N --k K --a-format bf16 --b-format bf16 --backends cublas-bf16`.
Usage: python3 scripts/compare-torch-mm.py 16x2048x6144 512x2048x6144 ...
"""
import statistics
import sys

import torch


def time_mm(m: int, n: int, k: int, launches: int = 32, replays: int = 20) -> float:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    set_bytes = 2 * (m * k + n * k)
    sets = max(2, min(64, (2 * l2) // set_bytes + 1))
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(sets)]
    b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(sets)]
    out = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    count = max(launches, sets)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(count):  # warm-up, and cuBLAS picks its algorithm outside the capture
            torch.mm(a[i % sets], b[i % sets].t(), out=out[i % sets])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(count):
            torch.mm(a[i % sets], b[i % sets].t(), out=out[i % sets])
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0 / count)
    return statistics.median(samples)


def main() -> int:
    shapes = sys.argv[1:] or ["16x2048x6144", "512x2048x6144"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print("M N K torch_graph_us")
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        print(m, n, k, f"{time_mm(m, n, k):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
