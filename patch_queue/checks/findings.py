"""One finding of ``pq check``: a rule, a severity, a place and a one-line message."""

from __future__ import annotations

from dataclasses import asdict, dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, order=True)
class Finding:
    file: str  # path relative to the checked folder (e.g. "npu_ar_model_runner.py")
    line: int  # 1-based; 0 when the finding is about the whole file
    rule: str  # e.g. "import-unresolved"
    severity: str  # ERROR | WARNING
    message: str  # one line, no trailing period needed

    def as_json(self) -> dict[str, object]:
        return asdict(self)  # pq writes every JSON file with its keys sorted

    def render(self, prefix: str = "") -> str:
        """``FILE:LINE: severity: [rule] message``; a finding about the run itself (no file) names pq, as git's
        ``git: warning: ...`` lines do."""
        where = f"{prefix}{self.file}:{self.line}" if self.line else f"{prefix}{self.file}"
        return f"{where or 'pq'}: {self.severity}: [{self.rule}] {self.message}"
