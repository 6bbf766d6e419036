#!/usr/bin/env python3
"""Makes the image folders the loader benchmark reads, from the photographs that
scikit-image ships (in the project's .venv; nothing is downloaded).

  make_image_folders.py OUT [--photos 1600] [--small 5000] [--workers 1]

OUT/photos: class-per-folder JPEGs of 300-500 px (random crops, scales and flips of
            the source photographs; one class per source photograph)
OUT/small:  class-per-folder 32x32 PNGs (CIFAR-sized)
The same files whatever the number of worker processes: every random draw is made in
order first, then the pictures are cut and encoded in parallel.
"""
import argparse
import multiprocessing
import os
import random

import numpy as np
from PIL import Image
from skimage import data

SOURCES = ["astronaut", "chelsea", "coffee", "hubble_deep_field", "immunohistochemistry", "rocket",
           "motorcycle_left", "retina"]


def load_sources():
    images = {}
    for name in SOURCES:
        try:
            array = getattr(data, name)()
        except Exception:  # a photograph this skimage version lacks or would download
            continue
        if array.ndim == 2:
            array = np.stack([array] * 3, -1)
        images[name] = Image.fromarray(array[..., :3].astype(np.uint8))
    return images


def view_plan(rng, size, long_side):
    """The draws of one view of a photograph of `size`: its crop, flip and final size."""
    w, h = size
    scale = rng.uniform(0.5, 1.0)
    cw, ch = int(w * scale), int(h * scale * rng.uniform(0.8, 1.2))
    ch = min(ch, h)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    flip = rng.random() < 0.5
    factor = long_side / max(cw, ch)
    return (x, y, x + cw, y + ch), flip, (max(1, int(cw * factor)), max(1, int(ch * factor)))


SOURCE_IMAGES = {}


def render(job):
    name, box, flip, size, path, small = job
    view = SOURCE_IMAGES[name].crop(box)
    if flip:
        view = view.transpose(Image.FLIP_LEFT_RIGHT)
    view = view.resize(size, Image.BILINEAR)
    if small:
        view.resize((32, 32), Image.BILINEAR).save(path)
    else:
        view.save(path, quality=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=1600)
    ap.add_argument("--small", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(0)
    SOURCE_IMAGES.update(load_sources())
    names = sorted(SOURCE_IMAGES)
    jobs = []
    for kind, count in (("photos", args.photos), ("small", args.small)):
        for i in range(count):
            name = names[i % len(names)]
            folder = os.path.join(args.out, kind, name)
            os.makedirs(folder, exist_ok=True)
            long_side = rng.randint(300, 500) if kind == "photos" else 48
            box, flip, size = view_plan(rng, SOURCE_IMAGES[name].size, long_side)
            path = os.path.join(folder, f"{i:05d}." + ("jpg" if kind == "photos" else "png"))
            jobs.append((name, box, flip, size, path, kind == "small"))
    with multiprocessing.Pool(args.workers) as pool:
        pool.map(render, jobs, chunksize=64)
    print(f"{args.photos} photos and {args.small} small images from {len(names)} sources in {args.out}")


if __name__ == "__main__":
    main()
