"""The runtime's eviction policies, one frozen record each.

A runtime policy is a core policy (how the arena chooses victims: one of ``coop._core.POLICIES``) plus
how the runtime drives it: whether cheap tensors go to the high end of their free range
(``partition``), whether in-place kernels follow coop's rule or DTR's (``inplace``), and
whether memory is a plain sum of sizes (``ideal``: an ideal arena, as DTR's simulator counted it).
"""
from dataclasses import dataclass, field

from coop._core import POLICIES as CORE_POLICIES

__all__ = ["POLICIES", "Policy", "get_policy"]


@dataclass(frozen=True)
class Policy:
    """One runtime policy.

    name: what users pass (``Runtime(policy=...)``, ``coop replay --policy``);
    core: the arena's policy, one of ``coop._core.POLICIES``;
    partition: CHEAP tensors at the high end of their free range, EXPENSIVE at the low end
    (else every tensor is placed EXPENSIVE);
    inplace: coop's in-place rule (the old value of a mutated storage is recomputed or copied,
    as docs/design.md says); off: DTR's (each mutation makes a new version, the old one released);
    ideal: needs an ideal arena (``SimBackend(budget, ideal=True)``), and only it takes one;
    move: core ``coop`` may move pieces out of its window instead of evicting them, and make room
    before a recompute by moving its inputs (docs/core.md, Moving), where the executor can move
    memory;
    offload: a piece may also leave by an offload to the host tier (constants included), at the
    host link's cost, where the executor can copy to the host (docs/core.md, "The host tier");
    offload_last: offloads wait until no other way out exists (then the tier opens for good);
    off: every choice counts them from the start;
    moves_if_blocked: with move, pieces move only when evictions alone cannot make room (no
    window of free pieces and candidates covers the request); off: every choice weighs each
    piece's move against its eviction (docs/core.md, "Moving");
    excess_weight: core ``coop`` compares windows per byte they free, the bytes beyond the
    request counted at this weight (0.0: by cost alone; ``Arena.excess_weight``);
    core_code: the core policy's integer code (``PolicyCode`` in ``coop/_core.pxd``: the index
    of ``core`` in ``coop._core.POLICIES``), for Cython owners.
    """

    name: str
    core: str
    partition: bool
    inplace: bool
    ideal: bool = False
    move: bool = False
    offload: bool = False
    offload_last: bool = True
    moves_if_blocked: bool = False
    excess_weight: float = 0.0
    core_code: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.core not in CORE_POLICIES:
            raise ValueError(f"policy {self.name!r}: unknown core policy {self.core!r}; "
                             f"choose one of {', '.join(CORE_POLICIES)}")
        object.__setattr__(self, "core_code", CORE_POLICIES.index(self.core))


#: runtime policy name -> Policy
POLICIES = {p.name: p for p in (
    # coop's window moves pieces out of the way when that is cheaper than evicting them
    # (docs/core.md, Moving); coop-no-move only evicts, as the paper's window did;
    # coop-move-if-blocked moves only where no evict-only window makes room
    Policy("coop", "coop", partition=True, inplace=True, move=True),
    # DTR's baselines mutate as DTR's simulator did: each mutation makes a new version
    Policy("dtr", "dtr", partition=False, inplace=False),
    Policy("dte", "dte", partition=False, inplace=False),
    Policy("lru", "lru", partition=False, inplace=False),
    Policy("size", "size", partition=False, inplace=True),
    Policy("none", "none", partition=False, inplace=True),
    Policy("coop-no-partition", "coop", partition=False, inplace=True, move=True),
    Policy("coop-no-inplace", "coop", partition=True, inplace=False, move=True),
    Policy("coop-loop", "dtr", partition=True, inplace=True),
    # DTR with memory as a plain sum of sizes: needs an ideal arena (SimBackend(ideal=True))
    Policy("dtr-ideal", "dtr", partition=False, inplace=False, ideal=True),
    Policy("coop-no-move", "coop", partition=True, inplace=True),
    Policy("coop-move-if-blocked", "coop", partition=True, inplace=True, move=True,
           moves_if_blocked=True),
    # coop comparing its windows per byte they free, as DTR compares tensors (an ablation:
    # the bytes a window frees beyond the request are worth as much as the request's)
    Policy("coop-per-byte", "coop", partition=True, inplace=True, move=True, excess_weight=1.0),
    # coop with the host tier: a piece leaves its window by eviction, a move or an offload,
    # whichever costs least (opt-in: the tier needs host memory and a link to it)
    Policy("coop-offload", "coop", partition=True, inplace=True, move=True, offload=True),
    # a Capuchin-style baseline (ASPLOS 2020) in the same arena: DTR's victims, each leaving
    # by the cheaper of its recompute and its copy out and back, from the first eviction on
    Policy("capuchin", "dtr", partition=False, inplace=False, offload=True, offload_last=False),
)}


def get_policy(name):
    """The Policy called name; ValueError naming the choices for anything else."""
    try:
        return POLICIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
