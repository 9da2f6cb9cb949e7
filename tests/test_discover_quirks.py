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


def test_profile_older_than_the_run_record_warns(tmp_path, monkeypatch):
    import json
    import os
    import sys

    from conftest import FAKE_PVA

    monkeypatch.syspath_prepend(str(FAKE_PVA))
    sys.modules.pop("pva", None)
    import pva

    from popviz.sources.discover import load

    for engine in ("training", "inference"):
        (tmp_path / engine).mkdir()
        pva.write_profile(tmp_path / engine / "profile.pop")
    (tmp_path / "popviz-run.json").write_text(json.dumps(
        {"status": "finished", "started_at": "2026-01-02T00:00:00+00:00"}), encoding="utf-8")
    old = 1767225600  # 2026-01-01T00:00:00Z: restored from an executable cache
    os.utime(tmp_path / "training" / "profile.pop", (old, old))
    os.utime(tmp_path / "inference" / "profile.pop", (old + 2 * 86400, old + 2 * 86400))
    warnings = load(tmp_path).warnings
    assert len(warnings) == 1
    assert warnings[0].startswith("training: ")
    assert "is older than the run recorded in popviz-run.json" in warnings[0]
    sys.modules.pop("pva", None)


def test_an_unreadable_run_record_is_a_warning_not_silence(tmp_path):
    from popviz import testing
    from popviz.sources.bundle import write_bundle
    from popviz.sources.discover import load

    write_bundle(testing.pipeline_report([1000, 1000]), tmp_path / "training")
    (tmp_path / "popviz-run.json").write_text("{bad", encoding="utf-8")
    reports = load(tmp_path)
    (warning,) = reports.warnings  # named with its directory: the run may be one of several
    assert warning.endswith(
        f"{tmp_path.name}/popviz-run.json: unreadable (not a JSON object, or over 16 MiB); the capture's command, "
        "status and timings are unknown and `popviz plan` cannot give its re-run command (the reports themselves "
        "were read)"), warning
