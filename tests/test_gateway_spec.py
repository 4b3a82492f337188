"""gateway.toml is read strictly: unknown placeholders and bad kinds are errors up front."""
import pytest

from harness.model.config import GATEWAYS_DIR, known_gateways
from harness.model.gateway_spec import GatewaySpecError, load_gateway_spec, render


def write(tmp_path, name, text, files=()):
    d = tmp_path / name
    d.mkdir()
    (d / "gateway.toml").write_text(text)
    for fname, content in files:
        (d / fname).write_text(content)
    return tmp_path


BASE = 'schema_version = 1\nname = "x"\nkind = "competitor"\n'


def test_every_shipped_gateway_loads():
    names = known_gateways(GATEWAYS_DIR)
    assert {"direct", "nginx"} <= set(names)
    for name in names:
        spec = load_gateway_spec(name)
        assert spec.name == name and len(spec.toml_sha256) == 64


def test_direct_has_no_process_and_nginx_has_one():
    assert not load_gateway_spec("direct").has_process
    nginx = load_gateway_spec("nginx")
    assert nginx.has_process and nginx.start_files[0].output == "nginx.conf"


def test_unknown_placeholder_rejected(tmp_path):
    d = write(tmp_path, "x", BASE + '[start]\ncommand = ["run", "{{prot}}"]\n')
    with pytest.raises(GatewaySpecError, match="unknown placeholder"):
        load_gateway_spec("x", d)


def test_unknown_placeholder_in_template_rejected(tmp_path):
    d = write(tmp_path, "x", BASE + '[start]\ncommand = ["run"]\n[[start.files]]\n'
              'template = "c.tmpl"\noutput = "c"\n', files=[("c.tmpl", "listen {{nope}};")])
    with pytest.raises(GatewaySpecError, match="nope"):
        load_gateway_spec("x", d)


def test_bad_kind_and_name(tmp_path):
    d = write(tmp_path, "x", 'schema_version = 1\nname = "x"\nkind = "fast"\n')
    with pytest.raises(GatewaySpecError, match="kind"):
        load_gateway_spec("x", d)
    d2 = tmp_path / "other"
    write(d2.parent, "y", BASE)
    with pytest.raises(GatewaySpecError, match="folder name"):
        load_gateway_spec("y", tmp_path)


def test_port_without_process_rejected(tmp_path):
    d = write(tmp_path, "x", BASE + '[request]\nbase_url = "http://127.0.0.1:{{port}}"\n')
    with pytest.raises(GatewaySpecError, match="starts nothing"):
        load_gateway_spec("x", d)


def test_not_runnable_is_kept_with_reason(tmp_path):
    d = write(tmp_path, "x", BASE + 'runnable = false\nnot_runnable_reason = "build fails: E1"\n'
              '[request]\nbase_url = "http://127.0.0.1:{{port}}"\n')
    spec = load_gateway_spec("x", d)
    assert not spec.runnable and spec.not_runnable_reason == "build fails: E1"


def test_render_strict():
    assert render("a {{port}} b {{ port }}", {"port": 5}) == "a 5 b 5"
    assert render("$remote_addr {x}", {}) == "$remote_addr {x}"
    with pytest.raises(GatewaySpecError):
        render("{{port}}", {})


def test_a_tilde_name_is_a_second_copy_of_the_same_folder():
    a, b = load_gateway_spec("nginx"), load_gateway_spec("nginx~aa")
    assert b.name == "nginx~aa" and b.directory == a.directory and b.cache_dir == a.cache_dir
    assert b.start_command == a.start_command and b.toml_sha256 == a.toml_sha256


@pytest.mark.parametrize("text,message", [
    ('[ready]\ntimout_s = 5\n', "[ready] timout_s: unknown key; allowed: path, status, timeout_s"),
    ('colour = "red"\n', "colour: unknown key"),
    ('[ready]\ntimeout_s = "soon"\n', "[ready] timeout_s: expected a number, got 'soon'"),
    ('[start]\ncommand = "run.sh"\n', "[start] command: expected a list of strings, got 'run.sh'"),
    ('[request]\nheaders = { X = 1 }\n', "[request.headers] X: expected a string, got 1"),
    ('[features.alias]\nmodle = "m"\n', "[features.alias] modle: unknown key"),
    ('[[start.files]]\ntemplate = "t"\n', "[start.files[0]] output: missing"),
    ('[start]\nstop_signal = "SIGNOPE"\n', "[start] stop_signal: not a signal name"),
])
def test_unknown_keys_and_wrong_types_name_the_file_table_and_key(tmp_path, text, message):
    d = write(tmp_path, "x", BASE + text)
    with pytest.raises(GatewaySpecError) as info:
        load_gateway_spec("x", d)
    assert str(info.value).startswith(str(d / "x" / "gateway.toml")) and message in str(info.value)


# --- [resilience] --------------------------------------------------------------------------------

STARTED = (BASE + '[start]\ncommand = ["run", "{{run_dir}}/a.conf"]\nenv = { A = "1", B = "2" }\n'
           '[[start.files]]\ntemplate = "a.tmpl"\noutput = "a.conf"\n'
           '[[start.files]]\ntemplate = "b.tmpl"\noutput = "b.conf"\n'
           '[request]\nmodel = "m"\nheaders = { Authorization = "k", X = "x" }\n')
TEMPLATES = [("a.tmpl", "a {{upstream_url}}"), ("b.tmpl", "b"),
             ("a.recommended.tmpl",
              "a {{upstream_url}}{{#standby}} {{standby_url}} {{standby_host}}:{{standby_port}}{{/standby}}")]


def test_recommended_replaces_files_and_merges_env_headers_and_model(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\n'
              'files = [{ template = "a.recommended.tmpl", output = "a.conf" }]\n'
              'headers = { X = "y", "x-config" = "{{#standby}}{{standby_url}}{{/standby}}" }\nenv = { B = "3" }\n'
              'model = "m-fallbacks"\n', files=TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.configured("shipped") == (spec, "")
    run, note = spec.configured("recommended")
    assert note == ""
    assert [(f.template, f.output) for f in run.start_files] == [("a.recommended.tmpl", "a.conf"),
                                                                 ("b.tmpl", "b.conf")]
    assert run.start_env == {"A": "1", "B": "3"} and run.model == "m-fallbacks"
    assert run.headers == {"Authorization": "k", "X": "y", "x-config": "{{#standby}}{{standby_url}}{{/standby}}"}
    assert run.request_plan().headers == run.headers and run.toml_sha256 == spec.toml_sha256


def test_recommended_without_model_keeps_the_request_model(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\nenv = { C = "4" }\n', files=TEMPLATES)
    run, note = load_gateway_spec("x", d).configured("recommended")
    assert note == "" and run.model == "m" and run.start_files[0].template == "a.tmpl"
    assert run.start_env == {"A": "1", "B": "2", "C": "4"}


def test_unconfigurable_and_undeclared_run_as_shipped_with_the_reason(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience]\nunconfigurable = "it has no retries"\n',
              files=TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.configured("recommended") == (spec, "it has no retries")
    undeclared = STARTED.replace('"x"', '"y"')
    plain = load_gateway_spec("y", write(tmp_path, "y", undeclared, files=TEMPLATES))
    assert plain.configured("recommended") == (plain, "no recommended configuration declared")
    direct = load_gateway_spec("direct")
    assert direct.configured("recommended")[1].startswith("the client calls the provider itself")


def test_sluice_recommends_its_resilient_template():
    spec = load_gateway_spec("sluice")
    run, note = spec.configured("recommended")
    assert note == "" and [f.template for f in run.start_files] == ["resilient.toml.tmpl"]
    assert "{{standby_url}}" in (spec.directory / "resilient.toml.tmpl").read_text()


@pytest.mark.parametrize("text,message", [
    ('[resilience]\nunconfigurable = "no"\n[resilience.recommended]\nmodel = "m"\n', "not both or neither"),
    ('[resilience]\n', "not both or neither"),
    ('[resilience]\nunconfigurable = " "\n', "say why"),
    ('[resilience.recommended]\nfiles = [{ template = "b.tmpl", output = "c.conf" }]\n',
     "output 'c.conf' replaces no [[start.files]] output (they are: a.conf, b.conf)"),
    ('[resilience.recommended]\nfiles = [{ template = "gone.tmpl", output = "a.conf" }]\n',
     "resilience.recommended.files template 'gone.tmpl' does not exist"),
    ('[resilience.recommended]\nfiles = [{ template = "bad.tmpl", output = "a.conf" }]\n',
     "unknown placeholder '{{standby}}'"),
    ('[resilience.recommended]\nenv = { K = "{{nope}}" }\n', "unknown placeholder '{{nope}}'"),
    ('[resilience.recommended]\nretries = 3\n', "[resilience.recommended] retries: unknown key"),
    ('[resilience]\nrecomended = {}\n', "[resilience] recomended: unknown key"),
    ('[resilience.recommended]\nheaders = { X = 1 }\n', "[resilience.recommended.headers] X: expected a string"),
])
def test_bad_resilience_tables_name_the_problem(tmp_path, text, message):
    d = write(tmp_path, "x", STARTED + text, files=[*TEMPLATES, ("bad.tmpl", "{{standby}}")])
    with pytest.raises(GatewaySpecError) as info:
        load_gateway_spec("x", d)
    assert str(info.value).startswith(str(d / "x" / "gateway.toml")) and message in str(info.value)


# --- no phantom providers ----------------------------------------------------------------------

def _run_values(standby: bool) -> dict:
    values = dict(port=1, listen_host="127.0.0.1", upstream_url="http://127.0.0.1:2",
                  upstream_host="127.0.0.1", upstream_port=2, run_dir="/r", gateway_dir="/g",
                  cache_dir="/c", repo_dir="/repo", python="py", workers=1, standby=standby)
    if standby:
        values.update(standby_url="http://127.0.0.1:39999", standby_host="127.0.0.1",
                      standby_port=39999)
    return values


def _recommended_texts(spec) -> list[str]:
    r = spec.recommended
    return [*r.headers.values(), *r.env.values(),
            *((spec.directory / f.template).read_text() for f in r.files)]


@pytest.mark.parametrize("name", [n for n in known_gateways(GATEWAYS_DIR)
                                  if load_gateway_spec(n).recommended is not None])
def test_a_recommended_configuration_names_a_standby_only_when_one_runs(name):
    """Without a standby, no configuration may point a second provider at the failing mock."""
    spec = load_gateway_spec(name)
    without = [render(t, _run_values(False)) for t in _recommended_texts(spec)]
    with_standby = [render(t, _run_values(True)) for t in _recommended_texts(spec)]
    assert not any("39999" in t for t in without)
    if any("standby" in t for t in _recommended_texts(spec)):
        assert any("39999" in t for t in with_standby)


def test_a_standby_placeholder_outside_its_section_is_refused(tmp_path):
    """...in version 2; a version-1 folder (a gate base from an older commit) still loads, and
    without a standby its standby placeholders name the mock, as they did then."""
    from harness.run.systems import run_values
    for version in (1, 2):
        folder = tmp_path / f"gw{version}"
        folder.mkdir()
        (folder / "gateway.toml").write_text(
            f'schema_version = {version}\nname = "gw{version}"\nkind = "competitor"\n'
            '[start]\ncommand = ["true", "{{standby_url}}"]\n')
    with pytest.raises(GatewaySpecError, match=r"\{\{standby_url\}\} outside a"):
        load_gateway_spec("gw2", tmp_path)
    old = load_gateway_spec("gw1", tmp_path)
    values = run_values(old, tmp_path, 1, "127.0.0.1", "http://127.0.0.1:2", "127.0.0.1", 2, 1)
    assert render(old.start_command[1], values) == "http://127.0.0.1:2"


def test_sections_are_kept_only_when_true():
    text = "a{{#standby}} b={{standby_port}}{{/standby}} c"
    assert render(text, _run_values(False)) == "a c"
    assert render(text, _run_values(True)) == "a b=39999 c"
