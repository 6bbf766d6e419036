#!/usr/bin/env python3
"""Saves torchvision's ImageNet weights of an architecture as a state dict that
vision_learner and unet_learner load (VisionLearnerOptions::pretrained_weights, the
image_folder example's --weights).

  scripts/get_weights.py NAME [--out weights]     # NAME: resnet18, resnet34, resnet50, resnet101

Writes OUT/NAME.pth and prints its path. The weights come from torch's download cache
(~/.cache/torch/hub/checkpoints, or $TORCH_HOME/hub/checkpoints) when they are there, else
from download.pytorch.org. A machine without the internet: the error names the file to
fetch elsewhere and where to copy it; run the script again then.
"""
import argparse
import os
import shutil
import sys

NAMES = {"resnet18": "ResNet18_Weights", "resnet34": "ResNet34_Weights", "resnet50": "ResNet50_Weights",
         "resnet101": "ResNet101_Weights"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(NAMES), help="the architecture")
    ap.add_argument("--out", default="weights", help="the folder to write NAME.pth in (default: weights)")
    args = ap.parse_args()

    try:
        import torch
        import torchvision
    except ImportError:  # a system python: torch lives in the project's .venv (scripts/setup_python.sh)
        venv_python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "python")
        if not os.path.exists(venv_python) or os.path.samefile(sys.executable, venv_python):
            sys.exit("get_weights.py: torch and torchvision are not installed; scripts/setup_python.sh installs them")
        os.execv(venv_python, [venv_python, os.path.abspath(__file__), *sys.argv[1:]])

    # DEFAULT: the weights fastai's pretrained ResNets load (its _resnet_meta): IMAGENET1K_V1 for
    # ResNet-18 and 34, IMAGENET1K_V2 (76.1% -> 80.9% top-1 for ResNet-50) for 50 and 101.
    weights = torchvision.models.get_weight(f"{NAMES[args.name]}.DEFAULT")
    cache = os.path.join(torch.hub.get_dir(), "checkpoints")
    cached = os.path.join(cache, os.path.basename(weights.url))
    if not os.path.exists(cached):
        os.makedirs(cache, exist_ok=True)
        try:
            torch.hub.download_url_to_file(weights.url, cached + ".part", progress=sys.stderr.isatty())
        except Exception as error:  # no route, no DNS, a proxy: the same advice
            sys.exit(f"get_weights.py: could not download {weights.url} ({error}).\n"
                     f"Fetch that file on a machine with the internet, copy it to {cached}, "
                     f"and run this again.")
        os.replace(cached + ".part", cached)
    # The file is already a state dict; checking it here beats a failed load in C++ later.
    state = torch.load(cached, map_location="cpu", weights_only=True)
    getattr(torchvision.models, args.name)().load_state_dict(state)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, f"{args.name}.pth")
    shutil.copyfile(cached, out)
    print(out)


if __name__ == "__main__":
    main()
