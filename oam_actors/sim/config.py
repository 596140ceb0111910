"""Settings of one simulation run; the defaults are the embedded demo (about a minute)."""

from __future__ import annotations

import msgspec

__all__ = ["SimConfig"]


class SimConfig(msgspec.Struct, kw_only=True, rename="camel"):
    backend: str = "farm"
    """``farm`` (simulated phones), ``scripted``, ``devices`` (real device URLs) or ``proxy``."""
    phones: int = 4
    device_urls: list[str] = msgspec.field(default_factory=list)
    proxy: str | None = None
    time_scale: float = 0.1
    """Simulated phones: real seconds per phone second (0.1: the 60 s quota window lasts 6 s)."""
    sessions: int = 16
    """Player sessions; 16 with 16 NPCs on the farm keep player dialogue within the phones' quota, so
    the crowd's decisions and barks get a share of what is left (40 sessions took all of it)."""
    npcs: int | None = None
    """NPCs on one shared world; ``None`` becomes 16 on the simulated farm, 0 otherwise."""
    duration_seconds: float = 60.0
    think_seconds: float = 1.0
    cancel_rate: float = 0.05
    tool_timeout_rate: float = 0.03
    tool_timeout_seconds: float = 2.0
    tool_latency_seconds: float = 0.05
    model_latency_seconds: float = 0.3
    seed: int = 7
    report_dir: str = "reports"
    runtime: str = "local"
    """``local`` or ``ray`` (``--runtime``): where the conversations' objects run."""
    npc_mix: tuple[float, float, float] = (0.5, 0.25, 0.25)
    """Shares of an NPC's actions (``--npc-mix``): ``npc/talk``, ``decision/decide`` (with a
    ``fallbackOptionID``) and ``npc/bark``."""
    bark_deadline_seconds: float = 1.0
    """Each bark's ``deadlineSeconds`` (10 phone seconds on the default farm): a line a minute
    late is no use, a repeat of a recent one is."""
    deadlines: list[tuple[str, float]] = msgspec.field(default_factory=list)
    """The server's default deadline by priority (``--deadline PRIORITY=SECONDS``), over the
    defaults dialogue 20 s, decision 60 s, background 120 s."""
    conversations: int | None = None
    """Ambient conversations among the NPCs (``--conversations``), each of ``conversation_size``
    distinct NPCs; ``None`` becomes one per 8 NPCs."""
    conversation_size: int = 4
    conversation_deadline_seconds: float = 5.0
    """Each conversation line's ``deadlineSeconds`` (50 phone seconds on the default farm: the
    crowd's other work takes most of the quota, and a line may wait for a window to roll)."""
    coalesce: bool = True
    """A pool or proxy system model coalesces barks, tool-free decisions and talk steps (``--no-coalesce``
    turns it off), with the servers' default settings."""
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    """``--rpm``, ``--tpm``, ``--max-concurrency``: what the proxy backend allows, as stated."""
    routes: str | None = None
    """A route file (``--routes FILE``; backend ``routes``): the system model is a router."""

    def __post_init__(self) -> None:
        if len(self.npc_mix) != 3 or min(self.npc_mix) < 0 or sum(self.npc_mix) <= 0:
            raise ValueError(f"npc_mix needs three shares (talk, decide, bark), none negative; got {self.npc_mix}")
        # Resolved here so the config (and the report's copy of it) says how many NPCs ran.
        if self.npcs is None:
            self.npcs = 16 if self.backend == "farm" else 0

    @property
    def npc_count(self) -> int:
        return self.npcs or 0

    @property
    def conversation_count(self) -> int:
        return self.npc_count // 8 if self.conversations is None else self.conversations
