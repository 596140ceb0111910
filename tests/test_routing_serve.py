"""``--routes`` end to end: a real ``oam-actors serve`` process routing between a simulated farm
and an OpenAI-compatible provider on loopback; the OpenAI front door's ``x-oam-priority`` header
picks the row (the official SDK as the client); ``model/status`` and ``/metrics`` attribute
steps and spend; a bad route file exits 2 with one line naming the place."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from openai import OpenAI
from provider_servers import ProviderServer, openai_text, stream

from serve_process import HANG_GUARD, ServeProcess, run_serve

USER = [{"role": "user", "content": "Good morning!"}]
PRICE = {"request": 0.01, "input_per_1k": 1.0, "output_per_1k": 2.0}


def route_file(tmp_path: Path, cloud_url: str, **changes: object) -> Path:
    data: dict[str, object] = {
        "backends": {"phones": {"model": "farm:1"},
                     "cloud": {"model": f"openai:{cloud_url}/v1#small", "price": PRICE, "cap": {"day": 5}}},
        "routes": {"dialogue": ["cloud", "phones"], "decision": ["phones", "cloud"], "background": ["phones"]},
        "tenants": {"front": {"owners": ["openai:"]}},
        **changes,
    }
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(data))
    return path


def test_the_openai_front_door_routes_by_its_priority_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with ProviderServer() as cloud:
        cloud.always = stream(openai_text("From the cloud."))
        routes = route_file(tmp_path, cloud.url)
        with ServeProcess(["--routes", str(routes), "--openai", "127.0.0.1:0", "--tcp", "127.0.0.1:0",
                           "--ws", "127.0.0.1:0"]) as server:
            client = OpenAI(base_url=server.openai_urls[0], api_key="x", max_retries=0, timeout=HANG_GUARD)
            dialogue = client.chat.completions.create(model="system", messages=USER)  # type: ignore[arg-type]
            background = client.chat.completions.create(model="system", messages=USER,  # type: ignore[arg-type]
                                                        extra_headers={"x-oam-priority": "background"})
            with server.tcp() as peer:
                status = peer.call("model/status")
            _, _, metrics = server.get("/metrics")
            assert server.stop() == 0
    assert dialogue.choices[0].message.content == "From the cloud."
    assert background.choices[0].message.content not in ("", "From the cloud.") and len(cloud.requests) == 1
    stats = status["statistics"]
    backends = {b["name"]: b for b in stats["backends"]}
    assert stats["routing"] is True and (backends["cloud"]["served"], backends["phones"]["served"]) == (1, 1)
    assert backends["cloud"]["spend"] == pytest.approx(0.01 + 42 / 1000 + 7 * 2 / 1000)  # the provider's usage
    assert (backends["cloud"]["capDay"], backends["cloud"]["reserved"]) == (5, 0)
    assert len(backends["phones"]["statistics"]["devices"]) == 1  # the pool's own record, nested
    assert sorted((s["backend"], s["priority"]) for s in stats["steps"]) == [("cloud", "dialogue"),
                                                                            ("phones", "background")]
    assert [(t["name"], t["served"]) for t in stats["tenants"]] == [("front", 2)]
    assert re.search(r'^oam_route_steps_total\{backend="cloud",priority="dialogue",kind="\w+"\} 1$', metrics, re.M)
    assert re.search(r'^oam_route_steps_total\{backend="phones",priority="background",kind="\w+"\} 1$', metrics, re.M)
    assert re.search(r'^oam_route_spend_cap\{scope="backend",name="cloud",window="day"\} 5$', metrics, re.M)
    assert re.search(r'^oam_route_tenant_steps_total\{tenant="front"\} 2$', metrics, re.M)


def test_a_route_file_naming_an_unknown_backend_exits_2_with_one_line(tmp_path: Path) -> None:
    routes = route_file(tmp_path, "http://127.0.0.1:9", routes={"default": ["phones", "cloud2"]})
    done = run_serve(["--routes", str(routes), "--tcp", "127.0.0.1:0"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"oam-actors serve: error: argument --routes: {routes}: routes.default[1]: unknown backend 'cloud2'\n"


def test_a_backend_whose_model_cannot_run_is_named_by_its_place(tmp_path: Path) -> None:
    routes = route_file(tmp_path, "http://127.0.0.1:9", backends={"phones": {"model": "farm:none"},
                                                                  "cloud": {"model": "scripted"}})
    done = run_serve(["--routes", str(routes), "--tcp", "127.0.0.1:0"])
    assert done.returncode == 2
    assert done.stderr.startswith(f"oam-actors serve: error: argument --routes: {routes}: backends.phones.model: ")
    assert done.stderr.count("\n") == 1


def test_check_routes_prints_the_table_and_exits_0(tmp_path: Path) -> None:
    routes = route_file(tmp_path, "http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-m", "oam_actors", "stdio", "--routes", str(routes), "--check-routes"],
                          capture_output=True, text=True, timeout=HANG_GUARD, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:4] == [f"{routes}: 2 backends, spill 0.5", "  dialogue: cloud -> phones",
                                            "  decision: phones -> cloud", "  background: phones"]
    assert "  backend cloud: openai:http://127.0.0.1:9/v1#small; 0.01/request, 1/1k in, 2/1k out; cap 5/day; " \
           "cooldown 30 s" in done.stdout.splitlines()
