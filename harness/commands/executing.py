"""How the commands that run studies (notebook, suite) run them: papermill executes the notebook,
which is handed what the command already decided (its preflight: harness/files/handoff.py), so
that nothing is parsed or checked twice. The notebook's output (the progress lines) is relayed."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from harness.files.handoff import handed_off
from harness.model.config import REPO_DIR

NOTEBOOKS_DIR = REPO_DIR / "notebooks"


def execute(notebook: str, executed: Path, handoff: object, **parameters) -> bool:
    """Execute notebooks/``notebook`` into ``executed`` with ``handoff`` handed on and these
    parameters; False (the error and where the executed notebook is, printed) when a cell
    failed."""
    import papermill

    # papermill relays the notebook's output (the study's progress lines) through logging
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    executed.parent.mkdir(parents=True, exist_ok=True)
    with handed_off(handoff) as path:
        try:
            papermill.execute_notebook(
                str(NOTEBOOKS_DIR / notebook), str(executed),
                parameters={"handoff": str(path), **parameters}, log_output=True,
                progress_bar=False, cwd=str(NOTEBOOKS_DIR))
        except papermill.PapermillExecutionError as exc:
            print(f"error: the notebook failed: {exc.ename}: {exc.evalue}\n"
                  f"executed notebook: {executed}", file=sys.stderr)
            return False
    return True
