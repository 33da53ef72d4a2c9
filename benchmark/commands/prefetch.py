"""``prefetch``: download a hub dataset once into the data root (the only subcommand that needs
network)."""

from __future__ import annotations

import argparse

from benchmark.core.errors import UsageError
from benchmark.core.terminal import printable


def cmd_prefetch(args: argparse.Namespace) -> int:
    if (args.dataset is None) == (args.grid is None):
        raise UsageError("prefetch takes one dataset name or --grid NAME (not both)")
    if args.grid is not None:
        return prefetch_grid(args.grid, args.data_root)
    url, hub = prefetch_source(args.dataset)
    why = source_unreachable(url, hub=hub)  # torch-free so far: answers in under 2 s
    if why:
        root = args.data_root or "$FSSL_DATA_ROOT (default ~/.cache/fssl-bench/data)"
        raise UsageError(
            f"cannot fetch {printable(args.dataset)}: {why}. Run `python -m benchmark prefetch "
            f"{printable(args.dataset)}` on a machine with network and copy its data folder to "
            f"{printable(root)}"
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
    print(f"saved {args.dataset} to {printable(out)}")
    return 0


LOGIN_HOW = (
    "accept its licence on https://huggingface.co/datasets/{hub_id} while logged in, then give this "
    "machine a token: `hf auth login` (or `huggingface-cli login`), or set HF_TOKEN"
)


def prefetch_grid(grid_arg: str, data_root: str | None) -> int:
    """Every dataset grid ``grid_arg`` reads, fetched into the data root: listed first (size, which
    need a login and how to give it), the unreachable source or the missing login refused before
    anything is downloaded, complete sets skipped, each download shown by its library's progress bar
    (an interrupted one resumes), and the ``run`` command printed at the end."""
    from benchmark.commands.run import grid_spec
    from benchmark.data.datasets import resolve_data_root
    from benchmark.launchers.preflight import download_size, format_bytes, grid_data_needs

    spec = grid_spec(grid_arg)
    root = resolve_data_root(data_root)
    needs = grid_data_needs(spec, data_root)
    todo = [n for n in needs if not n.available and n.fetchable]
    print(
        f"grid {printable(repr(spec.name))} reads {len(needs)} dataset(s) under {printable(root)}:"
    )
    for n in needs:
        size = format_bytes(n.download_bytes) if n.download_bytes else "size not stated"
        state = (
            "present" if n.available else ("to fetch" if n.fetchable else "ships with its package")
        )
        login = "; needs a Hugging Face login" if n.gated else ""
        url = getattr(n.config, "source_url", "") or ""
        source = f"HF hub {n.hub_id}" if n.hub_id else url.split("/")[2] if "//" in url else "-"
        print(f"  {n.name:14s} {state:10s} {size:>16s}  {printable(source)}{login}")
    for n in needs:
        if n.gated and not n.available:
            have = "this machine has one" if hub_token_present() else "this machine has none yet"
            print(
                f"  {n.name} needs a Hugging Face login ({have}): {LOGIN_HOW.format(hub_id=n.hub_id)}"
            )
    run = f"python -m benchmark run --grid {printable(grid_arg)}"
    if data_root:
        run += f" --data-root {printable(data_root)}"
    if not todo:
        print(f"nothing to fetch. Next: {run}")
        return 0
    print(f"to download: {download_size(todo)}")
    _refuse_unreachable(todo)
    _refuse_without_login(todo)
    for i, need in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {need.name}", flush=True)
        out = need.config.prefetch(root)
        print(f"[{i}/{len(todo)}] saved {need.name} to {printable(out)}", flush=True)
    print(f"every dataset of grid {printable(repr(spec.name))} is here. Next: {run}")
    return 0


def _refuse_unreachable(todo: list) -> None:
    """The first source that cannot be reached, refused before anything is downloaded (hub sets
    first: their offline switches answer at once)."""
    for need in sorted(todo, key=lambda n: n.hub_id is None):
        url, hub = prefetch_source(need.name)
        why = source_unreachable(url, hub=hub)
        if why:
            raise UsageError(
                f"cannot fetch {need.name}: {why}; nothing was downloaded. Run this command on a "
                "machine with network and copy its data folder here (or point --data-root / "
                "FSSL_DATA_ROOT at it)"
            )


def _refuse_without_login(todo: list) -> None:
    gated = [n for n in todo if n.gated]
    if not gated or hub_token_present():
        return
    need = gated[0]
    raise UsageError(
        f"{need.name} (HF hub {need.hub_id}) is gated and this machine has no Hugging Face token; "
        f"nothing was downloaded. {LOGIN_HOW.format(hub_id=need.hub_id)}, and run this command again"
    )


def hub_token_present() -> bool:
    """Whether huggingface_hub finds a token (HF_TOKEN, or the one `hf auth login` stored)."""
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - datasets depends on it
        return False
    return bool(get_token())


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
