"""Which wide Unicode encoding a text file's first bytes are in, if any.

Why: every text format rlwh reads (CSV, JSON, JSON lines) is read as UTF-8, and a file
saved as UTF-16 or UTF-32 (a Windows editor, PowerShell's `>`) otherwise fails with a
byte number and no hint. A byte-order mark says which; without one, NUL bytes beside
ASCII ones do (text rlwh reads never holds NUL).
"""

from __future__ import annotations

UTF8_BOM = b"\xef\xbb\xbf"
_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"), (b"\xff\xfe", "UTF-16LE"),
          (b"\xfe\xff", "UTF-16BE"))


def wide_unicode(head: bytes) -> str | None:
    """'UTF-16LE', 'UTF-16BE', 'UTF-32LE' or 'UTF-32BE' when the bytes are such text, else None."""
    for mark, name in _MARKS:
        if head.startswith(mark):
            return name
    pairs = head[:64]
    if len(pairs) < 4 or b"\x00" not in pairs:
        return None
    if pairs[1:4] == b"\x00\x00\x00" and pairs[0]:
        return "UTF-32LE"
    if pairs[:3] == b"\x00\x00\x00" and pairs[3]:
        return "UTF-32BE"
    if pairs[0] and not pairs[1] and pairs[2] and not pairs[3]:
        return "UTF-16LE"
    if not pairs[0] and pairs[1] and not pairs[2] and pairs[3]:
        return "UTF-16BE"
    return None


class NotUtf8(ValueError):
    """Bytes that are no UTF-8 text: `wide` names their wide encoding, else `byte` is the
    first byte that is no UTF-8 (counted from the bytes' first, a BOM included)."""

    def __init__(self, wide: str | None = None, byte: int = 0, value: int = 0):
        super().__init__(wide or f"byte {byte}")
        self.wide, self.byte, self.value = wide, byte, value


def utf8_text(raw: bytes) -> tuple[str, int]:
    """`raw` as text, a UTF-8 BOM skipped, and the bytes skipped (a byte of the text is
    that many further on in `raw`); NotUtf8 when it is wide Unicode or no UTF-8."""
    wide = wide_unicode(raw)
    if wide is not None:
        raise NotUtf8(wide)
    skip = len(UTF8_BOM) if raw.startswith(UTF8_BOM) else 0
    try:
        return raw[skip:].decode("utf-8"), skip
    except UnicodeDecodeError as exc:
        at = exc.start + skip
        raise NotUtf8(byte=at, value=raw[at]) from exc


def wide_text_said(name: str) -> str:
    """How a message names it, with what to do."""
    return f"{name[:6]} text, not UTF-8 (convert it: iconv -f {name} -t UTF-8)"
