#!/usr/bin/env bash
# Build the CPU-only virtualenv in which tools/vllm_oracle/driver.py runs the real vLLM scheduler.
#
# Usage:  bash tools/vllm_oracle/setup.sh [--dry-run] [VERSION]
#         VERSION is 0.31.0 (default: the version of the committed traces) or 0.33.0;
#         it may also be given as SERQ_VLLM_VERSION. --dry-run prints what would be built and stops.
#   bash tools/vllm_oracle/setup.sh              builds tools/vllm_oracle/.venv          (0.31.0)
#   bash tools/vllm_oracle/setup.sh 0.33.0       builds tools/vllm_oracle/.venv-0.33.0
#
# Environment:
#   SERQ_VLLM_VERSION     the vLLM version to build       [0.31.0]
#   SERQ_VLLM_VENV        where to build the venv        [.venv for 0.31.0, .venv-VERSION otherwise]
#   SERQ_VLLM_PYTHON      interpreter for the venv (3.11) [python3.11, else python3]
#   SERQ_TORCH_WHEEL      path of the local torch 2.13.0 CPU wheel [searched in pip's find-links]
#   SERQ_ALLOW_TORCH_INDEX=1   let pip resolve torch==2.13.0 itself when no local wheel is found;
#                         the result is still checked to be a CPU build (never a CUDA one)
#   SERQ_VLLM_PRUNE=0     keep vLLM's compiled kernels (default 1: delete them; no trace changes)
#   SERQ_VLLM_RECREATE=1  delete an existing venv first
#
# Steps: torch 2.13.0 CPU wheel (--no-deps, from disk) -> pinned import-chain lock
# requirements-vllm-VERSION.txt -> vllm/xgrammar/apache-tvm-ffi with --no-deps -> optional prune ->
# smoke test (which also checks that the installed vLLM is VERSION). The script prints how long
# each step took and the venv's size.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TORCH_VERSION="2.13.0"
PRUNE="${SERQ_VLLM_PRUNE:-1}"
# Supported versions and the xgrammar / apache-tvm-ffi each one is installed with (--no-deps).
# Both run on torch 2.13.0 CPU: 0.33.0 declares torch==2.14.0, but the scheduler never loads
# vLLM's compiled extension, so the older CPU torch is enough.
SUPPORTED="0.31.0 0.33.0"
pins_for() {
  case "$1" in
    0.31.0) echo "xgrammar==0.2.7 apache-tvm-ffi==0.1.11" ;;
    0.33.0) echo "xgrammar==0.2.8 apache-tvm-ffi==0.1.11" ;;
    *) return 1 ;;
  esac
}

die() { printf 'setup.sh: error: %s\n' "$*" >&2; exit 1; }

DRY_RUN=0
ARG_VERSION=""
for a in "$@"; do
  case "$a" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option '$a' (usage: setup.sh [--dry-run] [VERSION]; VERSION one of: $SUPPORTED)" ;;
    *) [[ -z "$ARG_VERSION" ]] || die "more than one version given ('$ARG_VERSION', '$a')"
       ARG_VERSION="$a" ;;
  esac
done
if [[ -n "$ARG_VERSION" && -n "${SERQ_VLLM_VERSION:-}" && "$ARG_VERSION" != "$SERQ_VLLM_VERSION" ]]; then
  die "version $ARG_VERSION given as argument but SERQ_VLLM_VERSION=$SERQ_VLLM_VERSION"
fi
VLLM_VERSION="${ARG_VERSION:-${SERQ_VLLM_VERSION:-0.31.0}}"
EXTRA_PINS="$(pins_for "$VLLM_VERSION")" \
  || die "unsupported vLLM version '$VLLM_VERSION'; supported: $SUPPORTED"
LOCK="$HERE/requirements-vllm-${VLLM_VERSION}.txt"
[[ -f "$LOCK" ]] || die "the lock file $LOCK of vLLM $VLLM_VERSION is missing"
# 0.31.0 keeps the historical path, so existing venvs and tools that look there still work.
if [[ "$VLLM_VERSION" == "0.31.0" ]]; then
  DEFAULT_VENV="$HERE/.venv"
else
  DEFAULT_VENV="$HERE/.venv-${VLLM_VERSION}"
fi
VENV="${SERQ_VLLM_VENV:-$DEFAULT_VENV}"

if [[ "$DRY_RUN" == "1" ]]; then
  printf 'vllm %s\nvenv %s\nlock %s\npins vllm==%s %s\ntorch %s+cpu\n' \
    "$VLLM_VERSION" "$VENV" "$LOCK" "$VLLM_VERSION" "$EXTRA_PINS" "$TORCH_VERSION"
  exit 0
fi

say() { printf '[setup %5ss] %s\n' "$((SECONDS))" "$*"; }

# shellcheck source=../torch_wheel.sh
source "$HERE/../torch_wheel.sh"
choose_python SERQ_VLLM_PYTHON
TORCH_WHEEL="$(find_torch_wheel || true)"
if [[ -z "$TORCH_WHEEL" || ! -f "$TORCH_WHEEL" ]]; then
  if [[ "${SERQ_ALLOW_TORCH_INDEX:-0}" != "1" ]]; then
    die "no local torch-${TORCH_VERSION}+cpu cp311 wheel found (looked in pip's find-links and /opt/wheels).
  Refusing to let pip fetch torch: the registry build is a multi-GB CUDA wheel.
  Point SERQ_TORCH_WHEEL at a CPU wheel, or set SERQ_ALLOW_TORCH_INDEX=1 to let pip try (it is still
  rejected afterwards unless it is a CPU build)."
  fi
  say "no local torch wheel; SERQ_ALLOW_TORCH_INDEX=1 so pip resolves torch==${TORCH_VERSION} itself"
else
  case "$(basename "$TORCH_WHEEL")" in
    torch-${TORCH_VERSION}+cpu-*) ;;
    *) die "$TORCH_WHEEL is not a torch ${TORCH_VERSION} CPU wheel" ;;
  esac
  say "torch wheel: $TORCH_WHEEL ($(du -h "$TORCH_WHEEL" | cut -f1))"
fi

# ---- venv -------------------------------------------------------------------------------------
if [[ -d "$VENV" && "${SERQ_VLLM_RECREATE:-0}" == "1" ]]; then
  say "removing existing $VENV"
  rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating venv $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)
# pip, minus its warnings about local index folders that lack a package (noise on this setup)
pipq() {
  set +o pipefail
  "${PIP[@]}" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  local rc=${PIPESTATUS[0]}
  set -o pipefail
  return "$rc"
}

# ---- 1. torch (CPU, from disk, no dependencies) ----------------------------------------------
t0=$SECONDS
if [[ -n "$TORCH_WHEEL" && -f "$TORCH_WHEEL" ]]; then
  pipq install -q --no-deps "$TORCH_WHEEL"
else
  pipq install -q --no-deps "torch==${TORCH_VERSION}"
fi
"$VPY" - <<EOF || { "${PIP[@]}" uninstall -y -q torch; die "installed torch is not the ${TORCH_VERSION} CPU build; removed it"; }
import importlib.metadata as md, sys
v = md.version("torch")
ok = v.split("+")[0] == "${TORCH_VERSION}" and v.endswith("+cpu")
if not ok:
    print("torch version", v, "is not ${TORCH_VERSION}+cpu", file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
say "torch installed in $((SECONDS - t0)) s"

# ---- 2. pinned import chain -------------------------------------------------------------------
t0=$SECONDS
# torch's own dependencies (filelock, sympy, networkx, jinja2, fsspec, typing_extensions) are in
# the lock, so resolving it never pulls another torch. A constraint keeps it that way.
CONSTRAINT="$(mktemp)"
trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==${TORCH_VERSION}" > "$CONSTRAINT"
PIP_CONSTRAINT="$CONSTRAINT" pipq install -q -r "$LOCK"
say "pinned dependencies installed in $((SECONDS - t0)) s"

# ---- 3. vLLM itself, without its (CUDA) dependencies ------------------------------------------
t0=$SECONDS
# shellcheck disable=SC2086  # EXTRA_PINS is a list of requirement words
pipq install -q --no-deps "vllm==${VLLM_VERSION}" $EXTRA_PINS
say "vllm ${VLLM_VERSION} installed (--no-deps) in $((SECONDS - t0)) s"

# ---- 4. optional prune ------------------------------------------------------------------------
if [[ "$PRUNE" == "1" ]]; then
  VDIR="$("$VPY" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("vllm").origin))')"
  before="$(du -sm "$VDIR" | cut -f1)"
  rm -rf "$VDIR/vllm_flash_attn" "$VDIR/third_party/deep_gemm"
  find "$VDIR" -name '*.so' -type f -delete
  say "pruned vllm package: ${before} MB -> $(du -sm "$VDIR" | cut -f1) MB"
fi

# ---- 5. checks and smoke test -----------------------------------------------------------------
t0=$SECONDS
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_LOGGING_LEVEL=ERROR \
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 SERQ_WANT_VLLM="$VLLM_VERSION" "$VPY" - <<'EOF'
import importlib.metadata as md
import os
import sys
import torch
if torch.version.cuda is not None:
    sys.exit(f"torch {torch.__version__} is a CUDA build ({torch.version.cuda}); refusing")
import vllm
want = os.environ["SERQ_WANT_VLLM"]
# a venv built for one version and reused for another must not pass as the asked-for one
if md.version("vllm") != want or vllm.__version__ != want:
    sys.exit(f"installed vLLM is {md.version('vllm')} (vllm.__version__ {vllm.__version__}), not {want}")
import vllm.v1.core.sched.scheduler  # noqa: F401  (the import chain the driver needs)
import vllm.v1.core.sched.async_scheduler  # noqa: F401
print(f"smoke test ok: vllm {vllm.__version__}, torch {torch.__version__} (cuda={torch.version.cuda})")
EOF
say "smoke test passed in $((SECONDS - t0)) s"
say "venv size: $(du -sh "$VENV" | cut -f1)  ($VENV)"
say "done in ${SECONDS} s total"
