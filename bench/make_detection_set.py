#!/usr/bin/env python3
"""Makes the detection set that examples/detection trains on and bench/detection_vs_torchvision.sh
races on: views of the photographs scikit-image ships (the loader benchmark's sources, in
the project's .venv; nothing is downloaded) with shapes pasted at known boxes.

  make_detection_set.py OUT [--images 800] [--size 128] [--valid-every 5] [--seed 0]

OUT/images/NNNNN.jpg  size x size views of the photographs, each with 1-3 shapes (circle,
                      square, triangle, cross) of 20-56 px in saturated colours with a dark
                      rim, overlapping earlier ones by at most 0.2 IoU
OUT/instances.json    their boxes in COCO's instances format (bbox x, y, width, height)
OUT/valid.txt         the validation images (every valid_every-th), one file name a line
"""
import argparse
import json
import os
import random

from PIL import Image, ImageDraw

from make_image_folders import load_sources

CLASSES = ["circle", "square", "triangle", "cross"]


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def draw_shape(draw, kind, box, colour):
    x1, y1, x2, y2 = box
    rim = dict(fill=colour, outline=(20, 20, 20), width=2)
    if kind == "circle":
        draw.ellipse(box, **rim)
    elif kind == "square":
        draw.rectangle(box, **rim)
    elif kind == "triangle":
        draw.polygon([((x1 + x2) / 2, y1), (x2, y2), (x1, y2)], **rim)
    else:  # a cross: two bars a third of the side wide
        t = (x2 - x1) / 3
        draw.rectangle((x1 + t, y1, x2 - t, y2), fill=colour)
        draw.rectangle((x1, y1 + t, x2, y2 - t), fill=colour)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=800)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--valid-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sources = load_sources()
    names = sorted(sources)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    images, annotations, valid = [], [], []
    for i in range(args.images):
        photo = sources[names[i % len(names)]]
        w, h = photo.size
        side = rng.randint(min(w, h) // 3, min(w, h))
        x, y = rng.randint(0, w - side), rng.randint(0, h - side)
        view = photo.crop((x, y, x + side, y + side)).resize((args.size, args.size), Image.BILINEAR)
        draw = ImageDraw.Draw(view)
        boxes = []
        for _ in range(rng.randint(1, 3)):
            for _attempt in range(20):
                s = rng.randint(20, 56)
                bx, by = rng.randint(0, args.size - s), rng.randint(0, args.size - s)
                box = (bx, by, bx + s, by + s)
                if all(iou(box, other) <= 0.2 for other, _ in boxes):
                    break
            else:
                continue
            kind = rng.randrange(len(CLASSES))
            colour = tuple(rng.choice([rng.randint(0, 60), rng.randint(200, 255)]) for _ in range(3))
            if max(colour) < 200:
                colour = (255, colour[1], colour[2])
            draw_shape(draw, CLASSES[kind], box, colour)
            boxes.append((box, kind))
        name = f"{i:05d}.jpg"
        view.save(os.path.join(args.out, "images", name), quality=90)
        images.append({"id": i + 1, "file_name": name, "width": args.size, "height": args.size})
        for box, kind in boxes:
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": kind + 1,
                                "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                                "area": (box[2] - box[0]) * (box[3] - box[1]), "iscrowd": 0})
        if i % args.valid_every == 0:
            valid.append(name)
    with open(os.path.join(args.out, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": [{"id": k + 1, "name": c} for k, c in enumerate(CLASSES)]}, f)
    with open(os.path.join(args.out, "valid.txt"), "w") as f:
        f.write("\n".join(valid) + "\n")
    print(f"{args.images} images ({len(valid)} for validation), {len(annotations)} boxes of {len(CLASSES)} classes in {args.out}")


if __name__ == "__main__":
    main()
