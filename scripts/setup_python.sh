#!/usr/bin/env bash
# The project's virtual environment, .venv/: the pins of scripts/requirements.txt
# (PyTorch 2.11 with CUDA, whose libtorch we build on, and the Python peers).
#
# The wheels (about 3.3 GB) are downloaded once into a wheelhouse outside the checkout,
# ${FASTCPP_WHEELHOUSE:-~/.cache/fastcpp/wheels}, and every later install (a fresh clone,
# CI) comes from there without the network. Nothing happens when .venv already has
# exactly these pins.
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
requirements=scripts/requirements.txt
venv=.venv
wheelhouse=${FASTCPP_WHEELHOUSE:-$HOME/.cache/fastcpp/wheels}
stamp=$venv/.fastcpp-requirements

if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then exit 0; fi

python=${PYTHON:-python3}
"$python" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' ||
  { echo "setup_python: need Python >= 3.10 as \$PYTHON or python3" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"

mkdir -p "$wheelhouse"
if ! "$venv/bin/pip" download -q --no-index --find-links "$wheelhouse" -r "$requirements" -d "$wheelhouse" 2>/dev/null; then
  echo "setup_python: downloading the wheels of $requirements into $wheelhouse (about 3.3 GB, once)"
  "$venv/bin/pip" download -q -r "$requirements" -d "$wheelhouse"
fi
echo "setup_python: installing $requirements into $venv from $wheelhouse"
"$venv/bin/pip" install -q --no-index --find-links "$wheelhouse" -r "$requirements"
cp "$requirements" "$stamp"
