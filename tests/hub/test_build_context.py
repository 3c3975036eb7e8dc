"""The image's build context (what `COPY . .` bakes in) leaves out secrets and local state.

docker-py's .dockerignore matcher is the one `docker build` clients use to assemble the context, so
this holds without a Docker engine.
"""

from __future__ import annotations

from pathlib import Path

from docker.utils.build import exclude_paths

ROOT = Path(__file__).resolve().parents[2]


def _patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_secrets_and_local_state_stay_out_of_the_image(tmp_path):
    tree = {
        # what must go in
        "manage.py": "", "Dockerfile": "", "registry/models.py": "", "templates/base.html": "",
        ".env.example": "SECRET_KEY=", "examples/envs/echo_env/openenv.yaml": "name: echo_env\n",
        # what must not
        ".env": "SECRET_KEY=operator-secret\nHF_TOKEN=hf_operator\n", "prod.env": "HF_TOKEN=hf_prod\n",
        ".env.local": "DATABASE_URL=postgres://u:p@db/x\n", "deploy/.env": "SECRET_KEY=nested\n",
        "deploy/staging.env": "HF_TOKEN=hf_staging\n",
        "var/secret_key": "generated", "var/hub.sqlite3": "", "var/sandbox/venvs/x/bin/python": "",
        ".venv/bin/python": "", ".git/config": "", "registry/__pycache__/models.cpython-312.pyc": "",
    }
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    context = set(exclude_paths(str(tmp_path), _patterns(), dockerfile="Dockerfile"))
    kept = {"manage.py", "Dockerfile", "registry/models.py", "templates/base.html", ".env.example",
            "examples/envs/echo_env/openenv.yaml"}
    assert kept <= context
    leaked = {name for name in tree if name not in kept} & context
    assert leaked == set()
    assert not any(path == "var" or path.startswith(("var/", ".venv", ".git/")) for path in context)


def test_the_image_copies_the_whole_context_after_the_dependencies():
    """The test above matters because the Dockerfile copies everything the context holds."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY . ." in dockerfile
