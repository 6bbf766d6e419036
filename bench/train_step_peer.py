#!/usr/bin/env python3
"""The peer of bench_train_step: the same training step in PyTorch eager, on the same GPU.
torchvision's ResNet-18 (batch 256) / ResNet-50 (batch 128), synthetic 224 px images on
the device, cross-entropy, SGD with momentum 0.9, fp32 / tf32 / fp16 (autocast +
torch.amp.GradScaler) / bf16 (autocast), contiguous or channels-last; cudnn.benchmark on.

  train_step_peer.py [--arch resnet18|resnet50|all] [--precision ...|all] [--memory-format ...|all]
                     [--warmup 5] [--steps 20] [--serve]

Prints the lines bench_train_step prints: "<arch> <bs> <precision> <layout> <img/s> img/s
peak <MiB> MiB" (peak: torch.cuda.max_memory_allocated over the timed steps). With
--serve, as bench_train_step --serve: cells "<arch> <precision> <layout>" from standard
input, one a line, each answered with its line ("error: ..." for one that failed)."""
import argparse
import sys
import time

import torch
import torch.nn.functional as F
import torchvision


def run(arch, bs, precision, layout, warmup, steps):
    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    fmt = torch.channels_last if layout == "channels-last" else torch.contiguous_format
    images = torch.randn(bs * 2, 3, 224, 224, device=device).contiguous(memory_format=fmt)
    labels = torch.randint(1000, (bs * 2,), device=device)
    model = getattr(torchvision.models, arch)().to(device).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    model.train()
    losses = []
    start = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
        first = (step % 2) * bs
        x, y = images[first:first + bs], labels[first:first + bs]
        with torch.autocast("cuda", dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20
    return f"{arch} {bs} {precision} {layout} {bs * steps / seconds:.1f} img/s peak {peak:.1f} MiB"


ARCHS, PRECISIONS, LAYOUTS = ["resnet18", "resnet50"], ["fp32", "tf32", "fp16", "bf16"], ["contiguous", "channels-last"]


def answer(arch, precision, layout, args):
    """One cell's line, or its error's. Its cached GPU memory goes back before the line
    does (a failed cell's too), for the fastcpp server alternating with this one."""
    try:
        line = run(arch, 256 if arch == "resnet18" else 128, precision, layout, args.warmup, args.steps)
    except Exception as e:  # answered, so that the reader waiting on this line goes on
        line = f"error: {e}".replace("\n", " ")
    torch.cuda.empty_cache()  # after the exception, and the tensors its traceback held, are gone
    print(line, flush=True)


def serve(args):
    for line in iter(sys.stdin.readline, ""):
        words = line.split()
        if not words:
            continue
        try:
            arch, precision, layout = words
            if arch not in ARCHS or precision not in PRECISIONS or layout not in LAYOUTS:
                raise ValueError
        except ValueError:
            print(f"error: train_step_peer.py --serve: the cell '{line.strip()}' is not "
                  "'<resnet18|resnet50> <fp32|tf32|fp16|bf16> <contiguous|channels-last>'", flush=True)
            continue
        answer(arch, precision, layout, args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="all")
    parser.add_argument("--precision", default="all")
    parser.add_argument("--memory-format", default="all")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("train_step_peer: skipped: no CUDA device")
        return
    torch.backends.cudnn.benchmark = True
    if args.serve:
        return serve(args)
    pick = lambda value, every: every if value == "all" else [value]
    for arch in pick(args.arch, ARCHS):
        for precision in pick(args.precision, PRECISIONS):
            for layout in pick(args.memory_format, LAYOUTS):
                answer(arch, precision, layout, args)


if __name__ == "__main__":
    main()
