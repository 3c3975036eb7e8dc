"""Operators' view of the index. Revisions and problems are read-only: the indexer owns them."""

from django.contrib import admin

from registry.models import Environment, IndexProblem, Revision, SyncRun


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
    readonly_fields = [f.name for f in Environment._meta.fields if f.name not in ("status", "status_reason")]
    inlines = [RevisionInline]

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
