"""``prefetch``: download a hub dataset once into the data root (the only subcommand that needs
network)."""

from __future__ import annotations

import argparse

from benchmark.core.errors import UsageError


def cmd_prefetch(args: argparse.Namespace) -> int:
    url, hub = prefetch_source(args.dataset)
    why = source_unreachable(url, hub=hub)  # torch-free so far: answers in under 2 s
    if why:
        root = args.data_root or "$FSSL_DATA_ROOT (default ~/.cache/fssl-bench/data)"
        raise UsageError(
            f"cannot fetch {args.dataset}: {why}. Run `python -m benchmark prefetch {args.dataset}` on "
            f"a machine with network and copy its data folder to {root}"
        )
    from benchmark.contracts.registries import DATASETS, load_builtins
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import resolve_data_root

    load_builtins()
    cfg = from_mapping(DATASETS.get(args.dataset), {})
    if not hasattr(cfg, "prefetch"):
        print(f"{args.dataset} ships with its dependency; nothing to fetch")
        return 0
    out = cfg.prefetch(resolve_data_root(args.data_root))
    print(f"saved {args.dataset} to {out}")
    return 0


HF_DEFAULT_ENDPOINT = "https://huggingface.co"


def prefetch_source(name: str) -> tuple[str, bool]:
    """(the URL a dataset's prefetch downloads from, whether it is the HF hub). Hub sets use
    ``HF_ENDPOINT`` (as huggingface_hub does); a set with its own ``source_url`` (COCO) is fetched
    from there. Torch-free."""
    import os

    import benchmark.data.datasets
    import benchmark.data.hub_datasets  # noqa: F401 - registers the data-root datasets
    from benchmark.contracts.registries import DATASETS

    try:
        url = getattr(DATASETS.get(name), "source_url", None)
    except KeyError:  # not a data-root set: the registry names the problem once the command goes on
        url = None
    return (url, False) if url else (os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT, True)


def source_unreachable(url: str, *, hub: bool = True, timeout: float = 1.5) -> str | None:
    """Why ``url`` cannot be reached, or None: the hub's offline switches (hub sources only), else
    no TCP connection within ``timeout`` seconds to the proxy that serves the URL's scheme
    (``HTTPS_PROXY`` / ``HTTP_PROXY``, unless ``NO_PROXY`` exempts the host) or, without one, to the
    host itself. A fetch that would hang or retry for tens of seconds is refused in under two; a
    proxy-only network is not refused."""
    import os
    import socket
    import urllib.parse
    import urllib.request

    if hub:
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
                return f"the hub is switched off ({var}={os.environ[var]})"
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
        what = f"the proxy {host}:{port} (for {parts.hostname})"
    else:
        what = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{what} is unreachable ({exc.strerror or type(exc).__name__})"
