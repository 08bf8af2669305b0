"""zstd text a few frames' worth at a time, with the point of any damage: the decoding both readers share.

A zstd call hands out everything its input piece decodes to, so the input is fed in small pieces
(:func:`zstd_chunks`), and :class:`ZstdMeter` follows the frame and block headers so that a piece never
ends far beyond a block boundary; a corrupt stream raises :class:`ZstdDamage` with the offset, a stream
cut mid-frame :class:`StreamCut`.
"""

from __future__ import annotations

from collections.abc import Iterator

from .compression import ZSTD_MAGIC


class StreamCut(Exception):
    """A compressed stream ends before its end marker."""


class ZstdDamage(Exception):
    """A zstd stream failed to decode in the input that starts at file offset ``at``."""

    def __init__(self, at: int, error: Exception) -> None:
        super().__init__(str(error))
        self.at = at


def zstd_chunks(fh, piece_at) -> Iterator[bytes]:
    """Decompressed text of a zstd file, frame after frame (pzstd and ``cat a.zst b.zst`` write several).

    ``piece_at(offset)`` is how many compressed bytes to feed at that file offset. Raises
    :class:`ZstdDamage` on a corrupt stream and :class:`StreamCut` when it ends mid-frame."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj = dctx.decompressobj()
    meter = ZstdMeter()
    fed = False
    pos = fh.tell()
    while True:
        data = fh.read(piece_at(pos))
        if not data:
            break
        at = pos
        pos += len(data)
        while data:
            # a call returns all the text its input decodes to: feed at most ZstdMeter.BLOCKS blocks at a time
            k = meter.cut(data)
            part = data if k >= len(data) else data[:k]
            try:
                out = dobj.decompress(part)
            except zstandard.ZstdError as exc:
                raise ZstdDamage(at, exc) from exc
            fed = True
            if out:
                yield out
            if dobj.eof:
                rest = dobj.unused_data + data[len(part) :]
                dobj = dctx.decompressobj()  # the next frame, if any
                fed = False
                at = pos - len(rest)
                data = rest if rest.strip(b"\x00") else b""
            else:
                at += len(part)
                data = data[len(part) :]
    if fed:
        raise StreamCut


class ZstdMeter:
    """Follows the frame and block headers of a zstd stream to say how much of the next input to feed so that
    one decompress call decodes at most :attr:`BLOCKS` blocks. A zstd block holds at most 128 KiB of text, but
    one byte (an RLE block) can stand for all of it, so an unmetered 64 KiB of input can be gigabytes of text
    in one call; metered, a call makes at most 4 MiB. Where the stream is not what the format says (garbage,
    padding) it stops counting and lets everything through: the decoder reports that damage itself."""

    BLOCKS = 32
    _MAGIC, _SKIP_LEN, _FHD, _BLOCK, _LOST = range(5)

    def __init__(self) -> None:
        self.state = self._MAGIC
        self.head = b""  # bytes of the header being read (a header may span two inputs)
        self.skip = 0  # bytes to pass before the next header
        self.after = self._MAGIC  # the state after the bytes skipped
        self.checksum = False

    def cut(self, data) -> int:
        """How many leading bytes of ``data`` to feed next (at least one; up to the end of a frame at most);
        the meter moves past them."""
        n, i, blocks = len(data), 0, 0
        while i < n:
            if self.state == self._LOST:
                return n
            if self.skip:
                step = min(self.skip, n - i)
                i += step
                self.skip -= step
                if not self.skip:
                    self.state = self.after
                    if self.state == self._MAGIC:
                        return i  # a frame ends here: the decoder's next frame starts with the next input
                continue
            if self.state == self._BLOCK and not self.head:
                if blocks == self.BLOCKS:
                    return i
                blocks += 1
                if i + 3 <= n:  # the usual case, a whole block header here: read it and skip its block at once
                    h = data[i] | data[i + 1] << 8 | data[i + 2] << 16
                    i += 3
                    kind = (h >> 1) & 3
                    if kind == 3:
                        self.state = self._LOST
                        continue
                    last = h & 1
                    body = (1 if kind == 1 else h >> 3) + (4 if last and self.checksum else 0)
                    if not last and i + body < n:
                        i += body
                        continue
                    self._pass(body, self._MAGIC if last else self._BLOCK)
                    continue
            want = (4, 4, 1, 3)[self.state]
            take = min(want - len(self.head), n - i)
            self.head += bytes(data[i : i + take])
            i += take
            if len(self.head) == want:
                head, self.head = self.head, b""
                self._header(head)
                if self.state == self._MAGIC and not self.skip:
                    return i  # a frame ended with this header
        return n

    def _header(self, head: bytes) -> None:
        if self.state == self._MAGIC:
            if head == ZSTD_MAGIC:
                self.state = self._FHD
            elif head[0] & 0xF0 == 0x50 and head[1:] == b"\x2a\x4d\x18":  # a skippable frame
                self.state = self._SKIP_LEN
            else:
                self.state = self._LOST
        elif self.state == self._SKIP_LEN:
            self._pass(int.from_bytes(head, "little"), self._MAGIC)
        elif self.state == self._FHD:
            d = head[0]
            single, dict_flag, fcs_flag = (d >> 5) & 1, d & 3, d >> 6
            self.checksum = bool((d >> 2) & 1)
            self._pass(
                (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag], self._BLOCK
            )
        else:  # a block header: last block (1 bit), type (2 bits), size (21 bits)
            h = int.from_bytes(head, "little")
            last, kind, size = h & 1, (h >> 1) & 3, h >> 3
            if kind == 3:
                self.state = self._LOST
                return
            after = self._MAGIC if last else self._BLOCK
            self._pass((1 if kind == 1 else size) + (4 if last and self.checksum else 0), after)

    def _pass(self, count: int, after: int) -> None:
        self.state, self.after, self.skip = after, after, count
