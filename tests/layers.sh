#!/usr/bin/env bash
# The library's folders are layers: a file includes its own folder and the folders
# below it, never one above (the layout table of docs/development.md). The one exception is
# learner -> callbacks (fit_one_cycle, lr_find and the progress bar, as in fastai).
# Prints every include that breaks the order and exits 1 if there is one.
#
#   tests/layers.sh [ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
layers=(core cli formats data optim learner callbacks distributed parallel vision)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

bad=0
for folder in "${layers[@]}"; do
  while IFS=: read -r file _ include; do
    target=$(sed -E 's/.*#include "([^/"]+)\/.*/\1/' <<<"$include")
    [ -n "${rank[$target]:-}" ] || continue  # not one of the library's folders
    [ "${rank[$target]}" -gt "${rank[$folder]}" ] || continue
    [ "$folder/$target" = learner/callbacks ] && continue
    echo "$file includes $target/, a higher layer: $include"
    bad=1
  done < <(grep -rn --include='*.h' --include='*.cpp' -E '^#include "[a-z_]+/' "$folder")
done
[ $bad -eq 0 ] && echo "layers: every include points down (${layers[*]})"
exit $bad
