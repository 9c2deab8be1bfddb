"""Injective byte framing shared by the stamp (S6.2) and the cursor binding (S4.3.2)."""

from __future__ import annotations


def uvarint(number: int) -> bytes:
    """LEB128 unsigned varint, as Go's binary.AppendUvarint."""
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        if not number:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def length_prefixed(data: bytes) -> bytes:
    """lp(x) = uvarint(len(x)) ‖ x."""
    return uvarint(len(data)) + data
