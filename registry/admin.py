"""Operators' view of the index. Revisions and problems are read-only: the indexer owns them; so are webhook
deliveries, which record what the Hub said and what the hub did about it."""

from django.contrib import admin, messages
from django.template.response import TemplateResponse

from registry import identity, selectors
from registry.models import (
    Account,
    ApiToken,
    Environment,
    Evaluation,
    EvaluationRun,
    IndexProblem,
    OwnerAction,
    Revision,
    RevisionYank,
    SyncRun,
    ValidationRun,
    WebhookDelivery,
)
from registry.services import accounts, evaluation, owner, validation


def _with_reason(modeladmin, request, queryset, *, title: str, apply, successor: bool = False):
    """An admin action that asks for a reason (and a successor) on an intermediate page, then applies
    `apply(obj, reason, successor)` to each selected object through the services (so history records it)."""
    if "apply" in request.POST:
        named = request.POST.get("successor", "").strip()
        found = None
        if named:
            s_owner, _, s_name = named.partition("/")
            found = selectors.environment_get(owner=s_owner, name=s_name) if s_name else None
            if found is None:
                modeladmin.message_user(request, f"No environment {named}.", messages.ERROR)
                return None
        done = 0
        for obj in queryset:
            try:
                done += bool(apply(obj, request.POST.get("reason", ""), found))
            except owner.ActionRefused as exc:
                modeladmin.message_user(request, f"{obj}: {exc}", messages.ERROR)
        modeladmin.message_user(request, f"{title}: {done} done.", messages.SUCCESS)
        return None
    return TemplateResponse(request, "admin/registry/reason.html", {
        **modeladmin.admin_site.each_context(request), "title": title, "objects": queryset,
        "action": request.POST.get("action"), "successor": successor, "opts": modeladmin.model._meta,
        "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)})


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
    actions = ["validate_head", "refresh", "deprecate", "undeprecate"]

    @admin.action(description="Refresh from the Hub now")
    def refresh(self, request, queryset):
        sent = 0
        for env in queryset.filter(source=Environment.Source.HUGGINGFACE):
            try:
                owner.space_refresh_request(repo_id=env.repo_id, environment=env, actor=identity.actor(request.user),
                                            via=OwnerAction.Via.ADMIN)
                sent += 1
            except owner.RefreshTooSoon:
                pass
        self.message_user(request, f"{sent} refresh(es) sent.", messages.SUCCESS)

    @admin.action(description="Deprecate (with a reason and an optional successor)")
    def deprecate(self, request, queryset):
        return _with_reason(self, request, queryset, title="Deprecate", successor=True, apply=lambda env, reason, to:
                            owner.environment_deprecate(environment=env, reason=reason, successor=to,
                                                        actor=identity.actor(request.user), via=OwnerAction.Via.ADMIN)
                            or True)

    @admin.action(description="Lift the deprecation")
    def undeprecate(self, request, queryset):
        lifted = sum(owner.environment_undeprecate(environment=env, actor=identity.actor(request.user),
                                                   via=OwnerAction.Via.ADMIN) for env in queryset)
        self.message_user(request, f"{lifted} deprecation(s) lifted.", messages.SUCCESS)

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
    actions = ["yank", "unyank"]

    @admin.action(description="Yank (with a reason)")
    def yank(self, request, queryset):
        return _with_reason(self, request, queryset, title="Yank", apply=lambda rev, reason, _:
                            owner.revision_yank(revision=rev, reason=reason, actor=identity.actor(request.user),
                                                via=OwnerAction.Via.ADMIN))

    @admin.action(description="Restore (un-yank)")
    def unyank(self, request, queryset):
        restored = sum(owner.revision_unyank(revision=rev, actor=identity.actor(request.user),
                                             via=OwnerAction.Via.ADMIN) for rev in queryset.select_related("environment"))
        self.message_user(request, f"{restored} revision(s) restored.", messages.SUCCESS)



@admin.register(RevisionYank)
class RevisionYankAdmin(ReadOnlyAdmin):
    list_display = ["revision", "reason", "actor", "yanked_at"]
    list_select_related = ["revision", "revision__environment"]


@admin.register(OwnerAction)
class OwnerActionAdmin(ReadOnlyAdmin):
    list_display = ["at", "environment", "kind", "revision", "actor", "via"]
    list_filter = ["kind", "via"]
    search_fields = ["environment__key", "actor"]
    list_select_related = ["environment", "revision"]


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["name", "hub_id", "user", "signed_in_at"]
    search_fields = ["name", "hub_id"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens by name and prefix only: the hub holds no secret to show."""

    list_display = ["name", "prefix", "user", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "user__username"]
    exclude = ["digest"]
    actions = ["revoke"]

    @admin.action(description="Revoke")
    def revoke(self, request, queryset):
        revoked = sum(accounts.api_token_revoke(token=t) for t in queryset)
        self.message_user(request, f"{revoked} token(s) revoked.", messages.SUCCESS)


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


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "environment", "revision", "kind", "subject", "trigger", "state", "outcome", "attempts",
                    "queued_at", "finished_at"]
    list_filter = ["kind", "state", "outcome"]
    search_fields = ["environment__key", "revision__sha", "subject"]
    list_select_related = ["environment", "revision"]
    actions = ["cancel"]

    @admin.action(description="Cancel (a running task stops at its next heartbeat)")
    def cancel(self, request, queryset):
        cancelled = sum(evaluation.evaluation_run_cancel(run_id=pk, reason=f"Cancelled by {request.user}.")
                        for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"{cancelled} run(s) cancelled.", messages.SUCCESS)


@admin.register(Evaluation)
class EvaluationAdmin(ReadOnlyAdmin):
    list_display = ["id", "environment", "revision", "agent", "provenance", "mean", "ci_low", "ci_high",
                    "episode_count", "submitted_by", "created_at"]
    list_filter = ["provenance", "agent_kind"]
    search_fields = ["environment__key", "agent", "submitted_by"]
    list_select_related = ["environment", "revision"]


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
