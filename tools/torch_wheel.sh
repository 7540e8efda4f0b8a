# Sourced by tools/vllm_oracle/setup.sh and tools/vllm_testbed/setup.sh: the interpreter of the
# venv they build, and the local CPU torch wheel they install from disk. Both need Python 3.11
# because the only CPU torch wheel on this kind of machine (in pip's find-links) is cp311, and
# neither may let pip fetch torch from the registry: that build is a multi-GB CUDA wheel.
#
# choose_python ENVVAR   sets PY: $ENVVAR if set, else python3.11, else python3; dies unless 3.11
# find_torch_wheel       prints the path of torch-$TORCH_VERSION+cpu-cp311 (SERQ_TORCH_WHEEL, else
#                        the first match in pip's find-links, $PIP_FIND_LINKS, /opt/wheels)
# Needs: die() and TORCH_VERSION from the caller.

choose_python() {
  local override="${!1:-}"
  if [[ -n "$override" ]]; then
    PY="$override"
  elif command -v python3.11 >/dev/null 2>&1; then
    PY="python3.11"
  else
    PY="python3"
  fi
  local ver
  ver="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "cannot run $PY"
  [[ "$ver" == "3.11" ]] || die "need Python 3.11 (the local torch CPU wheel is cp311); $PY is $ver (set $1)"
}

find_torch_wheel() {
  if [[ -n "${SERQ_TORCH_WHEEL:-}" ]]; then
    echo "$SERQ_TORCH_WHEEL"; return
  fi
  local dirs d
  dirs="$("$PY" -m pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | tr ' ' '\n')"
  dirs="$dirs"$'\n'"${PIP_FIND_LINKS:-}"$'\n'"/opt/wheels"
  while IFS= read -r d; do
    d="${d#file://}"
    [[ -n "$d" && -d "$d" ]] || continue
    ls "$d"/torch-"${TORCH_VERSION}"+cpu-cp311-cp311-*.whl 2>/dev/null | head -n 1 && return
  done <<< "$dirs"
}
