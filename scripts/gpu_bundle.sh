#!/usr/bin/env bash
# Gathers, into .gpu_bundle/ (ignored by git), what a GPU machine without Debian's
# packages needs to build and check fastcpp with scripts/gpu_check.sh: doctest's single
# header, CLI11's and nlohmann's JSON headers, Gloo's headers (c10d's Gloo backend includes them; the torch wheel ships none),
# zlib's headers, the Fashion-MNIST files, the detection example's set, the fixtures of the fastai suite (made
# here with the venv's fastai, which the GPU machines lack), and image_libs.tar.xz:
# OpenCV's core and imgproc, libjpeg and libpng (headers, Debian's libraries and the
# libraries they load that a bare machine lacks, and a CMake config) and nvJPEG (the
# venv's nvidia-nvjpeg wheel), which the image pipeline builds on there (gpu_check.sh
# unpacks it). About 59 MB: a device call carries 64 MiB at most.
set -euo pipefail
source "$(dirname "$0")/command_line.sh"
positional_only "$@"
cd "$(dirname "$0")/.."
bundle=.gpu_bundle
rm -rf "$bundle"
mkdir -p "$bundle/include/doctest" "$bundle/data/fashion-mnist"
cp /usr/include/doctest/doctest.h "$bundle/include/doctest/"
cp -r /usr/include/gloo /usr/include/CLI "$bundle/include/"
cp -r "$(.venv/bin/python -c 'import nlohmann_json, os; print(os.path.dirname(nlohmann_json.__file__))')/include/nlohmann" "$bundle/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$bundle/include/"
cp /usr/share/datasets/fashion-mnist/*.gz "$bundle/data/fashion-mnist/"
# The detection example's set (800 JPEGs of 128 px and their COCO JSON, about 4 MB): its
# maker needs scikit-image's photographs, which the GPU machines lack.
.venv/bin/python bench/make_detection_set.py "$bundle/data/detection" > /dev/null
.venv/bin/python tests/fixtures/fastai_reference.py "$bundle/fastai_fixtures"
# Weights over 1 MB (fastai's U-Nets, XResNets: 210 MB) would outgrow what a device call
# carries (64 MiB in all); their cases compare CPU forwards only, and CI runs them. The
# fastai suite skips a fixture listed here.
find "$bundle/fastai_fixtures" -name '*.pth' -size +1M -printf '%f\n' | sort > "$bundle/fastai_fixtures/left_out.txt"
xargs -I{} rm "$bundle/fastai_fixtures/{}" < "$bundle/fastai_fixtures/left_out.txt"

# OpenCV without imgcodecs (Debian's pulls in GDAL and a hundred libraries): the item
# transforms need core and imgproc, the decoders libjpeg and libpng (vision/decoders.h),
# and the GPU decoder nvJPEG.
libs_dir=$(mktemp -d)/image_libs
mkdir -p "$libs_dir/include/opencv2" "$libs_dir/lib"
(cd /usr/include/opencv4/opencv2 && cp -r core core.hpp imgproc imgproc.hpp opencv_modules.hpp "$libs_dir/include/opencv2/")
cp /usr/include/jpeglib.h /usr/include/jmorecfg.h /usr/include/jerror.h /usr/include/x86_64-linux-gnu/jconfig.h \
   /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$libs_dir/include/"
libs=(/usr/lib/x86_64-linux-gnu/libopencv_core.so.406 /usr/lib/x86_64-linux-gnu/libopencv_imgproc.so.406
      /usr/lib/x86_64-linux-gnu/libjpeg.so.62 /usr/lib/x86_64-linux-gnu/libpng16.so.16)
# With what they load, but not the C and C++ runtimes and zlib that every machine has.
ldd "${libs[@]}" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64)\.so' |
  sort -u | while read -r lib; do cp -L "$lib" "$libs_dir/lib/"; done
cp -L "${libs[@]}" "$libs_dir/lib/"
ln -s libjpeg.so.62 "$libs_dir/lib/libjpeg.so"  # the names find_library looks for
ln -s libpng16.so.16 "$libs_dir/lib/libpng16.so"
nvjpeg=$(.venv/bin/python -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
cp "$nvjpeg/include/nvjpeg.h" "$libs_dir/include/"
cp "$nvjpeg/lib/libnvjpeg.so.13" "$libs_dir/lib/"
cat > "$libs_dir/OpenCVConfig.cmake" <<'CONFIG'
# OpenCV's core and imgproc as scripts/gpu_bundle.sh carries them (Debian's libraries).
set(OpenCV_VERSION 4.6.0)
set(OpenCV_INCLUDE_DIRS "${CMAKE_CURRENT_LIST_DIR}/include")
foreach(module core imgproc)
  if(NOT TARGET opencv_${module})
    add_library(opencv_${module} SHARED IMPORTED)
    set_target_properties(opencv_${module} PROPERTIES
      IMPORTED_LOCATION "${CMAKE_CURRENT_LIST_DIR}/lib/libopencv_${module}.so.406"
      INTERFACE_INCLUDE_DIRECTORIES "${OpenCV_INCLUDE_DIRS}")
  endif()
endforeach()
set(OpenCV_LIBS opencv_core opencv_imgproc)
set(OpenCV_FOUND TRUE)
CONFIG
XZ_OPT=-T0 tar cJf "$bundle/image_libs.tar.xz" -C "$(dirname "$libs_dir")" image_libs
rm -rf "$(dirname "$libs_dir")"
# fastai's wheels, the venv's versions (2 MB): the image has torch, torchvision, pandas,
# scikit-learn, matplotlib and rich, which is all the rest fastai's vision half imports.
# gpu_check.sh's U-Net step races fastai on the same GPU with them; its detection step
# races torchvision's loop there with pycocotools (a compiled wheel for the image's Python).
rm -rf "$bundle/wheels"
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$bundle/wheels" \
  $(.venv/bin/python -m pip list --format=freeze |
    grep -i -E '^(fastai|fastcore|fastdownload|fastprogress|fasttransform|plum-dispatch|beartype|pycocotools)==')
# fastprogress imports python-fasthtml (for notebooks), which the image lacks: it and what
# it needs, resolved for the image's Python (8 MB).
.venv/bin/python -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$bundle/wheels" \
  "$(.venv/bin/python -m pip list --format=freeze | grep -i '^python-fasthtml==')"
du -sh --apparent-size "$bundle"
size=$(du -s --apparent-size -B1M "$bundle" | cut -f1)
[ "$size" -le 62 ] || { echo "gpu_bundle: $size MB: a device call carries 64 MiB in all, the tree included" >&2; exit 1; }
