#!/usr/bin/env python3
"""The Python peer of examples/fashion_mnist.cpp.

The same residual network, batch size, one-cycle schedule (fastai's formula), optimizer
(Adam with decoupled weight decay, none on BatchNorm and bias), data handling
(uint8 batches made float and normalized per batch) and thread count, written
the way a careful PyTorch user would. Prints one machine-readable line:
    peer: accuracy=0.9312 seconds=123.4
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims).copy())


def conv_bn(ni, nf, stride):
    return [nn.Conv2d(ni, nf, 3, stride, 1, bias=False), nn.BatchNorm2d(nf), nn.ReLU()]


class ResBlock(nn.Module):
    def __init__(self, ni, nf, stride):
        super().__init__()
        self.convs = nn.Sequential(*conv_bn(ni, nf, stride), nn.Conv2d(nf, nf, 3, 1, 1, bias=False), nn.BatchNorm2d(nf))
        self.idconv = nn.Identity() if ni == nf else nn.Conv2d(ni, nf, 1, bias=False)
        self.pool = nn.Identity() if stride == 1 else nn.AvgPool2d(2, ceil_mode=True)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.convs(x) + self.idconv(self.pool(x)))


def make_model():
    return nn.Sequential(*conv_bn(1, 16, 1), ResBlock(16, 32, 2), ResBlock(32, 64, 2), ResBlock(64, 128, 2),
                         ResBlock(128, 256, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def sched_cos(start, end, pos):
    return start + (1 + math.cos(math.pi * (1 - pos))) * (end - start) / 2


def one_cycle(pos, lr_max, div=25.0, div_final=1e5, pct_start=0.25, moms=(0.95, 0.85, 0.95)):
    if pos < pct_start:
        p = pos / pct_start
        return sched_cos(lr_max / div, lr_max, p), sched_cos(moms[0], moms[1], p)
    p = (pos - pct_start) / (1 - pct_start)
    return sched_cos(lr_max, lr_max / div_final, p), sched_cos(moms[1], moms[2], p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--bs", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--wd", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--memory-format", choices=["contiguous", "channels-last"], default="contiguous")
    ap.add_argument("--resident", choices=["on", "off"], default="off",
                    help="on: the uint8 images copied to the device once, batches indexed there")
    args = ap.parse_args()
    layout = torch.channels_last if args.memory_format == "channels-last" else torch.contiguous_format
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train = read_idx(f"{args.data}/train-images-idx3-ubyte.gz").unsqueeze(1)
    y_train = read_idx(f"{args.data}/train-labels-idx1-ubyte.gz").long()
    x_test = read_idx(f"{args.data}/t10k-images-idx3-ubyte.gz").unsqueeze(1)
    y_test = read_idx(f"{args.data}/t10k-labels-idx1-ubyte.gz").long()
    if args.resident == "on":
        x_train, y_train, x_test, y_test = (t.to(device) for t in (x_train, y_train, x_test, y_test))

    model = make_model().to(device, memory_format=layout)
    no_decay = [p for m in model.modules() for p in m.parameters(recurse=False)
                if isinstance(m, nn.BatchNorm2d) or p is getattr(m, "bias", None)]
    no_decay_ids = {id(p) for p in no_decay}
    decay = [p for p in model.parameters() if id(p) not in no_decay_ids]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.95, 0.99), eps=1e-5)
    loss_fn = nn.CrossEntropyLoss()

    def to_input(xb):
        return ((xb.float() / 255 - MEAN) / STD).to(memory_format=layout)

    n = len(x_train)
    n_iter = n // args.bs + (n % args.bs != 0)
    total = n_iter * args.epochs
    start = time.perf_counter()
    step = 0
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(n)
        for i in range(n_iter):
            idx = perm[i * args.bs:(i + 1) * args.bs].to(x_train.device, non_blocking=True)
            lr, mom = one_cycle(step / total, args.lr)
            for g in opt.param_groups:
                g["lr"], g["betas"] = lr, (mom, 0.99)
            xb, yb = x_train[idx].to(device, non_blocking=True), y_train[idx].to(device, non_blocking=True)
            loss = loss_fn(model(to_input(xb)), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
        model.eval()
        correct, valid_loss = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(x_test), args.bs):
                xb, yb = x_test[i:i + args.bs].to(device), y_test[i:i + args.bs].to(device)
                pred = model(to_input(xb))
                valid_loss += loss_fn(pred, yb).item() * len(pred)
                correct += (pred.argmax(1) == yb).sum().item()
        print(f"epoch {epoch} train_loss {loss.item():.4f} valid_loss {valid_loss / len(x_test):.4f} "
              f"accuracy {correct / len(x_test):.4f} time {time.perf_counter() - start:.1f}s", flush=True)
    print(f"peer: accuracy={correct / len(x_test):.4f} seconds={time.perf_counter() - start:.2f}")


if __name__ == "__main__":
    main()
