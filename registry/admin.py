"""Operators' view of the index. Revisions and problems are read-only: the indexer owns them; so are webhook
deliveries, which record what the Hub said and what the hub did about it."""

from django.contrib import admin, messages

from registry.models import Environment, IndexProblem, Revision, SyncRun, ValidationRun, WebhookDelivery
from registry.services import validation


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class RevisionInline(admin.TabularInline):
    model = Revision
    fields = ["sha", "indexed_at", "manifest_name", "runtime_stage"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ["key", "source", "status", "head", "likes", "runtime_stage", "updated_at"]
    list_filter = ["source", "status", "runtime_stage"]
    search_fields = ["key"]
    # Status mirrors the Hub (or the local source) and is set by the sync alone: an edit here would be undone
    # by the next sync, and a half-edit (status without its time) would break the table's constraints.
    readonly_fields = [f.name for f in Environment._meta.fields]
    inlines = [RevisionInline]
    actions = ["validate_head"]

    @admin.action(description="Validate the head revision now (may wake a sleeping Space)")
    def validate_head(self, request, queryset):
        queued = 0
        for env in queryset.select_related("head"):
            if env.head is not None:
                queued += validation.validation_run_request(
                    revision=env.head, trigger=ValidationRun.Trigger.REQUEST, wake=True, requested_by=request.user)[1]
        self.message_user(request, f"{queued} validation(s) queued.", messages.SUCCESS)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Revision)
class RevisionAdmin(ReadOnlyAdmin):
    list_display = ["environment", "sha", "manifest_name", "package_name", "indexed_at"]
    search_fields = ["environment__key", "sha", "manifest_name", "package_name"]
    list_select_related = ["environment"]


@admin.register(IndexProblem)
class IndexProblemAdmin(ReadOnlyAdmin):
    list_display = ["environment", "code", "sha", "transient", "occurrences", "last_seen_at", "resolved_at"]
    list_filter = ["code", "transient", ("resolved_at", admin.EmptyFieldListFilter)]
    search_fields = ["environment__key", "code", "message"]
    list_select_related = ["environment"]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "kind", "target", "state", "found", "new", "updated", "unchanged", "withdrawn", "errors"]
    list_filter = ["kind", "state"]


@admin.register(ValidationRun)
class ValidationRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "environment", "revision", "runner", "trigger", "requester", "state", "outcome",
                    "attempts", "queued_at", "finished_at"]
    list_filter = ["state", "outcome", "runner", "trigger"]
    search_fields = ["environment__key", "revision__sha", "requested_by_hub"]
    list_select_related = ["environment", "revision", "requested_by"]
    actions = ["cancel"]

    @admin.display(description="requested by")
    def requester(self, run):
        if run.requested_by_hub:
            return f"hf:{run.requested_by_hub}"
        return run.requested_by.get_username() if run.requested_by else ""

    @admin.action(description="Cancel (a running task stops at its next heartbeat)")
    def cancel(self, request, queryset):
        cancelled = sum(validation.validation_run_cancel(run_id=pk, reason=f"Cancelled by {request.user}.")
                        for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"{cancelled} run(s) cancelled.", messages.SUCCESS)

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "status", "http_status", "action", "scope", "repo_name", "sha", "moved_to",
                    "took", "outcome_start"]
    list_filter = ["status", "http_status", "action", "scope", "repo_type"]
    search_fields = ["repo_name", "moved_to", "head_sha", "fingerprint", "webhook_id"]
    date_hierarchy = "received_at"
    fields = ["received_at", "status", "http_status", "action", "scope", "repo_type", "repo_name", "head_sha",
              "previous_sha", "moved_to", "webhook_id", "fingerprint", "outcome", "processed_at", "duration_ms"]
    readonly_fields = fields

    @admin.display(description="sha", ordering="head_sha")
    def sha(self, delivery):
        return delivery.head_sha[:12]

    @admin.display(description="took", ordering="duration_ms")
    def took(self, delivery):
        return "" if delivery.duration_ms is None else f"{delivery.duration_ms:,.0f} ms"

    @admin.display(description="outcome")
    def outcome_start(self, delivery):
        return delivery.outcome if len(delivery.outcome) <= 120 else delivery.outcome[:119] + "…"
