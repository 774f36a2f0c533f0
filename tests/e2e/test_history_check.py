"""The relocation history checker (tests/e2e/history_check.py) is trusted only after it has been
seen to fail: a clean history passes, and a planted loss, duplicate, reorder, overlap, stale
state, hung call and unexpected error are each reported under their own name."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import history_check


def clean_run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two senders, one Spot that moves from host a to host b between seq 2 and seq 3 of
    sender s1 (the same generation, a new activation, the state carried): turns and calls."""
    turns: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    clock = 0.0
    plan = [("s1", 1, "a"), ("s2", 1, "a"), ("s1", 2, "a"), ("s1", 3, "b"), ("s2", 2, "b")]
    last: dict[str, int] = {}
    for sender, seq, host in plan:
        kind = "request" if (sender, seq) == ("s1", 2) else "send"
        act = f"{host}-1"
        lines.append({"phase": "issue", "sender": sender, "seq": seq, "id": "r", "kind": kind})
        lines[-1]["at"] = clock
        turns.append(
            {
                "id": "r",
                "gen": 7,
                "host": host,
                "act": act,
                "sender": sender,
                "seq": seq,
                "kind": kind,
                "prev": last.get(sender, 0),
                "start": clock + 0.1,
                "end": clock + 0.2,
            }
        )
        last[sender] = seq
        answer = {"host": host, "act": act} if kind == "request" else {}
        lines.append({"phase": "end", "sender": sender, "seq": seq, "ok": True, **answer})
        lines[-1]["at"] = clock + 0.3
        clock += 1.0
    return turns, lines


def violations(report: history_check.Report) -> set[str]:
    return set(report.violations)


def test_a_clean_history_passes() -> None:
    turns, lines = clean_run()
    report = history_check.check(turns, lines)
    assert set() == violations(report), report.summary()
    assert ["a", "b"] == report.hosts_of("r")
    assert (5, 5) == (report.turns, report.calls)


def test_a_lost_acknowledged_send_is_reported_unless_excused() -> None:
    turns, lines = clean_run()
    lost = [turn for turn in turns if (turn["sender"], turn["seq"]) != ("s2", 2)]
    report = history_check.check(lost, lines)
    assert {"lost"} == violations(report)
    assert [("s2", 2)] == [(c["sender"], c["seq"]) for c in report.offenders["lost"]]
    excused = history_check.check(lost, lines, may_lose=lambda call: call["sender"] == "s2")
    assert set() == violations(excused)


def test_an_answered_request_never_handled_is_lost_even_when_sends_may_be() -> None:
    turns, lines = clean_run()
    lost = [turn for turn in turns if (turn["sender"], turn["seq"]) != ("s1", 2)]
    three = next(turn for turn in lost if (turn["sender"], turn["seq"]) == ("s1", 3))
    three["prev"] = 1  # the Spot's state saw s1's seq 1 last: consistent with the loss
    report = history_check.check(lost, lines, may_lose=lambda _call: True)
    assert {"lost"} == violations(report)


def test_an_answer_from_another_activation_is_reported() -> None:
    turns, lines = clean_run()
    for line in lines:
        if line.get("act") == "a-1" and line["phase"] == "end":
            line["act"] = "b-1"
    assert {"lost"} == violations(history_check.check(turns, lines))


def test_a_message_handled_twice_is_a_duplicate() -> None:
    turns, lines = clean_run()
    again = {**turns[0], "start": 10.0, "end": 10.1, "host": "b", "act": "b-1", "prev": 1}
    report = history_check.check([*turns, again], lines)
    assert "duplicate" in violations(report)


def test_a_turn_nobody_issued_is_a_phantom() -> None:
    turns, lines = clean_run()
    extra = {**turns[-1], "sender": "s9", "seq": 1, "prev": 0, "start": 9.0, "end": 9.1}
    assert {"phantom"} == violations(history_check.check([*turns, extra], lines))


def test_one_senders_messages_handled_out_of_order_are_a_reorder() -> None:
    turns, lines = clean_run()
    # s1's seq 3 handled on b before its seq 2 (as if relayed late): swap their times.
    two = next(turn for turn in turns if (turn["sender"], turn["seq"]) == ("s1", 2))
    three = next(turn for turn in turns if (turn["sender"], turn["seq"]) == ("s1", 3))
    two["host"], two["act"] = "b", "b-1"
    two["start"], three["start"] = three["start"] + 0.01, two["start"]
    two["end"], three["end"] = three["end"] + 0.01, two["end"]
    for line in lines:
        if (line["sender"], line["seq"]) == ("s1", 2) and line["phase"] == "end":
            line["host"], line["act"] = "b", "b-1"
    report = history_check.check(turns, lines)
    found = violations(report)
    assert "reorder" in found
    assert "lost" not in found
    assert [two] == report.offenders["reorder"]  # the lower seq, run after the higher one


def test_a_state_that_did_not_travel_is_reported() -> None:
    turns, lines = clean_run()
    for turn in turns:
        if turn["host"] == "b":
            turn["prev"] = 0  # restored empty: the adapter's payload was not applied
    assert {"state"} == violations(history_check.check(turns, lines))


def test_a_fresh_generation_starts_from_an_empty_state() -> None:
    turns, lines = clean_run()
    for turn in turns:
        if turn["host"] == "b":
            turn["gen"], turn["prev"] = 8, 0  # a new incarnation after its owner died
    assert set() == violations(history_check.check(turns, lines))


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.5])
def test_two_activations_serving_at_one_instant_overlap(shift: float) -> None:
    turns, lines = clean_run()
    # Host a's last turn (s1 seq 2) ends after host b's first began.
    two = next(turn for turn in turns if (turn["sender"], turn["seq"]) == ("s1", 2))
    three = next(turn for turn in turns if (turn["sender"], turn["seq"]) == ("s1", 3))
    two["end"] = three["start"] + shift
    assert {"overlap"} == violations(history_check.check(turns, lines))


def test_an_overlap_hidden_behind_a_short_incarnation_is_found() -> None:
    """a serves [0, 10]; b serves [1, 2] and c serves [3, 4]: both overlap a, although
    neighbours in start order b and c do not overlap each other."""
    turns: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    for seq, (host, start, end) in enumerate(
        [("a", 0.0, 0.1), ("b", 1.0, 2.0), ("c", 3.0, 4.0), ("a", 9.9, 10.0)], start=1
    ):
        turn = {"id": "r", "gen": 1, "host": host, "act": host, "sender": "s", "seq": seq}
        turns.append({**turn, "kind": "send", "prev": seq - 1, "start": start, "end": end})
        lines.append({"phase": "issue", "sender": "s", "seq": seq, "id": "r", "kind": "send"})
        lines[-1]["at"] = start
        lines.append({"phase": "end", "sender": "s", "seq": seq, "ok": True, "at": end})
    report = history_check.check(turns, lines)
    assert 2 == len(report.violations["overlap"]), report.summary()


def test_a_call_without_its_end_or_with_two_ends_is_reported() -> None:
    turns, lines = clean_run()
    hung = [line for line in lines if not (line["phase"] == "end" and line["seq"] == 3)]
    report = history_check.check(turns, hung)
    assert {"terminal"} == violations(report)
    excused = history_check.check(turns, hung, may_hang=lambda call: call["seq"] == 3)
    assert set() == violations(excused)
    assert {"terminal"} == violations(history_check.check(turns, [*lines, lines[-1]]))


def test_an_error_is_reported_unless_the_contract_allows_it() -> None:
    turns, lines = clean_run()
    failed = [turn for turn in turns if (turn["sender"], turn["seq"]) != ("s1", 3)]
    for line in lines:
        if (line["sender"], line["seq"]) == ("s1", 3) and line["phase"] == "end":
            line.update(ok=False, error="UNAVAILABLE")
    report = history_check.check(failed, lines)
    assert {"error"} == violations(report)
    assert {"UNAVAILABLE": 1} == report.errors
    allowed = history_check.check(failed, lines, may_fail=lambda call: call["seq"] == 3)
    assert set() == violations(allowed)
    assert {"UNAVAILABLE": 1} == allowed.errors
