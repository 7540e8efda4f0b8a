"""The vLLM oracle side of serQ: scenario files, trace comparison, and the `serq oracle` commands.

- `serq.oracle.scenario`: load, validate and resolve a scenario JSON (defaults, prompt structure).
- `serq.oracle.compare`: the trace comparison rule and a one-line-per-step rendering.
- `serq.oracle.cli`: `serq oracle compare` and `serq oracle vllm`.

Everything here is standard library only; the real vLLM runs in a separate virtualenv
(tools/vllm_oracle/setup.sh) through tools/vllm_oracle/driver.py.
"""

from serq.oracle.scenario import (  # noqa: F401
    ScenarioError,
    ResolvedRequest,
    ResolvedScenario,
    load_scenario,
    resolve_scenario,
)
from serq.oracle.compare import (  # noqa: F401
    Difference,
    TraceError,
    compare_traces,
    load_trace,
    render_step,
    render_trace,
)
