"""prefetch's reachability check (issue 32 item 13): it probes the proxy that would carry the
download (HTTPS_PROXY / HTTP_PROXY, NO_PROXY respected) or, without one, the host of HF_ENDPOINT;
COCO is probed at its own host and not gated on the hub's offline switches. Only loopback sockets
are used: no network."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from benchmark.commands.prefetch import prefetch_source, source_unreachable

PROXY_VARS = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
)


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in (*PROXY_VARS, "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture()
def listener() -> Iterator[int]:
    """A loopback port that accepts connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(name: str) -> str | None:
    url, hub = prefetch_source(name)
    return source_unreachable(url, hub=hub)


def test_a_proxy_only_environment_is_not_refused(clean_env, listener: int) -> None:
    # the hub's host does not resolve here (.invalid); only the proxy is reachable
    clean_env.setenv("HF_ENDPOINT", "https://hub.example.invalid")
    clean_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listener}")
    url, hub = prefetch_source("imagenet100")
    assert (url, hub) == ("https://hub.example.invalid", True)
    assert source_unreachable(url, hub=hub) is None


def test_an_unreachable_proxy_is_named(clean_env) -> None:
    port = closed_port()
    clean_env.setenv("https_proxy", f"127.0.0.1:{port}")  # lower case, no scheme: both accepted
    why = source_unreachable("https://hub.example.invalid")
    assert why is not None and f"proxy 127.0.0.1:{port}" in why and "hub.example.invalid" in why


def test_hf_endpoint_is_the_probed_host_and_no_proxy_is_respected(clean_env, listener: int) -> None:
    clean_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener}")
    assert probe("cifar10") is None
    port = closed_port()
    clean_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    clean_env.setenv(
        "HTTP_PROXY", f"http://127.0.0.1:{listener}"
    )  # would answer, but NO_PROXY exempts the host
    clean_env.setenv("NO_PROXY", "127.0.0.1")
    why = probe("cifar10")
    assert why is not None and f"127.0.0.1:{port}" in why and "proxy" not in why


def test_the_hub_offline_switch_refuses_hub_sets(clean_env, listener: int) -> None:
    clean_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener}")
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    assert "switched off" in (probe("tiny_imagenet") or "")


def test_coco_is_probed_at_its_own_host_and_not_gated_on_the_hub(clean_env, listener: int) -> None:
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    url, hub = prefetch_source("coco")
    assert url.startswith("http://images.cocodataset.org/") and hub is False
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{listener}")
    assert source_unreachable(url, hub=hub) is None
