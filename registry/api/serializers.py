"""API representations of the index."""

from django.urls import reverse
from rest_framework import serializers

from registry.models import Environment, IndexProblem, Revision, ValidationRun
from registry.selectors import environment_tags


class IndexProblemSerializer(serializers.ModelSerializer):
    class Meta:
        model = IndexProblem
        fields = ["code", "message", "sha", "transient", "first_seen_at", "last_seen_at", "occurrences"]


class RevisionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Revision
        fields = [
            "sha", "indexed_at", "content_digest", "manifest_name", "package_name", "openenv_requirement",
            "space_id", "subdomain", "host", "sdk", "tags", "hub_last_modified", "runtime_stage",
        ]


def verdict_data(run: ValidationRun | None) -> dict | None:
    """The verdict summary: {"outcome", "run_id", "revision", "finished_at", "failing_checks"}, or None before any run."""
    if run is None:
        return None
    return {
        "outcome": run.outcome,
        "run_id": run.pk,
        "revision": run.revision.sha,
        "finished_at": serializers.DateTimeField().to_representation(run.finished_at),
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
    class Meta(ValidationRunSerializer.Meta):
        fields = ValidationRunSerializer.Meta.fields + ["report"]


class ValidationRequestSerializer(serializers.Serializer):
    runner = serializers.ChoiceField(choices=ValidationRun.Runner.values, required=False)
    wake = serializers.BooleanField(default=True)


class EnvironmentSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="repo_id")
    head_sha = serializers.CharField(source="head.sha", default=None)
    manifest_name = serializers.CharField(source="head.manifest_name", default="")
    description = serializers.CharField(source="head.description", default="")
    tags = serializers.SerializerMethodField()
    index_errors = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Environment
        fields = [
            "id", "owner", "name", "source", "status", "status_reason", "head_sha", "manifest_name", "description",
            "tags", "likes", "runtime_stage", "updated_at", "index_errors", "verdict", "url",
        ]

    def get_tags(self, env: Environment) -> list[str]:
        return environment_tags(env)

    def get_index_errors(self, env: Environment) -> list[dict]:
        problems = getattr(env, "open_problems", None)
        if problems is None:
            problems = env.problems.filter(resolved_at__isnull=True)
        return IndexProblemSerializer(problems, many=True).data

    def get_verdict(self, env: Environment) -> dict | None:
        return verdict_data(env.verdict_run)

    def get_url(self, env: Environment) -> str:
        request = self.context.get("request")
        path = reverse("api:environment-detail", kwargs={"owner": env.owner, "name": env.name})
        return request.build_absolute_uri(path) if request else path


class EnvironmentDetailSerializer(EnvironmentSerializer):
    """The environment with its newest revisions (`recent_revisions`, set by the view; the rest are paged at
    `revisions_url`)."""

    revisions = RevisionSerializer(source="recent_revisions", many=True, read_only=True)
    revision_count = serializers.IntegerField()
    revisions_url = serializers.SerializerMethodField()
    manifest = serializers.JSONField(source="head.manifest", default=None)
    status_changed_at = serializers.DateTimeField()

    class Meta(EnvironmentSerializer.Meta):
        fields = EnvironmentSerializer.Meta.fields + [
            "status_changed_at", "manifest", "revisions", "revision_count", "revisions_url"]

    def get_revisions_url(self, env: Environment) -> str:
        request = self.context.get("request")
        path = reverse("api:revision-list", kwargs={"owner": env.owner, "name": env.name})
        return request.build_absolute_uri(path) if request else path
