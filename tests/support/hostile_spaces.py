"""Hostile Spaces for the Hub stand-in: broken files (the index must record clear errors and stop nothing) and
markup meant to run in a browser (every page must render it inert). Shared by the sync tests, the page tests
and the demo catalog."""

from registry import manifest as mf

HOSTILE = {
    "evil/yaml_broken": ({"openenv.yaml": b"name: [unclosed\n"}, "manifest.yaml_invalid"),
    "evil/alias_bomb": ({"openenv.yaml": b"a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b]\nname: boom\n"}, "manifest.yaml_invalid"),
    "evil/manifest_list": ({"openenv.yaml": b"- name: x\n"}, "manifest.not_mapping"),
    "evil/no_name": ({"openenv.yaml": b"spec_version: 1\nport: 8000\n"}, "manifest.name_missing"),
    "evil/huge_manifest": ({"openenv.yaml": b"name: big\n" + b"#" * (mf.MAX_MANIFEST_BYTES + 10)}, "manifest.too_large"),
    "evil/latin1_readme": ({"openenv.yaml": b"name: latin\n", "README.md": b"---\ntags: [openenv]\n---\nCaf\xe9\n"}, "readme.not_utf8"),
    "evil/huge_readme": ({"openenv.yaml": b"name: bigreadme\n", "README.md": b"x" * (mf.MAX_README_BYTES + 1)}, "readme.too_large"),
    "evil/tagged_no_manifest": ({"README.md": b"---\ntags: [openenv]\n---\nI am tagged.\n"}, "manifest.missing"),
    "evil/bad_pyproject": ({"openenv.yaml": b"name: badpy\n", "pyproject.toml": b"[project\n"}, "pyproject.toml_invalid"),
    # Valid YAML and TOML whose values Python refuses to convert.
    "evil/no_such_date": ({"openenv.yaml": b"name: date\ncreated: 2024-02-30\n"}, "manifest.yaml_invalid"),
    "evil/huge_int": ({"openenv.yaml": b"name: int\nport: 1" + b"0" * 5000 + b"\n"}, "manifest.yaml_invalid"),
    "evil/huge_toml_int": ({"openenv.yaml": b"name: tint\n", "pyproject.toml": b"[project]\nn = 1" + b"0" * 5000 + b"\n"},
                           "pyproject.toml_invalid"),
    "evil/bad_card_date": ({"openenv.yaml": b"name: card\n", "README.md": b"---\nwhen: 2023-13-45\n---\nHi\n"},
                           "readme.front_matter_invalid"),
}

# Each sets window.__xss (or opens a dialog) if it ever runs: the browser tests watch for both.
XSS = "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">"
SCRIPTED = {
    "evil/readme_script": {
        "openenv.yaml": b"name: readme_script\ndescription: '<b onmouseover=\"window.__xss=3\">hover</b>'\n",
        "README.md": (
            "---\ntags: [openenv, '<img src=x onerror=window.__xss=4>']\n---\n"
            "# Totally normal <script>window.__xss=5</script>\n\n" + XSS + "\n\n"
            "[click me](javascript:window.__xss=6) [also](JaVaScRiPt:alert(7)) "
            "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+) "
            "<iframe src=\"javascript:window.__xss=8\"></iframe><form action=\"https://evil.example/\">"
            "<button>win</button></form><svg onload=\"window.__xss=9\"></svg>"
            "<a href=\"docs/guide.md\">relative</a> ![rel](img/shot.png)\n"
        ).encode(),
    },
    "evil/name_markup": {
        "openenv.yaml": b"name: '<script>window.__xss=10</script>'\ndescription: \"</p><script>window.__xss=11</script>\"\n",
        "README.md": b"---\ntags: [openenv]\n---\nPlain text.\n",
        "pyproject.toml": b"[project]\nname = '<img src=x onerror=window.__xss=12>'\n"
                          b"dependencies = ['openenv-core>=0.2 ; \"<script>\" == \"x\"']\n",
    },
}
