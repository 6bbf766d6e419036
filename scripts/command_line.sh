# The scripts (scripts/, bench/) answer their command line as fastcpp's programs do
# (cli/command_line.h): -h / --help prints the script's opening comment and exits 0;
# --version prints fastcpp's and libtorch's versions; --flag=value is --flag value; an
# unknown flag or a flag without its value is one line naming it, with exit code 2.
# Nothing has run by then. A script sources this file and parses with it:
#
#   source "$(dirname "$0")/../scripts/command_line.sh"
#   while [ $# -gt 0 ]; do
#     case "$1" in
#       --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
#       --epochs) need_count "$@"; epochs=$2; shift 2 ;;
#       --data) need_value "$@"; data=$2; shift 2 ;;
#       *) other_flag "$@" ;;
#     esac
#   done
#
# A script that takes only positional arguments calls `positional_only "$@"` instead; one
# that hands its flags on to another program, `help_or_version "$@"`.

# Sourced before the script changes folder: $0 may be relative.
command_line_script=$(basename "$0")
command_line_path=$(cd "$(dirname "$0")" && pwd)/$command_line_script
command_line_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# What the script says of itself: its opening comment, without the '#'.
script_usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$command_line_path"
}

# "fastcpp 0.1.0 (libtorch 2.11.0)": the project's version and the virtual environment's torch.
fastcpp_version() {
  local version torch python=${FASTCPP_PYTHON:-$command_line_root/.venv/bin/python}
  version=$(sed -n 's/^project(fastcpp VERSION \([0-9.]*\).*/\1/p' "$command_line_root/CMakeLists.txt")
  torch=$("$python" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null) ||
    torch="not installed"
  echo "fastcpp $version (libtorch $torch)"
}

command_line_error() {
  echo "$command_line_script: $1 ($command_line_script --help lists the flags)" >&2
  exit 2
}

# need_value "$@": the flag in $1 has its value in $2.
need_value() {
  [[ $# -ge 2 && $2 != --* ]] || command_line_error "$1 needs a value"
}

# need_count "$@": the value in $2 is a whole number (epochs, threads, sizes).
need_count() {
  need_value "$@"
  [[ $2 =~ ^[0-9]+$ ]] || command_line_error "$1 takes a whole number, not '$2'"
}

# need_number "$@": the value in $2 is a number >= 0 (a learning rate: 3e-3).
need_number() {
  need_value "$@"
  [[ $2 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || command_line_error "$1 takes a number, not '$2'"
}

# other_flag "$@": --help, --version, or an unknown flag.
other_flag() {
  case "$1" in
    -h | --help) script_usage; exit 0 ;;
    --version) fastcpp_version; exit 0 ;;
    *) command_line_error "unknown flag $1" ;;
  esac
}

# help_or_version "$@": answers -h, --help and --version given before any "--".
help_or_version() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --) return 0 ;;
      -h | --help | --version) other_flag "$arg" ;;
    esac
  done
}

# positional_only "$@": the same, and refuses any other flag before "--".
positional_only() {
  local arg
  for arg in "$@"; do
    [ "$arg" = "--" ] && return 0
    case "$arg" in -*) other_flag "$arg" ;; esac
  done
}
