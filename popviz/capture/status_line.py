"""``popviz capture --emulate`` on a terminal: the emulator's progress as one live status line.

The emulated script writes plain progress lines (:mod:`popviz.emulator.progress`), which
``capture.log`` keeps as they are. On a terminal, its heartbeats (``popviz emulator: ... (12 s)``)
replace each other on one line instead of scrolling: each is drawn over the last, and anything
else the command prints (stdout or stderr) first clears it and then stays.
"""

from __future__ import annotations

import re
import threading
from typing import IO

PREFIX = b"popviz emulator: "
HEARTBEAT = re.compile(rb"^popviz emulator: .*\(\d+ s\)$")
CLEAR = b"\r\x1b[2K"


class StatusLine:
    """Writes the child's output to the terminal, heartbeats in place (see the module)."""

    def __init__(self, err: IO[bytes], width: int) -> None:
        self.err = err
        self.width = max(20, width)
        self.lock = threading.Lock()
        self.shown = False
        self.pending = b""

    def write(self, sink: IO[bytes], chunk: bytes, from_stderr: bool) -> None:
        """``chunk`` of the child's stdout or stderr, to ``sink`` (raises what the sink raises)."""
        if not from_stderr:
            with self.lock:
                self._clear()
                sink.write(chunk)
                sink.flush()
            return
        self.pending += chunk
        while (end := self.pending.find(b"\n")) >= 0:
            line, self.pending = self.pending[:end], self.pending[end + 1:]
            self._line(line)
        # a partial line goes out at once, unless it may be the start of a heartbeat
        if self.pending and not (self.pending.startswith(PREFIX) or PREFIX.startswith(self.pending)):
            self._plain(self.pending)
            self.pending = b""

    def close(self) -> None:
        """The child is done: what is left stays on the screen; the status line goes."""
        with self.lock:
            self._clear()
            if self.pending:
                self.err.write(self.pending)
                self.err.flush()
                self.pending = b""

    # -- internals (the lock held by the callers of _clear)
    def _line(self, line: bytes) -> None:
        if HEARTBEAT.match(line.rstrip(b"\r")):
            text = line.rstrip(b"\r")
            if len(text) > self.width - 1:
                text = text[:self.width - 4] + b"..."
            with self.lock:
                self.err.write(CLEAR + text)
                self.err.flush()
                self.shown = True
        else:
            self._plain(line + b"\n")

    def _plain(self, data: bytes) -> None:
        with self.lock:
            self._clear()
            self.err.write(data)
            self.err.flush()

    def _clear(self) -> None:
        if self.shown:
            self.err.write(CLEAR)
            self.err.flush()
            self.shown = False


__all__ = ["StatusLine"]
