"""API representations of the index."""

from rest_framework import serializers

from registry.models import Environment, IndexProblem, Revision
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


class EnvironmentSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="repo_id")
    head_sha = serializers.CharField(source="head.sha", default=None)
    manifest_name = serializers.CharField(source="head.manifest_name", default="")
    description = serializers.CharField(source="head.description", default="")
    tags = serializers.SerializerMethodField()
    index_errors = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Environment
        fields = [
            "id", "owner", "name", "source", "status", "status_reason", "head_sha", "manifest_name", "description",
            "tags", "likes", "runtime_stage", "updated_at", "index_errors", "url",
        ]

    def get_tags(self, env: Environment) -> list[str]:
        return environment_tags(env)

    def get_index_errors(self, env: Environment) -> list[dict]:
        problems = getattr(env, "open_problems", None)
        if problems is None:
            problems = env.problems.filter(resolved_at__isnull=True)
        return IndexProblemSerializer(problems, many=True).data

    def get_url(self, env: Environment) -> str:
        request = self.context.get("request")
        path = f"/api/v1/environments/{env.owner}/{env.name}/"
        return request.build_absolute_uri(path) if request else path


class EnvironmentDetailSerializer(EnvironmentSerializer):
    revisions = RevisionSerializer(many=True, read_only=True)
    manifest = serializers.JSONField(source="head.manifest", default=None)
    status_changed_at = serializers.DateTimeField()

    class Meta(EnvironmentSerializer.Meta):
        fields = EnvironmentSerializer.Meta.fields + ["status_changed_at", "manifest", "revisions"]
