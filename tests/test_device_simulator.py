"""The simulated phone's rules (``PhoneState``, ``plan_stream``, ``PhoneConfig``) at concrete
phone times, without a server; and the CLI's configuration merge."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from oam_actors.cli import device as cli
from oam_actors.cli.argtypes import UsageError
from oam_actors.cli.main import build_parser
from oam_actors.models.device.protocol import (
    CountTokensRequest,
    DoneEvent,
    ErrorEvent,
    FinishReason,
    GenerateRequest,
    MlKitCode,
    ModelStatus,
    TextEvent,
    UnavailableReason,
)
from oam_actors.models.device.simulator import (
    Admission,
    Fault,
    PhoneConfig,
    PhoneState,
    Refusal,
    plan_stream,
)

ASK = GenerateRequest(prompt="What is on the menu?", system_instruction="You are Gorm.")


def admit_all(state: PhoneState, now: float, count: int) -> None:
    for _ in range(count):
        assert isinstance(state.admit(now, ASK), Admission)


def test_36_back_to_back_requests_pass_and_the_37th_is_busy() -> None:
    state = PhoneState(PhoneConfig(), start=0.0)
    for i in range(36):
        assert isinstance(state.admit(i * 1.5, ASK), Admission)
    assert state.admit(54.0, ASK) == Refusal(MlKitCode.BUSY, "The service is currently busy.", 6.0)
    assert isinstance(state.admit(60.0, ASK), Admission)  # the first request left the window
    assert state.statistics().refused == {"BUSY": 1}


def test_the_busy_window_rolls() -> None:
    state = PhoneState(PhoneConfig(quota_requests=3, quota_window_s=60.0), start=0.0)
    admit_all(state, 0.0, 2)
    admit_all(state, 30.0, 1)
    refusal = state.admit(45.0, ASK)
    assert isinstance(refusal, Refusal) and (refusal.code, refusal.retry_after_s) == (9, 15.0)
    admit_all(state, 60.0, 2)  # both t=0 requests expired
    assert isinstance(state.admit(60.0, ASK), Refusal)


def test_a_battery_quota_refuses_with_a_long_delay() -> None:
    state = PhoneState(PhoneConfig(battery_requests=2, battery_code=28, quota_requests=0), start=0.0)
    admit_all(state, 0.0, 2)
    assert state.admit(100.0, ASK) == Refusal(28, "The battery-use quota is exceeded.", 86_300.0)


def test_background_periods_block_inference_but_not_status() -> None:
    state = PhoneState(PhoneConfig(background_periods=((10.0, 20.0),)), start=100.0)
    refusal = state.admit(115.0, ASK)
    assert isinstance(refusal, Refusal) and (refusal.code, refusal.retry_after_s) == (30, None)
    status = state.status(115.0)
    assert (status.status, status.foreground) == (ModelStatus.AVAILABLE, False)
    assert isinstance(state.admit(120.0, ASK), Admission)
    state.set_foreground(False)
    assert isinstance(state.admit(121.0, ASK), Refusal)
    state.set_foreground(None)
    assert isinstance(state.admit(122.0, ASK), Admission)


def test_the_download_runs_from_downloadable_to_available() -> None:
    config = PhoneConfig(status=ModelStatus.DOWNLOADABLE, download_bytes=1000, download_bytes_per_s=100.0)
    state = PhoneState(config, start=0.0)
    assert state.status(0.0).reason is UnavailableReason.MODEL_NOT_READY
    assert state.admit(0.0, ASK) == Refusal(8, "The model is not downloaded yet (downloadable).")
    started = state.download(5.0)
    assert not isinstance(started, Refusal) and started.status is ModelStatus.DOWNLOADING
    progress = state.status(8.0)
    assert (progress.status, progress.bytes_downloaded, progress.total_bytes) == (ModelStatus.DOWNLOADING, 300, 1000)
    assert state.download(9.0).bytes_downloaded == 400  # asking again changes nothing
    done = state.status(15.0)
    assert (done.status, done.reason, done.bytes_downloaded) == (ModelStatus.AVAILABLE, None, None)
    assert isinstance(state.admit(15.0, ASK), Admission)


@pytest.mark.parametrize(("reason", "code"), [
    (UnavailableReason.NOT_ENOUGH_DISK_SPACE, 501), (UnavailableReason.NEEDS_SYSTEM_UPDATE, 604),
    (UnavailableReason.AICORE_UNAVAILABLE, -101), (UnavailableReason.DEVICE_NOT_ELIGIBLE, 8)])
def test_an_unavailable_phone_refuses_with_its_reasons_code(reason: UnavailableReason, code: int) -> None:
    state = PhoneState(PhoneConfig(status=ModelStatus.UNAVAILABLE, unavailable_reason=reason), start=0.0)
    assert (state.status(0.0).status, state.status(0.0).reason) == (ModelStatus.UNAVAILABLE, reason)
    for refusal in (state.admit(0.0, ASK), state.download(0.0), state.count_tokens(0.0, CountTokensRequest("x"))):
        assert isinstance(refusal, Refusal) and refusal.code == code


def test_size_and_emptiness_are_checked_before_the_quota() -> None:
    state = PhoneState(PhoneConfig(input_token_limit=5, quota_requests=1), start=0.0)
    assert state.admit(0.0, GenerateRequest(prompt="x" * 24)).code == MlKitCode.REQUEST_TOO_LARGE
    assert state.admit(0.0, GenerateRequest(prompt="  ")).code == MlKitCode.REQUEST_TOO_SMALL
    assert isinstance(state.admit(0.0, GenerateRequest(prompt="x" * 20)), Admission)


def test_blocked_words_refuse_or_mark_the_admission() -> None:
    config = PhoneConfig(blocked_words={"dragon": 4, "troll": 15, "ogre": 11})
    state = PhoneState(config, start=0.0)
    assert state.admit(0.0, GenerateRequest(prompt="A Dragon!")).code == 4
    assert state.admit(0.0, GenerateRequest(prompt="dragonfly")) == Admission(0, 3, 0, 256)  # whole words only
    assert state.admit(0.0, GenerateRequest(prompt="a troll")).safety_code == 15
    assert state.admit(0.0, GenerateRequest(prompt="hi", system_instruction="an ogre")).safety_code == 11


def test_admissions_count_tokens_cache_the_prefix_and_cap_the_output() -> None:
    state = PhoneState(PhoneConfig(max_output_tokens=100), start=0.0)
    first = state.admit(0.0, GenerateRequest(prompt="12345678", system_instruction="abcd", max_output_tokens=4096))
    second = state.admit(0.0, GenerateRequest(prompt="1234", system_instruction="abcd", max_output_tokens=10))
    assert first == Admission(number=0, input_tokens=3, cached_input_tokens=0, max_output_tokens=100)
    assert second == Admission(number=1, input_tokens=2, cached_input_tokens=1, max_output_tokens=10)
    assert state.count_tokens(0.0, CountTokensRequest("12345678", system_instruction="abcd")) == 3


# --- plan_stream ---------------------------------------------------------------------------------

TEXT = "one two three four"
ADMITTED = Admission(number=0, input_tokens=7, cached_input_tokens=2, max_output_tokens=100)


def test_a_plain_plan_streams_words_then_done() -> None:
    assert plan_stream(TEXT, ADMITTED, None) == [
        TextEvent("one "), TextEvent("two "), TextEvent("three "), TextEvent("four"),
        DoneEvent(input_tokens=7, output_tokens=5, cached_input_tokens=2)]


def test_the_output_cap_truncates_with_max_tokens() -> None:
    events = plan_stream(TEXT, msgspec.structs.replace(ADMITTED, max_output_tokens=2), None)
    assert events[:-1] == [TextEvent("one "), TextEvent("two ")]
    assert events[-1] == DoneEvent(input_tokens=7, output_tokens=2, cached_input_tokens=2,
                                   finish_reason=FinishReason.MAX_TOKENS)


@pytest.mark.parametrize(("safety", "fault", "texts", "code"), [
    (15, None, 2, 15), (None, Fault.GENERATION, 2, 15), (11, None, 4, 11)])
def test_safety_and_generation_errors_end_the_stream(safety: int | None, fault: Fault | None, texts: int,
                                                     code: int) -> None:
    events = plan_stream(TEXT, msgspec.structs.replace(ADMITTED, safety_code=safety), fault)
    assert all(isinstance(e, TextEvent) for e in events[:texts]) and len(events) == texts + 1
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.mlkit_code == code


@pytest.mark.parametrize("fault", [Fault.DISCONNECT, Fault.HANG, Fault.GARBAGE])
def test_transport_faults_sit_half_way(fault: Fault) -> None:
    events = plan_stream(TEXT, ADMITTED, fault)
    assert events[2] is fault and len(events) == 6


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"fault_hang": 0.7, "fault_disconnect": 0.7}, {"malformed_rate": 2.0}, {"time_scale": 0.0},
    {"battery_code": 9}, {"blocked_words": {"x": 9}}, {"max_concurrent": 0}])
def test_invalid_configurations_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(fields, PhoneConfig)


def test_unknown_config_keys_are_errors() -> None:
    with pytest.raises(msgspec.ValidationError, match="quota_reqests"):
        msgspec.json.decode(b'{"quota_reqests": 3}', type=PhoneConfig)


def test_the_cli_merges_the_file_and_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "phone.json"
    path.write_text(json.dumps({"seed": 3, "quota_requests": 10, "model_name": "nano-v2"}))
    argv = ["device", "--simulate", "--config", str(path), "--quota", "5",
            "--block", "dragon", "--block", "troll:15", "--background", "10:20"]
    args = build_parser(argv)[0].parse_args(argv)
    config = cli.config_from_args(args)
    assert (config.seed, config.quota_requests, config.model_name) == (3, 5, "nano-v2")
    assert config.blocked_words == {"dragon": 4, "troll": 15}
    assert config.background_periods == ((10.0, 20.0),)


def test_the_cli_rejects_a_bad_configuration() -> None:
    argv = ["device", "--simulate", "--fault-hang", "0.6", "--fault-garbage", "0.6"]  # sum over 1
    args = build_parser(argv)[0].parse_args(argv)
    with pytest.raises(UsageError, match="invalid phone configuration"):
        cli.config_from_args(args)
