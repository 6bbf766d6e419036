#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_image_folder.sh: the same training from a JPEG folder as
bench_image_folder (RandomResizedCrop 224 + flip, ImageNet's Normalize on the GPU, SGD
with momentum 0.9, torchvision's ResNet, autocast fp16 with GradScaler or bf16,
channels-last), timed over the same steps after the same warm-up.

  image_folder_peer.py FOLDER [--source dataloader|gpu-decode] [--arch resnet18|resnet50]
                       [--precision fp32|fp16|bf16] [--memory-format contiguous|channels-last]
                       [--bs 256] [--workers 16] [--warmup 5] [--steps 30]

dataloader: torch.utils.data.DataLoader (workers, pinned memory) over torchvision's
            ImageFolder, files decoded by torchvision.io (libjpeg-turbo) and cropped by
            transforms v2 on uint8 tensors, batches moved as uint8.
gpu-decode: the workers read the files; torchvision.io.decode_jpeg(device="cuda") decodes
            each batch at once (nvJPEG), then transforms v2 crop, resize and flip each
            image on the GPU.
Prints one line: "pytorch <source> <arch> <precision> <layout> <images/s> img/s".
"""
import argparse
import itertools
import time

import torch
import torchvision
from torchvision.io import decode_jpeg, decode_image, read_file
from torchvision.transforms import v2

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


class Files(torchvision.datasets.ImageFolder):
    """The folder's items as (file bytes, label): decoded later, on the GPU."""

    def __getitem__(self, index):
        path, label = self.samples[index]
        return read_file(path), label


def packed(items):
    """A batch's files as one byte tensor and their lengths: a worker hands over two shared
    tensors a batch, not one per file (hundreds of file descriptors a batch run out)."""
    files = [b for b, _ in items]
    return torch.cat(files), torch.tensor([len(b) for b in files]), torch.tensor([label for _, label in items])


def crop_on_gpu(images, crop):
    return torch.stack([crop(image) for image in images])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--source", default="dataloader", choices=["dataloader", "gpu-decode"])
    ap.add_argument("--arch", default="resnet18", choices=["resnet18", "resnet50"])
    ap.add_argument("--precision", default="bf16", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--memory-format", default="channels-last", choices=["contiguous", "channels-last"])
    ap.add_argument("--bs", type=int, default=256)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    if args.source == "dataloader":
        data = torchvision.datasets.ImageFolder(args.folder, loader=lambda path: decode_image(read_file(path)),
                                                transform=crop)
        collate = None
    else:
        data = Files(args.folder)
        collate = packed
    loader = torch.utils.data.DataLoader(data, batch_size=args.bs, shuffle=True, num_workers=args.workers,
                                         pin_memory=True, drop_last=True, collate_fn=collate, persistent_workers=True)
    model = getattr(torchvision.models, args.arch)(num_classes=len(data.classes)).to(device)
    layout = torch.channels_last if args.memory_format == "channels-last" else torch.contiguous_format
    model = model.to(memory_format=layout)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(enabled=args.precision == "fp16")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    mean, std = MEAN.to(device), STD.to(device)

    def batches():
        while True:  # as many epochs as the steps need
            for batch in loader:
                if args.source == "gpu-decode":
                    files, lengths, y = batch
                    x = crop_on_gpu(decode_jpeg(list(files.split(lengths.tolist())), device=device), crop)
                else:
                    x, y = batch
                yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    start = None
    for step, (x, y) in enumerate(itertools.islice(batches(), args.warmup + args.steps)):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        x = ((x.float() - mean) / std).contiguous(memory_format=layout)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"pytorch {args.source} {args.arch} {args.precision} {args.memory_format} {args.bs * args.steps / seconds:.1f} img/s",
          flush=True)


if __name__ == "__main__":
    main()
