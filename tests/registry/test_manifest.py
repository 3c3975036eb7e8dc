"""The pure parsers: every hostile input gives a clear problem, never an exception."""

from pathlib import Path

import pytest

from registry import manifest as mf

CORPUS = Path(__file__).resolve().parents[1] / "data" / "openenv-envs"


def codes(problems):
    return [p.code for p in problems]


def test_manifest_ok():
    text, data, problems = mf.parse_manifest(b"spec_version: 1\nname: echo_env\napp: server.app:app\nport: 8000\n")
    assert problems == []
    assert data == {"spec_version": 1, "name": "echo_env", "app": "server.app:app", "port": 8000}
    assert text.startswith("spec_version")


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"name: [unclosed\n", "manifest.yaml_invalid"),
        (b"- a\n- b\n", "manifest.not_mapping"),
        (b"", "manifest.not_mapping"),
        (b"just a string", "manifest.not_mapping"),
        (b"spec_version: 1\nport: 8000\n", "manifest.name_missing"),
        (b"name: ''\n", "manifest.name_missing"),
        (b"name: 42\n", "manifest.name_missing"),
        (b"name: " + b"x" * 300 + b"\n", "manifest.name_too_long"),
        (b"name: caf\xe9\n", "manifest.not_utf8"),
        (b"name: a\x00b\n", "manifest.binary"),
        (b"name: x\n" + b"#" * (mf.MAX_MANIFEST_BYTES + 1), "manifest.too_large"),
        (b"name: !!python/object/apply:os.system ['true']\n", "manifest.yaml_invalid"),
    ],
)
def test_manifest_problems(raw, code):
    _, data, problems = mf.parse_manifest(raw)
    assert code in codes(problems)
    assert all(p.message for p in problems)


def test_yaml_alias_bomb_is_refused_quickly():
    bomb = b'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    for level in "bcdefghijk":
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n".encode()
    bomb += b"name: bomb\n"
    _, data, problems = mf.parse_manifest(bomb)
    assert data is None
    assert codes(problems) == ["manifest.yaml_invalid"]
    assert "aliases" in problems[0].message


def test_deep_nesting_is_refused():
    _, data, problems = mf.parse_manifest(b"name: x\nv: " + b"[" * 5000 + b"]" * 5000 + b"\n")
    assert data is None and codes(problems) == ["manifest.yaml_invalid"]


def test_yaml_values_become_json_safe():
    _, data, _ = mf.parse_manifest(b"name: x\nreleased: 2026-01-02\n1: one\nnan: .nan\n")
    assert data == {"name": "x", "released": "2026-01-02", "1": "one", "nan": None}


def test_readme_front_matter_and_body():
    raw = b"---\ntitle: Echo\nsdk: docker\ntags:\n  - openenv\n  - demo\n---\n\n# Echo\n\nEchoes **messages** back.\n"
    text, front, body, problems = mf.parse_readme(raw)
    assert problems == []
    assert front == {"title": "Echo", "sdk": "docker", "tags": ["openenv", "demo"]}
    assert body.lstrip().startswith("# Echo")
    assert mf.describe(None, front, body) == "Echoes messages back."
    assert mf.card_tags(front) == ["openenv", "demo"]


def test_readme_without_front_matter_and_broken_front_matter():
    _, front, body, problems = mf.parse_readme(b"# Title\n\nHello there.\n")
    assert front is None and problems == [] and "Hello there." in body
    _, front, body, problems = mf.parse_readme(b"---\ntags: [unclosed\n---\nBody text.\n")
    assert front is None and codes(problems) == ["readme.front_matter_invalid"]
    assert body.strip() == "Body text."


def test_hostile_readme_is_kept_as_text():
    raw = b"---\ntitle: x\n---\n<script>alert(1)</script>\n\nA <b>bold</b> claim.\n"
    text, _, body, problems = mf.parse_readme(raw)
    assert problems == [] and "<script>" in text
    assert "script" not in mf.first_paragraph(body)


def test_pyproject_facts():
    raw = b'[project]\nname = "openenv-echo-env"\ndependencies = ["fastapi", "openenv[core]>=0.2.2", "pydantic"]\n'
    assert mf.parse_pyproject(raw) == ("openenv-echo-env", "openenv[core]>=0.2.2", [])
    raw = b'[project]\nname = "x"\ndependencies = ["OpenEnv_Core >= 0.1"]\n'
    assert mf.parse_pyproject(raw)[1] == "OpenEnv_Core >= 0.1"
    raw = b'[project]\nname = "x"\ndependencies = ["openenvy>=1", 3]\n'
    assert mf.parse_pyproject(raw) == ("x", "", [])
    assert codes(mf.parse_pyproject(b"[project\n")[2]) == ["pyproject.toml_invalid"]
    assert codes(mf.parse_pyproject(b"[tool.x]\na=1\n")[2]) == ["pyproject.no_project"]


def test_description_precedence():
    assert mf.describe({"description": "From manifest"}, {"short_description": "From card"}, "Body") == "From manifest"
    assert mf.describe({}, {"short_description": "From card"}, "Body") == "From card"
    assert mf.describe({}, {}, "![badge](x)\n\n# Heading\n\nFirst [linked](http://x) para.\nstill.\n\nSecond.") == \
        "First linked para. still."
    assert mf.describe({}, {"title": "Only a title"}, "```\ncode\n```\n") == "Only a title"
    long = "word " * 200
    assert len(mf.describe({"description": long}, None, "")) <= mf.MAX_DESCRIPTION_LENGTH


def test_read_package_collects_every_problem():
    facts = mf.read_package({mf.MANIFEST_FILE: None, mf.README_FILE: b"\xff\xfe", mf.PYPROJECT_FILE: b"[x"})
    assert codes(facts.problems) == ["manifest.missing", "readme.not_utf8", "pyproject.toml_invalid"]
    assert facts.manifest is None and facts.manifest_name == ""


def test_content_digest_is_stable_and_sensitive():
    a = mf.content_digest({"a": b"1", "b": b"2"})
    assert a == mf.content_digest({"b": b"2", "a": b"1"})
    assert a != mf.content_digest({"a": b"12", "b": b""})
    assert len(a) == 64


def test_subdomain_matches_openenv_rule():
    assert mf.subdomain_for("openenv/echo_env") == "openenv-echo-env"
    assert mf.subdomain_for("Org/My.Env") == "org-my-env"


@pytest.mark.parametrize("folder", sorted(p.name for p in CORPUS.iterdir()))
def test_every_corpus_package_reads_cleanly(folder):
    files = {name: (CORPUS / folder / name).read_bytes() for name in mf.PACKAGE_FILES}
    facts = mf.read_package(files)
    assert facts.problems == []
    assert facts.manifest_name == facts.manifest["name"]
    assert facts.description, f"{folder} has no description"
    assert facts.package_name
    if folder == "openapp_env":  # installs openenv in its Dockerfile instead, as its pyproject explains
        assert facts.openenv_requirement == ""
    else:
        assert facts.openenv_requirement.lower().startswith("openenv")


def test_values_python_refuses_are_problems_not_crashes():
    for raw in (b"name: d\ncreated: 2024-02-30\n", b"name: i\nport: 1" + b"0" * 5000 + b"\n"):
        _, data, problems = mf.parse_manifest(raw)
        assert data is None and codes(problems) == ["manifest.yaml_invalid"]
        assert "cannot be read" in problems[0].message and "line 2" in problems[0].message
    assert codes(mf.parse_pyproject(b"[project]\nn = 1" + b"0" * 5000 + b"\n")[2]) == ["pyproject.toml_invalid"]
    _, front, _, problems = mf.parse_readme(b"---\nwhen: 2023-13-45\n---\nHi\n")
    assert front is None and codes(problems) == ["readme.front_matter_invalid"]


def test_nul_escapes_never_reach_storage():
    _, data, problems = mf.parse_manifest(b'name: "a\\0b"\n"k\\x00": ["\\0"]\n')
    assert problems == [] and data == {"name": "ab", "k": [""]}
    assert mf.parse_pyproject(b'[project]\nname = "p\\u0000q"\n')[0] == "pq"


def test_markup_removal_is_linear_on_hostile_readmes():
    """A README of unclosed brackets once took quadratic time: 1 MiB of them would stall a sync for hours."""
    import threading

    bodies = ["x " + "[" * mf.MAX_README_BYTES, "[a](" * (mf.MAX_README_BYTES // 4), "[" + "a" * 10 + "](" * 300_000]
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.extend(mf.describe({}, {}, body) for body in bodies), daemon=True)
    worker.start()
    worker.join(timeout=30)  # linear work takes well under a second; quadratic would take hours
    assert not worker.is_alive(), "markup removal did not finish"
    assert all(len(r) <= mf.MAX_DESCRIPTION_LENGTH for r in results) and len(results) == 3
