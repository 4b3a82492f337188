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
    assert spec.configured() == (spec, {"resilience": "", "scale": ""})
    run, notes = spec.configured("recommended")
    assert notes == {"resilience": "", "scale": ""}
    assert [(f.template, f.output) for f in run.start_files] == [("a.recommended.tmpl", "a.conf"),
                                                                 ("b.tmpl", "b.conf")]
    assert run.start_env == {"A": "1", "B": "3"} and run.model == "m-fallbacks"
    assert run.headers == {"Authorization": "k", "X": "y", "x-config": "{{#standby}}{{standby_url}}{{/standby}}"}
    assert run.request_plan().headers == run.headers and run.toml_sha256 == spec.toml_sha256


def test_recommended_without_model_keeps_the_request_model(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\nenv = { C = "4" }\n', files=TEMPLATES)
    run, notes = load_gateway_spec("x", d).configured("recommended")
    assert notes["resilience"] == "" and run.model == "m" and run.start_files[0].template == "a.tmpl"
    assert run.start_env == {"A": "1", "B": "2", "C": "4"}


def test_unconfigurable_and_undeclared_run_as_shipped_with_the_reason(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience]\nunconfigurable = "it has no retries"\n',
              files=TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.configured("recommended") == (spec, {"resilience": "it has no retries", "scale": ""})
    undeclared = STARTED.replace('"x"', '"y"')
    plain = load_gateway_spec("y", write(tmp_path, "y", undeclared, files=TEMPLATES))
    assert plain.configured("recommended") == (
        plain, {"resilience": "no recommended configuration declared", "scale": ""})
    direct = load_gateway_spec("direct")
    assert direct.configured("recommended")[1]["resilience"].startswith(
        "the client calls the provider itself")


def test_sluice_recommends_its_resilient_template():
    spec = load_gateway_spec("sluice")
    run, notes = spec.configured("recommended")
    assert notes["resilience"] == "" and [f.template for f in run.start_files] == ["resilient.toml.tmpl"]
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


# --- [scale] and [limits] --------------------------------------------------------------------------

SIZED_TEMPLATES = [*TEMPLATES, ("a.sized.tmpl", "a sized {{workers}}"), ("b.sized.tmpl", "b sized")]


def test_scale_sized_applies_as_resilience_does_and_both_combine(tmp_path):
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\n'
              'files = [{ template = "a.recommended.tmpl", output = "a.conf" }]\nenv = { B = "3" }\n'
              '[scale.sized]\nfiles = [{ template = "b.sized.tmpl", output = "b.conf" }]\n'
              'env = { C = "5" }\nheaders = { Y = "y" }\n', files=SIZED_TEMPLATES)
    spec = load_gateway_spec("x", d)
    sized, notes = spec.configured(scale="sized")
    assert notes == {"resilience": "", "scale": ""}
    assert [f.template for f in sized.start_files] == ["a.tmpl", "b.sized.tmpl"]
    assert sized.start_env == {"A": "1", "B": "2", "C": "5"} and sized.headers["Y"] == "y"
    both, notes = spec.configured("recommended", "sized")
    assert notes == {"resilience": "", "scale": ""}
    assert [f.template for f in both.start_files] == ["a.recommended.tmpl", "b.sized.tmpl"]
    assert both.start_env == {"A": "1", "B": "3", "C": "5"} and both.model == "m"
    # a value other than the variant's runs as shipped, with no note
    assert spec.configured("shipped", "shipped") == (spec, {"resilience": "", "scale": ""})


def test_scale_unconfigurable_and_undeclared_run_as_shipped_with_the_reason(tmp_path):
    d = write(tmp_path, "x", STARTED + '[scale]\nunconfigurable = "it has no connection cap"\n',
              files=TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.configured(scale="sized") == (spec, {"resilience": "", "scale": "it has no connection cap"})
    plain = load_gateway_spec("y", write(tmp_path, "y", STARTED.replace('"x"', '"y"'), files=TEMPLATES))
    assert plain.configured("recommended", "sized")[1] == {
        "resilience": "no recommended configuration declared",
        "scale": "no sized configuration declared"}
    assert load_gateway_spec("direct").configured(scale="sized")[1]["scale"].startswith(
        "the client calls the provider itself")


@pytest.mark.parametrize("sized,replaced", [
    ('files = [{ template = "a.sized.tmpl", output = "a.conf" }]\n', "output 'a.conf'"),
    ('env = { B = "9" }\n', "env B"),
    ('model = "m-sized"\n', "model"),
])
def test_two_variants_replacing_the_same_thing_are_refused_when_both_are_asked(tmp_path, sized,
                                                                             replaced):
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\n'
              'files = [{ template = "a.recommended.tmpl", output = "a.conf" }]\nenv = { B = "3" }\n'
              'model = "m-fallbacks"\n[scale.sized]\n' + sized, files=SIZED_TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.configured("recommended")[1]["resilience"] == ""   # each alone is fine
    assert spec.configured(scale="sized")[1]["scale"] == ""
    with pytest.raises(GatewaySpecError) as info:
        spec.configured("recommended", "sized")
    message = str(info.value)
    assert message.startswith(str(d / "x" / "gateway.toml"))
    assert "[resilience.recommended] and [scale.sized] both replace" in message and replaced in message


def test_a_study_asking_for_both_conflicting_variants_is_refused_before_any_run(tmp_path):
    from harness.model.config import from_profile
    from harness.model.plan import make_plan
    from harness.run.run import instruments
    d = write(tmp_path, "x", STARTED + '[resilience.recommended]\nmodel = "m1"\n'
              '[scale.sized]\nmodel = "m2"\n', files=TEMPLATES)
    config = from_profile("smoke", gateways=["x"], gateways_dir=str(d), resilience="recommended",
                          scale="sized")
    with pytest.raises(GatewaySpecError, match="both replace model"):
        make_plan(config, {"x": load_gateway_spec("x", d)}, instruments())


@pytest.mark.parametrize("text,message", [
    ('[scale]\nunconfigurable = "no"\n[scale.sized]\nmodel = "m"\n', "[scale] needs either"),
    ('[scale]\n', "not both or neither"),
    ('[scale]\nunconfigurable = ""\n', "[scale] unconfigurable: say why"),
    ('[scale.sized]\nfiles = [{ template = "b.tmpl", output = "c.conf" }]\n',
     "[scale.sized] files: output 'c.conf' replaces no [[start.files]] output"),
    ('[scale.sized]\nfiles = [{ template = "gone.tmpl", output = "a.conf" }]\n',
     "scale.sized.files template 'gone.tmpl' does not exist"),
    ('[scale.sized]\nenv = { K = "{{nope}}" }\n', "unknown placeholder '{{nope}}'"),
    ('[scale.sized]\nworkers = 3\n', "[scale.sized] workers: unknown key"),
    ('[limits]\npatterns = ["ok", "bad (group"]\n', "[limits] patterns[1]: not a regular expression"),
    ('[limits]\npatterns = []\n', "[limits] patterns: at least one"),
    ('[limits]\nlogs = ["x.log"]\n', "[limits] patterns: missing (required)"),
    ('[limits]\nlogs = ["../other/x.log"]\npatterns = ["p"]\n', "[limits] logs: '../other/x.log'"),
    ('[limits]\nlogs = ["/var/log/x.log"]\npatterns = ["p"]\n', "is not a file inside the run directory"),
    ('[limits]\npatterns = "p"\n', "[limits] patterns: expected a list of strings"),
])
def test_bad_scale_and_limits_tables_name_the_file_and_key(tmp_path, text, message):
    d = write(tmp_path, "x", STARTED + text, files=TEMPLATES)
    with pytest.raises(GatewaySpecError) as info:
        load_gateway_spec("x", d)
    assert str(info.value).startswith(str(d / "x" / "gateway.toml")) and message in str(info.value)


def test_limits_are_read_as_declared(tmp_path):
    d = write(tmp_path, "x", STARTED + '[limits]\nlogs = ["logs/x-error.log"]\n'
              'patterns = ["are not enough", "Too many open files"]\n', files=TEMPLATES)
    spec = load_gateway_spec("x", d)
    assert spec.limit_logs == ("logs/x-error.log",)
    assert spec.limit_patterns == ("are not enough", "Too many open files")
    assert load_gateway_spec("direct").limit_patterns == ()


def test_every_shipped_declaration_of_scale_and_limits_loads():
    """Each runnable system says how it is sized (a variant or why none), and nginx and Sluice
    what they log at a limit."""
    for name in known_gateways(GATEWAYS_DIR):
        spec = load_gateway_spec(name)
        if spec.runnable:
            assert "scale" in spec.variants or spec.unconfigurable.get("scale"), name
    for name in ("nginx", "sluice"):
        assert load_gateway_spec(name).limit_patterns, name
    nginx = load_gateway_spec("nginx").configured(scale="sized")[0]
    assert [f.template for f in nginx.start_files] == ["nginx.sized.tmpl"]


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
    r = spec.variants["resilience"]
    return [*r.headers.values(), *r.env.values(),
            *((spec.directory / f.template).read_text() for f in r.files)]


@pytest.mark.parametrize("name", [n for n in known_gateways(GATEWAYS_DIR)
                                  if "resilience" in load_gateway_spec(n).variants])
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


@pytest.mark.parametrize("pattern,message", [
    ("requirements*.lock", r"\[key\] files: 'requirements\*.lock' matches no file"),
    ("../x/gateway.toml", r"\[key\] files: '../x/gateway.toml' is not a pattern inside the folder"),
])
def test_a_key_file_pattern_must_match_a_file_of_the_folder(tmp_path, pattern, message):
    d = write(tmp_path, "x", BASE + f'[key]\nfiles = ["{pattern}"]\n', [("requirements.txt", "a==1\n")])
    with pytest.raises(GatewaySpecError, match=message):
        load_gateway_spec("x", d)


def test_the_declared_files_are_what_the_declaration_names():
    """Each shipped system's key covers its templates, the scripts its commands name and its
    install's pins; nothing else of the folder (WHY.md)."""
    assert load_gateway_spec("nginx").declared_files() == (
        "gateway.toml", "install.sh", "nginx.conf.tmpl", "nginx.recommended.tmpl",
        "nginx.sized.tmpl")
    assert load_gateway_spec("tensorzero").declared_files() == (
        "bindport.c", "gateway.toml", "install.sh", "requirements.txt", "serve.py",
        "tensorzero.recommended.tmpl", "tensorzero.toml.tmpl")
    assert load_gateway_spec("direct").declared_files() == ("gateway.toml",)
    # a run reads its variants' templates only when it asks for them, in place of the shipped one
    nginx = load_gateway_spec("nginx")
    assert nginx.read_files() == ("gateway.toml", "install.sh", "nginx.conf.tmpl")
    assert nginx.read_files(scale="sized") == ("gateway.toml", "install.sh", "nginx.sized.tmpl")
    for name in known_gateways(GATEWAYS_DIR):
        spec = load_gateway_spec(name)
        assert "WHY.md" not in spec.declared_files()
        assert set(spec.files_sha256()) == set(spec.declared_files())


def test_a_declared_counted_ready_time_is_read_and_bounded(tmp_path):
    start = '[start]\ncommand = ["run", "{{port}}"]\n'
    d = write(tmp_path, "x", BASE + start + '[ready]\ncounted_timeout_s = 1200\n')
    assert load_gateway_spec("x", d).counted_ready_timeout_s == 1200.0
    assert load_gateway_spec("nginx").counted_ready_timeout_s is None
    for bad in ("0", "100000", '"long"'):
        (d / "x" / "gateway.toml").write_text(BASE + start + f'[ready]\ncounted_timeout_s = {bad}\n')
        with pytest.raises(GatewaySpecError, match=r"\[ready\] counted_timeout_s"):
            load_gateway_spec("x", d)
