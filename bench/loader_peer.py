#!/usr/bin/env python3
"""The Python peer of bench_loader: torchvision's ImageFolder and PyTorch's
DataLoader with the same transforms, batch size and worker count.

  loader_peer.py FOLDER --workers N --size S [--epochs 2] [--bs 64]

size > 64: RandomResizedCrop(S) + flip; size <= 64: pad-4 RandomCrop(S) + flip.
Then ToTensor + Normalize(ImageNet stats), to float batches of bs.
Prints: peer: images_per_s=... peak_rss_mb=... (main process + workers, sampled)
"""
import argparse
import os
import threading
import time

import torch
import torchvision
from torchvision import transforms as T


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss_mb():
    me = os.getpid()
    total = rss_mb(me)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        total += rss_mb(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--bs", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    crop = T.RandomResizedCrop(args.size) if args.size > 64 else T.RandomCrop(args.size, padding=4)
    tfms = T.Compose([crop, T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(args.folder, tfms)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.bs, shuffle=True, num_workers=args.workers,
                                     persistent_workers=args.workers > 0)
    peak = [0.0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_mb())
            time.sleep(0.05)

    for _ in dl:  # warm-up epoch: workers started, files in the page cache
        pass
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start, n = time.perf_counter(), 0
    for _ in range(args.epochs):
        for x, y in dl:
            n += len(x)
    elapsed = time.perf_counter() - start
    stop.set()
    sampler.join()
    print(f"peer: images_per_s={n / elapsed:.1f} peak_rss_mb={peak[0]:.1f}")


if __name__ == "__main__":
    main()
