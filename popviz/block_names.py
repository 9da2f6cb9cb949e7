"""Display names of PopTorch blocks: what the user wrote, so a name maps back to the code.

A block has an *id*, which PopTorch resolves stages with (``Stage("B1")``, ``Stage("0")``): the
``user_id`` of ``BeginBlock``/``Block``, or, without one, PopTorch's automatic ``"0"``, ``"1"``,
... in the order blocks start. Its *display name* is what every output shows:

* the ``user_id`` when the user gave one (it is both id and name);
* otherwise the module paths of the largest modules that ran entirely inside the block, in the
  order they ran, with runs of numbered siblings written as a range: a ``BeginBlock`` on
  ``bert.encoder.layer[0]`` lasting until the next block starts at ``layer[3]`` is
  ``bert.encoder.layer.0-2``; several parts are joined with ``+`` (``encoder.layer.11+pooler``),
  more than three as ``first..last``. Leading private components added by wrappers
  (Lightning's ``_forward_module``, ``torch.compile``'s ``_orig_mod``) are left out;
* ``block N`` for an automatic id when no module ran entirely inside it (operations written
  directly in a ``with poptorch.Block():`` of a ``forward`` or a Lightning step).

Two blocks never share a display name: an automatic one whose name is taken gets ``(block ID)``
appended. Blocks
re-placed by the emulator's ``--split`` are named like automatic ones.

Plain data only (no torch): the capture hooks and the emulator both use it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

MAX_PARTS = 3
"""More parts than this are named ``first..last``."""


def user_path(path: str) -> str:
    """``path`` without the leading private components a wrapper adds (Lightning's
    ``_forward_module.layer1`` -> ``layer1``): the path as the user's own model has it."""
    parts = path.split(".")
    while len(parts) > 1 and parts[0].startswith("_"):
        parts = parts[1:]
    return ".".join(parts)


def module_label(paths: Sequence[str]) -> str:
    """One name for module ``paths`` (in execution order): numbered siblings as ranges
    (``layers.0``, ``layers.1``, ``layers.2`` -> ``layers.0-2``), parts joined with ``+``."""
    groups: list[list] = []  # [prefix, first, last] for numbered runs, [path] otherwise
    for path in (user_path(p) for p in paths):
        head, _, tail = path.rpartition(".")
        if head and tail.isdigit():
            n = int(tail)
            last = groups[-1] if groups else None
            if last is not None and len(last) == 3 and last[0] == head and last[2] + 1 == n:
                last[2] = n
                continue
            groups.append([head, n, n])
        else:
            groups.append([path])
    parts = [g[0] if len(g) == 1 else f"{g[0]}.{g[1]}" if g[1] == g[2] else f"{g[0]}.{g[1]}-{g[2]}"
             for g in groups]
    if len(parts) > MAX_PARTS:
        return f"{parts[0]}..{parts[-1]}"
    return "+".join(parts)


def _ancestors(path: str) -> Iterable[str]:
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        yield ".".join(parts[:i])


def modules_of(block: str, spans: Mapping[str, Collection[str | None]]) -> list[str]:
    """The largest modules that ran entirely inside ``block``: ``spans`` maps each module path
    that ran (``""`` the model itself, in the order they first ran) to the blocks current while
    it ran (None before the first block)."""
    inside = {p for p, blocks in spans.items() if p and set(blocks) == {block}}
    return [p for p in spans if p in inside and not any(a in inside for a in _ancestors(p))]


def display_names(blocks: Sequence[str], automatic: Collection[str],
                  spans: Mapping[str, Collection[str | None]]) -> dict[str, str]:
    """Block id -> display name for ``blocks`` (in order of first start); ``automatic``: the
    ids PopTorch (or ``--split``) made, which are named by their modules."""
    names: dict[str, str] = {}
    used = {b for b in blocks if b not in automatic}  # a user_id is its own name
    for block in blocks:
        if block not in automatic:
            names[block] = block
            continue
        paths = modules_of(block, spans)
        name = module_label(paths) if paths else (f"block {block}" if block.isdigit() else block)
        if name in used:
            name = f"{name} (block {block})"
        used.add(name)
        names[block] = name
    return names


__all__ = ["display_names", "module_label", "modules_of", "user_path"]
