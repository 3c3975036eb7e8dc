"""The discovery catalog's pure module: openenv's digest and identifiers, the cards of our profile and the stock
one, and every way a snapshot is refused (registry.discovery)."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from registry import discovery as d
from registry.pulls import PullTarget, pull_forms

SHA = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "ab" * 32
PUBLISHER = "hub.example.org"
CATALOG_URL = "https://hub.example.org/api/v1/catalog.json"


def space(**facts) -> d.CatalogEnvironment:
    return d.CatalogEnvironment(**{
        "owner": "openenv", "name": "echo_env", "source": "huggingface", "revision": SHA, "display_name": "echo_env",
        "description": "Echoes messages back.", "tags": ("openenv", "docker"), "license": "bsd-3-clause",
        "spec_version": 1, "openenv_requirement": "openenv[core]>=0.2.2",
        "host": "https://openenv-echo-env.hf.space", "subdomain": "openenv-echo-env",
        "page_url": "https://hub.example.org/environments/openenv/echo_env/",
        "verdict": {"outcome": "pass", "revision": SHA, "finished_at": "2026-01-01T00:00:00+00:00"}, **facts})


def folder(name="alpha", **facts) -> d.CatalogEnvironment:
    return d.CatalogEnvironment(**{"owner": "local", "name": name, "source": "local", "revision": DIGEST,
                                   "page_url": f"https://hub.example.org/environments/local/{name}/", **facts})


def build(*environments) -> dict:
    return d.build_snapshot(publisher=PUBLISHER, catalog_url=CATALOG_URL, environments=list(environments))


def redigested(snapshot: dict) -> dict:
    """The snapshot with its digest made right again: only the change under test is wrong with it."""
    return snapshot | {"digest": d.snapshot_digest(snapshot)}


def refusal(snapshot: dict) -> str:
    with pytest.raises(d.SnapshotError) as caught:
        d.parse_snapshot(json.dumps(snapshot).encode())
    return str(caught.value)


# --- digest and identifiers, as openenv computes them ---------------------------------------------------------


def test_the_digest_is_sha256_over_the_snapshot_without_it_in_openenvs_canonical_json():
    snapshot = build(space(), folder())
    payload = {k: v for k, v in snapshot.items() if k != "digest"}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert snapshot["digest"] == "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert d.normalized(snapshot) == snapshot  # everything pydantic would add is already there
    assert d.parse_snapshot(d.snapshot_bytes(snapshot)) == snapshot


def test_the_digest_counts_defaults_as_pydantic_fills_them_and_the_licence_canonical():
    full = build(folder(license="mit", openenv_requirement="openenv>=0.2"))
    assert full["entries"][0]["data"]["license"] == "MIT"
    bare = copy.deepcopy(full)
    for key in ("schema_version", "issues"):
        del bare[key]
    bare["generator"] = {"name": "openenv-hub"}
    entry = bare["entries"][0]
    for key in ("@context", "type", "tags", "capabilities", "representativeQueries"):
        del entry[key]
    del entry["data"]["artifacts"]
    entry["data"]["license"] = "mit"
    entry["data"]["license_url"] = None  # exclude_none: an explicit null is as good as absent
    assert d.snapshot_digest(bare) == d.snapshot_digest(full)
    assert d.normalized(bare) == full


def test_identifiers_are_openenvs_producer_formula_and_republishing_keeps_all_but_the_publisher():
    uri = "https://github.com/acme/envs.git"
    locator = hashlib.sha256(f"{uri}\nenvs/maze".encode()).hexdigest()
    made = d.identifier("acme.org", uri, "envs/maze", SHA)
    assert made == f"urn:air:acme.org:openenv:{locator}:{SHA}"
    assert d.republished(made, PUBLISHER) == f"urn:air:{PUBLISHER}:openenv:{locator}:{SHA}"


def test_the_body_is_what_openenvs_write_catalog_writes():
    snapshot = build(folder())
    body = d.snapshot_bytes(snapshot).decode()
    assert body.endswith("}\n") and body.startswith('{\n  "complete": true')
    assert body == json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- cards: our Hugging Face profile, local folders, stock cards unchanged -------------------------------------


def test_a_space_card_follows_our_hugging_face_profile():
    snapshot = build(space())
    entry = snapshot["entries"][0]
    card, uri = entry["data"], "https://huggingface.co/spaces/openenv/echo_env"
    assert card["source"] == {"provider": "huggingface", "id": "openenv/echo_env", "uri": uri, "path": ".",
                              "revision": SHA}
    assert card["artifact_availability"] == "resolvable"
    assert card["artifacts"] == [{"kind": "git", "uri": uri, "path": ".", "revision": SHA}]
    assert card["owner"] == {"authority": "huggingface.co", "id": "openenv"}
    assert card["license"] == "BSD-3-Clause" and card["license_url"] == f"{uri}/blob/{SHA}/README.md"
    assert card["framework_requirement"] == "openenv[core]>=0.2.2" and card["manifest_spec_version"] == 1
    assert card["interfaces"] == [{"role": "orchestration", "protocol": "openenv"}]
    forms = {f.kind: f.text for f in pull_forms(PullTarget(owner="openenv", name="echo_env", sha=SHA,
                                                           host="https://openenv-echo-env.hf.space"))}
    assert entry["metadata"]["huggingface"] == {"repo_type": "space", "repo_id": "openenv/echo_env", "revision": SHA,
                                                "space_url": forms["running_url"], "pip": forms["pip"]}
    assert entry["metadata"]["openenv-hub"]["environment"] == "openenv/echo_env"
    assert entry["metadata"]["openenv-hub"]["verdict"]["outcome"] == "pass"
    assert entry["identifier"] == d.identifier(PUBLISHER, uri, ".", SHA)
    assert entry["displayName"] == "echo_env" and entry["tags"] == ["docker", "openenv"]
    assert snapshot["generator"] == d.HUB_GENERATOR and snapshot["source"]["provider"] == "openenv-hub"


@pytest.mark.parametrize(("license", "requirement", "expected"), [
    ("Not A Licence", "openenv-core>=0.2", ("other", "README")),  # a free-text licence points at where it is said
    (None, "openenv-core>=0.2", ("unknown", None)),
    ("mit OR apache-2.0", "not a requirement !", ("MIT OR Apache-2.0", "README")),
])
def test_licences_and_requirements_are_read_as_openenv_reads_them(license, requirement, expected):
    card = build(space(license=license, openenv_requirement=requirement))["entries"][0]["data"]
    assert card["license"] == expected[0]
    assert (card.get("license_url") or "").endswith("README.md") == bool(expected[1])
    assert "framework_requirement" not in card  # only a requirement on the openenv package itself


def test_a_local_folder_is_listed_without_its_path_and_without_an_artifact():
    entry = build(folder(license="Not A Licence"))["entries"][0]
    card = entry["data"]
    assert card["source"] == {"provider": "local", "id": "local/alpha", "path": ".", "revision": DIGEST,
                              "uri": "https://hub.example.org/environments/local/alpha/"}
    assert card["artifact_availability"] == "external" and card["artifacts"] == []
    assert card["owner"] == "unknown" and card["license"] == "unknown"  # no public place says which licence
    assert card["description"].startswith("OpenEnv environment local/alpha")  # the package gave none


def stock_entry(path: str, revision: str = SHA, uri: str = "https://github.com/acme/envs.git") -> dict:
    card = {"schema_version": "0.1-draft", "name": path.rsplit("/", 1)[-1], "description": "A maze.",
            "owner": {"authority": "github.com", "id": "acme"},
            "source": {"provider": "github", "id": "acme/envs", "uri": uri, "path": path, "revision": revision},
            "artifact_availability": "resolvable",
            "artifacts": [{"kind": "git", "uri": uri, "path": path, "revision": revision}],
            "license": "MIT", "interfaces": [{"role": "orchestration", "protocol": "openenv"}]}
    return {"@context": d.ARD_CONTEXT, "identifier": d.identifier("acme.org", uri, path, revision),
            "displayName": card["name"], "type": d.MEDIA_TYPE, "description": "A maze.", "data": card,
            "tags": [], "capabilities": [], "representativeQueries": [], "metadata": {"provenance": {}}}


def imported(path: str, **kw) -> d.CatalogEnvironment:
    entry = stock_entry(path, **kw)
    return d.CatalogEnvironment(owner="acme", name=entry["displayName"], source="catalog",
                                revision=entry["data"]["source"]["revision"], imported=entry)


def test_entries_of_one_github_repository_make_a_stock_snapshot_with_their_cards_unchanged():
    snapshot = build(imported("envs/maze"), imported("envs/chess"))
    assert snapshot["generator"] == d.STOCK_GENERATOR
    assert snapshot["source"] == {"provider": "github", "id": "acme/envs", "uri": "https://github.com/acme/envs.git",
                                  "revision": SHA}
    assert snapshot["inventory"] == {"root": "envs", "paths": ["envs/chess", "envs/maze"]}
    assert [e["data"] for e in snapshot["entries"]] == [stock_entry("envs/chess")["data"],
                                                         stock_entry("envs/maze")["data"]]
    assert snapshot["entries"][0]["identifier"] == d.republished(stock_entry("envs/chess")["identifier"], PUBLISHER)
    assert snapshot["entries"][0]["metadata"]["provenance"] == {}  # the publisher's own metadata is kept
    d.check_snapshot(snapshot)
    # Another revision, or any other kind of environment beside them, and it is our profile again.
    assert build(imported("envs/maze"), imported("envs/chess", revision="f" * 40))["generator"] == d.HUB_GENERATOR
    mixed = build(imported("envs/maze"), folder())
    assert mixed["generator"] == d.HUB_GENERATOR and mixed["inventory"]["paths"] == ["acme/maze", "local/alpha"]
    d.check_snapshot(mixed)


def test_complete_only_when_every_environment_is_listed():
    snapshot = build(folder("alpha"), folder("beta", revision=""))
    assert snapshot["complete"] is False and snapshot["inventory"]["paths"] == ["local/alpha", "local/beta"]
    assert [e["metadata"]["openenv-hub"]["environment"] for e in snapshot["entries"]] == ["local/alpha"]
    assert snapshot["issues"] == [{"path": "local/beta", "code": "no_revision", "severity": "error",
                                   "message": "No revision of this environment has been read yet."}]
    assert refusal(snapshot) == ("The snapshot is partial (complete is false): 1 of the 2 environments it "
                                 "inventories are not in it.")
    assert build()["complete"] is True


# --- refusals ---------------------------------------------------------------------------------------------------


def test_a_tampered_snapshot_is_refused_for_its_digest():
    snapshot = build(space(), folder())
    snapshot["entries"][0]["description"] = "Something else entirely."
    message = refusal(snapshot)
    assert message.startswith(f"The snapshot's digest {snapshot['digest']} does not match its content (sha256:")
    assert message.endswith("it was changed after it was made.")


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: s["entries"][0].pop("displayName"),
     "The snapshot does not follow the openenv-hub catalog schema at entries/0: 'displayName' is a required property."),
    (lambda s: s["entries"][0]["data"]["source"].update(provider="gitlab"),
     "The snapshot does not follow the openenv-hub catalog schema at entries/0/data/source/provider: 'gitlab' is not "
     "one of ['github', 'huggingface', 'local']."),
    (lambda s: s.update(generator=d.STOCK_GENERATOR),  # a stock snapshot cannot hold a Space
     "The snapshot does not follow the OpenEnv 0.1-draft catalog schema at source/provider: 'github' was expected."),
    (lambda s: s["entries"][0].update(identifier=s["entries"][0]["identifier"].replace(PUBLISHER, "other.org")),
     "The snapshot breaks a rule of the openenv-hub catalog profile: entry 0 (urn:air:other.org:"),
    (lambda s: s["entries"][0]["data"].update(license="Some Licence"),
     "The snapshot breaks a rule of the openenv-hub catalog profile: a licence is not an SPDX expression"),
    (lambda s: s["entries"][1]["metadata"]["huggingface"].update(revision="f" * 40),
     "The snapshot breaks a rule of the openenv-hub catalog profile: entry 1 ("),
    (lambda s: s["inventory"]["paths"].append("ghost/env"),
     "The snapshot breaks a rule of the openenv-hub catalog profile: the inventory does not account for every"),
    (lambda s: s.update(complete=False),
     "The snapshot breaks a rule of the openenv-hub catalog profile: complete is false but 0 issues are errors."),
])
def test_a_snapshot_that_breaks_its_schema_or_its_profile_is_refused_with_where(change, expected):
    snapshot = build(folder(), space())
    change(snapshot)
    assert refusal(redigested(snapshot)).startswith(expected)


def test_a_stock_snapshot_keeps_to_one_repository():
    snapshot = build(imported("envs/maze"), imported("envs/chess"))
    snapshot["entries"][0]["data"]["source"]["uri"] = "https://github.com/acme/other.git"
    assert "is not under" not in (message := refusal(redigested(snapshot)))
    assert message.startswith("The snapshot breaks a rule of the OpenEnv 0.1-draft catalog profile: entry 0")


@pytest.mark.parametrize(("data", "expected"), [
    (b'{"a": 1, "a": 2}', "The snapshot is not valid JSON: duplicate key 'a'."),
    (b'{"a": NaN}', "The snapshot is not valid JSON: NaN is not a JSON number."),
    (b'\xff', "The snapshot is not valid JSON in UTF-8"),
    (b" " * (d.MAX_SNAPSHOT_BYTES + 1), "The snapshot is larger than 4 MiB."),
])
def test_what_is_not_a_json_snapshot_is_refused(data, expected):
    with pytest.raises(d.SnapshotError, match="^" + expected.replace("(", r"\(").replace(".", r"\.")):
        d.parse_snapshot(data)


def test_our_profile_schema_widens_three_values_of_the_stock_one_and_nothing_else():
    stock = d.stock_schema()
    ours = d.hub_profile_schema(stock)
    changed = {name for name in stock["$defs"] if stock["$defs"][name] != ours["$defs"][name]}
    assert changed == {"EnvironmentSource", "RepositorySource", "Generator"}
    for name in ("EnvironmentSource", "RepositorySource"):
        assert {k: v for k, v in ours["$defs"][name].items() if k != "properties"} == \
               {k: v for k, v in stock["$defs"][name].items() if k != "properties"}
        assert set(ours["$defs"][name]["properties"]) == set(stock["$defs"][name]["properties"])
    assert ours["required"] == [*stock["required"], "generator"]
    assert {k: v for k, v in ours.items() if k not in ("$defs", "required")} == \
           {k: v for k, v in stock.items() if k not in ("$defs", "required")}


def test_the_publisher_is_a_dns_name():
    assert d.publisher_for(configured="", site_url="https://hub.example.org") == "hub.example.org"
    assert d.publisher_for(configured="", site_url="http://127.0.0.1:8000") == d.DEFAULT_PUBLISHER
    assert d.publisher_for(configured="", site_url="http://localhost:8000") == d.DEFAULT_PUBLISHER
    assert d.publisher_for(configured="envs.acme.org", site_url="http://127.0.0.1") == "envs.acme.org"
    with pytest.raises(ValueError, match="not a DNS name"):
        d.publisher_for(configured="not a name", site_url="")
