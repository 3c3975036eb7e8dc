"""The index: environments, their immutable revisions, and what went wrong reading them.

Nothing here is ever deleted: an environment that leaves the Hub is withdrawn
and keeps its history. Writes go through registry.services, reads through
registry.selectors.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.utils import timezone
from django.db.models import Q
from django.db.models.functions import Lower

SHA_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})$"
# One part of an environment id (owner or name), as the Hub allows it: ASCII letters, digits, '_', '.', '-'.
# Local folders are held to the same rule, so every id is a plain URL path segment.
ID_PART = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}"


def environment_key(owner: str, name: str) -> str:
    """The normalized natural key of an environment: Hub repo ids are case-insensitive."""
    return f"{owner}/{name}".lower()


class Environment(models.Model):
    """One environment: a Hub Space `owner/name`, one folder of a local source, or an entry of an imported
    discovery catalog snapshot.

    Invariants: `key` (the case-folded `owner/name`) is unique; rows are never
    deleted; `head` is one of the environment's own revisions (kept by
    services.revision_record); a withdrawn environment has a reason and a time;
    an imported one (source `catalog`) says where its code is (`source_provider`,
    `source_uri`, `source_path`, `source_revision`) and which snapshot scope it
    came from (`catalog_scope`), and keeps the entry as imported.
    """

    class Source(models.TextChoices):
        HUGGINGFACE = "huggingface", "Hugging Face Hub"
        LOCAL = "local", "Local source"
        CATALOG = "catalog", "Imported from a catalog snapshot"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        WITHDRAWN = "withdrawn", "Withdrawn"

    source = models.CharField(max_length=16, choices=Source.choices)
    owner = models.CharField(max_length=96, help_text="As the Hub spells it.")
    name = models.CharField(max_length=96, help_text="As the Hub spells it.")
    key = models.CharField(max_length=200, unique=True, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    status_reason = models.TextField(blank=True)
    head = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The revision the Hub serves now (the latest indexed sha).",
    )
    # Live Hub facts that change without a commit: refreshed from every listing.
    likes = models.IntegerField(default=0)
    runtime_stage = models.CharField(max_length=32, blank=True)
    hub_last_modified = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True, help_text="Last time a listing or a read saw it.")
    head_observed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the Hub said what head is (its freshest news seen): older news never moves head.")
    local_path = models.CharField(max_length=1024, blank=True, help_text="For local sources: the package folder.")
    # What an imported entry's card says of its source; empty for the other sources.
    source_provider = models.CharField(max_length=32, blank=True, help_text="Imported: github, huggingface or local.")
    source_uri = models.CharField(max_length=1024, blank=True, help_text="Imported: the source's repository or page.")
    source_path = models.CharField(max_length=1024, blank=True, help_text="Imported: the folder within the source.")
    source_revision = models.CharField(max_length=128, blank=True, help_text="Imported: the revision, as declared.")
    catalog_scope = models.CharField(
        max_length=1300, blank=True,
        help_text="Imported: the snapshot's publisher and source URI; a later complete snapshot of it withdraws what it omits.")
    catalog_entry = models.JSONField(null=True, blank=True, help_text="Imported: the entry as imported (normalized).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(help_text="When the head revision or the status last changed.")
    changed_at = models.DateTimeField(
        default=timezone.now,
        help_text="When anything a mirror copies last changed (head, status, verdict): the API's change feed.")

    # What the catalog shows and filters by, derived from the head and the verdicts by
    # services.catalog.environment_catalog_refresh whenever either changes; never edited by hand.
    verdict_run = models.ForeignKey(
        "ValidationRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The run behind the verdict: the head's latest finished run, else the latest of any revision.")
    verdict_outcome = models.CharField(max_length=16, blank=True, help_text="That run's outcome; empty before any.")
    validated_at = models.DateTimeField(null=True, blank=True, help_text="When that run finished.")
    good_run = models.ForeignKey(
        "ValidationRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The latest passing run of any revision: the last known good revision and measured latency.")
    mode = models.CharField(max_length=16, blank=True, help_text="simulation or production, as the verdict run saw.")
    has_mcp = models.BooleanField(null=True, blank=True, help_text="Whether /mcp lists tools (verdict run).")
    mcp_tools = models.JSONField(default=list, blank=True, help_text="MCP tool names (verdict run).")
    step_p50_ms = models.FloatField(null=True, blank=True, help_text="Median /ws step latency of the good run.")
    openenv_requirement = models.CharField(max_length=200, blank=True, help_text="The head's, for the facet.")

    # Set by its owners (services.owner): still listed and pullable, but says so everywhere.
    deprecated_at = models.DateTimeField(null=True, blank=True)
    deprecation_reason = models.TextField(blank=True)
    successor = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The environment to use instead, when the owners named one.")

    class Meta:
        ordering = ["key"]
        constraints = [
            models.CheckConstraint(condition=Q(source__in=["huggingface", "local", "catalog"]),
                                   name="environment_source_valid"),
            models.CheckConstraint(condition=~Q(source="catalog") | ~Q(source_provider="") & Q(catalog_entry__isnull=False),
                                   name="environment_catalog_has_source"),
            models.CheckConstraint(condition=Q(status__in=["active", "withdrawn"]), name="environment_status_valid"),
            models.CheckConstraint(
                condition=Q(status="active") | Q(status_changed_at__isnull=False), name="environment_withdrawn_has_time"
            ),
            models.UniqueConstraint(Lower("owner"), Lower("name"), name="environment_owner_name_ci_unique"),
        ]
        # One per catalog sort, in exactly its order (ties broken by key), so a page is an index range. The sorts
        # with NULLS LAST have PostgreSQL-only indexes (migration 0008): SQLite cannot index that order.
        indexes = [
            models.Index(fields=["status", "-updated_at", "key"], name="environment_status_updated"),
            models.Index(fields=["status", "-likes", "key"], name="environment_status_likes"),
            models.Index(fields=["status", "owner"], name="environment_status_owner"),
            models.Index(fields=["changed_at", "id"], name="environment_changed"),
        ]

    def __str__(self) -> str:
        return self.repo_id

    @property
    def repo_id(self) -> str:
        return f"{self.owner}/{self.name}"

    def save(self, *args, **kwargs):
        self.key = environment_key(self.owner, self.name)
        super().save(*args, **kwargs)


class EnvironmentSearch(models.Model):
    """An environment's full-text search vector (PostgreSQL), apart from the environment row so that scans of the
    catalog (facets, sorts) read narrow rows. Weights: names A, description, tags and MCP tools B, README C.

    Invariant: rewritten with the catalog summary; `summary` is exactly the A and B part of `vector`; absent on
    SQLite, which searches with contains.
    """

    environment = models.OneToOneField(Environment, on_delete=models.CASCADE, primary_key=True, related_name="search")
    vector = SearchVectorField(null=True)
    summary = SearchVectorField(null=True, help_text=(
        "Names, description, tags and MCP tools only: small enough to check row by row, for the relevance tiers."))

    def __str__(self) -> str:
        return f"search vector of {self.environment_id}"


class EnvironmentTag(models.Model):
    """One tag of an environment's head revision, for the catalog's tag facet and filter (both databases).

    Invariant: exactly the head revision's displayed tags, rewritten with the catalog summary.
    """

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="tag_rows")
    tag = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["environment", "tag"], name="environmenttag_unique")]
        indexes = [models.Index(fields=["tag", "environment"], name="environmenttag_tag")]

    def __str__(self) -> str:
        return self.tag


class Revision(models.Model):
    """What was read of an environment at one commit sha (or, for local sources, one content digest).

    Invariants: one row per (environment, sha); a row is written once and never
    updated, so a result bound to a revision stays bound to exactly those files.
    """

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="revisions")
    sha = models.CharField(max_length=64, help_text="Hub commit sha (40 hex) or local content digest (64 hex).")
    indexed_at = models.DateTimeField(auto_now_add=True)
    content_digest = models.CharField(max_length=64, help_text="sha256 over the files read, by path.")
    files = models.JSONField(default=list, help_text="Root listing at this sha: [{path, size}].")

    manifest_raw = models.TextField(blank=True)
    manifest = models.JSONField(null=True, blank=True, help_text="Parsed openenv.yaml, or null when it is unusable.")
    readme_raw = models.TextField(blank=True)
    readme_front_matter = models.JSONField(null=True, blank=True)
    readme_body = models.TextField(blank=True)
    description = models.TextField(blank=True)

    # The names the tools use, stored explicitly because they disagree by design.
    manifest_name = models.CharField(max_length=200, blank=True)
    package_name = models.CharField(max_length=200, blank=True, help_text="pyproject [project].name")
    openenv_requirement = models.CharField(max_length=200, blank=True, help_text="e.g. openenv[core]>=0.2.2")
    space_id = models.CharField(max_length=200, blank=True)
    subdomain = models.CharField(max_length=200, blank=True)
    host = models.CharField(max_length=300, blank=True)

    # Hub facts as the Hub reported them when this sha was read.
    sdk = models.CharField(max_length=32, blank=True)
    tags = models.JSONField(default=list)
    likes = models.IntegerField(null=True, blank=True)
    hub_created_at = models.DateTimeField(null=True, blank=True)
    hub_last_modified = models.DateTimeField(null=True, blank=True)
    runtime_stage = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["-indexed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "sha"], name="revision_environment_sha_unique"),
            models.CheckConstraint(condition=Q(sha__regex=SHA_PATTERN), name="revision_sha_hex"),
        ]

    def __str__(self) -> str:
        return f"{self.environment.repo_id}@{self.sha[:12]}"


class RevisionReadme(models.Model):
    """A revision's README rendered to safe HTML, once per revision and renderer version (never per request).

    Derived data beside the immutable revision: rewritten only when `registry.readme.RENDERER_VERSION` changes.
    """

    revision = models.OneToOneField(Revision, on_delete=models.CASCADE, primary_key=True, related_name="rendered")
    renderer_version = models.CharField(max_length=32)
    html = models.TextField()
    rendered_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"README of {self.revision_id} ({self.renderer_version})"


class IndexProblem(models.Model):
    """Something that went wrong reading an environment, shown to people as an index error.

    Invariant: at most one open (unresolved) problem per (environment, sha,
    code); seeing it again bumps `occurrences`. Problems of a revision stay
    open while that revision is head; they are resolved when a newer revision
    is indexed or the failed read later succeeds.
    """

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="problems")
    revision = models.ForeignKey(Revision, null=True, blank=True, on_delete=models.PROTECT, related_name="problems")
    sha = models.CharField(max_length=64, blank=True, help_text="The sha being read when it happened.")
    code = models.CharField(max_length=64, help_text="Stable machine code, e.g. manifest.yaml_invalid.")
    message = models.TextField(help_text="What a person should read.")
    transient = models.BooleanField(default=False, help_text="The Hub failed, not the environment: retried next sync.")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)
    occurrences = models.PositiveIntegerField(default=1)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "sha", "code"], condition=Q(resolved_at__isnull=True),
                name="indexproblem_open_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.code}: {self.message[:80]}"


class SyncRun(models.Model):
    """One pass of the indexer (a full Hub reconcile, a single Space, or the local sources).

    Invariants: counts are written when the run finishes; at most one hub and
    one local sync run at a time (a database constraint on running rows); a
    running sync beats every HUB_SYNC_HEARTBEAT_S, and one silent for
    HUB_SYNC_STALE_S is marked abandoned so the next one may start.
    """

    class Kind(models.TextChoices):
        HUB = "hub", "Hub reconcile"
        SPACE = "space", "One Space"
        LOCAL = "local", "Local sources"

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"
        ABANDONED = "abandoned", "Abandoned (its process stopped beating)"

    # Full reconciles that must never overlap: two would race over head and withdrawals for hours.
    EXCLUSIVE_KINDS = (Kind.HUB, Kind.LOCAL)

    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=300, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="The running sync proves it is alive.")
    finished_at = models.DateTimeField(null=True, blank=True)
    listing_complete = models.BooleanField(default=True)
    found = models.PositiveIntegerField(default=0)
    new = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    withdrawn = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    messages = models.JSONField(default=list, help_text="Errors not tied to one environment (a failed listing).")

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind"], condition=Q(state="running", kind__in=["hub", "local"]),
                name="syncrun_one_running_full_sync",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} sync {self.started_at:%Y-%m-%d %H:%M}"


class ValidationRun(models.Model):
    """One conformance validation of one revision, modelled on readthedocs' builds.

    `state` says where the run is (queued → running → finished | cancelled);
    `outcome` says how a finished run ended (pass | warn | fail | error).
    Invariants: the row exists before its task is sent and the task gets only
    its primary key; state moves by compare-and-set, so a redelivered message
    for a running or finished run does nothing; at most one live (queued or
    running) run per revision and validator version; `sent_at` is set only
    after the broker took the message, so a queued run without it (past its
    `due_at`) is one the reaper must send.
    """

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"
        CANCELLED = "cancelled", "Cancelled"

    class Outcome(models.TextChoices):
        PASS = "pass", "Pass"
        WARN = "warn", "Warn"
        FAIL = "fail", "Fail"
        ERROR = "error", "Error"

    class Runner(models.TextChoices):
        SPACE = "space", "Running Space"
        LOCAL = "local", "Local sandbox"

    class Trigger(models.TextChoices):
        NEW_REVISION = "new_revision", "New revision"
        SCHEDULE = "schedule", "Scheduled re-probe"
        REQUEST = "request", "Requested"

    LIVE_STATES = (State.QUEUED, State.RUNNING)

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="validation_runs")
    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="validation_runs")
    validator_version = models.CharField(max_length=64)
    policy_version = models.CharField(max_length=64)
    runner = models.CharField(max_length=16, choices=Runner.choices)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    wake = models.BooleanField(default=False, help_text="May wake a sleeping Space (explicit requests only).")
    requested_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="validation_runs")
    requested_by_hub = models.CharField(
        max_length=96, blank=True, help_text="The Hugging Face account that asked for the run (token confirmed by the Hub).")
    target_url = models.CharField(max_length=500, blank=True)

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, null=True, blank=True)
    reason = models.TextField(blank=True, help_text="Why it was cancelled or errored, for people.")
    attempts = models.PositiveSmallIntegerField(default=0, help_text="How many times a worker started it.")
    worker = models.CharField(max_length=200, blank=True)

    queued_at = models.DateTimeField(auto_now_add=True)
    due_at = models.DateTimeField(
        null=True, blank=True, help_text="When its next task message is due (queued, plus any backoff).")
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text="When that message reached the broker; empty until it did.")
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    report = models.JSONField(null=True, blank=True, help_text="The full report, in OpenEnv's report schema.")
    observed = models.JSONField(
        null=True, blank=True,
        help_text="What the server showed besides the report: its schemas, MCP tools and an episode transcript.")
    failing_checks = models.JSONField(default=list, help_text="check ids that failed or errored (from the report).")
    schema_digest = models.CharField(
        max_length=64, blank=True,
        help_text="sha256 of the action and observation schemas the server showed (empty when it showed none).")

    class Meta:
        ordering = ["-queued_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "validator_version"], condition=Q(state__in=["queued", "running"]),
                name="validationrun_one_live_per_revision",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["queued", "running", "finished", "cancelled"]), name="validationrun_state_valid"),
            models.CheckConstraint(
                condition=(Q(state="finished", outcome__isnull=False, finished_at__isnull=False)
                           | (~Q(state="finished") & Q(outcome__isnull=True))),
                name="validationrun_outcome_iff_finished",
            ),
            models.CheckConstraint(
                condition=Q(state="queued") | Q(started_at__isnull=False) | Q(state="cancelled"),
                name="validationrun_started_when_running",
            ),
        ]
        indexes = [
            models.Index(fields=["environment", "-finished_at"], name="validationrun_env_finished"),
            models.Index(fields=["state", "heartbeat_at"], name="validationrun_state_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"validation #{self.pk} of {self.revision} ({self.state}{'/' + self.outcome if self.outcome else ''})"


class RevisionYank(models.Model):
    """A revision its owners withdrew from use (as PyPI yanks a release): still shown and pullable by its sha,
    never the last known good, marked everywhere. The revision itself stays immutable; un-yanking deletes this."""

    revision = models.OneToOneField(Revision, on_delete=models.CASCADE, primary_key=True, related_name="yank")
    reason = models.TextField()
    actor = models.CharField(max_length=200, help_text="Who yanked it, e.g. hf:alice or staff:bob.")
    yanked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"yank of {self.revision_id}"


class EnvironmentAlias(models.Model):
    """A name an environment had before it moved on the Hub: its pages and API answers redirect to the new one."""

    key = models.CharField(max_length=200, unique=True, help_text="The old owner/name, case-folded.")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="aliases")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.key} -> {self.environment_id}"


class OwnerAction(models.Model):
    """Something done to an environment on someone's word (an owner, staff, or the Hub by webhook): its history."""

    class Kind(models.TextChoices):
        REVALIDATE = "revalidate", "Requested a validation"
        YANK = "yank", "Yanked a revision"
        UNYANK = "unyank", "Restored a yanked revision"
        DEPRECATE = "deprecate", "Deprecated the environment"
        UNDEPRECATE = "undeprecate", "Lifted the deprecation"
        REFRESH = "refresh", "Refreshed from the Hub"
        RENAME = "rename", "Moved on the Hub"

    class Via(models.TextChoices):
        WEB = "web", "Website"
        API = "api", "API"
        ADMIN = "admin", "Admin"
        WEBHOOK = "webhook", "Hub webhook"

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="actions")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    revision = models.ForeignKey(Revision, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    actor = models.CharField(max_length=200, help_text="hf:<account>, staff:<user>, or hub for a webhook.")
    via = models.CharField(max_length=16, choices=Via.choices)
    detail = models.JSONField(default=dict, blank=True, help_text="The reason, the successor, the old name.")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["environment", "-at"], name="owneraction_env_at")]

    def __str__(self) -> str:
        return f"{self.kind} on {self.environment_id} by {self.actor}"


class Account(models.Model):
    """A Hugging Face account that signed in on the website (OpenID Connect). Its organizations and roles are
    as the Hub said at the last sign-in; the Hub's token is used for the sign-in and never kept."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hub_account")
    hub_id = models.CharField(max_length=64, unique=True, help_text="The Hub's stable account id (OIDC sub).")
    name = models.CharField(max_length=96, db_index=True, help_text="The account name, as the Hub spells it.")
    display_name = models.CharField(max_length=200, blank=True)
    avatar_url = models.URLField(max_length=500, blank=True)
    orgs = models.JSONField(default=list, blank=True, help_text='[{"name", "role"}], as of the last sign-in.')
    signed_in_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"hf:{self.name}"


class ApiToken(models.Model):
    """A personal token for scripts: shown once, stored as a SHA-256 digest, scoped, expiring, revocable."""

    SCOPES = ("read", "publish", "evaluate")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to recognize it by.")
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole token (hex).")
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class WebhookDelivery(models.Model):
    """One delivery from a Hub webhook, as received and as handled: what an operator reads to see what the Hub
    told the hub and what the hub did about it. Never holds the secret nor any header; the last HUB_WEBHOOK_KEEP
    are kept (services.webhooks).

    Invariants: at most one delivery holds a fingerprint's `claim` (a unique column), and only the one holding
    it has a job: a duplicate that arrives meanwhile, even concurrently, is recorded as a duplicate and nothing
    else. A delivery holds its claim while queued; once handled it keeps it only for a content update (a commit
    is news once) and gives it up otherwise (a private flip or a deletion may happen again), or when it failed.
    The status moves from queued by compare-and-set, so a redelivered task message does nothing.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        DONE = "done", "Done"
        DUPLICATE = "duplicate", "Duplicate (of one queued or handled)"
        IGNORED = "ignored", "Ignored"
        REFUSED = "refused", "Refused"
        FAILED = "failed", "Failed"

    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    http_status = models.PositiveSmallIntegerField()
    action = models.CharField(max_length=16, blank=True)
    scope = models.CharField(max_length=64, blank=True)
    repo_type = models.CharField(max_length=16, blank=True)
    repo_name = models.CharField(max_length=200, blank=True)
    head_sha = models.CharField(max_length=64, blank=True)
    previous_sha = models.CharField(
        max_length=64, blank=True, help_text="Where main pointed before this push (updatedRefs), when it says.")
    moved_to = models.CharField(max_length=200, blank=True)
    webhook_id = models.CharField(max_length=64, blank=True)
    fingerprint = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="SHA-256 of what the delivery asks for: a replay or a duplicate has the same one.")
    claim = models.CharField(
        max_length=64, null=True, blank=True, unique=True, editable=False,
        help_text="The fingerprint, while this delivery answers for it (see the invariants).")
    outcome = models.TextField(blank=True, help_text="What the hub did, in words.")
    processed_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True, help_text="From receipt to handled.")

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "done", "duplicate", "ignored", "refused", "failed"]),
                name="webhookdelivery_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.action or '?'} {self.repo_name or '?'} ({self.status})"


class EvaluationRun(models.Model):
    """One hub-run evaluation job of one revision: a baseline of the reference policies (with the semantic checks),
    or a model played through an OpenAI-compatible endpoint.

    The same state machine as ValidationRun (registry.services.runs): queued → running → finished | cancelled by
    compare-and-set, attempts fencing every write, `sent_at` set once the broker took the message, reaped when its
    heartbeat stops. At most one live run per revision, kind and subject.
    """

    class Kind(models.TextChoices):
        BASELINE = "baseline", "Baseline (reference policies)"
        MODEL = "model", "Model (OpenAI-compatible endpoint)"

    class Outcome(models.TextChoices):
        DONE = "done", "Done"
        ERROR = "error", "Error"

    State = ValidationRun.State
    Trigger = ValidationRun.Trigger
    LIVE_STATES = ValidationRun.LIVE_STATES

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="evaluation_runs")
    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="evaluation_runs")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    subject = models.CharField(max_length=200, blank=True, help_text="The model's name; empty for a baseline.")
    params = models.JSONField(default=dict, blank=True, help_text="Episodes, seeds and bounds the run was asked for.")
    trigger = models.CharField(max_length=16, choices=ValidationRun.Trigger.choices)
    requested_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluation_runs")
    requested_by_hub = models.CharField(max_length=96, blank=True)
    target_url = models.CharField(max_length=500, blank=True)

    state = models.CharField(max_length=16, choices=ValidationRun.State.choices, default=ValidationRun.State.QUEUED)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, null=True, blank=True)
    reason = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    queued_at = models.DateTimeField(auto_now_add=True)
    due_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(null=True, blank=True, help_text="The semantic checks (report-v2 check results), notes.")

    class Meta:
        ordering = ["-queued_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["revision", "kind", "subject"], condition=Q(state__in=["queued", "running"]),
                                    name="evaluationrun_one_live"),
            models.CheckConstraint(condition=Q(state__in=["queued", "running", "finished", "cancelled"]),
                                   name="evaluationrun_state_valid"),
            models.CheckConstraint(
                condition=(Q(state="finished", outcome__isnull=False, finished_at__isnull=False)
                           | (~Q(state="finished") & Q(outcome__isnull=True))),
                name="evaluationrun_outcome_iff_finished"),
        ]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="evaluationrun_state_heartbeat")]

    def __str__(self) -> str:
        return f"{self.kind} evaluation #{self.pk} of {self.revision} ({self.state})"


class Evaluation(models.Model):
    """Episodes one agent played against one revision, and what they scored, with where the numbers came from.

    The statistics are the hub's, computed from the episodes (registry.evalstats); submitted aggregates are
    checked against them, never stored instead. The hub never changes a row once written; a result goes stale (hidden, not
    deleted) when head moves to a revision whose schemas or verdict differ from `schema_digest` / `verdict`.
    """

    class Provenance(models.TextChoices):
        HUB_RUN = "hub_run", "Hub-run"
        IMPORTED = "imported", "Imported"
        SELF_REPORTED = "self_reported", "Self-reported"

    class AgentKind(models.TextChoices):
        POLICY = "policy", "Policy"
        MODEL = "model", "Model"

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="evaluations")
    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="evaluations")
    provenance = models.CharField(max_length=16, choices=Provenance.choices)
    run = models.ForeignKey(EvaluationRun, null=True, blank=True, on_delete=models.PROTECT, related_name="evaluations")
    agent = models.CharField(max_length=200)
    agent_kind = models.CharField(max_length=16, choices=AgentKind.choices)
    agent_revision = models.CharField(max_length=64, blank=True)
    harness = models.CharField(max_length=200)
    harness_version = models.CharField(max_length=64, blank=True)
    client_version = models.CharField(max_length=64, blank=True)
    episodes = models.JSONField(help_text="One object per episode: seed, reward, steps, ended, wall_s, success, …")
    episode_count = models.PositiveIntegerField()
    seeds = models.JSONField(default=list)
    mean = models.FloatField()
    std = models.FloatField(null=True, blank=True, help_text="Sample standard deviation; none for one episode.")
    stderr = models.FloatField(null=True, blank=True)
    ci_low = models.FloatField(null=True, blank=True, help_text="95% interval of the mean.")
    ci_high = models.FloatField(null=True, blank=True)
    ci_method = models.CharField(max_length=16, help_text="t (Student's t), bootstrap (under 10 episodes) or none.")
    wall_s = models.FloatField(default=0.0)
    success_rate = models.FloatField(null=True, blank=True)
    submitted_by = models.CharField(max_length=200, help_text="hf:<account>, staff:<user>, or hub for its own runs.")
    source = models.JSONField(default=dict, blank=True,
                              help_text="Where it came from: the dataset and its revision and how the environment "
                                        "was matched, the submission's config, or the hub's run.")
    notes = models.JSONField(default=list, blank=True)
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)
    schema_digest = models.CharField(max_length=64, blank=True, help_text="The revision's schemas when measured.")
    verdict = models.CharField(max_length=16, blank=True, help_text="The revision's verdict when measured.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-mean", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "idempotency_key"], name="evaluation_idempotency",
                                    condition=Q(idempotency_key__isnull=False)),
        ]
        indexes = [
            models.Index(fields=["environment", "-mean"], name="evaluation_env_mean"),
            models.Index(fields=["agent"], name="evaluation_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} on {self.revision} ({self.provenance}, {self.mean:.3f})"
