"""The pinned competitor gateways as declared: every folder under gateways/ whose gateway.toml
says kind = "competitor" has its version, install and reasons (no process starts here; the
competitors at smoke scale: test_competitors.py)."""
import tomllib

import pytest

from harness.model.config import GATEWAYS_DIR
from harness.model.gateway_spec import load_gateway_spec


def _declared_competitors() -> list[str]:
    """Every folder under gateways/ whose gateway.toml declares kind = "competitor", read from
    the file itself (not through the loader under test): a new competitor is tested here the
    moment its folder exists."""
    return sorted(d.name for d in GATEWAYS_DIR.iterdir() if (d / "gateway.toml").is_file()
                  and tomllib.loads((d / "gateway.toml").read_text())["kind"] == "competitor")


COMPETITORS = _declared_competitors()


def test_competitors_are_found():
    assert COMPETITORS, f"no gateway.toml under {GATEWAYS_DIR} declares kind = 'competitor'"


@pytest.mark.parametrize("name", COMPETITORS)
def test_declared_as_competitor_with_reasons(name):
    spec = load_gateway_spec(name)
    assert spec.kind == "competitor"
    assert spec.version_command and spec.version_pattern
    assert spec.install_check and spec.install_command
    assert (GATEWAYS_DIR / name / "WHY.md").is_file()
    assert (GATEWAYS_DIR / name / "install.sh").is_file()


def test_bifrost_is_listed_as_not_runnable_with_the_error_and_command():
    spec = load_gateway_spec("bifrost")
    assert not spec.runnable
    assert "403" in spec.not_runnable_reason
    assert "go install github.com/maximhq/bifrost/transports/bifrost-http@" \
        in spec.not_runnable_command
    pin = (GATEWAYS_DIR / "bifrost" / "module.txt").read_text().strip()
    assert pin.split("@")[1] in spec.not_runnable_command
