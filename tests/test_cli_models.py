"""The model options on the command line, and the library they configure.

A bad ``--model``, ``--farm-time-scale``, ``--context-size`` or ``--device`` makes a real
``oam-actors stdio`` (or ``serve``) process exit with status 2 and one line on stderr naming the
option; the library underneath raises :class:`ModelConfigError` naming the field, never
``SystemExit``. A program embedding a bridge gets ``model/status`` from the library.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

from oam_actors.bridge import Bridge, BridgeConfig, ModelStatusExtension, model_extensions
from oam_actors import LocalSystem, ScriptStep, ScriptedModel
from oam_actors.models.errors import ModelConfigError
from oam_actors.models.codecs import RateLimitInfo
from oam_actors.models.coalesce import CoalescingModel
from oam_actors.models.pool import DevicePool, ScheduledModel
from oam_actors.models.proxy import Provider, ProxyBackends, ProxyConfig, RateLimitReport, SharedProxyModel
from oam_actors.models.scheduler import QuotaLimits, QuotaScheduler
from oam_actors.models.setup import MODEL_FORMS, ModelConfig, create_model_setup
from oam_actors.sim import SimConfig
from oam_actors.sim.backends import make_backend
from oam_actors.client import InProcessEndpoint, connect

GUARD = 30.0  # seconds; only so a hung process fails the test


def oam_actors(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OAM_")}
    return subprocess.run([sys.executable, "-m", "oam_actors", *args], input="", capture_output=True, text=True,
                          timeout=GUARD, env={**clean, **(env or {})})


def usage_error(completed: subprocess.CompletedProcess[str]) -> str:
    """The one line a usage error prints (argparse's usage line aside), checked for status 2."""
    lines = [line for line in completed.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert (completed.returncode, completed.stdout, len(lines)) == (2, "", 1), completed.stderr
    assert "Traceback" not in completed.stderr
    return lines[0]


# --- the command line --------------------------------------------------------------------------------


def test_an_unknown_model_exits_2_listing_every_form_including_farm() -> None:
    line = usage_error(oam_actors("stdio", "--model", "foo"))
    assert line.startswith("oam-actors stdio: error: argument --model: unknown model 'foo'")
    for form in ("scripted", "farm:N", "PROVIDER[:BASE_URL][#MODEL]", "openai", "anthropic", "gemini", "antigravity"):
        assert form in line, form


@pytest.mark.parametrize(
    ("args", "env", "option", "says"),
    [
        (["--model", "farm:1", "--farm-time-scale", "0"], {}, "--farm-time-scale", "greater than 0, got '0'"),
        (["--farm-time-scale", "fast"], {}, "--farm-time-scale", "greater than 0, got 'fast'"),
        ([], {"OAM_FARM_TIME_SCALE": "-1"}, "--farm-time-scale", "got '-1'"),  # the environment's default too
        (["--model", "openai#m", "--context-size", "0"], {}, "--context-size", "at least 1, got '0'"),
        (["--device", "ftp://phone:9"], {}, "--device", "must look like http://HOST:PORT"),
        (["--device", "http://127.0.0.1:9", "--device", "HTTP://127.0.0.1:9/"], {}, "--device", "listed twice"),
        (["--model", "farm:0"], {}, "--model", "a farm needs at least one phone"),
        (["--model", "farm:1", "--coalesce-linger", "-1"], {}, "--coalesce-linger", "at least 0, got '-1'"),
    ],
)
def test_a_bad_model_option_exits_2_with_one_line_naming_it(
    args: list[str], env: dict[str, str], option: str, says: str
) -> None:
    line = usage_error(oam_actors("stdio", *args, env=env))
    assert line.startswith(f"oam-actors stdio: error: argument {option}: ") and says in line, line


@pytest.mark.parametrize(("args", "linger"), [([], None), (["--coalesce-linger", "0"], 0.0),
                                             (["--coalesce-linger", "0.25"], 0.25)])
def test_coalesce_linger_is_adaptive_unless_given_and_zero_turns_it_off(args: list[str], linger: float | None) -> None:
    from oam_actors.cli.main import build_parser
    from oam_actors.cli.models import model_config_from_args

    argv = ["stdio", "--model", "farm:2", *args]
    parser, _ = build_parser(argv)
    settings = model_config_from_args(parser.parse_args(argv)).coalesce
    assert settings is not None and settings.linger_seconds == linger and settings.adaptive is (linger is None)


def test_serve_refuses_a_bad_model_before_listening() -> None:
    line = usage_error(oam_actors("serve", "--tcp", "127.0.0.1:0", "--model", "farm"))
    assert line == "oam-actors serve: error: argument --model: 'farm': write farm:N with N phones, e.g. farm:4"


# --- the library ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field", "says"),
    [
        (ModelConfig(model="foo"), "model", MODEL_FORMS),
        (ModelConfig(model="openai"), "model", "names no model"),
        (ModelConfig(model="farm:x"), "model", "write farm:N"),
        (ModelConfig(model="farm:2", farm_time_scale=0.0), "farm_time_scale", "greater than 0"),
        (ModelConfig(model="openai#m", context_size=0), "context_size", "at least 1"),
        (ModelConfig(devices=("http://127.0.0.1:9",), model="farm:1"), "devices", "not both"),
        (ModelConfig(devices=("127.0.0.1:9",)), "devices", "must look like http://HOST:PORT"),
    ],
)
def test_a_config_that_cannot_run_raises_model_config_error_naming_the_field(
    config: ModelConfig, field: str, says: str
) -> None:
    with pytest.raises(ModelConfigError) as raised:
        create_model_setup(config)
    assert raised.value.field == field and says in str(raised.value)


def test_a_proxy_system_model_gets_the_configured_fields_and_its_host_allowed() -> None:
    setup = create_model_setup(ModelConfig(model="openai:http://10.0.0.7:8080/v1#qwen", context_size=2048,
                                           native_tools=True, api_key_env="LOCAL_API_KEY"))
    assert setup.system_model is not None and (setup.pool, setup.cluster, setup.status_model) == (None, None, None)
    model = setup.system_model()
    assert isinstance(model, SharedProxyModel) and model is setup.system_model()  # one model, one quota
    config = model.config
    assert (config.context_size, config.native_tools, config.api_key_env) == (2048, True, "LOCAL_API_KEY")
    assert model.coalesce is not None and model.coalesce.max_items == 10  # the system model coalesces
    plain = create_model_setup(ModelConfig(model="openai:http://10.0.0.7:8080/v1#qwen", coalesce=None))
    assert plain.system_model is not None and plain.system_model().coalesce is None  # type: ignore[attr-defined]
    setup.model_types["openai"]({"type": "openai", "baseUrl": "http://10.0.0.7:8080/v1", "model": "m"}, "model")


def test_sessions_naming_the_system_models_backend_share_its_scheduler_and_the_stated_limits() -> None:
    setup = create_model_setup(ModelConfig(model="openai:http://127.0.0.1:8080/v1#qwen", rpm=120, tpm=60_000,
                                           max_concurrency=4))
    system = setup.system_model()
    named = setup.model_types["openai"]
    same = named({"type": "openai", "baseUrl": "http://127.0.0.1:8080/v1", "model": "qwen", "nativeTools": True},
                 "model")
    other = named({"type": "openai", "baseUrl": "http://127.0.0.1:8080/v1", "model": "other"}, "model")
    assert isinstance(same, SharedProxyModel) and isinstance(other, SharedProxyModel)
    assert same.scheduler is system.scheduler  # type: ignore[attr-defined]  # one quota, other settings
    assert other.scheduler is not same.scheduler  # another model: another quota
    limits = same.limits
    assert (limits.requests_per_window, limits.tokens_per_window, limits.max_concurrency, limits.window_seconds,
            limits.pace_evenly) == (120, 60_000, 4, 60.0, True)


@pytest.mark.parametrize("field", ["rpm", "tpm", "max_concurrency"])
def test_a_stated_limit_below_one_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ModelConfigError) as raised:
        create_model_setup(ModelConfig(model="openai#m", **{field: 0}))
    assert raised.value.field == field


def test_a_simulation_backend_that_cannot_run_raises_model_config_error() -> None:
    cases = {
        "phones": SimConfig(backend="farm", phones=0),
        "device_urls": SimConfig(backend="devices"),
        "proxy": SimConfig(backend="proxy"),
        "backend": SimConfig(backend="cloud"),
    }
    for field, config in cases.items():
        with pytest.raises(ModelConfigError) as raised:
            make_backend(config)
        assert raised.value.field == field


# --- model/status in an embedding program ---------------------------------------------------------------


def bridge_with(system: LocalSystem, model: Callable[[], object], extensions: list[object]) -> Callable[..., Bridge]:
    def make(write: Callable[[bytes], Awaitable[None]]) -> Bridge:
        return Bridge(system, write, config=BridgeConfig(), system_model=model,  # type: ignore[arg-type]
                      extensions=extensions)  # type: ignore[arg-type]

    return make


async def test_an_embedded_bridge_reports_a_farm_pool_through_model_status() -> None:
    setup = create_model_setup(ModelConfig(model="farm:1", farm_time_scale=0.01))
    async with setup.backends, setup.resources, LocalSystem() as system, setup.hosted:
        assert setup.system_model is not None and isinstance(setup.system_model(), CoalescingModel)
        assert isinstance(setup.system_model().backend, DevicePool)  # type: ignore[attr-defined]
        # It coalesces in the farm's time: its adaptive linger is a phone second, 0.01 s here.
        assert setup.system_model().settings.time_scale == 0.01  # type: ignore[attr-defined]
        async with connect(InProcessEndpoint(bridge_with(system, setup.system_model, model_extensions(setup)))) as client:
            await client.call("session/create", {"session": "guard"})
            await client.call("session/respond", {"session": "guard", "prompt": "Good morning!"})
            status = await client.call("model/status")
    statistics = status["statistics"]
    assert [(d["name"], d["state"], d["ok"]) for d in statistics["devices"]] == [("phone1", "ready", 1)]
    assert statistics["stepsOk"] == 1 and status["availability"]["available"] is True
    assert (statistics["coalescing"]["items"], statistics["coalescing"]["passthrough"]) == (0, 1)  # a turn: alone


async def test_model_status_serves_any_model_with_statistics() -> None:
    scheduled = ScheduledModel(ScriptedModel(fallback=ScriptStep.template("Aye.")), QuotaScheduler(QuotaLimits()))
    async with LocalSystem() as system:
        async with connect(InProcessEndpoint(bridge_with(system, lambda: scheduled, [ModelStatusExtension(lambda: scheduled)]))) as c:
            await c.call("session/create", {"session": "guard"})
            assert (await c.call("session/respond", {"session": "guard", "prompt": "Hi"}))["text"] == "Aye."
            status = await c.call("model/status")
    assert status["statistics"]["admitted"] == 1
    assert status["availability"] == (await scheduled.availability()).to_wire()


def test_model_status_comes_with_a_pool_only() -> None:
    assert [type(e) for e in model_extensions(create_model_setup(ModelConfig(model="farm:1")))] == [ModelStatusExtension]
    assert model_extensions(create_model_setup(ModelConfig(model="scripted"))) == []
    assert model_extensions(create_model_setup(ModelConfig(model="openai#m"))) == []


async def test_a_shared_proxy_cools_its_scheduler_down_on_a_429_report() -> None:
    async with ProxyBackends() as backends:
        model = backends.shared(ProxyConfig(provider=Provider.OPENAI, model="m"))
        hook = model.scheduled.model.on_rate_limit  # type: ignore[attr-defined]
        assert hook is not None and (await model.statistics()).throttles == 0
        hook(RateLimitReport(status=429, info=RateLimitInfo(), retry_after=5.0))
        assert (await model.statistics()).throttles == 1
