"""The history checker of the relocation e2e tests (tests/e2e/test_relocation.py): pure
functions over what the hosts handled and what the senders saw, no I/O and no runtime.

Two kinds of records, as the hosts of ``reloc_app`` write them (one JSON object per line):

- a *turn*: what one handler did, ``{"id", "gen", "host", "act", "sender", "seq", "kind",
  "prev", "start", "end"}``: the Spot id, its object generation, the host and the activation
  (``act``, new for every instance, so a restored Spot is a new one) that ran the turn, the
  sender's name and sequence number, ``"send"`` or ``"request"``, the last sequence number of
  that sender the Spot's state held before the turn (its adapter carries it across a move), and
  the turn's start and end on the machine-wide monotonic clock;
- a sender's *call* lines: ``{"phase": "issue", "sender", "seq", "id", "kind", "at"}`` before
  the call is submitted and ``{"phase": "end", "sender", "seq", "ok", "error", "host", "act",
  "at"}`` when it ended (``error`` an ``ErrorKind`` name; ``host`` and ``act`` of a request's
  answer). ``calls`` merges them.

``check`` returns a ``Report`` whose ``violations`` name every broken invariant:

- ``lost``: an acknowledged send that no turn handled (unless ``may_lose`` excuses it), or an
  answered request that no turn handled, or whose answer came from another activation;
- ``duplicate``: a (sender, seq) handled more than once;
- ``phantom``: a turn for a (sender, seq) that no sender issued;
- ``reorder``: one sender's messages to one Spot handled out of their sequence order;
- ``state``: a turn whose ``prev`` is not the sender's last seq handled before it by the same
  object generation (the state did not travel, or travelled stale);
- ``overlap``: two activations of one id whose spans (first turn start to last turn end)
  intersect, so two incarnations served at one instant;
- ``terminal``: an issued call with no end (unless ``may_hang`` excuses it) or with two;
- ``error``: a call that ended with an error ``may_fail`` does not allow.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

Record = Mapping[str, Any]
Excuse = Callable[[Record], bool]


def _never(_call: Record) -> bool:
    return False


@attrs.define
class Incarnation:
    """One activation of an id, by the turns it ran."""

    host: str
    act: str
    gen: int
    first: float
    last: float
    turns: int


@attrs.define
class Report:
    violations: dict[str, list[str]] = attrs.field(factory=lambda: defaultdict(list))
    errors: Counter[str] = attrs.field(factory=Counter)
    """Calls that ended with an error, by ``ErrorKind`` name (allowed or not)."""
    incarnations: dict[str, list[Incarnation]] = attrs.field(factory=dict)
    """Per id, its activations in the order they began serving."""
    turns: int = 0
    calls: int = 0

    offenders: dict[str, list[Record]] = attrs.field(factory=lambda: defaultdict(list))
    """Per category, the call (``lost``, ``error``, ``terminal``) or the turn handled out of
    order (``reorder``: the one with the lower seq, run after a higher one) behind each
    violation, where there is one."""

    def add(self, category: str, text: str, offender: Record | None = None) -> None:
        self.violations[category].append(text)
        if offender is not None:
            self.offenders[category].append(offender)

    def summary(self, limit: int = 5) -> str:
        """The violations, at most ``limit`` of each category, for an assertion message."""
        lines = []
        for category, texts in sorted(self.violations.items()):
            lines.append(f"{category}: {len(texts)}")
            lines.extend(f"  {text}" for text in texts[:limit])
        return "\n".join(lines)

    def hosts_of(self, spot_id: str) -> list[str]:
        """The hosts whose activations served ``spot_id``, in order."""
        return [incarnation.host for incarnation in self.incarnations.get(spot_id, [])]


def calls(lines: Iterable[Record]) -> tuple[list[dict[str, Any]], list[str]]:
    """Merge call lines into one dict per call (``ended`` None while it has no end line), and
    the problems seen on the way: an end without its issue, or a second end."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    problems: list[str] = []
    for line in lines:
        key = (line["sender"], line["seq"])
        if line["phase"] == "issue":
            merged[key] = {**line, "issued": line["at"], "ended": None, "ok": None}
            continue
        call = merged.get(key)
        if call is None:
            problems.append(f"{key}: an end with no issue")
        elif call["ended"] is not None:
            problems.append(f"{key}: a second end {line} after {call}")
        else:
            call.update(
                ended=line["at"],
                ok=line["ok"],
                error=line.get("error"),
                host=line.get("host"),
                act=line.get("act"),
            )
    return list(merged.values()), problems


def check(
    turns: Iterable[Record],
    call_lines: Iterable[Record],
    *,
    may_lose: Excuse = _never,
    may_fail: Excuse = _never,
    may_hang: Excuse = _never,
) -> Report:
    """Every invariant of the module docstring over one run's records."""
    report = Report()
    ordered = sorted(turns, key=lambda turn: (turn["start"], turn["end"]))
    report.turns = len(ordered)
    merged, problems = calls(call_lines)
    report.calls = len(merged)
    for problem in problems:
        report.add("terminal", problem)
    handled: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for turn in ordered:
        handled[(turn["sender"], turn["seq"])].append(turn)
    _check_calls(report, merged, handled, may_lose, may_fail, may_hang)
    issued = {(call["sender"], call["seq"]) for call in merged}
    for key, seen in handled.items():
        if len(seen) > 1:
            report.add("duplicate", f"{key} handled {len(seen)} times: {seen}")
        if key not in issued:
            report.add("phantom", f"{key} handled but never issued: {seen[0]}")
    _check_order(report, ordered)
    _check_incarnations(report, ordered)
    return report


def _check_calls(
    report: Report,
    merged: list[dict[str, Any]],
    handled: Mapping[tuple[str, int], list[Record]],
    may_lose: Excuse,
    may_fail: Excuse,
    may_hang: Excuse,
) -> None:
    for call in merged:
        key = (call["sender"], call["seq"])
        if call["ended"] is None:
            if not may_hang(call):
                text = f"{key} to {call['id']} issued at {call['at']} never ended"
                report.add("terminal", text, call)
            continue
        if not call["ok"]:
            report.errors[call["error"]] += 1
            if not may_fail(call):
                report.add("error", f"{key} to {call['id']} ended {call['error']}", call)
            continue
        seen = handled.get(key, [])
        if call["kind"] == "request":
            if not seen:
                text = f"{key} to {call['id']} was answered but never handled"
                report.add("lost", text, call)
            elif all(turn["act"] != call["act"] for turn in seen):
                report.add("lost", f"{key} answered by activation {call['act']}, handled by {seen}")
        elif not seen and not may_lose(call):
            report.add("lost", f"{key} to {call['id']} acknowledged at {call['ended']}", call)


def _check_order(report: Report, ordered: list[Record]) -> None:
    last_seq: dict[tuple[str, str], Record] = {}
    state: dict[tuple[str, int, str], int] = {}
    for turn in ordered:
        stream = (turn["id"], turn["sender"])
        before = last_seq.get(stream)
        if before is not None and turn["seq"] <= before["seq"]:
            report.add(
                "reorder",
                f"{turn['id']}: {turn['sender']} seq {turn['seq']} ({turn['host']}) handled "
                f"after seq {before['seq']} ({before['host']})",
                turn,
            )
        last_seq[stream] = turn
        held = (turn["id"], turn["gen"], turn["sender"])
        expected = state.get(held, 0)
        if turn["prev"] != expected:
            report.add(
                "state",
                f"{turn['id']} gen {turn['gen']} on {turn['host']}: {turn['sender']} seq "
                f"{turn['seq']} saw prev {turn['prev']}, the last handled was {expected}",
            )
        state[held] = turn["seq"]


def _check_incarnations(report: Report, ordered: list[Record]) -> None:
    spans: dict[str, dict[tuple[str, str], Incarnation]] = defaultdict(dict)
    for turn in ordered:
        key = (turn["host"], turn["act"])
        incarnation = spans[turn["id"]].get(key)
        if incarnation is None:
            spans[turn["id"]][key] = Incarnation(
                turn["host"], turn["act"], turn["gen"], turn["start"], turn["end"], 1
            )
        else:
            incarnation.first = min(incarnation.first, turn["start"])
            incarnation.last = max(incarnation.last, turn["end"])
            incarnation.turns += 1
    for spot_id, by_key in spans.items():
        order = sorted(by_key.values(), key=lambda incarnation: incarnation.first)
        report.incarnations[spot_id] = order
        if not order:
            continue
        longest = order[0]  # of those that began before: the one that served longest
        for other in order[1:]:
            if other.first <= longest.last:
                report.add(
                    "overlap",
                    f"{spot_id}: {longest.host}/{longest.act} served until {longest.last:.6f}, "
                    f"{other.host}/{other.act} from {other.first:.6f}",
                )
            if other.last > longest.last:
                longest = other
