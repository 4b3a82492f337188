"""load.json: the typed settings the harness hands the load generator, read back exactly, and
refused with the file named when its version or keys are not this locustfile's."""
import json

import pytest
from locust_settings import load_settings

from harness.model.load_settings import VERSION, LoadSettings, LoadSettingsError


def test_the_settings_read_back_as_written(tmp_path):
    written = load_settings(tmp_path, inflight_steps=(100, 200), open_loop_rates_per_s=(5.0,),
                            headers={"Authorization": "Bearer k"})
    assert LoadSettings.from_json(written.to_json()) == written


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(schema_version=VERSION + 1), "version 3; this locustfile reads version 2"),
    (lambda d: d.update(schema_version=1), "version 1; this locustfile reads version 2"),
    (lambda d: d.pop("schema_version"), "version None"),
    (lambda d: d.update(users_per_s=3), "unknown keys ['users_per_s']"),
    (lambda d: d.pop("seed"), "missing ['seed']"),
    (lambda d: d["load"].pop("users"), "load: unknown keys [], missing ['users']"),
    (lambda d: d.update(load=3), "load: expected an object, got 3"),
])
def test_a_file_of_another_version_or_shape_is_refused_naming_it(tmp_path, change, expected):
    data = json.loads(load_settings(tmp_path).to_json())
    change(data)
    with pytest.raises(LoadSettingsError, match=r"^runs/a/1/load\.json: .*" + expected.replace(
            "[", r"\[").replace("]", r"\]")):
        LoadSettings.from_json(json.dumps(data), "runs/a/1/load.json")
