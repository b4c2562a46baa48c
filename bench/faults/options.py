"""What a fault run is asked to do, with each scenario's full and short defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCENARIOS = (
    "kill-workers",
    "broker-restart",
    "slow-turns",
    "log-damage",
    "bad-start",
    "midturn-kill",
    "move-under-faults",
    "standby-takeover",
    "redis-wipe",
    "backup-restore",
)
SHARDED = ("kill-workers", "broker-restart", "slow-turns")  # the scenarios that run with --shards 2


@dataclass(frozen=True)
class Defaults:
    messages: int
    kills: int  # faults of the scenario's own kind
    rate: float  # messages per second
    buyers: int
    settle_s: float  # bound on waiting for quiet after the last fault


FULL = {
    "kill-workers": Defaults(messages=1000, kills=20, rate=25, buyers=200, settle_s=120),
    "broker-restart": Defaults(messages=1000, kills=4, rate=25, buyers=200, settle_s=120),
    "slow-turns": Defaults(messages=40, kills=0, rate=2, buyers=30, settle_s=120),
    "log-damage": Defaults(messages=400, kills=10, rate=15, buyers=100, settle_s=120),
    "bad-start": Defaults(messages=0, kills=0, rate=0, buyers=0, settle_s=30),
    "midturn-kill": Defaults(messages=150, kills=9, rate=0.5, buyers=40, settle_s=120),
    "move-under-faults": Defaults(messages=60, kills=2, rate=1, buyers=20, settle_s=180),
    "standby-takeover": Defaults(messages=400, kills=1, rate=8, buyers=150, settle_s=120),
    # kefu's default settings: the reconciler's 30 s grace and the 30 s listener lease bound recovery
    "redis-wipe": Defaults(messages=600, kills=1, rate=10, buyers=150, settle_s=150),
    "backup-restore": Defaults(messages=400, kills=1, rate=5, buyers=120, settle_s=120),
}
# The short forms (tests/integration/test_faults.py): ≈ 200 messages, ≥ 6 faults, < 90 s each.
SHORT = {
    "kill-workers": Defaults(messages=200, kills=6, rate=12, buyers=60, settle_s=40),
    "broker-restart": Defaults(messages=200, kills=6, rate=8, buyers=60, settle_s=40),
    "slow-turns": Defaults(messages=16, kills=0, rate=2, buyers=12, settle_s=40),
    "log-damage": Defaults(messages=120, kills=6, rate=10, buyers=40, settle_s=30),
    "bad-start": Defaults(messages=0, kills=0, rate=0, buyers=0, settle_s=25),
    "midturn-kill": Defaults(messages=24, kills=3, rate=0.5, buyers=16, settle_s=60),
    "move-under-faults": Defaults(messages=16, kills=2, rate=2, buyers=10, settle_s=60),
    "standby-takeover": Defaults(messages=120, kills=1, rate=4, buyers=60, settle_s=40),
    "redis-wipe": Defaults(messages=60, kills=1, rate=2, buyers=30, settle_s=60),
    "backup-restore": Defaults(messages=80, kills=1, rate=2, buyers=40, settle_s=60),
}


@dataclass(frozen=True)
class Options:
    scenario: str
    messages: int
    kills: int
    seed: int
    direct: bool
    rate: float
    buyers: int
    settle_s: float
    workdir: Path | None = None  # where the run keeps its data, logs and AOF (default: a temp dir)
    keep: bool = False  # keep the run dir even when the run passed
    shards: int = 1  # 2: two shards on the one Redis and simulated platform, one account each
    network_model: bool = False  # the agent is a (fake) network model, its workers on the pool kefu picks for it

    @property
    def window_s(self) -> float:
        """How long offering the workload takes."""
        return self.messages / self.rate if self.rate else 0.0


def options_for(
    scenario: str,
    short: bool = False,
    seed: int = 1,
    direct: bool = False,
    messages: int | None = None,
    kills: int | None = None,
    rate: float | None = None,
    buyers: int | None = None,
    settle_s: float | None = None,
    workdir: Path | None = None,
    keep: bool = False,
    shards: int = 1,
    network_model: bool = False,
) -> Options:
    """The scenario's defaults (full or short), with whatever was given explicitly on top."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    if shards not in (1, 2) or (shards > 1 and scenario not in SHARDED):
        raise ValueError(f"--shards {shards}: 1, or 2 with {', '.join(SHARDED)}")
    if network_model and scenario not in SHARDED:
        raise ValueError(f"--network-model runs with {', '.join(SHARDED)}")
    base = (SHORT if short else FULL)[scenario]
    return Options(
        scenario=scenario,
        messages=base.messages if messages is None else messages,
        kills=base.kills if kills is None else kills,
        seed=seed,
        direct=direct,
        rate=base.rate if rate is None else rate,
        buyers=base.buyers if buyers is None else buyers,
        settle_s=base.settle_s if settle_s is None else settle_s,
        workdir=workdir,
        keep=keep,
        shards=shards,
        network_model=network_model,
    )
