#!/usr/bin/env python3
"""torchvision's side of the detection race (bench/detection_vs_torchvision.sh): the job of
examples/detection in PyTorch's own training loop, on the same files.

  detection_torchvision.py SET [--epochs 8] [--lr 1e-3] [--bs 16] [--fpn 128] [--head group-norm] [--seed 42] [--threads 2]
      [--device cpu|cuda]

SET: bench/make_detection_set.py's folder (instances.json, images/, valid.txt). The model is
torchvision's RetinaNet on its ResNet-18 with an FPN of --fpn channels (BackboneWithFPN on
layer2-4, LastLevelP6P7 from P5, fastcpp's detection_learner; --head group-norm: GroupNorm
in the head's convs, as torchvision's v2), random weights; its
transform neither resizes (min_size = max_size = the images' side) nor normalizes (mean 0,
std 1), as the example's loaders give pixels / 255. Optimizer and schedule as fastai's
fit_one_cycle: AdamW (betas 0.9/0.99, eps 1e-5, weight decay 0.01 but none on the norm layers'
parameters and the biases, as fastai's and fastcpp's wd_bn_bias=False), OneCycleLR (25% warm-up,
div 25, final div 1e5, cosine, beta1 0.95 -> 0.85 -> 0.95). Each epoch: the training pass,
then the validation loss and COCO's AP and AP50 (pycocotools) on the validation images,
as fastai's fit runs its metrics. Loading on the main thread, batches of --bs, copied to
--device (the model's).

Prints a line per epoch and "loop_seconds=S ap=A ap50=B".
"""
import argparse
import functools
import contextlib
import io
import json
import os
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.retinanet import RetinaNet, RetinaNetHead
from torchvision.ops.feature_pyramid_network import LastLevelP6P7


def load(set_dir):
    with open(os.path.join(set_dir, "instances.json")) as f:
        coco = json.load(f)
    with open(os.path.join(set_dir, "valid.txt")) as f:
        valid_names = set(line.strip() for line in f if line.strip())
    categories = sorted(c["id"] for c in coco["categories"])
    label_of = {cid: k for k, cid in enumerate(categories)}
    boxes = {image["id"]: [] for image in coco["images"]}
    for a in coco["annotations"]:
        x, y, w, h = a["bbox"]
        boxes[a["image_id"]].append((x, y, x + w, y + h, label_of[a["category_id"]]))
    items = []
    for image in coco["images"]:
        b = torch.tensor([t[:4] for t in boxes[image["id"]]], dtype=torch.float32).reshape(-1, 4)
        l = torch.tensor([t[4] for t in boxes[image["id"]]], dtype=torch.int64)
        items.append((os.path.join(set_dir, "images", image["file_name"]), image, {"boxes": b, "labels": l},
                      image["file_name"] in valid_names))
    return coco, items, len(categories)


class Images(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, image, target, _ = self.items[i]
        pixels = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"))).permute(2, 0, 1).float() / 255
        return pixels, target, image["id"]


def collate(batch):
    return torch.stack([b[0] for b in batch]), [b[1] for b in batch], [b[2] for b in batch]


def to_device(x, targets, device):
    return x.to(device), [{k: v.to(device) for k, v in t.items()} for t in targets]


def evaluate(model, loader, truth, side, device):
    """Validation loss (the training-mode loss terms on eval-mode outputs, as the Learner's
    validation computes its loss) and the detections for pycocotools, from one forward."""
    model.eval()
    total, count, results = 0.0, 0, []
    with torch.no_grad():
        for x, targets, ids in loader:
            x, targets = to_device(x, targets, device)
            features = list(model.backbone(x).values())
            head = model.head(features)
            anchors = model.anchor_generator(ImageList(x, [(side, side)] * len(x)), features)
            losses = model.compute_loss(targets, head, anchors)
            total += float(sum(losses.values())) * len(x)
            count += len(x)
            per_level = [f.size(2) * f.size(3) * 9 for f in features]
            split = {k: list(v.split(per_level, dim=1)) for k, v in head.items()}
            found = model.postprocess_detections(split, [list(a.split(per_level)) for a in anchors], [(side, side)] * len(x))
            for image_id, d in zip(ids, found):
                for box, score, label in zip(d["boxes"].tolist(), d["scores"].tolist(), d["labels"].tolist()):
                    results.append({"image_id": image_id, "category_id": truth["categories"][label]["id"], "score": score,
                                    "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
    model.train()
    ap = ap50 = 0.0
    if results:
        gt = COCO()
        gt.dataset = truth
        with contextlib.redirect_stdout(io.StringIO()):
            gt.createIndex()
            e = COCOeval(gt, gt.loadRes(results), "bbox")
            e.evaluate()
            e.accumulate()
            e.summarize()
        ap, ap50 = e.stats[0], e.stats[1]
    return total / count, ap, ap50


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("set")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--fpn", type=int, default=128)
    ap.add_argument("--head", choices=["group-norm", "plain"], default="group-norm")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    coco, items, classes = load(args.set)
    train = [i for i in items if not i[3]]
    valid = [i for i in items if i[3]]
    valid_ids = {i[1]["id"] for i in valid}
    truth = {"images": [i[1] for i in valid], "categories": sorted(coco["categories"], key=lambda c: c["id"]),
             "annotations": [a for a in coco["annotations"] if a["image_id"] in valid_ids]}
    side = items[0][1]["width"]
    body = torchvision.models.resnet18()
    backbone = BackboneWithFPN(body, {"layer2": "0", "layer3": "1", "layer4": "2"}, [128, 256, 512], args.fpn,
                               extra_blocks=LastLevelP6P7(args.fpn, args.fpn))
    norm = functools.partial(torch.nn.GroupNorm, 32) if args.head == "group-norm" else None
    head = RetinaNetHead(args.fpn, 9, classes, norm_layer=norm)
    model = RetinaNet(backbone, num_classes=classes, head=head, min_size=side, max_size=side,
                      image_mean=[0, 0, 0], image_std=[1, 1, 1]).to(args.device)
    train_loader = torch.utils.data.DataLoader(Images(train), batch_size=args.bs, shuffle=True, drop_last=True,
                                               collate_fn=collate, num_workers=0)
    valid_loader = torch.utils.data.DataLoader(Images(valid), batch_size=args.bs, collate_fn=collate, num_workers=0)
    norms = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.instancenorm._InstanceNorm, torch.nn.GroupNorm,
             torch.nn.LayerNorm)
    no_decay = {id(p) for m in model.modules() if isinstance(m, norms) for p in m.parameters(recurse=False)}
    no_decay |= {id(p) for name, p in model.named_parameters() if name.endswith("bias")}
    groups = [{"params": [p for p in model.parameters() if id(p) not in no_decay]},
              {"params": [p for p in model.parameters() if id(p) in no_decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99), eps=1e-5, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * len(train_loader),
                                                   pct_start=0.25, div_factor=25, final_div_factor=1e5,
                                                   base_momentum=0.85, max_momentum=0.95)
    model.train()
    start = time.time()
    for epoch in range(args.epochs):
        epoch_start, losses = time.time(), []
        for x, targets, _ in train_loader:
            x, targets = to_device(x, targets, args.device)
            loss = sum(model(list(x), targets).values())
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            losses.append(loss.item())
        valid_loss, ap, ap50 = evaluate(model, valid_loader, truth, side, args.device)
        print(f"epoch {epoch} train_loss {np.mean(losses):.4f} valid_loss {valid_loss:.4f} ap {ap:.4f} ap50 {ap50:.4f} "
              f"{time.time() - epoch_start:.1f}s", flush=True)
    print(f"loop_seconds={time.time() - start:.1f} ap={ap:.4f} ap50={ap50:.4f}")


if __name__ == "__main__":
    main()
