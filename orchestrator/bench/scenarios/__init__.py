"""The named, versioned scenarios of ``lucerna bench <scenario>``.

Each module declares one ``Scenario`` (``_declare.py``): its workload, its phases, the
flags each arm runs with and why they are that server's best for the workload, and the
comparisons its report makes. ``SCENARIOS`` lists them in the order ``--list`` shows.
"""

from __future__ import annotations

from orchestrator.bench.scenarios._declare import (
    COLD,
    WARM,
    Arm,
    BenchRequest,
    Comparison,
    Options,
    Phase,
    Round,
    Scenario,
    Sizing,
)
from orchestrator.bench.scenarios.agent_replay import AGENT
from orchestrator.bench.scenarios.decode import DECODE
from orchestrator.bench.scenarios.edit import EDIT
from orchestrator.bench.scenarios.long_context import LONG_CONTEXT
from orchestrator.bench.scenarios.speculative import SPECULATIVE
from orchestrator.bench.scenarios.streams import STREAMS

__all__ = [
    "COLD",
    "SCENARIOS",
    "SCENARIO_NAMES",
    "WARM",
    "Arm",
    "BenchRequest",
    "Comparison",
    "Options",
    "Phase",
    "Round",
    "Scenario",
    "Sizing",
    "scenario_named",
]

SCENARIOS: tuple[Scenario, ...] = (DECODE, STREAMS, AGENT, EDIT, LONG_CONTEXT, SPECULATIVE)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


def scenario_named(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIO_NAMES)}")
