"""The CUDA kernels one training step launches, read with torch.profiler (CUPTI).

torch does not say which cuDNN RNN algorithm it chose. Its rule (aten/src/ATen/native/cudnn/
RNN.cpp, get_algo) takes the persistent kernel (CUDNN_RNN_ALGO_PERSIST_STATIC) only for half
precision input, one unidirectional layer, H <= 1024 with H and I multiples of 128 and, on an
sm_80+ GPU with at least 98 SMs, an LSTM batch that is a multiple of 8 up to 128; a small-H
variant (PERSIST_STATIC_SMALL_H) for H <= 192 forward (128 backward) in any non-double dtype;
else the standard algorithm (a GEMM per step plus elementwise kernels). The kernels that ran
are the evidence: their names, each one's share of the step's kernel time, and whether any
is a persistent RNN kernel (its name says "persist").
"""

from __future__ import annotations

TOP_KERNELS = 6
NAME_CHARS = 160


def kernel_times(runner) -> dict[str, dict]:
    """{kernel name: {"us", "count"}} of one training step (forward, backward, update)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    runner.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.forward()
        runner.backward()
        runner.update()
        runner.sync()
    kernels: dict[str, dict] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        seen = kernels.setdefault(event.name, {"us": 0.0, "count": 0})
        seen["us"] += event.device_time_total
        seen["count"] += 1
    return kernels


def kernel_metrics(kernels: dict[str, dict], top: int = TOP_KERNELS) -> dict:
    """The step's kernel time, its `top` kernels by time with their shares, and whether a
    persistent RNN kernel ran."""
    total = sum(k["us"] for k in kernels.values())
    ranked = sorted(kernels.items(), key=lambda item: -item[1]["us"])
    return {
        "cuda_kernel_ms": total / 1e3,
        "cuda_kernel_launches": sum(k["count"] for k in kernels.values()),
        "cuda_kernels": [
            {
                "name": name[:NAME_CHARS],
                "share": k["us"] / total if total else 0.0,
                "count": k["count"],
            }
            for name, k in ranked[:top]
        ],
        "cudnn_persistent": any("persist" in name.lower() for name in kernels),
    }


def step_kernels(runner) -> tuple[dict, str | None]:
    """(metrics, note): the kernel metrics of one step, or none and why (CUPTI can be
    missing or refused in a container; the timing stands without them)."""
    try:
        return kernel_metrics(kernel_times(runner)), None
    except Exception as error:  # noqa: BLE001 - any profiler failure leaves the timing intact
        return {}, f"no kernel profile: {type(error).__name__}: {error}"
