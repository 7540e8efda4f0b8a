"""serQ's model of the vLLM scheduler, and the oracle formats it is checked in (docs/vllm-model.md,
docs/oracle.md).

One module per job, in the order a scenario goes through them:

- `scenario`: the scenario format and its checks (standard library only: the real-scheduler
  drivers tools/vllm_oracle/driver.py and tools/vllm_testbed/driver.py import it inside vLLM's
  own environment).
- `plan`: a scenario as sessions, turns and program inputs, and the refusals: what the model
  cannot represent (`Unsupported`, `FEATURES`).
- `encode`: a plan as the IR of one of the programs in `programs/` (package data).
- `engine`: running that IR on serq_fast or serq_spec, its state lines to a callback.
- `collect`: the trace (docs/oracle.md §4) from the engine's state lines.
- `feedback`: the facts of vLLM's run the language cannot derive, read off one run and fed to
  the next, one named rule each.
- `model`: `run_scenario`, the loop over the five above until the fed-back facts settle.
- `compare`: the trace comparison rule (standard library only).
- `agreement`: every committed vector through the model and the comparison.
- `cli`: the `serq oracle` commands; only the top-level `serq` command loads it.

This file imports nothing, so that loading `serq_vllm.scenario` loads the standard library alone.
"""
