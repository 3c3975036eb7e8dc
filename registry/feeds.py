"""Atom feeds (Django's syndication framework): environments new or updated, verdicts, and one environment's
events (new revisions, verdicts, yanks, deprecations). Every text in them is data an environment published or an
owner wrote: the framework escapes it; nothing here builds markup."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.syndication.views import Feed
from django.http import Http404
from django.urls import reverse
from django.utils.feedgenerator import Atom1Feed

from registry import selectors
from registry.models import Environment, OwnerAction, Revision, ValidationRun

FEED_ITEMS = 50
# XML 1.0 holds no C0 control character but tab, newline and carriage return (nor surrogates, U+FFFE, U+FFFF);
# published text may carry any of them, so they are dropped, not left to fail the whole feed.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
MAX_TEXT = 2000


def xml_text(value: str) -> str:
    return _NOT_XML.sub("", value or "")[:MAX_TEXT]


class CleanAtom(Atom1Feed):
    """Atom whose entries' text is always XML: what cannot be in XML 1.0 is dropped, long text cut."""

    def add_item(self, title, link, description, **kwargs):
        super().add_item(xml_text(title), link, xml_text(description) if description else description, **kwargs)
VERDICT_WORDS = {"pass": "passes", "warn": "passes with warnings", "fail": "fails", "error": "could not be validated"}


def _page(owner: str, name: str, **query: str) -> str:
    path = reverse("registry:environment", kwargs={"owner": owner, "name": name})
    return path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


class EnvironmentsFeed(Feed):
    """Environments, newest change first: a new environment, a new head revision, a withdrawal or comeback."""

    feed_type = CleanAtom
    title = "OpenEnv Hub: new and updated environments"
    subtitle = "Environments as their head revision or status changes."

    def link(self):
        return reverse("registry:browse") + "?sort=updated"

    def items(self):
        return (Environment.objects.select_related("head").only(
            "owner", "name", "status", "status_reason", "updated_at", "created_at", "head__sha", "head__description",
            "head__indexed_at").order_by("-updated_at", "-id")[:FEED_ITEMS])

    def item_title(self, env):
        if env.status == Environment.Status.WITHDRAWN:
            return f"{env.repo_id} withdrawn"
        return f"{env.repo_id} at {env.head.sha[:12]}" if env.head else env.repo_id

    def item_description(self, env):
        if env.status == Environment.Status.WITHDRAWN:
            return env.status_reason
        return env.head.description if env.head else ""

    def item_link(self, env):
        return _page(env.owner, env.name)

    def item_guid(self, env):
        return f"{settings.SITE_URL}{_page(env.owner, env.name)}#{env.head.sha if env.head else ''}:{env.status}"

    item_guid_is_permalink = False

    def item_updateddate(self, env):
        return env.updated_at

    def item_pubdate(self, env):
        return env.created_at


class VerdictsFeed(Feed):
    """Finished validations, newest first: what each revision was found to be."""

    feed_type = CleanAtom
    title = "OpenEnv Hub: new verdicts"
    subtitle = "Each finished validation of an environment revision."

    def link(self):
        return reverse("registry:browse") + "?sort=validated"

    def items(self):
        return (ValidationRun.objects.filter(state=ValidationRun.State.FINISHED)
                .select_related("environment", "revision").only(
                    "outcome", "finished_at", "failing_checks", "environment__owner", "environment__name",
                    "revision__sha").order_by("-finished_at", "-id")[:FEED_ITEMS])

    def item_title(self, run):
        return f"{run.environment.repo_id} {VERDICT_WORDS.get(run.outcome, run.outcome)} at {run.revision.sha[:12]}"

    def item_description(self, run):
        return f"Failing checks: {', '.join(run.failing_checks)}." if run.failing_checks else "Every check passed."

    def item_link(self, run):
        return reverse("registry:validation-report", kwargs={"owner": run.environment.owner,
                                                             "name": run.environment.name, "run_id": run.pk})

    def item_updateddate(self, run):
        return run.finished_at

    def item_pubdate(self, run):
        return run.finished_at


@dataclass
class Event:
    title: str
    description: str
    link: str
    guid: str
    at: datetime


class EnvironmentFeed(Feed):
    """One environment's events, newest first: new revisions, verdicts, yanks and deprecations."""

    feed_type = CleanAtom

    def get_object(self, request, owner: str, name: str):
        env = selectors.environment_get(owner=owner, name=name)
        if env is None:
            raise Http404(f"No environment {owner}/{name}.")
        return env

    def title(self, env):
        return f"{env.repo_id} on OpenEnv Hub"

    def subtitle(self, env):
        return f"New revisions, verdicts, yanks and deprecations of {env.repo_id}."

    def link(self, env):
        return _page(env.owner, env.name)

    def items(self, env):
        events = []
        for rev in (Revision.objects.filter(environment=env).only("sha", "indexed_at", "description")
                    .order_by("-indexed_at", "-id")[:FEED_ITEMS]):
            events.append(Event(f"New revision {rev.sha[:12]}", rev.description,
                                _page(env.owner, env.name, revision=rev.sha), f"revision:{rev.sha}", rev.indexed_at))
        for run in (ValidationRun.objects.filter(environment=env, state=ValidationRun.State.FINISHED)
                    .select_related("revision").only("outcome", "finished_at", "failing_checks", "revision__sha")
                    .order_by("-finished_at", "-id")[:FEED_ITEMS]):
            events.append(Event(
                f"{VERDICT_WORDS.get(run.outcome, run.outcome).capitalize()} at {run.revision.sha[:12]}",
                f"Failing checks: {', '.join(run.failing_checks)}." if run.failing_checks else "Every check passed.",
                reverse("registry:validation-report", kwargs={"owner": env.owner, "name": env.name, "run_id": run.pk}),
                f"run:{run.pk}", run.finished_at))
        for action in (OwnerAction.objects.filter(environment=env, kind__in=[
                OwnerAction.Kind.YANK, OwnerAction.Kind.UNYANK, OwnerAction.Kind.DEPRECATE,
                OwnerAction.Kind.UNDEPRECATE, OwnerAction.Kind.RENAME]).select_related("revision")
                .order_by("-at", "-id")[:FEED_ITEMS]):
            what = action.get_kind_display()
            if action.revision is not None:
                what += f" {action.revision.sha[:12]}"
            detail = action.detail if isinstance(action.detail, dict) else {}
            text = " ".join(str(part) for part in (detail.get("reason", ""), f"Use {detail['successor']} instead."
                                                   if detail.get("successor") else "") if part)
            events.append(Event(what, text, _page(env.owner, env.name), f"action:{action.pk}", action.at))
        events.sort(key=lambda e: e.at, reverse=True)
        return events[:FEED_ITEMS]

    def item_title(self, event):
        return event.title

    def item_description(self, event):
        return event.description

    def item_link(self, event):
        return event.link

    def item_guid(self, event):
        return event.guid

    item_guid_is_permalink = False

    def item_updateddate(self, event):
        return event.at

    def item_pubdate(self, event):
        return event.at
