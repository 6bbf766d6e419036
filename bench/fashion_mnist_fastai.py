#!/usr/bin/env python3
"""examples/fashion_mnist.cpp's job in real fastai: the same residual network
(fashion_mnist_peer.make_model), batch size (128 for training, 256 for validation),
fit_one_cycle(epochs, 1e-2) with fastai's Adam and its defaults, and thread count,
in fastai's default contiguous layout (--memory-format channels-last adds fastai's
ChannelsLast callback). The images are normalized once up front (fastcpp does it per
batch). Prints one machine-readable line:
    fastai: accuracy=0.9312 seconds=123.4
"""
import argparse
import os
import sys
import time

import torch
from fastai.basics import Adam, CrossEntropyLossFlat, DataLoader, DataLoaders, Learner, accuracy, set_seed
from fastai.callback.channelslast import ChannelsLast
import fastai.callback.progress  # noqa: F401  (learn.no_bar)
import fastai.callback.schedule  # noqa: F401  (learn.fit_one_cycle)

sys.path.insert(0, os.path.dirname(__file__))
from fashion_mnist_peer import DATA, MEAN, STD, make_model, read_idx  # noqa: E402


class Items:
    "Normalized images and labels, item by item, as fastai's DataLoader asks for them."

    def __init__(self, x, y):
        self.x, self.y = (x.float() / 255 - MEAN) / STD, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--bs", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--memory-format", choices=["contiguous", "channels-last"], default="contiguous",
                    help="channels-last: fastai's ChannelsLast callback (fastai's default is contiguous)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    set_seed(args.seed)  # torch (the initial weights) and Python's random (the shuffle)
    start = time.perf_counter()
    train = Items(read_idx(f"{args.data}/train-images-idx3-ubyte.gz").unsqueeze(1),
                  read_idx(f"{args.data}/train-labels-idx1-ubyte.gz").long())
    valid = Items(read_idx(f"{args.data}/t10k-images-idx3-ubyte.gz").unsqueeze(1),
                  read_idx(f"{args.data}/t10k-labels-idx1-ubyte.gz").long())
    dls = DataLoaders(DataLoader(train, bs=args.bs, shuffle=True, num_workers=0, device=args.device),
                      DataLoader(valid, bs=2 * args.bs, num_workers=0, device=args.device))
    learn = Learner(dls, make_model(), loss_func=CrossEntropyLossFlat(), opt_func=Adam, metrics=accuracy)
    if args.memory_format == "channels-last":
        learn.add_cb(ChannelsLast())
    with learn.no_bar():
        learn.fit_one_cycle(args.epochs, args.lr)
        final = float(learn.validate()[1])
    print(f"fastai: accuracy={final:.4f} seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
