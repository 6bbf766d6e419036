#!/usr/bin/env python3
"""examples/segmentation.cpp's job in real fastai: the same image and mask folders (the
example writes them), SegmentationDataLoaders.from_label_func with the same split
(valid_pct 0.2, seed), batch size and defaults (RGB images, pixels divided by 255),
unet_learner on torchvision's ResNet-18 with random weights, CrossEntropyLossFlat over
the class axis ignoring the void index, fit_one_cycle(epochs, lr), and thread count.
The mean IoU is computed as the example computes it: per class over the validation
set, void pixels left out, classes absent from predictions and masks skipped.
Prints one machine-readable line:
    fastai: mean_iou=0.7312 seconds=123.4
"""
import argparse
import os
import time

import torch
from fastai.vision.all import CrossEntropyLossFlat, SegmentationDataLoaders, get_image_files, set_seed, unet_learner
from torchvision.models import resnet18

VOID = 255


def mean_iou(preds, masks, n_classes):
    decided, masks = preds.argmax(1).flatten(), masks.flatten()
    keep = masks != VOID
    decided, masks = decided[keep], masks[keep]
    scores = []
    for c in range(n_classes):
        p, t = decided == c, masks == c
        union = (p | t).sum().item()
        if union > 0:
            scores.append((p & t).sum().item() / union)
    return sum(scores) / len(scores)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default="segmentation_data", help="the folders the example wrote")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    codes = open(os.path.join(args.out, "codes.txt")).read().split("\n")[:-1]
    set_seed(args.seed)
    dls = SegmentationDataLoaders.from_label_func(
        args.out, sorted(get_image_files(os.path.join(args.out, "images"))),
        lambda f: os.path.join(args.out, "masks", f.name), codes=codes, valid_pct=0.2, seed=args.seed, bs=args.bs,
        num_workers=0, device="cpu")
    learn = unet_learner(dls, resnet18, pretrained=False, n_out=len(codes),
                         loss_func=CrossEntropyLossFlat(axis=1, ignore_index=VOID))
    with learn.no_bar():
        learn.fit_one_cycle(args.epochs, args.lr)
        preds, masks = learn.get_preds()
    print(f"fastai: mean_iou={mean_iou(preds, masks, len(codes)):.4f} seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
