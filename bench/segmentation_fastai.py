#!/usr/bin/env python3
"""examples/segmentation.cpp's job in real fastai: the same image and mask folders (the
example writes them), SegmentationDataLoaders.from_label_func's DataBlock with the same
validation files (--valid-list, fastai's FileSplitter), batch size for training and validation, and
loading on the main thread (num_workers=0, as the example's --workers 0; --workers N), RGB images,
pixels divided by 255, unet_learner on torchvision's ResNet-18 with random weights,
CrossEntropyLossFlat over the class axis ignoring the void index, fit_one_cycle(epochs,
lr), and thread count.

The metrics are the example's: Dice and IoU per class over each validation pass from one
confusion matrix, void pixels left out, classes absent from predictions and masks
skipped (fastai's DiceMulti and JaccardCoeffMulti count void pixels in the union), so
the fit does the same work on both sides and no pass follows it.
Prints one machine-readable line:
    fastai: mean_iou=0.7312 loop_seconds=98.7 seconds=123.4
"""
import argparse
import os
import time

import torch
from fastai.metrics import Metric
from fastai.vision.all import (CrossEntropyLossFlat, DataBlock, FileSplitter, ImageBlock, MaskBlock, get_image_files,
                               set_seed, unet_learner)
from torchvision.models import resnet18

VOID = 255


class Overlap(Metric):
    "Mean Dice or IoU over the classes present, from a confusion matrix of the non-void pixels."
    def __init__(self, n_classes, score):
        self.n, self.score = n_classes, score

    def reset(self): self.cm = torch.zeros(self.n * self.n + 1, dtype=torch.long)

    def accumulate(self, learn):
        pred = learn.pred.as_subclass(torch.Tensor).argmax(1).flatten()
        mask = learn.yb[0].as_subclass(torch.Tensor).flatten()
        bins = (mask * self.n + pred).masked_fill(mask == VOID, self.n * self.n)
        self.cm = self.cm.to(bins.device).index_add_(0, bins, torch.ones(1, dtype=torch.long, device=bins.device).expand_as(bins))

    @property
    def value(self):
        cm = self.cm[:-1].view(self.n, self.n).double().cpu()
        inter, union = cm.diagonal(), cm.sum(0) + cm.sum(1)
        scores = 2 * inter / union if self.score == "dice" else inter / (union - inter)
        return scores.nanmean().item()

    @property
    def name(self): return "dice_multi" if self.score == "dice" else "mean_iou"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default="segmentation_data", help="the folders the example wrote")
    ap.add_argument("--valid-list", required=True, help="the validation images' names, one per line")
    ap.add_argument("--workers", type=int, default=0, help="the loaders' num_workers")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    codes = open(os.path.join(args.out, "codes.txt")).read().split("\n")[:-1]
    set_seed(args.seed)
    # SegmentationDataLoaders.from_label_func's DataBlock, with the given validation files
    block = DataBlock(blocks=(ImageBlock, MaskBlock(codes=codes)), splitter=FileSplitter(args.valid_list),
                      get_y=lambda f: os.path.join(args.out, "masks", f.name))
    dls = block.dataloaders(sorted(get_image_files(os.path.join(args.out, "images"))), path=args.out, bs=args.bs,
                            num_workers=args.workers, device=args.device)
    iou = Overlap(len(codes), "iou")
    learn = unet_learner(dls, resnet18, pretrained=False, n_out=len(codes), metrics=[Overlap(len(codes), "dice"), iou],
                         loss_func=CrossEntropyLossFlat(axis=1, ignore_index=VOID))
    with learn.no_bar():
        loop_start = time.perf_counter()
        learn.fit_one_cycle(args.epochs, args.lr)
        loop_seconds = time.perf_counter() - loop_start
    print(f"fastai: mean_iou={iou.value:.4f} loop_seconds={loop_seconds:.1f} seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
