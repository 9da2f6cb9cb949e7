"""Discovery of raw autoReport directories (no capture): quirks real directories have."""

from __future__ import annotations

from popviz.sources.discover import find_engines


def test_lightning_autoreport_dir_with_cache_file_finds_both_engines(tmp_path):
    # Lightning's IPUStrategy(autoreport_dir=...) writes training/ and inference/; an executable
    # cache leaves profile.pop_cache files that are not profiles
    for engine in ("training", "inference"):
        (tmp_path / engine).mkdir()
        (tmp_path / engine / "profile.pop").write_bytes(b"\0" * 4096)
        (tmp_path / engine / "profile.pop_cache").write_bytes(b"\0" * 4096)
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "profile.pop_cache").write_bytes(b"\0" * 4096)
    found = find_engines(tmp_path)
    assert [(e.name, e.kind, e.instance) for e in found] == [("inference", "pva", None),
                                                             ("training", "pva", None)]
