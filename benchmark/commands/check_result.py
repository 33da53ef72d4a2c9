"""One check's outcome in ``check-method``'s report (benchmark.commands.check_method); its own module
so that the checks kept elsewhere (benchmark.commands.live_settings) import it without an import
circle."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "fail"


__all__ = ["CheckResult"]
