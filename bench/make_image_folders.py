#!/usr/bin/env python3
"""Makes the image folders the loader benchmark reads, from the photographs that
scikit-image ships (in the project's .venv; nothing is downloaded).

  make_image_folders.py OUT [--photos 1600] [--small 5000]

OUT/photos: class-per-folder JPEGs of 300-500 px (random crops, scales and flips of
            the source photographs; one class per source photograph)
OUT/small:  class-per-folder 32x32 PNGs (CIFAR-sized)
"""
import argparse
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


def random_view(rng, image, long_side):
    w, h = image.size
    scale = rng.uniform(0.5, 1.0)
    cw, ch = int(w * scale), int(h * scale * rng.uniform(0.8, 1.2))
    ch = min(ch, h)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    view = image.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        view = view.transpose(Image.FLIP_LEFT_RIGHT)
    factor = long_side / max(view.size)
    return view.resize((max(1, int(view.size[0] * factor)), max(1, int(view.size[1] * factor))), Image.BILINEAR)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--photos", type=int, default=1600)
    ap.add_argument("--small", type=int, default=5000)
    args = ap.parse_args()
    rng = random.Random(0)
    sources = load_sources()
    names = sorted(sources)
    for i in range(args.photos):
        name = names[i % len(names)]
        folder = os.path.join(args.out, "photos", name)
        os.makedirs(folder, exist_ok=True)
        random_view(rng, sources[name], rng.randint(300, 500)).save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)
    for i in range(args.small):
        name = names[i % len(names)]
        folder = os.path.join(args.out, "small", name)
        os.makedirs(folder, exist_ok=True)
        random_view(rng, sources[name], 48).resize((32, 32), Image.BILINEAR).save(os.path.join(folder, f"{i:05d}.png"))
    print(f"{args.photos} photos and {args.small} small images from {len(names)} sources in {args.out}")


if __name__ == "__main__":
    main()
