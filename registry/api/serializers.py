"""API representations of the index. The pull forms, the schemas summary and the tags come from the same
functions the pages use (registry.pulls, registry.presenters, registry.selectors), so the two never disagree."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from django.conf import settings
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from registry import presenters
from registry.models import (
    ID_PART,
    Environment,
    Evaluation,
    EvaluationRun,
    IndexProblem,
    OwnerAction,
    Revision,
    ValidationRun,
)
from registry.pulls import pull_forms, pull_target
from registry.selectors import REVISION_SUMMARY_FIELDS, environment_tags, with_yank


def _rfc3339(value: datetime | None) -> str | None:
    """A time as DRF's DateTimeField writes it in this API (ISO 8601 in UTC, written Z), without the field's
    time-zone lookups on every call: a list writes hundreds."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value is not None else None


def _absolute(context: dict, path: str) -> str:
    request = context.get("request")
    return request.build_absolute_uri(path) if request else path


def _environment_url(context: dict, viewname: str, env: Environment) -> str:
    """The absolute URL of one of the environment's routes. A list shows two per item, so each route is
    reversed once per request, with stand-ins, and filled in (owner and name match ID_PART: never quoted)."""
    routes = context.setdefault("environment_routes", {})
    if viewname not in routes:
        path = reverse(viewname, kwargs={"owner": "OWNER", "name": "NAME"})
        routes[viewname] = _absolute(context, "/")[:-1] + path.replace("OWNER", "{owner}").replace("NAME", "{name}")
    return routes[viewname].format(owner=env.owner, name=env.name)


class IndexProblemSerializer(serializers.ModelSerializer):
    class Meta:
        model = IndexProblem
        fields = ["code", "message", "sha", "transient", "first_seen_at", "last_seen_at", "occurrences"]


YANK_SCHEMA = inline_serializer("Yank", {
    "reason": serializers.CharField(), "yanked_at": serializers.DateTimeField()}, allow_null=True)


def revision_rows():
    """Revisions as the API shows them: summary columns and their yank (registry.selectors.with_yank)."""
    return with_yank(Revision.objects.only(*REVISION_SUMMARY_FIELDS))


class RevisionSerializer(serializers.ModelSerializer):
    """One revision: what was read at one commit sha (or, for local folders, one content digest), and whether its
    owners yanked it (`yanked`: the reason and when; null when not)."""

    yanked = serializers.SerializerMethodField()

    class Meta:
        model = Revision
        fields = [
            "sha", "indexed_at", "content_digest", "manifest_name", "package_name", "openenv_requirement",
            "space_id", "subdomain", "host", "sdk", "tags", "hub_last_modified", "runtime_stage", "yanked",
        ]

    @extend_schema_field(YANK_SCHEMA)
    def get_yanked(self, revision: Revision) -> dict | None:
        if getattr(revision, "yanked_at", None) is None:
            return None
        return {"reason": revision.yank_reason,
                "yanked_at": _rfc3339(revision.yanked_at)}


class YankRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=1000, help_text="Why, in a sentence: everyone who pulls it reads it.")


class DeprecationRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=1000, help_text="Why, in a sentence.")
    successor = serializers.RegexField(rf"^{ID_PART}/{ID_PART}$", required=False, allow_blank=True,
                                       help_text="owner/name of the environment to use instead.")


DEPRECATION_FIELDS = {"reason": serializers.CharField(), "deprecated_at": serializers.DateTimeField(),
                      "successor": serializers.CharField(allow_null=True)}
DEPRECATION_SCHEMA = inline_serializer("Deprecation", DEPRECATION_FIELDS, allow_null=True)


class DeprecationSerializer(serializers.Serializer):
    deprecated = inline_serializer("DeprecationState", DEPRECATION_FIELDS, allow_null=True)


def deprecation_data(env: Environment) -> dict | None:
    """{"reason", "deprecated_at", "successor": "owner/name" or null}, or None when the environment is not
    deprecated. Reads the successor's name as registry.selectors loads it (successor_owner, successor_name)."""
    if env.deprecated_at is None:
        return None
    owner, name = getattr(env, "successor_owner", None), getattr(env, "successor_name", None)
    if owner is None and env.successor_id is not None:
        owner, name = env.successor.owner, env.successor.name
    return {"reason": env.deprecation_reason,
            "deprecated_at": _rfc3339(env.deprecated_at),
            "successor": f"{owner}/{name}" if owner else None}


class RefreshAcceptedSerializer(serializers.Serializer):
    environment = serializers.CharField()
    status = serializers.ChoiceField(choices=["queued"])


class OwnerActionSerializer(serializers.ModelSerializer):
    revision = serializers.CharField(source="revision.sha", default=None, allow_null=True)

    class Meta:
        model = OwnerAction
        fields = ["kind", "actor", "via", "revision", "detail", "at"]


class RevisionDetailSerializer(RevisionSerializer):
    """One revision with its manifest and the outcome of its latest finished validation."""

    manifest = serializers.JSONField(allow_null=True)
    latest_outcome = serializers.CharField(allow_null=True, default=None)

    class Meta(RevisionSerializer.Meta):
        fields = RevisionSerializer.Meta.fields + ["manifest", "latest_outcome"]


VERDICT_SCHEMA = inline_serializer("Verdict", {
    "outcome": serializers.ChoiceField(choices=ValidationRun.Outcome.values),
    "run_id": serializers.IntegerField(),
    "revision": serializers.CharField(),
    "finished_at": serializers.DateTimeField(),
    "failing_checks": serializers.ListField(child=serializers.CharField()),
}, allow_null=True)


def verdict_data(run: ValidationRun | None) -> dict | None:
    """{"outcome", "run_id", "revision", "finished_at", "failing_checks"}, or None before any run."""
    if run is None:
        return None
    return {
        "outcome": run.outcome,
        "run_id": run.pk,
        "revision": run.revision.sha,
        "finished_at": _rfc3339(run.finished_at),
        "failing_checks": run.failing_checks,
    }


class ValidationRunSerializer(serializers.ModelSerializer):
    revision = serializers.CharField(source="revision.sha")

    class Meta:
        model = ValidationRun
        fields = [
            "id", "revision", "state", "outcome", "reason", "runner", "trigger", "target_url", "validator_version",
            "policy_version", "attempts", "queued_at", "started_at", "heartbeat_at", "finished_at", "failing_checks",
        ]


class ValidationRunDetailSerializer(ValidationRunSerializer):
    """A run with its full report, in OpenEnv's report schema (report-v2)."""

    report = serializers.JSONField(allow_null=True)

    class Meta(ValidationRunSerializer.Meta):
        fields = ValidationRunSerializer.Meta.fields + ["report"]


class ValidationRequestSerializer(serializers.Serializer):
    runner = serializers.ChoiceField(choices=ValidationRun.Runner.values, required=False)
    wake = serializers.BooleanField(default=True)


class EnvironmentSerializer(serializers.ModelSerializer):
    """An environment as lists show it (a withdrawn one, in the change feed, is its tombstone)."""

    id = serializers.CharField(source="repo_id")
    head_sha = serializers.CharField(source="head.sha", default=None, allow_null=True)
    manifest_name = serializers.CharField(source="head.manifest_name", default="")
    description = serializers.CharField(source="head.description", default="")
    tags = serializers.SerializerMethodField()
    index_errors = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    deprecated = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    page_url = serializers.SerializerMethodField()

    class Meta:
        model = Environment
        fields = [
            "id", "owner", "name", "source", "status", "status_reason", "status_changed_at", "head_sha",
            "manifest_name", "description", "tags", "likes", "runtime_stage", "mode", "has_mcp", "step_p50_ms",
            "updated_at", "changed_at", "index_errors", "verdict", "deprecated", "url", "page_url",
        ]

    def to_representation(self, env: Environment) -> dict:
        """The item, written out: a list serializes up to 200 of them, and DRF's generic walk over the fields
        (kept for the detail, and checked against this one for every kind of item by the tests) costs more
        than the page's queries."""
        head = env.head
        return {
            "id": env.repo_id, "owner": env.owner, "name": env.name, "source": env.source, "status": env.status,
            "status_reason": env.status_reason, "status_changed_at": _rfc3339(env.status_changed_at),
            "head_sha": head.sha if head else None,
            "manifest_name": head.manifest_name if head else "",
            "description": head.description if head else "",
            "tags": self.get_tags(env), "likes": env.likes, "runtime_stage": env.runtime_stage, "mode": env.mode,
            "has_mcp": env.has_mcp, "step_p50_ms": env.step_p50_ms,
            "updated_at": _rfc3339(env.updated_at), "changed_at": _rfc3339(env.changed_at),
            "index_errors": self.get_index_errors(env), "verdict": self.get_verdict(env),
            "deprecated": self.get_deprecated(env), "url": self.get_url(env), "page_url": self.get_page_url(env),
        }

    @extend_schema_field(DEPRECATION_SCHEMA)
    def get_deprecated(self, env: Environment) -> dict | None:
        return deprecation_data(env)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_tags(self, env: Environment) -> list[str]:
        return environment_tags(env)

    @extend_schema_field(IndexProblemSerializer(many=True))
    def get_index_errors(self, env: Environment) -> list[dict]:
        problems = getattr(env, "open_problems", None)
        if problems is None:
            problems = env.problems.filter(resolved_at__isnull=True)
        return IndexProblemSerializer(problems, many=True).data if problems else []

    @extend_schema_field(VERDICT_SCHEMA)
    def get_verdict(self, env: Environment) -> dict | None:
        return verdict_data(env.verdict_run)

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, env: Environment) -> str:
        return _environment_url(self.context, "api:environment-detail", env)

    @extend_schema_field(OpenApiTypes.URI)
    def get_page_url(self, env: Environment) -> str:
        return _environment_url(self.context, "registry:environment", env)


PULL_FORM_SCHEMA = inline_serializer("PullForm", {
    "kind": serializers.ChoiceField(choices=["running_url", "websocket_url", "client", "pip", "docker", "local_run"]),
    "label": serializers.CharField(), "text": serializers.CharField(),
    "language": serializers.ChoiceField(choices=["shell", "python", "url"]), "note": serializers.CharField(),
}, many=True)
FIELD_SCHEMA = inline_serializer("SchemaField", {
    "name": serializers.CharField(), "type": serializers.CharField(), "required": serializers.BooleanField(),
    "description": serializers.CharField(), "constraints": serializers.ListField(child=serializers.CharField()),
}, many=True)
LAST_GOOD_SCHEMA = inline_serializer("LastKnownGood", {
    "revision": serializers.CharField(), "run_id": serializers.IntegerField(),
    "finished_at": serializers.DateTimeField(),
}, allow_null=True)


class EnvironmentDetailSerializer(EnvironmentSerializer):
    """One environment with what a client needs to trust and pull it: the head, its verdict, the last known good
    revision, the pull forms, the schemas summary and MCP tools (from the verdict run), counts and links."""

    revisions = RevisionSerializer(source="recent_revisions", many=True, read_only=True)
    revision_count = serializers.IntegerField()
    validation_count = serializers.IntegerField()
    revisions_url = serializers.SerializerMethodField()
    validations_url = serializers.SerializerMethodField()
    manifest = serializers.JSONField(source="head.manifest", default=None, allow_null=True)
    last_known_good = serializers.SerializerMethodField()
    pull_forms = serializers.SerializerMethodField()
    schemas = serializers.SerializerMethodField()
    mcp_tools = serializers.ListField(child=serializers.CharField())

    to_representation = serializers.ModelSerializer.to_representation  # the generic walk, over many more fields

    class Meta(EnvironmentSerializer.Meta):
        fields = EnvironmentSerializer.Meta.fields + [
            "manifest", "last_known_good", "pull_forms", "schemas", "mcp_tools", "revisions", "revision_count",
            "revisions_url", "validation_count", "validations_url"]

    @extend_schema_field(OpenApiTypes.URI)
    def get_revisions_url(self, env: Environment) -> str:
        return _environment_url(self.context, "api:revision-list", env)

    @extend_schema_field(OpenApiTypes.URI)
    def get_validations_url(self, env: Environment) -> str:
        return _environment_url(self.context, "api:validation-list", env)

    @extend_schema_field(LAST_GOOD_SCHEMA)
    def get_last_known_good(self, env: Environment) -> dict | None:
        good = env.good_run
        if good is None:
            return None
        return {"revision": good.revision.sha, "run_id": good.pk,
                "finished_at": _rfc3339(good.finished_at)}

    @extend_schema_field(PULL_FORM_SCHEMA)
    def get_pull_forms(self, env: Environment) -> list[dict]:
        if env.head is None:
            return []
        return [{"kind": f.kind, "label": f.label, "text": f.text, "language": f.language, "note": f.note}
                for f in pull_forms(pull_target(env, env.head, hub=settings.HF_ENDPOINT))]

    @extend_schema_field(inline_serializer("Schemas", {
        "action": FIELD_SCHEMA, "observation": FIELD_SCHEMA, "state": FIELD_SCHEMA}, allow_null=True))
    def get_schemas(self, env: Environment) -> dict | None:
        schemas = getattr(env, "observed_schemas", None)
        if not isinstance(schemas, dict):
            return None
        return {part: [dataclasses.asdict(row) for row in presenters.schema_rows(schemas.get(part))]
                for part in ("action", "observation", "state")}


class TagCountSerializer(serializers.Serializer):
    tag = serializers.CharField()
    count = serializers.IntegerField()


class OwnerCountSerializer(serializers.Serializer):
    owner = serializers.CharField()
    count = serializers.IntegerField()


# --- evaluations -------------------------------------------------------------------------------------------


class EvaluationSerializer(serializers.ModelSerializer):
    """One result on the leaderboard: the statistics are the hub's, computed from the episodes."""

    revision = serializers.CharField(source="revision.sha")
    confidence = serializers.SerializerMethodField()
    stale = serializers.BooleanField(read_only=True, help_text="Head moved to a revision whose schemas or verdict "
                                                               "differ from those this was measured on.")
    rank = serializers.IntegerField(read_only=True, required=False, allow_null=True, default=None)
    tied = serializers.BooleanField(read_only=True, required=False, default=False,
                                    help_text="Its 95% interval overlaps the leader's: not distinguishable from it.")
    source = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = [
            "id", "revision", "provenance", "agent", "agent_kind", "agent_revision", "harness", "harness_version",
            "client_version", "episode_count", "mean", "std", "stderr", "ci_low", "ci_high", "ci_method",
            "confidence", "success_rate", "wall_s", "submitted_by", "source", "notes", "stale", "rank", "tied",
            "created_at",
        ]

    def get_confidence(self, row) -> float:
        return 0.95

    def get_source(self, row) -> dict:
        return {k: v for k, v in (row.source or {}).items() if k != "payload_digest"}


class EvaluationDetailSerializer(EvaluationSerializer):
    """A result with its episodes (seed, reward, steps, how it ended, wall time, success) and seeds."""

    episodes = serializers.JSONField()
    seeds = serializers.JSONField()

    class Meta(EvaluationSerializer.Meta):
        fields = EvaluationSerializer.Meta.fields + ["seeds", "episodes"]


class LeaderboardSerializer(serializers.Serializer):
    environment = serializers.CharField()
    head = serializers.CharField(allow_null=True)
    rows = EvaluationSerializer(many=True)
    hidden_stale = serializers.IntegerField(help_text="Stale results not shown (ask with include_stale=true).")


class EvaluationRunSerializer(serializers.ModelSerializer):
    revision = serializers.CharField(source="revision.sha")

    class Meta:
        model = EvaluationRun
        fields = ["id", "revision", "kind", "subject", "state", "outcome", "reason", "trigger", "attempts",
                  "queued_at", "started_at", "finished_at"]


class ModelEvaluationRequestSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=200, help_text="The model's name at the configured endpoint.")
    episodes = serializers.IntegerField(min_value=1, max_value=100, default=10)


class EvaluationImportSerializer(serializers.Serializer):
    dataset = serializers.RegexField(rf"^{ID_PART}/{ID_PART}$", max_length=200,
                                     help_text="The Hub dataset holding results.jsonl and metadata.json.")
    dataset_revision = serializers.RegexField(r"^[0-9a-f]{40}$", required=False,
                                              help_text="Pin: the dataset's commit (default: its current head, "
                                                        "which is then recorded).")
    revision = serializers.RegexField(r"^[0-9a-fA-F]{4,64}$", required=False,
                                      help_text="The environment revision the episodes ran on (default: the one "
                                                "serving when the dataset was made is unknown, so head).")
    environment = serializers.RegexField(rf"^{ID_PART}/{ID_PART}$", required=False,
                                         help_text="An explicit mapping: the dataset belongs to this environment "
                                                   "(else it is matched through metadata env_base_url).")
