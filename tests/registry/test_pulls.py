"""The pull forms: one pure function, facts in, commands out (the page shows them; the API will too)."""

from __future__ import annotations

from registry.pulls import PullTarget, openenv_derived_subdomain, pull_forms, space_host

SHA = "0123456789abcdef0123456789abcdef01234567"


def forms(**facts) -> dict[str, str]:
    return {f.kind: f for f in pull_forms(PullTarget(**{"owner": "openenv", "name": "echo_env", "sha": SHA, **facts}))}


def test_a_space_gets_every_form_pinned_where_it_can_be():
    f = forms(host="https://openenv-echo-env.hf.space", subdomain="openenv-echo-env")
    assert list(f) == ["running_url", "websocket_url", "client", "pip", "docker", "local_run"]
    assert f["running_url"].text == "https://openenv-echo-env.hf.space"
    assert f["websocket_url"].text == "wss://openenv-echo-env.hf.space/ws"
    assert f["pip"].text == f"pip install git+https://huggingface.co/spaces/openenv/echo_env@{SHA}"
    assert f["docker"].text == "docker pull registry.hf.space/openenv-echo-env:latest"
    assert "follows the Space, not this commit" in f["docker"].note
    assert f"git checkout {SHA}" in f["local_run"].text and "uvicorn server.app:app --port 8000" in f["local_run"].text
    assert 'base_url="https://openenv-echo-env.hf.space"' in f["client"].text
    assert "would guess" not in f["client"].text  # openenv derives the same host: nothing to explain


def test_where_openenv_would_guess_wrong_the_snippet_says_why():
    f = forms(owner="Org", name="My.Env", host="https://org-my-env-4f2a.hf.space")
    assert openenv_derived_subdomain("Org/My.Env") == "org-my-env"
    assert "# AutoEnv would guess https://org-my-env.hf.space; the Hub serves this Space at " \
           "https://org-my-env-4f2a.hf.space." in f["client"].text
    assert 'base_url="https://org-my-env-4f2a.hf.space"' in f["client"].text and "explicitly" in f["client"].note
    assert f["docker"].text == "docker pull registry.hf.space/org-my-env-4f2a:latest"


def test_the_hubs_facts_win_and_a_missing_host_falls_back_to_them():
    assert space_host(PullTarget("a", "b_c", SHA, subdomain="a-b-c")) == "https://a-b-c.hf.space"
    assert space_host(PullTarget("a", "b_c", SHA)) == "https://a-b-c.hf.space"
    assert space_host(PullTarget("a", "b_c", SHA, host="http://evil.example")) == "https://a-b-c.hf.space"
    f = forms(hub="https://hub.example/", app="pkg.server:api", port=9000)
    assert f["pip"].text.startswith("pip install git+https://hub.example/spaces/openenv/echo_env@")
    assert "uvicorn pkg.server:api --port 9000" in f["local_run"].text


def test_names_that_a_shell_would_read_are_quoted():
    f = forms(name="x;rm -rf ~", app="server.app:app")
    assert "git clone 'https://huggingface.co/spaces/openenv/x;rm -rf ~' 'x;rm -rf ~'" in f["local_run"].text
    assert f["pip"].text.startswith("pip install 'git+https://huggingface.co/spaces/openenv/x;rm -rf ~@")
    assert "cd 'x;rm -rf ~'" in f["local_run"].text


def test_a_local_source_gets_local_equivalents_and_hides_its_path_unless_given():
    f = {x.kind: x for x in pull_forms(PullTarget("local", "echo_env", "f" * 64, source="local"))}
    assert list(f) == ["pip", "local_run", "client"]
    assert f["pip"].text == "pip install <the package folder>" and "hub's own machine" in f["pip"].note
    staff = {x.kind: x for x in pull_forms(PullTarget("local", "echo_env", "f" * 64, source="local",
                                                         local_path="/srv/envs/echo env"))}
    assert staff["pip"].text == "pip install '/srv/envs/echo env'"
