"""Identifiers and errors, the first things a zlink_trio application touches.

Run: python examples/identifiers.py
"""

from __future__ import annotations

import zlink_trio as zl


def main() -> None:
    # Convert strings to ids once, at the boundary; a bad id never travels further.
    room = zl.SpotId("room-1")
    print("spot id:", room)
    for bad in ["", "x" * 256]:
        try:
            zl.SpotId(bad)
        except ValueError as error:
            print("refused:", error)

    # Ids of different kinds never compare equal, even with the same text.
    print("SpotId('a') == ActorId('a'):", zl.SpotId("a") == zl.ActorId("a"))

    # A SpotRef names one incarnation of a Spot; its JSON form keeps the generation exact.
    ref = zl.SpotRef("room-1", 2**62, "demo", "node-a")
    print("spot ref json:", ref.to_json())
    assert zl.SpotRef.from_json(ref.to_json()) == ref

    # Errors are classified by kind, never by message text.
    error = zl.ZLinkError(zl.ErrorKind.UNAVAILABLE, "owner node is unreachable")
    if error.kind is zl.ErrorKind.UNAVAILABLE:
        print("kind:", error.kind.name, "number:", int(error.kind))


if __name__ == "__main__":
    main()
