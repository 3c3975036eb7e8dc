"""registry/probing.py: what the workers and `openenv-hub check` share, without Django."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from registry import probing

REPO = Path(__file__).resolve().parents[2]


def test_the_budgets_defaults_are_the_settings_defaults(tmp_path):
    """A check on a publisher's machine is held to what a worker holds it to: with no HUB_* variable set,
    the settings give exactly probing.Budgets()'s defaults."""
    code = ("import django; django.setup(); from registry import probing, runners; "
            "print(runners.budgets() == probing.Budgets(), runners.budgets())")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO),
           "DJANGO_SETTINGS_MODULE": "hub.settings", "HUB_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.startswith("True "), done.stdout + done.stderr


def test_probing_and_folders_import_no_django():
    code = "import sys, registry.probing, registry.folders; print(sorted(m for m in sys.modules if 'django' in m))"
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(REPO)}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_package_from_facts_keeps_only_manifest_problems(tmp_path):
    from registry import folders

    (tmp_path / "openenv.yaml").write_text("name: [oops\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\ndependencies = ['openenv==0.10.0']\n")
    digest, listing = folders.local_package_digest(tmp_path)
    package = probing.Package.from_facts(folders.package_facts(tmp_path), listing)
    assert package.manifest is None and package.openenv_requirement == "openenv==0.10.0"
    assert len(package.manifest_problems) == 1 and "YAML" in package.manifest_problems[0]
    assert [f["path"] for f in package.files] == ["openenv.yaml", "pyproject.toml"] and len(digest) == 64
    assert package.app == "server.app:app"


def test_the_plan_is_read_where_the_manifest_puts_it_and_never_through_a_link_out(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "plans").mkdir(parents=True)
    (pkg / "plans" / "probe.json").write_bytes(b'{"plan_schema_version": "1"}')
    manifest = {"name": "x", "validation": {"execution": {"kind": "openenv_ws", "probe_path": "plans/probe.json"}}}
    assert probing.folder_plan(pkg, manifest) == b'{"plan_schema_version": "1"}'
    assert probing.folder_plan(pkg, {"name": "x"}) is None  # default validation/runtime.json: absent
    secret = tmp_path / "secret.json"
    secret.write_bytes(b"{}")
    (pkg / "validation").mkdir()
    (pkg / "validation" / "runtime.json").symlink_to(secret)
    assert probing.folder_plan(pkg, {"name": "x"}) is None
